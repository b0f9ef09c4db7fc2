"""The times a DuckDB query can read from a table: a superset derived from its
top-level ``AND`` conditions on the time column (literals and casts evaluated in UTC),
so the engine opens only the segments of those times."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

from lamina.core.interval import MAX_US, MIN_US, Interval

if TYPE_CHECKING:
    import pyarrow as pa

_LOWER = {"COMPARE_GREATERTHANOREQUALTO", "COMPARE_GREATERTHAN"}
_FLIP = {
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_EQUAL": "COMPARE_EQUAL",
}


def time_bound(
    con: duckdb.DuckDBPyConnection, query: str, table: str, column: str, schema: pa.Schema
) -> Interval | None:
    """A superset of the times ``query`` can read from ``table``, or None if unsure."""
    tree = one_statement(con, query)
    if tree is None:
        return None
    node = tree["statements"][0].get("node", {})
    src = node.get("from_table") or {}
    if node.get("type") != "SELECT_NODE" or src.get("type") != "BASE_TABLE":
        return None
    if src.get("table_name", "").lower() != table.lower() or _count_refs(tree, table) != 1:
        return None
    if node.get("cte_map", {}).get("map"):
        return None
    names = {table.lower(), (src.get("alias") or "").lower()} - {""}
    conjuncts = _conjuncts(node.get("where_clause"))
    encoded = query.encode()
    lo, hi = MIN_US, MAX_US
    cast = _cast_type(schema.field(column).type)
    for c in conjuncts:
        for bound_lo, bound_hi in _bounds(con, c, column, names, encoded, cast):
            lo, hi = max(lo, bound_lo), min(hi, bound_hi)
    if (lo, hi) == (MIN_US, MAX_US):
        return None
    return Interval.of(lo, hi) if lo < hi else Interval.of(lo, lo + 1)


def one_statement(con: duckdb.DuckDBPyConnection, query: str) -> dict[str, Any] | None:
    """DuckDB's parse tree of ``query`` (``json_serialize_sql``), or None unless it is
    exactly one statement DuckDB can serialize."""
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()
        tree = json.loads(raw[0][0]) if raw else {}
    except (duckdb.Error, ValueError):
        return None
    if not isinstance(tree, dict) or tree.get("error") or len(tree.get("statements") or []) != 1:
        return None
    return tree


def _cast_type(t: pa.DataType) -> str:
    """The type DuckDB reads the time column as (a string literal compared with it is
    cast to this type)."""
    import pyarrow as pa  # loads numpy, pyarrow

    if pa.types.is_date(t):
        return "DATE"
    ns = "_NS" if t.unit == "ns" else ""
    return f"TIMESTAMPTZ{ns}" if t.tz is not None else f"TIMESTAMP{ns}"


def _count_refs(tree: Any, table: str) -> int:
    if isinstance(tree, dict):
        own = int(
            tree.get("type") == "BASE_TABLE"
            and str(tree.get("table_name", "")).lower() == table.lower()
        )
        return own + sum(_count_refs(v, table) for v in tree.values())
    if isinstance(tree, list):
        return sum(_count_refs(v, table) for v in tree)
    return 0


def _conjuncts(expr: Any) -> list[dict[str, Any]]:
    if not isinstance(expr, dict):
        return []
    if expr.get("type") == "CONJUNCTION_AND":
        return [c for child in expr.get("children", []) for c in _conjuncts(child)]
    return [expr]


def _is_column(e: Any, column: str, names: set[str]) -> bool:
    if not isinstance(e, dict) or e.get("class") != "COLUMN_REF":
        return False
    parts = [p.lower() for p in e.get("column_names", [])]
    return parts == [column.lower()] or (
        len(parts) == 2 and parts[0] in names and parts[1] == column.lower()
    )


def _has_column(e: Any) -> bool:
    if isinstance(e, dict):
        if e.get("class") in ("COLUMN_REF", "SUBQUERY", "FUNCTION", "WINDOW"):
            return True
        return any(_has_column(v) for v in e.values())
    if isinstance(e, list):
        return any(_has_column(v) for v in e)
    return False


#: DuckDB's functions behind ``INTERVAL n UNIT`` literals
_INTERVALS = {
    f"to_{unit}"
    for unit in (
        "years", "months", "weeks", "days", "hours", "minutes", "seconds", "milliseconds",
        "microseconds",
    )
}  # fmt: skip


def _refers(e: Any) -> bool:
    """Whether ``e`` reads anything but constants (a column, a subquery, a window)."""
    if isinstance(e, dict):
        if e.get("class") in ("COLUMN_REF", "SUBQUERY", "WINDOW"):
            return True
        return any(_refers(v) for v in e.values())
    if isinstance(e, list):
        return any(_refers(v) for v in e)
    return False


def _source(e: Any, query: bytes) -> str | None:
    """The text of a constant expression: a literal or a cast of one, an ``INTERVAL``,
    or a sum or difference of those (``DATE '1994-01-01' + INTERVAL 1 YEAR``); None
    for anything else (``now()``, a column)."""
    if not isinstance(e, dict):
        return None
    cls, name = e.get("class"), e.get("function_name")
    if cls == "FUNCTION" and e.get("is_operator") and name in ("+", "-"):
        args = [a.get("expression") for a in e.get("arguments") or []]
        parts = [_source(a, query) for a in args]
        if len(parts) != 2 or None in parts:
            return None
        return f"({parts[0]}) {name} ({parts[1]})"
    plain = cls in ("CONSTANT", "CAST") and not _has_column(e)
    if not plain and not (cls == "FUNCTION" and name in _INTERVALS and not _refers(e)):
        return None
    at, length = e.get("query_location"), e.get("query_location_length")
    if (
        not isinstance(at, int)
        or not isinstance(length, int)
        or at + length > len(query)
        or not length
    ):
        return None
    return query[at : at + length].decode()


def _constant_us(
    con: duckdb.DuckDBPyConnection, e: Any, query: bytes, cast: str
) -> list[tuple[int, int, int]]:
    """The values a constant expression may stand for in a comparison with the column,
    each as (floor, ceiling, step to the next value) in µs: cast to the column's type
    (as DuckDB casts a string literal; a DATE's next value is a day later), and its own
    value where it is a time of its own (DuckDB widens a DATE column to a TIMESTAMP
    literal's type). Empty if it is not a constant that can be read so."""
    text = _source(e, query)
    if text is None:
        return []
    try:
        rows = con.execute(
            f"SELECT epoch_ns(CAST(CAST(({text}) AS {cast}) AS TIMESTAMP_NS)), "
            f"epoch_ns(TRY_CAST(({text}) AS TIMESTAMP_NS))"
        ).fetchall()
    except duckdb.Error:
        return []
    if not rows or rows[0][0] is None:
        return []
    as_column, own = rows[0]
    out = [(*_us(int(as_column)), 86_400_000_000 if cast == "DATE" else 1)]
    if own is not None:
        out.append((*_us(int(own)), 1))
    return out


def _us(ns: int) -> tuple[int, int]:
    """Floor and ceiling in µs."""
    return ns // 1000, -(-ns // 1000)


def _bounds(
    con: duckdb.DuckDBPyConnection,
    c: dict[str, Any],
    column: str,
    names: set[str],
    query: bytes,
    cast: str,
) -> list[tuple[int, int]]:
    """The interval one condition allows (exact where it can be, else a superset)."""
    kind = c.get("type")
    if kind == "COMPARE_BETWEEN" and _is_column(c.get("input"), column, names):
        lo = _constant_us(con, c.get("lower"), query, cast)
        hi = _constant_us(con, c.get("upper"), query, cast)
        if not lo or not hi:
            return []
        return [(min(f for f, _, _ in lo), max(f + step for f, _, step in hi))]
    if kind not in _FLIP:
        return []
    left, right = c.get("left"), c.get("right")
    if not _is_column(left, column, names):
        left, right, kind = right, left, _FLIP[kind]
        if not _is_column(left, column, names):
            return []
    values = _constant_us(con, right, query, cast)
    if not values:
        return []
    floor = min(f for f, _, _ in values)  # the loosest reading of each bound
    if kind in _LOWER:
        return [(floor, MAX_US)]
    if kind == "COMPARE_LESSTHAN":
        return [(MIN_US, max(ceil for _, ceil, _ in values))]
    upper = max(f + step for f, _, step in values)
    if kind == "COMPARE_LESSTHANOREQUALTO":
        return [(MIN_US, upper)]
    return [(floor, upper)]
