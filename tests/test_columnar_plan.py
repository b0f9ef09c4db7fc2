"""The columnar planner against the object planner: the same tasks, in the same order."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.core.columnar import SEGMENT_SCHEMA, plan_columns, segment_table
from lamina.core.interval import Granularity, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.scan import ScanTask, plan_scan, prune_plan
from lamina.core.segment import OVERWRITE_PARTITION_START, Segment
from lamina.errors import TimelineError

H = 3_600_000_000
ROOT = "/wh"


def record(timeless: bool = False) -> TableRecord:
    schema = pa.schema([("ts", pa.timestamp("us")), ("v", pa.int64())])
    return TableRecord(1, "t", schema, None if timeless else "ts", Granularity.HOUR, {})


# intervals of three lengths that can overlap one another: hours, 6-hour blocks, days
interval_st = st.one_of(
    st.integers(0, 47).map(lambda h: (h * H, (h + 1) * H)),
    st.integers(0, 7).map(lambda q: (6 * q * H, 6 * (q + 1) * H)),
    st.integers(0, 1).map(lambda d: (24 * d * H, 24 * (d + 1) * H)),
)
segment_st = st.tuples(
    interval_st,
    st.integers(1, 4),  # version
    st.integers(0, 3),  # partition
    st.integers(0, 3),  # num_core_partitions
    st.booleans(),  # tombstone
    st.one_of(st.none(), st.tuples(st.integers(0, H), st.integers(0, H))),  # min/max
)
# a later-generation segment: (k-th of its chunk, root start, root width, minor version)
overwrite_st = st.one_of(
    st.none(),
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 3), st.integers(1, 2)),
)


def build(raw: list[tuple], later: list | None = None) -> list[Segment]:
    """Unique identities; one version keeps one interval length (as publish ensures).
    ``later[i]``, when given and not None, makes segment i of a later generation (its
    group's size is a function of its root range and minor version)."""
    out, seen, length_of = [], set(), {}
    for i, ((s, e), ver, pid, core, tomb, mm) in enumerate(raw):
        extra = {}
        ow = later[i] if later is not None and i < len(later) else None
        if ow is not None:
            k, rs, width, minor = ow
            pid = OVERWRITE_PARTITION_START + k
            extra = {
                "minor_version": minor,
                "root_partition_range": (rs, rs + width),
                "atomic_update_group_size": 1 + (rs + width + minor) % 2,
            }
        if (s, e, ver, pid) in seen or length_of.setdefault(ver, e - s) != e - s:
            continue
        seen.add((s, e, ver, pid))
        mn = mx = None
        if mm is not None:
            mn, mx = s + min(mm), min(s + max(mm), e - 1)
        loc = None if tomb else f"{ROOT}/t/data/c{len(out)}.parquet"
        out.append(
            Segment(
                "t", Interval.of(s, e), ver, pid, core, loc, 10 + len(out), 100, mn, mx, 7, **extra
            )
        )
    return out


def columns(segs: list[Segment]) -> pa.Table:
    return segment_table(
        {
            "start_us": [s.interval.start for s in segs],
            "end_us": [s.interval.end for s in segs],
            "version": [s.version for s in segs],
            "partition_id": [s.partition_id for s in segs],
            "num_core_partitions": [s.num_core_partitions for s in segs],
            "location": [s.location[len(ROOT) + 1 :] if s.location else None for s in segs],
            "row_count": [s.row_count for s in segs],
            "size_bytes": [s.size_bytes for s in segs],
            "min_time": [s.min_time for s in segs],
            "max_time": [s.max_time for s in segs],
            "commit_id": [s.commit_id for s in segs],
            "suffix": [s.suffix for s in segs],
            "minor_version": [s.minor_version for s in segs],
            "root_start": [s.root_range[0] for s in segs],
            "root_end": [s.root_range[1] for s in segs],
            "aug_size": [s.atomic_update_group_size for s in segs],
        }
    )


def same_tasks(a: list[ScanTask], b: list[ScanTask]) -> None:
    def key(t: ScanTask) -> tuple:
        s = t.segment
        fields = (s.minor_version, s.root_range, s.atomic_update_group_size)
        return (s, s.location, fields, t.keep, t.span)

    assert [key(t) for t in a] == [key(t) for t in b]


lookup_st = st.one_of(
    st.none(),
    st.tuples(st.integers(0, 47), st.integers(1, 12)).map(
        lambda t: Interval.of(t[0] * H + H // 2, (t[0] + t[1]) * H)
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    raw=st.lists(segment_st, max_size=40),
    later=st.one_of(st.just([]), st.lists(overwrite_st, max_size=40)),
    interval=lookup_st,
    timeless=st.booleans(),
)
def test_columnar_plan_equals_the_object_plan(
    raw: list[tuple], later: list, interval: Interval | None, timeless: bool
) -> None:
    segs = build(raw, later)
    rec = record(timeless)
    try:
        want = plan_scan(Snapshot(rec, 3, 9, segs), interval)
    except TimelineError:
        with pytest.raises(TimelineError):
            plan_columns(rec, 3, 9, columns(segs), interval, ROOT)
        return
    got = plan_columns(rec, 3, 9, columns(segs), interval, ROOT)
    same_tasks(got.tasks, want.tasks)
    assert len(got) == len(want.tasks)
    assert got.row_count == want.row_count
    assert got.all_whole == all(t.keep is None for t in want.tasks)
    assert got.whole_files == want.whole_files
    assert got.partial_files == want.partial_files


@settings(max_examples=200, deadline=None)
@given(
    raw=st.lists(segment_st, max_size=30),
    later=st.lists(overwrite_st, max_size=30),
    first=st.integers(0, 47),
    hours=st.integers(1, 30),
    timeless=st.booleans(),
)
def test_pruning_a_columnar_plan_equals_pruning_the_object_plan(
    raw: list[tuple], later: list, first: int, hours: int, timeless: bool
) -> None:
    segs = build(raw, later)
    rec = record(timeless)
    try:
        want = plan_scan(Snapshot(rec, 3, 9, segs))
    except TimelineError:
        return
    bound = Interval.of(first * H + 17, (first + hours) * H)
    got = prune_plan(plan_columns(rec, 3, 9, columns(segs), None, ROOT), bound)
    same_tasks(got.tasks, prune_plan(want, bound).tasks)
    assert got.columns is not None


def test_an_empty_snapshot_plans_nothing() -> None:
    plan = plan_columns(record(), 1, None, columns([]), None, ROOT)
    assert len(plan) == 0 and plan.tasks == [] and plan.row_count == 0 and plan.all_whole


def test_a_columnar_plan_survives_a_parquet_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The manifest layout: what is written is what plans."""
    segs = build([((0, H), 1, p, 0, False, None) for p in range(3)])
    pq.write_table(columns(segs), tmp_path / "m.parquet")
    back = pq.read_table(tmp_path / "m.parquet")
    same_tasks(
        plan_columns(record(), 1, 2, back, None, ROOT).tasks,
        plan_scan(Snapshot(record(), 1, 2, segs)).tasks,
    )


@pytest.mark.parametrize("interval", [None, Interval.of(10 * H, 20 * H)])
def test_a_day_over_quarter_days_hides_them_all(interval: Interval | None) -> None:
    """A cluster is every interval reachable through overlaps, not only neighbours."""
    quarters = [((6 * q * H, 6 * (q + 1) * H), 1, 0, 0, False, None) for q in range(4)]
    day = [((0, 24 * H), 2, 0, 0, False, None)]
    segs = build(quarters + day)
    got = plan_columns(record(), 3, 9, columns(segs), interval, ROOT)
    same_tasks(got.tasks, plan_scan(Snapshot(record(), 3, 9, segs), interval).tasks)
    assert [t.segment.version for t in got.tasks] == [2]


@settings(max_examples=100, deadline=None)
@given(
    raw=st.lists(segment_st, max_size=30),
    later=st.lists(overwrite_st, max_size=30),
    interval=lookup_st,
)
def test_reads_list_every_task_in_order(
    raw: list[tuple], later: list, interval: Interval | None
) -> None:
    segs = build(raw, later)
    try:
        want = plan_scan(Snapshot(record(), 3, 9, segs), interval)
    except TimelineError:
        return
    got = plan_columns(record(), 3, 9, columns(segs), interval, ROOT)
    assert got.reads() == want.reads() == [(t.segment.location, t.keep) for t in want.tasks]


def compaction(chunk: tuple[int, int], minor: int = 1) -> list[Segment]:
    """Roots p0..p2 of a chunk and one full group of two replacing p0 and p1."""
    roots = [(chunk, 1, p, 3, False, None) for p in range(3)]
    return build(
        roots + [(chunk, 1, 0, 3, False, None)] * 2,
        [None] * 3 + [(0, 0, 2, minor), (1, 0, 2, minor)],
    )


def test_a_compacted_hour_among_plain_ones() -> None:
    """Plain hours stay on the vectorized path; the compacted one shows its group."""
    segs = build([((h * H, (h + 1) * H), 1, p, 2, False, None) for h in (0, 2) for p in range(2)])
    segs += compaction((H, 2 * H))
    got = plan_columns(record(), 3, 9, columns(segs), None, ROOT)
    want = plan_scan(Snapshot(record(), 3, 9, segs))
    same_tasks(got.tasks, want.tasks)
    shown = [(t.segment.interval.start // H, t.segment.partition_id) for t in got.tasks]
    o = OVERWRITE_PARTITION_START
    assert shown == [(0, 0), (0, 1), (1, 2), (1, o), (1, o + 1), (2, 0), (2, 1)]
    assert [t.segment.root_range for t in got.tasks if t.segment.interval.start == H] == [
        (2, 3),
        (0, 2),
        (0, 2),
    ]


def test_a_table_without_the_overwrite_columns_plans_as_first_generation() -> None:
    """An Arrow table written before the columns existed (an old manifest)."""
    segs = build([((0, H), 1, p, 0, False, None) for p in range(3)])
    old = columns(segs).drop_columns(["minor_version", "root_start", "root_end", "aug_size"])
    got = plan_columns(record(), 1, 2, old, None, ROOT)
    same_tasks(got.tasks, plan_scan(Snapshot(record(), 1, 2, segs)).tasks)


def test_a_first_generation_plan_keeps_no_overwrite_columns() -> None:
    """16 bytes a segment saved at a million segments; a compacted chunk keeps them."""
    segs = build([((0, H), 1, p, 0, False, None) for p in range(3)])
    got = plan_columns(record(), 1, 2, columns(segs), None, ROOT)
    assert got.columns is not None and "minor_version" not in got.columns.segs.column_names
    same_tasks(got.tasks, plan_scan(Snapshot(record(), 1, 2, segs)).tasks)
    mixed = segs + compaction((H, 2 * H))
    kept = plan_columns(record(), 3, 9, columns(mixed), None, ROOT)
    assert kept.columns is not None and "minor_version" in kept.columns.segs.column_names


def test_segment_table_fills_first_generation_values() -> None:
    t = segment_table(
        {"start_us": [0, 0], "end_us": [H, H], "version": [1, 1], "partition_id": [4, 7]}
    )
    assert t.schema == SEGMENT_SCHEMA
    assert t.select(["minor_version", "root_start", "root_end", "aug_size"]).to_pylist() == [
        {"minor_version": 0, "root_start": 4, "root_end": 5, "aug_size": 1},
        {"minor_version": 0, "root_start": 7, "root_end": 8, "aug_size": 1},
    ]
