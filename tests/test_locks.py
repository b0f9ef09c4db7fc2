"""Task lock rules (Druid's TaskLockbox): coexistence, priorities, revocation, order."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina.core.interval import Interval
from lamina.core.locks import Lock, LockState, LockType, coexist, decide, first_locked
from lamina.errors import LockError

D = 86_400_000_000
EX, SH, RE, AP = LockType.EXCLUSIVE, LockType.SHARED, LockType.REPLACE, LockType.APPEND
GRANTED, WAITING, REVOKED = LockState.GRANTED, LockState.WAITING, LockState.REVOKED


def days(a: int, b: int) -> Interval:
    return Interval.of(a * D, b * D)


_ids = itertools.count(1)


def lock(
    t: LockType,
    a: int = 0,
    b: int = 1,
    priority: int = 50,
    holder: str | None = None,
    state: LockState = GRANTED,
    id: int | None = None,
) -> Lock:
    n = next(_ids) if id is None else id
    return Lock(n, holder or f"tx{n}", t, days(a, b), priority, state)


# requested, held -> coexist on the same interval (and with the REPLACE over a wider one)
MATRIX = {
    (EX, EX): False, (EX, SH): False, (EX, RE): False, (EX, AP): False,
    (SH, EX): False, (SH, SH): True, (SH, RE): False, (SH, AP): False,
    (RE, EX): False, (RE, SH): False, (RE, RE): False, (RE, AP): True,
    (AP, EX): False, (AP, SH): False, (AP, RE): True, (AP, AP): True,
}  # fmt: skip


@pytest.mark.parametrize(("pair", "want"), MATRIX.items(), ids=str)
def test_the_coexistence_matrix(pair: tuple[LockType, LockType], want: bool) -> None:
    req, held = pair
    assert coexist(lock(req, 0, 1), lock(held, 0, 1)) is want
    assert decide(lock(req, 0, 1, id=100), [lock(held, 0, 1, id=1)]).granted is want


def test_replace_and_append_coexist_only_when_the_replace_contains_the_append() -> None:
    month, day, straddle = lock(RE, 0, 30), lock(AP, 3, 4), lock(AP, 29, 31)
    assert coexist(day, month) and coexist(month, day)
    assert not coexist(straddle, month) and not coexist(month, straddle)
    assert not coexist(lock(AP, 0, 30), lock(RE, 3, 4))  # an append wider than the replace


@pytest.mark.parametrize("kind", list(LockType))
def test_disjoint_intervals_never_interact(kind: LockType) -> None:
    for held in LockType:
        assert decide(lock(kind, 5, 6, id=100), [lock(held, 0, 5, id=1)]).granted


def test_a_strictly_higher_priority_revokes_every_incompatible_lock() -> None:
    shared = [lock(SH, 0, 2, priority=25, id=1), lock(SH, 1, 3, priority=50, id=2)]
    d = decide(lock(EX, 0, 3, priority=75, id=10), shared)
    assert d.granted and d.revoke == (1, 2)


def test_equal_or_higher_priority_holders_make_the_request_wait_and_nothing_is_revoked() -> None:
    held = [lock(SH, 0, 2, priority=25, id=1), lock(SH, 1, 3, priority=75, id=2)]
    d = decide(lock(EX, 0, 3, priority=75, id=10), held)
    assert not d.granted and d.revoke == () and d.blockers == (2,)
    assert not decide(
        lock(EX, 0, 1, priority=50, id=11), [lock(EX, 0, 1, priority=50, id=3)]
    ).granted


def test_a_higher_priority_append_inside_a_replace_revokes_nothing() -> None:
    replace = lock(RE, 0, 30, priority=25, id=1)
    d = decide(lock(AP, 2, 3, priority=75, id=10), [replace])
    assert d.granted and d.revoke == ()


def test_a_replace_revokes_lower_appends_that_stick_out_but_keeps_those_inside() -> None:
    inside, outside = lock(AP, 1, 2, priority=25, id=1), lock(AP, 9, 11, priority=25, id=2)
    d = decide(lock(RE, 0, 10, priority=50, id=10), [inside, outside])
    assert d.granted and d.revoke == (2,)


def test_revoked_locks_count_for_nothing() -> None:
    gone = lock(EX, 0, 1, priority=99, state=REVOKED, id=1)
    assert decide(lock(EX, 0, 1, id=10), [gone]).granted


def test_a_holder_never_conflicts_with_itself() -> None:
    mine = lock(EX, 0, 1, holder="me", id=1)
    assert decide(lock(EX, 0, 1, holder="me", id=10), [mine]).granted


def test_waiting_requests_are_served_in_arrival_order() -> None:
    held = lock(EX, 0, 1, priority=50, id=1)
    first = lock(EX, 0, 1, priority=50, state=WAITING, id=2)
    second = lock(EX, 0, 1, priority=50, state=WAITING, id=3)
    # the holder leaves: the first waiter goes, the second keeps waiting behind it
    assert decide(first, [first, second]).granted
    d = decide(second, [first, second])
    assert not d.granted and d.blockers == (2,)
    # a higher priority request overtakes lower waiters (and revokes the holder)
    urgent = lock(EX, 0, 1, priority=75, state=WAITING, id=4)
    assert decide(urgent, [held, first, second, urgent]).revoke == (1,)
    # waiters that can coexist with a request never hold it back
    reader = lock(SH, 0, 1, state=WAITING, id=5)
    assert decide(lock(SH, 0, 1, id=6), [reader]).granted


def test_first_locked_names_the_first_span_inside_a_held_lock() -> None:
    held = [lock(RE, 2, 4), lock(EX, 6, 7)]
    assert first_locked(held, [days(0, 1), days(1, 2)]) is None  # touching is not overlapping
    assert first_locked(held, [days(0, 1), days(6, 8), days(3, 4)]) == (days(6, 8), held[1])
    assert first_locked([], [days(0, 9)]) is None


def test_lock_types_parse_with_a_helpful_error() -> None:
    assert LockType.parse("replace") is RE
    with pytest.raises(LockError, match="EXCLUSIVE, SHARED, REPLACE, APPEND"):
        LockType.parse("WRITE")


# -- a lockbox driven by decide: granted locks always coexist -----------------------------

request_st = st.tuples(
    st.sampled_from(list(LockType)),
    st.integers(0, 5),
    st.integers(1, 4),
    st.sampled_from([25, 50, 75]),
    st.booleans(),  # release the oldest granted lock first
)


@given(st.lists(request_st, max_size=25))
def test_granted_locks_always_coexist_and_revocations_only_go_down(
    requests: list[tuple[LockType, int, int, int, bool]],
) -> None:
    box: dict[int, Lock] = {}
    for n, (kind, start, length, priority, release) in enumerate(requests, 1):
        if release:
            held = [lk for lk in box.values() if lk.state is GRANTED]
            if held:
                del box[held[0].id]
        req = Lock(n, f"tx{n}", kind, days(start, start + length), priority, WAITING)
        d = decide(req, list(box.values()))
        for rid in d.revoke:
            assert box[rid].priority < priority
            box[rid] = Lock(
                rid, box[rid].holder, box[rid].type, box[rid].interval, box[rid].priority, REVOKED
            )
        if d.granted:
            box[n] = Lock(n, req.holder, kind, req.interval, priority, GRANTED)
        granted = [lk for lk in box.values() if lk.state is GRANTED]
        for a, b in itertools.combinations(granted, 2):
            if a.interval.overlaps(b.interval):
                assert coexist(a, b) and coexist(b, a), (a, b)


# -- segment locks (seed 001: a minor compaction locks its input segments) -------------

SEG = LockType.SEGMENT


def seglock(ids: set[str], priority: int = 25, id: int | None = None) -> Lock:
    n = next(_ids) if id is None else id
    return Lock(n, f"tx{n}", SEG, days(0, 1), priority, GRANTED, frozenset(ids))


def test_segment_locks_coexist_with_appends_and_with_locks_of_other_segments() -> None:
    mine = seglock({"p0", "p1"})
    assert coexist(mine, lock(AP, 0, 1)) and coexist(lock(AP, 0, 1), mine)
    assert coexist(seglock({"p2"}), mine) and coexist(mine, seglock({"p2"}))
    assert not coexist(seglock({"p1", "p2"}), mine)  # one segment in common
    for other in (EX, SH, RE):
        assert not coexist(mine, lock(other, 0, 1)) and not coexist(lock(other, 0, 1), mine)


def test_appends_never_revoke_a_compaction_and_a_replace_of_higher_priority_does() -> None:
    compaction = seglock({"p0", "p1"}, priority=25, id=1)
    streaming = lock(AP, 0, 1, priority=75, id=2)
    assert decide(streaming, [compaction]) == decide(streaming, [])  # granted, revokes none
    batch = lock(RE, 0, 1, priority=50, id=3)
    assert decide(batch, [compaction]).revoke == (1,)
    low = lock(RE, 0, 1, priority=10, id=4)
    assert not decide(low, [compaction]).granted  # waits for the compaction
