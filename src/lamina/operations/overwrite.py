"""Overwrites and refreshes of a table that is not an upsert table: a new, higher
version over an interval, in one commit; a refresh replaces every live segment of the
interval, through a lineage entry on a ``consistent_push`` table."""

from __future__ import annotations

from typing import Any

from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import Commit, CommitAction
from lamina.core.plans import LineageBatch, write_plan
from lamina.operations import lineage
from lamina.operations import steps as tw
from lamina.operations.handle import TableHandle
from lamina.write import WriteTransaction


def overwrite(
    h: TableHandle,
    data: Any,
    interval: Interval | None,
    metadata: dict[str, Any],
    txn: tuple[str, int] | None,
    retries: int,
) -> Commit:
    """Replace every row in ``interval`` (None: the chunks the data touches).
    Raises CommitConflictError, DataOutsideIntervalError, MetadataError."""
    return tw.retried(
        retries,
        lambda: tw.write(h, CommitAction.OVERWRITE, data, interval, metadata, txn=txn),
        data,
    )


def refresh(
    h: TableHandle, data: Any, interval: Interval | None, metadata: dict[str, Any]
) -> Commit:
    """Replace all live segments (or those overlapping ``interval``) with ``data``, in
    one commit; on a ``consistent_push`` table through a lineage entry, reverted on the
    spot if the write fails. Raises CommitConflictError, DataOutsideIntervalError,
    MetadataError."""
    produce = tw.producer(h, data, CommitAction.REFRESH, interval)
    meta = dict(metadata)
    action = CommitAction.REFRESH
    with WriteTransaction(h.ctx, h.record, action, meta, inflight=True) as txn:
        if not h.consistent_push:
            live = [s.id for s in h.snapshot(interval=interval).segments]
            files = produce(txn.dir)
            chunks = tw.overwrite_chunks(h, action, [f.chunk for f in files], interval)
            whole = None if interval is None else (interval,)
            plan = write_plan(files, chunks, remove_ids=tuple(live), replaced=whole)
            return txn.publish(plan)
        entry = lineage.start_replace(h, [], [], True, replace_live=interval or ETERNITY)
        try:
            files = produce(txn.dir)
            chunks = tw.overwrite_chunks(h, action, [f.chunk for f in files], interval)
            plan = write_plan(
                files,
                chunks,
                replaced=None if interval is None else (interval,),
                lineage=LineageBatch(entry, ends=True),
            )
            return txn.publish(plan)  # publishes and ends the entry in one transaction
        except BaseException:
            lineage.revert_quietly(h, entry)
            raise
