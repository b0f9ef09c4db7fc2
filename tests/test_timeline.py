"""Tests of the versioned interval timeline: hand-written rules plus a brute-force oracle."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamina.core.interval import MAX_US, MIN_US, Interval
from lamina.core.segment import OVERWRITE_PARTITION_START, Segment
from lamina.core.timeline import Timeline, TimelineEntry
from lamina.errors import TimelineError
from tests.overshadow_oracle import chunk_view

# ---------------------------------------------------------------------------------------
# helpers


def seg(start: int, end: int, version: int, pid: int = 0, n: int = 0, table: str = "t") -> Segment:
    return Segment(
        table,
        Interval.of(start, end),
        version,
        pid,
        num_core_partitions=n,
        location=f"{table}/{start}_{end}/v{version}/p{pid}.parquet",
    )


def oseg(
    start: int, end: int, version: int, k: int, root: tuple[int, int], minor: int, n: int = 0
) -> Segment:
    """A later-generation segment (the k-th of its chunk); its group's size is a
    function of its root range and minor version, so groups stay consistent."""
    return Segment(
        "t",
        Interval.of(start, end),
        version,
        OVERWRITE_PARTITION_START + k,
        num_core_partitions=n,
        location=f"t/{start}_{end}/v{version}/o{k}.parquet",
        minor_version=minor,
        root_partition_range=root,
        atomic_update_group_size=1 + (root[0] + root[1] + minor) % 3,
    )


def dseg(start: str, end: str, version: int, pid: int = 0, n: int = 0) -> Segment:
    """A segment over real dates."""
    return Segment("t", Interval(start, end), version, pid, num_core_partitions=n, location="x")


def view(entries: list[TimelineEntry]) -> list[tuple[int, int, int]]:
    """(start, end, version) of each entry."""
    return [(e.interval.start, e.interval.end, e.version) for e in entries]


def full(entries: list[TimelineEntry]) -> list[tuple]:
    """Everything an entry says, with the segments' num_core_partitions (not part of ==)."""
    return [
        (
            e.interval.start,
            e.interval.end,
            e.version,
            tuple((s.id, s.num_core_partitions) for s in e.segments),
            (e.chunk_interval.start, e.chunk_interval.end),
        )
        for e in entries
    ]


def ids(segments: list[Segment]) -> list[str]:
    return [s.id for s in segments]


def snapshot(tl: Timeline) -> tuple:
    return (
        full(tl.entries()),
        len(tl),
        sorted(ids(tl.segments())),
        sorted(ids(tl.overshadowed())),
        ids(tl.visible()),
    )


def tl_of(*segments: Segment) -> Timeline:
    tl = Timeline()
    for s in segments:
        assert tl.add(s)
    return tl


# ---------------------------------------------------------------------------------------
# basics


def test_empty_timeline() -> None:
    tl = Timeline()
    assert tl.entries() == []
    assert tl.lookup(Interval.of(0, 100)) == []
    assert len(tl) == 0
    assert tl.overshadowed() == []
    assert tl.visible() == []
    assert tl.segments() == []
    assert seg(0, 1, 1) not in tl
    assert not tl.is_overshadowed(seg(0, 1, 1))


def test_single_segment() -> None:
    s = seg(0, 10, 1)
    tl = tl_of(s)
    (e,) = tl.entries()
    assert e.interval == Interval.of(0, 10)
    assert e.chunk_interval == Interval.of(0, 10)
    assert e.version == 1
    assert e.segments == (s,)
    assert not e.is_partial
    assert len(tl) == 1
    assert s in tl
    assert tl.visible() == [s]
    assert tl.overshadowed() == []
    assert not tl.is_overshadowed(s)


def test_partitions_of_a_chunk_form_one_entry_sorted_by_partition() -> None:
    segs = [seg(0, 10, 1, p, 3) for p in (2, 0, 1)]
    tl = tl_of(*segs)
    (e,) = tl.entries()
    assert [s.partition_id for s in e.segments] == [0, 1, 2]
    assert len(tl) == 3
    assert ids(tl.visible()) == ids(sorted(segs, key=lambda s: s.partition_id))


def test_contains() -> None:
    s = seg(0, 10, 1, 0)
    tl = tl_of(s)
    assert s in tl
    # identity is (table, interval, version, partition); the rest is description
    assert Segment("t", Interval.of(0, 10), 1, 0, num_core_partitions=7, row_count=5) in tl
    assert seg(0, 10, 1, 1) not in tl
    assert seg(0, 10, 2, 0) not in tl
    assert seg(0, 11, 1, 0) not in tl
    assert seg(0, 10, 1, 0, table="u") not in tl
    assert "t_0_10_v1_p0" not in tl
    assert None not in tl


def test_len_counts_hidden_and_incomplete_segments() -> None:
    tl = tl_of(seg(0, 10, 1), seg(0, 10, 2, 0, 1), seg(0, 10, 3, 0, 2))
    assert len(tl) == 3


# ---------------------------------------------------------------------------------------
# overlap: highest complete version wins at each instant


def test_higher_version_same_interval_hides_lower() -> None:
    low, high = seg(0, 10, 1), seg(0, 10, 2)
    tl = tl_of(low, high)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.is_overshadowed(low)
    assert not tl.is_overshadowed(high)
    assert tl.overshadowed() == [low]
    assert tl.visible() == [high]


def test_lower_version_added_after_higher_is_hidden() -> None:
    low, high = seg(0, 10, 1), seg(0, 10, 2)
    tl = tl_of(high, low)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.overshadowed() == [low]


def test_partial_overlap_higher_on_the_right() -> None:
    low, high = seg(0, 10, 1), seg(5, 15, 2)
    for order in ((low, high), (high, low)):
        tl = tl_of(*order)
        assert view(tl.entries()) == [(0, 5, 1), (5, 15, 2)]
        first, second = tl.entries()
        assert first.chunk_interval == Interval.of(0, 10)
        assert first.is_partial
        assert first.segments == (low,)
        assert second.chunk_interval == Interval.of(5, 15)
        assert not second.is_partial
        assert not tl.is_overshadowed(low)
        assert tl.overshadowed() == []
        assert ids(tl.visible()) == ids([low, high])


def test_partial_overlap_higher_on_the_left() -> None:
    low, high = seg(5, 15, 1), seg(0, 10, 2)
    for order in ((low, high), (high, low)):
        tl = tl_of(*order)
        assert view(tl.entries()) == [(0, 10, 2), (10, 15, 1)]
        assert tl.entries()[1].chunk_interval == Interval.of(5, 15)
        assert not tl.is_overshadowed(low)
        assert ids(tl.visible()) == ids([high, low])


def test_higher_version_nested_inside_lower() -> None:
    low, high = seg(0, 10, 1), seg(3, 6, 2)
    tl = tl_of(low, high)
    assert view(tl.entries()) == [(0, 3, 1), (3, 6, 2), (6, 10, 1)]
    e0, _, e2 = tl.entries()
    assert e0.segments == e2.segments == (low,)
    assert e0.chunk_interval == e2.chunk_interval == Interval.of(0, 10)
    assert not tl.is_overshadowed(low)
    # the lower chunk split in two is still listed once
    assert ids(tl.visible()) == ids([low, high])


def test_lower_version_nested_inside_higher() -> None:
    high, low = seg(0, 10, 2), seg(3, 6, 1)
    tl = tl_of(high, low)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.is_overshadowed(low)
    assert tl.overshadowed() == [low]


def test_higher_version_covering_several_lower_chunks() -> None:
    lows = [seg(i, i + 2, 1) for i in range(0, 8, 2)]
    high = seg(1, 7, 2)
    tl = tl_of(*lows, high)
    assert view(tl.entries()) == [(0, 1, 1), (1, 7, 2), (7, 8, 1)]
    assert tl.entries()[0].chunk_interval == Interval.of(0, 2)
    assert tl.entries()[2].chunk_interval == Interval.of(6, 8)
    assert sorted(ids(tl.overshadowed())) == sorted(ids(lows[1:3]))
    assert [tl.is_overshadowed(s) for s in lows] == [False, True, True, False]

    tl.add(seg(0, 8, 3))
    assert view(tl.entries()) == [(0, 8, 3)]
    assert sorted(ids(tl.overshadowed())) == sorted(ids([*lows, high]))


def test_three_versions_stacked() -> None:
    tl = tl_of(seg(0, 10, 1), seg(2, 8, 2), seg(4, 6, 3))
    assert view(tl.entries()) == [(0, 2, 1), (2, 4, 2), (4, 6, 3), (6, 8, 2), (8, 10, 1)]
    assert tl.overshadowed() == []


def test_version_order_not_insertion_order_decides() -> None:
    a, b, c = seg(0, 10, 3), seg(2, 8, 1), seg(4, 12, 2)
    expected = [(0, 10, 3), (10, 12, 2)]
    for order in ((a, b, c), (c, b, a), (b, c, a), (b, a, c)):
        tl = tl_of(*order)
        assert view(tl.entries()) == expected
        assert tl.overshadowed() == [b]


def test_hidden_by_union_of_higher_chunks() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low, seg(0, 4, 2), seg(4, 10, 3))
    assert tl.is_overshadowed(low)
    assert tl.overshadowed() == [low]


def test_gap_in_higher_chunks_keeps_lower_visible() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low, seg(0, 4, 2), seg(5, 10, 2))
    assert view(tl.entries()) == [(0, 4, 2), (4, 5, 1), (5, 10, 2)]
    assert not tl.is_overshadowed(low)
    assert tl.overshadowed() == []


def test_adjacent_higher_version_hides_nothing() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low, seg(10, 20, 5), seg(-5, 0, 5))
    assert view(tl.entries()) == [(-5, 0, 5), (0, 10, 1), (10, 20, 5)]
    assert not tl.is_overshadowed(low)


def test_adjacent_chunks_of_one_version_stay_separate_entries() -> None:
    a, b = seg(0, 5, 1), seg(5, 10, 1)
    tl = tl_of(a, b)
    assert view(tl.entries()) == [(0, 5, 1), (5, 10, 1)]
    assert [e.segments for e in tl.entries()] == [(a,), (b,)]


def test_gaps_are_not_filled() -> None:
    tl = tl_of(seg(0, 2, 1), seg(5, 7, 1))
    assert view(tl.lookup(Interval.of(0, 10))) == [(0, 2, 1), (5, 7, 1)]
    assert tl.lookup(Interval.of(2, 5)) == []


def test_is_overshadowed_requires_strictly_higher_version() -> None:
    s = seg(0, 10, 2)
    tl = tl_of(s, seg(0, 10, 1))
    assert not tl.is_overshadowed(s)
    # asked about a segment not in the timeline: does the timeline hide its interval?
    assert tl.is_overshadowed(seg(2, 4, 1, 9))
    assert not tl.is_overshadowed(seg(2, 4, 2, 9))
    assert not tl.is_overshadowed(seg(5, 15, 1, 9))


def test_tombstone_hides_lower_versions() -> None:
    low = seg(0, 10, 1)
    tomb = Segment("t", Interval.of(0, 10), 2, 0)
    assert tomb.is_tombstone
    tl = tl_of(low, tomb)
    (e,) = tl.entries()
    assert e.segments == (tomb,)
    assert tl.overshadowed() == [low]


# ---------------------------------------------------------------------------------------
# completeness


def test_complete_with_core_partitions_moment_of_completion() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low)
    p0, p1, p2 = (seg(0, 10, 2, p, 3) for p in range(3))
    assert tl.add(p0)
    assert view(tl.entries()) == [(0, 10, 1)]
    assert not tl.is_overshadowed(low)
    assert tl.overshadowed() == []
    assert tl.add(p2)
    assert view(tl.entries()) == [(0, 10, 1)]
    assert tl.overshadowed() == []
    assert ids(tl.visible()) == ids([low])
    assert tl.add(p1)  # the moment of completion
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.entries()[0].segments == (p0, p1, p2)
    assert tl.is_overshadowed(low)
    assert tl.overshadowed() == [low]
    assert ids(tl.visible()) == ids([p0, p1, p2])


def test_incomplete_newer_version_hides_nothing_even_partially() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low, seg(3, 6, 2, 0, 2))
    assert view(tl.entries()) == [(0, 10, 1)]
    assert not tl.entries()[0].is_partial
    tl.add(seg(3, 6, 2, 1, 2))
    assert view(tl.entries()) == [(0, 3, 1), (3, 6, 2), (6, 10, 1)]


def test_complete_with_zero_core_partitions() -> None:
    low = seg(0, 10, 1)
    tl = tl_of(low)
    high = seg(0, 10, 2, pid=5, n=0)  # any non-empty set is complete when n = 0
    tl.add(high)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.entries()[0].segments == (high,)
    tl.add(seg(0, 10, 2, pid=9, n=0))
    assert [s.partition_id for s in tl.entries()[0].segments] == [5, 9]


def test_partitions_beyond_core_do_not_count_or_block() -> None:
    tl = tl_of(seg(0, 10, 1))
    tl.add(seg(0, 10, 2, 7, 0))  # complete on its own (n = 0)
    assert view(tl.entries()) == [(0, 10, 2)]
    tl.add(seg(0, 10, 2, 0, 2))  # n becomes 2: partition 1 missing
    assert view(tl.entries()) == [(0, 10, 1)]
    tl.add(seg(0, 10, 2, 1, 2))
    assert view(tl.entries()) == [(0, 10, 2)]
    assert [s.partition_id for s in tl.entries()[0].segments] == [0, 1, 7]


def test_core_is_max_over_segments_of_the_chunk() -> None:
    tl = tl_of(seg(0, 10, 1))
    tl.add(seg(0, 10, 2, 0, 1))
    assert view(tl.entries()) == [(0, 10, 2)]
    # a partition declaring n = 3 makes the complete chunk incomplete again
    tl.add(seg(0, 10, 2, 2, 3))
    assert view(tl.entries()) == [(0, 10, 1)]
    assert tl.overshadowed() == []
    tl.add(seg(0, 10, 2, 1, 1))  # n stays 3 (max); now 0..2 present
    assert view(tl.entries()) == [(0, 10, 2)]


def test_raising_core_then_emptying_the_chunk_leaves_no_stale_entry() -> None:
    a, b = seg(0, 10, 2, 0, 1), seg(0, 10, 2, 5, 3)
    tl = tl_of(a, b)
    assert tl.entries() == []
    tl.remove(a)
    tl.remove(b)
    assert tl.entries() == []
    assert len(tl) == 0


def test_removing_the_partition_that_raised_core_completes_the_chunk() -> None:
    low = seg(0, 10, 1)
    big = seg(0, 10, 2, 5, 3)
    tl = tl_of(low, big, seg(0, 10, 2, 0, 1))
    assert view(tl.entries()) == [(0, 10, 1)]
    assert tl.remove(big)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert tl.overshadowed() == [low]


def test_duplicate_partition_id_does_not_count_twice() -> None:
    tl = tl_of(seg(0, 10, 1))
    tl.add(seg(0, 10, 2, 0, 2))
    assert not tl.add(seg(0, 10, 2, 0, 2))
    assert view(tl.entries()) == [(0, 10, 1)]


# ---------------------------------------------------------------------------------------
# add / remove bookkeeping


def test_duplicate_add_returns_false_and_changes_nothing() -> None:
    s = seg(0, 10, 1, 0, 1)
    tl = tl_of(s)
    before = snapshot(tl)
    assert not tl.add(s)
    assert not tl.add(seg(0, 10, 1, 0, 1))
    # same identity, other description (num_core_partitions): still "already there"
    assert not tl.add(seg(0, 10, 1, 0, 3))
    assert snapshot(tl) == before
    assert tl.entries()[0].segments[0].num_core_partitions == 1


def test_remove_absent_segment_returns_false() -> None:
    s = seg(0, 10, 1, 0)
    tl = tl_of(s)
    before = snapshot(tl)
    assert not tl.remove(seg(0, 10, 1, 1))  # other partition
    assert not tl.remove(seg(0, 10, 2, 0))  # other version
    assert not tl.remove(seg(0, 11, 1, 0))  # other interval
    assert not tl.remove(seg(0, 10, 1, 0, table="u"))  # other table
    assert snapshot(tl) == before
    assert tl.remove(s)
    assert not tl.remove(s)
    assert len(tl) == 0
    assert tl.entries() == []
    assert not Timeline().remove(s)


def test_remove_falls_back_to_what_was_hidden() -> None:
    low, high = seg(0, 10, 1), seg(0, 10, 2)
    tl = tl_of(low, high)
    assert tl.remove(high)
    assert view(tl.entries()) == [(0, 10, 1)]
    assert tl.overshadowed() == []
    assert tl.visible() == [low]


def test_remove_falls_back_through_several_versions() -> None:
    v1, v2, v3 = seg(0, 10, 1), seg(2, 8, 2), seg(0, 10, 3)
    tl = tl_of(v1, v2, v3)
    assert view(tl.entries()) == [(0, 10, 3)]
    tl.remove(v3)
    assert view(tl.entries()) == [(0, 2, 1), (2, 8, 2), (8, 10, 1)]
    tl.remove(v2)
    assert view(tl.entries()) == [(0, 10, 1)]
    tl.remove(v1)
    assert tl.entries() == []


def test_remove_hidden_chunk_changes_nothing_visible() -> None:
    hidden, high = seg(3, 6, 1), seg(0, 10, 2)
    tl = tl_of(hidden, high)
    before = full(tl.entries())
    assert tl.remove(hidden)
    assert full(tl.entries()) == before
    assert tl.overshadowed() == []


def test_removing_a_core_partition_makes_chunk_incomplete_again() -> None:
    low = seg(0, 10, 1)
    p0, p1 = seg(2, 5, 2, 0, 2), seg(2, 5, 2, 1, 2)
    tl = tl_of(low, p0, p1)
    assert view(tl.entries()) == [(0, 2, 1), (2, 5, 2), (5, 10, 1)]
    assert tl.remove(p0)
    # back to one entry for the whole lower chunk (pieces merged)
    assert view(tl.entries()) == [(0, 10, 1)]
    assert not tl.entries()[0].is_partial
    assert tl.is_overshadowed(seg(2, 5, 1, 9)) is False
    assert tl.add(p0)
    assert view(tl.entries()) == [(0, 2, 1), (2, 5, 2), (5, 10, 1)]


def test_removing_a_non_core_partition_keeps_chunk_complete() -> None:
    low = seg(0, 10, 1)
    extra = seg(0, 10, 2, 4, 0)
    tl = tl_of(low, seg(0, 10, 2, 0, 1), extra)
    assert view(tl.entries()) == [(0, 10, 2)]
    tl.remove(extra)
    assert view(tl.entries()) == [(0, 10, 2)]
    assert [s.partition_id for s in tl.entries()[0].segments] == [0]


def test_segments_added_to_a_visible_chunk_show_up_in_lookup() -> None:
    tl = tl_of(seg(0, 10, 1, 0))
    tl.add(seg(0, 10, 1, 1))
    assert [s.partition_id for s in tl.entries()[0].segments] == [0, 1]
    tl.remove(seg(0, 10, 1, 0))
    assert [s.partition_id for s in tl.entries()[0].segments] == [1]


# ---------------------------------------------------------------------------------------
# same-version overlap


@pytest.mark.parametrize(
    "other",
    [(5, 15), (-5, 5), (2, 4), (-5, 15), (0, 5), (5, 10), (0, 11)],
    ids=["right", "left", "inside", "around", "same-start", "same-end", "longer"],
)
def test_same_version_overlap_is_an_error_and_changes_nothing(other: tuple[int, int]) -> None:
    tl = tl_of(seg(0, 10, 1, 0, 2), seg(0, 10, 2), seg(20, 30, 1))
    before = snapshot(tl)
    bad = seg(*other, 1)
    with pytest.raises(TimelineError):
        tl.add(bad)
    assert snapshot(tl) == before
    assert bad not in tl
    assert not tl.remove(bad)
    assert snapshot(tl) == before


def test_same_version_overlap_with_incomplete_chunk_is_an_error() -> None:
    tl = tl_of(seg(0, 10, 1, 0, 3))
    with pytest.raises(TimelineError):
        tl.add(seg(5, 15, 1, 0, 0))


def test_same_version_adjacent_or_other_version_is_fine() -> None:
    tl = tl_of(seg(0, 10, 1))
    assert tl.add(seg(10, 20, 1))
    assert tl.add(seg(5, 15, 2))
    assert view(tl.entries()) == [(0, 5, 1), (5, 15, 2), (15, 20, 1)]


def test_same_version_overlap_allowed_once_the_old_chunk_is_gone() -> None:
    old = seg(0, 10, 1)
    tl = tl_of(old)
    with pytest.raises(TimelineError):
        tl.add(seg(5, 15, 1))
    tl.remove(old)
    assert tl.add(seg(5, 15, 1))
    assert view(tl.entries()) == [(5, 15, 1)]


def test_one_table_per_timeline() -> None:
    tl = tl_of(seg(0, 10, 1, 0))
    before = snapshot(tl)
    with pytest.raises(TimelineError):
        tl.add(seg(0, 10, 1, 0, table="other"))
    assert snapshot(tl) == before


def test_build_rejects_same_version_overlap() -> None:
    with pytest.raises(TimelineError):
        Timeline.build([seg(0, 10, 1), seg(5, 15, 1)])


# ---------------------------------------------------------------------------------------
# lookup: merging and trimming


def test_hour_inside_day_then_removed_gives_one_day_entry_again() -> None:
    day = dseg("2024-01-01", "2024-01-02", 1)
    hour = dseg("2024-01-01T10:00:00Z", "2024-01-01T11:00:00Z", 2)
    day_iv = Interval("2024-01-01", "2024-01-02")
    tl = tl_of(day)
    assert view(tl.lookup(day_iv)) == [(day_iv.start, day_iv.end, 1)]
    tl.add(hour)
    got = tl.lookup(day_iv)
    assert [str(e.interval) for e in got] == [
        "2024-01-01T00:00:00Z/2024-01-01T10:00:00Z",
        "2024-01-01T10:00:00Z/2024-01-01T11:00:00Z",
        "2024-01-01T11:00:00Z/2024-01-02T00:00:00Z",
    ]
    assert [e.version for e in got] == [1, 2, 1]
    assert all(e.chunk_interval == day_iv for e in (got[0], got[2]))
    tl.remove(hour)
    (e,) = tl.lookup(day_iv)
    assert e.interval == day_iv
    assert e.segments == (day,)
    assert not e.is_partial
    assert len(tl.entries()) == 1


def test_pieces_merge_after_several_holes_close() -> None:
    low = seg(0, 20, 1)
    holes = [seg(2, 4, 2), seg(6, 8, 3), seg(10, 12, 2)]
    tl = tl_of(low, *holes)
    assert len(tl.entries()) == 7
    for h in (holes[1], holes[0], holes[2]):
        tl.remove(h)
    assert view(tl.entries()) == [(0, 20, 1)]


def test_pieces_merge_after_higher_chunk_becomes_incomplete() -> None:
    low = seg(0, 24, 1)
    p0 = seg(10, 11, 2, 0, 1)
    tl = tl_of(low, p0)
    assert len(tl.entries()) == 3
    tl.add(seg(10, 11, 2, 3, 4))  # raises n: incomplete
    assert view(tl.entries()) == [(0, 24, 1)]


def test_merge_adjacent_to_rebuilt_region() -> None:
    # the region recomputed on remove is [4, 6), but the merged piece spans beyond it
    low = seg(0, 10, 1)
    a, b = seg(4, 6, 3), seg(2, 8, 2)
    tl = tl_of(low, b, a)
    assert view(tl.entries()) == [(0, 2, 1), (2, 4, 2), (4, 6, 3), (6, 8, 2), (8, 10, 1)]
    tl.remove(a)
    assert view(tl.entries()) == [(0, 2, 1), (2, 8, 2), (8, 10, 1)]
    tl.remove(b)
    assert view(tl.entries()) == [(0, 10, 1)]


def test_lookup_trims_to_query() -> None:
    low, high = seg(0, 10, 1), seg(4, 6, 2)
    tl = tl_of(low, high)
    got = tl.lookup(Interval.of(2, 5))
    assert view(got) == [(2, 4, 1), (4, 5, 2)]
    assert got[0].chunk_interval == Interval.of(0, 10)
    assert got[1].chunk_interval == Interval.of(4, 6)
    assert got[1].is_partial  # trimmed by the query
    assert view(tl.lookup(Interval.of(1, 2))) == [(1, 2, 1)]
    assert view(tl.lookup(Interval.of(4, 6))) == [(4, 6, 2)]
    assert view(tl.lookup(Interval.of(-100, 100))) == view(tl.entries())
    assert view(tl.lookup(Interval.of(MIN_US, MAX_US))) == view(tl.entries())


def test_lookup_is_half_open() -> None:
    tl = tl_of(seg(0, 10, 1), seg(10, 20, 2))
    assert tl.lookup(Interval.of(20, 30)) == []
    assert tl.lookup(Interval.of(-5, 0)) == []
    assert view(tl.lookup(Interval.of(9, 10))) == [(9, 10, 1)]
    assert view(tl.lookup(Interval.of(10, 11))) == [(10, 11, 2)]
    assert view(tl.lookup(Interval.of(9, 11))) == [(9, 10, 1), (10, 11, 2)]


def test_lookup_with_real_dates_and_hourly_chunks() -> None:
    hours = [
        dseg(f"2024-03-01T{h:02d}:00:00Z", f"2024-03-01T{h + 1:02d}:00:00Z", 1) for h in range(23)
    ]
    hours.append(dseg("2024-03-01T23:00:00Z", "2024-03-02", 1))
    tl = Timeline.build(hours)
    got = tl.lookup(Interval.parse("2024-03-01T05:30:00Z/2024-03-01T08:00:00Z"))
    assert [str(e.interval) for e in got] == [
        "2024-03-01T05:30:00Z/2024-03-01T06:00:00Z",
        "2024-03-01T06:00:00Z/2024-03-01T07:00:00Z",
        "2024-03-01T07:00:00Z/2024-03-01T08:00:00Z",
    ]
    assert len(tl.lookup(Interval("2024-03-01", "2024-03-02"))) == 24
    tl.add(dseg("2024-03-01", "2024-03-02", 2))
    assert len(tl.lookup(Interval("2024-03-01", "2024-03-02"))) == 1
    assert len(tl.overshadowed()) == 24


# ---------------------------------------------------------------------------------------
# build


def test_build_equals_incremental() -> None:
    segs = [
        seg(0, 10, 1, 0, 2),
        seg(0, 10, 1, 1, 2),
        seg(5, 15, 2, 0, 3),  # incomplete
        seg(5, 15, 2, 1, 3),
        seg(2, 4, 3),
        seg(12, 20, 1),
        seg(8, 9, 4, 0, 1),
        seg(0, 10, 1, 1, 2),  # duplicate
        seg(10, 12, 1, 3, 0),
    ]
    inc = Timeline()
    for s in segs:
        inc.add(s)
    for trial in range(5):
        shuffled = segs[:]
        random.Random(trial).shuffle(shuffled)
        built = Timeline.build(shuffled)
        assert snapshot(built) == snapshot(inc)
    assert Timeline.build([]).entries() == []


def test_built_timeline_is_incrementally_maintainable() -> None:
    low = [seg(i, i + 1, 1, p, 2) for i in range(10) for p in range(2)]
    tl = Timeline.build(low)
    assert len(tl) == 20
    assert len(tl.entries()) == 10
    high = seg(3, 7, 2)
    tl.add(high)
    assert view(tl.entries())[3] == (3, 7, 2)
    assert len(tl.overshadowed()) == 8
    tl.remove(high)
    assert full(tl.entries()) == full(Timeline.build(low).entries())


# ---------------------------------------------------------------------------------------
# property-based: random operation sequences against a brute-force oracle

T = 12  # instants 0..T-1
VERSIONS = (1, 2, 3, 4)
ALL_INTERVALS = [(s, e) for s in range(T) for e in range(s + 1, T + 1)]


class Oracle:
    """The timeline's semantics computed naively, instant by instant."""

    def __init__(self) -> None:
        self.segs: dict[tuple, Segment] = {}  # identity -> the segment as added

    @staticmethod
    def key(s: Segment) -> tuple:
        return (s.table, s.interval.start, s.interval.end, s.version, s.partition_id)

    def __contains__(self, s: Segment) -> bool:
        return self.key(s) in self.segs

    def clashes(self, s: Segment) -> bool:
        return any(
            o.version == s.version and o.interval != s.interval and o.interval.overlaps(s.interval)
            for o in self.segs.values()
        )

    def add(self, s: Segment) -> bool:
        if s in self:
            return False
        self.segs[self.key(s)] = s
        return True

    def remove(self, s: Segment) -> bool:
        return self.segs.pop(self.key(s), None) is not None

    def chunks(self) -> dict[tuple[int, int, int], list[Segment]]:
        out: dict[tuple[int, int, int], list[Segment]] = {}
        for s in self.segs.values():
            out.setdefault((s.interval.start, s.interval.end, s.version), []).append(s)
        for segs in out.values():
            segs.sort(key=lambda s: s.partition_id)
        return out

    def overfull(self, s: Segment) -> bool:
        """Would ``s`` be one segment too many for its atomic update group?"""
        key = (s.interval, s.version, s.root_range, s.minor_version)
        return s not in self and s.atomic_update_group_size <= sum(
            1
            for o in self.segs.values()
            if (o.interval, o.version, o.root_range, o.minor_version) == key
        )

    @staticmethod
    def complete(segs: list[Segment]) -> bool:
        return chunk_view(segs).complete

    def winners(self) -> dict[int, tuple[int, int, int]]:
        """instant -> key of the visible chunk."""
        complete = [k for k, segs in self.chunks().items() if self.complete(segs)]
        out = {}
        for t in range(T):
            covering = [k for k in complete if k[0] <= t < k[1]]
            if covering:
                out[t] = max(covering, key=lambda k: k[2])
        return out

    def entries(self, qs: int = 0, qe: int = T) -> list[tuple]:
        chunks = self.chunks()
        win = self.winners()
        out: list[list] = []
        for t in range(max(qs, 0), min(qe, T)):
            k = win.get(t)
            if k is None:
                continue
            if out and out[-1][1] == t and out[-1][2] == k:
                out[-1][1] = t + 1
            else:
                out.append([t, t + 1, k])
        return [
            (
                s,
                e,
                k[2],
                tuple((x.id, x.num_core_partitions) for x in chunk_view(chunks[k]).visible),
                (k[0], k[1]),
            )
            for s, e, k in out
        ]

    def hidden(self, s: Segment) -> bool:
        """A visible group of ``s``'s own chunk (complete or not) overshadows ``s``,
        or at every instant of ``s`` a higher complete version shows."""
        chunks = self.chunks()
        own = (s.interval.start, s.interval.end, s.version)
        if own in chunks:
            rs, re = s.root_range
            if any(
                v.root_range[0] <= rs
                and re <= v.root_range[1]
                and v.minor_version > s.minor_version
                for v in chunk_view(chunks[own]).visible
            ):
                return True
        complete = [k for k, segs in chunks.items() if self.complete(segs)]
        return all(
            any(k[0] <= t < k[1] and k[2] > s.version for k in complete)
            for t in range(s.interval.start, s.interval.end)
        )

    def overshadowed(self) -> list[str]:
        return sorted(s.id for s in self.segs.values() if self.hidden(s))

    def visible(self) -> list[str]:
        chunks = self.chunks()
        seen: list[tuple[int, int, int]] = []
        for _, k in sorted(self.winners().items()):
            if k not in seen:
                seen.append(k)
        return [s.id for k in seen for s in chunk_view(chunks[k]).visible]


def check_against(tl: Timeline, oracle: Oracle, query: tuple[int, int]) -> None:
    assert full(tl.entries()) == oracle.entries()
    assert full(tl.lookup(Interval.of(*query))) == oracle.entries(*query)
    assert full(tl.lookup(Interval.of(-3, T + 3))) == oracle.entries()
    assert len(tl) == len(oracle.segs)
    assert sorted(ids(tl.segments())) == sorted(s.id for s in oracle.segs.values())
    got_over = ids(tl.overshadowed())
    assert len(got_over) == len(set(got_over))
    assert sorted(got_over) == oracle.overshadowed()
    assert ids(tl.visible()) == oracle.visible()
    for s in oracle.segs.values():
        assert s in tl
        assert tl.is_overshadowed(s) == oracle.hidden(s)
    # entries are well formed
    for e in tl.entries():
        assert all(s.interval == e.chunk_interval and s.version == e.version for s in e.segments)
        assert e.chunk_interval.contains(e.interval)


@st.composite
def scenarios(draw: st.DrawFn, wild: float, overwrites: float = 0.0) -> list[tuple]:
    """A list of (op, segment or index, query) steps.

    With probability ``overwrites`` a segment is of a later generation (root range,
    minor version, atomic update group) instead of a plain partition.

    Each version gets its own grid of chunks (length, offset), so same-version intervals
    are identical or disjoint; with probability ``wild`` an interval is drawn freely
    instead, which may overlap its version's chunks (the oracle then expects an error).
    """
    grids = {}
    for v in VERSIONS:
        length = draw(st.integers(1, 5), label=f"length v{v}")
        offset = draw(st.integers(0, length - 1), label=f"offset v{v}")
        cuts = sorted({0, T, *range(offset, T, length)})
        grids[v] = list(zip(cuts, cuts[1:], strict=False))
    steps = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["add", "add", "add", "add", "remove", "remove_present"]))
        qs = draw(st.integers(-2, T))
        query = (qs, qs + draw(st.integers(1, T)))
        if kind == "remove_present":
            steps.append((kind, draw(st.integers(0, 1000)), query))
            continue
        v = draw(st.sampled_from(VERSIONS))
        if draw(st.floats(0, 1)) < wild:
            s, e = draw(st.sampled_from(ALL_INTERVALS))
        else:
            s, e = draw(st.sampled_from(grids[v]))
        n = draw(st.integers(0, 3))
        if draw(st.floats(0, 1)) < overwrites:
            rs = draw(st.integers(0, 3))
            root = (rs, draw(st.integers(rs + 1, 4)))
            k, minor = draw(st.integers(0, 3)), draw(st.integers(1, 2))
            steps.append((kind, oseg(s, e, v, k, root, minor, n), query))
            continue
        pid = draw(st.integers(0, 3))
        steps.append((kind, seg(s, e, v, pid, n), query))
    return steps


def run_scenario(steps: list[tuple]) -> tuple[Timeline, Oracle]:
    tl, oracle = Timeline(), Oracle()
    for kind, arg, query in steps:
        if kind == "remove_present":
            if not oracle.segs:
                continue
            present = sorted(oracle.segs.values(), key=lambda s: s.id)
            target = present[arg % len(present)]
            assert tl.remove(target)
            assert oracle.remove(target)
            assert target not in tl
        elif kind == "remove":
            assert tl.remove(arg) == oracle.remove(arg)
            assert arg not in tl
        elif arg not in oracle and (oracle.clashes(arg) or oracle.overfull(arg)):
            before = snapshot(tl)
            with pytest.raises(TimelineError):
                tl.add(arg)
            assert snapshot(tl) == before
            assert arg not in tl
        else:
            assert tl.add(arg) == oracle.add(arg)
            assert arg in tl
        check_against(tl, oracle, query)
        if kind != "remove_present" and arg not in oracle:
            assert arg not in tl
            assert tl.is_overshadowed(arg) == oracle.hidden(arg)
    return tl, oracle


def check_build(tl: Timeline, oracle: Oracle, seed: int) -> None:
    segs = list(oracle.segs.values())
    random.Random(seed).shuffle(segs)
    built = Timeline.build(segs)
    assert snapshot(built) == snapshot(tl)
    incremental = Timeline()
    for s in segs:
        assert incremental.add(s)
    assert snapshot(incremental) == snapshot(tl)
    # built timelines keep working incrementally: tear down in random order
    for s in segs:
        assert built.remove(s)
        oracle.remove(s)
        check_against(built, oracle, (0, T))
    assert built.entries() == [] and len(built) == 0


PROPERTY_SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(steps=scenarios(wild=0.1), seed=st.integers(0, 2**16))
def test_random_operations_match_oracle(steps: list[tuple], seed: int) -> None:
    tl, oracle = run_scenario(steps)
    check_build(tl, oracle, seed)


@settings(PROPERTY_SETTINGS, max_examples=120)
@given(steps=scenarios(wild=1.0), seed=st.integers(0, 2**16))
def test_random_free_intervals_match_oracle(steps: list[tuple], seed: int) -> None:
    tl, oracle = run_scenario(steps)
    check_build(tl, oracle, seed)


@settings(PROPERTY_SETTINGS, max_examples=200)
@given(steps=scenarios(wild=0.1, overwrites=0.5), seed=st.integers(0, 2**16))
def test_random_operations_with_minor_versions_match_oracle(steps: list[tuple], seed: int) -> None:
    """Versions and minor versions together: a chunk counts by its visible groups."""
    tl, oracle = run_scenario(steps)
    check_build(tl, oracle, seed)


@settings(PROPERTY_SETTINGS, max_examples=150)
@given(
    segs=st.lists(
        st.builds(
            lambda iv, v, p, n: seg(iv[0], iv[1], v, p, n),
            st.sampled_from(ALL_INTERVALS),
            st.sampled_from(VERSIONS),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        max_size=20,
    )
)
def test_build_matches_oracle_or_rejects_overlap(segs: list[Segment]) -> None:
    oracle = Oracle()
    clash = False
    for s in segs:
        clash = clash or (s not in oracle and oracle.clashes(s))
        oracle.add(s)
    if clash:
        with pytest.raises(TimelineError):
            Timeline.build(segs)
        return
    built = Timeline.build(segs)
    check_against(built, oracle, (0, T))
