"""The write protocol of one commit: begin -> write files -> publish, or abort and
clean up."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from lamina.context import CatalogContext
from lamina.core.interval import Interval
from lamina.core.locks import LockType
from lamina.core.model import Commit, CommitState, TableRecord
from lamina.core.plans import PublishPlan
from lamina.errors import (
    CatalogUnavailableError,
    CommitError,
    LockRevokedError,
    LockTimeoutError,
)
from lamina.failpoints import failpoint
from lamina.io import writer
from lamina.io.warehouse import commit_dir
from lamina.meta import commits, locks, writers
from lamina.meta import publish as publishing
from lamina.meta.db import Db


class _Heartbeats:
    """One daemon thread per process beats every open commit of the process (a
    thread per commit cost more than a small commit's catalog work)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # owner token (one per write) -> (db, commit id, period, next beat)
        self._open: dict[str, tuple[Db, int, float, float]] = {}
        self._wake = threading.Event()
        self._lost: set[str] = set()  # writes whose commit a beat found gone (or revoked)
        self._stop: dict[str, Callable[[], None]] = {}  # owner -> cancels its running work
        self._pid = -1
        self._sleep_until = 0.0  # when the thread wakes up by itself next

    def add(self, db: Db, commit_id: int, owner: str, period_s: float) -> None:
        due = time.monotonic() + period_s
        with self._lock:
            if self._pid != os.getpid():  # a forked child inherits no thread
                self._pid = os.getpid()
                self._open.clear()
                self._lost.clear()
                self._stop.clear()
                self._sleep_until = 0.0
                threading.Thread(target=self._run, daemon=True, name="lamina-hb").start()
            self._open[owner] = (db, commit_id, period_s, due)
            wake = due < self._sleep_until  # else it wakes in time anyway
        if wake:
            self._wake.set()

    def remove(self, owner: str) -> None:
        with self._lock:
            self._open.pop(owner, None)
            self._lost.discard(owner)
            self._stop.pop(owner, None)

    def lost(self, owner: str) -> bool:
        """Whether a beat found the write's commit aborted (or its task lock revoked)."""
        with self._lock:
            return owner in self._lost

    def on_lost(self, owner: str, stop: Callable[[], None] | None) -> None:
        """Have the heartbeat thread call ``stop`` once the write is found lost (at
        once if it is already); None unregisters."""
        with self._lock:
            if stop is None or owner not in self._lost:
                self._stop.pop(owner, None)
                if stop is not None:
                    self._stop[owner] = stop
                return
        _quietly(stop)

    def _run(self) -> None:
        while True:
            with self._lock:
                due = [(o, db, cid, p) for o, (db, cid, p, _) in self._open.items()]
            now = time.monotonic()
            for owner, db, cid, period in due:
                with self._lock:
                    entry = self._open.get(owner)
                if entry is None or entry[3] > now:
                    continue
                try:
                    alive = writers.heartbeat(db, cid, owner)
                except Exception:  # noqa: BLE001 - a missed beat is retried next period
                    alive = True
                stop = None
                with self._lock:
                    if owner in self._open:
                        if alive:
                            self._open[owner] = (db, cid, period, now + period)
                        else:
                            del self._open[owner]
                            self._lost.add(owner)
                            stop = self._stop.pop(owner, None)
                if stop is not None:
                    _quietly(stop)
            with self._lock:
                soonest = min((e[3] for e in self._open.values()), default=None)
                now = time.monotonic()
                wait = 1.0 if soonest is None else max(0.0, min(1.0, soonest - now))
                self._sleep_until = now + wait
                self._wake.clear()
            self._wake.wait(wait)


def _quietly(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # the write still fails at its check or publish
        fn()


_HEARTBEATS = _Heartbeats()


class WriteTransaction:
    """One open commit while its files are written; heartbeats meanwhile. Any number
    may be open on a table: conflicts are checked when publishing (optimistic).

    Files go under the commit's own directory, so an aborted or killed write is
    removed by deleting one directory: here on failure, or by the next writer of the
    table (lazy cleanup) when this process died. ``inflight``: open the commit INFLIGHT
    (for a write that starts writing at once) instead of REQUESTED, saving a catalog
    transaction.
    """

    def __init__(
        self,
        ctx: CatalogContext,
        table: TableRecord,
        action: str,
        metadata: dict[str, Any],
        inflight: bool = False,
        locks_at_open: tuple[list[locks.Request], float] | None = None,
    ) -> None:
        self.ctx = ctx
        self._open_inflight = inflight
        self._locks_at_open = locks_at_open
        self.table = table
        self.action = action
        self.metadata = metadata
        self.id = -1
        self.base_seq = -1  # the snapshot this write starts from
        self.owner = writers.owner_token()
        self.commit: Commit | None = None

    @property
    def dir(self) -> str:
        """Relative directory of this commit's files."""
        return commit_dir(self.table.name, self.id)

    def __enter__(self) -> WriteTransaction:
        """Open the commit on the table's latest snapshot; with ``locks_at_open``
        (requests, wait_s), also take those task locks (:meth:`acquire_all`), on
        SQLite in the transaction that opens it. Raises TableNotFoundError,
        LockTimeoutError, WarehouseError (not the catalog's warehouse)."""
        ctx = self.ctx
        ctx.check_warehouse(self.table)
        asked = self._locks_at_open
        then = None
        if asked is not None and ctx.db.sqlite:
            tid, owner, stale_s = self.table.id, self.owner, ctx.stale_after_s

            def then(conn: Any, commit_id: int, base: int) -> Any:
                db, reqs = ctx.db, asked[0]
                return locks.request_in(conn, db, tid, commit_id, owner, reqs, stale_s, base)

        opened = commits.begin_commit(
            ctx.db,
            self.table.id,
            self.action,
            self.owner,
            self.metadata,
            ctx.stale_after_s,
            inflight=self._open_inflight,
            then=then,
        )
        self.id, self.base_seq = opened.id, opened.base_seq
        if opened.stale:
            ctx.clean_commits(self.table.name, opened.stale)
        _HEARTBEATS.add(ctx.db, self.id, self.owner, ctx.heartbeat_s)
        writer.guard(ctx.warehouse.path(self.dir), self)
        if asked is not None:
            try:
                if opened.then is not None:
                    got, base = opened.then
                    self._await_locks(got, base, asked[0], asked[1])
                else:
                    self.acquire_all(*asked)
            except BaseException as exc:
                self.__exit__(type(exc), exc, exc.__traceback__)
                raise
        return self

    def check(self, ask: bool = False) -> None:
        """Raise if a heartbeat found this commit aborted or its task lock revoked:
        the write stops within one heartbeat instead of finishing for nothing.
        ``ask``: ask the catalog about revocation now, not only once a beat found it
        (a locked transaction's next operation). Raises LockRevokedError (revoked),
        CommitError (aborted)."""
        lost = _HEARTBEATS.lost(self.owner)
        if not lost and not ask:
            return
        revoked = locks.revoked(self.ctx.db, self.id)
        if revoked is not None:
            kind, interval = revoked
            raise LockRevokedError(
                f"commit {self.id}'s {kind} lock on {interval} of {self.table.name!r} was "
                "revoked by a higher-priority request; the write stopped and nothing was "
                "published — retry, or raise this transaction's priority"
            )
        if not lost:
            return
        raise CommitError(
            f"commit {self.id} of {self.table.name!r} was aborted meanwhile (its heartbeat "
            "found it no longer open, e.g. another writer's cleanup took it for dead after a "
            "pause longer than stale_after_s); the write stopped and nothing was published "
            "— write again"
        )

    def on_lost(self, stop: Callable[[], None] | None) -> None:
        """Have the heartbeat thread call ``stop`` (e.g. cancel a Spark job) within one
        heartbeat once this commit is aborted or its lock revoked; None unregisters."""
        _HEARTBEATS.on_lost(self.owner, stop)

    def acquire(
        self,
        kind: LockType,
        interval: Interval,
        priority: int,
        wait_s: float,
        segments: frozenset[str] = frozenset(),
    ) -> None:
        """Take a task lock for this commit, waiting in arrival order up to ``wait_s``;
        then rebase: the write reads from the snapshot of that moment.
        Raises LockTimeoutError."""
        self.acquire_all([(kind, interval, priority, segments)], wait_s)

    def acquire_all(self, requests: list[locks.Request], wait_s: float) -> None:
        """:meth:`acquire` of several locks (kind, interval, priority, segment ids),
        requested together in one catalog transaction (granted at once, the usual
        case, that is all). Raises LockTimeoutError."""
        ctx = self.ctx
        tid, cid, owner, stale_s = self.table.id, self.id, self.owner, ctx.stale_after_s
        got, base = ctx.db.write(
            lambda conn: locks.request_in(conn, ctx.db, tid, cid, owner, requests, stale_s)
        )
        self._await_locks(got, base, requests, wait_s)

    def _await_locks(
        self,
        got: list[tuple[int, locks.Decision]],
        base: int | None,
        requests: list[locks.Request],
        wait_s: float,
    ) -> None:
        """The rest of :meth:`acquire_all` once the requests are stored: wait for the
        ones not granted at once (``base``: all were; the new base seq)."""
        ctx = self.ctx
        if base is not None:  # all granted at once: one catalog transaction
            self.base_seq = base
            return
        deadline = time.monotonic() + wait_s
        for (lock_id, decision), (kind, interval, _, _) in zip(got, requests, strict=True):
            delay = 0.005
            while not decision.granted:
                if time.monotonic() >= deadline:
                    for other, _ in got:
                        locks.cancel(ctx.db, other, self.id)
                    raise LockTimeoutError(
                        f"no {kind.value} lock on {interval} of {self.table.name!r} within "
                        f"{wait_s:g} s: other transactions hold it (see t.locks()); wait "
                        "longer (wait_s=), or raise this transaction's priority"
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                decision = locks.try_grant(
                    ctx.db, self.table.id, lock_id, self.id, ctx.stale_after_s
                )
        self.base_seq = commits.rebase(ctx.db, self.id, self.owner)

    def inflight(self) -> None:
        """REQUESTED -> INFLIGHT, before the first file is written."""
        writers.mark_inflight(self.ctx.db, self.id, self.owner)

    def publish(self, plan: PublishPlan) -> Commit:
        """Publish the plan in one catalog transaction (see meta.publish.publish).

        A connection lost during the publish may have lost only the answer: the commit
        is then aborted if it did not complete, and returned if it did (a retry would
        write its rows twice). Raises CatalogUnavailableError when the catalog cannot
        tell (the outcome is unknown), and what publish raises."""
        ctx = self.ctx
        try:
            failpoint("write.publish.before", commit_id=self.id)
            self.commit = publishing.publish(
                ctx.db, self.table, self.id, self.owner, plan, ctx.warehouse, ctx.keys
            )
            # the publish's catalog transaction committed; its answer not yet returned
            failpoint("write.publish.after", commit_id=self.id)
        except CatalogUnavailableError as exc:
            try:
                state = writers.settle(self.ctx.db, self.id, self.owner)
            except CatalogUnavailableError:
                raise CatalogUnavailableError(
                    f"{exc}; whether commit {self.id} was published is unknown: once the "
                    "catalog answers, look for it in t.history() before writing again (a "
                    "write carrying txn=(app_id, version) is skipped if it was)"
                ) from None
            if state != CommitState.COMPLETED.value:
                raise  # aborted now: nothing was published, a retry is safe
            self.commit = commits.history(self.ctx.db, self.table.name, commit_id=self.id)[0]
        return self.commit

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _HEARTBEATS.remove(self.owner)
        writer.guard(self.ctx.warehouse.path(self.dir), None)
        if self.commit is None and self.id >= 0:
            try:
                if writers.abort(  # never the files of a completed one
                    self.ctx.db, self.id, self.owner, str(self.action), reason_of(exc)
                ):
                    self.ctx.clean_commits(self.table.name, [self.id])
            except Exception:  # noqa: BLE001 - the original error matters more
                pass  # left for lazy cleanup by the next writer


def reason_of(exc: BaseException | None) -> str:
    """What an aborted commit records of why: the error that ended its write (its
    type and first line), or that it ended without publishing."""
    if exc is None:
        return "its write ended without publishing"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
