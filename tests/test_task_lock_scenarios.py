"""Behavioural cases ported from Apache Druid's tests of task locks, segment locks,
segment allocation and concurrent append + replace, run against lamina's catalog
(SQLite and PostgreSQL).

Each test names the Druid test class and method(s) it follows. Druid's tasks map to
lamina transactions: a task holding a lock is a ``t.transaction(lock=...)`` that has
been granted it, a ``tryLock`` is a request with ``wait_s=0`` (LockTimeoutError: not
granted), releasing a lock is ending the transaction, and a Druid segment lock is the
SEGMENT lock a minor compaction (``t.compact(segments=[...])``) takes on its inputs.
Druid's task priorities LOW/MEDIUM/HIGH (5/10/15) are kept as they are.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina import failpoints
from lamina.core.interval import Interval
from lamina.core.locks import Lock, LockState, LockType, decide
from lamina.core.segment import OVERWRITE_PARTITION_START
from lamina.errors import (
    CommitConflictError,
    CompactionError,
    LockError,
    LockRevokedError,
    LockTimeoutError,
    TransactionError,
)
from lamina.operations.transaction import Transaction
from tests.helpers import SCHEMA, events

LOW, MEDIUM, HIGH = 5, 10, 15
DAY1 = ("2024-01-01", "2024-01-02")
JAN = ("2024-01-01", "2024-02-01")


def iv(start: str, end: str) -> tuple[str, str]:
    return (start, end)


def day_rows(day: int, rows: int, value: float, month: str = "2024-01") -> pa.Table:
    """``rows`` rows on ``month``-``day``, every one with v == ``value``."""
    return events(
        days=1, per_day=rows, value=value, seed=int(value * 10) + day, start=f"{month}-{day:02d}"
    )


def values(t: lamina.Table, interval: Any = None) -> Counter[float]:
    return Counter(t.to_arrow(columns=["v"], interval=interval).column("v").to_pylist())


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table("k", SCHEMA, time_column="ts", segment_granularity="DAY")


# -- a lockbox driven through real transactions ---------------------------------------


class Box:
    """Druid's TaskLockboxValidator over lamina: each lock is a transaction of its own."""

    def __init__(self, table: lamina.Table) -> None:
        self.t = table
        self.open: list[Transaction] = []

    def take(self, kind: str, interval: tuple[str, str], priority: int) -> Transaction | None:
        """The granted transaction, or None when the lock cannot be granted now."""
        tx = self.t.transaction(lock=kind, interval=interval, priority=priority, wait_s=0)
        try:
            tx.base_seq  # opens the commit and requests the lock  # noqa: B018
        except LockTimeoutError:
            return None
        self.open.append(tx)
        return tx

    def granted(self, kind: str, interval: tuple[str, str], priority: int) -> Transaction:
        tx = self.take(kind, interval, priority)
        assert tx is not None, f"{kind} {interval} at {priority} was not granted"
        assert self.state(tx) == "GRANTED"
        return tx

    def refused(self, kind: str, interval: tuple[str, str], priority: int) -> None:
        before = self.states()
        assert self.take(kind, interval, priority) is None, f"{kind} {interval} was granted"
        assert self.states() == before  # a refused request revokes nothing

    def states(self) -> dict[int, str]:
        return {lk.commit_id: lk.state for lk in self.t.locks()}

    def state(self, tx: Transaction) -> str | None:
        return self.states().get(tx._write.id)

    def expect(self, active: Sequence[Transaction], revoked: Sequence[Transaction] = ()) -> None:
        got = self.states()
        assert {c for c, s in got.items() if s == "GRANTED"} == {x._write.id for x in active}
        assert {c for c, s in got.items() if s == "REVOKED"} == {x._write.id for x in revoked}

    def close(self) -> None:
        for tx in self.open:
            tx.abort()


@pytest.fixture
def box(t: lamina.Table) -> Iterator[Box]:
    b = Box(t)
    yield b
    b.close()


# -- TaskLockboxTest: granting, timeouts, revocation --------------------------------------


def test_exclusive_lock_is_refused_until_its_holder_ends(box: Box) -> None:
    """TaskLockboxTest.testTryExclusiveLock, testLock."""
    first = box.granted("EXCLUSIVE", iv("2015-01-01", "2015-01-03"), MEDIUM)
    (info,) = box.t.locks()
    assert (info.type, info.priority, info.state) == ("EXCLUSIVE", MEDIUM, "GRANTED")
    assert info.interval == Interval.coerce(iv("2015-01-01", "2015-01-03"))
    box.refused("EXCLUSIVE", iv("2015-01-01", "2015-01-02"), MEDIUM)
    first.commit()
    box.granted("EXCLUSIVE", iv("2015-01-01", "2015-01-02"), MEDIUM)


def test_a_lock_request_times_out(t: lamina.Table, box: Box) -> None:
    """TaskLockboxTest.testTimeoutForLock: a wider request waits for its timeout, then
    fails."""
    box.granted("EXCLUSIVE", iv("2015-01-01", "2015-01-02"), MEDIUM)
    start = time.monotonic()
    with pytest.raises(LockTimeoutError):
        t.transaction(
            lock="EXCLUSIVE", interval=iv("2015-01-01", "2015-01-15"), priority=MEDIUM, wait_s=0.3
        ).commit()
    assert time.monotonic() - start >= 0.3
    assert len(t.locks()) == 1


def test_shared_locks_and_priorities(box: Box) -> None:
    """TaskLockboxTest.testTrySharedLock."""
    month = iv("2017-01-01", "2017-02-01")
    exclusive = box.granted("EXCLUSIVE", month, HIGH)
    box.refused("SHARED", month, HIGH)  # equal priority: no revocation
    exclusive.abort()
    low_shared = box.granted("SHARED", month, LOW)
    medium_exclusive = box.granted("EXCLUSIVE", month, MEDIUM)
    box.expect([medium_exclusive], [low_shared])
    high_shared = box.granted("SHARED", month, HIGH)
    box.expect([high_shared], [low_shared, medium_exclusive])


def test_mixed_locks_of_a_low_priority_task_are_all_revoked(box: Box) -> None:
    """TaskLockboxTest.testTryMixedLocks (one transaction per Druid lock)."""
    d1, d2, d3 = (
        iv("2017-01-01", "2017-01-02"),
        iv("2017-01-02", "2017-01-03"),
        iv("2017-01-03", "2017-01-04"),
    )
    low = [
        box.granted("EXCLUSIVE", d1, 0),
        box.granted("SHARED", d2, 0),
        box.granted("SHARED", d2, 0),
        box.granted("EXCLUSIVE", d3, 0),
    ]
    high = [
        box.granted("SHARED", d1, 10),
        box.granted("EXCLUSIVE", d2, 10),
        box.granted("EXCLUSIVE", d3, 10),
    ]
    box.expect(high, low)
    for tx in low + high:
        tx.abort()
    box.granted("EXCLUSIVE", d1, 10)
    box.granted("SHARED", d2, 10)
    box.granted("EXCLUSIVE", d3, 10)
    box.refused("SHARED", d1, 0)
    box.refused("EXCLUSIVE", d2, 0)
    box.refused("EXCLUSIVE", d3, 0)


Y2017 = iv("2017-01-01", "2018-01-01")


def test_exclusive_lock_compatibility(box: Box) -> None:
    """TaskLockboxTest.testExclusiveLockCompatibility."""
    the = box.granted("EXCLUSIVE", Y2017, MEDIUM)
    box.refused("EXCLUSIVE", iv("2017-05-01", "2017-06-01"), MEDIUM)
    box.refused("SHARED", iv("2016-01-01", "2019-01-01"), MEDIUM)
    box.refused("REPLACE", Y2017, MEDIUM)
    box.refused("APPEND", iv("2017-05-01", "2018-05-01"), MEDIUM)
    box.expect([the])


def test_exclusive_lock_revokes_every_incompatible_lower_lock(box: Box) -> None:
    """TaskLockboxTest.testExclusiveLockCanRevokeAllIncompatible (Druid's manual
    revocation of the first lock: its holder ends)."""
    box.granted("SHARED", iv("2016-01-01", "2019-01-01"), HIGH).abort()
    exclusive = box.granted("EXCLUSIVE", iv("2017-01-01", "2017-02-01"), LOW)
    replace = box.granted("REPLACE", iv("2017-07-01", "2018-01-01"), LOW)
    append = box.granted("APPEND", iv("2017-09-01", "2017-10-01"), LOW)
    box.expect([exclusive, replace, append])
    the = box.granted("EXCLUSIVE", Y2017, MEDIUM)
    box.expect([the], [exclusive, replace, append])


def test_shared_lock_compatibility(box: Box) -> None:
    """TaskLockboxTest.testSharedLockCompatibility."""
    the = box.granted("SHARED", Y2017, MEDIUM)
    box.refused("EXCLUSIVE", iv("2017-05-01", "2017-06-01"), MEDIUM)
    s0 = box.granted("SHARED", iv("2016-01-01", "2019-01-01"), LOW)
    s1 = box.granted("SHARED", iv("2017-06-01", "2017-07-01"), LOW)
    s2 = box.granted("SHARED", iv("2017-05-01", "2018-05-01"), MEDIUM)
    box.refused("REPLACE", Y2017, MEDIUM)
    box.refused("APPEND", iv("2017-05-01", "2018-05-01"), MEDIUM)
    box.expect([the, s0, s1, s2])


def test_shared_lock_revokes_every_incompatible_lower_lock(box: Box) -> None:
    """TaskLockboxTest.testSharedLockCanRevokeAllIncompatible."""
    box.granted("EXCLUSIVE", iv("2016-01-01", "2019-01-01"), HIGH).abort()
    shared = box.granted("SHARED", iv("2017-01-01", "2017-02-01"), MEDIUM)
    replace = box.granted("REPLACE", iv("2017-07-01", "2018-07-01"), LOW)
    append = box.granted("APPEND", iv("2017-02-01", "2017-03-01"), LOW)
    box.expect([shared, replace, append])
    the = box.granted("SHARED", Y2017, MEDIUM)
    box.expect([the, shared], [replace, append])


def test_append_lock_compatibility(box: Box) -> None:
    """TaskLockboxTest.testAppendLockCompatibility: a REPLACE coexists only with the
    APPENDs it contains; an APPEND inside the REPLACE revokes nothing, whatever its
    priority."""
    the = box.granted("APPEND", Y2017, MEDIUM)
    box.refused("EXCLUSIVE", iv("2017-05-01", "2017-06-01"), MEDIUM)
    box.refused("SHARED", iv("2016-01-01", "2019-01-01"), MEDIUM)
    box.refused("REPLACE", iv("2017-05-01", "2018-01-01"), MEDIUM)  # does not contain it
    replace = box.granted("REPLACE", Y2017, MEDIUM)
    box.refused("REPLACE", iv("2016-01-01", "2019-01-01"), MEDIUM)
    a0 = box.granted("APPEND", iv("2017-05-01", "2017-06-01"), HIGH)
    a1 = box.granted("APPEND", iv("2017-05-01", "2017-06-01"), LOW)
    box.expect([the, replace, a0, a1])


def test_append_lock_revokes_every_incompatible_lower_lock(box: Box) -> None:
    """TaskLockboxTest.testAppendLockCanRevokeAllIncompatible."""
    box.granted("SHARED", iv("2016-01-01", "2019-01-01"), HIGH).abort()
    exclusive = box.granted("EXCLUSIVE", iv("2017-01-01", "2017-02-01"), LOW)
    replace = box.granted("REPLACE", iv("2017-07-01", "2018-07-01"), LOW)
    a0 = box.granted("APPEND", iv("2017-02-01", "2017-03-01"), LOW)
    a1 = box.granted("APPEND", iv("2017-02-01", "2017-05-01"), HIGH)
    box.expect([exclusive, replace, a0, a1])
    the = box.granted("APPEND", Y2017, MEDIUM)
    box.expect([the, a0, a1], [exclusive, replace])


def test_replace_lock_compatibility(box: Box) -> None:
    """TaskLockboxTest.testReplaceLockCompatibility."""
    the = box.granted("REPLACE", Y2017, MEDIUM)
    box.refused("EXCLUSIVE", iv("2017-05-01", "2017-06-01"), MEDIUM)
    box.refused("SHARED", iv("2016-01-01", "2019-01-01"), MEDIUM)
    box.refused("REPLACE", Y2017, MEDIUM)
    append = box.granted("APPEND", iv("2017-05-01", "2017-06-01"), HIGH)  # inside: no revoke
    box.refused("APPEND", iv("2016-05-01", "2017-06-01"), MEDIUM)  # sticks out
    box.expect([the, append])


def test_replace_lock_revokes_every_incompatible_lower_lock(box: Box) -> None:
    """TaskLockboxTest.testReplaceLockCanRevokeAllIncompatible: appends it contains
    survive, whatever their priority; lower ones that stick out are revoked."""
    box.granted("APPEND", iv("2016-01-01", "2019-01-01"), HIGH).abort()
    a1 = box.granted("APPEND", iv("2017-02-01", "2017-03-01"), HIGH)
    a2 = box.granted("APPEND", iv("2017-09-01", "2018-03-01"), LOW)
    exclusive = box.granted("EXCLUSIVE", iv("2017-05-01", "2017-06-01"), LOW)
    replace = box.granted("REPLACE", iv("2016-09-01", "2017-03-01"), LOW)
    shared = box.granted("SHARED", iv("2017-04-01", "2017-05-01"), LOW)
    box.expect([a1, a2, exclusive, replace, shared])
    the = box.granted("REPLACE", Y2017, MEDIUM)
    box.expect([a1, the], [a2, exclusive, replace, shared])


def test_overlapping_shared_locks_both_block_an_exclusive_request(box: Box) -> None:
    """TaskLockboxTest.testConflictsWithOverlappingSharedLocks."""
    wide = box.granted("SHARED", iv("2023-05-01", "2023-06-01"), MEDIUM)
    narrow = box.granted("SHARED", iv("2023-05-26", "2023-05-27"), MEDIUM)
    box.refused("EXCLUSIVE", iv("2023-05-28", "2023-06-03"), MEDIUM)
    box.expect([wide, narrow])


def test_a_narrower_higher_lock_revokes_the_whole_wider_lock(box: Box) -> None:
    """TaskLockboxTest.testFindLockPosseAfterRevokeWithDifferentLockIntervals (hours in
    Druid; days here, the table's chunks)."""
    low = box.granted("EXCLUSIVE", iv("2018-12-16", "2018-12-18"), 0)
    high = box.granted("EXCLUSIVE", iv("2018-12-16", "2018-12-17"), 10)
    box.expect([high], [low])
    (revoked,) = [x for x in box.t.locks() if x.state == "REVOKED"]
    assert revoked.interval == Interval.coerce(iv("2018-12-16", "2018-12-18"))


def test_a_revoked_lock_fails_the_publish_and_a_preempting_one_publishes(
    t: lamina.Table, box: Box
) -> None:
    """TaskLockboxTest.testDoInCriticalSectionWithRevokedLock,
    testPreemptionAndDoInCriticalSection, testDoInCriticalSectionWithSharedLock,
    TaskLocksTest.testRevokedLocksDoNotCoverSegments."""
    d = iv("2017-01-01", "2017-01-02")
    shared = [box.granted("SHARED", d, 50) for _ in range(5)]
    for tx in shared[:2]:
        tx.append(events(days=1, per_day=2, start="2017-01-01", value=1.0))
    high = box.granted("EXCLUSIVE", d, 100)
    high.overwrite(events(days=1, per_day=3, start="2017-01-01", value=9.0))
    high.commit()
    for tx in shared:
        with pytest.raises(LockRevokedError):
            tx.commit()
    assert values(t) == {9.0: 3}
    assert t.locks() == []


def test_a_revoked_lock_is_not_granted_again_once_the_winner_is_done(
    t: lamina.Table, box: Box
) -> None:
    """TaskLockboxTest.testAcquireLockAfterRevoked."""
    d = iv("2017-01-01", "2017-01-02")
    low = box.granted("EXCLUSIVE", d, 0)
    high = box.granted("EXCLUSIVE", d, 10)
    high.commit()
    assert box.state(low) == "REVOKED"
    with pytest.raises(LockRevokedError):  # its next action learns it (LockResult.revoked)
        low.append(events(days=1, per_day=1, start="2017-01-01"))
    with pytest.raises(LockRevokedError):
        low.commit()
    assert t.count() == 0 and t.locks() == []


def test_every_lock_is_gone_once_its_transactions_end(t: lamina.Table, box: Box) -> None:
    """TaskLockboxTest.testUnlock: eight low locks, four of them revoked by higher ones."""
    days = [iv(f"2017-01-0{i + 1}", f"2017-01-0{i + 2}") for i in range(8)]
    low = [box.granted("EXCLUSIVE", d, 10) for d in days]
    high = [box.granted("EXCLUSIVE", d, 100) for d in days[:4]]
    box.expect(high + low[4:], low[:4])
    for tx in low[:4]:
        tx.abort()
    for tx in high + low[4:]:
        tx.commit()
    assert t.locks() == []


def test_locks_and_revocations_are_read_back_by_a_new_catalog_connection(
    t: lamina.Table, box: Box, catalog_url: str, tmp_path: Any
) -> None:
    """TaskLockboxTest.testSyncFromStorage, testRevokedLockSyncFromStorage: the locks
    live in the catalog, so another process sees the same ones."""
    for i in range(5):
        box.granted("EXCLUSIVE", iv(f"2017-01-0{i + 1}", f"2017-01-0{i + 2}"), 50)
    low = box.granted("EXCLUSIVE", iv("2017-02-01", "2017-03-01"), 10)
    box.granted("EXCLUSIVE", iv("2017-02-01", "2017-03-01"), 100)
    mine = [(x.id, x.type, x.interval, x.priority, x.state, x.commit_id) for x in t.locks()]
    other = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    try:
        theirs = [
            (x.id, x.type, x.interval, x.priority, x.state, x.commit_id)
            for x in other.load_table("k").locks()
        ]
    finally:
        other.close()
    assert theirs == mine and len(mine) == 7
    assert box.state(low) == "REVOKED"


def test_locks_list_their_intervals(t: lamina.Table, box: Box) -> None:
    """TaskLockboxTest.testGetLockedIntervals, testGetLockedIntervalsForRevokedLocks
    (lamina lists locks per table, revoked ones marked, with no priority filter)."""
    box.granted("EXCLUSIVE", iv("2017-01-01", "2017-02-01"), 50)
    box.granted("EXCLUSIVE", iv("2017-04-01", "2017-05-01"), 50)
    low = box.granted("EXCLUSIVE", iv("2017-07-01", "2018-01-01"), 5)
    box.granted("EXCLUSIVE", iv("2017-09-01", "2017-10-01"), 10)
    granted = [x.interval for x in t.locks() if x.state == "GRANTED"]
    assert granted == [
        Interval.coerce(iv("2017-01-01", "2017-02-01")),
        Interval.coerce(iv("2017-04-01", "2017-05-01")),
        Interval.coerce(iv("2017-09-01", "2017-10-01")),
    ]
    assert box.state(low) == "REVOKED"


def test_a_finished_transaction_holds_and_takes_no_lock(t: lamina.Table) -> None:
    """TaskLockboxTest.testLockAfterTaskComplete, testTryLockAfterTaskComplete."""
    tx = t.transaction(lock="EXCLUSIVE", interval=DAY1, wait_s=0)
    tx.append(day_rows(1, 2, 1.0))
    tx.commit()
    assert t.locks() == []
    with pytest.raises(TransactionError):
        tx.append(day_rows(1, 2, 1.0))
    assert t.locks() == [] and t.count() == 2


def test_a_holder_s_time_chunk_and_segment_locks_never_conflict() -> None:
    """TaskLockboxTest.testGetTimeChunkAndSegmentLockForSameGroup (pure rules: one
    holder, as Druid's one task group)."""
    day = Interval.coerce(DAY1)
    chunk = Lock(1, "me", LockType.EXCLUSIVE, day, 0)
    seg = Lock(2, "me", LockType.SEGMENT, day, 0, LockState.WAITING, frozenset({"p0"}))
    assert decide(seg, [chunk]).granted
    other = Lock(3, "other", LockType.SEGMENT, day, 0, LockState.WAITING, frozenset({"p0"}))
    assert not decide(other, [chunk]).granted  # testGetTimeChunkAndSegmentLockForDifferentGroup


def test_default_priorities_follow_druid_task_defaults(cat: lamina.Catalog) -> None:
    """Druid's Tasks.DEFAULT_{BATCH_INDEX,MERGE,REALTIME}_TASK_PRIORITY = 50, 25, 75; lamina
    documents the same defaults for batch writes, compaction and streaming/upserts
    (docs/concurrency.md "Task locks")."""
    t = cat.create_table("b", SCHEMA, time_column="ts", segment_granularity="DAY")
    with t.transaction(lock="APPEND", interval=DAY1):
        assert [x.priority for x in t.locks()] == [50]
    schema = pa.schema(
        [pa.field("ts", pa.timestamp("us")), pa.field("k", pa.int64(), nullable=False)]
    )
    u = cat.create_table("u", schema, time_column="ts", primary_key="k")
    with u.transaction(lock="APPEND", interval=DAY1):
        assert [x.priority for x in u.locks()] == [75]


# -- segment locks: a minor compaction locks its inputs -----------------------------------


def appends(t: lamina.Table, n: int, day: int = 1, per: int = 5) -> list[str]:
    """``n`` small appends into one day; the ids of P0..Pn-1 (first generation)."""
    first = len([s for s in t.segments() if s.interval == Interval.coerce(day_iv(day))])
    for i in range(n):
        t.append(events(days=1, per_day=per, seed=100 + first + i, start=f"2024-01-{day:02d}"))
    by_pid = {
        s.partition_id: s.id for s in t.segments() if s.interval == Interval.coerce(day_iv(day))
    }
    return [by_pid[p] for p in sorted(by_pid)]


def day_iv(day: int) -> tuple[str, str]:
    return (f"2024-01-{day:02d}", f"2024-01-{day + 1:02d}")


def compact_while(t: lamina.Table, during: Callable[[], Any], **kw: Any) -> tuple[Any, Any]:
    """Run ``t.compact(**kw)``; ``during`` runs once while the compaction holds its
    SEGMENT locks (granted, outputs not yet written). Returns (the compaction's commit
    or the error it raised, what ``during`` returned or raised)."""
    seen: dict[str, Any] = {}

    def hooked(**_: Any) -> None:
        if "during" not in seen:
            seen["during"] = None  # a compaction run by ``during`` is not hooked again
            try:
                seen["during"] = during()
            except Exception as exc:  # noqa: BLE001 - handed back to the test
                seen["during"] = exc

    with failpoints.armed("compaction.minor.before_write_run", hooked):
        try:
            out: Any = t.compact(**kw)
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            out = exc
    return out, seen.get("during")


def test_a_segment_lock_names_its_segments_chunk_and_priority(t: lamina.Table) -> None:
    """TaskLockboxTest.testSegmentLock."""
    ids = appends(t, 3)
    out, held = compact_while(t, t.locks, segments=ids[:2])
    assert not isinstance(out, Exception)
    (info,) = held
    assert (info.type, info.state, info.priority) == ("SEGMENT", "GRANTED", 25)
    assert info.interval == Interval.coerce(DAY1)
    assert sorted(info.segments) == sorted(ids[:2])
    assert t.locks() == []


def test_segment_locks_on_the_same_segment_conflict(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TaskLockboxTest.testSegmentLockForSameIntervalAndSamePartition."""
    ids = appends(t, 4)
    before = len(t.history())
    out, inner = compact_while(t, lambda: t.compact(segments=ids[1:3], wait_s=0), segments=ids[:2])
    assert isinstance(inner, LockTimeoutError)
    assert not isinstance(out, Exception) and len(out.removed) == 2
    assert len([c for c in t.history() if c.state == "COMPLETED"]) == before + 1


def test_segment_locks_on_other_segments_of_the_chunk_coexist(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TaskLockboxTest.testSegmentLockForSameIntervalDifferentPartition."""
    ids = appends(t, 4)
    total = t.count()
    out, inner = compact_while(t, lambda: t.compact(segments=ids[2:], wait_s=0), segments=ids[:2])
    assert not isinstance(inner, Exception) and not isinstance(out, Exception)
    segs = t.segments()
    assert sorted(s.root_range for s in segs) == [(0, 2), (2, 4)]
    assert t.count() == total


def test_an_equal_priority_time_chunk_lock_waits_for_a_segment_lock(t: lamina.Table) -> None:
    """TaskLockboxTest.testSegmentAndTimeChunkLockForSameInterval."""
    ids = appends(t, 3)

    def replace() -> None:
        with t.transaction(lock="REPLACE", interval=DAY1, priority=25, wait_s=0) as tx:
            tx.overwrite(day_rows(1, 2, 9.0))

    out, inner = compact_while(t, replace, segments=ids)
    assert isinstance(inner, LockTimeoutError)
    assert not isinstance(out, Exception)
    assert 9.0 not in values(t) and t.count() == 15


def test_a_higher_priority_overwrite_revokes_a_running_compaction(t: lamina.Table) -> None:
    """TaskLockboxTest.testSegmentAndTimeChunkLockForSameIntervalWithDifferentPriority;
    CompactionTaskRunTest.testRunIndexAndCompactForSameSegmentAtTheSameTime2 (the
    batch index task wins, the compaction fails)."""
    ids = appends(t, 3)

    def overwrite() -> Any:
        with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as tx:  # batch: 50
            tx.overwrite(day_rows(1, 2, 9.0))
        return tx.commit_result

    out, inner = compact_while(t, overwrite, segments=ids)
    assert not isinstance(inner, Exception) and inner.action == "OVERWRITE"
    assert isinstance(out, LockRevokedError)
    assert values(t) == {9.0: 2} and t.locks() == []


def test_an_overwrite_that_got_its_lock_first_makes_the_compaction_wait(
    t: lamina.Table,
) -> None:
    """TaskLockboxTest.testGetTimeChunkAndSegmentLockForDifferentGroup;
    CompactionTaskRunTest.testRunIndexAndCompactForSameSegmentAtTheSameTime (index task
    ready first: it succeeds, the compaction does not)."""
    ids = appends(t, 3)
    with t.transaction(lock="EXCLUSIVE", interval=DAY1, priority=25) as tx:
        tx.overwrite(day_rows(1, 2, 9.0))
        with pytest.raises(LockTimeoutError):
            t.compact(segments=ids, wait_s=0)
    assert values(t) == {9.0: 2}


def test_appends_under_any_priority_coexist_with_a_compaction(t: lamina.Table) -> None:
    """Seed proposal / docs: an APPEND lock never revokes a segment lock (Druid's
    APPEND locks coexist with the segments being compacted)."""
    ids = appends(t, 3)

    def stream() -> None:
        with t.transaction(lock="APPEND", interval=DAY1, priority=75, wait_s=0) as tx:
            tx.append(day_rows(1, 4, 7.0))

    out, inner = compact_while(t, stream, segments=ids)
    assert inner is None and not isinstance(out, Exception)
    assert t.count() == 15 + 4 and values(t)[7.0] == 4


def test_new_segment_partition_ids(t: lamina.Table) -> None:
    """TaskLockboxTest.testRequestForNewSegmentWithSegmentLock; PartitionIds: first
    generation ids count from 0, later generations from 32768."""
    ids = appends(t, 3)
    assert [s.partition_id for s in t.segments()] == [0, 1, 2]
    t.compact(segments=ids, target_rows_per_segment=8)  # 15 rows: a group of two
    group = sorted(t.segments(), key=lambda s: s.partition_id)
    assert [s.partition_id for s in group] == [
        OVERWRITE_PARTITION_START,
        OVERWRITE_PARTITION_START + 1,
    ]
    assert {(s.root_range, s.minor_version, s.atomic_update_group_size) for s in group} == {
        ((0, 3), 1, 2)
    }


# -- TaskLocksTest: do the locks cover what a task publishes ---------------------------------


def test_a_lock_covering_every_written_chunk_wins_over_optimistic_writers(
    t: lamina.Table,
) -> None:
    """TaskLocksTest.testCheckLockCoversSegments, testCheckLargeLockCoversSegments: one
    lock over three chunks covers segments in all three. An optimistic writer's
    overwrite there is refused while the lock is held (else the holder, publishing
    without conflict checks, would undo it silently)."""
    t.append(events(days=3, per_day=4, value=1.0))
    tx = t.transaction(lock="EXCLUSIVE", interval=("2024-01-01", "2024-01-04"))
    tx.overwrite(events(days=3, per_day=2, value=2.0))
    with pytest.raises(CommitConflictError, match="holds a EXCLUSIVE lock"):
        t.overwrite(day_rows(2, 7, 7.0))  # an optimistic writer, no lock
    tx.commit()
    assert values(t) == {2.0: 6}


def test_a_write_outside_the_transaction_s_lock_is_refused(t: lamina.Table) -> None:
    """TaskLocksTest.testCheckLockCoversSegmentsWithOverlappedIntervals;
    ConcurrentReplaceAndAppendTest.testAllocateLockReplaceDayAppendMonth ("segments
    are not covered by locks"): a task may publish only segments its locks cover."""
    t.append(events(days=3, per_day=4, value=1.0))
    with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as tx:
        with pytest.raises(LockError, match="outside it"):
            tx.overwrite(events(days=2, per_day=2, value=2.0))  # days 1-2; the lock: day 1
        tx.overwrite(events(days=1, per_day=2, value=2.0))  # inside it: taken
    assert values(t) == {1.0: 8, 2.0: 2}


# -- ConcurrentReplaceAndAppendTest ----------------------------------------------------------

# L: the REPLACE lock is granted; O: an APPEND-locked transaction opens and writes its
# files (Druid: allocates its pending segment); A: the append publishes; R: the replace
# publishes.
ORDERS = {
    "LROA": "testLockReplaceAllocateAppend",
    "LOAR": "testLockAllocateAppendDayReplaceDay",
    "LORA": "testLockAllocateReplaceDayAppendDay",
    "OLRA": "testAllocateLockReplaceDayAppendDay",
    "OLAR": "testAllocateLockAppendDayReplaceDay",
    "OALR": "testAllocateAppendDayLockReplaceDay",
}


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o}-{ORDERS[o]}")
def test_concurrent_replace_and_append_of_a_day(t: lamina.Table, order: str) -> None:
    """ConcurrentReplaceAndAppendTest, the DAY/DAY methods named in the id: appended rows
    stay visible on the replace's version unless they were published before the
    replace took its lock."""
    t.append(day_rows(1, 5, 1.0))
    replace: Transaction | None = None
    append: Transaction | None = None
    for step in order:
        if step == "L":
            replace = t.transaction(lock="REPLACE", interval=DAY1, priority=25, wait_s=0)
            replace.base_seq  # noqa: B018 - takes the lock
        elif step == "O":
            append = t.transaction(lock="APPEND", interval=DAY1, priority=75, wait_s=0)
            append.append(day_rows(1, 3, 3.0))
        elif step == "A":
            assert append is not None
            append.commit()
        else:
            assert replace is not None
            replace.overwrite(day_rows(1, 2, 2.0))
            replace.commit()
    assert replace is not None and replace.commit_result is not None
    version = {s.version for s in t.segments() if s.id in replace.commit_result.added}
    if order == "OALR":
        assert values(t) == {2.0: 2}
    else:
        assert values(t) == {2.0: 2, 3.0: 3}
    assert {s.version for s in t.segments()} == version  # all on the replace's version
    assert t.locks() == []


MONTHLY = {"RRAA": 62, "RAAR": 62, "RARA": 62, "ARRA": 62, "ARAR": 62, "AARR": 31}


@pytest.mark.parametrize("order", MONTHLY)
def test_daily_replace_and_daily_append_over_a_month(t: lamina.Table, order: str) -> None:
    """ConcurrentReplaceAndAppendTest (older version) test{RRAA,RAAR,RARA,ARRA,ARAR,
    AARR}_dailyReplaceDailyAppend: first R = lock, second R = publish; first A = open
    and write one row into each of 31 days, second A = publish."""
    replace = t.transaction(lock="REPLACE", interval=JAN, wait_s=0)
    append = t.transaction(lock="APPEND", interval=JAN, wait_s=0)
    month = events(days=31, per_day=1, value=3.0)
    seen = Counter[str]()
    for step in order:
        seen[step] += 1
        if (step, seen[step]) == ("R", 1):
            replace.base_seq  # noqa: B018
        elif step == "R":
            replace.overwrite(events(days=31, per_day=1, value=2.0), interval=JAN)
            replace.commit()
        elif seen[step] == 1:
            append.append(month)
        else:
            append.commit()
    assert len(t.segments()) == MONTHLY[order]
    assert values(t) == ({2.0: 31} if order == "AARR" else {2.0: 31, 3.0: 31})


def test_three_replaces_and_an_append_that_spans_them(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testLockReplaceAllocateLockReplaceLockReplaceAppend:
    an append started on v1 publishes after v2 and while v3's lock is held: it shows on
    v2, then is carried onto v3."""
    with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as r1:
        r1.overwrite(day_rows(1, 2, 1.0))
    append = t.transaction(lock="APPEND", interval=DAY1, wait_s=0)
    append.append(day_rows(1, 3, 3.0))
    with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as r2:
        r2.overwrite(day_rows(1, 2, 2.0))
    r3 = t.transaction(lock="REPLACE", interval=DAY1, wait_s=0)
    r3.base_seq  # noqa: B018
    c = append.commit()
    assert values(t) == {2.0: 2, 3.0: 3}
    (mine,) = [s for s in t.segments() if s.id in c.added]
    assert mine.version == t.segments()[0].version  # joined v2
    r3.overwrite(day_rows(1, 4, 4.0))
    r3.commit()
    assert values(t) == {4.0: 4, 3.0: 3}
    assert len({s.version for s in t.segments()}) == 1


def test_several_appends_after_a_replace(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testLockReplaceMultipleAppends."""
    with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as r:
        r.overwrite(day_rows(1, 2, 1.0))
    a1 = t.transaction(lock="APPEND", interval=DAY1, wait_s=0)
    a2 = t.transaction(lock="APPEND", interval=DAY1, wait_s=0)
    a1.append(day_rows(1, 3, 3.0))
    a2.append(day_rows(1, 4, 4.0))
    a1.commit()
    a2.commit()
    assert values(t) == {1.0: 2, 3.0: 3, 4.0: 4}
    assert len({s.version for s in t.segments()}) == 1


def test_an_append_written_across_replaces_lands_on_the_latest_version(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testSegmentIsAllocatedAtLatestVersion,
    testLockAllocateDayReplaceMonthAllocateAppend."""
    append = t.transaction(lock="APPEND", interval=DAY1, wait_s=0)
    append.append(day_rows(1, 1, 5.0))
    for value in (1.0, 2.0):
        with t.transaction(lock="REPLACE", interval=DAY1, wait_s=0) as r:
            r.overwrite(day_rows(1, 2, value))
        append.append(day_rows(1, 1, 5.0 + value))
    append.commit()
    assert values(t) == {2.0: 2, 5.0: 1, 6.0: 1, 7.0: 1}
    assert len({s.version for s in t.segments()}) == 1


def test_a_replace_replaces_what_was_visible_when_its_lock_was_granted(
    t: lamina.Table,
) -> None:
    """ConcurrentReplaceAndAppendTest.testSegmentsToReplace: the replace's inputs are
    fixed when it gets its lock, even if it had to wait for it."""
    t.append(day_rows(1, 2, 1.0))
    holder = t.transaction(lock="EXCLUSIVE", interval=DAY1, wait_s=0)
    holder.append(day_rows(1, 3, 3.0))
    result: dict[str, Any] = {}

    def replace() -> None:
        try:
            with t.transaction(lock="REPLACE", interval=DAY1, wait_s=20) as tx:
                result["base"] = tx.base_seq
                tx.overwrite(day_rows(1, 4, 4.0))
        except Exception as exc:  # noqa: BLE001 - checked below
            result["error"] = exc

    waiter = threading.Thread(target=replace)
    waiter.start()
    deadline = time.monotonic() + 10
    while [x.state for x in t.locks()] != ["GRANTED", "WAITING"]:
        assert time.monotonic() < deadline, t.locks()
        time.sleep(0.02)
    done = holder.commit()  # published before the replace gets its lock: replaced
    waiter.join(20)
    assert "error" not in result, result
    assert result["base"] == done.seq
    assert values(t) == {4.0: 4}


def test_a_replace_into_coarser_segments_carries_a_concurrent_append(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testLockAllocateAppendDayReplaceMonth (a major
    compaction into MONTH segments is lamina's month-granular replace), then
    testLockReplaceMonthAllocateAppendDay: a day's append afterwards lands in the month
    segment's interval and version."""
    t.append(events(days=3, per_day=5, value=1.0))

    def append_meanwhile(table: object) -> None:  # the compaction has read its rows
        with t.transaction(lock="APPEND", interval=DAY1, priority=75, wait_s=0) as ap:
            ap.append(day_rows(1, 4, 4.0))

    with failpoints.armed("compaction.major.read", append_meanwhile):
        c = t.compact(interval=JAN, mode="major", segment_granularity="MONTH")
    assert c is not None
    month = Interval.coerce(JAN)
    (replaced,) = [s for s in t.segments() if s.id in c.added and s.location and s.row_count == 15]
    assert {(s.interval, s.version) for s in t.segments()} == {(month, replaced.version)}
    assert values(t) == {1.0: 15, 4.0: 4}
    late = t.append(day_rows(1, 2, 5.0))
    (seg,) = [s for s in t.segments() if s.id in late.added]
    assert (seg.interval, seg.version) == (month, replaced.version)


def test_an_append_open_across_a_month_replace_lands_in_the_month(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testLockAllocateReplaceMonthAppendDay,
    testAllocateLockReplaceMonthAppendDay: a day's append written before a MONTH
    replace and published after it shows on the month's interval and version."""
    t.append(events(days=3, per_day=5, value=1.0))
    append = t.transaction(lock="APPEND", interval=DAY1, priority=75, wait_s=0)
    append.append(day_rows(1, 4, 4.0))
    c = t.compact(interval=JAN, mode="major", segment_granularity="MONTH", wait_s=0)
    assert c is not None
    (month,) = [s for s in t.segments() if s.id in c.added]
    done = append.commit()
    (seg,) = [s for s in t.segments() if s.id in done.added]
    assert (seg.interval, seg.version) == (month.interval, month.version)
    assert values(t) == {1.0: 15, 4.0: 4}


def test_a_replace_of_a_day_and_an_append_lock_on_its_month_exclude_each_other(
    box: Box,
) -> None:
    """ConcurrentReplaceAndAppendTest.testLockReplaceDayAllocateAppendMonth,
    testLockAllocateAppendMonthReplaceDay, testAllocateAppendMonthLockReplaceDay."""
    replace = box.granted("REPLACE", DAY1, 50)
    box.refused("APPEND", JAN, 50)
    replace.abort()
    box.granted("APPEND", JAN, 50)
    box.refused("REPLACE", DAY1, 50)


def test_an_append_into_a_coarser_chunk_cannot_break_a_replace_lock(t: lamina.Table) -> None:
    """ConcurrentReplaceAndAppendTest.testLockReplaceDayAllocateAppendMonth,
    testLockAllocateAppendMonthReplaceDay: an append whose segment would take the
    month's interval needs an APPEND lock on the month, which a REPLACE held on one day
    refuses; the replace then publishes. Here the table's January is one MONTH segment
    (a major compaction), the appender locks only the day its rows fall in."""
    t.append(events(days=3, per_day=5, value=1.0))
    t.compact(interval=JAN, mode="major", segment_granularity="MONTH")
    replace = t.transaction(lock="REPLACE", interval=DAY1, wait_s=0)
    replace.overwrite(day_rows(1, 3, 6.0))
    appended = False
    try:
        with t.transaction(lock="APPEND", interval=DAY1, wait_s=0) as ap:
            ap.append(day_rows(1, 2, 7.0))
        appended = True
    except (LockTimeoutError, LockError):
        pass
    replace.commit()  # the lock holder must not lose
    jan1 = values(t, interval=DAY1)
    assert jan1[6.0] == 3 and jan1[1.0] == 0
    assert jan1[7.0] == (2 if appended else 0)


# -- SegmentLockHelper / CompactionTask: which inputs a segment-locked compaction takes ----


def test_later_generations_compact_only_with_adjacent_roots(t: lamina.Table) -> None:
    """SegmentLockHelper.verifyRootPartitionIsAdjacentAndAtomicUpdateGroupIsFull
    ("non-consecutive rootPartition range")."""
    p = appends(t, 6)
    t.compact(segments=p[0:3])
    t.compact(segments=p[4:6])
    g1 = next(s for s in t.segments() if s.root_range == (0, 3))
    g2 = next(s for s in t.segments() if s.root_range == (4, 6))
    with pytest.raises(CompactionError, match="adjacent"):
        t.compact(segments=[g1.id, g2.id])
    c = t.compact(segments=[p[3], g2.id])
    assert c is not None
    merged = next(s for s in t.segments() if s.root_range == (3, 6))
    assert merged.minor_version == 2
    c = t.compact(segments=[g1.id, merged.id])
    assert c is not None
    (final,) = t.segments()
    assert (final.root_range, final.minor_version) == ((0, 6), 3)
    assert t.count() == 30


def test_an_atomic_update_group_compacts_whole_or_not_at_all(t: lamina.Table) -> None:
    """SegmentLockHelper ("All atomicUpdateGroup must be compacted together"): a part
    of a group is refused, the whole group alone is fine."""
    p = appends(t, 3)
    t.compact(segments=p, target_rows_per_segment=8)
    group = sorted((s for s in t.segments()), key=lambda s: s.partition_id)
    assert len(group) == 2 and {s.atomic_update_group_size for s in group} == {2}
    with pytest.raises(CompactionError, match="include it"):
        t.compact(segments=[group[0].id])
    c = t.compact(segments=[s.id for s in group], target_rows_per_segment=100)
    assert c is not None
    (one,) = t.segments()
    assert (one.root_range, one.minor_version, one.row_count) == ((0, 3), 2, 15)
    assert one.partition_id == OVERWRITE_PARTITION_START + 2  # ids never reused


def test_a_named_segment_that_is_no_longer_visible_is_refused(t: lamina.Table) -> None:
    """CompactionTask's check that the segments named in its spec are the current used
    ones; AbstractBatchIndexTask's input lookup."""
    p = appends(t, 3)
    t.compact(segments=p[:2])
    history = len(t.history())
    with pytest.raises(CompactionError, match="not a visible segment"):
        t.compact(segments=[p[0], p[2]])
    assert len(t.history()) == history


def test_compacting_twice_keeps_the_root_range_and_raises_the_minor_version(
    t: lamina.Table,
) -> None:
    """CompactionTaskRunTest.testRunCompactionTwice (segment lock)."""
    p = appends(t, 2)
    t.compact(segments=p)
    (first,) = t.segments()
    assert (first.partition_id, first.root_range, first.minor_version) == (
        OVERWRITE_PARTITION_START,
        (0, 2),
        1,
    )
    t.compact(segments=[first.id])
    (second,) = t.segments()
    assert (second.partition_id, second.root_range, second.minor_version) == (
        OVERWRITE_PARTITION_START + 1,
        (0, 2),
        2,
    )
    assert second.version == first.version and t.count() == 10


def test_one_segment_locked_compaction_over_several_chunks(t: lamina.Table) -> None:
    """SegmentLockHelper.tryLockSegmentsIfNeeded / CompactionTask: input segments are
    grouped by interval and each group is checked and rewritten on its own, so one
    compaction may take the segments of several chunks."""
    day1 = appends(t, 2, day=1)
    day2 = appends(t, 2, day=2)
    c = t.compact(segments=day1 + day2)
    assert c is not None and sorted(c.removed) == sorted(day1 + day2)
    assert sorted((str(s.interval), s.root_range) for s in t.segments()) == [
        (str(Interval.coerce(day_iv(1))), (0, 2)),
        (str(Interval.coerce(day_iv(2))), (0, 2)),
    ]


# -- segment allocation (SegmentAllocateActionTest, IndexerSQLMetadataStorageCoordinatorTest)


def test_appends_take_the_next_partition_ids_of_the_chunk_version(t: lamina.Table) -> None:
    """SegmentAllocateActionTest.testManySegmentsSameInterval,
    testAddToExistingNumberedShardSpecsSameGranularity: after two core partitions,
    appends take partitions 2 and 3 of the same version."""
    t.set_properties(**{"target_rows_per_segment": "5"})
    c = t.overwrite(day_rows(1, 10, 1.0))
    core = [s for s in t.segments() if s.id in c.added]
    assert sorted(s.partition_id for s in core) == [0, 1]
    a = t.append(day_rows(1, 1, 2.0))
    b = t.append(day_rows(1, 1, 3.0))
    added = [s for s in t.segments() if s.id in a.added + b.added]
    assert sorted(s.partition_id for s in added) == [2, 3]
    assert {s.version for s in added} == {core[0].version}


def test_ids_are_not_reused_after_the_overwrite_segment_is_dropped(t: lamina.Table) -> None:
    """IndexerSQLMetadataStorageCoordinatorTest.testAllocatePendingSegmentAfterDropping
    ExistingSegment: three appends, a reindex, one more append on the reindex's version,
    the reindex dropped, one more append: it stays on that version and takes the next
    partition id, never one already used."""
    appends(t, 3)
    reindex = t.overwrite(day_rows(1, 6, 1.0))
    (core,) = [s for s in t.segments() if s.id in reindex.added]
    a1 = t.append(day_rows(1, 2, 2.0))
    (s1,) = [s for s in t.segments() if s.id in a1.added]
    assert (s1.version, s1.partition_id) == (core.version, 1)
    t.delete_segments([core.id])
    a2 = t.append(day_rows(1, 2, 3.0))
    (s2,) = [s for s in t.segments() if s.id in a2.added]
    assert (s2.version, s2.partition_id) == (core.version, 2)
    assert values(t) == {2.0: 2, 3.0: 2}
