"""The write protocol of one commit: begin -> write files -> publish, or abort and
clean up."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from lamina.context import CatalogContext
from lamina.core.model import Commit, PublishPlan, TableRecord
from lamina.errors import ConcurrentWriteError
from lamina.io.warehouse import commit_dir
from lamina.meta import commits
from lamina.meta import publish as publishing


class WriteTransaction:
    """Holds a table's writer slot while files are written; heartbeats meanwhile.

    Files go under the commit's own directory, so an aborted or killed write is
    removed by deleting one directory: here on failure, or by the next writer of the
    table (lazy cleanup) when this process died.
    """

    def __init__(
        self, ctx: CatalogContext, table: TableRecord, action: str, metadata: dict[str, Any]
    ) -> None:
        self.ctx = ctx
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
        """Open the commit (waiting up to ``writer_wait_s`` for the writer slot).
        Raises ConcurrentWriteError when the slot stays taken."""
        ctx = self.ctx
        deadline = time.monotonic() + ctx.writer_wait_s
        delay = 0.01
        while True:
            try:
                self.id, stale = commits.begin_commit(
                    ctx.db,
                    self.table.id,
                    self.action,
                    commits.owner_token(),
                    self.metadata,
                    ctx.stale_after_s,
                )
                break
            except ConcurrentWriteError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        if stale:
            ctx.clean_commits(self.table.name, stale)
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="lamina-hb")
        self._beat.start()
        return self

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ctx.heartbeat_s):
            try:
                if not commits.heartbeat(self.ctx.db, self.id):
                    return
            except Exception:  # noqa: BLE001 - a missed beat is retried next period
                continue

    def inflight(self) -> None:
        """REQUESTED -> INFLIGHT, before the first file is written."""
        commits.mark_inflight(self.ctx.db, self.id)

    def publish(self, plan: PublishPlan) -> Commit:
        """Publish the plan in one catalog transaction (see meta.publish.publish)."""
        self.commit = publishing.publish(self.ctx.db, self.table, self.id, plan)
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
                commits.abort(self.ctx.db, self.id)
                self.ctx.clean_commits(self.table.name, [self.id])
            except Exception:  # noqa: BLE001 - the original error matters more
                pass  # left for lazy cleanup by the next writer
