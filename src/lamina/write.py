"""The write protocol of one commit: begin -> write files -> publish, or abort and
clean up."""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType
from typing import Any

from lamina.context import CatalogContext
from lamina.core.model import Commit, PublishPlan, TableRecord
from lamina.io.warehouse import commit_dir
from lamina.meta import commits
from lamina.meta import publish as publishing
from lamina.meta.db import Db


class _Heartbeats:
    """One daemon thread per process beats every open commit of the process (a
    thread per commit cost more than a small commit's catalog work)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # commit id -> (db, owner, period, next beat)
        self._open: dict[int, tuple[Db, str, float, float]] = {}
        self._wake = threading.Event()
        self._pid = -1
        self._sleep_until = 0.0  # when the thread wakes up by itself next

    def add(self, db: Db, commit_id: int, owner: str, period_s: float) -> None:
        due = time.monotonic() + period_s
        with self._lock:
            if self._pid != os.getpid():  # a forked child inherits no thread
                self._pid = os.getpid()
                self._open.clear()
                self._sleep_until = 0.0
                threading.Thread(target=self._run, daemon=True, name="lamina-hb").start()
            self._open[commit_id] = (db, owner, period_s, due)
            wake = due < self._sleep_until  # else it wakes in time anyway
        if wake:
            self._wake.set()

    def remove(self, commit_id: int) -> None:
        with self._lock:
            self._open.pop(commit_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                due = [(cid, db, owner, p) for cid, (db, owner, p, _) in self._open.items()]
            now = time.monotonic()
            for cid, db, owner, period in due:
                with self._lock:
                    entry = self._open.get(cid)
                if entry is None or entry[3] > now:
                    continue
                try:
                    alive = commits.heartbeat(db, cid, owner)
                except Exception:  # noqa: BLE001 - a missed beat is retried next period
                    alive = True
                with self._lock:
                    if cid in self._open:
                        if alive:
                            self._open[cid] = (db, owner, period, now + period)
                        else:
                            del self._open[cid]
            with self._lock:
                soonest = min((e[3] for e in self._open.values()), default=None)
                now = time.monotonic()
                wait = 1.0 if soonest is None else max(0.0, min(1.0, soonest - now))
                self._sleep_until = now + wait
                self._wake.clear()
            self._wake.wait(wait)


_HEARTBEATS = _Heartbeats()


class WriteTransaction:
    """One open commit while its files are written; heartbeats meanwhile. Any number
    may be open on a table: conflicts are checked when publishing (optimistic).

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
        self.base_seq = -1  # the snapshot this write starts from
        self.owner = commits.owner_token()
        self.commit: Commit | None = None

    @property
    def dir(self) -> str:
        """Relative directory of this commit's files."""
        return commit_dir(self.table.name, self.id)

    def __enter__(self) -> WriteTransaction:
        """Open the commit on the table's latest snapshot. Raises TableNotFoundError."""
        ctx = self.ctx
        opened = commits.begin_commit(
            ctx.db, self.table.id, self.action, self.owner, self.metadata, ctx.stale_after_s
        )
        self.id, self.base_seq = opened.id, opened.base_seq
        if opened.stale:
            ctx.clean_commits(self.table.name, opened.stale)
        _HEARTBEATS.add(ctx.db, self.id, self.owner, ctx.heartbeat_s)
        return self

    def inflight(self) -> None:
        """REQUESTED -> INFLIGHT, before the first file is written."""
        commits.mark_inflight(self.ctx.db, self.id, self.owner)

    def publish(self, plan: PublishPlan) -> Commit:
        """Publish the plan in one catalog transaction (see meta.publish.publish)."""
        self.commit = publishing.publish(self.ctx.db, self.table, self.id, self.owner, plan)
        return self.commit

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _HEARTBEATS.remove(self.id)
        if self.commit is None and self.id >= 0:
            try:
                if commits.abort(
                    self.ctx.db, self.id, self.owner
                ):  # never the files of a completed one
                    self.ctx.clean_commits(self.table.name, [self.id])
            except Exception:  # noqa: BLE001 - the original error matters more
                pass  # left for lazy cleanup by the next writer
