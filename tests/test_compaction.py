"""Minor compaction on a real catalog (SQLite and PostgreSQL) and real files: fewer
segments, the same rows, appends never blocked, conflicts typed, nothing half-done."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.core.interval import Interval
from lamina.core.segment import OVERWRITE_PARTITION_START
from lamina.io import background
from lamina.operations import compaction
from tests.helpers import SCHEMA, events


def small_appends(t: lamina.Table, n: int, day: str = "2024-01-01", per: int = 5) -> list[int]:
    """``n`` appends of ``per`` rows into one day; their row keys (k) are distinct."""
    ks = []
    for i in range(n):
        data = events(days=1, per_day=per, start=day, seed=i)
        data = data.set_column(1, "k", pa.array(range(i * per, (i + 1) * per), pa.int64()))
        t.append(data)
        ks += data["k"].to_pylist()
    return ks


def rows(t: lamina.Table, as_of: int | None = None) -> list[tuple]:
    got = t.to_arrow(as_of=as_of).sort_by([(c, "ascending") for c in ("k", "ts", "v", "s")])
    return list(zip(*(got[c].to_pylist() for c in ("ts", "k", "v", "s")), strict=True))


def files_under(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root)
        for f in fs
        if f.endswith(".parquet")
    }


def test_small_segments_of_a_chunk_merge_into_one_at_a_higher_minor_version(
    cat: lamina.Catalog,
) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 10)
    small_appends(t, 3, day="2024-01-02")
    before, base = rows(t), t.history()[-1].version
    assert len(t.segments()) == 13
    c = t.compact()
    assert c is not None and c.action == "COMPACT" and len(c.removed) == 13
    assert rows(t) == before  # every row exactly once
    segs = sorted(t.segments(), key=lambda s: s.interval)
    assert len(segs) == 2
    day1 = segs[0]
    assert day1.version == 1 and day1.minor_version == 1  # same major version
    assert day1.root_range == (0, 10) and day1.atomic_update_group_size == 1
    assert day1.partition_id == OVERWRITE_PARTITION_START
    assert day1.row_count == 50
    assert len(t.segments(as_of=base)) == 13 and rows(t, as_of=base) == before  # time travel
    assert t.compact() is None  # nothing small left to merge with


def test_appends_continue_first_generation_ids_and_compact_again(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    t.compact()
    c = t.append(events(days=1, per_day=3, seed=99))
    (new,) = [s for s in t.segments() if s.id in c.added]
    assert new.partition_id == 4 and new.minor_version == 0  # consecutive, below 32768
    t.append(events(days=1, per_day=3, seed=98))
    before = rows(t)
    t.compact()
    (merged,) = t.segments()
    assert merged.root_range == (0, 6) and merged.minor_version == 2
    assert merged.partition_id == OVERWRITE_PARTITION_START + 1  # ids never reused
    assert rows(t) == before


def test_appends_after_retention_deleted_the_inputs_of_a_compaction_show(
    cat: lamina.Catalog,
) -> None:
    """The next appended id came from the first-generation rows only; once retention
    deleted a minor compaction's inputs it restarted at 0, inside the output's root
    range, and every later append of the day was hidden (a retention hunt: on an
    upsert table an updated key vanished)."""
    t = cat.create_table(
        "events", SCHEMA, time_column="ts", properties={"replaced_segments_retention": "0s"}
    )
    small_appends(t, 2)
    t.compact()
    cat.run_retention()
    assert [s.root_range for s in t.segments(all=True)] == [(0, 2)]  # inputs gone
    before = t.count()
    c = t.append(events(days=1, per_day=3, seed=99))
    (new,) = [s for s in t.segments() if s.id in c.added]
    assert new.partition_id == 2 and t.count() == before + 3
    schema = pa.schema(
        [("ts", pa.timestamp("us")), pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())]
    )

    def batch(keys: list[int], hour: int, v: int) -> pa.Table:
        ts = [np.datetime64(f"2024-01-01T{hour:02d}:00", "us")] * len(keys)
        return pa.table({"ts": ts, "k": keys, "v": [v] * len(keys)}, schema=schema)

    u = cat.create_table(
        "u",
        schema,
        time_column="ts",
        primary_key=["k"],
        properties={"replaced_segments_retention": "0s"},
    )
    u.upsert(batch([1, 2], 1, 10))
    u.upsert(batch([3], 2, 30))
    u.compact()
    cat.run_retention()
    u.upsert(batch([1], 5, 11))  # an update of key 1
    got = sorted((r["k"], r["v"]) for r in u.to_arrow().to_pylist())
    assert got == [(1, 11), (2, 10), (3, 30)]


def test_partition_ids_are_never_given_out_again_after_retention(cat: lamina.Catalog) -> None:
    """A segment id names one file in the history, lineage lists and change feeds:
    once retention deleted the rows holding a chunk version's highest ids, they were
    given out again (the random history checker, with retention among its writes)."""
    t = cat.create_table(
        "events", SCHEMA, time_column="ts", properties={"replaced_segments_retention": "0s"}
    )
    small_appends(t, 2)
    t.compact()  # 32768: roots 0-1
    t.append(events(days=1, per_day=3, seed=90))  # 2
    t.compact()  # 32769: roots 0-2
    t.append(events(days=1, per_day=3, seed=91))  # 3
    top = [s for s in t.segments() if s.partition_id == OVERWRITE_PARTITION_START + 1]
    t.delete_segments([s.id for s in top])
    cat.run_retention()
    assert [s.partition_id for s in t.segments(all=True)] == [3]
    every = {s.id for s in t.segments(all=True)} | {i for c in t.history() for i in c.added}
    c = t.append(events(days=1, per_day=3, seed=92))
    (new,) = c.added
    assert new not in every and [s.partition_id for s in t.segments() if s.id == new] == [4]
    merged = t.compact()
    assert merged is not None and not set(merged.added) & every
    (out,) = t.segments()
    assert out.partition_id == OVERWRITE_PARTITION_START + 2 and t.count() == 6


def test_one_compaction_over_more_chunks_than_an_expression_may_name(
    cat: lamina.Catalog,
) -> None:
    """A compaction of 1,100 chunks in one commit (SQLite refuses an OR of more than
    1,000 terms: the partition ids are read in batches), then one more: every output
    takes a later-generation id of its own, and every row is still there once."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts", segment_granularity="HOUR")
    hours = 1_100
    for seed in (1, 2):  # two small segments in each hour
        data = events(days=1, per_day=hours, seed=seed)
        start = np.datetime64("2024-01-01", "us")
        ts = start + np.arange(hours).astype("timedelta64[h]").astype("timedelta64[us]")
        t.append(data.set_column(0, "ts", pa.array(ts)))
    before = rows(t)
    c = t.compact()
    assert c is not None and len(c.removed) == 2 * hours and len(c.added) == hours
    t.append(events(days=1, per_day=hours, seed=3).set_column(0, "ts", pa.array(ts)))
    c = t.compact()
    assert c is not None and len(c.added) == hours
    pids = {s.interval: s.partition_id for s in t.segments()}
    assert set(pids.values()) == {OVERWRITE_PARTITION_START + 1} and len(pids) == hours
    assert len(rows(t)) == len(before) + hours


def test_an_append_during_a_compaction_is_kept_and_never_conflicts(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 5)
    runs = compaction.plan(t._handle, None, 1000)  # the compaction read its inputs...
    t.append(events(days=1, per_day=7, seed=50))  # ...an append lands in the same chunk
    before = rows(t)
    c = compaction.compact_minor(t._handle, runs)
    assert c is not None
    assert rows(t) == before and t.count() == 25 + 7
    assert len(t.segments()) == 2  # the compacted group and the append


def test_an_overwrite_during_a_compaction_refuses_it_and_nothing_shows(
    cat: lamina.Catalog, tmp_path: Path
) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    runs = compaction.plan(t._handle, None, 1000)
    t.overwrite(events(days=1, per_day=2, seed=7))
    before, segs, files = rows(t), t.segments(), files_under(tmp_path / "wh")
    with pytest.raises(lamina.CommitConflictError, match="removed meanwhile|replaced"):
        compaction.compact_minor(t._handle, runs)
    assert rows(t) == before and t.segments() == segs
    assert files_under(tmp_path / "wh") == files  # the refused outputs were removed
    assert t.history()[-1].state == "ABORTED"


def test_a_delete_of_an_input_during_a_compaction_refuses_it(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    runs = compaction.plan(t._handle, None, 1000)
    t.delete_segments([runs[0].inputs[1].id])
    before = rows(t)
    with pytest.raises(lamina.CommitConflictError):
        compaction.compact_minor(t._handle, runs)
    assert rows(t) == before


def test_a_live_input_whose_file_is_lost_is_no_conflict(cat: lamina.Catalog) -> None:
    """A soak's note: an input file lost under a live segment was reported as removed
    meanwhile, a conflict that auto-compaction retries every run forever. It is a
    WarehouseError saying what to do; nothing is published."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    runs = compaction.plan(t._handle, None, 1000)
    lost = runs[0].inputs[1]
    assert lost.location is not None
    os.remove(lost.location)
    segs = t.segments()
    with pytest.raises(lamina.WarehouseError, match=f"live segment {lost.id} is missing"):
        compaction.compact_minor(t._handle, runs)
    assert t.segments() == segs


def test_an_append_transaction_deleting_an_input_during_a_compaction_refuses_it(
    cat: lamina.Catalog,
) -> None:
    """A transaction that appends and deletes one of the compaction's inputs commits as
    an append: the compaction, which conflicts with no append, is still refused (its
    input is gone), and nothing it wrote shows."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    runs = compaction.plan(t._handle, None, 1000)
    with t.transaction() as tx:
        tx.append(events(days=1, per_day=3, seed=9))
        tx.delete_segments([runs[0].inputs[1].id])
    assert t.history()[-1].action == "APPEND"
    before, segs = rows(t), t.segments()
    with pytest.raises(lamina.CommitConflictError, match="removed meanwhile"):
        compaction.compact_minor(t._handle, runs)
    assert rows(t) == before and t.segments() == segs


def test_an_overwrite_racing_a_compaction_keeps_concurrent_appends(cat: lamina.Catalog) -> None:
    """An overwrite opened before a compaction publishes after it: the compacted rows
    were visible at its base, so it replaces them; rows appended meanwhile and not
    compacted are carried. Had the compaction merged such an append, the overwrite is
    refused (those rows could be neither carried nor dropped)."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    new = events(days=1, per_day=2, seed=7)
    with t.transaction() as tx:
        tx.overwrite(new)
        t.compact()  # merges only segments the overwrite saw
        late = t.append(events(days=1, per_day=3, seed=8))
    assert t.count() == 2 + 3 and late.added[0] not in [s.id for s in t.segments()]
    t2 = cat.create_table("events2", schema=SCHEMA, time_column="ts")
    small_appends(t2, 4)
    tx2 = t2.transaction()
    tx2.overwrite(new)
    small_appends(t2, 1)  # appended after the overwrite began...
    t2.compact()  # ...and merged with what the overwrite replaces
    before = rows(t2)
    with pytest.raises(lamina.CommitConflictError, match="appended after this replace began"):
        tx2.commit()
    assert rows(t2) == before


def test_segments_a_lineage_entry_names_are_not_compacted(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 3)
    with t.push() as p:
        p.append(events(days=1, per_day=2, seed=5))
        p.append(events(days=1, per_day=2, seed=6))
    pushed = set(t.lineage()[-1].segments_to)
    assert len(pushed) == 2
    c = t.compact()
    assert c is not None and len(c.removed) == 3
    assert not pushed & set(c.removed)  # the push's segments stay (it may be reverted)


def test_a_major_compaction_leaves_the_sources_a_revertible_entry_hides(
    cat: lamina.Catalog,
) -> None:
    """An atomic delete of one day (a completed entry, still revertible) between two
    days of data: a major compaction over them that overshadowed the deleted day's
    segment left the rollback nothing to bring back (a lineage hunt found it empty).
    The compaction rewrites only the days that show data, so the deleted day stays as
    it is; one that would overshadow it (a day with data beside the deleted segment)
    is refused, as for the segments such an entry shows."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for day in ("2024-01-03", "2024-01-10", "2024-01-12"):
        t.append(events(days=1, per_day=4, start=day))
    (held,) = [
        s.id
        for s in t.segments()
        if s.interval.start == Interval.parse("2024-01-10/2024-01-11").start
    ]
    entry = t.start_replace([held], [])
    t.end_replace(entry)
    assert t.compact(mode="major", interval=("2024-01-01", "2024-01-15")) is not None
    assert held in [s.id for s in t.segments(all=True)]
    t.append(events(days=1, per_day=1, start="2024-01-10", seed=7))  # data beside it
    history = t.history()
    with pytest.raises(lamina.CommitConflictError, match=f"{held} is named by lineage entry"):
        t.compact(mode="major", interval=("2024-01-01", "2024-01-15"))
    assert [c.id for c in t.history() if c.state == "COMPLETED"] == [
        c.id for c in history if c.state == "COMPLETED"
    ]
    t.revert_replace(entry)
    assert t.count() == 13


def test_a_major_compaction_leaves_a_named_segment_it_would_hide_in_part(
    cat: lamina.Catalog,
) -> None:
    """A push's segment in a MONTH chunk, still revertible; a WEEK compaction of the
    first half of the month would hide it in part and copy its rows: rolling the push
    back then left the copies showing. Refused (a lineage hunt found the half rollback)."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=2, start="2024-01-20"))
    t.compact(mode="major", segment_granularity="MONTH", interval=("2024-01-01", "2024-02-01"))
    t.set_properties(consistent_push=True)
    t.append(events(days=1, per_day=3, start="2024-01-04", value=5.0))  # a push
    (entry,) = [e for e in t.lineage() if e.state == "COMPLETED"]
    with pytest.raises(lamina.CommitConflictError, match="is named by lineage entry"):
        t.compact(mode="major", segment_granularity="WEEK", interval=("2024-01-01", "2024-01-15"))
    t.revert_replace(entry.id)
    assert t.count() == 2


def test_bad_compaction_requests_are_typed_and_change_nothing(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 3)
    before = [c.id for c in t.history()]
    with pytest.raises(lamina.CompactionError, match="mode"):
        t.compact(mode="medium")
    with pytest.raises(lamina.CompactionError, match=">= 1"):
        t.compact(target_rows_per_segment=0)
    with pytest.raises(lamina.InvalidIntervalError):
        t.compact(interval=("2024-01-01T05:00", "2024-01-02"))
    assert [c.id for c in t.history()] == before
    assert len(t.segments()) == 3


def test_the_target_splits_a_run_into_an_atomic_update_group(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 6, per=10)
    before = rows(t)
    runs = compaction.plan(t._handle, None, 100)
    assert len(runs) == 1 and runs[0].outputs == 1
    c = compaction.compact_minor(t._handle, [dataclasses.replace(runs[0], outputs=3)])
    assert c is not None
    group = t.segments()
    assert len(group) == 3 and {s.atomic_update_group_size for s in group} == {3}
    assert {s.root_range for s in group} == {(0, 6)} and rows(t) == before


def test_named_segments_follow_the_three_restrictions(cat: lamina.Catalog) -> None:
    """Seed 001: adjacent first-generation partitions only; later generations with
    segments from adjacent roots; segments from the same roots together."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 5)
    by_pid = {s.partition_id: s.id for s in t.segments()}
    history = len(t.history())
    with pytest.raises(lamina.CompactionError, match="P2 and P4 are not adjacent partitions"):
        t.compact(segments=[by_pid[2], by_pid[4]])
    with pytest.raises(lamina.CompactionError, match="not a visible segment"):
        t.compact(segments=["nope"])
    assert len(t.history()) == history
    before = rows(t)
    t.compact(segments=[by_pid[0], by_pid[1], by_pid[2]], target_rows_per_segment=4)
    group = [s for s in t.segments() if s.minor_version == 1]
    assert len(group) == 4 and {s.root_range for s in group} == {(0, 3)}  # 15 rows / 4
    with pytest.raises(lamina.CompactionError, match="include it"):
        t.compact(segments=[group[0].id, by_pid[3]])  # restriction 3
    t.compact(segments=[*(s.id for s in group), by_pid[3]])  # roots 0..2 + 3: adjacent
    (merged,) = [s for s in t.segments() if s.minor_version == 2]
    assert merged.root_range == (0, 4) and rows(t) == before
    with pytest.raises(lamina.CompactionError, match="minor"):
        t.compact(mode="major", segments=[merged.id])


def test_the_change_feed_skips_compactions_that_change_no_row(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    small_appends(t, 4)
    seq = t.history()[-1].seq
    assert seq is not None
    t.compact()
    t.compact(mode="major", sort_by=["v"])
    late = t.append(events(days=1, per_day=2, seed=77))
    feed = t.read_changes(after_seq=seq)
    assert feed["_commit_id"].to_pylist() == [late.id] * 2  # only the append's two rows
    assert set(feed["_change"].to_pylist()) == {"insert"}
    t.compact(mode="major", rollup={"dimensions": ["s"], "metrics": {"v": "sum"}})
    rolled = t.read_changes(after_seq=t.history()[-2].seq or 0)
    assert set(rolled["_change"].to_pylist()) == {"insert", "delete"}  # rows did change


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.skipif(not background.PER_THREAD, reason="per-thread nice values are Linux's")
def test_run_niced_lowers_only_a_thread_of_its_own() -> None:
    me = threading.get_native_id()
    mine = _nice(me)
    got = background.run_niced(lambda: (threading.get_native_id(), _nice(0)), 5)
    assert got[0] != me and got[1] == min(19, mine + 5)  # 0: the calling thread
    assert _nice(me) == mine
    assert background.run_niced(threading.get_native_id, 0) == me  # 0: no thread
    with pytest.raises(ZeroDivisionError):
        background.run_niced(lambda: 1 // 0, 5)


def test_compaction_priority_changes_no_result_and_leaves_no_niced_thread(
    cat: lamina.Catalog,
) -> None:
    """``compaction.nice`` changes when the CPU runs the rewrite, not what it writes;
    pyarrow's lazily grown thread pools get no thread of lowered priority."""
    layouts = []
    for nice in ("0", "19"):
        t = cat.create_table(f"events{nice}", schema=SCHEMA, time_column="ts")
        t.set_properties(**{"compaction.nice": nice})
        small_appends(t, 6)
        small_appends(t, 4, day="2024-01-02")
        before = rows(t)
        c = t.compact(target_rows_per_segment=20)  # day 1: an atomic update group of 2
        assert c is not None and len(c.removed) == 10
        assert rows(t) == before
        layouts.append(sorted((s.interval, s.root_range, s.row_count) for s in t.segments()))
        t.to_arrow()  # pyarrow's pools run at whatever priority they were created with
    assert layouts[0] == layouts[1] and len(layouts[0]) == 3
    if background.PER_THREAD:
        base, deadline = _nice(threading.get_native_id()), time.monotonic() + 5
        while True:  # a joined thread may linger in /proc for a moment while it exits
            nices = {_nice(int(tid)) for tid in os.listdir("/proc/self/task")}
            if nices == {base} or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert nices == {base}
