"""Time travel in a query's text: ``FROM t AT (VERSION => 3)`` and ``FROM t AT
(TIMESTAMP => '2024-01-02 03:00')`` (DuckDB's syntax, DuckLake's meaning), read as the
table's version or the latest version completed at that time (UTC unless it has a
zone). Each such reference is found in DuckDB's parse tree, its value evaluated by
DuckDB, and its text (name, alias, ``AT (...)``) rewritten to read a view of that
snapshot instead."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

import duckdb

from lamina.engines.sql_bounds import one_statement
from lamina.errors import SqlError

#: whether a query may hold an AT clause at all (most do not: no parse)
MAY_TRAVEL = re.compile(rb"\bAT\s*\(", re.IGNORECASE)
_WORD = re.compile(rb"[A-Za-z0-9_$\x80-\xff]+")
_SPACE = re.compile(rb"\s*")


@dataclass(frozen=True)
class AtRef:
    """One reference ``name [[AS] alias] AT (UNIT => expr)`` in a query: the table's
    name as written, where its name is (``[start, end)``, UTF-8 bytes), where its AT
    clause is (``[at_start, at_end)``), whether it has an alias, the unit (VERSION or
    TIMESTAMP) and the expression's text."""

    table: str
    start: int
    end: int
    at_start: int
    at_end: int
    aliased: bool
    unit: str
    expr: str


def at_refs(con: duckdb.DuckDBPyConnection, query: str) -> list[AtRef]:
    """The references of ``query`` with an AT clause (none if it has none, or is not one
    statement DuckDB can serialize). Raises SqlError for an AT clause whose text cannot be
    read back (a comment inside it, say) or that names a schema."""
    text = query.encode()
    if MAY_TRAVEL.search(text) is None:
        return []
    tree = one_statement(con, query)
    if tree is None:
        return []
    out: list[AtRef] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and node.get("at_clause"):
                out.append(_ref(text, node))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return sorted(out, key=lambda r: r.start)


def _ref(text: bytes, node: dict[str, Any]) -> AtRef:
    name = str(node.get("table_name", ""))
    at = node["at_clause"]
    unit = str(at.get("unit", "")).upper()
    where = node.get("query_location")
    if node.get("schema_name") or node.get("catalog_name") or not isinstance(where, int):
        raise SqlError(f"{name} AT (...): time travel reads lamina tables, named without a schema")
    bad = SqlError(
        f"cannot read the AT clause of {name}: write it as {name} [AS alias] AT (VERSION => 3) "
        f"or AT (TIMESTAMP => '2024-01-02 03:00:00')"
    )
    end = _skip_name(text, where)
    if end is None:
        raise bad
    pos = end
    if node.get("alias"):
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        word = _WORD.match(text, pos)
        if word is not None and word.group().upper() == b"AS":
            pos = _SPACE.match(text, word.end()).end()  # type: ignore[union-attr]
        after = _skip_name(text, pos)
        if after is None:
            raise bad
        pos = after
    at_start = pos
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos : pos + 2].upper() != b"AT":
        raise bad
    pos = _SPACE.match(text, pos + 2).end()  # type: ignore[union-attr]
    if text[pos : pos + 1] != b"(":
        raise bad
    close, arrow = _closing(text, pos)
    if close is None or arrow is None:
        raise bad
    expr = text[arrow + 2 : close].decode().strip()
    return AtRef(name, where, end, at_start, close + 1, bool(node.get("alias")), unit, expr)


def _skip_name(text: bytes, pos: int) -> int | None:
    """The end of the identifier at ``pos`` (plain, or double-quoted)."""
    if text[pos : pos + 1] == b'"':
        end = pos + 1
        while True:
            end = text.find(b'"', end)
            if end < 0:
                return None
            if text[end + 1 : end + 2] != b'"':
                return end + 1
            end += 2
    word = _WORD.match(text, pos)
    return None if word is None else word.end()


def _closing(text: bytes, pos: int) -> tuple[int | None, int | None]:
    """The closing parenthesis of the one at ``pos``, and the ``=>`` at its depth."""
    depth, arrow, i, quote = 0, None, pos, b""
    while i < len(text):
        c = text[i : i + 1]
        if quote:
            if c == quote:
                if text[i + 1 : i + 2] == quote:
                    i += 1
                else:
                    quote = b""
        elif c in (b"'", b'"'):
            quote = c
        elif c == b"(":
            depth += 1
        elif c == b")":
            depth -= 1
            if depth == 0:
                return i, arrow
        elif depth == 1 and arrow is None and text[i : i + 2] == b"=>":
            arrow = i
        i += 1
    return None, None


def travel_value(cur: duckdb.DuckDBPyConnection, ref: AtRef) -> int | dt.datetime:
    """The version (VERSION) or instant (TIMESTAMP, zone-aware) the AT clause names,
    evaluated by DuckDB (constants, casts, ``now() - INTERVAL 1 HOUR``). Raises SqlError."""
    what = f"{ref.table} AT ({ref.unit} => {ref.expr})"
    if ref.unit not in ("VERSION", "TIMESTAMP"):
        raise SqlError(f"{what}: lamina reads AT (VERSION => n) and AT (TIMESTAMP => t)")
    cast = "TIMESTAMPTZ" if ref.unit == "TIMESTAMP" else "HUGEINT"
    try:
        got = cur.execute(f"SELECT CAST(({ref.expr}) AS {cast}), ({ref.expr})").fetchall()
    except duckdb.Error as exc:
        raise SqlError(f"{what}: {exc}") from None
    value, raw = got[0] if len(got) == 1 else (None, None)
    if value is None:
        raise SqlError(f"{what}: the value is NULL")
    if ref.unit == "VERSION":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise SqlError(f"{what}: a version is a whole number (see `lamina history`)")
        return int(raw)
    assert isinstance(value, dt.datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def rewrite(query: str, refs: list[tuple[AtRef, str]]) -> str:
    """``query`` reading the view named with each reference in place of the table and
    its AT clause (an unaliased reference keeps the table's name as its alias)."""
    text = query.encode()
    for ref, view in sorted(refs, key=lambda p: p[0].start, reverse=True):
        alias = b"" if ref.aliased else b" AS " + _quoted(ref.table)
        text = (
            text[: ref.start]
            + _quoted(view)
            + alias
            + text[ref.end : ref.at_start]
            + text[ref.at_end :]
        )
    return text.decode()


def _quoted(name: str) -> bytes:
    return ('"' + name.replace('"', '""') + '"').encode()
