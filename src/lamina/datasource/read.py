"""Batch reads through ``spark.read.format("lamina")``: the driver plans one snapshot's
files (timeline, lineage, ``asOf``, ``interval``, a filter on the time column) with
each file's deletion vector; tasks read them with pyarrow and apply the vectors."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from lamina.changes import change_schema
from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import AsOf
from lamina.core.versions import AtTime, travel_text
from lamina.datasource import options as opts
from lamina.datasource.tasks import FilePiece, ReadSpec, read_pieces
from lamina.datasource.write import open_table
from lamina.errors import InvalidArgumentError, SchemaError
from lamina.io.reader import check_columns
from lamina.operations.handle import TableHandle

#: A read task takes files up to about this many bytes (Spark's maxPartitionBytes),
#: and each task at least this many, so small files do not cost a task each.
PARTITION_BYTES = 128 * 1024 * 1024
MIN_PARTITION_BYTES = 16 * 1024 * 1024
#: A read is split into at least this many tasks when it has the files for them.
MIN_PARTITIONS = 8


def spark_schema_of(arrow: pa.Schema) -> Any:
    """The Spark struct of an Arrow schema of table columns (a change feed's too)."""
    from lamina.engines.spark_schema import arrow_to_spark_schema  # loads pyspark

    return arrow_to_spark_schema(arrow)


def read_schema(options: dict[str, str]) -> Any:
    """The Spark schema a read returns (with ``readChangeFeed``, a change feed's: Spark
    asks before it says whether the read is a stream).
    Raises InvalidArgumentError, TableNotFoundError, SchemaError."""
    o = opts.parse(options, "any_read")
    cat, h = open_table(o)
    try:
        cols = _columns(h, o)
        arrow = pa.schema([h.schema.field(c) for c in cols])
        if o.flag("readchangefeed"):
            arrow = change_schema(arrow)
        return spark_schema_of(arrow)
    finally:
        cat.close()


def _columns(h: TableHandle, o: opts.SourceOptions) -> list[str]:
    """The columns a read returns. Raises SchemaError."""
    cols = check_columns(h.schema, o.columns())
    return list(h.schema.names) if cols is None else cols


def as_of_of(o: opts.SourceOptions) -> AsOf:
    """The snapshot the options name: ``versionAsOf`` (a table version),
    ``timestampAsOf`` (an ISO-8601 time: the latest version completed then) or
    ``asOf`` (either); at most one of them. Raises InvalidArgumentError."""
    given = {k: v for k in ("asof", "versionasof", "timestampasof") if (v := o.get(k)) is not None}
    if not given:
        return None
    if len(given) > 1:
        names = " and ".join(opts.SPELLING[k] for k in given)
        raise InvalidArgumentError(f"options {names} both name a snapshot: give one")
    ((key, text),) = given.items()
    what = f"option {opts.SPELLING[key]}"
    t = text.strip()
    if key == "versionasof" and not t.isdigit():
        raise InvalidArgumentError(
            f"{what}={text!r}: give a table version, e.g. '17' (Commit.version in t.history())"
        )
    if key == "timestampasof" and t.isdigit():
        raise InvalidArgumentError(
            f"{what}={text!r}: give an ISO-8601 time, e.g. '2024-01-02T03:00:00Z' (a version "
            "goes to versionAsOf)"
        )
    got = travel_text(t, what)
    return t if isinstance(got, AtTime) else got


@dataclass(frozen=True)
class ReadPlan:
    """What a reader carries to Spark's planner and tasks (it pickles)."""

    options: dict[str, str]
    spec: ReadSpec
    interval: Interval | None  # the ``interval`` option's (rows outside it are dropped)
    as_of: AsOf


class PiecesPartition(InputPartition):
    """The pieces of files one read task reads."""

    def __init__(self, pieces: list[FilePiece]) -> None:
        super().__init__(None)
        self.pieces = pieces


class LaminaReader(DataSourceReader):
    """A batch read of one snapshot."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self.pruned: Interval | None = None  # from filters Spark pushed (a superset)

    @staticmethod
    def plan_spec(options: dict[str, str], schema: Any) -> ReadPlan:
        """Check the options and find the table. Raises InvalidArgumentError,
        TableNotFoundError, SchemaError, SnapshotNotFoundError."""
        from pyspark.sql.pandas.types import to_arrow_schema  # loads pyspark

        o = opts.parse(options, "read")
        cat, h = open_table(o)
        try:
            cols = _columns(h, o)
            as_of = as_of_of(o)
            if as_of is not None:  # the version, pinned (a time names it once)
                as_of = h.snapshot(as_of).seq
            out = to_arrow_schema(schema, timezone="UTC")
            if out.names != cols:
                raise SchemaError(
                    f"a schema given to a lamina read must be the table's (columns {cols}); "
                    "leave .schema() out, and choose columns with the option columns"
                )
            rec = h.record
            spec = ReadSpec(
                h.ctx.warehouse.location, h.name, rec.schema, rec.time_column, cols, out
            )
            return ReadPlan(dict(options), spec, o.interval(), as_of)
        finally:
            cat.close()

    def partitions(self) -> list[InputPartition]:
        o = opts.parse(self.plan.options, "read")
        cat, h = open_table(o)
        try:
            return list(_partitions(h, self.plan, self.pruned))
        finally:
            cat.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PiecesPartition):
            return iter(())  # an empty read (Spark asks for one partition at least)
        return read_pieces(self.plan.spec, partition.pieces)


class PrunedReader(LaminaReader):
    """:class:`LaminaReader` taking the filters on the time column Spark pushes: only
    the chunks they can match are read (Spark still applies every filter)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802
        spec = self.plan.spec
        tc = spec.time_column
        bound = ETERNITY
        for f in filters:
            if tc is not None and getattr(f, "attribute", None) == (tc,):
                got = _bounds(f, spec.schema.field(tc).type)
                if got is not None:
                    bound = bound.intersection(got) or Interval.of(bound.start, bound.start)
            yield f  # pruning is by chunk: Spark keeps filtering rows
        self.pruned = None if bound == ETERNITY else bound


def planner_pushes_filters() -> bool:
    """Whether the Spark planner calling :meth:`LaminaDataSource.reader` pushes filters
    (``spark.sql.python.filterPushdown.enabled``; the planner refuses a reader that
    takes filters when it is off). Spark's Python worker does not pass its conf to the
    data source: the planner that pushes filters is a module of its own, known by
    name; any other caller gets the reader without pushdown."""
    frame = sys._getframe(2)  # reader() is called by the planner
    return str(frame.f_globals.get("__name__", "")).endswith("data_source_pushdown_filters")


def _bounds(f: Filter, t: pa.DataType) -> Interval | None:
    """The times a filter on the time column lets through, in µs (None: any)."""
    if isinstance(f, EqualTo | EqualNullSafe):
        v = _micros(f.value, t)
        return None if v is None else Interval.of(v, v + 1)
    if isinstance(f, In):
        got = [_micros(v, t) for v in f.value]
        vs = [v for v in got if v is not None]
        if not vs or len(vs) < len(got):
            return None
        return Interval.of(min(vs), max(vs) + 1)
    v = _micros(getattr(f, "value", None), t)
    if v is None:
        return None
    if isinstance(f, GreaterThan | GreaterThanOrEqual):
        return Interval.of(v, ETERNITY.end)
    if isinstance(f, LessThan):
        return Interval.of(ETERNITY.start, v)
    if isinstance(f, LessThanOrEqual):
        return Interval.of(ETERNITY.start, v + 1)
    return None


def _micros(value: Any, t: pa.DataType) -> int | None:
    """A pushed value of the time column in µs since the epoch (UTC), rounded outward
    enough that no row it lets through is pruned. Spark hands a TIMESTAMP (LTZ) as a
    naive datetime in this process's local time zone, a TIMESTAMP_NTZ as its wall
    clock (lamina's chunks read it as UTC), a DATE as a date."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return _epoch_us(value.astimezone(dt.UTC).replace(tzinfo=None))
        if pa.types.is_timestamp(t) and t.tz is not None:
            local = time.mktime(value.timetuple())  # as pyspark made it: local time
            return int(local) * 1_000_000 + value.microsecond
        return _epoch_us(value)
    if isinstance(value, dt.date):
        return _epoch_us(dt.datetime(value.year, value.month, value.day))
    return None


def _epoch_us(naive_utc: dt.datetime) -> int:
    delta = naive_utc - dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _partitions(
    h: TableHandle, plan: ReadPlan, pruned: Interval | None
) -> Iterator[PiecesPartition]:
    """The snapshot's files as read tasks, each of about :data:`PARTITION_BYTES`."""
    interval = plan.interval
    if pruned is not None:
        if pruned.start == pruned.end:
            return  # the filters match no time
        wide = _outward(h, pruned)
        interval = wide if interval is None else interval.intersection(wide)
        if interval is None:
            return
    scan = h.scan(plan.as_of, interval)
    files = {t.segment.location: t.segment for t in scan.tasks}
    pieces = []
    for path, keep in scan.reads():
        hidden = scan.deletes.get(path)
        seg = files[path]
        if hidden is not None and len(hidden) >= seg.row_count:
            continue  # every record of the file superseded: nothing to read
        pieces.append((FilePiece(path, keep, hidden), seg.size_bytes))
    yield from packed(pieces)


def _outward(h: TableHandle, iv: Interval) -> Interval:
    """``iv`` widened to whole chunks of the table's granularity."""
    g = h.granularity
    if h.time_column is None:
        return ETERNITY
    start = g.floor(iv.start) if iv.start > ETERNITY.start else iv.start
    end = iv.end
    if iv.end < ETERNITY.end:
        last = g.floor(iv.end - 1)
        end = g.next_start(last)
    return Interval.of(start, end)


def packed(pieces: list[tuple[FilePiece, int]]) -> Iterator[PiecesPartition]:
    """Pieces gathered into tasks of about equal bytes, in plan order."""
    total = sum(size for _, size in pieces)
    target = max(MIN_PARTITION_BYTES, min(PARTITION_BYTES, total // MIN_PARTITIONS))
    group: list[FilePiece] = []
    held = 0
    for piece, size in pieces:
        if group and held + size > target:
            yield PiecesPartition(group)
            group, held = [], 0
        group.append(piece)
        held += size
    if group:
        yield PiecesPartition(group)
