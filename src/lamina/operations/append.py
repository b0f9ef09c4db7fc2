"""Appends to a table that is not an upsert table: new segments join each chunk at its
current version; on a ``consistent_push`` table under a lineage entry of their own,
ended by the same publish."""

from __future__ import annotations

import functools
from typing import Any

from lamina.core.model import Commit, CommitAction
from lamina.operations import lineage
from lamina.operations import steps as tw
from lamina.operations.handle import TableHandle


def append(
    h: TableHandle,
    data: Any,
    metadata: dict[str, Any],
    txn: tuple[str, int] | None,
    retries: int,
) -> Commit:
    """Add rows in one commit, retried ``retries`` times after a retryable conflict.
    Raises CommitConflictError, SchemaError, TimeColumnError, MetadataError."""
    if not h.consistent_push:
        return tw.retried(
            retries,
            lambda: tw.write(h, CommitAction.APPEND, data, None, metadata, txn=txn),
            data,
        )
    return tw.retried(retries, lambda: push_append(h, data, metadata, txn), data)


def push_append(
    h: TableHandle, data: Any, metadata: dict[str, Any], txn: tuple[str, int] | None
) -> Commit:
    """An append of a ``consistent_push`` table: under a lineage entry of its own,
    ended by the same publish (a ``txn`` applied already opens none)."""
    if txn is not None:
        done = tw.applied(h, txn)
        if done is not None:
            return tw.skipped(h, txn, done)
    produce = tw.producer(h, data, CommitAction.APPEND, None)  # validate before the entry
    entry = lineage.start_replace(h, [], [])
    try:
        remake = None
        if tw.refinable(data):  # into a day a compaction split: split as Druid does
            remake = functools.partial(tw.producer, h, data, CommitAction.APPEND, None)
        commit = tw.write(
            h,
            CommitAction.APPEND,
            tw.Produced(produce),
            None,
            metadata,
            entry,
            complete=True,
            txn=txn,
            remake=remake,
        )
    except BaseException:
        lineage.revert_quietly(h, entry)
        raise
    if txn is not None and commit.metadata.get("lineage_entry") != entry:
        lineage.revert_quietly(h, entry)  # a twin applied it meanwhile: ours stays empty
    return commit
