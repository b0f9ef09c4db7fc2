"""The SQL relation a scan plan is to DuckDB (:func:`view_sql`): its visible Parquet
files, each read by DuckDB's native reader, less the rows an upsert table's deletion
vectors hide, cut to the times a file shows in part, with typed nulls for columns a
file predates and the types a column was widened to. Pure SQL text, and the small
tables and empty files it needs; :mod:`lamina.engines.duckdb` runs queries over it."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
from typing import TYPE_CHECKING

import duckdb

from lamina.core.interval import MAX_US, MIN_US, Interval, format_us
from lamina.core.properties import SCHEMA_CHANGED_SEQ
from lamina.core.scan import ScanPlan
from lamina.errors import SqlError

if TYPE_CHECKING:
    import pyarrow as pa


def quote(name: str) -> str:
    """``name`` as a SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _files(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _literal(t: pa.DataType, us: int) -> str:
    import pyarrow as pa  # loads numpy, pyarrow

    if pa.types.is_date(t):  # whole days: d >= b <=> d >= ceil(b), d < b <=> d < ceil(b)
        day = 86_400_000_000
        return f"DATE '{format_us(-((-us) // day) * day)[:10]}'"
    # an untyped literal takes the column's own type (TIMESTAMP_NS, TIMESTAMPTZ, ...)
    text = format_us(us).rstrip("Z").replace("T", " ")
    return f"'{text}+00'" if t.tz is not None else f"'{text}'"


def keep_sql(column: str, t: pa.DataType, keep: Interval) -> str:
    """``keep.start <= column < keep.end``; a bound no value of the column can reach
    (infinite, or past TIMESTAMP_NS's 1677-2262, which DuckDB cannot write as a
    literal of the column's type) is TRUE or FALSE."""
    lo, hi = (
        (MIN_US, MAX_US) if getattr(t, "unit", None) != "ns" else (-(2**63) // 1000, 2**63 // 1000)
    )
    start = "TRUE" if keep.start <= max(lo, MIN_US) else f"{column} >= {_literal(t, keep.start)}"
    end = "TRUE" if keep.end >= min(hi, MAX_US) else f"{column} < {_literal(t, keep.end)}"
    if keep.start >= hi or keep.end <= lo:
        return "FALSE"
    return f"{start} AND {end}"


#: A file whose deletion vector hides at most this share of its rows is filtered by
#: an anti join on its hidden positions; one hiding more by a join of its bitmap of kept
#: rows and a bit test. Measured by bench/bench_dv_sql.py: an anti join probes a hash
#: table as big as the positions listed, and costs less than the bitmap's join and bit
#: test while that table is small; past about 1% of the rows the bitmap costs less.
FEW_DELETES = 0.01


def _positions_table(
    con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan, masked: list[tuple[int, str]]
) -> str:
    """A table in the database, visible to every cursor, of the rows the files of
    ``masked`` (each's index in a ``read_parquet`` list, its path) hide: one ``pos``
    per hidden row, its file's index times 2**32 plus its row number; its name."""
    import numpy as np  # loads numpy
    import pyarrow as pa  # loads numpy, pyarrow

    pos = np.concatenate([(np.int64(i) << 32) | plan.deletes[p] for i, p in masked])
    table = pa.table({"pos": pa.array(pos, pa.int64())})
    return _arrow_as_table(con, f"__lamina_rows_{name}_{plan.seq}", table)


def _mask_table(
    con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan, masked: list[tuple[int, str]]
) -> str:
    """A table in the database, visible to every cursor, with one row per file of
    ``masked`` (its index in a ``read_parquet`` list, its path): ``file`` and ``keep``,
    one bit per row of the file, set for the rows a reader keeps; its name."""
    import numpy as np  # loads numpy
    import pyarrow as pa  # loads numpy, pyarrow

    counts = plan.row_counts()
    keeps = []
    for _, path in masked:
        keep = np.ones(counts[path], bool)
        keep[plan.deletes[path]] = False
        keeps.append(np.packbits(keep, bitorder="big").tobytes())
    table = pa.table(
        {
            "file": pa.array([i for i, _ in masked], pa.uint64()),
            "keep": pa.array(keeps, pa.binary()),
        }
    )
    return _arrow_as_table(
        con, f"__lamina_mask_{name}_{plan.seq}", table, "SELECT file, keep::BIT AS keep"
    )


def _arrow_as_table(
    con: duckdb.DuckDBPyConnection, prefix: str, table: pa.Table, select: str = "SELECT *"
) -> str:
    """``table`` (through ``select``) as a new table of the database, visible to every
    cursor (a registered Arrow table is private to ``con``); its quoted name."""

    name = quote(f"{prefix}_{uuid.uuid4().hex[:12]}")
    arrow = f"__lamina_arrow_{uuid.uuid4().hex}"
    con.register(arrow, table)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS {select} FROM {quote(arrow)}")
    finally:
        con.unregister(arrow)
    return name


def view_sql(
    con: duckdb.DuckDBPyConnection,
    name: str,
    plan: ScanPlan,
    made: list[str] | None = None,
    scheme: str = "",
    few: float = FEW_DELETES,
) -> str:
    """SQL of a relation holding exactly the plan's rows (an upsert table's files less
    the rows their deletion vectors hide). The files are read in up to three scans,
    united: those that hide no row with no filter and no join; those whose vectors hide
    at most ``few`` of their rows with an anti join on their hidden positions; the
    others with a join of each file's bitmap of kept rows, on DuckDB's ``file_index``,
    and a test of the bit at ``file_row_number``. A file that hides every row is not
    read. The positions and bitmaps are tables it creates and names in ``made`` for the
    caller to drop once the relation is no longer used. One bitmap per file, looked up
    by a join on a handful of rows, not one constant for all: DuckDB copies a constant
    into every vector of 2,048 rows, so a table-wide bitmap costs time in proportion to
    the table's size on every vector. One scan per kind, not one per file: DuckDB's
    union of a scan per file costs more than the filter saves. ``scheme`` prefixes the
    plan's paths (``PROTOCOL://`` of a filesystem registered on ``con``: a remote
    warehouse's files)."""
    evolved = SCHEMA_CHANGED_SEQ in plan.table.properties  # files may lack columns
    counts = plan.row_counts() if plan.deletes else {}
    # one scan per set of files: (files, how many columns they hold, the times they keep);
    # None: every column (the schema stays undecoded: the command line reads no Arrow)
    scans: list[tuple[list[str], int | None, Interval | None]] = []

    def add(paths: list[str], keep: Interval | None) -> None:
        # a file whose vector hides every row is read for nothing
        paths = [p for p in paths if p not in plan.deletes or len(plan.deletes[p]) < counts[p]]
        if not paths:
            return
        if not evolved:
            scans.append((paths, None, keep))
            return
        schema = plan.table.schema
        # columns were added (t.add_columns) after some files were written: a file
        # holds a first part of the columns; one scan per part, nulls for the rest
        held = _columns_held(con, paths, scheme)
        parts: dict[int, list[str]] = {}
        for p in paths:
            parts.setdefault(min(held[p], len(schema)), []).append(p)
        for n, some in sorted(parts.items(), reverse=True):
            scans.append((some, n, keep))

    if plan.whole_files:
        add(plan.whole_files, None)
    groups: dict[Interval, list[str]] = {}
    for path, keep in plan.partial_files:
        groups.setdefault(keep, []).append(path)
    for keep, paths in groups.items():
        add(paths, keep)
    tc = plan.table.time_column

    def kinds(paths: list[str]) -> list[tuple[str, list[str]]]:
        """``paths`` by how their rows are filtered: "all" (none hidden), "few"
        (positions), "bitmap"; in that order, kinds without files left out."""
        by: dict[str, list[str]] = {"all": [], "few": [], "bitmap": []}
        for p in paths:
            hidden = plan.deletes.get(p)
            if hidden is None or not len(hidden):
                by["all"].append(p)
            else:
                by["few" if len(hidden) <= few * counts[p] else "bitmap"].append(p)
        return [(k, ps) for k, ps in by.items() if ps]

    parts = [(k, ps, n, keep) for paths, n, keep in scans for k, ps in kinds(paths)]
    if not parts:  # no rows, typed as the files type them
        return f"SELECT * FROM read_parquet({_files([empty_file(plan.table.schema)])})"
    # Scans united lead with a constant column, dropped above the union: a query that
    # needs no column (count(*)) then carries rows through the union by it, not by the
    # table's first column (read from every file for nothing)
    lead = f"0 AS {_PAD}, " if len(parts) > 1 else ""

    def scan(kind: str, paths: list[str], n: int | None, keep: Interval | None) -> str:
        """SELECT (``lead``, then every column) of the rows of ``paths`` (files of the
        first ``n`` columns) their deletion vectors keep (by ``kind``), inside
        ``keep``, typed nulls for the other columns. After a schema change the files
        come after an empty file of the first ``n`` columns as the table types them
        now: DuckDB reads every file as the first types its columns, so a column
        widened since (t.widen_column) reads widened."""
        first: list[str] = []
        lacking: list[tuple[str, str]] = []
        if n is not None:  # after a schema change
            first = [empty_file(_first_columns(plan.table.schema, n))]
            lacking = _column_types(con, plan.table.schema)[n:]
        named = [scheme + p for p in paths]
        files = f"read_parquet({_files([*first, *named])}, hive_partitioning=false)"
        nulls = "".join(f", NULL::{t} AS {quote(c)}" for c, t in lacking)
        indexed = [(i + len(first), p) for i, p in enumerate(paths)]
        if kind == "all":
            sql = f"SELECT {lead}*{nulls} FROM {files}"
        elif kind == "few":
            rows = _positions_table(con, name, plan, indexed)
            sql = (
                f"SELECT {lead}p.*{nulls} FROM {files} AS p ANTI JOIN {rows} AS d "
                "ON ((p.file_index::BIGINT << 32) | p.file_row_number) = d.pos"
            )
        else:
            rows = _mask_table(con, name, plan, indexed)
            sql = (
                f"SELECT {lead}p.*{nulls} FROM {files} AS p JOIN {rows} AS m "
                "ON p.file_index = m.file "
                "WHERE get_bit(m.keep, p.file_row_number::INTEGER) = 1"
            )
        if kind != "all" and made is not None:
            made.append(rows)
        if keep is None:
            return sql
        assert tc is not None
        t = plan.table.schema.field(tc).type
        return f"SELECT * FROM ({sql}) WHERE {keep_sql(quote(tc), t, keep)}"

    united = " UNION ALL ".join(scan(*part) for part in parts)
    return f"SELECT * EXCLUDE ({_PAD}) FROM ({united})" if lead else united


_PAD = '"__lamina_pad"'  # a column name of lamina's own: no table has it


def _first_columns(schema: pa.Schema, n: int) -> pa.Schema:
    """The schema of a table's first ``n`` columns."""
    import pyarrow as pa  # loads numpy, pyarrow

    return pa.schema(list(schema)[:n])


_HELD: dict[str, int] = {}  # a data file's URI -> how many columns it holds (never changes)
_HELD_KEPT = 1_000_000  # files remembered at most (then forgotten and read again)
_TYPES: dict[bytes, list[tuple[str, str]]] = {}  # a schema -> its columns' DuckDB types


def _columns_held(
    con: duckdb.DuckDBPyConnection, paths: list[str], scheme: str = ""
) -> dict[str, int]:
    """How many (top-level) columns each file holds, from its footer (once a file;
    read as ``scheme`` + its path). Raises SqlError if DuckDB names a file otherwise
    than it was given."""
    held = {p: _HELD[scheme + p] for p in paths if scheme + p in _HELD}
    unknown = [scheme + p for p in paths if p not in held]
    if unknown:
        rows = con.execute(
            f"SELECT file_name, num_children FROM parquet_schema({_files(unknown)}) "
            "WHERE column_id = 0"
        ).fetchall()
        got = {str(f): int(n) for f, n in rows}
        lost = [p for p in unknown if p not in got]
        if lost:
            raise SqlError(f"cannot read the columns of {lost[0]}: DuckDB did not list it")
        held.update((p.removeprefix(scheme), n) for p, n in got.items())
        with _EMPTY_LOCK:
            if len(_HELD) + len(got) > _HELD_KEPT:
                _HELD.clear()
            _HELD.update(got)
    return held


def _column_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[tuple[str, str]]:
    """The table's columns and the types DuckDB reads them as from its files."""
    key = schema.serialize().to_pybytes()
    found = _TYPES.get(key)
    if found is None:
        empty = _files([empty_file(schema)])
        rows = con.execute(f"DESCRIBE SELECT * FROM read_parquet({empty})").fetchall()
        found = _TYPES[key] = [(str(r[0]), str(r[1])) for r in rows]
    return found


_EMPTY: dict[bytes, str] = {}  # a schema's serialized form -> its empty file
_EMPTY_DIR: list[str] = []  # the process's folder of them, removed at exit
_EMPTY_LOCK = threading.Lock()


def empty_file(schema: pa.Schema) -> str:
    """A Parquet file of no rows, written as segments are (one per schema, per
    process): DuckDB types its columns as it types the table's files (a duration as
    BIGINT, a decimal256 as DOUBLE), which an empty Arrow table would not."""

    import pyarrow.parquet as pq  # loads numpy, pyarrow

    from lamina.io.arrow import storage_schema  # loads numpy, pyarrow
    from lamina.io.writer import dictionary_columns  # loads numpy, pyarrow

    stored = storage_schema(schema)
    key = stored.serialize().to_pybytes()
    with _EMPTY_LOCK:
        path = _EMPTY.get(key)
        if path is None or not os.path.exists(path):
            if not _EMPTY_DIR or not os.path.isdir(_EMPTY_DIR[0]):
                _EMPTY_DIR[:] = [tempfile.mkdtemp(prefix="lamina-empty-")]
                atexit.register(shutil.rmtree, _EMPTY_DIR[0], True)
            path = os.path.join(_EMPTY_DIR[0], f"{len(_EMPTY)}.parquet")
            empty = stored.empty_table()
            pq.write_table(empty, path, use_dictionary=dictionary_columns(stored))
            _EMPTY[key] = path
    return path


def empty_dir() -> str:
    """The folder :func:`empty_file` writes to (a sandboxed query may read it)."""
    with _EMPTY_LOCK:
        if not _EMPTY_DIR or not os.path.isdir(_EMPTY_DIR[0]):
            _EMPTY_DIR[:] = [tempfile.mkdtemp(prefix="lamina-empty-")]
            atexit.register(shutil.rmtree, _EMPTY_DIR[0], True)
        return _EMPTY_DIR[0] + "/"


def register_view(
    con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan, scheme: str = ""
) -> None:
    sql = view_sql(con, name, plan, scheme=scheme)
    con.execute(f"CREATE OR REPLACE VIEW {quote(name)} AS {sql}")
