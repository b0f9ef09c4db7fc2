"""Publish planning (lamina.core.planner), pure: against brute-force oracles."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.core.interval import Interval
from lamina.core.model import NewSegment
from lamina.core.planner import (
    append_segments,
    append_targets,
    hidden_by_newer,
    overshadowed,
    overwrite_segments,
)
from lamina.core.segment import Segment
from lamina.errors import LaminaError

H = 3_600_000_000  # one hour in µs; the tests' time unit
DAY = 24 * H


def hours(a: int, b: int) -> Interval:
    return Interval.of(a * H, b * H)


def file(chunk: Interval, n: int = 1) -> NewSegment:
    return NewSegment(chunk, f"f{chunk.start}-{n}.parquet", 10, 100, chunk.start, chunk.start)


# Live segments: DAY chunks at odd versions, 6-hour chunks at even ones (one version
# never holds two overlapping intervals), within 4 days, complete partitions.
chunk_st = st.one_of(
    st.tuples(
        st.integers(0, 3).map(lambda d: hours(24 * d, 24 * d + 24)), st.sampled_from([1, 3, 5])
    ),
    st.tuples(st.integers(0, 15).map(lambda q: hours(6 * q, 6 * q + 6)), st.sampled_from([2, 4])),
)
live_st = st.lists(chunk_st, max_size=12, unique=True)


def _live(pairs: list[tuple[Interval, int]]) -> list[Segment]:
    return [Segment("t", iv, v, 0, 0, f"x{i}", 1) for i, (iv, v) in enumerate(pairs)]


def _hidden_everywhere(seg: Segment, complete: list[tuple[Interval, int]]) -> bool:
    """Oracle: at every hour of ``seg``, the highest version covering it is higher."""
    for h in range(seg.interval.start // H, seg.interval.end // H):
        top = max((v for iv, v in complete if iv.start <= h * H < iv.end), default=0)
        if top <= seg.version:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    live=live_st, days=st.sets(st.integers(0, 3), min_size=1), with_rows=st.sets(st.integers(0, 3))
)
def test_overwrite_hides_exactly_what_the_oracle_says(
    live: list[tuple[Interval, int]], days: set[int], with_rows: set[int]
) -> None:
    """Overwriting DAY chunks at a new top version: files become partitions 0..n-1 of
    their chunk, empty chunks get a tombstone, and the live segments hidden
    everywhere afterwards are exactly those the oracle finds."""
    chunks = [hours(24 * d, 24 * d + 24) for d in sorted(days)]
    files = [file(c, n) for c in chunks if c.start // DAY in with_rows for n in range(2)]
    new = overwrite_segments("t", files, chunks, 9)
    for c in chunks:
        mine = [s for s in new if s.interval == c]
        if c.start // DAY in with_rows:
            assert [(s.partition_id, s.num_core_partitions) for s in mine] == [(0, 2), (1, 2)]
            assert all(s.location is not None for s in mine)
        else:
            assert [(s.location, s.num_core_partitions) for s in mine] == [(None, 1)]
    segs = _live(live)
    complete = [(iv, v) for iv, v in live] + [(c, 9) for c in chunks]
    expected = {s.id for s in segs if _hidden_everywhere(s, complete)}
    assert {s.id for s in overshadowed(segs, new)} == expected


def test_overwrite_without_tombstones_under_a_lineage_entry() -> None:
    new = overwrite_segments("t", [], [hours(0, 24)], 3, suffix="c7", tombstones=False)
    assert new == []
    new = overwrite_segments("t", [file(hours(0, 24))], [hours(0, 24)], 3, suffix="c7")
    assert [s.id for s in new] == [Segment("t", hours(0, 24), 3, 0, 1, suffix="c7").id]


def _cover(live: list[tuple[Interval, int]], c: Interval) -> tuple[Interval, int] | None | str:
    """Brute force: the version alone covering DAY chunk ``c`` with a chunk of its own
    interval; None when nothing covers it; "refused" otherwise."""
    tops = set()
    for h in range(c.start // H, c.end // H):
        cover = [(iv, v) for iv, v in live if iv.start <= h * H < iv.end]
        tops.add(max(cover, key=lambda x: x[1]) if cover else None)
    if tops == {None}:
        return None
    if len(tops) == 1 and next(iter(tops))[0] == c:  # type: ignore[index]
        return next(iter(tops))  # type: ignore[return-value]
    return "refused"


@settings(max_examples=300, deadline=None)
@given(live=live_st, pending=live_st, targets=st.sets(st.integers(0, 3), min_size=1))
def test_append_targets_follow_the_visible_version(
    live: list[tuple[Interval, int]], pending: list[tuple[Interval, int]], targets: set[int]
) -> None:
    """A DAY chunk gets the version that alone covers it with a chunk of its own
    interval; anything else covering it is refused. An uncovered chunk gets the
    version that alone covers it among what lineage may show again (``pending``), else
    the new version."""
    chunks = [hours(24 * d, 24 * d + 24) for d in sorted(targets)]
    expected = {c: _cover(live, c) for c in chunks}
    if "refused" in expected.values():
        with pytest.raises(LaminaError, match="overwrite that interval instead"):
            append_targets(chunks, _live(live), 9, _live(pending))
        return
    for c in chunks:
        if expected[c] is None:
            got = _cover(pending, c)
            expected[c] = None if got == "refused" else got
    got, used_new = append_targets(chunks, _live(live), 9, _live(pending))
    assert used_new == (None in expected.values())
    for c in chunks:
        want = expected[c]
        assert got[c] == ((c, 9) if want is None else want)


def test_append_partition_ids_follow_the_highest_taken() -> None:
    day = hours(0, 24)
    files = [file(day, n) for n in range(3)] + [file(hours(24, 48))]
    targets = {day: (day, 2), hours(24, 48): (hours(24, 48), 5)}
    new = append_segments("t", files, targets, {(day, 2): 4}, suffix="")
    assert [(s.interval, s.version, s.partition_id) for s in new] == [
        (day, 2, 4),
        (day, 2, 5),
        (day, 2, 6),
        (hours(24, 48), 5, 0),
    ]
    assert all(s.num_core_partitions == 0 for s in new)
    assert [s.location for s in new] == [f.location for f in files]


def test_hidden_by_newer_finds_a_segment_a_higher_version_hides() -> None:
    mine = [
        Segment("t", hours(0, 24), 2, 0, 0, "a", 1),
        Segment("t", hours(24, 48), 2, 0, 0, "b", 1),
    ]
    assert hidden_by_newer([], mine) is None
    newer = [Segment("t", hours(30, 36), 3, 0, 0, "n", 1)]
    assert hidden_by_newer(newer, mine) == mine[1]
    older = [Segment("t", hours(0, 48), 1, 0, 0, "o", 1)]
    assert hidden_by_newer(older, mine) is None
