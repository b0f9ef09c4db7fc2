"""Task locks through the catalog (Druid's TaskLockbox): wait or fail, priorities and
revocation, APPEND inside REPLACE, locks that die with their holder; both catalogs."""

from __future__ import annotations

import os
import socket
from collections import Counter

import pyarrow as pa
import pytest
from sqlalchemy import update

import lamina
from lamina.errors import (
    CommitConflictError,
    InvalidIntervalError,
    LineageError,
    LockError,
    LockRevokedError,
    LockTimeoutError,
    TableNotFoundError,
)
from lamina.meta.schema import commits
from tests.helpers import SCHEMA, events

JAN = ("2024-01-01", "2024-02-01")


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    table = cat.create_table("k", SCHEMA, time_column="ts", segment_granularity="DAY")
    table.append(events(days=3, per_day=10, value=1.0))
    return table


def day(d: int, rows: int, value: float) -> pa.Table:
    return events(days=1, per_day=rows, value=value, seed=int(value * 10), start=f"2024-01-0{d}")


def values(t: lamina.Table) -> Counter[float]:
    return Counter(t.to_arrow(columns=["v"]).column("v").to_pylist())


def test_a_conflicting_request_waits_then_times_out(t: lamina.Table) -> None:
    with t.transaction(lock="REPLACE", interval=JAN) as a:
        a.overwrite(day(2, 3, 2.0))
        held = t.locks()
        assert [(x.type, x.state, x.priority) for x in held] == [("REPLACE", "GRANTED", 50)]
        assert str(held[0].interval) == "2024-01-01T00:00:00Z/2024-02-01T00:00:00Z"
        with pytest.raises(LockTimeoutError, match="t.locks()"):
            t.transaction(
                lock="EXCLUSIVE", interval=("2024-01-02", "2024-01-03"), wait_s=0.3
            ).commit()
    assert values(t) == {1.0: 20, 2.0: 3}
    assert t.locks() == []  # released with the commit
    with t.transaction(lock="EXCLUSIVE", wait_s=0) as b:  # free now
        b.append(day(3, 1, 3.0))
    assert values(t) == {1.0: 20, 2.0: 3, 3.0: 1}


def test_a_higher_priority_request_revokes_and_the_holder_fails_at_publish(
    t: lamina.Table,
) -> None:
    low = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    low.overwrite(day(2, 3, 2.0))
    with t.transaction(lock="REPLACE", interval=JAN, priority=75, wait_s=0) as high:
        high.overwrite(day(1, 2, 5.0))
    with pytest.raises(LockRevokedError, match="higher-priority"):
        low.commit()
    assert values(t) == {1.0: 20, 5.0: 2}


def test_a_revoked_idle_transaction_fails_at_its_next_write_at_once(t: lamina.Table) -> None:
    """Druid's holder learns of the revocation at its next action: no heartbeat need
    pass first, and the refused write leaves no file behind."""
    low = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    low.overwrite(day(2, 3, 2.0))
    high = t.transaction(lock="EXCLUSIVE", interval=("2024-01-02", "2024-01-03"), priority=50)
    assert high.base_seq >= 0  # granted now: the REPLACE is revoked
    with pytest.raises(LockRevokedError, match="revoked"):
        low.overwrite(day(3, 3, 3.0))
    high.abort()
    with pytest.raises(LockRevokedError):
        low.commit()
    assert values(t) == {1.0: 30}
    assert sorted(c.state for c in t.history()) == ["ABORTED", "ABORTED", "COMPLETED"]


def test_a_with_block_whose_lock_was_revoked_aborts_its_commit(t: lamina.Table) -> None:
    """The publish at the end of the block fails, and the commit is aborted with its
    files removed — not left open for as long as the process lives."""
    low = t.transaction(lock="REPLACE", interval=JAN, priority=10)
    with pytest.raises(LockRevokedError), low:
        low.overwrite(day(2, 3, 2.0))
        with t.transaction(lock="REPLACE", interval=JAN, priority=90, wait_s=0) as high:
            high.overwrite(day(3, 1, 3.0))
    states = {c.id: c.state for c in t.history()}
    assert sorted(states.values()) == ["ABORTED", "COMPLETED", "COMPLETED"]
    assert values(t) == {1.0: 20, 3.0: 1}


def test_an_append_inside_a_replace_coexists_and_is_carried(t: lamina.Table) -> None:
    replace = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    replace.overwrite(day(2, 3, 2.0))
    with t.transaction(lock="APPEND", interval=("2024-01-02", "2024-01-03"), wait_s=0) as ap:
        ap.append(day(2, 4, 4.0))
    replace.commit()
    assert values(t) == {1.0: 20, 2.0: 3, 4.0: 4}


@pytest.mark.parametrize("how", ["lock-free", "APPEND lock"])
def test_an_append_into_a_coarser_chunk_is_carried_by_the_chunk_of_its_rows(
    t: lamina.Table, how: str
) -> None:
    """After a major compaction to MONTH an append of day 2 joins the MONTH chunk (as
    Druid allocates into a committed MONTH chunk); a REPLACE holder overwriting the
    month in DAY chunks carries it into its day 2 chunk instead of failing."""
    t.compact(mode="major", segment_granularity="MONTH", interval=JAN)
    replace = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    replace.overwrite(day(2, 3, 2.0), interval=JAN)  # the whole month: days 1, 3 emptied
    if how == "lock-free":
        t.append(day(2, 4, 4.0))
    else:
        with t.transaction(lock="APPEND", interval=("2024-01-02", "2024-01-03"), wait_s=0) as a:
            a.append(day(2, 4, 4.0))
    assert [str(s.interval)[:10] for s in t.segments()] == ["2024-01-01", "2024-01-01"]
    replace.commit()
    assert values(t) == {2.0: 3, 4.0: 4}
    assert {str(s.interval)[:21] for s in t.segments()} == {"2024-01-02T00:00:00Z/"}


def test_an_overwrite_leaves_a_coarse_appended_segment_whose_rows_it_does_not_hide(
    t: lamina.Table,
) -> None:
    t.compact(mode="major", segment_granularity="MONTH", interval=JAN)
    replace = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    replace.overwrite(day(3, 2, 3.0))  # day 3 only
    appended = t.append(day(2, 4, 4.0))  # into the MONTH chunk, rows of day 2
    done = replace.commit()
    assert values(t) == {1.0: 20, 3.0: 2, 4.0: 4}
    at = t.to_arrow(columns=["v"], as_of=done.version)
    assert Counter(at.column("v").to_pylist()) == values(t)
    before = t.to_arrow(columns=["v"], as_of=appended.version)  # it completed first
    assert Counter(before.column("v").to_pylist()) == {1.0: 30, 4.0: 4}


def test_a_lock_free_overwrite_inside_a_held_lock_is_refused(t: lamina.Table) -> None:
    """The holder publishes without optimistic checks, so a lock-free overwrite that
    published first would be undone silently (hunts: both the overwrite and a
    transaction's); it is refused instead, retryable, and goes through once the lock
    is gone. A lock-free append is let through and carried."""
    locked = t.transaction(lock="REPLACE", interval=JAN)
    locked.overwrite(day(2, 3, 2.0))
    before = [c.id for c in t.history() if c.state == "COMPLETED"]
    with pytest.raises(CommitConflictError, match="holds a REPLACE lock") as err:
        t.overwrite(day(2, 7, 7.0))  # an optimistic writer that took no lock
    assert err.value.retryable
    with pytest.raises(CommitConflictError, match="holds a REPLACE lock"), t.transaction() as tx:
        tx.overwrite(day(2, 7, 7.0))
    seg = next(s for s in t.segments() if str(s.interval).startswith("2024-01-03"))
    with pytest.raises(CommitConflictError, match="holds a REPLACE lock"):
        t.delete_segments([seg.id])
    assert values(t) == {1.0: 30}  # nothing of them published
    assert [c.id for c in t.history() if c.state == "COMPLETED"] == before
    t.append(day(2, 4, 4.0))  # lock-free, carried by the holder's overwrite
    t.overwrite(events(days=1, per_day=5, value=6.0, start="2024-02-01"))  # outside
    locked.commit()
    assert values(t) == {1.0: 20, 2.0: 3, 4.0: 4, 6.0: 5}
    t.overwrite(day(2, 7, 7.0))  # the lock is gone
    assert values(t) == {1.0: 20, 7.0: 7, 6.0: 5}


def test_an_exclusive_lock_keeps_lock_free_overwrites_out(t: lamina.Table) -> None:
    with t.transaction(lock="EXCLUSIVE", interval=("2024-01-03", "2024-01-04")) as held:
        held.append(day(3, 1, 3.0))
        with pytest.raises(CommitConflictError, match="holds a EXCLUSIVE lock"):
            t.overwrite(day(3, 2, 8.0))
    assert values(t) == {1.0: 30, 3.0: 1}


def test_a_lineage_swap_inside_a_held_lock_waits_for_it(cat: lamina.Catalog) -> None:
    """An end or a rollback swaps segments the holder would overwrite unchecked."""
    t = cat.create_table(
        "p", SCHEMA, time_column="ts", segment_granularity="DAY", consistent_push=True
    )
    t.append(events(days=2, per_day=4, value=1.0))
    live = [s.id for s in t.segments()]
    e = t.start_replace(live, [])
    with t.transaction(lock="REPLACE", interval=("2024-01-02", "2024-01-03")) as held:
        held.append(day(2, 1, 3.0))
        with pytest.raises(LineageError, match="holds a REPLACE lock"):
            t.end_replace(e)
        assert [x.state for x in t.lineage() if x.id == e] == ["IN_PROGRESS"]
    t.end_replace(e)
    jan1 = ("2024-01-01", "2024-01-02")
    with t.transaction(lock="REPLACE", interval=jan1), pytest.raises(LineageError, match="back"):
        t.revert_replace(e)
    t.revert_replace(e)
    assert values(t) == {1.0: 8, 3.0: 1}


def test_a_lock_dies_with_its_holder(t: lamina.Table, cat: lamina.Catalog) -> None:
    dead = t.transaction(lock="EXCLUSIVE", interval=JAN)
    dead.append(day(1, 1, 9.0))
    gone = f"{socket.gethostname()}:{2**22 + os.getpid()}:dead"  # no such pid
    with cat.engine.begin() as conn:
        conn.execute(update(commits).where(commits.c.id == dead._write.id).values(owner=gone))
    with t.transaction(lock="EXCLUSIVE", interval=JAN, wait_s=5) as tx:
        tx.append(day(3, 1, 3.0))
    assert values(t) == {1.0: 30, 3.0: 1}
    states = {c.id: c.state for c in t.history()}
    assert states[dead._write.id] == "ABORTED"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lock": "WRITE"}, LockError, "EXCLUSIVE, SHARED, REPLACE, APPEND"),
        (
            {"lock": "REPLACE", "interval": ("2024-01-01T06:00", "2024-01-02")},
            InvalidIntervalError,
            "day boundary",
        ),
        ({"lock": "REPLACE", "priority": -1}, LockError, "priority"),
        ({"lock": "REPLACE", "wait_s": -1}, LockError, "wait_s"),
        ({"priority": 10}, LockError, "go with lock="),
    ],
)
def test_bad_lock_requests_are_typed_errors(
    t: lamina.Table, kwargs: dict, error: type[Exception], match: str
) -> None:
    before = len(t.history())
    with pytest.raises(error, match=match):
        t.transaction(**kwargs)
    assert len(t.history()) == before and t.locks() == []


def test_locks_of_an_unknown_table(cat: lamina.Catalog, t: lamina.Table) -> None:
    cat.drop_table("k")
    with pytest.raises(TableNotFoundError):
        t.locks()


@pytest.fixture
def fast(catalog_url: str, tmp_path) -> lamina.Catalog:  # type: ignore[no-untyped-def]
    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "whb"), heartbeat_s=0.05)
    yield cat
    cat.close()


def _beats() -> None:
    import time

    time.sleep(0.5)  # several heartbeat periods


def test_a_writer_stops_within_a_heartbeat_once_its_commit_is_aborted(
    fast: lamina.Catalog,
) -> None:
    from lamina.errors import CommitError

    t = fast.create_table("k", SCHEMA, time_column="ts", segment_granularity="DAY")
    tx = t.transaction()
    tx.append(day(1, 2, 1.0))
    with fast.engine.begin() as conn:  # as another writer's lazy cleanup would
        conn.execute(update(commits).where(commits.c.id == tx._write.id).values(state="ABORTED"))
    _beats()
    with pytest.raises(CommitError, match="aborted meanwhile") as info:
        tx.append(day(2, 2, 2.0))  # the next file is never written
    assert not isinstance(info.value, LockRevokedError)
    assert t.count() == 0


def test_a_writer_stops_within_a_heartbeat_once_its_lock_is_revoked(
    fast: lamina.Catalog,
) -> None:
    t = fast.create_table("k", SCHEMA, time_column="ts", segment_granularity="DAY")
    low = t.transaction(lock="REPLACE", interval=JAN, priority=25)
    low.overwrite(day(1, 2, 1.0))
    with t.transaction(lock="EXCLUSIVE", interval=JAN, priority=75, wait_s=0) as high:
        high.append(day(2, 1, 2.0))
        _beats()
        with pytest.raises(LockRevokedError, match="REPLACE lock on .* was revoked"):
            low.overwrite(day(3, 2, 3.0))
    assert values(t) == {2.0: 1}


def test_a_lock_id_acts_only_for_its_own_commit(t: lamina.Table, cat: lamina.Catalog) -> None:
    """SQLite gives a deleted row's id to the next row: a waiter whose commit was
    aborted (its locks dropped) and whose id went to another commit's lock must neither
    withdraw nor decide that lock when it times out or polls."""
    from lamina.meta import locks

    with t.transaction(lock="EXCLUSIVE", interval=JAN) as a:
        a.append(day(1, 1, 2.0))
        (held,) = t.locks()
        stranger = held.commit_id + 1000
        db = cat.context.db
        locks.cancel(db, held.id, stranger)
        assert not locks.try_grant(db, t._handle.record.id, held.id, stranger, 60.0).granted
        assert [(x.id, x.state) for x in t.locks()] == [(held.id, "GRANTED")]
    assert values(t) == {1.0: 30, 2.0: 1}
    assert t.locks() == []


def test_a_consistent_refresh_hiding_a_locked_day_is_refused(cat: lamina.Catalog) -> None:
    """A refresh of a consistent_push table hides every live segment through its entry,
    not only the chunks of its data: one with data of day 1 only went through while
    day 2 was locked (a review)."""
    t = cat.create_table(
        "p", SCHEMA, time_column="ts", segment_granularity="DAY", consistent_push=True
    )
    t.append(events(days=2, per_day=4, value=1.0))
    with t.transaction(lock="REPLACE", interval=("2024-01-02", "2024-01-03")) as held:
        held.append(day(2, 1, 3.0))
        with pytest.raises(CommitConflictError, match="holds a REPLACE lock"):
            t.refresh(day(1, 2, 5.0))
    assert values(t) == {1.0: 8, 3.0: 1}
    t.refresh(day(1, 2, 5.0))
    assert values(t) == {5.0: 2}
