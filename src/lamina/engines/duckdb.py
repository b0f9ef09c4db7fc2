"""DuckDB SQL over table snapshots.

Each table a query names is a view over exactly its snapshot's visible Parquet files
(DuckDB's native reader). :class:`SqlEngine` keeps one long-lived DuckDB connection
and one view per table in it, replaced only when the table's snapshot changed; each
query runs on its own cursor. When the query is a plain SELECT over one table with
top-level ``AND`` conditions bounding the time column, the bound prunes the cached
plan in memory and a TEMP view (private to the query's cursor) shadows the shared
one, so a one-day query opens only that day's segments. The query's own ``WHERE``
drops the rows outside the bound, so the pruned plan reads whole every file it reads
whole anyway (no cut, no union of scans: :func:`_uncut`), and is the shared view
itself when no file is pruned away. Where it can, the pruned relation is written into
the query's ``FROM`` in place of the table's name (:func:`_inline`), which spares
DuckDB binding a TEMP view on every query (some 0.5 ms: its Parquet scan is bound
once more).

Results come as Arrow tables (:meth:`SqlEngine.sql`), or through a function of DuckDB's
result relation (:meth:`SqlEngine.run`): the command line reads plain rows without
loading pyarrow.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from lamina.core.interval import Interval
from lamina.core.scan import ScanPlan, ScanTask, prune_plan
from lamina.engines.duckdb_views import quote, register_view, view_sql
from lamina.engines.sql_bounds import one_statement, time_bound
from lamina.engines.sql_sandbox import refusal, run_sandboxed, sandbox
from lamina.engines.sql_travel import AtRef, at_refs, rewrite, travel_value
from lamina.errors import SqlError
from lamina.failpoints import failpoint

if TYPE_CHECKING:
    import pyarrow as pa
    from fsspec import AbstractFileSystem

T = TypeVar("T")
Versions = Callable[[Sequence[str]], Mapping[str, Hashable]]
#: the scan plan of a table's snapshot: (catalog name, as_of; None: the latest)
Planner = Callable[[str, Any], ScanPlan]
_BOUNDS_KEPT = 1024
#: Reads a query's result: DuckDB's relation, or None for a statement without one.
Fetch = Callable[[duckdb.DuckDBPyRelation | None], T]


class SqlEngine:
    """DuckDB SQL over the latest snapshots of a catalog's tables; safe from threads.

    ``versions(names)``: ``{catalog name: version}`` of the existing tables among
    ``names`` (matched regardless of case); a table's view is rebuilt when its version
    changes. ``plan(name, as_of)``: the scan plan of a table's snapshot (None: the
    latest). A query reads a past snapshot of a table through ``as_of`` or an AT clause
    (:mod:`lamina.engines.sql_travel`): a view of that snapshot, private to the query.
    ``filesystem``: an fsspec filesystem the plans' file paths are read through (a
    remote warehouse's, under a protocol of its own), registered on every DuckDB
    connection; None: local paths DuckDB opens itself.
    """

    def __init__(
        self,
        versions: Versions,
        plan: Planner,
        attempts: int = 5,
        filesystem: AbstractFileSystem | None = None,
    ) -> None:
        self._versions = versions
        self._planner = plan
        self._attempts = attempts
        self._filesystem = filesystem
        #: what the plans' paths are prefixed with in SQL ("PROTOCOL://", or nothing)
        self._scheme = "" if filesystem is None else f"{_protocol(filesystem)}://"
        self._lock = threading.Lock()  # the connection, the cache, DDL on shared views
        self._con: duckdb.DuckDBPyConnection | None = None
        # parsing on a database without views (a connection holding views resolves them)
        self._parser: duckdb.DuckDBPyConnection | None = None
        self._cache: dict[str, tuple[Hashable, ScanPlan]] = {}  # name -> version, plan
        self._hidden: dict[str, list[str]] = {}  # name -> its view's deletion vector tables
        # time bounds by (query, table, column, type): a pure function of them (bounds
        # come only from literals and casts, evaluated in UTC), so dashboards'
        # repeated queries skip parsing; oldest first, at most _BOUNDS_KEPT
        self._bounds: dict[tuple[str, str, str, str], Interval | None] = {}
        # table names and statement kinds by query: a pure function of its text (parsed
        # on a database without tables), so repeated queries skip DuckDB's parser and
        # binder, whose cost grows with the tables a query joins; at most _BOUNDS_KEPT
        self._parsed: dict[str, tuple[frozenset[str], frozenset[Any]]] = {}
        # where the query's FROM names a table, by (query, table): a pure function of
        # the text, so the pruned relation replaces it without parsing; at most
        # _BOUNDS_KEPT
        self._froms: dict[tuple[str, str], _From | None] = {}
        # the references with an AT clause, by query: a pure function of its text
        self._ats: dict[str, list[AtRef]] = {}

    def sql(self, query: str, as_of: Any = None) -> pa.Table:
        """:meth:`run` with the result as an Arrow table."""
        return self.run(query, to_arrow, as_of)

    def run(self, query: str, fetch: Fetch[T], as_of: Any = None) -> T:
        """Run ``query`` over the latest snapshots; ``fetch`` reads its result (while
        the query's cursor is open). If a push or retention removed a file under the
        query, plan again on the newer snapshots and rerun (each run reads one
        consistent snapshot per table). Statements other than SELECT run on a
        fresh connection of their own (nothing they create outlives the call).
        ``as_of``: the snapshots to read instead of the latest — a mapping of table
        names (any case) to what ``t.to_arrow(as_of=...)`` takes, or one such value
        for every table; an AT clause in the query wins over it.

        Raises SqlError when the query cannot be parsed or fails (or ``as_of`` names a
        table it does not read), what a table's ``as_of`` raises, and
        CatalogUnavailableError when the catalog cannot be read.
        """
        for attempt in range(self._attempts):
            try:
                return self._run_once(query, fetch, attempt > 0, as_of)
            except duckdb.Error as exc:
                if not _vanished(exc):
                    raise
                if attempt == self._attempts - 1:
                    raise SqlError(f"query failed: {exc}") from None
        raise AssertionError("unreachable")

    def read_only(self, query: str, fetch: Fetch[T], timeout_s: float, allowed: list[str]) -> T:
        """:meth:`run` for untrusted text: one SELECT over the latest snapshots (or
        those its AT clauses name, their values evaluated in a sandbox too), in a
        sandboxed database of its own (:mod:`lamina.engines.sql_sandbox`) that opens no
        file outside the ``allowed`` directories, stopped after ``timeout_s``. Raises
        SqlError: refused, failed, or past the time limit; what ``as_of`` raises."""
        parser = duckdb.connect()
        try:
            why = refusal(parser, query)
            named = frozenset() if why else frozenset(_table_names(parser, query))
        except duckdb.Error as exc:
            raise SqlError(f"cannot parse the query: {exc}") from None
        finally:
            parser.close()
        if why:
            raise SqlError(why)
        with sandbox(timeout_s, []) as evaluator:  # an AT clause's value is untrusted too
            query, past = self._travel(evaluator, query)
        for attempt in range(self._attempts):
            plans, _ = self._plans(named, stale=attempt > 0)
            try:
                return run_sandboxed(
                    query, {**plans, **past}, fetch, timeout_s, allowed, self._scheme
                )
            except duckdb.IOException as exc:
                if attempt == self._attempts - 1:
                    raise SqlError(f"query failed: {exc}") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the shared connection (a later query opens a new one)."""
        with self._lock:
            cons = [c for c in (self._con, self._parser) if c is not None]
            self._con = self._parser = None
            self._cache.clear()
        for con in cons:
            con.close()

    # -- one attempt ------------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """A new DuckDB database, reading the plans' files through the filesystem."""
        con = duckdb.connect()
        if self._filesystem is not None:
            con.register_filesystem(self._filesystem)
        return con

    def _parse(
        self, query: str
    ) -> tuple[duckdb.DuckDBPyConnection, frozenset[str], frozenset[Any]]:
        """A new cursor on the shared connection, and the query's table names and
        statement kinds (remembered by query text). Parsing needs a database without
        views (one holding views resolves them): the shared one while it holds none
        (views are only made under the lock), else the parser's, opened then (a DuckDB
        database takes some 20 ms to open: a one-query process opens one)."""
        parser: duckdb.DuckDBPyConnection | None = None
        with self._lock:
            if self._con is None:
                con = self._connect()
                con.execute("SET GLOBAL TimeZone='UTC'")
                self._con = con
            cur = self._con.cursor()
            known = self._parsed.get(query)
            if known is not None:
                return cur, *known
            if not self._cache:  # no views yet: parsed under the lock (none is made)
                parsed = _parsed(cur, self._con.cursor(), query)
            else:
                if self._parser is None:
                    self._parser = duckdb.connect()
                parser = self._parser.cursor()
        if parser is not None:
            parsed = _parsed(cur, parser, query)
        failpoint("sql.parse", query=query)
        with self._lock:
            self._parsed[query] = parsed
            if len(self._parsed) > _BOUNDS_KEPT:
                del self._parsed[next(iter(self._parsed))]
        return cur, *parsed

    def _run_once(self, query: str, fetch: Fetch[T], stale: bool, as_of: Any) -> T:
        cur, named, kinds = self._parse(query)
        try:
            query, past = self._travel(cur, query)
            if kinds == {duckdb.StatementType.SELECT}:
                return self._select(cur, query, fetch, named, stale, as_of, past)
        finally:
            cur.close()
        con = self._connect()  # DDL, DML, SET, ...: a throwaway connection
        try:
            con.execute("SET TimeZone='UTC'")
            plans, _ = self._plans(named, stale, as_of)
            for name, plan in [*plans.items(), *past.items()]:
                register_view(con, name, self._narrow(con, query, name, plan), self._scheme)
            return _execute(con, query, fetch)
        finally:
            con.close()

    def _travel(
        self, cur: duckdb.DuckDBPyConnection, query: str
    ) -> tuple[str, dict[str, ScanPlan]]:
        """``query`` with each reference that has an AT clause reading a view of its own
        (named here), and the plans of those views. Raises SqlError (a table that does
        not exist, a value that is no version or time), what ``as_of`` raises."""
        with self._lock:
            refs = self._ats.get(query)
        if refs is None:
            refs = at_refs(cur, query)
            with self._lock:
                self._ats[query] = refs
                if len(self._ats) > _BOUNDS_KEPT:
                    del self._ats[next(iter(self._ats))]
        if not refs:
            return query, {}
        names = {n.lower(): n for n in self._versions(sorted({r.table for r in refs}))}
        past: dict[str, ScanPlan] = {}
        pairs: list[tuple[AtRef, str]] = []
        for ref in refs:
            name = names.get(ref.table.lower())
            if name is None:
                raise SqlError(f"{ref.table} AT (...): there is no table named {ref.table!r}")
            plan = self._planner(name, travel_value(cur, ref))
            view = f"__lamina_{name}_v{plan.seq}"
            past[view] = plan
            pairs.append((ref, view))
        return rewrite(query, pairs), past

    def _select(
        self,
        cur: duckdb.DuckDBPyConnection,
        query: str,
        fetch: Fetch[T],
        named: frozenset[str],
        stale: bool,
        as_of: Any = None,
        past: Mapping[str, ScanPlan] | None = None,
    ) -> T:
        made: list[str] = []  # deletion vector tables of this query's own views
        try:
            narrowed: list[tuple[str, str]] = []  # (name, SQL of its pruned relation)
            plans, travelled = self._plans(named, stale, as_of)
            own = travelled | set(past or {})  # read through the query's own views
            for name, plan in [*plans.items(), *(past or {}).items()]:
                pruned = self._narrow(cur, query, name, plan)
                if pruned is not plan or name in own:  # else the shared view answers
                    narrowed.append((name, view_sql(cur, name, pruned, made, self._scheme)))
            if len(narrowed) == 1:  # a time bound needs one table in FROM: at most one
                rel = self._inlined(cur, query, *narrowed[0])
                if rel is not None:
                    return _fetch(rel, fetch)
            for name, sql in narrowed:
                cur.execute(f"CREATE TEMP VIEW {quote(name)} AS {sql}")
            return _execute(cur, query, fetch)
        finally:
            for hidden in made:
                cur.execute(f"DROP TABLE IF EXISTS {hidden}")

    def _inlined(
        self, cur: duckdb.DuckDBPyConnection, query: str, name: str, sql: str
    ) -> duckdb.DuckDBPyRelation | None:
        """``query`` bound with ``sql`` in place of the table ``name`` in its FROM;
        None where that cannot be written, or the text fails to bind (the TEMP view
        then answers, and words any error against the user's own text)."""
        key = (query, name)
        with self._lock:
            known = key in self._froms
            where = self._froms.get(key)
        if not known:
            where = _from_ref(cur, query, name)
            with self._lock:
                self._froms[key] = where
                if len(self._froms) > _BOUNDS_KEPT:
                    del self._froms[next(iter(self._froms))]
        if where is None:
            return None
        try:
            return cur.sql(_inline(query, where, name, sql))
        except (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException):
            return None
        except duckdb.Error as exc:
            if _vanished(exc):
                raise  # planned again
            return None

    def _plans(
        self, named: frozenset[str], stale: bool, as_of: Any = None
    ) -> tuple[dict[str, ScanPlan], set[str]]:
        """Plans of the catalog tables among ``named``, by catalog name: the latest
        (their shared views are current), or the snapshot ``as_of`` names; and the names
        planned at ``as_of``. ``stale``: plan again whatever the versions say. Raises
        SqlError (``as_of`` names a table the query does not read)."""
        versions = self._versions(sorted(named)) if named else {}
        known = {n.lower(): n for n in versions}  # as many names as DuckDB tells apart
        for ref in named:
            if ref.lower() not in known:
                self._forget(ref)
        travel = _as_of_by_name(as_of, known)
        plans = {
            n: self._planner(n, travel[n]) if n in travel else self._current(n, versions[n], stale)
            for n in sorted(set(known.values()))
        }
        return plans, set(travel)

    def _current(self, name: str, version: Hashable, stale: bool) -> ScanPlan:
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and hit[0] == version and not stale:
            return hit[1]
        plan = self._planner(name, None)  # at least as new as ``version``
        with self._lock:
            hit = self._cache.get(name)
            same = hit is not None and (hit[1].table.id, hit[1].seq) == (plan.table.id, plan.seq)
            if hit is not None and hit[1].table.id == plan.table.id and hit[1].seq > plan.seq:
                return hit[1]  # another thread installed a newer snapshot meanwhile
            if self._con is None:  # closed meanwhile: plan only
                return plan
            if stale or not same:
                made: list[str] = []
                sql = view_sql(self._con, name, plan, made, self._scheme)
                self._con.execute(f"CREATE OR REPLACE VIEW {quote(name)} AS {sql}")
                for hidden in self._hidden.pop(name, []):  # the old view's: unused now
                    self._con.execute(f"DROP TABLE IF EXISTS {hidden}")
                self._hidden[name] = made
            self._cache[name] = (version, plan)
        return plan

    def _forget(self, ref: str) -> None:
        """A dropped table's shared view must not answer for it."""
        with self._lock:
            for name in [n for n in self._cache if n.lower() == ref.lower()]:
                del self._cache[name]
                if self._con is not None:
                    self._con.execute(f"DROP VIEW IF EXISTS {quote(name)}")

    def _narrow(
        self, con: duckdb.DuckDBPyConnection, query: str, name: str, plan: ScanPlan
    ) -> ScanPlan:
        """``plan`` pruned to the times ``query`` can read (``plan`` itself if none)."""
        column = plan.table.time_column
        if column is None or not _mentions(query, column):  # cannot be bounded
            return plan
        schema = plan.table.schema
        key = (query, name, column, str(schema.field(column).type))
        with self._lock:
            known = key in self._bounds
            bound = self._bounds.get(key)
        if not known:
            failpoint("sql.time_bound.parse", query=query, column=column)
            bound = time_bound(con, query, name, column, schema)
            with self._lock:
                self._bounds[key] = bound
                if len(self._bounds) > _BOUNDS_KEPT:
                    del self._bounds[next(iter(self._bounds))]
        return plan if bound is None else _uncut(plan, prune_plan(plan, bound), bound)


def _as_of_by_name(as_of: Any, known: Mapping[str, str]) -> dict[str, Any]:
    """``as_of`` per catalog name of the tables a query reads (``known``: by lower-case
    name): a mapping's entries, or one value for all. Raises SqlError (a key that is
    not a string, or names a table the query does not read)."""
    if as_of is None:
        return {}
    if not isinstance(as_of, Mapping):
        return dict.fromkeys(known.values(), as_of)
    out: dict[str, Any] = {}
    for key, value in as_of.items():
        name = known.get(key.lower()) if isinstance(key, str) else None
        if name is None:
            raise SqlError(
                f"as_of names {key!r}, which the query does not read (it reads "
                f"{sorted(known.values())}); pass as_of={{'table': version or time}}"
            )
        if value is not None:
            out[name] = value
    return out


def _uncut(plan: ScanPlan, pruned: ScanPlan, bound: Interval) -> ScanPlan:
    """``pruned`` (``plan`` narrowed to ``bound``, a superset of the times a query
    reads: its WHERE drops every row outside) without the cuts that WHERE makes anyway:
    a file whose rows inside ``bound`` its cut keeps all is read whole, one with no row
    inside ``bound`` not at all. ``plan`` itself (the shared view: no TEMP view to
    bind) when no file is pruned away."""
    if len(pruned) == len(plan):
        return plan
    if pruned.all_whole:
        return pruned
    tasks: list[ScanTask] = []
    whole: set[str] = set()
    for task in pruned.tasks:
        seg, keep = task.segment, task.keep
        if keep is not None and seg.min_time is not None and seg.max_time is not None:
            lo, hi = max(seg.min_time, bound.start), min(seg.max_time + 1, bound.end)
            if lo >= hi:
                continue  # no row of the file inside the bound
            if keep.start <= lo and hi <= keep.end:
                if seg.location in whole:
                    continue  # read whole already
                whole.add(str(seg.location))
                task = ScanTask(seg, None, task.span)
        tasks.append(task)
    if len(tasks) == len(plan):
        return plan
    out = ScanPlan(pruned.table, pruned.seq, pruned.commit_id, tasks)
    out.deletes = pruned.deletes
    return out


class _From:
    """Where a query's FROM names a table: the name's bytes ``[start, end)`` in the
    query's UTF-8 text, and whether the reference has an alias of its own."""

    __slots__ = ("start", "end", "aliased")

    def __init__(self, start: int, end: int, aliased: bool) -> None:
        self.start, self.end, self.aliased = start, end, aliased


def _from_ref(con: duckdb.DuckDBPyConnection, query: str, name: str) -> _From | None:
    """Where the FROM of ``query`` (one SELECT over one table) names the table ``name``
    unqualified, plainly or quoted, without time travel; None if not so."""
    tree = one_statement(con, query)
    if tree is None:
        return None
    ref = tree["statements"][0].get("node", {}).get("from_table") or {}
    if (
        ref.get("type") != "BASE_TABLE"
        or str(ref.get("table_name", "")).lower() != name.lower()
        or ref.get("schema_name")
        or ref.get("catalog_name")
        or ref.get("at_clause")
        or not isinstance(ref.get("query_location"), int)
    ):
        return None
    text = query.encode()
    start = ref["query_location"]
    if text[start : start + 1] == b'"':  # a quoted name: up to its closing quote
        end = start + 1
        while True:
            end = text.find(b'"', end)
            if end < 0:
                return None
            if text[end + 1 : end + 2] != b'"':
                break
            end += 2
        end += 1
        word = text[start + 1 : end - 1].replace(b'""', b'"')
    else:
        end = start + len(str(ref["table_name"]).encode())
        word = text[start:end]
        if re.match(rb"[A-Za-z0-9_$\x80-\xff]", text[end : end + 1]):
            return None
    if word.decode(errors="replace").lower() != name.lower():
        return None
    return _From(start, end, bool(ref.get("alias")))


def _inline(query: str, where: _From, name: str, sql: str) -> str:
    """``query`` reading the relation ``sql`` where its FROM names the table."""
    text = query.encode()
    alias = "" if where.aliased else f" AS {quote(name)}"
    relation = f"({sql}){alias}".encode()
    return (text[: where.start] + relation + text[where.end :]).decode()


def _protocol(filesystem: AbstractFileSystem) -> str:
    """The one protocol ``filesystem`` answers for (DuckDB routes its paths to it)."""
    protocol = filesystem.protocol
    return protocol if isinstance(protocol, str) else protocol[0]


def _parsed(
    cur: duckdb.DuckDBPyConnection, parser: duckdb.DuckDBPyConnection, query: str
) -> tuple[frozenset[str], frozenset[Any]]:
    """The table names and statement kinds of ``query`` read with ``parser`` (closed
    then; ``cur`` closed on failure). SqlError if it does not parse."""
    try:
        named = frozenset(_table_names(parser, query))
        return named, frozenset(s.type for s in parser.extract_statements(query))
    except duckdb.Error as exc:
        cur.close()
        what = (
            "cannot parse the query" if isinstance(exc, duckdb.ParserException) else "query failed"
        )
        hint = _writes_hint(parser, query)
        if "time travel" in str(exc):
            hint += (
                " — lamina reads AT (VERSION => n) and AT (TIMESTAMP => t) in a SELECT; "
                "other statements take cat.sql(query, as_of={'table': version or time})"
            )
        raise SqlError(f"{what}: {exc}{hint}") from None
    except BaseException:
        cur.close()
        raise
    finally:
        parser.close()


_WRITES = {
    duckdb.StatementType.INSERT,
    duckdb.StatementType.UPDATE,
    duckdb.StatementType.DELETE,
    duckdb.StatementType.MERGE_INTO,
}
#: the table method doing what a statement of that type asks (docs/rowlevel.md)
_ROW_METHODS = {
    duckdb.StatementType.DELETE: "t.delete(where) (`lamina delete TABLE --where ...`)",
    duckdb.StatementType.UPDATE: (
        "t.update(where, set={...}) (`lamina update TABLE --set 'col = expr' --where ...`)"
    ),
    duckdb.StatementType.MERGE_INTO: "t.merge(source, on=[...])",
}


def _writes_hint(parser: duckdb.DuckDBPyConnection, query: str) -> str:
    """Advice for a query that fails binding while it changes a table: lamina's tables
    are views to DuckDB ("Table with name x does not exist", "Can only delete from base
    table")."""
    try:
        kinds = {s.type for s in parser.extract_statements(query)}
    except duckdb.Error:
        return ""
    if not kinds & _WRITES:
        return ""
    rows = [_ROW_METHODS[k] for k in sorted(kinds & set(_ROW_METHODS), key=str)]
    if rows:
        return " — cat.sql reads lamina tables as views and cannot change them: use " + " or ".join(
            rows
        )
    return (
        " — cat.sql reads lamina tables as views and cannot change them: write with "
        "t.append, t.overwrite, t.upsert or t.delete_segments"
    )


def _table_names(parser: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    """The names of the tables ``query`` reads. DuckDB's own answer binds the query,
    which fails where binding needs the tables' columns (``JOIN ... USING``); then the
    table references of its parse tree (CTE names among them: they match no table)."""

    try:
        return set(parser.get_table_names(query))
    except duckdb.BinderException:
        row = parser.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
        tree = json.loads(row[0]) if row else {}
        if tree.get("error"):
            raise
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and node.get("table_name"):
                names.add(str(node["table_name"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return names


def _mentions(query: str, column: str) -> bool:
    """Whether ``column`` occurs in ``query`` as a whole identifier (any case)."""
    pattern = rf"(?<![A-Za-z0-9_$]){re.escape(column)}(?![A-Za-z0-9_$])"
    return re.search(pattern, query, re.IGNORECASE) is not None


def to_arrow(rel: duckdb.DuckDBPyRelation | None) -> pa.Table:
    """A result as an Arrow table (no columns for a statement without a result)."""
    import pyarrow as pa  # loads numpy, pyarrow

    if rel is None:
        return pa.table({})
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    result: pa.Table = fetch()
    return result


def _vanished(exc: duckdb.Error) -> bool:
    """Whether ``exc`` may be a file under the query gone (a push or retention removed
    it: plan again): DuckDB's own IO error, or a FileNotFoundError of a registered
    filesystem (DuckDB raises those as plain errors naming them)."""
    return isinstance(exc, duckdb.IOException) or "FileNotFoundError" in str(exc)


def _execute(con: duckdb.DuckDBPyConnection, query: str, fetch: Fetch[T]) -> T:
    try:
        rel = con.sql(query)  # None: a statement without a result
    except duckdb.Error as exc:
        if _vanished(exc):
            raise  # planned again
        raise SqlError(f"query failed: {exc}") from None
    return _fetch(rel, fetch)


def _fetch(rel: duckdb.DuckDBPyRelation | None, fetch: Fetch[T]) -> T:
    """``fetch(rel)``: DuckDB's errors as SqlError, but for a vanished file."""
    try:
        return fetch(rel)
    except duckdb.Error as exc:
        if _vanished(exc):
            raise  # planned again
        raise SqlError(f"query failed: {exc}") from None
