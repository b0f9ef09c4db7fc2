"""More of Druid's auto-compaction candidate selection, re-told for lamina.

Scenarios of Apache Druid's ``NewestSegmentFirstPolicyTest`` and ``CompactionStatusTest``
(server/.../server/compaction/) that tests/test_autocompaction_druid.py does not cover
yet, in the same terms: Druid's intervals are lamina's chunks, a segment's
``lastCompactionState`` / indexing-state fingerprint is the state or fingerprint its
compaction commit recorded, ``skipOffsetFromLatest`` is
``compaction.skip_offset_from_latest`` and ``granularitySpec.segmentGranularity`` is
``compaction.segment_granularity``.

Where lamina deliberately differs (one segment never compacted is not picked, nor a
chunk without small segments unless ``max_segments_per_chunk`` says so) the tests pin
lamina's rule and name the knob. Three scenarios found lamina off Druid's rules, since
fixed: the skip offset under a coarser policy granularity, a chunk a newer version
hides in part, and small segments a minor compaction cannot merge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.core.autocompact import ChunkStatus, Policy, statuses
from lamina.core.interval import Granularity, Interval, to_us
from lamina.core.segment import Segment
from tests.test_autocompaction_druid import (
    COLS,
    DAY,
    HOUR,
    SCHEMA,
    dry,
    hourly,
    label,
    pending,
    policy,
    widths,
)

MONTH = Granularity.MONTH


# -- builders (pure) ----------------------------------------------------------------------


def seg(start: str, width: int, pid: int, rows: int, commit: int | None = None) -> Segment:
    """Partition ``pid`` of the chunk [start, start + width) with ``rows`` rows, written
    by commit ``commit`` (default: a commit of its own, so never compacted)."""
    iv = Interval.of(to_us(start), to_us(start) + width)
    return Segment("t", iv, 1, pid, location="x", row_count=rows, commit_id=commit or 1000 + pid)


def chunks_of(
    start: str, n: int, width: int | Granularity, parts: int = 4, rows: int = 5
) -> list[Segment]:
    """``n`` consecutive chunks of ``width`` (µs, or a granularity's chunks) from
    ``start``, ``parts`` segments of ``rows`` rows each, never compacted."""
    out = []
    lo = to_us(start)
    for i in range(n):
        hi = width.next_start(lo) if isinstance(width, Granularity) else lo + width
        iv = Interval.of(lo, hi)
        lo = hi
        out += [
            Segment("t", iv, 1, p, location="x", row_count=rows, commit_id=10_000 + i * parts + p)
            for p in range(parts)
        ]
    return out


def by_label(found: list[ChunkStatus]) -> dict[str, str]:
    """Chunk start label -> status."""
    return {label(st.chunk.start): st.status for st in found}


def one(
    segs: list[Segment], compacted: Mapping[int, Mapping[str, Any]], pol: Policy
) -> ChunkStatus:
    (st,) = statuses(segs, compacted, pol)
    return st


# -- the compaction state a commit recorded -----------------------------------------------

POL = Policy(target_rows=100)


@pytest.mark.parametrize("recorded", [{}, {"fingerprint": None}, {"sort_by": ["k"]}])
def test_an_empty_compaction_state_is_pending(recorded: dict[str, Any]) -> None:
    """CompactionStatusTest.testStatusWhenLastCompactionStateIsEmpty: a segment whose
    compaction recorded an empty state (no partitioning in it: here no target size, as
    a compaction commit without a state reads) is pending, not complete."""
    st = one([seg("2013-01-01", HOUR, 32768, 100, commit=1)], {1: recorded}, POL)
    assert (st.status, st.action) == ("PENDING", "major")
    assert st.reason.startswith("compacted under another policy")


@pytest.mark.parametrize(
    ("fingerprints", "want"),
    [
        ((POL.fingerprint, POL.fingerprint), "COMPLETE"),  # ...AllSegmentsHaveExpected...
        (("wrong", "wrong"), "PENDING"),  # ...AllSegmentsHaveUnexpected...
        ((POL.fingerprint, "wrong"), "PENDING"),  # ...SomeSegmentsHaveUnexpected...
        ((Policy(50).fingerprint,), "PENDING"),  # another policy's fingerprint
    ],
)
def test_segments_known_only_by_their_fingerprint(fingerprints: tuple[str, ...], want: str) -> None:
    """CompactionStatusTest.test_evaluate_noCompactionWhenAllSegmentsHaveExpected
    IndexingStateFingerprint, ...needsCompactionWhenAllSegmentsHaveUnexpected...,
    ...needsCompactionWhenSomeSegmentsHaveUnexpected... and ...WhenUnexpected
    FingerprintAndNoFingerprintInMetadataStore: segments whose compaction recorded only
    a fingerprint (lamina's older commits) are complete exactly when every fingerprint
    is the policy's; an unknown one makes the chunk pending."""
    segs = [seg("2013-01-01", HOUR, 32768 + i, 100, commit=i + 1) for i in range(len(fingerprints))]
    compacted = {i + 1: {"fingerprint": fp} for i, fp in enumerate(fingerprints)}
    st = one(segs, compacted, POL)
    assert st.status == want, st
    if want == "PENDING":
        assert st.action == "major" and "another policy" in st.reason


@pytest.mark.parametrize(
    ("full_state", "want"),
    [
        (Policy(100, sort_by=("k",)).state, "COMPLETE"),  # ...PassChecksOnLastCompactionState
        (Policy(50).state, "PENDING"),  # ...FailChecksOnLastCompactionState
    ],
)
def test_fingerprinted_and_fully_recorded_segments_in_one_chunk(
    full_state: dict[str, Any], want: str
) -> None:
    """CompactionStatusTest.test_evaluate_noCompactionWhenNonFingerprintedSegmentsPass
    ChecksOnLastCompactionState and ...needsCompactionWhenNonFingerprintedSegmentsFail
    ChecksOnLastCompactionState: one segment carries the policy's fingerprint only, the
    other a full state; the chunk is complete when that state passes the policy's
    checks (a sort order the policy does not name counts for nothing) and pending when
    it fails them (another target size)."""
    segs = [seg("2013-01-01", HOUR, 32768, 100, commit=1), seg("2013-01-01", HOUR, 32769, 100, 2)]
    st = one(segs, {1: {"fingerprint": POL.fingerprint}, 2: full_state}, POL)
    assert st.status == want, st


# -- a chunk without small segments --------------------------------------------------------


def test_full_size_never_compacted_partitions_need_max_segments_per_chunk() -> None:
    """testIteratorReturnsSegmentsInConfiguredSegmentGranularity (newest form): three
    MONTH chunks of four full-size partitions each, never compacted, and a MONTH policy:
    Druid returns every month ("not compacted yet"), December first. lamina merges only
    small segments by design, so these chunks are complete ("no small segments to
    merge") — until ``max_segments_per_chunk`` asks for fewer segments: then each month
    is pending for a rewrite, newest first, as in Druid."""
    segs = chunks_of("2017-10-01", 3, MONTH, rows=100)
    pol = Policy(100, chunk_granularity=MONTH)
    found = statuses(segs, {}, pol)
    assert {(st.status, st.reason) for st in found} == {("COMPLETE", "no small segments to merge")}
    found = statuses(segs, {}, Policy(100, chunk_granularity=MONTH, max_segments=1))
    assert [label(st.chunk.start)[:7] for st in found if st.status == "PENDING"] == [
        "2017-12",
        "2017-11",
        "2017-10",
    ]
    assert {st.action for st in found} == {"major"}


# -- skip offset with a coarser policy granularity -------------------------------------------


def test_skip_offset_with_a_month_policy_leaves_the_newest_month() -> None:
    """testIfSegmentsSkipOffsetWithConfiguredSegmentGranularityLarger (newest form):
    data from 2017-11-30T23:00 to 2017-12-02T00:00 and on 2017-10-14 (here HOUR chunks),
    a MONTH policy and one day of offset: the skipped window starts at the beginning of
    December, so every December hour waits; the last hour of November (wholly inside
    November, unlike Druid's 5-hour segment across the month boundary) and October are
    picked, newest first."""
    segs = chunks_of("2017-11-30T23:00", 25, HOUR) + chunks_of("2017-10-14T04:00", 20, HOUR)
    pol = Policy(100, skip_offset_us=DAY, segment_granularity=MONTH, chunk_granularity=MONTH)
    found = statuses(segs, {}, pol)
    got = by_label(found)
    assert {s for lab, s in got.items() if lab.startswith("2017-12")} == {"SKIPPED"}
    picked = [label(st.chunk.start) for st in found if st.status == "PENDING"]
    assert picked[0] == "2017-11-30T23" and len(picked) == 1 + 20
    assert all(lab.startswith("2017-10-14") for lab in picked[1:])
    assert {st.action for st in found if st.status == "PENDING"} == {"major"}


def test_skip_offset_counts_from_the_end_of_the_newest_policy_bucket() -> None:
    """testIfSegmentsSkipOffsetWithConfiguredSegmentGranularityLarger, with the newest
    month just begun (DataSourceCompactibleSegmentIterator.computeLatestSkipInterval is
    given the end of the last bucket of the timeline re-bucketed by the policy's
    granularity): HOUR chunks from 2017-11-29T00:00 to 2017-12-01T01:00, a MONTH policy,
    one day of offset. Druid skips from 2017-12-01: only the December hour waits, and
    November is compacted."""
    segs = chunks_of("2017-11-29T00:00", 49, HOUR)
    pol = Policy(100, skip_offset_us=DAY, segment_granularity=MONTH, chunk_granularity=MONTH)
    got = by_label(statuses(segs, {}, pol))
    assert got.pop("2017-12-01T00") == "SKIPPED"
    assert set(got.values()) == {"PENDING"}


# -- segments of two versions in one bucket (real tables) ----------------------------------


def _mixed_versions(cat: lamina.Catalog) -> lamina.Table:
    """An HOUR table whose 2017-10-01 was compacted into one DAY segment (Druid's v1
    DAY segment) and whose 01:00 hour was then overwritten (the v2 HOUR segment that
    hides part of it)."""
    t = cat.create_table("wiki", SCHEMA, time_column="ts", segment_granularity="HOUR")
    for i in range(2):
        t.append(hourly("2017-10-01T00:00", 24, seed=i))
    t.compact(mode="major", segment_granularity="DAY")
    t.overwrite(
        hourly("2017-10-01T01:00", 1, seed=9), interval=("2017-10-01T01:00", "2017-10-01T02:00")
    )
    assert sorted(widths(t)) == [HOUR, DAY]
    return t


def _rows(t: lamina.Table) -> pa.Table:
    return t.to_arrow().sort_by(COLS)


def test_segments_of_two_versions_under_a_coarser_policy(local_cat: lamina.Catalog) -> None:
    """testIteratorReturnsAllMixedVersionSegmentsInConfiguredSegmentGranularity: a DAY
    segment partly hidden by a newer HOUR segment, and a MONTH policy: Druid makes one
    candidate of all visible segments of the day; lamina compacts the month in one
    commit, keeping exactly the visible rows."""
    t = _mixed_versions(local_cat)
    before = _rows(t)
    policy(t, segment_granularity="MONTH")
    done = local_cat.compact_auto(["wiki"])
    assert len({r.commit.id for r in done if r.commit is not None}) == 1
    assert [str(s.interval) for s in t.segments()] == ["2017-10-01T00:00:00Z/2017-11-01T00:00:00Z"]
    assert _rows(t).equals(before)
    assert pending(dry(local_cat, "wiki")) == []


def test_segments_of_two_versions_under_a_finer_policy(local_cat: lamina.Catalog) -> None:
    """testIteratorReturnsSegmentsSmallerSegmentGranularityCoveringMultipleSegments
    InTimeline: the same day (a DAY segment partly hidden by an HOUR one) and a policy
    asking for HOUR segments: Druid returns every segment of the day as one candidate
    and rewrites it into hours."""
    t = _mixed_versions(local_cat)
    before = _rows(t)
    policy(t, segment_granularity="HOUR")
    found = dry(local_cat, "wiki")
    assert any(
        r.status.status == "PENDING" and r.status.chunk.end - r.status.chunk.start == DAY
        for r in found
    ), [r.status for r in found]
    local_cat.compact_auto(["wiki"])
    assert widths(t) == {HOUR}
    assert _rows(t).equals(before)


# -- a chunk minor compaction cannot finish ------------------------------------------------


def test_a_chunk_that_minor_compaction_cannot_merge_is_not_repicked_forever(
    local_cat: lamina.Catalog,
) -> None:
    """CompactionStatusTest.testStatusWhenLastCompactionStateIsNull with Druid #8481
    (intervals re-picked forever), which lamina's docs cite: a day of five appends of
    10, 10, 60, 10 and 10 rows under a 100-row target. The first run merges the two
    pairs of small ones around the big one; the day must then either be compacted to
    completion or stop being pending, not be re-picked with nothing done."""
    t = local_cat.create_table("wiki", SCHEMA, time_column="ts", segment_granularity="DAY")
    policy(t, target_rows_per_segment="100")
    for i, per_hour in enumerate([5, 5, 30, 5, 5]):
        t.append(hourly("2017-10-01T00:00", 2, per_hour=per_hour, seed=i))
    before = _rows(t)
    for _ in range(3):
        local_cat.compact_auto(["wiki"])
    (st,) = [r.status for r in dry(local_cat, "wiki")]
    assert st.status == "COMPLETE", st
    assert _rows(t).equals(before)


def test_a_locked_interval_is_skipped_and_the_others_compacted(cat: lamina.Catalog) -> None:
    """CompactSegmentsTest's locked intervals: the coordinator skips the intervals
    tasks of equal or higher priority lock and compacts the rest, without waiting (a
    hunt found one lock stalling every chunk for writer_wait_s)."""
    import time

    t = cat.create_table("wiki", SCHEMA, time_column="ts", segment_granularity="DAY")
    for i in range(3):
        t.append(hourly("2017-10-01T00:00", 48, per_hour=1, seed=i))
    tx = t.transaction(lock="EXCLUSIVE", interval="2017-10-02/2017-10-03", priority=50)
    with tx:
        tx.append(hourly("2017-10-02T05:00", 1, per_hour=1, seed=9))  # holds the lock
        found = {str(r.status.chunk)[:10]: r.status for r in dry(cat, "wiki")}
        assert found["2017-10-02"].status == "SKIPPED"
        assert "priority 50" in found["2017-10-02"].reason
        assert found["2017-10-01"].status == "PENDING"
        began = time.monotonic()
        done = {str(r.status.chunk)[:10]: r for r in cat.compact_auto(["wiki"])}
        assert time.monotonic() - began < 5  # no wait for the lock
        assert done["2017-10-01"].commit is not None
        assert done["2017-10-02"].commit is None and done["2017-10-02"].error is None
        assert len([s for s in t.segments() if str(s.interval)[:10] == "2017-10-02"]) == 3
    cat.compact_auto(["wiki"])  # the lock ended: its day is compacted now
    assert len([s for s in t.segments() if str(s.interval)[:10] == "2017-10-02"]) == 1


@pytest.mark.parametrize("major", [False, True])
def test_a_streaming_append_lock_does_not_stall_compaction_of_its_chunk(
    cat: lamina.Catalog, major: bool
) -> None:
    """Druid's concurrent locks: an APPEND lock coexists with a minor compaction's
    SEGMENT locks and with a major one's REPLACE lock around it, so a long-running
    appender (priority 75) does not keep its day uncompacted (#6136); what it appends
    meanwhile is kept."""
    t = cat.create_table("wiki", SCHEMA, time_column="ts", segment_granularity="DAY")
    for i in range(3):
        t.append(hourly("2017-10-01T00:00", 48, per_hour=1, seed=i))
    if major:
        policy(t, segment_granularity="MONTH")
    day2 = "2017-10-02/2017-10-03"
    with t.transaction(lock="APPEND", interval=day2, priority=75, wait_s=0) as tx:
        tx.append(hourly("2017-10-02T05:00", 1, per_hour=1, seed=9))
        assert {r.status.status for r in dry(cat, "wiki")} == {"PENDING"}
        done = cat.compact_auto(["wiki"])
        assert done and all(r.commit is not None for r in done), done
    assert t.count() == 3 * 48 + 1
    if major:
        assert {str(s.interval)[:10] for s in t.segments()} == {"2017-10-01"}  # the month
        assert t.to_arrow(interval=day2).num_rows == 3 * 24 + 1
    else:
        assert len([s for s in t.segments() if str(s.interval)[:10] == "2017-10-02"]) == 2


def test_a_chunk_changed_during_a_run_does_not_void_the_others(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minor compactions of several chunks go in one commit; when an overwrite of one
    of them lands meanwhile, the others are compacted a commit each (Druid runs a task
    per interval), and only the changed one waits for the next run."""
    from lamina.operations import compaction

    t = cat.create_table("wiki", SCHEMA, time_column="ts", segment_granularity="DAY")
    for i in range(3):
        t.append(hourly("2017-10-01T00:00", 72, per_hour=1, seed=i))
    write_run, hot = compaction._write_run, hourly("2017-10-03T00:00", 2, per_hour=1, seed=7)

    def overwrite_first(*args: Any, **kwargs: Any) -> Any:
        if not t.history() or t.history()[0].action != "OVERWRITE":
            t.overwrite(hot, interval="2017-10-03/2017-10-04")  # the hot day, re-run
        return write_run(*args, **kwargs)

    monkeypatch.setattr(compaction, "_write_run", overwrite_first)
    done = {str(r.status.chunk)[:10]: r for r in cat.compact_auto(["wiki"])}
    assert done["2017-10-03"].commit is None and "Conflict" in (done["2017-10-03"].error or "")
    assert done["2017-10-01"].commit is not None and done["2017-10-02"].commit is not None
    per_day = {str(s.interval)[:10]: 0 for s in t.segments()}
    for s in t.segments():
        per_day[str(s.interval)[:10]] += 1
    assert per_day == {"2017-10-01": 1, "2017-10-02": 1, "2017-10-03": 1}
    assert t.count() == 2 * 3 * 24 + 2
