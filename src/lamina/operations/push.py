"""Consistent push: several appends under one lineage entry, visible together."""

from __future__ import annotations

from typing import Any

from lamina.core.model import Commit, CommitAction
from lamina.failpoints import failpoint
from lamina.operations import lineage
from lamina.operations import steps as tw
from lamina.operations.handle import TableHandle
from lamina.operations.upsert import refuse


class ConsistentPush:
    """Batches written under one lineage entry; visible together when the block ends."""

    def __init__(self, table: TableHandle, metadata: dict[str, Any]) -> None:
        refuse(table, "a consistent push")
        self.table = table
        self.metadata = metadata
        self.entry = ""
        self.commits: list[Commit] = []

    def __enter__(self) -> ConsistentPush:
        self.entry = lineage.start_replace(self.table, [], [])
        return self

    def append(self, data: Any) -> Commit:
        commit = tw.write(
            self.table, CommitAction.APPEND, data, None, self.metadata, lineage_entry=self.entry
        )
        # the batch is published, hidden by the push's lineage entry until it ends
        failpoint("push.batch_published", commit=commit)
        self.commits.append(commit)
        return commit

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                lineage.end_replace(self.table, self.entry)
            except BaseException:
                lineage.revert_quietly(self.table, self.entry)
                raise
        else:
            lineage.revert_quietly(self.table, self.entry)
