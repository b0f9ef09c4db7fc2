"""What a table handle and a write need of their catalog, as plain values."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lamina.core.model import TableRecord
from lamina.errors import WarehouseError
from lamina.io.warehouse import Warehouse, commit_dir
from lamina.meta import writers
from lamina.meta.db import Db
from lamina.meta.keyindex import KeyIndexes

if TYPE_CHECKING:  # loads numpy, pyroaring
    from lamina.meta.deletes import Known


@dataclass(frozen=True)
class CatalogContext:
    """The catalog database, the warehouse, the writers' timing settings, and the key
    indexes of the catalog's upsert tables held in this process."""

    db: Db
    warehouse: Warehouse
    writer_wait_s: float = 30.0
    heartbeat_s: float = 5.0
    stale_after_s: float = 60.0
    #: tables whose files this warehouse was seen to hold (checked once per process)
    checked: set[int] = field(default_factory=set, compare=False)
    #: the upsert tables' key indexes (see :class:`lamina.meta.keyindex.KeyIndexes`)
    keys: KeyIndexes = field(default_factory=KeyIndexes, compare=False, repr=False)
    #: per table id, the deletion vectors the newest snapshot read found
    #: (:class:`lamina.meta.deletes.Known`): the next read fetches only newer ones
    vectors: dict[int, Known] = field(default_factory=dict, compare=False, repr=False)

    def check_warehouse(self, table: TableRecord) -> None:
        """Before the first write to ``table``: the warehouse holds its newest file, so
        the catalog is not paired with another warehouse (whose writes no reader of the
        right one would find). Raises WarehouseError."""
        if table.id in self.checked:
            return
        from lamina.meta.segments import newest_location  # loads sortedcontainers

        rel = self.db.read(lambda conn: newest_location(conn, table.id))
        if rel is not None and not self.warehouse.exists(self.warehouse.path(rel)):
            raise WarehouseError(
                f"the warehouse {self.warehouse.location!r} does not hold the files of table "
                f"{table.name!r} ({rel} is missing): connect with the warehouse this "
                "catalog writes to; nothing was written"
            )
        self.checked.add(table.id)

    def delete_files(self, rel_paths: Sequence[str]) -> None:
        """Delete files (relative to the warehouse root); already missing is fine."""
        for rel in rel_paths:
            with contextlib.suppress(FileNotFoundError):
                self.warehouse.fs.delete_file(self.warehouse.path(rel))

    def clean_commits(self, table: str, commit_ids: Sequence[int]) -> None:
        """Delete the files of aborted commits, then record that they are gone."""

        for cid in commit_ids:
            self.warehouse.delete_dir(self.warehouse.path(commit_dir(table, cid)))
        writers.mark_cleaned(self.db, commit_ids)
