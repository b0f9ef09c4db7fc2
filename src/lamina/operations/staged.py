"""Publishing files written already: the segment files Spark's tasks wrote for one
``format("lamina")`` write, made one commit through the same path as any write of the
table's kind (conflict checks, locks, lineage, upsert resolution), or none.

Tasks write under a staging directory of their own (``<table>/data/w<id>/``), not
under a commit's: a commit is opened only once every task is done, so no heartbeat
has to outlive the driver's planning process. Files the commit does not take (a
speculative twin's, an aborted write's) are deleted here; those of a driver that
died are orphans, deleted by retention once older than ``orphan_grace_period``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lamina.core.interval import Interval
from lamina.core.model import Commit, CommitAction, NewSegment
from lamina.core.upsert_spec import ties_stay_in_chunk
from lamina.errors import LaminaError
from lamina.failpoints import failpoint
from lamina.io.writer import merge_small
from lamina.operations import steps as tw
from lamina.operations import upsert
from lamina.operations.append import append
from lamina.operations.compaction import copy_on_write, inline
from lamina.operations.handle import TableHandle
from lamina.operations.kinds import kind_of, upserted
from lamina.operations.overwrite import overwrite

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("lamina")

#: Retries of a staged write's commit after a conflict that is safe to retry.
RETRIES = 3


@dataclass
class StagedWrite:
    """The files of one write (in row order: by task, then as each task wrote them),
    and how to publish them: ``overwrite`` replaces the chunks they touch (or
    ``interval``); ``txn``: exactly once."""

    files: list[NewSegment]
    staging: str  # relative directory holding them
    overwrite: bool = False
    interval: Interval | None = None
    txn: tuple[str, int] | None = None
    metadata: dict[str, Any] | None = None


def publish(h: TableHandle, w: StagedWrite) -> Commit | None:
    """Publish ``w``'s files in one commit, as the table's kind writes data: an upsert
    on an upsert table, one consistent push on a REFRESH table (it replaces the live
    segments, of ``interval`` if given), an append or an overwrite otherwise. A
    ``txn`` applied already publishes nothing (logged) and returns None. Every staged
    file the commit does not name is deleted, whatever the outcome.
    Raises what the table's writes raise."""
    failpoint("staged.publish", table=h.name, files=len(w.files))
    commit: Commit | None = None
    kept: tuple[str, ...] = ()  # the staged files the commit names
    try:
        done = None if w.txn is None else tw.applied(h, w.txn)
        if done is not None:
            log.warning(
                "skipped a write to %r: txn %s was applied already by commit %d (seq %s); "
                "nothing was published",
                h.name,
                w.txn,
                done.id,
                done.seq,
            )
        else:
            files = _ready(h, w)
            read_back = _Reader(h, files)
            commit = _publish(h, w, files, read_back)
            kept = () if read_back.used else tuple(f.location for f in files)
    except BaseException:
        _discard(h, w.staging, keep=())
        raise
    if commit is None or commit.already_applied:  # nothing of ours was published
        _discard(h, w.staging, keep=())
        return None
    _discard(h, w.staging, keep=kept)
    return commit


def discard(h: TableHandle, staging: str) -> None:
    """Delete every file of an aborted write."""
    _discard(h, staging, keep=())


def _ready(h: TableHandle, w: StagedWrite) -> list[NewSegment]:
    """``w``'s files checked against an overwrite's interval (before a commit opens)
    and with each chunk's small ones merged (where ties stay in a chunk)."""
    if w.overwrite:
        tw.check_inside(CommitAction.OVERWRITE, [f.chunk for f in w.files], w.interval)
    rec = h.record
    if not ties_stay_in_chunk(rec.properties, rec.schema, rec.time_column):
        return list(w.files)
    return merge_small(h.ctx.warehouse, w.files, h.target_rows_per_segment, w.staging)


def _publish(
    h: TableHandle, w: StagedWrite, staged_files: list[NewSegment], read_back: _Reader
) -> Commit:
    meta = dict(w.metadata or {})
    files = tw.Produced(lambda _: list(staged_files), again=read_back.again)
    kind = kind_of(h)
    refresh = h.record.properties.get("ingestion_type", "APPEND") == "REFRESH"
    if h.is_upsert:
        spec = upsert.require(h)
        if refresh:
            return kind.refresh(h, read_back(), w.interval, meta)
        if w.overwrite:
            return kind.overwrite(h, read_back(), w.interval, meta, w.txn, RETRIES)
        if spec.is_partial:
            return upserted(h, read_back(), meta, w.txn)
        done = upsert.upsert_files(h, files, meta, w.txn, finish=copy_on_write.finisher(h))
        inline.after_commit(h, done)
        return done
    if refresh:
        return kind.refresh(h, files, w.interval, meta)
    if w.overwrite:
        return overwrite(h, files, w.interval, meta, w.txn, RETRIES)
    return append(h, files, meta, w.txn, RETRIES)


class _Reader:
    """The staged files' rows as one Arrow table, for writes that rewrite them (a
    partial upsert merges its records first; an append into a day a compaction split
    is split again); ``used`` once read: the commit then names none of the files."""

    def __init__(self, h: TableHandle, files: list[NewSegment]) -> None:
        self.h = h
        self.files = files
        self.used = False

    def __call__(self) -> pa.Table:
        import pyarrow as pa  # loads numpy, pyarrow
        import pyarrow.parquet as pq  # loads pyarrow

        from lamina.io.reader import padded  # loads numpy, pyarrow

        self.used = True
        wh = self.h.ctx.warehouse
        schema = self.h.schema
        parts = [
            padded(pq.read_table(wh.path(f.location), filesystem=wh.fs), schema) for f in self.files
        ]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def again(self, refine: Any = None) -> Callable[[str], list[NewSegment]]:
        """The rows written again, split by ``refine`` (:func:`steps.refinement`)."""
        return tw.producer(self.h, self(), CommitAction.APPEND, None, refine=refine)


def _discard(h: TableHandle, staging: str, keep: tuple[str, ...]) -> None:
    """Delete the files under ``staging`` but those ``keep`` names (best effort: what
    is left is an orphan for retention)."""
    wh = h.ctx.warehouse
    kept = set(keep)
    try:
        if not kept:
            wh.delete_dir(wh.path(staging))
            return
        gone = [
            info.path
            for info in wh.list_files(wh.path(staging))
            if info.path[len(wh.root) + 1 :] not in kept
        ]
        h.ctx.delete_files([p[len(wh.root) + 1 :] for p in gone])
    except (OSError, LaminaError) as exc:
        log.warning("could not delete the staged files under %s (%s): retention will", staging, exc)
