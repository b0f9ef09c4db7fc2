"""Who holds an open commit, and whether it is still there: owner tokens, the
REQUESTED -> INFLIGHT step, heartbeats, aborts, and the lazy cleanup of commits whose
writer died (Hudi's heartbeats and rollback of failed writes).

A writer touches its commit row only together with its owner token (host, pid, the
process's start time and a random part): a commit whose heartbeat expired may have
been aborted by another writer, and on PostgreSQL its id handed out again after a
crash (see :mod:`.commits`).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, func, or_, select, update

from lamina.core.model import OPEN_STATES, WRITER_GONE, CommitState
from lamina.errors import CommitError
from lamina.meta.db import Db
from lamina.meta.schema import commits, locks
from lamina.meta.tables import now_us

_HOST = socket.gethostname()
_PROCESS_TOKEN: dict[int, str] = {}
_OWN_START: dict[int, str] = {}


def owner_token() -> str:
    """Who holds a commit: host, pid, the process's start time (a pid gets reused: by
    then another process, started later, has it) and a random part."""
    pid = os.getpid()
    if pid not in _OWN_START:  # read once per process (a forked child reads its own)
        _OWN_START[pid] = _started(pid)
    return f"{_HOST}:{pid}:{_OWN_START[pid]}:{uuid.uuid4().hex[:8]}"


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot; Linux), or "" unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return ""


def process_token() -> str:
    """The owner of catalog-only commits made by this process (computed once per pid)."""
    pid = os.getpid()
    if pid not in _PROCESS_TOKEN:
        _PROCESS_TOKEN[pid] = owner_token()
    return _PROCESS_TOKEN[pid]


def owner_alive(owner: str) -> bool | None:
    """True/False when the owner runs on this host, None when it cannot be told. Its
    pid held by a process that started at another time is a new process: False."""
    host, _, rest = owner.partition(":")
    if host != _HOST:
        return None
    parts = rest.split(":")
    try:
        pid = int(parts[0])
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return None
    started = parts[1] if len(parts) == 3 else ""  # host:pid:start:nonce (older: no start)
    return not (started and started != _started(pid) != "")  # else: the pid was reused


#: PostgreSQL, in a statement of a transaction: commit it without waiting for the WAL
#: flush (the transaction's own setting; the session keeps ``synchronous_commit``)
RELAXED = func.set_config("synchronous_commit", "off", True)
UNSETTLED = select(commits.c.id, commits.c.owner, commits.c.heartbeat_at, commits.c.state).where(
    commits.c.table_id == bindparam("tid"),
    or_(
        commits.c.state.in_(OPEN_STATES),
        and_(commits.c.state == CommitState.ABORTED.value, commits.c.files_cleaned == 0),
    ),
)
_MINE = and_(commits.c.id == bindparam("cid"), commits.c.owner == bindparam("writer"))
_INFLIGHT = (
    update(commits)
    .where(_MINE, commits.c.state == CommitState.REQUESTED.value)
    .values(
        state=CommitState.INFLIGHT.value,
        heartbeat_at=bindparam("now"),
        inflight_at=bindparam("now"),
    )
)
#: PostgreSQL: one autocommitted statement whose commit does not wait for the flush
_INFLIGHT_RELAXED = _INFLIGHT.returning(RELAXED)
#: a commit whose task lock was revoked stops beating: its writer stops (and, if it
#: died, the commit is aborted once the beat is stale)
_REVOKED = exists(
    select(locks.c.id).where(locks.c.commit_id == commits.c.id, locks.c.state == "REVOKED")
)
_BEAT = (
    update(commits)
    .where(_MINE, commits.c.state.in_(OPEN_STATES), ~_REVOKED)
    .values(heartbeat_at=bindparam("now"))
)
_ABORT = (
    update(commits)
    .where(_MINE, commits.c.state.in_(OPEN_STATES))
    .values(state=CommitState.ABORTED.value, completed_at=bindparam("now"), reason=bindparam("why"))
)
#: longest reason kept
REASON_CHARS = 1000
_STATE = select(commits.c.state).where(_MINE)


def dead(row: Any, stale_after_s: float, now: int) -> bool:
    """Whether an open commit's writer is gone (see :func:`settle_writers`)."""
    alive = owner_alive(row.owner)
    expired = row.heartbeat_at < now - int(stale_after_s * 1e6)
    return alive is False or (alive is None and expired)


def settle_writers(
    conn: Connection, unsettled: Sequence[Any], stale_after_s: float, now: int
) -> tuple[list[Any], list[int]]:
    """Abort the open commits among ``unsettled`` (rows of ``UNSETTLED``) whose
    writer is gone. Returns the open commits still alive, and the aborted commits
    whose files are not removed yet.

    Dead: the owner ran on this host and its pid no longer exists (a live process
    here is never judged by its heartbeat), or it ran on another host and its
    heartbeat is older than ``stale_after_s``.
    """
    alive_rows: list[Any] = []
    stale: list[int] = []
    for row in unsettled:
        if row.state == CommitState.ABORTED.value:
            stale.append(int(row.id))
            continue
        if dead(row, stale_after_s, now):
            # PostgreSQL: the commit may have settled since ``unsettled`` was read (a
            # late heartbeat, not a dead writer, and it published); only an abort
            # that took effect makes its files garbage
            params = {"cid": row.id, "writer": row.owner, "now": now, "why": WRITER_GONE}
            if conn.execute(_ABORT, params).rowcount:
                stale.append(int(row.id))
        else:
            alive_rows.append(row)
    return alive_rows, sorted(stale)


def mark_inflight(db: Db, commit_id: int, owner: str) -> None:
    """REQUESTED -> INFLIGHT. Raises CommitError if it was aborted meanwhile."""
    params = {"cid": commit_id, "writer": owner}

    def txn(conn: Connection) -> None:
        params["now"] = now_us()
        if db.sqlite:
            done = conn.execute(_INFLIGHT, params).rowcount == 1
        else:
            done = conn.execute(_INFLIGHT_RELAXED, params).first() is not None
        if not done:
            raise CommitError(f"commit {commit_id} was aborted before it started writing")

    db.write(txn, single=True)


def heartbeat(db: Db, commit_id: int, owner: str) -> bool:
    """Refresh a commit's heartbeat; False once it is no longer open."""

    def txn(conn: Connection) -> bool:
        params = {"cid": commit_id, "writer": owner, "now": now_us()}
        return bool(conn.execute(_BEAT, params).rowcount)

    return db.write(txn, single=True)


def abort(
    db: Db, commit_id: int, owner: str, action: str | None = None, reason: str | None = None
) -> bool:
    """Set an open commit of ``owner`` ABORTED (with the ``action`` it was doing, when
    that became known after it opened: a transaction's overwrite; and the ``reason``,
    e.g. the error that ended it); True when it is ABORTED now (False: it completed,
    e.g. its publish reached the catalog before the connection dropped, or the row is
    not the owner's)."""
    return settle(db, commit_id, owner, action, reason) == CommitState.ABORTED.value


def settle(
    db: Db, commit_id: int, owner: str, action: str | None = None, reason: str | None = None
) -> str | None:
    """Abort an open commit of ``owner`` (recording ``reason``); its state then
    (COMPLETED: its publish went through; None: the row is not the owner's)."""
    why = None if reason is None else reason[:REASON_CHARS]

    def txn(conn: Connection) -> str | None:
        params = {"cid": commit_id, "writer": owner, "now": now_us(), "why": why}
        aborted = conn.execute(_ABORT, params).rowcount
        if aborted and action is not None:
            conn.execute(update(commits).where(_MINE).values(action=action), params)
        state = conn.execute(_STATE, params).scalar()
        return None if state is None else str(state)

    return db.write(txn)


def settle_open(conn: Connection, table_id: int, stale_after_s: float) -> None:
    """Abort the table's open commits whose writer is gone (inside a transaction)."""
    settle_writers(conn, conn.execute(UNSETTLED, {"tid": table_id}).all(), stale_after_s, now_us())


def failed_commits(db: Db, table_id: int, stale_after_s: float) -> list[int]:
    """Abort stale open commits; return aborted commits whose files are not yet removed."""

    def txn(conn: Connection) -> list[int]:
        unsettled = conn.execute(UNSETTLED, {"tid": table_id}).all()
        return settle_writers(conn, unsettled, stale_after_s, now_us())[1]

    return db.write(txn)


def open_commits(db: Db, table_id: int) -> list[int]:
    """Ids of the table's commits still open (a writer may be writing their files)."""
    return list(
        db.read(
            lambda conn: (
                conn.execute(
                    select(commits.c.id).where(
                        commits.c.table_id == table_id, commits.c.state.in_(OPEN_STATES)
                    )
                )
                .scalars()
                .all()
            )
        )
    )


def mark_cleaned(db: Db, commit_ids: Sequence[int]) -> None:
    """Record that the files of these aborted commits are gone."""
    if not commit_ids:
        return
    db.write(
        lambda conn: conn.execute(
            update(commits).where(commits.c.id.in_(list(commit_ids))).values(files_cleaned=1)
        )
    )
