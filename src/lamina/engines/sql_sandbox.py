"""Read-only SQL for untrusted text (the web console's query box): one SELECT over
lamina's tables, on a DuckDB database of its own that may open only the files of
those tables' views, with its configuration locked and a time limit.

Three walls, each enough for what it names: the statement kinds (DuckDB's parser:
only one SELECT, so no COPY, ATTACH, INSTALL, LOAD, SET, PRAGMA, CALL); the table
functions the query names (only :data:`TABLE_FUNCTIONS`: no ``read_text``,
``read_csv``, ``glob``…); and DuckDB's own sandbox (``enable_external_access =
false`` with the warehouse as the one allowed directory, then ``lock_configuration``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb

from lamina.core.scan import ScanPlan
from lamina.engines.duckdb_views import empty_dir, register_view
from lamina.errors import SqlError

T = TypeVar("T")

#: Table functions a read-only query may call: they read no files.
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})


def refusal(parser: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """Why ``query`` is not one read-only SELECT (None: it is). ``parser``: a DuckDB
    connection holding no tables."""
    try:
        kinds = [s.type for s in duckdb.extract_statements(query)]
    except duckdb.Error as exc:
        return f"cannot parse the query: {exc}"
    if len(kinds) != 1:
        return f"one statement only ({len(kinds)} given)"
    if kinds[0] != duckdb.StatementType.SELECT:
        return (
            f"only SELECT reads lamina's tables here; {kinds[0].name} statements are refused "
            "(no COPY, ATTACH, INSTALL, LOAD, SET, PRAGMA or CALL)"
        )
    row = parser.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    tree = json.loads(row[0]) if row else {}
    if tree.get("error"):
        return f"cannot parse the query: {tree.get('error_message', 'unknown error')}"
    called: set[str] = set()
    paths: set[str] = set()
    _references(tree, called, paths)
    refused = sorted(called - TABLE_FUNCTIONS)
    if refused:
        return (
            f"table function {refused[0]}() is refused: the query box reads only lamina's "
            "tables (by name)"
        )
    if paths:
        return (
            f"file {sorted(paths)[0]!r} is refused: the query box reads only lamina's "
            "tables (by name)"
        )
    return None


def _references(node: Any, called: set[str], paths: set[str]) -> None:
    """The table functions a parse tree calls, and the names in its FROM that are file
    paths (DuckDB reads ``FROM 'x.csv'`` as the file)."""
    if isinstance(node, dict):
        if node.get("type") == "TABLE_FUNCTION":
            fn = node.get("function") or {}
            called.add(str(fn.get("function_name", "?")).lower())
        elif node.get("type") == "BASE_TABLE":
            name = str(node.get("table_name") or "")
            if (
                any(c in name for c in "/\\:.")
                or node.get("catalog_name")
                or (node.get("schema_name") not in (None, "", "main"))
            ):
                paths.add(name)
        for value in node.values():
            _references(value, called, paths)
    elif isinstance(node, list):
        for value in node:
            _references(value, called, paths)


@contextmanager
def sandbox(
    timeout_s: float,
    allowed: list[str],
    prepare: Callable[[duckdb.DuckDBPyConnection], None] = lambda con: None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A new DuckDB database (UTC, one thread) that ``prepare`` sets up (views), then
    can open nothing outside the ``allowed`` directories nor change its settings, and
    is interrupted ``timeout_s`` after it is handed out. Raises SqlError when what
    runs in it goes past the time limit."""
    con = duckdb.connect(config={"threads": 1})
    timer = threading.Timer(timeout_s, con.interrupt)
    try:
        con.execute("SET TimeZone='UTC'")
        prepare(con)
        dirs = [d.rstrip("/") + "/" for d in allowed] + [empty_dir()]
        con.execute("SET allowed_directories = ?", [dirs])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        timer.start()
        try:
            yield con
        except duckdb.InterruptException:
            raise SqlError(
                f"the query ran past the time limit of {timeout_s:g} s and was stopped"
            ) from None
    finally:
        timer.cancel()
        con.close()


def run_sandboxed(
    query: str,
    plans: Mapping[str, ScanPlan],
    fetch: Callable[[duckdb.DuckDBPyRelation], T],
    timeout_s: float,
    allowed: list[str],
    scheme: str = "",
) -> T:
    """``fetch`` of ``query`` (checked by :func:`refusal`) in a :func:`sandbox`
    holding a view per plan. Raises SqlError (a failure, the time limit); DuckDB's
    IOException when a file vanished (plan again)."""

    def views(con: duckdb.DuckDBPyConnection) -> None:
        for name, plan in plans.items():
            register_view(con, name, plan, scheme)

    with sandbox(timeout_s, allowed, views) as con:
        try:
            return fetch(con.sql(query))
        except (duckdb.IOException, duckdb.InterruptException):
            raise
        except duckdb.Error as exc:
            raise SqlError(f"query failed: {' '.join(str(exc).split())}") from None
