"""Streams: ``writeStream.format("lamina")`` (one commit per micro-batch, exactly once)
and ``readStream.format("lamina")`` (the table's change feed; offsets are commit seqs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
)

from lamina.datasource import options as opts
from lamina.datasource.read import PiecesPartition, packed
from lamina.datasource.tasks import (
    FilePiece,
    ReadSpec,
    WriteSpec,
    read_pieces,
    staging_of,
    write_partition,
)
from lamina.datasource.write import StagedMessage, discard, open_table, publish
from lamina.errors import ChangeFeedError, InvalidArgumentError, WarehouseError
from lamina.failpoints import failpoint
from lamina.meta import tables as table_rows
from lamina.operations.kinds import kind_of

log = logging.getLogger("lamina")

#: The app id prefix of a stream's exactly-once transactions (``txn``).
STREAM_APP = "stream"


def stream_identity(o: opts.SourceOptions) -> str:
    """The app id a stream's micro-batches commit under: ``txnAppId`` if given, then
    the streaming query's id, which Spark keeps in the checkpoint (so a restart from
    the same checkpoint has the same identity, and a new checkpoint a new one: its
    batch ids, which start at 0 again, are never taken for batches applied already).
    Raises InvalidArgumentError (no checkpoint), WarehouseError (unreadable)."""
    location = o.get("checkpointlocation")
    if not location:
        raise InvalidArgumentError(
            f"a stream into lamina table {o.table!r} needs a checkpoint: "
            '.option("checkpointLocation", "/path") (exactly once rests on it)'
        )
    query = _query_id(location)
    app = o.get("txnappid")
    return f"{app or STREAM_APP}:{query}"


def _query_id(checkpoint: str) -> str:
    """The id in the checkpoint's ``metadata`` file (Spark writes it when the query
    first starts, and reads it on every restart). Raises WarehouseError."""
    import pyarrow.fs as pafs  # loads pyarrow

    try:
        if "://" in checkpoint and not checkpoint.startswith("file:"):
            fs, path = pafs.FileSystem.from_uri(checkpoint)
        else:
            fs, path = pafs.LocalFileSystem(), checkpoint.removeprefix("file:").replace("//", "/")
        with fs.open_input_stream(path.rstrip("/") + "/metadata") as f:
            text = f.read().decode()
        query = json.loads(text.splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise WarehouseError(
            f"cannot read the streaming query's id from checkpoint {checkpoint!r} ({exc}); "
            "the driver must see the checkpoint location"
        ) from None
    return str(query)


class StreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch: tasks stage files, :meth:`commit` publishes them in one commit
    carrying ``txn=(stream identity, batch id)``; a batch replayed after a failure is
    skipped (and logged)."""

    def __init__(self, o: opts.SourceOptions, spec: WriteSpec) -> None:
        self.options = o
        self.spec = spec
        self.identity = stream_identity(o)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        got = write_partition(self.spec, iterator)
        return StagedMessage(got.partition, got.attempt, got.files, got.rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        spec = self._batch(batchId)
        txn = (self.identity, int(batchId))
        meta = {"stream": self.identity, "batch": int(batchId)}
        failpoint("datasource.stream.commit", table=spec.table, batch=batchId)
        publish(self.options, spec, messages, False, None, txn, meta)
        failpoint("datasource.stream.committed", table=spec.table, batch=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        discard(self.options, self._batch(batchId))

    def _batch(self, batch_id: int) -> WriteSpec:
        """The spec whose staging directory holds batch ``batch_id``'s files."""
        return replace(self.spec, staging=staging_of(self.spec, batch_id))


class ChangeFeedReader(DataSourceStreamReader):
    """A table as a stream; offsets are commit seqs. With ``readChangeFeed``, each
    micro-batch is the rows the commits of seqs ``(start, end]`` inserted or deleted
    (``_change``, ``_commit_id``, ``_commit_seq``); without, the rows they added, and
    a commit that deleted or replaced rows stops the stream (ChangeFeedError), as in
    Delta. Planned on the driver, read by the tasks."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema  # loads pyspark

        o = opts.parse(options, "stream_read")
        self.options = dict(options)
        rows, commits = o.whole("maxrowspertrigger", 1), o.whole("maxcommitspertrigger", 1)
        if rows is not None and commits is not None:
            raise InvalidArgumentError("give maxRowsPerTrigger or maxCommitsPerTrigger, not both")
        self.max_rows, self.max_commits = rows, commits
        self.start = o.whole("startingseq", 0) or 0
        cat, h = open_table(o)
        try:
            cols = o.columns()
            names = list(h.schema.names) if cols is None else cols
            out = to_arrow_schema(schema, timezone="UTC")
            rec = h.record
            feed = o.flag("readchangefeed")
            self.spec = ReadSpec(
                h.ctx.warehouse.location, h.name, rec.schema, rec.time_column, names, out, feed
            )
        finally:
            cat.close()

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        return {"seq": self.start}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_commits is not None:
            return ReadMaxFiles(self.max_commits)  # a commit counts as one "file"
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        o = opts.parse(self.options, "stream_read")
        cat, h = open_table(o)
        try:
            last = table_rows.latest_seqs(h.ctx.db, [h.name])[h.name.lower()][1]
            at = int(start["seq"])
            if last <= at or isinstance(limit, ReadAllAvailable):
                return {"seq": max(last, at)}
            if isinstance(limit, ReadMaxFiles):
                return {"seq": min(last, at + max(1, limit.max_files))}
            if isinstance(limit, ReadMaxRows):
                return {"seq": _rows_limited(h, at, last, limit.max_rows)}
            return {"seq": last}
        finally:
            cat.close()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        after, until = int(start["seq"]), int(end["seq"])
        if until <= after:
            return []
        o = opts.parse(self.options, "stream_read")
        cat, h = open_table(o)
        try:
            _, pieces = kind_of(h).change_plan(h, after, until)
            sizes = {s.location: s.size_bytes for s in h.snapshot(all_published=True).segments}
        finally:
            cat.close()
        if not self.spec.tagged:
            gone = next((p for p in pieces if p.change == "delete"), None)
            if gone is not None:
                raise ChangeFeedError(
                    f"commit {gone.commit_id} (seq {gone.seq}) of {h.name!r} deleted or "
                    "replaced rows, which a stream of appended rows cannot carry: read the "
                    'change feed (.option("readChangeFeed", "true")), or restart the stream '
                    f'after it (.option("startingSeq", "{gone.seq}") with a new checkpoint)'
                )
        planned = [
            (
                FilePiece(p.path, p.keep, take=p.positions, tag=(p.change, p.commit_id, p.seq)),
                sizes.get(p.path, 1),
            )
            for p in pieces
        ]
        return list(packed(planned))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PiecesPartition):
            return iter(())
        return read_pieces(self.spec, partition.pieces)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the feed is read from the catalog on demand."""


def _rows_limited(h: Any, after: int, last: int, max_rows: int) -> int:
    """The last seq after ``after`` whose commits together add at most ``max_rows``
    rows (at least one commit)."""
    done = sorted(
        (c for c in h.history() if c.seq is not None and after < c.seq <= last),
        key=lambda c: c.seq,
    )
    sizes = {s.id: s.row_count for s in h.snapshot(all_published=True).segments}
    total, end = 0, after
    for c in done:
        rows = sum(sizes.get(sid, 0) for sid in c.added)
        if end > after and total + rows > max_rows:
            break
        total += rows
        end = c.seq
    return end
