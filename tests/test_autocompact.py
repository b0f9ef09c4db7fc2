"""Auto-compaction: statuses and reasons under a table's policy (pure), and runs on a
real catalog — never re-picking a compacted chunk, re-picking exactly the chunks a
policy change affects, late data, the skip offset, dry runs, bad policies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.core.autocompact import Policy, policy_of, statuses, to_purge
from lamina.core.interval import Granularity, Interval
from lamina.core.segment import Segment
from tests.helpers import SCHEMA, events

D = 86_400_000_000


def seg(
    day: int,
    pid: int,
    rows: int,
    commit: int,
    suffix: str = "",
    root: tuple[int, int] | None = None,
) -> Segment:
    iv = Interval.of(day * D, (day + 1) * D)
    return Segment(
        "t",
        iv,
        1,
        pid,
        location="x",
        row_count=rows,
        commit_id=commit,
        suffix=suffix,
        minor_version=0 if root is None else 1,
        root_partition_range=root,
    )


def test_statuses_and_reasons() -> None:
    pol = Policy(target_rows=100)
    segs = [seg(1, 0, 10, 1), seg(1, 1, 10, 2), seg(2, 0, 90, 3), seg(3, 0, 80, 9)]
    got = {st.chunk.start // D: st for st in statuses(segs, {9: pol.state}, pol)}
    assert [st.chunk.start // D for st in statuses(segs, {9: pol.state}, pol)] == [3, 2, 1]
    assert (got[1].status, got[1].action) == ("PENDING", "minor")
    assert "2 small segments" in got[1].reason
    assert (got[2].status, got[2].reason) == ("COMPLETE", "no small segments to merge")
    assert (got[3].status, got[3].reason) == ("COMPLETE", "compacted under this policy")


def test_late_data_and_policy_changes() -> None:
    pol = Policy(target_rows=100)
    fp = pol.state
    late = [seg(1, 32768, 40, 9, root=(0, 5)), seg(1, 5, 3, 10)]  # appended after roots 0-4
    (st,) = statuses(late, {9: fp}, pol)
    assert st.action == "minor" and "1 segment(s) written since its compaction" in st.reason
    # not adjacent (a big segment between): a minor compaction could never merge them
    apart = [
        seg(1, 32768, 20, 9, root=(0, 2)),
        seg(1, 2, 60, 10),
        seg(1, 32769, 20, 9, root=(3, 5)),
    ]
    (st,) = statuses(apart, {9: fp}, pol)
    assert (st.action, st.reason) == (
        "major",
        "1 segment(s) written since its compaction, 2 small, which no minor compaction "
        "merges: rewritten",
    )
    # adjacent but together over the target: rewriting leaves as many segments
    wide = Policy(target_rows=100, small_rows=60)
    over = [seg(1, 32768, 55, 9, root=(0, 2)), seg(1, 2, 55, 10)]
    (st,) = statuses(over, {9: wide.state}, wide)
    assert (st.status, st.reason) == (
        "COMPLETE",
        "2 small segments, which no compaction would reduce",
    )
    (st,) = statuses([apart[0], apart[2]], {9: fp}, pol)  # all compacted: as the policy asks
    assert st.status == "COMPLETE"
    sorted_pol = Policy(target_rows=100, sort_by=("v",))
    (st,) = statuses([seg(1, 32768, 40, 9)], {9: fp}, sorted_pol)
    assert st.action == "major" and "compacted under another policy" in st.reason
    (st,) = statuses([seg(1, 0, 40, 9)], {9: sorted_pol.state}, sorted_pol)
    assert st.status == "COMPLETE"
    carried = [seg(1, 0, 40, 9), seg(1, 1, 40, 9, suffix="c9")]  # rows appended meanwhile
    (st,) = statuses(carried, {9: sorted_pol.state}, sorted_pol)
    assert st.action == "major" and "written since its compaction" in st.reason


def test_superseded_records_make_a_chunk_pending_however_it_was_compacted() -> None:
    pol = Policy(target_rows=100)
    fp = pol.state
    segs = [seg(1, 32768, 90, 9), seg(2, 32768, 90, 9)]
    stale = to_purge(segs, {segs[0].id: 9, segs[1].id: 8}, 10)  # 10% and 8.9%
    assert stale == {segs[0].id}
    got = {st.chunk.start // D: st for st in statuses(segs, {9: fp}, pol, stale)}
    assert (got[1].status, got[1].action) == ("PENDING", "minor")
    assert "1 segment(s) with >= 10% of their records superseded" in got[1].reason
    assert got[2].status == "COMPLETE"
    assert to_purge(segs, {}, 10) == frozenset()


def test_skip_offset_counts_from_the_newest_segment() -> None:
    pol = Policy(target_rows=100, skip_offset_us=D)
    segs = [seg(d, p, 5, 1) for d in (1, 2, 3) for p in (0, 1)]
    got = {st.chunk.start // D: st.status for st in statuses(segs, {}, pol)}
    assert got == {3: "SKIPPED", 2: "PENDING", 1: "PENDING"}


def test_policy_properties() -> None:
    pol = policy_of(
        {
            "compaction.skip_offset_from_latest": "2d",
            "compaction.segment_granularity": "day",
            "compaction.sort_by": "k, v",
            "compaction.rollup": '{"dimensions": ["s"]}',
        },
        1000,
    )
    assert pol.skip_offset_us == 2 * D and pol.segment_granularity is Granularity.DAY
    assert pol.sort_by == ("k", "v") and pol.rollup == {"dimensions": ["s"]}
    assert pol.target_rows == 1000 and pol.small == 500 and pol.rewrites
    assert Policy(1000).fingerprint != Policy(999).fingerprint
    assert pol.nice == 19 and policy_of({"compaction.nice": "0"}, 1).nice == 0
    assert pol.max_superseded_pct == 10
    assert policy_of({"compaction.max_superseded_percent": "25"}, 1).max_superseded_pct == 25
    for bad in ("0", "101", "x"):
        with pytest.raises(lamina.PropertyError, match="max_superseded_percent"):
            policy_of({"compaction.max_superseded_percent": bad}, 1)
    # the CPU priority shapes no data: it is not part of the compaction state
    assert Policy(1000, nice=0).fingerprint == Policy(1000, nice=19).fingerprint


def small_days(t: lamina.Table, days: int, appends: int) -> None:
    for i in range(appends):
        t.append(events(days=days, per_day=4, seed=i))


def test_auto_compaction_never_repicks_and_repicks_what_a_policy_change_touches(
    cat: lamina.Catalog,
) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_days(t, 3, 5)
    n = t.count()
    first = cat.compact_auto()
    assert sorted(r.status.action for r in first) == ["minor"] * 3
    assert all(r.commit is not None and r.error is None for r in first)
    assert len(t.segments()) == 3 and t.count() == n
    again = cat.compact_auto()
    assert {r.status.status for r in again} == {"COMPLETE"}
    assert {r.status.reason for r in again} == {"compacted under this policy"}
    assert all(r.commit is None for r in again)
    history = len(t.history())
    t.set_properties(**{"compaction.sort_by": "v"})  # a policy change: every chunk
    dry = cat.compact_auto(dry_run=True)
    assert {(r.status.action, "another policy" in r.status.reason) for r in dry} == {
        ("major", True)
    }
    assert len(t.history()) == history  # a dry run changes nothing
    cat.compact_auto()
    assert {r.status.status for r in cat.compact_auto(dry_run=True)} == {"COMPLETE"}
    t.append(events(days=1, per_day=2, seed=99))  # late data into the first day
    late = [r.status for r in cat.compact_auto(dry_run=True) if r.status.status == "PENDING"]
    assert len(late) == 1 and "written since its compaction" in late[0].reason
    assert t.count() == n + 2


def test_auto_compaction_rewrites_to_the_policy_granularity(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts", segment_granularity="HOUR")
    t.append(events(days=2, per_day=48, seed=1))
    t.set_properties(**{"compaction.segment_granularity": "DAY"})
    rows = t.count()
    results = cat.compact_auto()
    assert {r.status.action for r in results} == {"major"}
    assert len({r.commit.id for r in results if r.commit}) == 2  # one per day
    assert {s.interval.end - s.interval.start for s in t.segments()} == {D}
    assert t.count() == rows
    assert {r.status.status for r in cat.compact_auto(dry_run=True)} == {"COMPLETE"}


def test_bad_policies_are_typed(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for key, value, match in [
        ("compaction.skip_offset_from_latest", "soon", "not a duration"),
        ("compaction.max_segments_per_chunk", "-1", ">= 0"),
        ("compaction.segment_granularity", "EON", "granularity"),
        ("compaction.rollup", "{nope", "not JSON"),
        ("compaction.fast", "yes", "unknown property"),
        ("compaction.nice", "20", "0 to 19"),
        ("compaction.nice", "-1", ">= 0"),
        ("compaction.nice", "low", ">= 0"),
    ]:
        with pytest.raises(lamina.LaminaError, match=match):
            t.set_properties(**{key: value})
    # checked against the table when set: nothing changes
    with pytest.raises(lamina.CompactionError, match="nope"):
        t.set_properties(**{"compaction.sort_by": "nope"})
    weekly = cat.create_table("weekly", schema=SCHEMA, time_column="ts", segment_granularity="WEEK")
    with pytest.raises(lamina.CompactionError, match="do not nest"):
        weekly.set_properties(**{"compaction.segment_granularity": "MONTH"})
    assert not any(k.startswith("compaction.") for k in weekly.properties)
    t.set_properties(**{"compaction.segment_granularity": "MONTH"})  # DAY chunks nest
    coarse = '{"dimensions": ["k"], "query_granularity": "YEAR"}'
    with pytest.raises(lamina.CompactionError, match="YEAR does not nest in .* MONTH"):
        t.set_properties(**{"compaction.rollup": coarse})
    timeless = cat.create_table("timeless", schema=SCHEMA)
    with pytest.raises(lamina.CompactionError, match="no time column"):
        timeless.set_properties(**{"compaction.segment_granularity": "DAY"})


def test_auto_compaction_leaves_chunks_a_lineage_entry_names(cat: lamina.Catalog) -> None:
    """A push that may still be rolled back names its segments: a major compaction
    there would undo the rollback, so auto-compaction skips the chunk with a reason."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    with t.push() as p:
        p.append(events(days=1, per_day=4, seed=1))
    t.append(events(days=1, per_day=4, seed=2, start="2024-01-02"))
    t.set_properties(**{"compaction.sort_by": "v"})
    results = {str(r.status.chunk)[:10]: r for r in cat.compact_auto()}
    skipped = results["2024-01-01"]
    assert skipped.commit is None and skipped.status.status == "SKIPPED"
    assert "lineage entry names its segments" in skipped.status.reason
    assert results["2024-01-02"].commit is not None  # the other day is compacted
    with pytest.raises(lamina.CommitConflictError, match="lineage entry"):
        t.compact(mode="major", interval=("2024-01-01", "2024-01-02"))
    assert t.count() == 8


# -- the compaction-state rule, against an oracle ----------------------------------------

_SORTS = st.sampled_from([(), ("v",), ("k", "v")])
_ROLLUPS = st.sampled_from([None, {"dimensions": ["k"]}, {"dimensions": ["k"], "metrics": {}}])
_POLICIES = st.builds(
    Policy,
    target_rows=st.sampled_from([10, 100]),
    sort_by=_SORTS,
    rollup=_ROLLUPS,
    chunk_granularity=st.sampled_from([None, Granularity.DAY, Granularity.WEEK]),
)


@settings(max_examples=400)
@given(
    policy=_POLICIES,
    made=st.lists(st.one_of(st.none(), _POLICIES), min_size=1, max_size=4),
    rows=st.lists(st.integers(0, 200), min_size=4, max_size=4),
)
def test_a_chunk_is_picked_exactly_when_the_policy_wants_it_otherwise(
    policy: Policy, made: list[Policy | None], rows: list[int]
) -> None:
    """One DAY chunk whose segments were written by plain writes (None) or by
    compactions under other policies. Oracle (Druid's CompactionStatus): the chunk is
    COMPLETE exactly when it is a chunk of the policy's granularity (if it names one),
    has no small segments a compaction would reduce (two adjacent ones that fit the
    target together; or, some never compacted, fewer segments if rewritten) and every
    segment comes from a compaction with the policy's target size, and its sort order
    and rollup where the policy names them — or, never compacted, has nothing to merge.
    A chunk compacted under the policy itself is never picked again (Druid #8481)."""
    segs = [seg(7, i, rows[i], i + 1) for i in range(len(made))]
    compacted = {i + 1: p.state for i, p in enumerate(made) if p is not None}
    (got,) = statuses(segs, compacted, policy)
    small = sum(1 for s in segs if s.row_count < policy.small)
    done = [p for p in made if p is not None]
    meets = [
        p.target_rows == policy.target_rows
        and (not policy.sort_by or p.sort_by == policy.sort_by)
        and (policy.rollup is None or p.rollup == policy.rollup)
        for p in done
    ]
    day = segs[0].interval
    shaped = policy.chunk_granularity in (None, Granularity.DAY) or day == (
        policy.chunk_granularity.chunk(day.start)
    )
    late = len(made) - len(done)
    reshapes = policy.sort_by or policy.rollup is not None
    thr, target = policy.small, policy.target_rows
    mergeable = any(
        a < thr and b < thr and a + b <= target
        for a, b in zip(rows[: len(made) - 1], rows[1 : len(made)], strict=True)
    )
    rewrite = small >= 2 and late > 0 and -(-sum(s.row_count for s in segs) // target) < len(segs)
    want_complete = (
        shaped
        and not mergeable
        and not rewrite
        and all(meets)
        and not (reshapes and late)
        and (late == 0 or not policy.max_segments)
    )
    assert (got.status == "COMPLETE") == want_complete, got
    if got.status == "PENDING":
        assert got.action in ("minor", "major") and got.reason
    # compacted under the policy itself, into one big segment: never picked again
    (again,) = statuses([seg(7, 0, 10_000, 1)], {1: policy.state}, policy)
    shaped_one = policy.chunk_granularity in (None, Granularity.DAY)
    assert (again.status == "COMPLETE") == shaped_one


def test_a_chunk_hidden_in_part_is_rewritten_only_when_the_policy_asks() -> None:
    """A chunk a newer version hides in part takes no minor compaction: it stays as it
    is unless the policy re-partitions it or its records need purging."""
    pol = Policy(target_rows=100)
    day = [seg(1, 0, 10, 1), seg(1, 1, 10, 2)]  # small, but partly hidden
    (st,) = statuses([], {}, pol, partial=day)
    assert (st.status, st.action) == ("COMPLETE", "none") and "partly hidden" in st.reason
    (st,) = statuses([], {}, pol, frozenset({day[0].id}), partial=day)
    assert (st.status, st.action) == ("PENDING", "major") and "superseded" in st.reason
    hourly = Policy(target_rows=100, chunk_granularity=Granularity.HOUR)
    (st,) = statuses([], {}, hourly, partial=day)
    assert (st.status, st.action) == ("PENDING", "major") and "re-partitions" in st.reason


def test_a_policy_refused_now_but_stored_before_fails_only_its_own_chunks(
    cat: lamina.Catalog,
) -> None:
    """compaction.segment_granularity=ALL on a table with a time column is refused when
    set; one an earlier version stored fails that table's chunks, and auto-compaction
    goes on with the other tables (a review: it raised out of compact_auto)."""
    from lamina.meta import tables as table_rows

    old = cat.create_table("old", SCHEMA, time_column="ts", segment_granularity="DAY")
    with pytest.raises(lamina.CompactionError, match="without a time column"):
        old.set_properties(**{"compaction.segment_granularity": "ALL"})
    table_rows.set_properties(
        cat.context.db, "old", {"compaction.segment_granularity": "ALL"}
    )  # as stored before the check
    other = cat.create_table("other", SCHEMA, time_column="ts", segment_granularity="DAY")
    for t in (old, other):
        for seed in range(3):
            t.append(events(days=1, per_day=2, seed=seed))
    results = cat.compact_auto()
    assert any(r.commit is not None for r in results if r.table == "other")
    assert all(r.commit is None for r in results if r.table == "old")
