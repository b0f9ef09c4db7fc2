"""Consistent push: several appends under one lineage entry, visible together."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lamina import table_write as tw
from lamina.core.model import Commit, CommitAction

if TYPE_CHECKING:
    from lamina.table import Table


class ConsistentPush:
    """Batches written under one lineage entry; visible together when the block ends."""

    def __init__(self, table: Table, metadata: dict[str, Any]) -> None:
        self.table = table
        self.metadata = metadata
        self.entry = ""
        self.commits: list[Commit] = []

    def __enter__(self) -> ConsistentPush:
        self.entry = self.table.start_replace([], [])
        return self

    def append(self, data: Any) -> Commit:
        commit = tw.write(
            self.table, CommitAction.APPEND, data, None, self.metadata, lineage_entry=self.entry
        )
        self.commits.append(commit)
        return commit

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self.table.end_replace(self.entry)
            except BaseException:
                tw.revert_quietly(self.table, self.entry)
                raise
        else:
            tw.revert_quietly(self.table, self.entry)
