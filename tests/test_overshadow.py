"""Minor versions inside a chunk: atomic update groups, standby / visible / overshadowed.

The scenarios retell, with lamina's API, the published cases of Druid's
OvershadowableManagerTest and the overwrite cases of VersionedIntervalTimelineTest,
plus the examples of Druid's segment-locking proposal; the property tests hold the
incremental Timeline to the brute-force oracle of ``tests/overshadow_oracle.py``.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamina.core.interval import Granularity, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.overshadow import AtomicGroups, _dominated, _Group
from lamina.core.scan import plan_scan
from lamina.core.segment import OVERWRITE_PARTITION_START, Segment
from lamina.core.timeline import Timeline
from lamina.errors import TimelineError
from tests.overshadow_oracle import chunk_view

DAY = Interval.of(0, 100)
NEXT_DAY = Interval.of(100, 200)


def root(pid: int, version: int = 1, core: int = 0, iv: Interval = DAY) -> Segment:
    return Segment("t", iv, version, pid, core, f"r{pid}")


def over(
    k: int,
    start: int,
    end: int,
    minor: int,
    size: int,
    version: int = 1,
    iv: Interval = DAY,
    core: int = 0,
) -> Segment:
    """The k-th later-generation segment of the chunk."""
    return Segment(
        "t",
        iv,
        version,
        OVERWRITE_PARTITION_START + k,
        core,
        f"o{k}",
        minor_version=minor,
        root_partition_range=(start, end),
        atomic_update_group_size=size,
    )


def name(s: Segment) -> str:
    k = s.partition_id - OVERWRITE_PARTITION_START
    return f"p{s.partition_id}" if k < 0 else f"o{k}"


class Scene:
    """One chunk, segments added and removed one at a time, states read back."""

    def __init__(self, version: int = 1, core: int = 0, iv: Interval = DAY) -> None:
        self.tl = Timeline()
        self.version, self.core, self.iv = version, core, iv
        self.next_root = 0
        self.next_over = 0
        self.segs: dict[str, Segment] = {}

    def roots(self, n: int = 1, start: int | None = None) -> list[Segment]:
        if start is not None:
            self.next_root = start
        out = []
        for _ in range(n):
            s = root(self.next_root, self.version, self.core, self.iv)
            self.next_root += 1
            out.append(self._add(s))
        return out

    def overs(self, n: int, start: int, end: int, minor: int, size: int) -> list[Segment]:
        out = []
        for _ in range(n):
            s = over(self.next_over, start, end, minor, size, self.version, self.iv)
            self.next_over += 1
            out.append(self._add(s))
        return out

    def _add(self, s: Segment) -> Segment:
        assert self.tl.add(s)
        self.segs[name(s)] = s
        return s

    def drop(self, *names: str) -> None:
        for n in names:
            assert self.tl.remove(self.segs.pop(n))

    def states(self) -> dict[str, set[str]]:
        served_or_reported(self.tl)
        out: dict[str, set[str]] = {"visible": set(), "standby": set(), "overshadowed": set()}
        for n, s in self.segs.items():
            state = self.tl.partition_state(s)
            assert state is not None
            out[state].add(n)
        # the same, from scratch, by the oracle
        view = chunk_view(list(self.segs.values()))
        assert {n: view.states[s.partition_id] for n, s in self.segs.items()} == {
            n: st for st, ns in out.items() for n in ns
        }
        return out

    def expect(self, visible: str = "", standby: str = "", overshadowed: str = "") -> None:
        assert self.states() == {
            "visible": set(visible.split()),
            "standby": set(standby.split()),
            "overshadowed": set(overshadowed.split()),
        }

    def shown(self) -> list[str]:
        """The chunk's segments a lookup returns (empty while the chunk is incomplete)."""
        return [name(s) for e in self.tl.lookup(self.iv) for s in e.segments]


# ---------------------------------------------------------------------------------------
# Segment fields


def test_first_generation_defaults() -> None:
    s = root(3)
    assert s.minor_version == 0 and s.atomic_update_group_size == 1
    assert s.root_partition_range is None and s.root_range == (3, 4)
    assert s.is_first_generation
    o = over(0, 0, 3, 1, 2)
    assert not o.is_first_generation and o.root_range == (0, 3)
    # identity stays (table, interval, version, partition): the overwrite fields are
    # description
    assert o == Segment("t", DAY, 1, OVERWRITE_PARTITION_START)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"minor_version": -1},
        {"root_partition_range": (0, 2)},  # minor 0 is first generation: (pid, pid + 1)
        {"atomic_update_group_size": 2},
        {"minor_version": 1, "root_partition_range": (0, 1)},  # pid in the root space
    ],
)
def test_inconsistent_overwrite_fields_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Segment("t", DAY, 1, 0, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"root_partition_range": None},
        {"root_partition_range": (2, 2)},
        {"root_partition_range": (0, OVERWRITE_PARTITION_START + 1)},
        {"root_partition_range": (0, 1), "atomic_update_group_size": 0},
    ],
)
def test_later_generation_needs_a_root_range_and_a_group(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Segment("t", DAY, 1, OVERWRITE_PARTITION_START, minor_version=1, **kwargs)


def test_an_explicit_default_root_range_is_first_generation() -> None:
    assert Segment("t", DAY, 1, 4, root_partition_range=(4, 5)).is_first_generation


# ---------------------------------------------------------------------------------------
# Druid's OvershadowableManagerTest, retold


def test_first_generation_segments_are_all_visible() -> None:
    """Druid's testAddRootChunkToEmptyManager."""
    sc = Scene()
    sc.roots(2)
    sc.expect(visible="p0 p1")
    assert not sc.tl.add(root(0))  # the same segment again
    assert sc.shown() == ["p0", "p1"]


def test_a_lone_partial_group_is_visible_but_the_chunk_incomplete() -> None:
    """Druid's testAddNonRootChunkToEmptyManager."""
    sc = Scene()
    sc.overs(1, 10, 12, 1, 3)
    sc.expect(visible="o0")
    assert sc.shown() == []  # visible group not full: the chunk does not count
    sc.overs(1, 10, 12, 1, 3)
    sc.expect(visible="o0 o1")
    assert sc.shown() == []
    sc.overs(1, 10, 12, 1, 3)
    sc.expect(visible="o0 o1 o2")
    assert sc.shown() == ["o0", "o1", "o2"]
    with pytest.raises(TimelineError, match="atomic update group of 3"):
        sc.tl.add(over(3, 10, 12, 1, 3))
    assert over(3, 10, 12, 1, 3) not in sc.tl


def test_a_group_size_must_agree_within_a_group() -> None:
    sc = Scene()
    sc.overs(1, 0, 2, 1, 3)
    with pytest.raises(TimelineError, match="atomic_update_group_size 2"):
        sc.tl.add(over(5, 0, 2, 1, 2))
    sc.expect(visible="o0")


def test_removing_from_an_empty_or_other_chunk_is_false() -> None:
    """Druid's testRemoveFromEmptyManager and testRemoveUnknownChunk."""
    tl = Timeline()
    assert not tl.remove(root(0))
    tl.add(root(0))
    assert not tl.remove(root(1))
    assert tl.partition_state(root(1)) is None


def test_a_root_added_under_a_full_group_is_overshadowed() -> None:
    """Druid's testAddOvershadowedChunkToCompletePartition."""
    sc = Scene()
    sc.overs(2, 0, 3, 1, 2)
    sc.roots(1, start=1)
    sc.expect(visible="o0 o1", overshadowed="p1")


def test_a_root_added_under_a_partial_group_is_overshadowed() -> None:
    """Druid's testAddOvershadowedChunkToIncompletePartition: the partial group shows
    (the chunk is incomplete) and the root is overshadowed — and reported so."""
    sc = Scene()
    sc.overs(1, 0, 3, 1, 2)
    sc.roots(1, start=1)  # alone it cannot stand in for [0, 3)
    sc.expect(visible="o0", overshadowed="p1")
    assert sc.shown() == [] and [name(s) for s in sc.tl.overshadowed()] == ["p1"]


def test_a_group_waits_on_standby_until_full_then_replaces_its_roots() -> None:
    """Druid's testAddStandbyChunksToCompletePartition."""
    sc = Scene(core=3)
    sc.roots(3)
    sc.overs(1, 0, 3, 1, 2)
    sc.expect(visible="p0 p1 p2", standby="o0")
    assert sc.shown() == ["p0", "p1", "p2"]
    sc.overs(1, 0, 3, 1, 2)
    sc.expect(visible="o0 o1", overshadowed="p0 p1 p2")
    assert sc.shown() == ["o0", "o1"]


def test_a_newer_partial_group_replaces_an_older_partial_one() -> None:
    """Druid's testAddStandbyChunksToIncompletePartition."""
    sc = Scene()
    sc.overs(1, 0, 3, 1, 2)
    sc.overs(1, 0, 3, 2, 3)
    sc.expect(visible="o1", overshadowed="o0")
    sc.overs(1, 0, 3, 2, 3)
    sc.expect(visible="o1 o2", overshadowed="o0")


def test_removing_roots_until_empty() -> None:
    """Druid's testRemoveChunksUntilEmpty."""
    sc = Scene()
    sc.roots(10)
    names = [f"p{i}" for i in range(10)]
    random.Random(7).shuffle(names)
    while names:
        sc.drop(names.pop())
        sc.expect(visible=" ".join(sorted(sc.segs)))
    assert sc.tl.entries() == [] and len(sc.tl) == 0


def test_removing_a_standby_segment() -> None:
    """Druid's testRemoveStandbyChunk."""
    sc = Scene()
    sc.roots(3)
    sc.overs(2, 0, 3, 1, 3)
    sc.expect(visible="p0 p1 p2", standby="o0 o1")
    sc.drop("o0")
    sc.expect(visible="p0 p1 p2", standby="o1")


def test_losing_a_root_under_a_standby_group_shows_the_group() -> None:
    """Druid's testRemoveVisibleChunkAndFallBackToStandby."""
    sc = Scene()
    sc.roots(2)
    sc.overs(2, 0, 2, 1, 3)
    sc.expect(visible="p0 p1", standby="o0 o1")
    sc.drop("p0")  # [0, 2) has no full cover below any more: the newest group shows
    sc.expect(visible="o0 o1", overshadowed="p1")
    assert sc.shown() == []  # ... but it is partial: the chunk is incomplete
    assert [name(s) for s in sc.tl.overshadowed()] == ["p1"]  # and p1 is replaced


def test_completing_the_roots_under_a_partial_group_shows_the_roots() -> None:
    """Druid's testAddCompleteOvershadowedToInCompletePartition."""
    sc = Scene()
    sc.overs(2, 0, 2, 1, 3)
    sc.roots(1)
    sc.expect(visible="o0 o1", overshadowed="p0")
    sc.roots(1)
    sc.expect(visible="p0 p1", standby="o0 o1")
    assert sc.shown() == ["p0", "p1"]


def test_complete_roots_under_a_full_group_stay_overshadowed() -> None:
    """Druid's testAddCompleteOvershadowedToCompletePartition."""
    sc = Scene()
    sc.overs(2, 0, 2, 1, 2)
    sc.roots(2)
    sc.expect(visible="o0 o1", overshadowed="p0 p1")


def test_removing_a_lone_root_under_a_partial_group() -> None:
    """Druid's testRemoveChunkFromOvershadowd."""
    sc = Scene()
    sc.roots(1, start=1)
    sc.overs(1, 0, 2, 1, 2)
    sc.expect(visible="o0", overshadowed="p1")
    sc.drop("p1")
    sc.expect(visible="o0")


def test_a_full_group_losing_segments_falls_back_once_empty_when_roots_are_missing() -> None:
    """Druid's testRemoveChunkFromCompleteParition."""
    sc = Scene()
    sc.roots(1, start=1)
    sc.overs(2, 0, 2, 1, 2)
    sc.expect(visible="o0 o1", overshadowed="p1")
    sc.drop("o0")  # p0 missing: nothing full covers [0, 2), the partial group stays
    sc.expect(visible="o1", overshadowed="p1")
    sc.drop("o1")
    sc.expect(visible="p1")


def test_a_full_group_losing_a_segment_falls_back_to_full_roots() -> None:
    """Druid's testRemoveChunkFromCompletePartitionFallBackToOvershadowed."""
    sc = Scene(core=2)
    sc.roots(2)
    sc.overs(2, 0, 2, 1, 2)
    sc.expect(visible="o0 o1", overshadowed="p0 p1")
    sc.drop("o0")  # atomically back to both roots; the remnant waits on standby
    sc.expect(visible="p0 p1", standby="o1")
    assert sc.shown() == ["p0", "p1"]


def test_falling_back_to_several_generations_at_once() -> None:
    """Druid's testAddCompleteOvershadowedToCompletePartition2: removing a segment of
    the visible [0, 10) group falls back to [0, 5) v2, [5, 8) v1 and [8, 10) v1."""
    sc = Scene()
    sc.overs(2, 0, 2, 1, 3)
    sc.overs(2, 2, 5, 1, 3)
    sc.overs(2, 5, 8, 1, 3)
    sc.overs(2, 8, 10, 1, 3)
    sc.overs(2, 0, 5, 2, 3)
    sc.overs(2, 0, 8, 3, 3)
    sc.overs(2, 0, 10, 4, 2)  # o12, o13: full, visible
    sc.overs(1, 0, 10, 5, 2)  # o14: partial, standby
    lower = "o0 o1 o2 o3 o4 o5 o6 o7 o8 o9 o10 o11"
    sc.expect(visible="o12 o13", standby="o14", overshadowed=lower)
    sc.overs(1, 0, 5, 2, 3)  # o15 completes [0, 5) v2
    sc.overs(1, 5, 8, 1, 3)  # o16 completes [5, 8) v1
    sc.overs(1, 8, 10, 1, 3)  # o17 completes [8, 10) v1
    sc.expect(visible="o12 o13", standby="o14", overshadowed=lower + " o15 o16 o17")
    sc.drop("o12")
    sc.expect(
        visible="o8 o9 o15 o4 o5 o16 o6 o7 o17",
        standby="o13 o14 o10 o11",
        overshadowed="o0 o1 o2 o3",
    )
    assert len(sc.shown()) == 9


def test_completing_two_standby_groups() -> None:
    """Druid's testAddCompleteStandbyToCompletePartition."""
    sc = Scene()
    sc.overs(2, 0, 2, 1, 3)
    sc.overs(2, 2, 5, 1, 3)
    sc.overs(2, 5, 8, 1, 3)
    sc.overs(2, 8, 10, 1, 2)
    sc.overs(2, 0, 5, 2, 2)  # o8 o9 visible
    sc.overs(2, 5, 10, 2, 2)  # o10 o11 visible
    sc.overs(2, 0, 5, 3, 3)  # o12 o13 standby
    sc.overs(2, 5, 10, 3, 3)  # o14 o15 standby
    sc.overs(2, 0, 5, 4, 3)  # o16 o17 standby
    sc.overs(2, 0, 10, 5, 3)  # o18 o19 standby
    first = "o0 o1 o2 o3 o4 o5 o6 o7"
    sc.expect(
        visible="o8 o9 o10 o11",
        standby="o12 o13 o14 o15 o16 o17 o18 o19",
        overshadowed=first,
    )
    sc.overs(1, 0, 5, 4, 3)  # o20 completes [0, 5) v4
    sc.overs(1, 5, 10, 3, 3)  # o21 completes [5, 10) v3
    sc.expect(
        visible="o16 o17 o20 o14 o15 o21",
        standby="o18 o19",
        overshadowed=first + " o8 o9 o10 o11 o12 o13",
    )


def test_losing_the_visible_full_group_shows_the_newest_partial_one() -> None:
    """Druid's testFallBackToStandby2: nothing full below, so the newest partial group."""
    sc = Scene()
    sc.overs(2, 0, 2, 1, 3)
    sc.overs(2, 0, 2, 2, 2)
    sc.overs(2, 0, 2, 3, 3)
    sc.overs(2, 0, 2, 4, 3)
    sc.overs(2, 0, 2, 5, 3)
    sc.expect(visible="o2 o3", standby="o4 o5 o6 o7 o8 o9", overshadowed="o0 o1")
    sc.drop("o2")
    sc.expect(visible="o8 o9", overshadowed="o0 o1 o3 o4 o5 o6 o7")


def test_overwrite_then_append_then_older_overwrite() -> None:
    """Druid's testAddAndOverwriteAndAdd."""
    sc = Scene()
    sc.roots(5)
    sc.overs(1, 1, 3, 3, 2)
    sc.expect(visible="p0 p1 p2 p3 p4", standby="o0")
    sc.overs(1, 1, 3, 3, 2)
    sc.expect(visible="p0 o0 o1 p3 p4", overshadowed="p1 p2")
    sc.roots(3)  # appends keep showing next to the overwrite
    sc.expect(visible="p0 o0 o1 p3 p4 p5 p6 p7", overshadowed="p1 p2")
    sc.overs(2, 1, 3, 2, 2)  # a full group of a lower minor version: overshadowed
    sc.expect(visible="p0 o0 o1 p3 p4 p5 p6 p7", overshadowed="p1 p2 o2 o3")


def test_removing_overshadowed_then_a_visible_overwrite_segment() -> None:
    """Druid's testRemoveOvershadowed."""
    sc = Scene()
    sc.roots(5)
    sc.overs(2, 1, 3, 1, 2)
    sc.expect(visible="p0 o0 o1 p3 p4", overshadowed="p1 p2")
    sc.drop("p1")
    sc.expect(visible="p0 o0 o1 p3 p4", overshadowed="p2")
    sc.drop("o0")  # p1 is gone: no full cover of [1, 3), the remnant stays visible
    sc.expect(visible="p0 o1 p3 p4", overshadowed="p2")


def test_removing_a_visible_overwrite_segment_brings_back_its_roots() -> None:
    """Druid's testRemoveOvershadowingVisible."""
    sc = Scene()
    sc.roots(5)
    sc.overs(2, 1, 3, 1, 2)
    sc.drop("o0")
    sc.expect(visible="p0 p1 p2 p3 p4", standby="o1")


def test_losing_the_visible_root_shows_the_newest_standby_group() -> None:
    """Druid's testFallBackToStandbyOnRemove."""
    sc = Scene()
    sc.roots(1)
    sc.overs(1, 0, 1, 1, 3)
    sc.overs(1, 0, 1, 2, 2)
    sc.expect(visible="p0", standby="o0 o1")
    sc.drop("p0")
    sc.expect(visible="o1", overshadowed="o0")


def test_emptying_the_visible_partial_group_shows_the_next_older() -> None:
    """Druid's testFallBackToOvershadowedOnRemove."""
    sc = Scene()
    sc.overs(2, 10, 20, 5, 3)  # o0 o1
    for _ in range(2):
        sc.overs(1, 10, 20, 4, 3)
        sc.overs(1, 10, 20, 3, 3)
    sc.expect(visible="o0 o1", overshadowed="o2 o3 o4 o5")
    sc.drop("o0")
    sc.expect(visible="o1", overshadowed="o2 o3 o4 o5")
    sc.drop("o1")
    sc.expect(visible="o2 o4", overshadowed="o3 o5")


def test_a_full_older_group_beats_a_newer_partial_one() -> None:
    """Druid's testAddIncompleteAtomicUpdateGroups."""
    sc = Scene()
    sc.overs(1, 0, 1, 1, 3)  # o0
    sc.expect(visible="o0")
    sc.overs(1, 0, 1, 2, 2)  # o1
    sc.expect(visible="o1", overshadowed="o0")
    sc.overs(1, 0, 1, 3, 5)  # o2
    sc.expect(visible="o2", overshadowed="o0 o1")
    sc.overs(1, 0, 1, 2, 2)  # o3 completes minor 2: it shows, minor 3 waits
    sc.expect(visible="o1 o3", standby="o2", overshadowed="o0")


def test_roots_missing_at_the_start() -> None:
    """Druid's testMissingStartRootPartitionId."""
    sc = Scene()
    sc.roots(1, start=2)
    sc.overs(2, 0, 3, 1, 2)
    sc.expect(visible="o0 o1", overshadowed="p2")
    sc.drop("o0", "o1")
    sc.expect(visible="p2")


def test_a_standby_group_beside_a_full_one() -> None:
    """Druid's testCopyVisible / testDeepCopy (the state they copy): roots p0, p1 under a
    full [0, 2) group, appended roots p2, p3, one segment of a [2, 4) group of 3."""
    sc = Scene()
    sc.roots(2)
    sc.overs(3, 0, 2, 1, 3)
    sc.roots(2)
    sc.overs(1, 2, 4, 1, 3)
    sc.expect(visible="o0 o1 o2 p2 p3", standby="o3", overshadowed="p0 p1")
    assert sc.shown() == ["p2", "p3", "o0", "o1", "o2"]


def test_the_widest_newest_group_hides_a_nest_of_groups() -> None:
    """Druid's testFindOvershadowedBy: groups of one segment, [0, 2) m1, [0, 3) m2,
    [0, 5) m3, [5, 8) m1, [8, 11) m2, [5, 11) m3, then [0, 12) m5 over them all."""
    sc = Scene()
    for start, end, minor in [(0, 2, 1), (0, 3, 2), (0, 5, 3), (5, 8, 1), (8, 11, 2), (5, 11, 3)]:
        sc.overs(1, start, end, minor, 1)
    sc.expect(visible="o2 o5", overshadowed="o0 o1 o3 o4")
    sc.overs(1, 0, 12, 5, 1)
    sc.expect(visible="o6", overshadowed="o0 o1 o2 o3 o4 o5")
    # a group inside [2, 10) below minor 10 is overshadowed too, present or not
    assert sc.tl.is_overshadowed(over(9, 2, 10, 4, 1))
    assert not sc.tl.is_overshadowed(over(9, 2, 10, 10, 1))


def test_a_group_overshadows_what_its_root_range_contains() -> None:
    """Druid's testFindOvershadows: [2, 6) m3 and [6, 8) m3 under [1, 8) m4."""
    sc = Scene()
    sc.overs(1, 2, 6, 3, 1)
    sc.overs(1, 6, 8, 3, 1)
    sc.overs(1, 1, 8, 4, 1)
    sc.expect(visible="o2", overshadowed="o0 o1")
    for start, end in [(1, 3), (4, 7)]:  # ranges inside [1, 8) at minor 1
        assert sc.tl.is_overshadowed(over(9, start, end, 1, 1))
    assert not sc.tl.is_overshadowed(over(9, 0, 3, 1, 1))  # sticks out of [1, 8)


# ---------------------------------------------------------------------------------------
# issue 33 §3: a partial group never hides present data unreported


def served_or_reported(tl: Timeline) -> None:
    """Every segment hidden inside its chunk is reported overshadowed: a segment a
    visible group of its own chunk replaces is never merely missing from reads."""
    reported = set(map(name, tl.overshadowed()))
    for s in tl.segments():
        if tl.partition_state(s) == "overshadowed":
            assert tl.is_overshadowed(s) and name(s) in reported, name(s)


def test_a_partial_group_over_a_lone_root_reports_the_root_overshadowed() -> None:
    """Druid's testAddOvershadowedChunkToIncompletePartition, through the timeline:
    partition 2 and one of the two segments of a [0, 3) minor-1 group. The partial
    group shows (what it replaces is not all there), so the chunk is incomplete and
    serves nothing; partition 2 is overshadowed — and reported so, for retention."""
    p2, o0 = root(2), over(0, 0, 3, 1, 2)
    for order in ([p2, o0], [o0, p2]):
        tl = Timeline()
        for s in order:
            tl.add(s)
        assert tl.lookup(DAY) == []
        assert tl.partition_state(p2) == "overshadowed"
        assert tl.partition_state(o0) == "visible"
        assert tl.overshadowed() == [p2] and tl.is_overshadowed(p2)
        assert not tl.is_overshadowed(o0)
        served_or_reported(tl)
    built = Timeline.build([p2, o0])
    assert built.overshadowed() == [p2] and built.lookup(DAY) == []


def test_a_complete_group_losing_a_member_after_its_roots_went() -> None:
    """The group completes over p0..p2, p0 and p1 go (retention), then one of its two
    segments goes: Druid's manager finds no full fallback covering [0, 3) and keeps
    the remnant visible (testRemoveChunkFromCompleteParition), so p2 stays
    overshadowed — reported as such at every step."""
    sc = Scene(core=3)
    sc.roots(3)
    sc.overs(2, 0, 3, 1, 2)
    assert sc.shown() == ["o0", "o1"]
    sc.drop("p0", "p1")
    sc.expect(visible="o0 o1", overshadowed="p2")
    assert sc.shown() == ["o0", "o1"]
    served_or_reported(sc.tl)
    sc.drop("o1")
    sc.expect(visible="o0", overshadowed="p2")
    assert sc.shown() == []
    assert [name(s) for s in sc.tl.overshadowed()] == ["p2"]
    served_or_reported(sc.tl)
    sc.drop("o0")  # nothing above p2 any more: it shows again (the chunk lacks p0, p1)
    sc.expect(visible="p2")
    assert sc.tl.overshadowed() == [] and sc.shown() == []


def test_a_partial_group_over_all_its_roots_stands_by() -> None:
    """The same group while p0..p2 are all there: it stands by, the roots are served
    (Druid's testAddStandbyChunksToCompletePartition), nothing is overshadowed."""
    sc = Scene(core=3)
    sc.roots(3)
    sc.overs(1, 0, 3, 1, 2)
    sc.expect(visible="p0 p1 p2", standby="o0")
    assert sc.shown() == ["p0", "p1", "p2"] and sc.tl.overshadowed() == []


def test_a_partial_group_hidden_under_a_newer_version_is_overshadowed_whole() -> None:
    """A higher complete version over the incomplete chunk hides all of it."""
    tl = Timeline.build([root(2), over(0, 0, 3, 1, 2), root(0, version=2)])
    assert [e.version for e in tl.lookup(DAY)] == [2]
    assert sorted(map(name, tl.overshadowed())) == ["o0", "p2"]


# ---------------------------------------------------------------------------------------
# Druid's VersionedIntervalTimelineTest (overwrite cases), retold


def test_overshadowed_by_a_minor_version() -> None:
    """Druid's testOvershadowedByReference."""
    tl = Timeline()
    roots = [root(p) for p in range(3)]
    for s in [*roots, over(0, 0, 3, 1, 2), over(1, 0, 3, 1, 2)]:
        tl.add(s)
    assert sorted(map(name, tl.overshadowed())) == ["p0", "p1", "p2"]
    assert all(tl.is_overshadowed(s) for s in roots)
    assert [name(s) for s in tl.visible()] == ["o0", "o1"]


def test_overshadowed_through_a_chain_of_minor_versions() -> None:
    """Druid's testOvershadowedByReferenceChain."""
    tl = Timeline()
    for s in [root(p) for p in range(3)] + [root(p, iv=NEXT_DAY) for p in range(2)]:
        tl.add(s)
    for s in [over(0, 0, 3, 1, 2), over(1, 0, 3, 1, 2), over(2, 0, 3, 2, 2), over(3, 0, 3, 2, 2)]:
        tl.add(s)
    got = sorted((s.interval.start, name(s)) for s in tl.overshadowed())
    assert got == [(0, "o0"), (0, "o1"), (0, "p0"), (0, "p1"), (0, "p2")]


def test_minor_then_major_version() -> None:
    """Druid's testOvershadowedByReferenceAndThenVersion."""
    tl = Timeline()
    day1 = [root(p) for p in range(3)] + [over(0, 0, 3, 1, 2), over(1, 0, 3, 1, 2)]
    for s in day1 + [root(p, iv=NEXT_DAY) for p in range(2)]:
        tl.add(s)
    for p in range(2):
        tl.add(root(p, version=2))
    assert sorted(map(name, tl.overshadowed())) == sorted(map(name, day1))
    assert [(e.version, [name(s) for s in e.segments]) for e in tl.lookup(DAY)] == [
        (2, ["p0", "p1"])
    ]


def test_major_then_minor_version() -> None:
    """Druid's testOvershadowedByVersionAndThenReference."""
    tl = Timeline()
    v1 = [root(p) for p in range(3)]
    v2 = [root(p, version=2) for p in range(2)]
    for s in v1 + [root(p, iv=NEXT_DAY) for p in range(2)] + v2:
        tl.add(s)
    for k in range(3):
        tl.add(over(k, 0, 2, 1, 3, version=2))
    assert sorted((s.version, name(s)) for s in tl.overshadowed()) == [
        (1, "p0"),
        (1, "p1"),
        (1, "p2"),
        (2, "p0"),
        (2, "p1"),
    ]


def test_fallback_on_a_missing_overwrite_segment() -> None:
    """Druid's testFallbackOnMissingSegment."""
    tl = Timeline()
    for s in [root(p) for p in range(3)] + [root(p, version=2) for p in range(2)]:
        tl.add(s)
    outs = [over(k, 0, 2, 1, 3, version=2) for k in range(3)]
    for s in outs:
        tl.add(s)
    assert tl.remove(outs[2])
    (entry,) = tl.lookup(DAY)
    assert entry.version == 2 and [name(s) for s in entry.segments] == ["p0", "p1"]
    assert [tl.partition_state(s) for s in outs[:2]] == ["standby", "standby"]


def test_the_same_root_again_under_a_full_group() -> None:
    """Druid's testAddSameChunkToFullAtomicUpdateGroup."""
    tl = Timeline()
    tl.add(root(0))
    tl.add(over(0, 0, 1, 1, 1))
    assert not tl.add(root(0))
    assert [name(s) for s in tl.overshadowed()] == ["p0"]


def test_several_partial_groups_below_a_full_one() -> None:
    """Druid's testOvershadowMultipleStandbyAtomicUpdateGroup."""
    tl = Timeline()
    for s in [over(0, 0, 1, 1, 2), over(1, 0, 1, 2, 2), over(2, 0, 1, 3, 2), over(3, 0, 1, 3, 2)]:
        tl.add(s)
    assert sorted(map(name, tl.overshadowed())) == ["o0", "o1"]


def test_is_overshadowed_for_segments_not_in_the_timeline() -> None:
    """Druid's testIsOvershadowedForOverwritingSegments."""
    tl = Timeline()
    tl.add(over(0, 5, 10, 10, 1))
    assert all(tl.is_overshadowed(root(p)) for p in range(5, 10))
    assert not tl.is_overshadowed(root(4)) and not tl.is_overshadowed(root(10))
    for rs, re in [(5, 6), (7, 8), (8, 10)]:
        assert tl.is_overshadowed(over(1, rs, re, 5, 2))
    assert not tl.is_overshadowed(over(1, 5, 10, 12, 2))
    assert not tl.is_overshadowed(over(1, 4, 15, 12, 2))
    # another interval or version is not this chunk's business
    assert not tl.is_overshadowed(root(5, iv=NEXT_DAY))
    assert not tl.is_overshadowed(root(5, version=2))


# ---------------------------------------------------------------------------------------
# the proposal's examples


def seed_history() -> list[Segment]:
    """Druid's proposal, "Timeline management": a batch writes 1, 2, 3 (p0..p2); a
    compaction merges 2 and 3 into 4 ([1, 3) minor 1) while a stream writes 5 (p3); a
    compaction mixes 4 and 5 into 6 and 7 ([1, 4) minor 2) while a stream writes 8."""
    return [
        root(0),
        root(1),
        root(2),
        over(0, 1, 3, 1, 1),  # 4
        root(3),  # 5
        over(1, 1, 4, 2, 2),  # 6
        over(2, 1, 4, 2, 2),  # 7
        root(4),  # 8
    ]


def generations() -> list[Segment]:
    """The proposal's P0..P8: P6 and P7 replace P0..P2, P8 replaces P4 and P5."""
    return [root(p) for p in range(6)] + [
        over(6, 0, 3, 1, 2),  # P6
        over(7, 0, 3, 1, 2),  # P7
        over(8, 4, 6, 1, 1),  # P8
    ]


@pytest.mark.parametrize("seed", range(40))
def test_proposal_history_in_any_order(seed: int) -> None:
    segs = seed_history()
    random.Random(seed).shuffle(segs)
    tl = Timeline()
    for s in segs:
        tl.add(s)
    assert [name(s) for s in tl.visible()] == ["p0", "p4", "o1", "o2"]  # 1, 8, 6, 7
    assert sorted(map(name, tl.overshadowed())) == ["o0", "p1", "p2", "p3"]
    assert [name(s) for s in Timeline.build(segs).visible()] == ["p0", "p4", "o1", "o2"]


@pytest.mark.parametrize("seed", range(40))
def test_generations_in_any_order_then_torn_down(seed: int) -> None:
    rng = random.Random(seed)
    segs = generations()
    rng.shuffle(segs)
    tl = Timeline()
    for s in segs:
        tl.add(s)
    assert [name(s) for s in tl.visible()] == ["p3", "o6", "o7", "o8"]
    assert sorted(map(name, tl.overshadowed())) == ["p0", "p1", "p2", "p4", "p5"]
    rng.shuffle(segs)
    present = list(segs)
    for s in segs:
        tl.remove(s)
        present.remove(s)
        view = chunk_view(present)
        assert list(tl.visible()) == (view.visible if view.complete else [])
        assert {p.partition_id: tl.partition_state(p) for p in present} == view.states


def test_generations_compacted_again() -> None:
    """P3 and P8 (roots 3..5, adjacent) compact into P9; then everything into P10."""
    tl = Timeline.build(generations())
    tl.add(over(9, 3, 6, 2, 1))
    assert [name(s) for s in tl.visible()] == ["o6", "o7", "o9"]
    tl.add(over(10, 0, 6, 3, 1))
    assert [name(s) for s in tl.visible()] == ["o10"]
    assert len(tl.overshadowed()) == 10
    tl.remove(over(10, 0, 6, 3, 1))  # falls back over two groups of different ages
    assert [name(s) for s in tl.visible()] == ["o6", "o7", "o9"]


def test_fallback_skips_a_generation_when_the_middle_one_is_whole() -> None:
    """Roots p0..p3, [0, 2) minor 1, [0, 4) minor 2 (two segments). Losing one segment
    of the newest group falls back to [0, 2) + p2 + p3 — not to the roots under
    [0, 2). (Druid's incremental code finds no fallback here — its search for a
    covering set trips over the roots still there under [0, 2) — and keeps the
    partial group visible, leaving the chunk incomplete; lamina's rules decide from
    the segments present, whatever the order.)"""
    segs = [root(p, core=4) for p in range(4)] + [
        over(0, 0, 2, 1, 1),
        over(1, 0, 4, 2, 2),
        over(2, 0, 4, 2, 2),
    ]
    tl = Timeline.build(segs)
    assert [name(s) for s in tl.visible()] == ["o1", "o2"]
    tl.remove(segs[-1])
    assert [name(s) for s in tl.visible()] == ["p2", "p3", "o0"]
    assert [tl.partition_state(s) for s in segs[:-1]] == [
        "overshadowed",
        "overshadowed",
        "visible",
        "visible",
        "visible",
        "standby",
    ]


# ---------------------------------------------------------------------------------------
# completeness, versions, tombstones


def test_completeness_counts_root_partitions_covered() -> None:
    """An overwrite segment carries its chunk's num_core_partitions, so the chunk keeps
    knowing which roots it needs once the replaced ones are removed."""
    tl = Timeline()
    tl.add(root(0, version=1, core=1))  # an older, complete version
    sc = [root(p, version=2, core=3) for p in range(3)]
    for s in sc[:2]:
        tl.add(s)
    assert [e.version for e in tl.lookup(DAY)] == [1]  # v2 lacks p2
    tl.add(over(0, 0, 2, 1, 1, version=2, core=3))
    assert [e.version for e in tl.lookup(DAY)] == [1]  # still lacks root 2
    tl.add(sc[2])
    assert [name(s) for e in tl.lookup(DAY) for s in e.segments] == ["p2", "o0"]
    for s in sc[:2]:  # the replaced roots may go: [0, 2) stands in for them
        tl.remove(s)
    assert [(e.version, [name(s) for s in e.segments]) for e in tl.lookup(DAY)] == [
        (2, ["p2", "o0"])
    ]
    tl.remove(sc[2])
    assert [e.version for e in tl.lookup(DAY)] == [1]


def test_without_a_core_count_any_full_visible_set_is_complete() -> None:
    """Core 0 (appends, or overwrite segments that did not carry the count): like
    Druid, whatever full groups show make the chunk complete."""
    tl = Timeline()
    tl.add(root(0, version=1))
    tl.add(root(2, version=2))
    tl.add(over(0, 0, 2, 1, 1, version=2))
    assert [name(s) for e in tl.lookup(DAY) for s in e.segments] == ["p2", "o0"]


def test_a_partial_visible_group_hides_nothing_of_older_versions() -> None:
    tl = Timeline()
    tl.add(root(0, version=1))
    for p in range(2):
        tl.add(root(p, version=2, core=2))
    tl.add(over(0, 0, 2, 1, 2, version=2))
    assert [(e.version, [name(s) for s in e.segments]) for e in tl.lookup(DAY)] == [
        (2, ["p0", "p1"])
    ]
    tl.remove(root(0, version=2, core=2))  # the partial group shows: v2 incomplete
    assert [e.version for e in tl.lookup(DAY)] == [1]
    assert not tl.is_overshadowed(root(0, version=1))
    # v2's p1 is replaced by the partial group (Druid's findFullyOvershadowed reads the
    # overshadowed groups of incomplete chunks too): reported, though v1 is served
    assert [(s.version, name(s)) for s in tl.overshadowed()] == [(2, "p1")]
    tl.add(over(1, 0, 2, 1, 2, version=2))
    assert [(e.version, [name(s) for s in e.segments]) for e in tl.lookup(DAY)] == [
        (2, ["o0", "o1"])
    ]
    assert tl.is_overshadowed(root(0, version=1))


def test_only_overwrite_segments_with_core_zero_are_complete() -> None:
    tl = Timeline()
    tl.add(over(0, 5, 10, 10, 1))
    assert [name(s) for e in tl.lookup(DAY) for s in e.segments] == ["o0"]


def test_a_tombstone_compaction_output_hides_its_roots() -> None:
    """A compaction that finds no rows left publishes a tombstone for the range."""
    tl = Timeline()
    for p in range(3):
        tl.add(root(p))
    tomb = Segment(
        "t",
        DAY,
        1,
        OVERWRITE_PARTITION_START,
        minor_version=1,
        root_partition_range=(0, 2),
    )
    tl.add(tomb)
    assert [name(s) for s in tl.visible()] == ["p2", "o0"]
    assert sorted(map(name, tl.overshadowed())) == ["p0", "p1"]
    table = TableRecord(1, "t", pa.schema([("v", pa.int64())]), None, Granularity.ALL, {})
    plan = plan_scan(Snapshot(table, 1, 1, [root(p) for p in range(3)] + [tomb]))
    assert [t.segment.location for t in plan.tasks] == ["r2"]


def test_a_root_tombstone_is_compacted_like_any_root() -> None:
    tl = Timeline()
    tl.add(Segment("t", DAY, 1, 0))  # a first-generation tombstone
    tl.add(root(1))
    tl.add(over(0, 0, 2, 1, 1))
    assert [name(s) for s in tl.visible()] == ["o0"]


def test_dropping_the_last_overwrite_segment_returns_to_plain_partitions() -> None:
    tl = Timeline()
    for p in range(2):
        tl.add(root(p, core=2))
    o = over(0, 0, 2, 1, 1)
    tl.add(o)
    tl.remove(o)
    key = (DAY.start, DAY.end, 1)
    assert tl._chunks[key].ow is None
    assert [name(s) for s in tl.visible()] == ["p0", "p1"]


# ---------------------------------------------------------------------------------------
# the dominance sweep used on big spans, against pairwise checks


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(0, 5)), max_size=60),
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(0, 5)), max_size=60),
)
def test_dominance_sweep_equals_pairwise(qs: list[tuple], ds: list[tuple]) -> None:
    queries = [_Group(s, s + w, m, 1) for s, w, m in qs]
    doms = [_Group(s, s + w, m, 1) for s, w, m in ds]
    want = [
        any(d.start <= q.start and q.end <= d.end and d.minor > q.minor for d in doms)
        for q in queries
    ]
    assert _dominated(queries, doms) == want


# ---------------------------------------------------------------------------------------
# property: incremental timeline == brute-force oracle


@st.composite
def overwrite_segments(draw: st.DrawFn, roots: int = 6, minors: int = 4) -> list[Segment]:
    """Up to ``roots`` first-generation segments and later-generation ones over random
    root ranges and minor versions (ranges may nest, cross or repeat); a group's size
    is a function of its key, so groups are consistent, and at most full."""
    core = draw(st.integers(0, roots))
    out = [root(p, core=core) for p in sorted(draw(st.sets(st.integers(0, roots - 1))))]
    count: dict[tuple[int, int, int], int] = {}
    for k in range(draw(st.integers(0, 14))):
        start = draw(st.integers(0, roots - 1))
        end = draw(st.integers(start + 1, roots))
        minor = draw(st.integers(1, minors))
        size = 1 + (start * 7 + end * 3 + minor) % 3
        if count.get((start, end, minor), 0) < size:
            count[(start, end, minor)] = count.get((start, end, minor), 0) + 1
            out.append(over(k, start, end, minor, size))
    return out


@st.composite
def laminar_segments(draw: st.DrawFn) -> list[Segment]:
    """A history obeying the proposal's restrictions: rounds of compaction over
    adjacent visible groups (whole groups only), each output one group of a higher
    minor version covering the union of its inputs' root ranges; some output segments
    missing (unfinished publishes)."""
    n = draw(st.integers(1, 7))
    segs = [root(p) for p in range(n)]
    tops: list[tuple[int, int, int]] = [(p, p + 1, 0) for p in range(n)]
    k = 0
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(tops) - 1))
        j = draw(st.integers(i, len(tops) - 1))
        picked = tops[i : j + 1]
        start, end = picked[0][0], picked[-1][1]
        minor = max(m for _, _, m in picked) + 1
        size = draw(st.integers(1, 3))
        for _ in range(size):
            segs.append(over(k, start, end, minor, size))
            k += 1
        tops[i : j + 1] = [(start, end, minor)]
    drop = draw(st.sets(st.integers(0, len(segs) - 1), max_size=3))
    return [s for i, s in enumerate(segs) if i not in drop]


def check_chunk(tl: Timeline, present: list[Segment]) -> None:
    view = chunk_view(present)
    assert {s.partition_id: tl.partition_state(s) for s in present} == view.states
    entries = tl.lookup(DAY)
    if view.complete:
        assert [e.segments for e in entries] == [tuple(view.visible)]
    else:
        assert entries == []
    assert tl.visible() == (view.visible if view.complete else [])
    # what a visible group hides is reported overshadowed, complete chunk or not
    over_ids = sorted(s.partition_id for s in tl.overshadowed())
    want = [p for p, state in view.states.items() if state == "overshadowed"]
    assert over_ids == sorted(want)
    if present:  # what inspect reports a chunk lacks
        groups = AtomicGroups(present)
        core = max(s.num_core_partitions for s in present)
        shown = [s.root_range for s in view.visible]
        assert groups.uncovered(core) == [
            r for r in range(core) if not any(a <= r < b for a, b in shown)
        ]
        assert bool(groups.partial_visible()) == any(
            sum(1 for v in view.visible if v.root_range == s.root_range)
            < s.atomic_update_group_size
            for s in view.visible
        )
    for s in present:
        assert tl.is_overshadowed(s) == (view.states[s.partition_id] == "overshadowed")


def run_ops(segs: list[Segment], rng: random.Random) -> None:
    """Add everything in a random order with random removals and re-adds, checking the
    oracle after each step; then tear down in a random order."""
    tl = Timeline()
    present: list[Segment] = []
    pending = list(segs)
    rng.shuffle(pending)
    while pending:
        if present and rng.random() < 0.3:
            s = present.pop(rng.randrange(len(present)))
            assert tl.remove(s)
            pending.append(s)
        else:
            s = pending.pop()
            assert tl.add(s)
            present.append(s)
        check_chunk(tl, present)
    built = Timeline.build(present)
    assert [e.segments for e in built.entries()] == [e.segments for e in tl.entries()]
    assert sorted(map(name, built.overshadowed())) == sorted(map(name, tl.overshadowed()))
    rng.shuffle(present)
    while present:
        assert built.remove(present.pop())
        check_chunk(built, present)


PROPS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPS
@given(segs=overwrite_segments(), seed=st.integers(0, 2**16))
def test_random_groups_match_the_oracle(segs: list[Segment], seed: int) -> None:
    run_ops(segs, random.Random(seed))


@PROPS
@given(segs=laminar_segments(), seed=st.integers(0, 2**16))
def test_compaction_histories_match_the_oracle(segs: list[Segment], seed: int) -> None:
    run_ops(segs, random.Random(seed))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_a_big_chunk_matches_the_oracle(seed: int) -> None:
    """Spans large enough for the sweep (not the pairwise path) in the timeline."""
    rng = random.Random(seed)
    segs = [root(p) for p in range(40)]
    k = 0
    for _ in range(25):
        start = rng.randrange(40)
        end = min(40, start + rng.randint(1, 20))
        minor = rng.randint(1, 6)
        size = 1 + (start + end + minor) % 2
        for _ in range(rng.randint(1, size)):
            segs.append(over(k, start, end, minor, size))
            k += 1
    # consistent groups only
    seen: dict[tuple, int] = {}
    ok = []
    for s in segs:
        key = (*s.root_range, s.minor_version)
        if seen.get(key, 0) < s.atomic_update_group_size:
            seen[key] = seen.get(key, 0) + 1
            ok.append(s)
    rng.shuffle(ok)
    tl = Timeline()
    present = []
    for s in ok:
        tl.add(s)
        present.append(s)
    check_chunk(tl, present)
    for s in ok[: len(ok) // 2]:
        tl.remove(s)
        present.remove(s)
    check_chunk(tl, present)


# ---------------------------------------------------------------------------------------
# inspect: what a chunk lacks


def test_inspect_counts_replaced_roots_as_present() -> None:
    from lamina.core.inspect import chunk_status, chunks

    segs = [root(2, core=3), over(0, 0, 2, 1, 1, core=3)]
    tl = Timeline.build(segs)
    (chunk,) = chunks(tl)[DAY]
    assert chunk.missing == [] and chunk.partial_groups == []
    assert chunk_status(tl, chunk).kind == "visible"
    tl.remove(segs[0])
    (chunk,) = chunks(tl)[DAY]
    assert chunk.missing == [2]
    assert chunk_status(tl, chunk).detail == "incomplete: missing p2"


def test_inspect_names_a_partial_visible_group() -> None:
    from lamina.core.inspect import chunk_status, chunks

    tl = Timeline.build([root(1, core=2), over(0, 0, 2, 1, 3, core=2)])
    (chunk,) = chunks(tl)[DAY]
    assert chunk.missing == []
    assert chunk_status(tl, chunk).detail == (
        "incomplete: roots p0..p1 minor 1 has 1 of 3 segments"
    )
