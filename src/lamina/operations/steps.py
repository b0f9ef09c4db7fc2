"""A table's write steps, shared by its write methods, transactions, pushes and
upserts: data validated into a producer of segment files, one commit publishing them,
the chunks an overwrite replaces, and the interval arguments they take."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lamina.core.args import whole_number
from lamina.core.columns import required_columns
from lamina.core.interval import ETERNITY, Granularity, Interval
from lamina.core.model import Commit, CommitAction, NewSegment, txn_of
from lamina.core.planner import allocate
from lamina.core.plans import LineageBatch, PublishPlan, write_plan
from lamina.core.timeline import Timeline
from lamina.errors import (
    AlreadyAppliedError,
    ChunkLayoutError,
    CommitConflictError,
    DataOutsideIntervalError,
    InvalidArgumentError,
    LaminaError,
    SchemaError,
    StreamCheckpointError,
)
from lamina.meta import app_txns
from lamina.meta.segments import live_spans
from lamina.operations.handle import TableHandle
from lamina.operations.retry import retrying

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.upsert import UpsertBatch
    from lamina.io.writer import ChunkPart

log = logging.getLogger("lamina")


class Finish(Protocol):
    """A last step of a write: before it publishes, (its plan, its commit's directory)
    -> the plan to publish, which may name more files written there; after, what to do
    with those the publish left out."""

    def __call__(self, plan: PublishPlan, where: str) -> PublishPlan: ...

    def published(self, plan: PublishPlan, commit: Commit) -> None: ...


#: A RecordBatchReader is written in pieces of about this many bytes of Arrow data.
STREAM_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Produced:
    """Files lamina's own code writes into a commit's directory (or wrote already, e.g.
    Spark's tasks), given to :func:`write` in place of a caller's data (a caller's
    function is refused, not run). ``again``: writes the same rows again split by a
    ``refine`` (see :func:`refinement`; None: the files cannot be split again)."""

    files: Callable[[str], list[NewSegment]]
    again: Callable[..., Callable[[str], list[NewSegment]]] | None = None


def retried(retries: int, write: Callable[[], Commit], data: Any = None) -> Commit:
    """``write()``, again up to ``retries`` times after a conflict that is safe to
    retry (:func:`lamina.operations.retry.retrying`) — not when ``data`` is a stream,
    which the first try consumed. Raises the last CommitConflictError,
    InvalidArgumentError (``retries`` is not a whole number)."""
    retries = whole_number(retries, "retries", InvalidArgumentError)

    def again(attempt: int, exc: CommitConflictError) -> None:
        if not refinable(data):
            raise CommitConflictError(
                f"{exc}; not retried: the RecordBatchReader was read by this try and "
                "holds no rows for another — write its batches again (or pass a Table)",
                exc.other,
                retryable=True,
            ) from None

    return retrying(lambda _: write(), retries + 1, again=again)


def aligned(
    table: TableHandle, interval: Interval | str | tuple[Any, Any] | None
) -> Interval | None:
    """``interval`` as an Interval aligned to the table's chunks (all time for a table
    without a time column; None: not given). Raises InvalidIntervalError."""
    if interval is not None:
        iv = Interval.coerce(interval)
    elif table.time_column is None:
        iv = ETERNITY
    else:
        return None
    table.granularity.check_aligned(iv)
    return iv


def producer(
    table: TableHandle,
    data: Any,
    action: str,
    interval: Interval | None,
    layout: tuple[Granularity, int] | None = None,
    refine: Mapping[Interval, Callable[[int], Interval]] | None = None,
) -> Callable[[str], list[NewSegment]]:
    """Validate ``data`` now; return the step that writes its files under a commit.

    A ``pyarrow.RecordBatchReader`` is written a piece at a time: its batches are
    gathered until they hold :data:`STREAM_FLUSH_BYTES`, then split by chunk and
    written, so memory stays bounded whatever the input's size. The first piece is
    read and checked here, before the commit opens; a later piece that fails
    aborts the commit (its files are deleted). As a stream cannot be read twice, each
    piece is split up front the way :func:`refinement` allocates where a compaction
    cut its chunks finer. Raises SchemaError, TimeColumnError,
    DataOutsideIntervalError."""
    import pyarrow as pa  # loads numpy, pyarrow

    from lamina.io.arrow import (  # loads numpy, pyarrow
        conform,
        gathered,
        is_spark_dataframe,
        to_arrow_table,
    )
    from lamina.io.writer import split_by_chunk, write_parts  # loads numpy, pyarrow

    ctx = table.ctx
    if isinstance(data, Produced):
        return data.files
    if is_spark_dataframe(data):
        from lamina.engines.spark import spark_producer  # loads numpy, pyarrow

        target = table.target_rows_per_segment
        return spark_producer(table.record, ctx.warehouse, target, data, refine)
    rec = table.record
    granularity, target = layout or (rec.granularity, table.target_rows_per_segment)
    stream = isinstance(data, pa.RecordBatchReader)
    pieces = gathered(data, STREAM_FLUSH_BYTES) if stream else iter([to_arrow_table(data)])

    required = required_columns(rec)
    seen = [0]  # rows of the pieces before: errors name rows of the whole input

    def split(piece: pa.Table) -> list[ChunkPart]:
        try:
            conformed = conform(piece, rec.schema, required, seen[0])
            seen[0] += piece.num_rows
        except SchemaError as exc:
            hint = _reload_hint(table)
            if not hint:
                raise
            raise type(exc)(f"{exc}{hint}") from None
        parts = split_by_chunk(conformed, rec.time_column, granularity, target, refine)
        if stream and refine is None and layout is None:  # cannot be split again later
            finer = refinement(table, [p.chunk for p in parts])
            if finer:
                parts = split_by_chunk(conformed, rec.time_column, granularity, target, finer)
        check_inside(action, [p.chunk for p in parts], interval)
        return parts

    first = [split(next(pieces))]  # fail before writing

    def parts() -> Iterator[list[ChunkPart]]:
        yield first.pop()  # not kept once written
        for piece in pieces:
            yield split(piece)

    wh = ctx.warehouse

    def produce(commit_rel: str) -> list[NewSegment]:
        files: list[NewSegment] = []
        for some in parts():
            files += write_parts(wh, commit_rel, some)
            del some
        return files

    return produce


def _reload_hint(table: TableHandle) -> str:
    """Advice for data refused by a handle whose schema is older than the catalog's
    (columns added or widened by another handle or process since it was loaded)."""
    try:
        _, changed = table.reloaded()
    except LaminaError:
        return ""
    if not changed:
        return ""
    return (
        f" (columns {changed} were added or widened since this handle was loaded: "
        "cat.load_table again)"
    )


def write(
    table: TableHandle,
    action: str,
    data: Any,
    interval: Interval | None,
    metadata: dict[str, Any] | None,
    lineage_entry: str | None = None,
    complete: bool = False,
    txn: tuple[str, int] | None = None,
    upsert: Callable[[list[NewSegment]], UpsertBatch] | None = None,
    remove: tuple[str, ...] = (),
    remake: Callable[..., Callable[[str], list[NewSegment]]] | None = None,
    finish: Finish | None = None,
) -> Commit:
    """One commit writing ``data`` (or the files of a :class:`Produced`);
    ``upsert``: the records of the files written, to resolve by key at publish;
    ``finish``: a last step before it publishes, which may make more files under the
    commit's directory and give another plan (a copy-on-write upsert's rewrites);
    ``remove``: live segments it removes too (a refresh's). A ``txn`` applied already
    writes nothing and returns the commit that applied it.

    An append into a chunk that chunks of another granularity cover in part is
    written again, split the way Druid allocates (:func:`refinement`): by ``remake``
    (called with ``refine=``), or by :func:`producer` for data that can be read twice.
    Raises CommitConflictError, SchemaError, TimeColumnError, DataOutsideIntervalError,
    ChunkLayoutError."""
    from lamina.write import WriteTransaction  # loads numpy, pyarrow

    ctx = table.ctx
    if txn is not None:
        txn = txn_of(txn)
        done = applied(table, txn)
        if done is not None:  # applied already: write nothing
            return skipped(table, txn, done)
    own = isinstance(data, Produced)
    if remake is None and own:
        remake = data.again
    if remake is None and upsert is None and not own and refinable(data):
        remake = functools.partial(producer, table, data, action, interval)
    produce = data.files if own else producer(table, data, action, interval)
    chunks: list[Interval] = []
    try:
        meta = dict(metadata or {})
        with WriteTransaction(ctx, table.record, action, meta, inflight=True) as w:
            files = produce(w.dir)
            chunks += (f.chunk for f in files)
            overwrite = overwrite_chunks(table, action, [f.chunk for f in files], interval)
            plan = write_plan(
                files,
                overwrite,
                replaced=None if overwrite is None or interval is None else (interval,),
                lineage=None if lineage_entry is None else LineageBatch(lineage_entry, complete),
                txn=txn,
                upsert=None if upsert is None else upsert(files),
                remove_ids=remove,
                columns=table.adding,
            )
            if finish is None:
                return w.publish(plan)
            plan = finish(plan, w.dir)
            done = w.publish(plan)
            finish.published(plan, done)
            return done
    except AlreadyAppliedError as exc:  # a twin published first: nothing of ours shows
        assert txn is not None
        return skipped(table, txn, table.commit(exc.commit_id))
    except ChunkLayoutError:
        refine = None if remake is None else refinement(table, chunks)
        if not refine:
            raise
        assert remake is not None
        again = Produced(remake(refine=refine))
        return write(
            table,
            action,
            again,
            interval,
            metadata,
            lineage_entry,
            complete,
            txn,
            upsert,  # a remake's files: an upsert reads its records from them
            remove,
            finish=finish,
        )


def refinable(data: Any) -> bool:
    """Whether ``data`` can be written again after a first try (not a stream)."""
    import pyarrow as pa  # loads numpy, pyarrow

    return not isinstance(data, pa.RecordBatchReader)


def refinement(
    table: TableHandle, chunks: list[Interval]
) -> dict[Interval, Callable[[int], Interval]]:
    """For each of ``chunks`` that no one visible chunk answers for (a compaction cut
    its day into hours, say): the chunk appended rows of each of its hours go to
    (:func:`lamina.core.planner.allocate`, Druid's allocation, over the timeline's
    visible pieces)."""

    if not chunks or table.time_column is None:
        return {}
    span = Interval.of(min(c.start for c in chunks), max(c.end for c in chunks))
    timeline = Timeline.build(table.snapshot(interval=span).segments)
    out: dict[Interval, Callable[[int], Interval]] = {}
    for c in set(chunks):  # the buckets tried nest in c: only what shows in it counts
        pieces = [(e.interval, e.chunk_interval) for e in timeline.lookup(c)]
        if len(pieces) > 1 or (pieces and pieces[0][0] != c):  # else one chunk takes c
            out[c] = functools.partial(allocate, pieces=pieces, preferred=table.granularity)
    return out


def applied(table: TableHandle, txn: tuple[str, int]) -> Commit | None:
    """The commit that recorded ``txn``'s app version or a later one (None: not
    applied yet). Raises MetadataError for a malformed ``txn``."""

    app, version = txn_of(txn)
    got = app_txns.latest(table.ctx.db, table.record.id, app)
    return table.commit(got[1]) if got is not None and version <= got[0] else None


#: commit metadata of a ``foreach_batch`` write: the streaming query's id (kept in its
#: checkpoint: the same after a restart from it, new with a new checkpoint)
QUERY_ID_KEY = "spark_query_id"


def same_stream(table: TableHandle, app_id: str, query_id: str, batch_id: int) -> None:
    """Raises StreamCheckpointError if the commit that recorded ``app_id``'s latest
    version came from another streaming query than ``query_id`` (writes without a
    query id, e.g. ``txn=`` appends, pass)."""
    prior = applied(table, (app_id, 0))  # the commit of the app's latest version
    last = None if prior is None else prior.metadata.get(QUERY_ID_KEY)
    if last is None or last == query_id:
        return
    raise StreamCheckpointError(
        f"foreach_batch({app_id!r}) on {table.name!r}: batch {batch_id} comes from streaming "
        f"query {query_id}, but {app_id!r} was last written by query {last} (commit "
        f"{prior.id if prior else '?'}): a new checkpoint under an old app id, whose batch "
        "ids start again at 0 and would be skipped as written; nothing was written. Give "
        "this query its own app id (t.foreach_batch('<new-id>')), or restart it from its "
        "old checkpoint"
    )


def skipped(table: TableHandle, txn: tuple[str, int], commit: Commit) -> Commit:
    """What an exactly-once write that wrote nothing returns: ``commit``, the one that
    recorded its application's version, marked ``already_applied`` — and says so in
    a warning on the ``lamina`` logger (a replay is expected; a new stream reusing an
    old app id, whose versions start again at 0, is not)."""
    app, version = txn
    log.warning(
        "%s: write skipped, nothing written: application %r had recorded version %d or a "
        "later one (commit %d) before this txn=(%r, %d); pass a new app id if these rows "
        "are new",
        table.name,
        app,
        version,
        commit.id,
        app,
        version,
    )
    return dataclasses.replace(commit, already_applied=True)


def overwrite_chunks(
    table: TableHandle,
    action: str,
    chunks: list[Interval],
    interval: Interval | None,
    granularity: Granularity | None = None,
) -> tuple[Interval, ...] | None:
    """The chunks (of ``granularity``, default the table's) an overwrite replaces
    (None for an append or upsert): those ``chunks`` (its data's), and those of
    ``interval`` where a segment lies now — an empty one needs no tombstone, so a
    wide interval costs what its data and the table's segments there cost, not one
    tombstone per chunk (Druid's tombstones, too, go only where segments were).
    Raises DataOutsideIntervalError when rows fall outside ``interval``."""
    if action in (CommitAction.APPEND, CommitAction.UPSERT):
        return None
    check_inside(action, chunks, interval)
    if interval is None:
        return tuple(sorted(set(chunks)))
    if interval == ETERNITY:
        return (ETERNITY,)

    gran = granularity or table.granularity
    gran.check_aligned(interval)
    tid = table.record.id
    spans = table.ctx.db.read(lambda conn: live_spans(conn, tid, interval))
    out = set(chunks)
    for s in spans:
        lo, hi = max(s.start, interval.start), min(s.end, interval.end)
        start = gran.floor(lo)
        while start < hi:
            end = gran.next_start(start)
            out.add(Interval.of(start, end))
            start = end
    return tuple(sorted(out))


def check_inside(action: str, chunks: list[Interval], interval: Interval | None) -> None:
    """Raises DataOutsideIntervalError when a chunk of the data lies outside the
    interval an overwrite was restricted to (an append or upsert: none)."""
    if interval is None or action in (CommitAction.APPEND, CommitAction.UPSERT):
        return
    outside = [c for c in set(chunks) if not interval.contains(c)]
    if outside:
        raise DataOutsideIntervalError(
            f"rows in {min(outside)} fall outside the {action.lower()} interval {interval}; "
            "widen the interval or filter the data"
        )
