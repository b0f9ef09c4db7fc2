"""What runs in Spark's tasks: reading planned pieces of segment files, and writing a
partition's rows as staged segment files. Nothing here opens the catalog: a task needs
only the warehouse (a local path or an object store URI) and what the driver planned.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina.core.interval import Granularity, Interval
from lamina.core.model import NewSegment
from lamina.errors import SnapshotNotFoundError, WarehouseError
from lamina.failpoints import failpoint
from lamina.io.arrow import conform, storage_schema, time_filter
from lamina.io.warehouse import Warehouse
from lamina.io.writer import split_by_chunk, write_parts

#: Rows a task hands Spark at a time (Arrow batches; Spark's own default is 10,000).
READ_BATCH_ROWS = 65_536
#: A writing task gathers this many bytes of Arrow data before it splits them by chunk
#: and writes them (bounded memory; a larger partition makes several files per chunk).
WRITE_FLUSH_BYTES = 128 * 1024 * 1024

_WAREHOUSES: dict[str, Warehouse] = {}


def warehouse(location: str) -> Warehouse:
    """The warehouse at ``location``, opened once per Python worker."""
    wh = _WAREHOUSES.get(location)
    if wh is None:
        wh = _WAREHOUSES[location] = Warehouse(location)
    return wh


# -- reads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FilePiece:
    """Rows of one segment file to read: all of them, less ``hidden`` (deletion vector
    positions), or only those at ``take``; of those, the ones inside ``keep`` (None:
    all). ``tag``: the change feed's (change, commit id, seq) of these rows."""

    path: str  # full path in the warehouse's filesystem
    keep: Interval | None = None
    hidden: np.ndarray | None = None
    take: np.ndarray | None = None
    tag: tuple[str, int, int] | None = None


@dataclass(frozen=True)
class ReadSpec:
    """What every read task of one scan shares."""

    location: str  # the warehouse
    table: str
    schema: pa.Schema  # the table's
    time_column: str | None
    columns: list[str]  # what the scan returns, in order
    out_schema: pa.Schema  # the Arrow form of the scan's Spark schema (what Spark takes)
    tagged: bool = False  # add the change feed's columns


def read_pieces(spec: ReadSpec, pieces: list[FilePiece]) -> Iterator[pa.RecordBatch]:
    """The rows of ``pieces`` as Arrow batches of the scan's Spark schema.
    Raises SnapshotNotFoundError (a file cleaned up since the scan was planned)."""
    wh = warehouse(spec.location)
    stored = storage_schema(spec.schema)
    for piece in pieces:
        try:
            yield from _read_piece(wh, spec, stored, spec.out_schema, piece)
        except FileNotFoundError as exc:
            raise SnapshotNotFoundError(
                f"a file of table {spec.table!r} no longer exists ({exc}); retention or a "
                "push cleaned it up after this read was planned — run the query again"
            ) from None


def _read_piece(
    wh: Warehouse, spec: ReadSpec, stored: pa.Schema, out: pa.Schema, piece: FilePiece
) -> Iterator[pa.RecordBatch]:
    tc = spec.time_column
    cols = list(spec.columns)
    if piece.keep is not None and tc is not None and tc not in cols:
        cols.append(tc)
    f = pq.ParquetFile(piece.path, filesystem=wh.fs)
    present = [c for c in cols if c in f.schema_arrow.names]
    meta = f.metadata
    keepers = _kept_rows(piece, meta.num_rows)
    groups: list[int] | None = None
    if keepers is not None:  # skip the row groups that hold no row to read
        starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        groups = [g for g in range(meta.num_row_groups) if keepers[starts[g] : starts[g + 1]].any()]
        keepers = np.concatenate(
            [keepers[starts[g] : starts[g + 1]] for g in groups] or [keepers[:0]]
        )
    at = 0
    for batch in f.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=groups, columns=present):
        n = batch.num_rows
        data = pa.Table.from_batches([batch])
        if keepers is not None:
            data = data.filter(pa.array(keepers[at : at + n]))
        at += n
        if data.num_rows:
            yield from _finish(spec, stored, out, cols, piece, data)


def _finish(
    spec: ReadSpec,
    stored: pa.Schema,
    out: pa.Schema,
    cols: list[str],
    piece: FilePiece,
    data: pa.Table,
) -> Iterator[pa.RecordBatch]:
    """Rows read from a file as the scan returns them: typed as the table is now, cut
    to the piece's interval, tagged for a change feed, in Spark's Arrow form."""
    tc = spec.time_column
    data = _as_stored(data, stored, cols)
    if piece.keep is not None and tc is not None:
        import pyarrow.dataset as ds  # loads pandas (pyarrow's dataset module)

        data = ds.dataset(data).to_table(filter=time_filter(stored.field(tc), piece.keep))
        if data.num_rows == 0:
            return
    data = data.select(spec.columns)
    if spec.tagged:
        assert piece.tag is not None
        change, commit_id, seq = piece.tag
        k = data.num_rows
        data = (
            data.append_column("_change", pa.array([change] * k, pa.string()))
            .append_column("_commit_id", pa.array(np.full(k, commit_id, np.int64)))
            .append_column("_commit_seq", pa.array(np.full(k, seq, np.int64)))
        )
    yield from data.cast(out).to_batches()


def _kept_rows(piece: FilePiece, rows: int) -> np.ndarray | None:
    """Per row of the file (``rows``), whether the piece reads it (None: every row)."""
    if piece.take is not None:
        mask = np.zeros(rows, bool)
        mask[piece.take] = True
        return mask
    if piece.hidden is not None and len(piece.hidden):
        mask = np.ones(rows, bool)
        mask[piece.hidden] = False
        return mask
    return None


def _as_stored(data: pa.Table, stored: pa.Schema, cols: list[str]) -> pa.Table:
    """Rows of a file as the table's schema types them now: nulls for a column added
    since the file was written, widened types cast."""
    arrays = [
        data.column(c).cast(stored.field(c).type)
        if c in data.column_names
        else pa.nulls(data.num_rows, stored.field(c).type)
        for c in cols
    ]
    return pa.table(arrays, names=cols)


# -- writes --------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteSpec:
    """What every writing task of one Spark write shares: where its files go and how
    rows become segments (the table's schema, time column, chunks, target rows)."""

    location: str  # the warehouse
    table: str
    schema: pa.Schema
    time_column: str | None
    granularity: Granularity
    target_rows: int
    staging: str  # directory (relative to the warehouse) of this write's files


@dataclass
class StagedFiles:
    """A task's message to the driver: the segment files one attempt wrote (Spark's
    ``WriterCommitMessage``; it only needs to pickle)."""

    partition: int
    attempt: int
    files: list[NewSegment] = field(default_factory=list)
    rows: int = 0


#: The local property Spark's micro-batch execution sets on its tasks: the batch id.
BATCH_ID = "streaming.sql.batchId"


def staging_of(spec: WriteSpec, batch: str | int | None) -> str:
    """The directory of a write's staged files: a stream's has one per micro-batch, so
    a batch's commit or abort touches only its own files."""
    return spec.staging if batch is None else f"{spec.staging}/b{int(batch)}"


def write_partition(spec: WriteSpec, batches: Iterator[pa.RecordBatch]) -> StagedFiles:
    """Write one partition's rows as segment files under the write's staging
    directory, in a directory of this task attempt's own (a retried or speculative
    attempt never writes over another's files). Raises SchemaError (a lossy cast, a
    null in a NOT NULL column), TimeColumnError, WarehouseError (a file not written)."""
    from pyspark import TaskContext  # loads pyspark (in a Spark task: loaded already)

    tc = TaskContext.get()
    partition = tc.partitionId() if tc is not None else 0
    attempt = tc.attemptNumber() if tc is not None else 0
    batch = tc.getLocalProperty(BATCH_ID) if tc is not None else None
    wh = warehouse(spec.location)
    rel = f"{staging_of(spec, batch)}/p{partition:05d}-a{attempt}-{uuid.uuid4().hex[:6]}"
    out = StagedFiles(partition, attempt)
    failpoint("datasource.write.begin", table=spec.table, partition=partition, attempt=attempt)
    pending: list[pa.RecordBatch] = []
    size = 0

    def flush() -> None:
        if not pending:
            return
        need = () if spec.time_column is None else (spec.time_column,)
        data = conform(pa.Table.from_batches(pending), spec.schema, need)
        pending.clear()
        parts = split_by_chunk(data, spec.time_column, spec.granularity, spec.target_rows)
        try:
            out.files += write_parts(wh, f"{rel}/w{len(out.files):05d}", parts)
        except OSError as exc:  # the store is unreachable, full, refuses the write
            raise WarehouseError(
                f"a task writing to lamina table {spec.table!r} could not write its files "
                f"under {spec.staging} ({exc}); the write publishes nothing"
            ) from None
        out.rows += data.num_rows
        failpoint(
            "datasource.write.flushed", table=spec.table, partition=partition, attempt=attempt
        )

    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.nbytes
        if size >= WRITE_FLUSH_BYTES:
            flush()
            size = 0
    flush()
    return out
