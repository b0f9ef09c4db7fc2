"""The ``lamina`` command line: create tables, ingest files with Spark, look inside.

Every command takes ``--catalog`` / ``--warehouse`` (also accepted before the command
name, and read from ``$LAMINA_CATALOG`` / ``$LAMINA_WAREHOUSE``). Errors lamina raises
for bad input print one red line and exit with status 1; usage errors exit with 2.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import enum
import functools
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import pyarrow as pa
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable
from rich.text import Text

import lamina
from lamina.core.interval import ETERNITY, MAX_US, MIN_US, Granularity, Interval, from_us, to_us
from lamina.core.lineage import LineageEntry, LineageState
from lamina.core.model import Snapshot
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.errors import (
    LaminaError,
    LineageEntryNotFoundError,
    LineageError,
    SchemaError,
    SnapshotNotFoundError,
    TableNotFoundError,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="lamina",
    help="Time-partitioned tables of immutable Parquet segments on a transactional catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


class CliError(LaminaError):
    """An error the command line reports for its own inputs (files, Spark failures)."""


# -- output helpers -------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    """A console on the *current* stdout/stderr (so test runners can capture it).

    When the output is not a terminal, lines are not wrapped (a pipe or a file wants
    whole rows), unless ``$COLUMNS`` asks for a width.
    """
    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(stderr=stderr, highlight=False, width=1000)
    return con


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _fail(message: str) -> NoReturn:
    _console(stderr=True).print(
        Text(f"error: {_one_line(message)}", style="bold red"), soft_wrap=True
    )
    raise typer.Exit(1)


def _handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`LaminaError` into one red line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LaminaError as exc:
            _fail(str(exc))
        except BrokenPipeError:  # `lamina query ... | head`
            with contextlib.suppress(OSError):
                sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def _command(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a command whose LaminaErrors become one-line messages."""

    def register(fn: Callable[P, R]) -> Callable[P, R]:
        wrapped = _handle_errors(fn)
        app.command(name)(wrapped)
        return wrapped

    return register


def _cells(*values: str | Text) -> list[Text]:
    """Table cells as Text: data (``timestamp[us]``, names) must not be read as markup."""
    return [v if isinstance(v, Text) else Text(v) for v in values]


def _count(n: int) -> str:
    return f"{n:,}"


def _n(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``, ``1,000 segments``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _time(value: dt.datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _chunk_label(iv: Interval, granularity: Granularity) -> str:
    """Compact name of a chunk (``2024-01-05``, ``2024-W01``, ``2024-Q1``...), else the
    interval itself."""
    if iv == ETERNITY:
        return "all time"
    try:
        aligned = granularity is not Granularity.ALL and granularity.chunk(iv.start) == iv
    except (OverflowError, ValueError):
        aligned = False
    if not aligned:
        return str(iv)
    d = from_us(iv.start)
    labels = {
        Granularity.HOUR: f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}h",
        Granularity.DAY: f"{d.year:04d}-{d.month:02d}-{d.day:02d}",
        Granularity.WEEK: "{:04d}-W{:02d}".format(*d.isocalendar()[:2]),
        Granularity.MONTH: f"{d.year:04d}-{d.month:02d}",
        Granularity.QUARTER: f"{d.year:04d}-Q{(d.month - 1) // 3 + 1}",
        Granularity.YEAR: f"{d.year:04d}",
    }
    return labels[granularity]


def _partitions(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``p0..p2,p5``."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(f"p{a}" if a == b else f"p{a}..p{b}" for a, b in runs)


# -- schema strings and sample files --------------------------------------------------

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "halffloat": pa.float16(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "str": pa.string(),
    "utf8": pa.string(),
    "large_string": pa.large_string(),
    "large_utf8": pa.large_string(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
    "date64": pa.date64(),
    "date64[ms]": pa.date64(),
    "binary": pa.binary(),
    "bytes": pa.binary(),
    "large_binary": pa.large_binary(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_TIMESTAMP = re.compile(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]\s]+)\s*)?\]", re.I)
_DECIMAL = re.compile(r"decimal(128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)", re.I)


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int64``, ``timestamp[us, tz=UTC]``, ``decimal(10,2)``..."""
    name = text.strip()
    simple = _SIMPLE_TYPES.get(name.lower())
    if simple is not None:
        return simple
    m = _TIMESTAMP.fullmatch(name)
    if m:
        return pa.timestamp(m.group(1).lower(), tz=m.group(2))
    m = _DECIMAL.fullmatch(name)
    if m:
        width, precision, scale = m.group(1), int(m.group(2)), int(m.group(3))
        if not 1 <= precision <= 76:
            raise SchemaError(f"decimal precision must be 1..76, not {precision}")
        if width == "128" or (width is None and precision <= 38):
            if precision > 38:
                raise SchemaError(f"decimal128 holds at most 38 digits, not {precision}")
            return pa.decimal128(precision, scale)
        return pa.decimal256(precision, scale)
    raise SchemaError(
        f"unknown column type {name!r}; use int8..int64, uint8..uint64, float32, float64, "
        "string, large_string, bool, date32, date64, binary, large_binary, decimal(P,S), "
        "timestamp[UNIT] or timestamp[UNIT, tz=ZONE] with UNIT s, ms, us or ns"
    )


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_schema(text: str) -> pa.Schema:
    """``"ts:timestamp[us, tz=UTC],k:int64,v:float64"`` -> an Arrow schema."""
    fields: list[pa.Field] = []
    for part in _split_top_level(text):
        name, sep, type_text = part.partition(":")
        name = name.strip()
        if not sep or not name or not type_text.strip():
            raise SchemaError(
                f"cannot read column {part.strip()!r} of the schema; write NAME:TYPE pairs "
                "separated by commas, e.g. ts:timestamp[us, tz=UTC],k:int64,v:float64"
            )
        if name in (f.name for f in fields):
            raise SchemaError(f"column {name!r} appears twice in the schema")
        fields.append(pa.field(name, parse_type(type_text)))
    return pa.schema(fields)


class FileFormat(enum.StrEnum):
    csv = "csv"
    json = "json"
    parquet = "parquet"


_EXTENSIONS = {
    ".csv": FileFormat.csv,
    ".tsv": FileFormat.csv,
    ".json": FileFormat.json,
    ".jsonl": FileFormat.json,
    ".ndjson": FileFormat.json,
    ".parquet": FileFormat.parquet,
    ".pq": FileFormat.parquet,
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")


def _format_of_name(name: str) -> FileFormat | None:
    lower = name.lower()
    for ext in _COMPRESSION:
        if lower.endswith(ext):
            lower = lower[: -len(ext)]
            break
    return _EXTENSIONS.get(os.path.splitext(lower)[1])


def format_of(paths: Sequence[str]) -> FileFormat:
    """The one format of the inputs, from their extensions (or of the files in a folder)."""
    found: set[FileFormat] = set()
    for p in paths:
        fmt = _format_of_name(p)
        if fmt is None and "://" not in p and os.path.isdir(p):
            for _root, _, names in os.walk(p):
                found.update(
                    f
                    for n in names
                    if not n.startswith((".", "_")) and (f := _format_of_name(n)) is not None
                )
            continue
        if fmt is None:
            raise CliError(
                f"cannot tell the format of {p!r} from its extension; pass --format "
                "csv|json|parquet"
            )
        found.add(fmt)
    if len(found) != 1:
        what = "mixes " + " and ".join(sorted(f.value for f in found)) if found else "has no"
        raise CliError(f"the input {what} data files; pass --format csv|json|parquet")
    return found.pop()


def _normalize_inferred(schema: pa.Schema) -> pa.Schema:
    """Guessed types from CSV/JSON samples: timestamps at lamina's µs resolution."""
    fields = [
        f.with_type(pa.timestamp("us", tz=f.type.tz)) if pa.types.is_timestamp(f.type) else f
        for f in schema
    ]
    return pa.schema(fields)


def infer_schema(path: str, fmt: FileFormat | None = None) -> pa.Schema:
    """Arrow schema of a sample Parquet, CSV (first block) or JSON-lines file."""
    import pyarrow.csv as pacsv
    import pyarrow.dataset as pads
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    fmt = fmt or format_of([path])
    try:
        if fmt is FileFormat.parquet:
            if os.path.isdir(path):
                return pads.dataset(path, format="parquet").schema
            return pq.read_schema(path)
        if fmt is FileFormat.csv:
            tsv = path.lower().endswith((".tsv", ".tsv.gz"))
            parse = pacsv.ParseOptions(delimiter="\t" if tsv else ",")
            with pacsv.open_csv(path, parse_options=parse) as reader:
                return _normalize_inferred(reader.schema)
        if hasattr(pajson, "open_json"):  # pyarrow >= 19: only the first block
            with pajson.open_json(path) as reader:
                return _normalize_inferred(reader.schema)
        return _normalize_inferred(pajson.read_json(path).schema)
    except (pa.ArrowException, OSError) as exc:
        raise CliError(f"cannot read a {fmt.value} schema from {path}: {exc}") from None


def _parse_properties(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--property")
        props[key.strip()] = value.strip()
    return props


# -- connection --------------------------------------------------------------------------


@dataclass
class _Globals:
    catalog: str | None = None
    warehouse: str | None = None


_CATALOG_HELP = (
    "Catalog URL (sqlite:///..., postgresql://...). "
    "Default: $LAMINA_CATALOG, else lamina.db inside the warehouse."
)
_WAREHOUSE_HELP = "Warehouse path or URI. Default: $LAMINA_WAREHOUSE, else ./warehouse."
CatalogOpt = Annotated[
    str | None, typer.Option("--catalog", help=_CATALOG_HELP, show_default=False)
]
WarehouseOpt = Annotated[
    str | None, typer.Option("--warehouse", help=_WAREHOUSE_HELP, show_default=False)
]
FilesArg = Annotated[
    list[str], typer.Argument(help="Input files or folders (local paths or URIs).")
]
FormatOpt = Annotated[
    FileFormat | None,
    typer.Option("--format", "-f", help="Input format. Default: from the extension."),
]


@app.callback()
def main(
    ctx: typer.Context,
    catalog: Annotated[
        str | None,
        typer.Option("--catalog", envvar="LAMINA_CATALOG", help=_CATALOG_HELP, show_default=False),
    ] = None,
    warehouse: Annotated[
        str | None,
        typer.Option(
            "--warehouse",
            envvar="LAMINA_WAREHOUSE",
            help=_WAREHOUSE_HELP,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Time-partitioned tables of immutable Parquet segments on a transactional catalog."""
    ctx.obj = _Globals(catalog, warehouse)


@contextlib.contextmanager
def _connect(
    ctx: typer.Context, catalog: str | None, warehouse: str | None
) -> Iterator[lamina.Catalog]:
    """The catalog named by the command's options, else the global ones, else the env."""
    glob = ctx.find_object(_Globals) or _Globals()
    cat = lamina.connect(catalog=catalog or glob.catalog, warehouse=warehouse or glob.warehouse)
    try:
        yield cat
    finally:
        cat.close()


def _load(cat: lamina.Catalog, name: str) -> lamina.Table:
    try:
        return cat.load_table(name)
    except TableNotFoundError:
        raise TableNotFoundError(
            f"no table named {name!r}; `lamina tables` lists the tables"
        ) from None


def _snapshot(t: lamina.Table, as_of: int | None, all_published: bool) -> Snapshot:
    try:
        return t.snapshot(as_of, all_published=all_published)
    except SnapshotNotFoundError:
        raise SnapshotNotFoundError(
            f"table {t.name!r} has no completed commit {as_of}; `lamina history {t.name}` "
            "lists the commits you can read"
        ) from None


# -- init / create-table / tables --------------------------------------------------------


@_command("init")
def init(ctx: typer.Context, catalog: CatalogOpt = None, warehouse: WarehouseOpt = None) -> None:
    """Create the warehouse and the catalog (if needed) and show where they are."""
    with _connect(ctx, catalog, warehouse) as cat:
        grid = RichTable.grid(padding=(0, 2))
        grid.add_row(Text("warehouse", style="bold"), Text(cat.warehouse.location))
        grid.add_row(Text("root", style="bold"), Text(cat.warehouse.root))
        grid.add_row(
            Text("catalog", style="bold"), Text(cat.engine.url.render_as_string(hide_password=True))
        )
        grid.add_row(Text("tables", style="bold"), Text(str(len(cat.list_tables()))))
        _console().print(grid)


@_command("create-table")
def create_table(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name (letters, digits, underscores).")],
    time_column: Annotated[
        str | None,
        typer.Option("--time-column", "-t", help="Timestamp or date column; omit for none."),
    ] = None,
    granularity: Annotated[
        Granularity | None,
        typer.Option("--granularity", "-g", case_sensitive=False, help="Chunk size. Default: DAY."),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema", "-s", help='Columns, e.g. "ts:timestamp[us, tz=UTC],k:int64,v:float64".'
        ),
    ] = None,
    like: Annotated[
        str | None,
        typer.Option("--like", help="Take the schema of a Parquet, CSV or JSON-lines file."),
    ] = None,
    fmt: Annotated[
        FileFormat | None,
        typer.Option("--format", "-f", help="Format of the --like file. Default: extension."),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", "-p", help="Table property KEY=VALUE (repeatable)."),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Create a table from a schema string or from a sample file."""
    if (schema is None) == (like is None):
        raise typer.BadParameter("give exactly one of --schema and --like", param_hint="--schema")
    properties = _parse_properties(prop or [])
    arrow_schema = parse_schema(schema) if schema is not None else infer_schema(str(like), fmt)
    with _connect(ctx, catalog, warehouse) as cat:
        table = cat.create_table(name, arrow_schema, time_column, granularity, properties)
        _print_table_created(table)


def _print_table_created(table: lamina.Table) -> None:
    con = _console()
    what = (
        f"time column {table.time_column}, {table.granularity.value} chunks"
        if table.time_column
        else "no time column"
    )
    con.print(Text.assemble(("created table ", "green"), (table.name, "bold green"), f" ({what})"))
    cols = RichTable(box=None, padding=(0, 2), show_header=True, header_style="dim")
    cols.add_column("column")
    cols.add_column("type")
    cols.add_column("")
    for f in table.schema:
        cols.add_row(*_cells(f.name, str(f.type), "time" if f.name == table.time_column else ""))
    con.print(cols)
    if table.properties:
        con.print(Text("properties: " + ", ".join(f"{k}={v}" for k, v in table.properties.items())))


@_command("tables")
def tables(ctx: typer.Context, catalog: CatalogOpt = None, warehouse: WarehouseOpt = None) -> None:
    """List tables with their visible segments, rows and bytes."""
    with _connect(ctx, catalog, warehouse) as cat:
        out = RichTable(box=None, padding=(0, 2), header_style="bold")
        out.add_column("table")
        out.add_column("time column")
        out.add_column("granularity")
        for heading in ("segments", "rows", "size"):
            out.add_column(heading, justify="right")
        for name in cat.list_tables():
            t = _load(cat, name)
            segs = t.segments()
            out.add_row(
                *_cells(
                    name,
                    t.time_column or "-",
                    t.granularity.value,
                    _count(len(segs)),
                    _count(sum(s.row_count for s in segs)),
                    _size(sum(s.size_bytes for s in segs)),
                )
            )
        con = _console()
        if out.row_count:
            con.print(out)
        else:
            con.print(Text("no tables yet; create one with `lamina create-table`", style="dim"))


# -- segments / timeline / history ----------------------------------------------------------


@dataclass
class _Chunk:
    """All segments of one (interval, version) in an all-published timeline."""

    interval: Interval
    version: int
    segments: list[Segment]

    @property
    def tombstone(self) -> bool:
        return all(s.location is None for s in self.segments)

    @property
    def rows(self) -> int:
        return sum(s.row_count for s in self.segments)

    @property
    def missing(self) -> list[int]:
        """Core partitions not present (the chunk is incomplete while any are missing)."""
        core = max(s.num_core_partitions for s in self.segments)
        have = {s.partition_id for s in self.segments}
        return [p for p in range(core) if p not in have]


@dataclass
class _Status:
    kind: str  # visible | partial | overshadowed | incomplete | hidden
    detail: str


def _chunk_status(tl: Timeline, chunk: _Chunk) -> _Status:
    entries = tl.lookup(chunk.interval)
    own = [e for e in entries if e.version == chunk.version]
    above = sorted({e.version for e in entries if e.version > chunk.version}, reverse=True)
    by = ", ".join(f"v{v}" for v in above)
    missing = chunk.missing
    if missing:
        extra = f"; overshadowed by {by}" if tl.is_overshadowed(chunk.segments[0]) else ""
        return _Status("incomplete", f"incomplete: missing {_partitions(missing)}{extra}")
    if own and sum(e.interval.end - e.interval.start for e in own) == (
        chunk.interval.end - chunk.interval.start
    ):
        return _Status("visible", "visible")
    if own:
        return _Status("partial", f"partly visible, partly overshadowed by {by}")
    if tl.is_overshadowed(chunk.segments[0]):
        return _Status("overshadowed", f"overshadowed by {by}")
    return _Status("hidden", "not visible")


def _chunks(tl: Timeline) -> dict[Interval, list[_Chunk]]:
    """Chunk interval -> its versions, highest first; intervals in time order."""
    grouped: dict[tuple[Interval, int], list[Segment]] = {}
    for seg in tl.segments():
        grouped.setdefault((seg.interval, seg.version), []).append(seg)
    out: dict[Interval, list[_Chunk]] = {}
    for (iv, version), segs in sorted(grouped.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        segs.sort(key=lambda s: s.partition_id)
        out.setdefault(iv, []).append(_Chunk(iv, version, segs))
    return out


AsOfOpt = Annotated[
    int | None,
    typer.Option("--as-of", help="Show the snapshot completed by this commit id.", min=1),
]


@_command("segments")
def segments(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="Every published segment, with its status.")
    ] = False,
    as_of: AsOfOpt = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's visible segments (or, with --all, every published one)."""
    with _connect(ctx, catalog, warehouse) as cat:
        t = _load(cat, name)
        snap = _snapshot(t, as_of, all_published=all_)
        tl = Timeline.build(snap.segments)
        status: dict[tuple[Interval, int], _Status] = {}
        if all_:
            segs = sorted(snap.segments, key=lambda s: (s.interval, s.version, s.partition_id))
            for chunks in _chunks(tl).values():
                for c in chunks:
                    status[(c.interval, c.version)] = _chunk_status(tl, c)
        else:
            segs = [s for s in tl.visible() if s.location is not None]
        out = RichTable(box=None, padding=(0, 2), header_style="bold")
        out.add_column("segment")
        out.add_column("interval")
        out.add_column("version", justify="right")
        out.add_column("partition", justify="right")
        for heading in ("rows", "size", "commit"):
            out.add_column(heading, justify="right")
        if all_:
            out.add_column("status")
        styles = {"visible": "green", "partial": "yellow", "incomplete": "yellow"}
        for s in segs:
            part = f"{s.partition_id}" + (
                f"/{s.num_core_partitions}" if s.num_core_partitions else ""
            )
            row: list[str | Text] = [
                s.id,
                _chunk_label(s.interval, t.granularity),
                f"v{s.version}",
                part,
                "tombstone" if s.location is None else _count(s.row_count),
                "" if s.location is None else _size(s.size_bytes),
                "" if s.commit_id is None else str(s.commit_id),
            ]
            row_style = None
            if all_:
                st = status[(s.interval, s.version)]
                row.append(Text(st.detail, style=styles.get(st.kind, "dim")))
                row_style = None if st.kind in styles else "dim"
            out.add_row(*_cells(*row), style=row_style)
        con = _console()
        con.print(out)
        live = [s for s in tl.visible() if s.location is not None]
        note = (
            f"{_n(len(live), 'visible segment')}, {_n(sum(s.row_count for s in live), 'row')}, "
            f"{_size(sum(s.size_bytes for s in live))}"
        )
        if all_:
            note = f"{_n(len(segs), 'published segment')}; {note}"
        if snap.commit_id:
            note += f" · snapshot of commit {snap.commit_id}"
        con.print(Text(note, style="dim"))


_GLYPHS = {
    "visible": ("█", "green"),
    "partial": ("▓", "yellow"),
    "overshadowed": ("░", "dim"),
    "incomplete": ("▒", "yellow"),
    "hidden": ("░", "dim"),
}
_BAR_WIDTH = 16


@_command("timeline")
def timeline(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    as_of: AsOfOpt = None,
    interval: Annotated[
        str | None,
        typer.Option("--interval", "-i", help="Only chunks overlapping START/END (ISO-8601)."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="Show at most N chunks (0: all).", min=0)
    ] = 60,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Draw the timeline: each chunk's versions, which is visible, what is overshadowed."""
    window = Interval.parse(interval) if interval is not None else None
    with _connect(ctx, catalog, warehouse) as cat:
        t = _load(cat, name)
        snap = _snapshot(t, as_of, all_published=True)
        tl = Timeline.build(snap.segments)
        groups = [
            (iv, chunks)
            for iv, chunks in _chunks(tl).items()
            if window is None or iv.overlaps(window)
        ]
        shown = groups if limit == 0 else groups[:limit]
        most = max((c.rows for _, chunks in shown for c in chunks), default=0)
        con = _console()
        layered = sum(1 for _, chunks in groups if len(chunks) > 1)
        head = Text.assemble(
            (t.name, "bold"),
            f" · {t.granularity.value} chunks · {_n(len(groups), 'chunk')}",
            f" ({_count(layered)} with several versions)" if layered else "",
            f" · snapshot of commit {snap.commit_id}" if snap.commit_id else " · empty",
            f" · within {window}" if window else "",
        )
        con.print(head)
        if not groups:
            return
        out = RichTable(box=None, padding=(0, 1), header_style="dim", show_edge=False)
        out.add_column("chunk", no_wrap=True)
        out.add_column("version", justify="right", no_wrap=True)
        out.add_column("rows", no_wrap=True, min_width=_BAR_WIDTH)
        out.add_column("", justify="right", no_wrap=True)
        out.add_column("partitions", no_wrap=True)
        out.add_column("state", no_wrap=True)
        for iv, chunks in shown:
            for i, c in enumerate(chunks):
                st = _chunk_status(tl, c)
                glyph, style = _GLYPHS[st.kind]
                if c.tombstone:
                    bar = Text("×", style="red" if st.kind == "visible" else "dim")
                    detail = "deleted (tombstone)" if st.kind == "visible" else st.detail
                    detail_style = "red" if st.kind == "visible" else style
                    rows, parts = "", "tombstone"
                else:
                    width = max(1, round(_BAR_WIDTH * c.rows / most)) if most and c.rows else 1
                    bar = Text(glyph * width, style=style)
                    detail, detail_style = st.detail, style
                    rows = _count(c.rows)
                    parts = _partitions([s.partition_id for s in c.segments])
                row_style = "dim" if st.kind in ("overshadowed", "hidden") else None
                out.add_row(
                    *_cells(
                        _chunk_label(iv, t.granularity) if i == 0 else "",
                        f"v{c.version}",
                        bar,
                        rows,
                        parts,
                        Text(detail, style=detail_style),
                    ),
                    style=row_style,
                )
        con.print(out)
        if len(shown) < len(groups):
            con.print(
                Text(
                    f"... {_n(len(groups) - len(shown), 'more chunk')} "
                    "(--limit 0 shows all; --interval START/END narrows)",
                    style="dim",
                )
            )
        con.print(
            Text.assemble(
                ("█", "green"),
                " visible  ",
                ("▓", "yellow"),
                " partly visible  ",
                ("░", "dim"),
                " overshadowed  ",
                ("▒", "yellow"),
                " incomplete  ",
                ("×", "red"),
                " tombstone",
                style="dim",
            )
        )


@_command("history")
def history(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's commits, oldest first."""
    with _connect(ctx, catalog, warehouse) as cat:
        commits = _load(cat, name).history()
        out = RichTable(box=None, padding=(0, 2), header_style="bold")
        out.add_column("commit", justify="right")
        out.add_column("action")
        out.add_column("state")
        out.add_column("started (UTC)")
        out.add_column("completed (UTC)")
        out.add_column("+segments", justify="right")
        out.add_column("-segments", justify="right")
        out.add_column("metadata")
        states = {"COMPLETED": "green", "ABORTED": "red"}
        for c in commits:
            out.add_row(
                *_cells(
                    str(c.id),
                    c.action,
                    Text(c.state, style=states.get(c.state, "yellow")),
                    _time(c.started_at),
                    _time(c.completed_at),
                    _count(len(c.added)),
                    _count(len(c.removed)),
                    json.dumps(c.metadata, sort_keys=True, default=str) if c.metadata else "",
                )
            )
        con = _console()
        if commits:
            con.print(out)
        else:
            con.print(Text(f"table {name} has no commits yet", style="dim"))


# -- query -----------------------------------------------------------------------------------


class OutputFormat(enum.StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


def _plain(value: Any) -> Any:
    """A JSON/CSV-friendly form of a value from ``Table.to_pylist``."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    plain = _plain(value)
    if isinstance(plain, dict | list):
        return json.dumps(plain)
    return str(plain)


def _csv_cell(value: Any) -> str:
    plain = _plain(value)
    if plain is None:
        return ""
    return json.dumps(plain) if isinstance(plain, dict | list) else str(plain)


@_command("query")
def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the tables ('-': read stdin).")],
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "-n",
            min=0,
            help="Print at most N rows (0: all). Default: 50 for table, all otherwise.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = (
        OutputFormat.table
    ),
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run SQL (DuckDB) over the latest snapshots of the tables it names."""
    if sql == "-":
        sql = sys.stdin.read()
    with _connect(ctx, catalog, warehouse) as cat:
        result = cat.sql(sql)
    if limit is None:
        limit = 50 if fmt is OutputFormat.table else 0
    total = result.num_rows
    rows = result.slice(0, limit).to_pylist() if limit else result.to_pylist()
    names = result.column_names
    if fmt is OutputFormat.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        for r in rows:
            writer.writerow([_csv_cell(r[n]) for n in names])
        return
    if fmt is OutputFormat.json:
        json.dump([{n: _plain(r[n]) for n in names} for r in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if fmt is OutputFormat.jsonl:
        for r in rows:
            sys.stdout.write(json.dumps({n: _plain(r[n]) for n in names}) + "\n")
        return
    con = _console()
    if not names:
        con.print(Text("(no result)", style="dim"))
        return
    out = RichTable(box=None, padding=(0, 2), header_style="bold")
    for field in result.schema:
        numeric = (
            pa.types.is_integer(field.type)
            or pa.types.is_floating(field.type)
            or (pa.types.is_decimal(field.type))
        )
        out.add_column(Text(field.name), justify="right" if numeric else "left")
    for r in rows:
        out.add_row(
            *(Text("null", style="dim") if r[n] is None else Text(_cell(r[n])) for n in names)
        )
    con.print(out)
    note = _n(total, "row")
    if len(rows) < total:
        note = f"{_count(len(rows))} of {note} shown (--limit 0 prints all)"
    con.print(Text(note, style="dim"))


# -- ingest (Spark) ----------------------------------------------------------------------------


class WriteMode(enum.StrEnum):
    append = "append"
    overwrite = "overwrite"


class _SparkProgress:
    """A progress bar of Spark's tasks, fed by a thread polling the status tracker."""

    def __init__(self, spark: SparkSession, console: Console, interval_s: float = 0.2) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stages: dict[int, tuple[int, int]] = {}  # id -> (completed, total) tasks
        self._done: set[int] = set()
        self._phase = "starting"
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._task: TaskID = self.progress.add_task("starting", total=None)
        self._thread = threading.Thread(target=self._run, name="lamina-progress", daemon=True)

    def phase(self, text: str) -> None:
        with self._lock:
            self._phase = text
            self._refresh()

    def poll(self) -> None:
        """Read the status of every stage seen so far; update the bar."""
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        active = self._tracker.getActiveStageIds()
        for sid in active:
            self._stages.setdefault(sid, (0, 0))
        for sid in list(self._stages):
            if sid in self._done:
                continue
            info = self._tracker.getStageInfo(sid)
            if info is None:
                self._done.add(sid)
                continue
            self._stages[sid] = (info.numCompletedTasks, info.numTasks)
            if sid not in active and info.numActiveTasks == 0:
                self._done.add(sid)
        self._refresh(active)

    def _refresh(self, active: Sequence[int] = ()) -> None:
        completed = sum(c for c, _ in self._stages.values())
        total = sum(n for _, n in self._stages.values())
        stage = f" · stage {', '.join(map(str, active))}" if active else ""
        self.progress.update(
            self._task,
            description=f"{self._phase}{stage}",
            completed=completed,
            total=total or None,
        )

    @property
    def tasks(self) -> int:
        return sum(c for c, _ in self._stages.values())

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.poll()
            except Exception:  # the JVM went away, py4j hiccup: stop reporting, not the job
                return

    def __enter__(self) -> _SparkProgress:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self.poll()  # count the tasks that finished since the last poll
        self.progress.stop()


def _spark_error_message(exc: BaseException) -> str | None:
    """A one-line message for an error raised by Spark; None if it is not Spark's."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(exc, Py4JJavaError):
        return str(exc.java_exception.toString()).splitlines()[0]
    if not isinstance(exc, PySparkException):
        return None
    root: BaseException = exc
    while getattr(root, "_cause", None) is not None:  # a job failure wraps the task's error
        root = root._cause  # type: ignore[attr-defined]
    desc = getattr(root, "_desc", None) or str(root)
    lines = [line for line in str(desc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _quiet_spark(spark: SparkSession) -> None:
    """Spark logs every failed task at length; the command reports the cause itself.
    ``$LAMINA_SPARK_LOG_LEVEL`` (e.g. WARN) brings the logs back."""
    import logging

    from pyspark.logger import PySparkLogger

    level = os.environ.get("LAMINA_SPARK_LOG_LEVEL", "FATAL").upper()
    spark.sparkContext.setLogLevel(level)
    if level in ("FATAL", "OFF"):
        for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _spark_errors() -> Iterator[None]:
    """Report Spark's failures (missing files, malformed values...) as CliErrors."""
    try:
        yield
    except LaminaError:
        raise
    except Exception as exc:
        message = _spark_error_message(exc)
        if message is None:
            raise
        raise CliError(f"Spark failed: {message}") from None


def _cast_to(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """Cast the (string) columns of ``df`` that the table has to the table's types."""
    from pyspark.sql import functions as F

    from lamina.engines.spark import arrow_to_spark_schema

    target = {f.name: f.dataType for f in arrow_to_spark_schema(schema).fields}
    cols = []
    for c in df.columns:
        col = F.col("`" + c.replace("`", "``") + "`")
        cols.append(col.cast(target[c]).alias(c) if c in target else col)
    return df.select(*cols)


def read_spark_files(
    spark: SparkSession, fmt: FileFormat, paths: Sequence[str], schema: pa.Schema | None
) -> DataFrame:
    """Read the inputs. With a table ``schema``, CSV/JSON values are read as text and
    cast by column name to the table's types; without one, Spark infers the types."""
    reader = spark.read
    if fmt is FileFormat.parquet:
        return reader.parquet(*paths)
    if fmt is FileFormat.csv:
        sep = "\t" if all(p.lower().endswith((".tsv", ".tsv.gz")) for p in paths) else ","
        df = reader.options(header=True, inferSchema=schema is None, sep=sep).csv(list(paths))
    elif schema is None:
        df = reader.options(inferTimestamp=True).json(list(paths))
    else:
        df = reader.options(primitivesAsString=True).json(list(paths))
    return df if schema is None else _cast_to(df, schema)


def _check_inputs(files: Sequence[str]) -> list[str]:
    out = []
    for f in files:
        if "://" in f:
            out.append(f)
            continue
        path = Path(f).expanduser()
        if not path.exists():
            raise CliError(f"input {f} does not exist")
        out.append(str(path.resolve()))
    return out


@_command("ingest")
def ingest(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    files: FilesArg,
    fmt: FormatOpt = None,
    mode: Annotated[WriteMode, typer.Option("--mode", "-m", help="How to write.")] = (
        WriteMode.append
    ),
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            "-i",
            help="Overwrite exactly START/END (aligned to chunks); default: the chunks "
            "the data touches.",
        ),
    ] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the table from the data if missing.")
    ] = False,
    time_column: Annotated[
        str | None, typer.Option("--time-column", "-t", help="With --create: time column.")
    ] = None,
    granularity: Annotated[
        Granularity | None,
        typer.Option(
            "--granularity", "-g", case_sensitive=False, help="With --create: chunk size."
        ),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", "-p", help="With --create: table property KEY=VALUE."),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Load CSV, JSON-lines or Parquet files into a table with Spark, in one commit."""
    if interval is not None and mode is not WriteMode.overwrite:
        raise typer.BadParameter("only applies with --mode overwrite", param_hint="--interval")
    if not create and (time_column or granularity or prop):
        raise typer.BadParameter(
            "--time-column, --granularity and --property only apply with --create",
            param_hint="--create",
        )
    properties = _parse_properties(prop or [])
    paths = _check_inputs(files)
    fmt = fmt or format_of(paths)
    err = _console(stderr=True)
    started = time.monotonic()
    with _connect(ctx, catalog, warehouse) as cat:
        table: lamina.Table | None
        try:
            table = cat.load_table(name)
            if create:
                _note_existing(table, time_column, granularity, properties)
        except TableNotFoundError:
            if not create:
                raise TableNotFoundError(
                    f"no table named {name!r}; create it with `lamina create-table` or pass "
                    "--create --time-column COLUMN"
                ) from None
            table = None
        spark = _start_spark(err)
        created = False
        meta = _input_meta("lamina ingest", fmt, paths)
        with _SparkProgress(spark, err) as progress, _spark_errors():
            progress.phase("reading")
            df = read_spark_files(spark, fmt, paths, None if table is None else table.schema)
            if table is None:
                progress.phase("creating table")
                table = cat.create_table(name, df.schema, time_column, granularity, properties)
                created = True
            progress.phase("writing")
            if mode is WriteMode.append:
                commit = table.append(df, metadata=meta)
            else:
                commit = table.overwrite(df, interval=interval, metadata=meta)
        tasks = progress.tasks
        elapsed = time.monotonic() - started
        _print_commit(table, commit, created, elapsed, tasks)


def _note_existing(
    table: lamina.Table,
    time_column: str | None,
    granularity: Granularity | None,
    properties: dict[str, str],
) -> None:
    """--create on an existing table writes into it as it is; say so if that differs."""
    differs = (
        (time_column is not None and time_column != table.time_column)
        or (granularity is not None and granularity is not table.granularity)
        or any(table.properties.get(k) != v for k, v in properties.items())
    )
    if differs:
        _console(stderr=True).print(
            Text(
                f"note: table {table.name} exists (time column {table.time_column}, "
                f"{table.granularity.value} chunks); --create options are not applied to it",
                style="yellow",
            )
        )


def _print_commit(
    table: lamina.Table, commit: lamina.Commit, created: bool, elapsed: float, tasks: int
) -> None:
    segs = [s for s in table.segments(all=True, as_of=commit.id) if s.commit_id == commit.id]
    data = [s for s in segs if s.location is not None]
    tombstones = len(segs) - len(data)
    removed = next((len(c.removed) for c in table.history() if c.id == commit.id), 0)
    con = _console()
    if created:
        con.print(Text.assemble(("created table ", "green"), (table.name, "bold green")))
    parts = [
        _n(sum(s.row_count for s in data), "row"),
        _n(len(data), "segment") + " added",
    ]
    if removed:
        parts.append(f"{_count(removed)} replaced")
    if tombstones:
        parts.append(_n(tombstones, "chunk") + " emptied")
    con.print(
        Text.assemble(
            ("✓ ", "green"),
            (f"commit {commit.id}", "bold"),
            f" ({commit.action.lower()}) on {table.name}: " + ", ".join(parts),
            (f" · {elapsed:.1f} s, {_n(tasks, 'Spark task')}", "dim"),
        )
    )


# -- segment lineage: push, lineage, revert; maintenance; REST server ------------------------


def _find_entry(t: lamina.Table, entry_id: str) -> LineageEntry:
    for e in t.lineage():
        if e.id == entry_id:
            return e
    raise LineageEntryNotFoundError(
        f"no lineage entry {entry_id!r} in table {t.name}; `lamina lineage {t.name}` lists them"
    )


def _entry_of_push(t: lamina.Table, commit: lamina.Commit) -> LineageEntry | None:
    """The lineage entry a consistent refresh published under (None without one)."""
    eid = commit.metadata.get("lineage_entry")
    return next((e for e in t.lineage() if e.id == eid), None)


def _start_spark(err: Console) -> Any:
    """The shared Spark session, started behind a spinner, with its logs quieted."""
    from lamina.engines.spark import get_spark

    with err.status("starting Spark", spinner="dots"), _spark_errors():
        spark = get_spark()
        _quiet_spark(spark)
    return spark


def _input_meta(via: str, fmt: FileFormat, paths: list[str]) -> dict[str, Any]:
    """Commit metadata recording where the rows came from."""
    return {"via": via, "format": fmt.value, "inputs": paths[:20], "input_count": len(paths)}


_STATE_STYLES = {
    LineageState.COMPLETED.value: "green",
    LineageState.REVERTED.value: "red",
    LineageState.IN_PROGRESS.value: "yellow",
}


@_command("lineage")
def lineage(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    show_segments: Annotated[
        bool, typer.Option("--segments", "-s", help="Also list each entry's segment ids.")
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's segment lineage entries (consistent pushes), oldest first."""
    with _connect(ctx, catalog, warehouse) as cat:
        t = _load(cat, name)
        entries = t.lineage()
        con = _console()
        if not entries:
            con.print(Text(f"table {t.name} has no lineage entries", style="dim"))
            return
        out = RichTable(box=None, padding=(0, 2), header_style="bold")
        out.add_column("entry")
        out.add_column("state")
        out.add_column("updated (UTC)")
        out.add_column("-segments", justify="right")
        out.add_column("+segments", justify="right")
        for e in entries:
            out.add_row(
                *_cells(
                    e.id,
                    Text(e.state, style=_STATE_STYLES.get(e.state, "")),
                    _time(e.timestamp),
                    _count(len(e.segments_from)),
                    _count(len(e.segments_to)),
                )
            )
        con.print(out)
        if show_segments:
            for e in entries:
                con.print(Text(e.id, style="bold"))
                for sid in e.segments_from:
                    con.print(Text(f"  - {sid}", style="red"))
                for sid in e.segments_to:
                    con.print(Text(f"  + {sid}", style="green"))
        states = {s: sum(e.state == s for e in entries) for s in _STATE_STYLES}
        con.print(
            Text(
                f"{_count(len(entries))} {'entry' if len(entries) == 1 else 'entries'}: "
                + ", ".join(f"{n} {s.lower().replace('_', ' ')}" for s, n in states.items() if n),
                style="dim",
            )
        )


@_command("revert")
def revert(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    entry_id: Annotated[str, typer.Argument(help="Lineage entry id (`lamina lineage TABLE`).")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Also revert an entry still IN_PROGRESS (a running push)."),
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Roll back a push: readers see the segments its lineage entry replaced again."""
    with _connect(ctx, catalog, warehouse) as cat:
        t = _load(cat, name)
        entry = _find_entry(t, entry_id)
        con = _console()
        if entry.state == LineageState.REVERTED:
            con.print(Text(f"lineage entry {entry_id} on {t.name} is already reverted", "dim"))
            return
        if entry.state == LineageState.IN_PROGRESS and not force:
            raise LineageError(
                f"lineage entry {entry_id} is still IN_PROGRESS (a push may still be running); "
                "pass --force to revert it anyway"
            )
        t.revert_replace(entry_id, force=force)
        what = (
            f"{_n(len(entry.segments_from), 'segment')} visible again, "
            f"{_n(len(entry.segments_to), 'segment')} hidden"
            if entry.state == LineageState.COMPLETED
            else f"its {_n(len(entry.segments_to), 'segment')} will never be visible"
        )
        con.print(
            Text.assemble(
                ("✓ ", "green"),
                ("reverted ", "bold"),
                f"lineage entry {entry_id} on {t.name} (was {entry.state.lower()}): {what}",
            )
        )


@_command("push")
def push(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    files: FilesArg,
    fmt: FormatOpt = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            "-i",
            help="Replace only START/END (aligned to chunks); default: all the table's data.",
        ),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Replace a table's data with files (Spark) in one consistent, revertible push.

    Readers see the old data until the push completes, then only the new. On a table
    with consistent_push=true the push is a lineage entry that `lamina revert` rolls back.
    """
    window = Interval.parse(interval) if interval is not None else None
    paths = _check_inputs(files)
    fmt = fmt or format_of(paths)
    err = _console(stderr=True)
    started = time.monotonic()
    with _connect(ctx, catalog, warehouse) as cat:
        t = _load(cat, name)
        if window is not None:
            t.granularity.check_aligned(window)
        if not t.consistent_push:
            err.print(
                Text(
                    f"note: table {t.name} has consistent_push=false: the push is one atomic "
                    "commit but cannot be reverted; create tables with -p consistent_push=true",
                    style="yellow",
                )
            )
        spark = _start_spark(err)
        meta = _input_meta("lamina push", fmt, paths)
        try:
            with _SparkProgress(spark, err) as progress, _spark_errors():
                progress.phase("reading")
                df = read_spark_files(spark, fmt, paths, t.schema)
                progress.phase("pushing")
                commit = t.refresh(df, interval=window, metadata=meta)
        except LaminaError as exc:
            raise CliError(
                f"push failed, nothing was published (readers still see the previous data): {exc}"
            ) from None
        tasks = progress.tasks
        elapsed = time.monotonic() - started
        _print_commit(t, commit, False, elapsed, tasks)
        entry = _entry_of_push(t, commit) if t.consistent_push else None
        if entry is not None:
            _console().print(
                Text.assemble(
                    "  lineage entry ",
                    (entry.id, "bold"),
                    f" ({entry.state.lower()}): replaced "
                    f"{_n(len(entry.segments_from), 'segment')}; undo with ",
                    (f"lamina revert {t.name} {entry.id}", "bold"),
                )
            )


def _parse_now(text: str) -> dt.datetime:
    us = to_us(text)  # InvalidIntervalError explains the format
    if not MIN_US < us < MAX_US:
        raise CliError(f"--now must be a point in time, not {text!r}")
    try:
        return from_us(us)
    except OverflowError:
        raise CliError(f"--now {text!r} is out of range") from None


@_command("retention")
def retention(
    ctx: typer.Context,
    table: Annotated[
        list[str] | None,
        typer.Option("--table", "-t", help="Only this table (repeatable). Default: all."),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Act as if it were this time (ISO-8601, naive = UTC), e.g. to catch up.",
            show_default=False,
        ),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Delete what pushes, rollbacks, overwrites and deletes left behind, and orphan files
    (each after its retention period: table properties replaced_segments_retention,
    lineage_cleanup_retention, orphan_grace_period)."""
    at = _parse_now(now) if now is not None else None
    with _connect(ctx, catalog, warehouse) as cat:
        names = [_load(cat, n).name for n in table] if table else None
        report = cat.run_retention(now=at, tables=names)
        _console().print(
            Text.assemble(
                ("✓ ", "green"),
                f"retention on {_n(len(names), 'table') if names else 'all tables'}: deleted "
                f"{_n(report.segment_files, 'segment file')} and "
                f"{_n(report.orphan_files, 'orphan file')}",
            )
        )


@_command("orphans")
def orphans(
    ctx: typer.Context,
    table: Annotated[
        list[str] | None,
        typer.Option("--table", "-t", help="Only this table (repeatable). Default: all."),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List files in the tables' data folders that no catalog row names (relative to the
    warehouse root; one per line). `lamina retention` deletes those past the grace period."""
    with _connect(ctx, catalog, warehouse) as cat:
        names = [_load(cat, n).name for n in table] if table else None
        found = cat.find_orphans(tables=names)
        out = _console()
        for rel in found:
            out.print(Text(rel), soft_wrap=True)
        _console(stderr=True).print(Text(_n(len(found), "orphan file"), style="dim"))


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


@_command("serve")
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on.", min=0, max=65535)
    ] = 8080,
    log_level: Annotated[
        str, typer.Option("--log-level", help="uvicorn log level (info, warning...).")
    ] = "info",
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Serve the REST API (tables, segments, lineage; start/end/revertReplaceSegments).

    POST calls need `Authorization: Bearer $LAMINA_API_TOKEN` when that variable is set.
    OpenAPI at /openapi.json, docs at /docs.
    """
    from lamina import server

    if not os.environ.get(server.TOKEN_ENV) and host not in _LOOPBACK:
        _console(stderr=True).print(
            Text(
                f"warning: listening on {host} without ${server.TOKEN_ENV}: anyone who can "
                "reach it can replace and revert segments",
                style="yellow",
            )
        )
    glob = ctx.find_object(_Globals) or _Globals()
    server.serve(
        host,
        port,
        catalog=catalog or glob.catalog,
        warehouse=warehouse or glob.warehouse,
        log_level=log_level,
    )


if __name__ == "__main__":
    app()
