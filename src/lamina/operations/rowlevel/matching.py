"""Which rows of a snapshot a predicate matches, file by file: a SQL expression
evaluated by DuckDB over the snapshot's Parquet files (only the columns it names are
read; a remote warehouse's files are read through pyarrow first), or a
``pyarrow.compute`` Expression evaluated by ``pyarrow.dataset``. Rows the snapshot
hides (deletion vectors, the times a file shows in part) never match."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from lamina.core.interval import Interval
from lamina.core.properties import SCHEMA_CHANGED_SEQ
from lamina.core.scan import ScanPlan
from lamina.engines.duckdb_views import keep_sql, quote
from lamina.errors import RowLevelError
from lamina.io.arrow import time_filter
from lamina.io.reader import snapshot_files
from lamina.io.warehouse import Warehouse

#: the position column lamina adds to rows it reads (no table has it)
POS = "__lamina_pos"
#: the file column lamina adds to rows it reads
FILE = "__lamina_file"

Predicate: TypeAlias = "str | pc.Expression"


@dataclass
class Matches:
    """A predicate's matches in one snapshot: per file path (as planned), the sorted
    positions of its visible rows that match, and (asked for) the matching rows
    themselves with :data:`FILE` (the index of the file in :attr:`paths`) and
    :data:`POS` (the position)."""

    plan: ScanPlan
    positions: dict[str, np.ndarray] = field(default_factory=dict)
    rows: pa.Table | None = None
    #: the files read, in the order :data:`FILE` numbers them
    paths: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(sum(len(p) for p in self.positions.values()))


_DB: list[duckdb.DuckDBPyConnection] = []
_DB_LOCK = threading.Lock()


def connection() -> duckdb.DuckDBPyConnection:
    """A cursor of the process's in-memory DuckDB database for row-level changes (one
    database: opening one costs more than a small change's query); close it after use."""
    with _DB_LOCK:
        if not _DB:
            _DB.append(duckdb.connect())
        return _DB[0].cursor()


@contextlib.contextmanager
def evaluating(what: str, advice: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of :func:`connection`, closed after; a DuckDB error inside becomes a
    RowLevelError: "``what`` cannot be evaluated: <DuckDB's first line>; ``advice``
    (nothing was changed)"."""
    con = connection()
    try:
        yield con
    except duckdb.Error as exc:
        raise _cannot(what, advice, exc) from None
    finally:
        con.close()


def _cannot(what: str, advice: str, exc: Exception) -> RowLevelError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RowLevelError(f"{what} cannot be evaluated: {first}; {advice} (nothing was changed)")


_PREDICATE_ADVICE = "check its column names and types"


def _evaluating_predicate(
    where: Predicate,
) -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
    return evaluating(f"the predicate {str(where)!r}", _PREDICATE_ADVICE)


def check_predicate(where: Any) -> Predicate:
    """``where`` as a predicate: a non-empty SQL expression string, or a
    ``pyarrow.compute.Expression``. Raises RowLevelError."""
    if isinstance(where, pc.Expression):
        return where
    if isinstance(where, str) and where.strip():
        return where
    raise RowLevelError(
        f"where= takes a SQL expression string (\"amount < 0 AND region = 'eu'\") or a "
        f"pyarrow.compute Expression (pc.field('amount') < 0), not {where!r}; to match "
        "every row, pass 'TRUE'"
    )


def matching(
    plan: ScanPlan,
    wh: Warehouse,
    where: Predicate,
    rows: bool = False,
    tables: Mapping[str, pa.Table] | None = None,
    columns: Sequence[str] | None = None,
) -> Matches:
    """The visible rows of ``plan`` that ``where`` matches (with the rows themselves
    when ``rows``: ``columns`` of them, by default all). A SQL ``where`` sees the
    table's rows as ``target``, and ``tables`` by their names. Raises RowLevelError
    (an unknown column, a type error, a predicate that is not boolean),
    SnapshotNotFoundError."""
    out = Matches(plan)
    names = list(plan.table.schema.names if columns is None else columns)
    whole = columns is None  # read with *: a column no file holds yet is left out
    groups: dict[Interval | None, list[str]] = {}
    for path, keep in plan.reads():
        groups.setdefault(keep, []).append(path)
    parts: list[pa.Table] = []
    with snapshot_files(plan.seq, plan.table.name):
        for keep, paths in groups.items():
            if isinstance(where, str) and wh.local:
                picked = None if whole else names
                got = _duckdb_files(
                    plan, paths, keep, where, (picked if rows else []), tables or {}
                )
            else:
                got = _arrow_files(
                    plan, wh, paths, keep, where, names if rows else [], tables or {}
                )
            if out.paths:  # the group's file indexes follow the earlier groups'
                shifted = pc.add(got.column(FILE), pa.scalar(len(out.paths), pa.int64()))
                got = got.set_column(0, FILE, shifted)
            out.paths += paths
            parts.append(got)
    found = pa.concat_tables(parts) if parts else None
    if found is None or not found.num_rows:
        if rows:
            out.rows = _empty_rows(plan).select([FILE, POS, *names])
        return out
    files = found.column(FILE).to_numpy(zero_copy_only=False).astype(np.int64)
    pos = found.column(POS).to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((pos, files))
    files, pos = files[order], pos[order]
    bounds = np.searchsorted(files, np.arange(len(out.paths) + 1))
    shown = np.ones(len(files), bool)
    for i, path in enumerate(out.paths):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo == hi:
            continue
        at = pos[lo:hi]
        hidden = plan.deletes.get(path)
        if hidden is not None and len(hidden):  # hidden already: not matched again
            seen = np.isin(at, hidden)
            shown[lo:hi] = ~seen
            at = at[~seen]
        if len(at):
            got = out.positions.get(path)  # a file read for two pieces of time
            out.positions[path] = at if got is None else np.union1d(got, at)
    if rows:
        found = found.take(pa.array(order[shown]))
        out.rows = found
    return out


def _empty_rows(plan: ScanPlan) -> pa.Table:
    empty = plan.table.schema.empty_table()
    return empty.append_column(FILE, pa.array([], pa.int64())).append_column(
        POS, pa.array([], pa.int64())
    )


def _failed(where: Predicate, exc: Exception) -> RowLevelError:
    return _cannot(f"the predicate {str(where)!r}", _PREDICATE_ADVICE, exc)


def _duckdb_files(
    plan: ScanPlan,
    paths: list[str],
    keep: Interval | None,
    where: str,
    columns: list[str] | None,
    tables: Mapping[str, pa.Table],
) -> pa.Table:
    """The matches among ``paths`` (local files), read by DuckDB's Parquet reader, with
    their ``columns`` (None: all the files hold)."""
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    by_name = ", union_by_name=true" if SCHEMA_CHANGED_SEQ in plan.table.properties else ""
    cond = f"({where})"
    tc = plan.table.time_column
    if keep is not None and tc is not None:
        cond += " AND " + keep_sql(quote(tc), plan.table.schema.field(tc).type, keep)
    cols = ", *" if columns is None else "".join(f", target.{quote(c)}" for c in columns)
    sql = (
        f"SELECT file_index::BIGINT AS {FILE}, file_row_number::BIGINT AS {POS}{cols} "
        f"FROM read_parquet({files}, hive_partitioning=false{by_name}) AS target WHERE {cond}"
    )
    with _evaluating_predicate(where) as con:
        for name, table in tables.items():
            con.register(name, table)
        return fetch(con.sql(sql))


def visible_rows_view(
    con: duckdb.DuckDBPyConnection,
    name: str,
    paths: list[str],
    columns: Sequence[str],
    hidden: Mapping[str, np.ndarray],
) -> None:
    """A temporary view ``name`` on ``con`` of the rows of ``paths`` (local files read
    whole) that ``hidden`` (positions per path) does not hide: :data:`FILE` (the
    index of the file in ``paths``), :data:`POS` and ``columns``. DuckDB reads only
    what a query of it asks for."""
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    cols = "".join(f", target.{quote(c)}" for c in columns)
    sql = (
        f"SELECT file_index::BIGINT AS {FILE}, file_row_number::BIGINT AS {POS}{cols} "
        f"FROM read_parquet({files}, hive_partitioning=false) AS target"
    )
    gone = [(i, hidden[p]) for i, p in enumerate(paths) if len(hidden.get(p, ()))]
    if gone:
        marks = pa.table(
            {
                "f": np.concatenate([np.full(len(at), i, np.int64) for i, at in gone]),
                "p": np.concatenate([np.asarray(at, np.int64) for _, at in gone]),
            }
        )
        con.register(f"{name}_hidden", marks)
        sql += (
            f" WHERE NOT EXISTS (SELECT 1 FROM {name}_hidden AS h "
            "WHERE h.f = file_index AND h.p = file_row_number)"
        )
    con.execute(f"CREATE TEMP VIEW {name} AS {sql}")


def fetch(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """A DuckDB relation's rows as one Arrow table."""
    read = getattr(rel, "to_arrow_table", None) or rel.arrow
    got = read()
    return got if isinstance(got, pa.Table) else got.read_all()


def _arrow_files(
    plan: ScanPlan,
    wh: Warehouse,
    paths: list[str],
    keep: Interval | None,
    where: Predicate,
    columns: list[str],
    tables: Mapping[str, pa.Table],
) -> pa.Table:
    """The matches among ``paths``, each file read whole by pyarrow, then filtered by
    ``pyarrow.dataset`` (an Expression) or DuckDB over Arrow (a SQL string), with
    their ``columns``."""
    rec = plan.table
    parts = []
    for i, path in enumerate(paths):
        data = pq.read_table(path, filesystem=wh.fs, schema=rec.schema)
        index = pa.array(np.full(data.num_rows, i), pa.int64())
        data = data.append_column(FILE, index)
        data = data.append_column(POS, pa.array(np.arange(data.num_rows), pa.int64()))
        flt: pc.Expression | None = None
        if keep is not None and rec.time_column is not None:
            flt = time_filter(rec.schema.field(rec.time_column), keep)
        if isinstance(where, str):
            if flt is not None:
                data = ds.dataset(data).to_table(filter=flt)
            parts.append(_duckdb_arrow(data, where, tables))
            continue
        flt = where if flt is None else flt & where
        try:
            parts.append(ds.dataset(data).to_table(filter=flt))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise _failed(where, exc) from None
    got = pa.concat_tables(parts) if parts else _empty_rows(plan)
    return got.select([FILE, POS, *columns])


def _duckdb_arrow(data: pa.Table, where: str, tables: Mapping[str, pa.Table]) -> pa.Table:
    with _evaluating_predicate(where) as con:
        con.register("__lamina_rows", data)
        for name, table in tables.items():
            con.register(name, table)
        return fetch(con.sql(f"SELECT * FROM __lamina_rows AS target WHERE ({where})"))


def assigned(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with each column whose type is not its column's in ``schema`` cast to
    it, as SQL casts a value assigned to a column (``SET v = 50.0`` into a DOUBLE: the
    literal is a DECIMAL): a cast Arrow calls safe — a value it would change (an
    overflow, a fraction into an integer) leaves the column as it was, for
    :func:`lamina.io.arrow.conform` to refuse with its reason."""
    out = data
    for i, name in enumerate(data.column_names):
        if name not in schema.names:
            continue
        want = schema.field(name).type
        have = data.schema.field(i).type
        if have == want or pa.types.is_timestamp(want):  # times: conform's own rules
            continue
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            out = out.set_column(i, name, pc.cast(data.column(i), want, safe=True))
    return out


def with_values(
    rows: pa.Table, schema: pa.Schema, values: Mapping[str, str], what: str = "set"
) -> pa.Table:
    """``rows`` (of ``schema``, and lamina's own columns) with each column of
    ``values`` set to its SQL expression, evaluated row by row by DuckDB over the
    rows as they were; the result conformed to ``schema`` (lamina's columns
    dropped). Raises RowLevelError (an unknown column, an expression that fails or
    whose values the column's type cannot hold)."""
    from lamina.io.arrow import conform  # loads numpy, pyarrow

    unknown = [c for c in values if c not in schema.names]
    if unknown:
        raise RowLevelError(
            f"{what}= names column {unknown[0]!r}, which the table does not have (its "
            f"columns: {', '.join(schema.names)})"
        )
    bad = [c for c, e in values.items() if not isinstance(e, str) or not e.strip()]
    if bad:
        raise RowLevelError(
            f"{what}= takes SQL expression strings per column ({{'amount': 'amount * 2'}}); "
            f"{bad[0]!r} has {values[bad[0]]!r}"
        )
    base = rows.select(schema.names)
    if values:
        sets = ", ".join(f"({e}) AS {quote(c)}" for c, e in values.items())
        with evaluating(f"{what}= {dict(values)!r}", _PREDICATE_ADVICE) as con:
            con.register("__lamina_rows", base)
            got = fetch(con.sql(f"SELECT * REPLACE ({sets}) FROM __lamina_rows"))
        base = assigned(got, schema)
    try:
        return conform(base, schema)
    except Exception as exc:  # noqa: BLE001 - SchemaError, ArrowInvalid: the value's fault
        raise RowLevelError(
            f"{what}= {dict(values)!r} gives values the table's columns cannot hold: {exc}"
            " (nothing was changed)"
        ) from None
