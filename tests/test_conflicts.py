"""The conflict rules of optimistic concurrency: every pair of kinds, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina.core.conflicts import (
    RULES,
    Footprint,
    Isolation,
    Kind,
    SegmentRef,
    check,
)
from lamina.core.interval import Interval
from lamina.core.model import CommitAction

D = 86_400_000_000
WS, SER = Isolation.WRITE_SERIALIZABLE, Isolation.SERIALIZABLE


def day(d: int, n: int = 1) -> Interval:
    return Interval.of(d * D, (d + n) * D)


def seg(name: str, d: int) -> SegmentRef:
    """Segment ``name`` of day ``d`` (ids name their interval, as lamina's do)."""
    return SegmentRef(f"{name}@{d}", day(d))


def footprint(
    kind: Kind, d: int, cid: int = 1, name: str = "s", entry: str | None = None
) -> Footprint:
    """A write of ``kind`` touching day ``d`` (segment ``name`` for appends/deletes)."""
    lineage = frozenset({entry}) if entry else frozenset()
    if kind is Kind.APPEND:
        return Footprint(cid, kind, added=(seg(name, d),), lineage=lineage)
    if kind is Kind.REPLACE:
        return Footprint(
            cid,
            kind,
            added=(seg(f"{name}-new", d),),
            removed=(seg(f"{name}-old", d),),
            replaced=(day(d),),
            lineage=lineage,
        )
    if kind is Kind.DELETE:
        return Footprint(cid, kind, removed=(seg(name, d),), lineage=lineage)
    if kind is Kind.COMPACT:  # merges segment ``name`` (with others) into a new one
        return Footprint(
            cid, kind, added=(seg(f"{name}-c", d),), removed=(seg(name, d),), lineage=lineage
        )
    return Footprint(cid, kind, lineage=lineage)


# (mine, other, same day?, isolation) -> conflict?   every pair of data kinds, both ways
EXPECTED = {
    (Kind.APPEND, Kind.APPEND): (False, False),
    (Kind.APPEND, Kind.REPLACE): (False, False),
    (Kind.APPEND, Kind.DELETE): (False, False),
    (Kind.REPLACE, Kind.APPEND): (False, True),  # carried; serializable refuses
    (Kind.REPLACE, Kind.REPLACE): (True, True),
    (Kind.REPLACE, Kind.DELETE): (True, True),
    (Kind.DELETE, Kind.APPEND): (False, False),
    (Kind.DELETE, Kind.REPLACE): (True, True),
    (Kind.DELETE, Kind.DELETE): (True, True),  # the same segment
    (Kind.APPEND, Kind.COMPACT): (False, False),
    (Kind.REPLACE, Kind.COMPACT): (False, False),  # it compacted rows mine replaces
    (Kind.DELETE, Kind.COMPACT): (True, True),  # the same segment
    (Kind.COMPACT, Kind.APPEND): (False, False),
    (Kind.COMPACT, Kind.REPLACE): (True, True),
    (Kind.COMPACT, Kind.DELETE): (True, True),  # the same segment
    (Kind.COMPACT, Kind.COMPACT): (True, True),  # the same segment
}


def test_every_pair_of_kinds_has_a_rule() -> None:
    assert set(RULES) == {(a, b) for a in Kind for b in Kind}


@pytest.mark.parametrize(("pair", "want"), EXPECTED.items(), ids=lambda x: str(x))
@pytest.mark.parametrize("same_day", [True, False])
def test_pairs_on_the_same_and_on_other_chunks(
    pair: tuple[Kind, Kind], want: tuple[bool, bool], same_day: bool
) -> None:
    mine_kind, other_kind = pair
    mine = footprint(mine_kind, 5, cid=2)
    other = footprint(other_kind, 5 if same_day else 9, cid=1)
    for iso, expect in zip((WS, SER), want, strict=True):
        verdict = check(mine, [other], iso)
        assert (verdict.conflict is not None) == (expect and same_day), (pair, iso)
        if verdict.conflict is not None:
            assert verdict.conflict.other == 1 and not verdict.conflict.retryable
            assert verdict.conflict.reason


def test_a_replace_carries_what_was_appended_into_its_interval() -> None:
    mine = footprint(Kind.REPLACE, 5, cid=9)
    inside, outside = seg("a", 5), seg("b", 6)
    appended = Footprint(3, Kind.APPEND, added=(inside, outside))
    assert check(mine, [appended]).carry == (inside,)
    assert check(mine, [appended], SER).conflict is not None


def test_a_carried_segment_deleted_later_is_not_carried() -> None:
    """Deleting a segment appended after the replace began is no conflict: the replace
    never read it (Delta checks deletes against the files a transaction read; a hunt
    found the retry needless). It is not carried either. A delete of a segment the
    replace saw still conflicts."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    appended = Footprint(3, Kind.APPEND, added=(seg("a", 5),))
    deleted = Footprint(4, Kind.DELETE, removed=(seg("a", 5),))
    verdict = check(mine, [appended, deleted])
    assert verdict.conflict is None and verdict.carry == ()
    both = Footprint(4, Kind.DELETE, removed=(seg("a", 5), seg("base", 5)))
    assert check(mine, [appended, both]).conflict is not None
    assert check(mine, [deleted]).conflict is not None  # "a" was there at the base
    in_tx = Footprint(4, Kind.APPEND, added=(seg("x", 7),), removed=(seg("a", 5),))
    assert check(mine, [appended, in_tx]).conflict is None
    later_elsewhere = Footprint(4, Kind.DELETE, removed=(seg("z", 8),))
    assert check(mine, [appended, later_elsewhere]).carry == (seg("a", 5),)


def test_a_replace_refuses_a_compaction_of_rows_appended_after_it_began() -> None:
    """Rows appended meanwhile are carried; once a minor compaction merged them with
    rows the replace rewrites, they can be neither carried nor dropped."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    appended = Footprint(3, Kind.APPEND, added=(seg("a", 5),))
    merged = Footprint(4, Kind.COMPACT, added=(seg("c", 5),), removed=(seg("a", 5), seg("old", 5)))
    conflict = check(mine, [appended, merged]).conflict
    assert conflict is not None and conflict.other == 4 and not conflict.retryable
    base_only = Footprint(4, Kind.COMPACT, added=(seg("c", 5),), removed=(seg("old", 5),))
    verdict = check(mine, [appended, base_only])
    assert verdict.conflict is None and verdict.carry == (seg("a", 5),)  # outputs not carried


def test_deletes_of_different_segments_of_one_chunk_both_publish() -> None:
    mine = Footprint(2, Kind.DELETE, removed=(seg("a", 5),))
    other = Footprint(1, Kind.DELETE, removed=(seg("b", 5),))
    assert check(mine, [other]).conflict is None


@pytest.mark.parametrize("kind", list(Kind))
def test_an_entry_transitioned_meanwhile_refuses_writes_under_it(kind: Kind) -> None:
    mine = footprint(kind, 5, cid=2, entry="e1")
    ended = Footprint(1, Kind.LINEAGE, lineage=frozenset({"e1"}))
    conflict = check(mine, [ended]).conflict
    assert conflict is not None and "e1" in conflict.reason
    other_entry = Footprint(1, Kind.LINEAGE, lineage=frozenset({"e2"}))
    assert check(mine, [other_entry]).conflict is None


def _end(cid: int, shown: int, swapped: int | None = None, kind: Kind = Kind.LINEAGE) -> Footprint:
    """An entry's end after mine's base: its segments_to on day ``shown`` show, its
    segments_from on day ``swapped`` (if any) go."""
    return Footprint(
        cid,
        kind,
        added=(seg("last", shown),) if kind is Kind.APPEND else (),
        shown=(seg("to", shown),),
        swapped=() if swapped is None else (seg("from", swapped),),
    )


def test_a_replace_carries_the_rows_a_push_showed_in_its_interval() -> None:
    """An end that only showed rows there is an append's (its batches may predate
    mine's base), also when the push's last batch ended it; serializable refuses."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    for end in (_end(3, 5), _end(3, 5, kind=Kind.APPEND), _end(3, 5, swapped=2)):
        want = (seg("to", 5),) + ((seg("last", 5),) if end.kind is Kind.APPEND else ())
        assert set(check(mine, [end]).carry) == set(want)
        conflict = check(mine, [end], SER).conflict
        assert conflict is not None and conflict.other == 3
    assert check(mine, [_end(3, 4)]).carry == ()  # outside: nothing to carry


@pytest.mark.parametrize("iso", list(Isolation))
def test_a_replace_refuses_a_lineage_swap_in_its_interval(iso: Isolation) -> None:
    """An end whose sources lie in mine's interval, or the rollback of a completed
    entry there, replaced those rows too; elsewhere it does not matter."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    rollback = Footprint(4, Kind.LINEAGE, swapped=(seg("from", 5), seg("to", 6)))
    for other in (_end(3, 4, swapped=5), rollback):
        conflict = check(mine, [other], iso).conflict
        assert conflict is not None and "lineage transition swapped" in conflict.reason
    assert check(mine, [_end(3, 4, swapped=6)], iso).conflict is None


def test_a_locked_replace_carries_a_push_shown_and_ignores_swaps() -> None:
    """Its locks kept other locked writers out; it wins over the swap, and carries
    what the end showed in its interval like an append."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    verdict = check(mine, [_end(3, 5, swapped=5)], locked=True)
    assert verdict.conflict is None and verdict.carry == (seg("to", 5),)


@pytest.mark.parametrize("mine_kind", list(Kind))
@pytest.mark.parametrize("other_kind", list(Kind))
def test_the_same_app_id_conflicts_whatever_was_written(mine_kind: Kind, other_kind: Kind) -> None:
    mine = Footprint(2, mine_kind, app_id="job")
    other = Footprint(1, other_kind, app_id="job")
    conflict = check(mine, [other]).conflict
    assert conflict is not None and conflict.retryable and "job" in conflict.reason
    assert check(mine, [Footprint(1, other_kind, app_id="other")]).conflict is None


def test_kinds_of_actions() -> None:
    assert Kind.of(CommitAction.OVERWRITE) is Kind.REPLACE is Kind.of("REFRESH")
    assert Kind.of(CommitAction.END_REPLACE) is Kind.LINEAGE
    assert Kind.of(CommitAction.COMPACT) is Kind.COMPACT


# -- properties over random footprints --------------------------------------------------

kind_st = st.sampled_from([Kind.APPEND, Kind.REPLACE, Kind.DELETE])
write_st = st.builds(
    lambda kind, d, name: footprint(kind, d, name=name),
    kind_st,
    st.integers(0, 6),
    st.sampled_from(["a", "b", "c"]),
)
#: an entry's end: shows its segments_to on one day, swaps its segments_from on another
end_st = st.builds(
    lambda shown, swapped, name: Footprint(
        1,
        Kind.LINEAGE,
        shown=(seg(f"{name}-to", shown),),
        swapped=() if swapped is None else (seg(f"{name}-from", swapped),),
    ),
    st.integers(0, 6),
    st.none() | st.integers(0, 6),
    st.sampled_from(["e", "f"]),
)
#: with minor compactions, whose rule against a replace depends on earlier appends, and
#: lineage ends, which a replace carries like appends or conflicts with
any_write_st = (
    st.builds(
        lambda kind, d, name: footprint(kind, d, name=name),
        st.sampled_from([Kind.APPEND, Kind.REPLACE, Kind.DELETE, Kind.COMPACT]),
        st.integers(0, 6),
        st.sampled_from(["a", "b", "c"]),
    )
    | end_st
)


@given(mine=write_st, others=st.lists(write_st, max_size=6), iso=st.sampled_from(list(Isolation)))
def test_a_conflict_with_many_is_a_conflict_with_one(
    mine: Footprint, others: list[Footprint], iso: Isolation
) -> None:
    """Order matters only for which conflict is named, not for whether there is one."""
    others = [
        Footprint(i + 1, o.kind, o.added, o.removed, o.replaced) for i, o in enumerate(others)
    ]
    alone = [check(mine, [o], iso).conflict is not None for o in others]
    verdict = check(mine, others, iso)
    assert (verdict.conflict is not None) == any(alone)
    if verdict.conflict is not None:
        assert verdict.conflict.other == others[alone.index(True)].commit_id


@given(
    mine=any_write_st,
    others=st.lists(any_write_st, max_size=6),
    iso=st.sampled_from(list(Isolation)),
)
def test_writes_touching_disjoint_times_never_conflict(
    mine: Footprint, others: list[Footprint], iso: Isolation
) -> None:
    def times(f: Footprint) -> list[Interval]:
        segs = (*f.added, *f.removed, *f.shown, *f.swapped)
        return [*f.replaced, *(s.interval for s in segs)]

    far = [o for o in others if not any(a.overlaps(b) for a in times(mine) for b in times(o))]
    assert check(mine, far, iso).conflict is None


@given(others=st.lists(any_write_st, max_size=6), iso=st.sampled_from(list(Isolation)))
def test_appends_never_conflict(others: list[Footprint], iso: Isolation) -> None:
    assert check(footprint(Kind.APPEND, 3), others, iso).conflict is None


@given(mine=any_write_st, others=st.lists(any_write_st, max_size=6))
def test_carried_segments_are_appends_inside_the_replaced_intervals(
    mine: Footprint, others: list[Footprint]
) -> None:
    verdict = check(mine, others)
    if verdict.conflict is not None or mine.kind is not Kind.REPLACE:
        assert verdict.carry == () or mine.kind is Kind.REPLACE
        return
    removed = {s.id for o in others for s in o.removed}
    want = [
        s
        for o in others
        for s in (o.added if o.kind is Kind.APPEND else o.shown)
        if any(s.interval.overlaps(r) for r in mine.replaced) and s.id not in removed
    ]
    assert list(verdict.carry) == list(dict.fromkeys(want))


def test_a_locked_replace_carries_appends_but_not_what_was_removed_since() -> None:
    """Its locks excluded other locked writers (no conflicts), yet an append deleted
    or replaced meanwhile is not carried back."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    kept, deleted = seg("a", 5), seg("b", 5)
    appended = Footprint(3, Kind.APPEND, added=(kept, deleted))
    delete = Footprint(4, Kind.DELETE, removed=(deleted,))
    other_replace = footprint(Kind.REPLACE, 5, cid=5)
    assert check(mine, [appended, delete, other_replace]).conflict is not None  # optimistic
    verdict = check(mine, [appended, delete, other_replace], locked=True)
    assert verdict.conflict is None and verdict.carry == (kept,)


def test_what_a_replacing_transaction_appended_elsewhere_is_carried() -> None:
    mine = footprint(Kind.REPLACE, 5, cid=9)
    tx = Footprint(
        3, Kind.REPLACE, added=(seg("x", 4), seg("y", 5)), replaced=(day(4),)
    )  # overwrote day 4, appended y into day 5
    assert check(mine, [tx]).carry == (seg("y", 5),)
    conflict = check(mine, [tx], SER).conflict
    assert conflict is not None and "appended rows" in conflict.reason


def test_a_carry_follows_a_segment_another_replace_carried_on() -> None:
    """An append X carried by a replace that published meanwhile lives on as its copy
    X' (the same file): a locked replace publishing later carries X', not nothing."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    x, x_copy = seg("x", 5), seg("x-copy", 5)
    appended = Footprint(3, Kind.APPEND, added=(x,))
    other = Footprint(
        4, Kind.REPLACE, added=(seg("o", 5), x_copy), removed=(x,), replaced=(day(5),),
        moved=(("x@5", x_copy),),
    )  # fmt: skip
    assert check(mine, [appended, other], locked=True).carry == (x_copy,)
    assert check(mine, [appended, other]).conflict is not None  # optimistic: refused


@pytest.mark.parametrize("kind", [Kind.APPEND, Kind.REPLACE])
def test_a_transaction_that_also_deleted_is_checked_as_a_delete_too(kind: Kind) -> None:
    """Found by the history checker: a major compaction (a replace of what it read)
    published the rows of a segment that a transaction appending elsewhere had deleted
    meanwhile."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    tx = Footprint(
        3, kind, added=(seg("x", 2),), removed=(seg("gone", 5),),
        replaced=(day(2),) if kind is Kind.REPLACE else (),
    )  # fmt: skip
    conflict = check(mine, [tx]).conflict
    assert conflict is not None and "deleted segment gone@5" in conflict.reason
    elsewhere = Footprint(3, kind, added=(seg("x", 2),), removed=(seg("gone", 6),))
    assert check(mine, [elsewhere]).conflict is None
    assert check(footprint(Kind.DELETE, 5, name="gone"), [tx]).conflict is not None


def test_a_delete_of_compacted_rows_the_replace_read_still_conflicts() -> None:
    """Only segments holding nothing but rows appended since the base are fresh: a
    compaction of a base segment into Z, then a delete of Z, removes rows the replace
    read (a review: that came back through the replace)."""
    mine = footprint(Kind.REPLACE, 5, cid=9)
    merged = Footprint(3, Kind.COMPACT, added=(seg("z", 5),), removed=(seg("base", 5),))
    gone = Footprint(4, Kind.DELETE, removed=(seg("z", 5),))
    assert check(mine, [merged, gone]).conflict is not None
    appended = Footprint(2, Kind.APPEND, added=(seg("a", 5),))
    carried = Footprint(3, Kind.REPLACE, replaced=(day(7),), moved=(("a@5", seg("a2", 5)),))
    gone_copy = Footprint(4, Kind.DELETE, removed=(seg("a2", 5),))
    assert check(mine, [appended, carried, gone_copy]).conflict is None  # a fresh copy
