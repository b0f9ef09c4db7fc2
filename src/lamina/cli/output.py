"""The command line's one output layer: listings (rows of plain values) printed as a rich
table, CSV, JSON or JSON lines; number and size formats; notes and messages."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import enum
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa


class OutputFormat(enum.StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


class QueryFormat(enum.StrEnum):
    """A query result's formats: a listing's, and Parquet (to a file only)."""

    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"
    parquet = "parquet"


#: the format a file's extension names (``query --output``)
EXTENSIONS = {
    ".csv": QueryFormat.csv,
    ".json": QueryFormat.json,
    ".jsonl": QueryFormat.jsonl,
    ".ndjson": QueryFormat.jsonl,
    ".parquet": QueryFormat.parquet,
    ".pq": QueryFormat.parquet,
}


def console(stderr: bool = False) -> Console:
    """A console on the *current* stdout/stderr (so test runners can capture it).

    When the output is not a terminal, lines are not wrapped (a pipe or a file wants
    whole rows), unless ``$COLUMNS`` asks for a width.
    """
    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(stderr=stderr, highlight=False, width=1000)
    return con


def one_line(message: str) -> str:
    return " ".join(message.split())


def error_line(message: str) -> None:
    """``error: MESSAGE`` in red on stderr, on one line."""
    console(stderr=True).print(
        Text(f"error: {one_line(message)}", style="bold red"), soft_wrap=True
    )


def warn(message: str, label: str = "note") -> None:
    """``note: MESSAGE`` (or ``warning: ...``) in yellow on stderr."""
    console(stderr=True).print(Text(f"{label}: {message}", style="yellow"))


def done(*parts: str | tuple[str, str]) -> None:
    """``✓ ...`` on stdout: a command's result."""
    console().print(Text.assemble(("✓ ", "green"), *parts))


def count(n: int) -> str:
    return f"{n:,}"


def n_of(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``, ``1,000 segments``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def when(value: dt.datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


# -- values ------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A JSON/CSV-friendly form of a value (datetimes ISO-8601, decimals as text, NaN
    and infinities as the strings "NaN", "Infinity", "-Infinity": JSON has no such
    numbers...)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if type(value).__name__ == "MonthDayNano":  # an INTERVAL, as DuckDB writes it
        return interval_text(value.months, value.days, value.nanoseconds)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def interval_text(months: int, days: int, nanoseconds: int) -> str:
    """An interval as DuckDB casts it to text: ``1 year 2 months 3 days 01:30:00.5``."""

    def unit(n: int, name: str) -> str:
        return f"{n} {name}{'' if abs(n) == 1 else 's'}"

    sign = -1 if months < 0 else 1
    years, rest = divmod(abs(months), 12)
    parts = [unit(sign * n, name) for n, name in ((years, "year"), (rest, "month")) if n]
    if days:
        parts.append(unit(days, "day"))
    if nanoseconds or not parts:
        micros = abs(nanoseconds) // 1000
        secs, frac = divmod(micros, 1_000_000)
        clock = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        if frac:
            clock += f".{frac:06d}".rstrip("0")
        parts.append(("-" if nanoseconds < 0 else "") + clock)
    return " ".join(parts)


def _cell(value: Any) -> str | Text:
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    p = plain(value)
    return json.dumps(p) if isinstance(p, dict | list) else str(p)


def _csv_cell(value: Any) -> str:
    p = plain(value)
    if p is None:
        return ""
    if isinstance(p, bool):
        return "true" if p else "false"
    return json.dumps(p) if isinstance(p, dict | list) else str(p)


# -- listings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a listing. ``key`` names it in CSV/JSON; ``header`` in the table
    (default: the key); ``show`` turns a value into the table's cell. ``only`` keeps a
    column to the "table" format (drawings) or to the "data" formats (raw values)."""

    key: str
    header: str | None = None
    show: Callable[[Any], str | Text] | None = None
    right: bool = False
    only: str | None = None  # None | "table" | "data"


Row = Mapping[str, Any]


def emit(
    columns: Sequence[Column],
    rows: Sequence[Row],
    fmt: OutputFormat,
    *,
    styles: Sequence[str | None] | None = None,
    empty: str | None = None,
    padding: tuple[int, int] = (0, 2),
    header_style: str = "bold",
) -> None:
    """Print ``rows`` in ``fmt``. The table format prints ``empty`` (dimmed) instead of
    an empty table; a one-column table without a header prints bare lines."""
    if fmt is not OutputFormat.table:
        keys = [c.key for c in columns if c.only != "table"]
        _emit_data(keys, [{k: r.get(k) for k in keys} for r in rows], fmt)
        return
    con = console()
    shown = [c for c in columns if c.only != "data"]
    if not rows and empty is not None:
        con.print(Text(empty, style="dim"))
        return
    if len(shown) == 1 and shown[0].header == "":
        for r in rows:
            con.print(Text(str(r[shown[0].key])), soft_wrap=True)
        return
    out = RichTable(box=None, padding=padding, header_style=header_style)
    for c in shown:
        out.add_column(
            Text(c.key if c.header is None else c.header), justify="right" if c.right else "left"
        )
    for i, r in enumerate(rows):
        cells = [(c.show or _cell)(r.get(c.key)) for c in shown]
        out.add_row(
            *(v if isinstance(v, Text) else Text(v) for v in cells),
            style=styles[i] if styles else None,
        )
    con.print(out)


def _emit_data(keys: Sequence[str], rows: Sequence[Row], fmt: OutputFormat) -> None:
    out = sys.stdout
    if fmt is OutputFormat.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(keys)
        for r in rows:
            writer.writerow([_csv_cell(r[k]) for k in keys])
    elif fmt is OutputFormat.json:
        json.dump([{k: plain(r[k]) for k in keys} for r in rows], out, indent=2)
        out.write("\n")
    else:
        for r in rows:
            out.write(json.dumps({k: plain(r[k]) for k in keys}) + "\n")


def emit_arrow(result: pa.Table, fmt: OutputFormat, limit: int) -> None:
    """Print the first ``limit`` rows (0: all) of an Arrow table; in the table format,
    with a note of how many rows there are."""
    import pyarrow as pa  # loads numpy, pyarrow

    names = result.column_names
    keys = unique_names(names)
    result = result.rename_columns(keys)
    shown = result.slice(0, limit) if limit else result
    values = [_pylist(col) for col in shown.columns]
    rows = [dict(zip(keys, row, strict=True)) for row in zip(*values, strict=True)]
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    columns = [
        Column(k, header=name, right=any(t(f.type) for t in numeric))
        for k, name, f in zip(keys, names, result.schema, strict=True)
    ]
    _emit_result(columns, rows, result.num_rows, fmt)


def _pylist(col: pa.ChunkedArray) -> list[Any]:
    """The column's values as Python objects; times past Python's range as text:
    DuckDB's ``infinity`` and ``-infinity``, else as Arrow writes them (Python would
    raise OverflowError, or show -infinity as year 1)."""
    import pyarrow as pa  # loads numpy, pyarrow
    import pyarrow.compute as pc  # loads numpy, pyarrow

    t = col.type
    if not (pa.types.is_timestamp(t) or pa.types.is_date32(t)):
        return col.to_pylist()
    top = 2**63 - 1 if pa.types.is_timestamp(t) else 2**31 - 1
    raw = col.cast(pa.int64() if pa.types.is_timestamp(t) else pa.int32())
    low, high = pc.min_max(raw).values()
    if not low.is_valid or (low.as_py() > -top and high.as_py() < top):
        try:
            return col.to_pylist()
        except (OverflowError, ValueError):
            pass
    out: list[Any] = []
    for value, r in zip(
        col.cast(pa.string(), safe=False).to_pylist(), raw.to_pylist(), strict=True
    ):
        if r is None or abs(r) == top:
            out.append(None if r is None else "infinity" if r > 0 else "-infinity")
            continue
        try:
            out.append(pa.scalar(r, raw.type).cast(t).as_py())
        except (OverflowError, ValueError):  # past Python's years 1-9999: Arrow's text
            out.append(value)
    return out


def unique_names(names: Sequence[str]) -> list[str]:
    """``names`` with repeats renamed as DuckDB renames them (``a``, ``a_1``, ...): a
    result's rows are read by column name."""
    taken: set[str] = set()
    out = []
    for name in names:
        key, i = name, 0
        while key in taken:
            i += 1
            key = f"{name}_{i}"
        taken.add(key)
        out.append(key)
    return out


@dataclass(frozen=True)
class Rows:
    """A query result read without pyarrow: its columns and rows."""

    columns: list[Column]
    rows: list[tuple[Any, ...]]


# DuckDB types whose Python values (``fetchall``) equal those of the Arrow result
# (``to_pylist``); a result with another type (lists, intervals, UUIDs, HUGEINT...)
# is read as Arrow. Dates and timestamps too: ``fetchall`` gives their infinity as
# 9999-12-31 and -infinity as year 1, which :func:`_pylist` shows as they are.
_NUMERIC = re.compile(r"U?(TINYINT|SMALLINT|INTEGER|BIGINT)|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)")
_PLAIN = re.compile(r"VARCHAR|BOOLEAN|BLOB|TIME")


def fetch_result(rel: duckdb.DuckDBPyRelation | None) -> Rows | pa.Table:
    """A DuckDB result as plain rows when every column has a plain type, else as an
    Arrow table (see :func:`emit_result`)."""
    if rel is None:
        return Rows([], [])
    types = [str(t) for t in rel.types]
    if not all(_NUMERIC.fullmatch(t) or _PLAIN.fullmatch(t) for t in types):
        from lamina.engines.duckdb import to_arrow  # loads duckdb, sortedcontainers

        return to_arrow(rel)
    columns = [
        Column(key, header=name, right=_NUMERIC.fullmatch(t) is not None)
        for key, name, t in zip(unique_names(rel.columns), rel.columns, types, strict=True)
    ]
    return Rows(columns, rel.fetchall())


def emit_result(result: Rows | pa.Table, fmt: OutputFormat, limit: int) -> None:
    """Print the first ``limit`` rows (0: all) of a query result, as :func:`emit_arrow`."""
    if not isinstance(result, Rows):
        emit_arrow(result, fmt, limit)
        return
    keys = [c.key for c in result.columns]
    kept = result.rows[:limit] if limit else result.rows
    rows = [dict(zip(keys, r, strict=True)) for r in kept]
    _emit_result(result.columns, rows, len(result.rows), fmt)


def _emit_result(
    columns: Sequence[Column], rows: Sequence[Row], total: int, fmt: OutputFormat
) -> None:
    if fmt is not OutputFormat.table:
        emit(columns, rows, fmt)
        return
    if not columns:
        note("(no result)")
        return
    emit(columns, rows, fmt)
    text = n_of(total, "row")
    if len(rows) < total:
        text = f"{count(len(rows))} of {text} shown (--limit 0 prints all)"
    note(text)


def note(text: str | Text, stderr: bool = False) -> None:
    """A dimmed line (a listing's summary)."""
    console(stderr).print(text if isinstance(text, Text) else Text(text, style="dim"))


# -- query results to a file, streamed ---------------------------------------------------------


def _utc_text(col: pa.Array) -> pa.Array:
    """A UTC timestamp column as Arrow's CSV writer writes it (``2024-01-01
    00:00:00.000000Z``), made from the naive times: Arrow formats zoned times one zone
    lookup per value, twenty times slower."""
    import pyarrow as pa  # loads numpy, pyarrow
    import pyarrow.compute as pc  # loads numpy, pyarrow

    naive = col.cast(pa.timestamp(col.type.unit)).cast(pa.string())
    return pc.binary_join_element_wise(naive, pa.scalar("Z"), "")


def _fast_csv(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its UTC timestamp columns as text (see :func:`_utc_text`)."""
    import pyarrow as pa  # loads numpy, pyarrow

    utc = ("UTC", "Etc/UTC", "+00:00", "Z")
    cols = [
        _utc_text(col) if pa.types.is_timestamp(col.type) and col.type.tz in utc else col
        for col in batch.columns
    ]
    if all(a is b for a, b in zip(cols, batch.columns, strict=True)):
        return batch
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def write_result(
    rel: duckdb.DuckDBPyRelation | None, fmt: QueryFormat, path: str, limit: int
) -> int:
    """Write a query's result to ``path`` (``limit``: at most that many rows, 0: all);
    return the rows written. CSV and Parquet stream DuckDB's Arrow record batches through
    Arrow's writers; JSON (lines, or one array) is DuckDB's own ``COPY``, which writes
    from the result directly (Arrow has no JSON writer)."""
    import pyarrow as pa  # loads numpy, pyarrow

    if rel is None:
        raise ValueError("the statement returns no result to write")
    if limit:
        rel = rel.limit(limit)
    if fmt in (QueryFormat.json, QueryFormat.jsonl):
        quoted = path.replace("'", "''")
        array = ", ARRAY true" if fmt is QueryFormat.json else ""
        done_ = rel.query("lamina_result", f"COPY lamina_result TO '{quoted}' (FORMAT json{array})")
        return int(done_.fetchall()[0][0]) if done_ is not None else 0
    reader = rel.to_arrow_reader(1 << 16) if hasattr(rel, "to_arrow_reader") else (
        rel.fetch_record_batch(1 << 16)
    )  # fmt: skip
    rows = 0
    if fmt is QueryFormat.parquet:
        import pyarrow.parquet as pq  # loads numpy, pyarrow

        with pq.ParquetWriter(path, reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)
                rows += batch.num_rows
        return rows
    import pyarrow.csv as pacsv  # loads pyarrow

    schema = _fast_csv(pa.RecordBatch.from_pylist([], schema=reader.schema)).schema
    options = pacsv.WriteOptions(quoting_style="needed")
    with pacsv.CSVWriter(path, schema, write_options=options) as out:
        for batch in reader:
            out.write_batch(_fast_csv(batch))
            rows += batch.num_rows
    return rows
