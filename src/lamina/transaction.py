"""One write to one table: begin -> write files -> publish, or abort and clean up."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from lamina.core.model import Commit, PublishPlan, TableRecord
from lamina.errors import ConcurrentWriteError
from lamina.io.warehouse import commit_dir
from lamina.meta.store import owner_token

if TYPE_CHECKING:
    from lamina.catalog import Catalog


class WriteTransaction:
    """Holds a table's writer slot while files are written; heartbeats meanwhile.

    Files go under the commit's own directory, so an aborted or killed write is
    removed by deleting one directory: here on failure, or by the next writer of the
    table (lazy cleanup) when this process died.
    """

    def __init__(
        self, catalog: Catalog, table: TableRecord, action: str, metadata: dict[str, Any]
    ) -> None:
        self.catalog = catalog
        self.table = table
        self.action = action
        self.metadata = metadata
        self.id = -1
        self.commit: Commit | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    @property
    def dir(self) -> str:
        """Relative directory of this commit's files."""
        return commit_dir(self.table.name, self.id)

    def __enter__(self) -> WriteTransaction:
        cat = self.catalog
        deadline = time.monotonic() + cat.writer_wait_s
        delay = 0.01
        while True:
            try:
                self.id, stale = cat.store.begin_commit(
                    self.table.id, self.action, owner_token(), self.metadata, cat.stale_after_s
                )
                break
            except ConcurrentWriteError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        if stale:
            cat._clean_commits(self.table.name, stale)
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="lamina-hb")
        self._beat.start()
        return self

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.catalog.heartbeat_s):
            try:
                if not self.catalog.store.heartbeat(self.id):
                    return
            except Exception:  # noqa: BLE001 - a missed beat is retried next period
                continue

    def inflight(self) -> None:
        self.catalog.store.mark_inflight(self.id)

    def publish(self, plan: PublishPlan) -> Commit:
        self.commit = self.catalog.store.publish(self.table, self.id, plan)
        return self.commit

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self.commit is None and self.id >= 0:
            try:
                self.catalog.store.abort(self.id)
                self.catalog._clean_commits(self.table.name, [self.id])
            except Exception:  # noqa: BLE001 - the original error matters more
                pass  # left for lazy cleanup by the next writer
