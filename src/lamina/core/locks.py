"""Task locks on intervals of a table: who coexists, who waits, who is revoked.

Druid's TaskLockbox rules, pure. A lock is held by one transaction (``holder``) on
an interval of one table. Locks on disjoint intervals never interact. For
overlapping ones (``requested`` against an active, non-revoked lock of another
holder):

=========== =========== ====== ========================= =========================
requested   EXCLUSIVE   SHARED REPLACE                   APPEND
=========== =========== ====== ========================= =========================
EXCLUSIVE   no          no     no                        no
SHARED      no          yes    no                        no
REPLACE     no          no     no                        yes, if inside the REPLACE
APPEND      no          no     yes, if it holds the      yes
                               APPEND inside
=========== =========== ====== ========================= =========================

(so at most one REPLACE contains an APPEND: two overlapping REPLACEs never coexist).

A SEGMENT lock (seed 001's segment lock: a minor compaction locks its input
segments) covers named segments of a chunk, not the chunk: it coexists with APPEND
locks and with SEGMENT locks on other segments, and with nothing else that overlaps.

A request that cannot coexist is granted only if every lock it cannot coexist with
has a strictly lower priority; those are then all revoked at once. A revoked lock
is never granted again and counts for nothing; its holder fails at publish.
Otherwise the request waits — in arrival order: an earlier waiting request it
cannot coexist with, of the same or a higher priority, goes first.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from lamina.core.interval import Interval
from lamina.errors import LockError


class LockType(enum.StrEnum):
    EXCLUSIVE = "EXCLUSIVE"
    SHARED = "SHARED"
    REPLACE = "REPLACE"
    APPEND = "APPEND"
    SEGMENT = "SEGMENT"

    @classmethod
    def parse(cls, value: str | LockType) -> LockType:
        """Raises LockError naming the valid types."""
        try:
            return cls(str(value).upper())
        except ValueError:
            valid = ", ".join(t.value for t in cls)
            raise LockError(f"unknown lock type {value!r}; use one of {valid}") from None


class LockState(enum.StrEnum):
    WAITING = "WAITING"
    GRANTED = "GRANTED"
    REVOKED = "REVOKED"


#: Default priorities (Druid's): streaming and upserts, batch writes, compaction.
PRIORITY_STREAMING = 75
PRIORITY_BATCH = 50
PRIORITY_COMPACTION = 25


@dataclass(frozen=True)
class Lock:
    """One lock (or request for one). ``id`` grows with arrival."""

    id: int
    holder: str
    type: LockType
    interval: Interval
    priority: int
    state: LockState = LockState.GRANTED
    #: a SEGMENT lock's segment ids
    segments: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Decision:
    """Grant (revoking ``revoke``), or wait for ``blockers``."""

    granted: bool
    revoke: tuple[int, ...] = ()
    blockers: tuple[int, ...] = ()


def coexist(requested: Lock, held: Lock) -> bool:
    """Whether ``requested`` can be granted while ``held`` stays (overlapping, other
    holders; see the module table)."""
    r, h = requested.type, held.type
    if LockType.SEGMENT in (r, h):
        if r is h:
            return not requested.segments & held.segments
        return LockType.APPEND in (r, h)
    if r is LockType.SHARED and h is LockType.SHARED:
        return True
    if r is LockType.APPEND and h is LockType.APPEND:
        return True
    if r is LockType.REPLACE and h is LockType.APPEND:
        return requested.interval.contains(held.interval)
    if r is LockType.APPEND and h is LockType.REPLACE:
        return held.interval.contains(requested.interval)
    return False


def _relevant(requested: Lock, locks: Iterable[Lock], state: LockState) -> list[Lock]:
    return [
        lk
        for lk in locks
        if lk.state is state
        and lk.holder != requested.holder
        and lk.interval.overlaps(requested.interval)
    ]


def decide(requested: Lock, locks: Iterable[Lock]) -> Decision:
    """Grant ``requested`` now (and revoke what it outranks), or make it wait.

    ``locks``: the table's other locks, any state (the request itself may be among
    them as WAITING; it is skipped)."""
    others = [lk for lk in locks if lk.id != requested.id]
    granted = _relevant(requested, others, LockState.GRANTED)
    incompatible = [lk for lk in granted if not coexist(requested, lk)]
    ahead = [
        lk
        for lk in _relevant(requested, others, LockState.WAITING)
        if lk.id < requested.id and lk.priority >= requested.priority and not coexist(requested, lk)
    ]
    if ahead:
        return Decision(False, blockers=tuple(lk.id for lk in ahead))
    if not incompatible:
        return Decision(True)
    if all(lk.priority < requested.priority for lk in incompatible):
        return Decision(True, revoke=tuple(sorted(lk.id for lk in incompatible)))
    return Decision(
        False,
        blockers=tuple(lk.id for lk in incompatible if lk.priority >= requested.priority),
    )


def first_locked(held: Iterable[Lock], spans: Iterable[Interval]) -> tuple[Interval, Lock] | None:
    """The first of ``spans`` that overlaps one of the ``held`` locks, with that lock —
    a replace or removal there must wait for the holder — or None."""
    locks = list(held)
    for iv in spans:
        lk = next((lk for lk in locks if lk.interval.overlaps(iv)), None)
        if lk is not None:
            return iv, lk
    return None
