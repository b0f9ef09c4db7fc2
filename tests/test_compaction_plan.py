"""Minor compaction planning: the seed's three restrictions and the choice of runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina.core.compaction import check_inputs, minor_run, plan_minor
from lamina.core.interval import Interval
from lamina.core.segment import Segment
from lamina.errors import CompactionError

DAY = Interval("2024-01-01", "2024-01-02")
NEXT = 32768  # the first id of later generations


def first(pid: int, rows: int = 10) -> Segment:
    """A first-generation segment P``pid``."""
    return Segment("t", DAY, 1, pid, location=f"p{pid}", row_count=rows)


def later(pid: int, lo: int, hi: int, minor: int = 1, size: int = 1, rows: int = 10) -> Segment:
    """A later-generation segment covering roots ``lo..hi-1``."""
    return Segment(
        "t",
        DAY,
        1,
        pid,
        location=f"p{pid}",
        row_count=rows,
        minor_version=minor,
        root_partition_range=(lo, hi),
        atomic_update_group_size=size,
    )


def test_adjacent_first_generation_partitions_compact_together() -> None:
    """Restriction 1: P0 and P1 are adjacent; P2 and P4 are not."""
    p = [first(i) for i in range(5)]
    assert check_inputs([p[1], p[0]], p) == (0, 2)
    with pytest.raises(CompactionError, match="P2 and P4 are not adjacent partitions"):
        check_inputs([p[2], p[4]], p)


def test_later_generations_compact_with_adjacent_roots_only() -> None:
    """Restriction 2 (the seed's figure): P6, P7 from P0..P2 and P8 from P4, P5 cannot
    compact together; P3 and P8 can."""
    p6, p7 = later(NEXT, 0, 3, size=2), later(NEXT + 1, 0, 3, size=2)
    p8 = later(NEXT + 2, 4, 6)
    visible = [p6, p7, first(3), p8]
    with pytest.raises(CompactionError, match="not adjacent roots"):
        check_inputs([p6, p7, p8], [p6, p7, p8])
    assert check_inputs([first(3), p8], visible) == (3, 6)


def test_segments_from_the_same_roots_compact_together() -> None:
    """Restriction 3: P6 and P7 (both from P0..P2) compact with P3 only together."""
    p6, p7 = later(NEXT, 0, 3, size=2), later(NEXT + 1, 0, 3, size=2)
    visible = [p6, p7, first(3)]
    with pytest.raises(CompactionError, match="include it"):
        check_inputs([p6, first(3)], visible)
    assert check_inputs([p6, p7, first(3)], visible) == (0, 4)


def test_only_visible_segments_of_one_chunk_and_version() -> None:
    p = [first(i) for i in range(3)]
    with pytest.raises(CompactionError, match="not visible"):
        check_inputs([p[0], p[1]], [p[0]])
    other = Segment("t", Interval("2024-01-02", "2024-01-03"), 1, 1, location="x")
    with pytest.raises(CompactionError, match="one chunk and version"):
        check_inputs([p[0], other], [*p, other])
    with pytest.raises(CompactionError, match="at least one"):
        check_inputs([], p)


def test_a_run_overshadows_exactly_its_inputs() -> None:
    p6, p7 = later(NEXT, 0, 3, minor=2, size=2), later(NEXT + 1, 0, 3, minor=2, size=2)
    run = minor_run([first(3), p7, p6], [p6, p7, first(3)], target_rows=100)
    assert run.root_range == (0, 4) and run.minor_version == 3 and run.outputs == 1
    assert [s.partition_id for s in run.inputs] == [NEXT, NEXT + 1, 3]
    assert minor_run([first(0), first(1)], [first(0), first(1)], target_rows=15).outputs == 2


def test_plan_merges_runs_of_small_adjacent_segments() -> None:
    big = first(2, rows=80)
    segs = [first(0), first(1), big, first(3), first(4), first(5), first(7)]
    runs = plan_minor(segs, target_rows=100)
    # P2 is big (>= half the target), P6 is gone: runs P0-P1 and P3-P5; P7 alone stays
    assert [[s.partition_id for s in r.inputs] for r in runs] == [[0, 1], [3, 4, 5]]
    assert all(r.outputs == 1 for r in runs)


def test_plan_respects_the_target_and_skips_tombstones() -> None:
    segs = [first(i, rows=40) for i in range(5)]
    assert [[s.partition_id for s in r.inputs] for r in plan_minor(segs, 100)] == [
        [0, 1],
        [2, 3],
    ]
    tomb = Segment("t", DAY, 2, 0)
    assert plan_minor([tomb], 100) == []
    with pytest.raises(CompactionError, match=">= 1"):
        plan_minor(segs, 0)


@given(
    rows=st.lists(st.integers(0, 60), min_size=0, max_size=12),
    gaps=st.sets(st.integers(0, 11)),
    target=st.integers(1, 150),
)
def test_every_planned_run_is_valid_and_disjoint(
    rows: list[int], gaps: set[int], target: int
) -> None:
    segs = [first(i, r) for i, r in enumerate(rows) if i not in gaps]
    runs = plan_minor(segs, target)
    used: set[str] = set()
    for run in runs:
        assert check_inputs(run.inputs, segs) == run.root_range  # the restrictions hold
        assert len(run.inputs) >= 2 and run.rows <= target
        assert all(s.row_count * 2 < target for s in run.inputs)
        ids = {s.id for s in run.inputs}
        assert not ids & used
        used |= ids


def test_a_segment_to_purge_makes_a_run_of_its_own() -> None:
    """An upsert table's segment with many superseded records is rewritten, alone or
    with adjacent small segments while the run stays within the target."""
    big, small = first(0, rows=90), first(1, rows=10)
    segs = [big, small, first(2, rows=80)]
    assert plan_minor(segs, 100) == []  # nothing to merge
    runs = plan_minor(segs, 100, purge={big.id})  # P0 and P1 together: 100 rows
    assert [[s.partition_id for s in r.inputs] for r in runs] == [[0, 1]]
    runs = plan_minor(segs, 95, purge={big.id})  # P0 alone: with P1 it exceeds the target
    assert [[s.partition_id for s in r.inputs] for r in runs] == [[0]]
    assert runs[0].minor_version == 1 and runs[0].root_range == (0, 1)
    runs = plan_minor(segs, 100, purge={small.id})  # P1 alone (P0 and P2 are big)
    assert [[s.partition_id for s in r.inputs] for r in runs] == [[1]]


@given(
    rows=st.lists(st.integers(0, 120), min_size=0, max_size=12),
    gaps=st.sets(st.integers(0, 11)),
    stale=st.sets(st.integers(0, 11)),
    target=st.integers(1, 150),
)
def test_with_segments_to_purge_every_run_is_valid_and_each_of_them_is_rewritten(
    rows: list[int], gaps: set[int], stale: set[int], target: int
) -> None:
    """Oracle: every segment to purge is in exactly one run; a run without one still
    merges two or more small segments within the target; runs are valid and disjoint."""
    segs = [first(i, r) for i, r in enumerate(rows) if i not in gaps]
    purge = {s.id for s in segs if s.partition_id in stale}
    runs = plan_minor(segs, target, purge=purge)
    used: set[str] = set()
    for run in runs:
        assert check_inputs(run.inputs, segs) == run.root_range
        ids = {s.id for s in run.inputs}
        assert not ids & used
        used |= ids
        if not ids & purge:
            assert len(run.inputs) >= 2 and run.rows <= target
        assert len(run.inputs) == 1 or run.rows <= target
        assert all(s.row_count * 2 < target or s.id in purge for s in run.inputs)
    assert purge <= used


def test_runs_are_sized_by_the_rows_segments_keep() -> None:
    """An upsert table's segments keep fewer rows than they hold (their superseded
    records are dropped): runs and outputs are sized by what they keep, as Pinot sizes
    its merges by valid records. Two 80-row segments keeping 5 each merge into one
    segment; a 250-row segment keeping 10 is rewritten into one, not three."""
    a, b = first(0, rows=80), first(1, rows=80)
    assert [len(r.inputs) for r in plan_minor([a, b], 100, purge={a.id, b.id})] == [1, 1]
    (run,) = plan_minor([a, b], 100, purge={a.id, b.id}, kept={a.id: 5, b.id: 5})
    assert len(run.inputs) == 2 and run.outputs == 1
    big = first(0, rows=250)
    assert plan_minor([big], 100, purge={big.id})[0].outputs == 3
    assert plan_minor([big], 100, purge={big.id}, kept={big.id: 10})[0].outputs == 1
    assert minor_run([big], [big], 100, {big.id: 10}).outputs == 1
