"""Major compaction on a real catalog: whole chunks rewritten at a new version under a
REPLACE lock — re-partitioned, sorted, rolled up — with appends kept meanwhile."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina import failpoints
from tests.helpers import SCHEMA, events


def hourly(cat: lamina.Catalog, name: str = "events") -> lamina.Table:
    t = cat.create_table(name, schema=SCHEMA, time_column="ts", segment_granularity="HOUR")
    for seed in range(3):
        t.append(events(days=2, per_day=48, seed=seed))
    return t


def ordered(data: pa.Table) -> list[tuple]:
    data = data.sort_by([("ts", "ascending"), ("k", "ascending"), ("v", "ascending")])
    return list(zip(*(data[c].to_pylist() for c in data.column_names), strict=True))


def test_hour_chunks_become_day_segments_at_a_new_version(cat: lamina.Catalog) -> None:
    t = hourly(cat)
    before = ordered(t.to_arrow())
    assert len({s.interval for s in t.segments()}) > 40
    c = t.compact(mode="major", segment_granularity="DAY")
    assert c is not None and c.action == "OVERWRITE" and c.metadata["compaction"] == "major"
    segs = t.segments()
    assert {str(s.interval) for s in segs} == {
        "2024-01-01T00:00:00Z/2024-01-02T00:00:00Z",
        "2024-01-02T00:00:00Z/2024-01-03T00:00:00Z",
    }
    assert ordered(t.to_arrow()) == before
    # an append into an hour after it lands in the day chunk, visible with it
    t.append(events(days=1, per_day=5, seed=9, start="2024-01-01"))
    assert t.count() == len(before) + 5
    assert "2024-01-01T00:00:00Z/2024-01-02T00:00:00Z" in {str(s.interval) for s in t.segments()}


def test_sorted_rewrite_keeps_rows_and_orders_files(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for seed in range(4):
        t.append(events(days=1, per_day=50, seed=seed))
    before = ordered(t.to_arrow())
    t.compact(mode="major", sort_by=["v"])
    (seg,) = t.segments()
    import pyarrow.parquet as pq

    data = pq.read_table(seg.location)
    assert data["v"].to_pylist() == sorted(data["v"].to_pylist())
    assert ordered(t.to_arrow()) == before


def test_rollup_keeps_every_aggregate(cat: lamina.Catalog) -> None:
    schema = pa.schema(
        [("ts", pa.timestamp("us")), ("user", pa.string()), ("v", pa.float64()),
         ("n", pa.int64()), ("note", pa.string())]
    )  # fmt: skip
    t = cat.create_table("clicks", schema=schema, time_column="ts")
    raw = events(days=1, per_day=500, seed=1)
    data = pa.table(
        {
            "ts": raw["ts"],
            "user": pa.array([f"u{i % 7}" for i in range(raw.num_rows)]),
            "v": raw["v"],
            "n": pa.nulls(raw.num_rows, pa.int64()),
            "note": raw["s"],
        }
    )
    t.append(data.slice(0, 250))
    t.append(data.slice(250))
    spec = {"dimensions": ["user"], "metrics": {"v": "sum", "n": "count"},
            "query_granularity": "HOUR"}  # fmt: skip
    t.compact(mode="major", rollup=spec)
    got = t.to_arrow()
    assert got.num_rows <= 7 * 24 < data.num_rows
    assert pc.sum(got["n"]).as_py() == data.num_rows
    assert pc.sum(got["v"]).as_py() == pytest.approx(pc.sum(data["v"]).as_py())
    assert got["note"].null_count == got.num_rows
    by_user = got.group_by("user").aggregate([("v", "sum"), ("n", "sum")]).sort_by("user")
    raw_user = data.group_by("user").aggregate([("v", "sum"), ("v", "count")]).sort_by("user")
    assert by_user["n_sum"].to_pylist() == raw_user["v_count"].to_pylist()
    assert by_user["v_sum"].to_pylist() == pytest.approx(raw_user["v_sum"].to_pylist())
    t.compact(mode="major", rollup=spec)  # rolled up again: the same aggregates
    again = t.to_arrow()
    assert pc.sum(again["n"]).as_py() == data.num_rows


def test_appends_during_a_major_compaction_are_kept(cat: lamina.Catalog) -> None:
    """The compaction holds a REPLACE lock; an append under an APPEND lock and an
    optimistic append land meanwhile and are carried onto its version."""
    t = hourly(cat)
    n = t.count()
    started, go = threading.Event(), threading.Event()

    def slow_read(table: object) -> None:  # the compaction read its rows at its base
        started.set()
        assert go.wait(30)

    result: list[object] = []

    def compact() -> None:
        with failpoints.armed("compaction.major.read", slow_read):
            result.append(t.compact(mode="major", segment_granularity="DAY"))

    worker = threading.Thread(target=compact)
    worker.start()
    assert started.wait(30)
    t2 = cat.load_table("events")
    t2.append(events(days=1, per_day=4, seed=20))
    with t2.transaction(lock="APPEND", interval=("2024-01-02", "2024-01-03"), priority=75) as tx:
        tx.append(events(days=1, per_day=3, seed=21, start="2024-01-02"))
    go.set()
    worker.join(60)
    assert result and result[0] is not None
    assert t2.count() == n + 7  # nothing lost, nothing twice
    assert all(s.interval.end - s.interval.start == 86_400_000_000 for s in t2.segments())


def test_bad_major_compactions_are_typed_and_change_nothing(cat: lamina.Catalog) -> None:
    t = hourly(cat)
    before = [c.id for c in t.history()]
    bad = [
        ({"sort_by": ["nope"]}, "sort_by names 'nope', not a column"),
        ({"segment_granularity": "FORTNIGHT"}, "segment_granularity"),
        ({"segment_granularity": "DAY", "interval": ("2024-01-01T05:00", "2024-01-02")},
         "must align"),
        ({"rollup": {"dimensions": ["zz"]}}, "'zz' is not a column"),
        ({"rollup": {"metrics": {"K": "count"}}}, "differs only in case from 'k'"),
        ({"rollup": {"metrics": {"s": "sum"}}}, "needs a numeric column"),
        ({"rollup": {"metrics": {"v": "median"}}}, "unknown aggregate"),
        ({"rollup": {"dimensions": ["k"], "query_granularity": "EON"}}, "query_granularity"),
        # rows floored to DAY would leave their HOUR chunks (a Druid audit: refused or
        # collapsed into hour 00, by the data)
        ({"rollup": {"dimensions": ["k"], "query_granularity": "DAY"}},
         "query_granularity DAY does not nest in the segment granularity HOUR"),
        ({"segment_granularity": "MONTH", "interval": ("2024-01-01", "2024-02-01"),
          "rollup": {"dimensions": ["k"], "query_granularity": "WEEK"}}, "WEEK does not nest"),
    ]  # fmt: skip
    for kwargs, match in bad:
        with pytest.raises(lamina.CompactionError, match=match):
            t.compact(mode="major", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(lamina.CompactionError, match="mode='major'"):
        t.compact(sort_by=["v"])
    assert [c.id for c in t.history()] == before


def test_a_major_compaction_of_a_wide_interval_rewrites_only_chunks_with_data(
    cat: lamina.Catalog,
) -> None:
    """1900-2100 over one day of data: one segment, not an empty one per day of two
    centuries (73,049 catalog rows and 15 s; 0001-9999 ran for more than 10 minutes)."""
    t = hourly(cat)
    n, before = t.count(), len(t.segments(all=True))
    c = t.compact(mode="major", segment_granularity="DAY", interval=("1900-01-01", "2100-01-01"))
    assert c is not None and t.count() == n
    added = len(t.segments(all=True)) - before
    assert 0 < added <= 3  # the data's days
    assert t.compact(mode="major", interval=("2200-01-01", "2300-01-01")) is None  # no data


def test_deleting_a_day_overwrite_shows_that_day_of_a_coarser_segment_again(
    cat: lamina.Catalog,
) -> None:
    """Druid's timeline: a segment reaching past the overwritten chunk is only hidden
    in it (docs/concurrency.md), so deleting the overwrite shows its rows there again;
    a segment inside the chunk is retired and stays hidden."""
    t = cat.create_table("d", schema=SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=3, per_day=10, seed=1))
    day2 = ("2024-01-02", "2024-01-03")
    old_day2 = ordered(t.to_arrow(interval=day2))
    t.compact(mode="major", interval=("2024-01-01", "2024-02-01"), segment_granularity="MONTH")
    new = events(days=1, per_day=4, seed=9, start="2024-01-02")
    t.overwrite(new, interval=day2)
    assert ordered(t.to_arrow(interval=day2)) == ordered(new)
    t.delete_segments([s.id for s in t.segments() if str(s.interval).startswith("2024-01-02")])
    assert ordered(t.to_arrow(interval=day2)) == old_day2
    assert t.count() == 30

    u = cat.create_table("e", schema=SCHEMA, time_column="ts", segment_granularity="DAY")
    u.append(events(days=3, per_day=10, seed=1))
    u.overwrite(new, interval=day2)
    u.delete_segments([s.id for s in u.segments() if str(s.interval).startswith("2024-01-02")])
    assert u.to_arrow(interval=day2).num_rows == 0 and u.count() == 20


def test_a_coarser_segment_hidden_in_pieces_by_several_overwrites_is_retired(
    cat: lamina.Catalog,
) -> None:
    """Druid marks every segment the timeline overshadows unused, whichever segments
    hide it: a MONTH segment hidden by two half-month overwrites is retired by the
    second one, and retention deletes its file."""
    t = cat.create_table("h", schema=SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=3, per_day=10, seed=1))
    t.compact(mode="major", interval=("2024-01-01", "2024-02-01"), segment_granularity="MONTH")
    (month,) = t.segments()
    first = events(days=1, per_day=2, seed=3, start="2024-01-01")
    t.overwrite(first, interval=("2024-01-01", "2024-01-16"))
    assert month.id in {s.id for s in t.segments(all=True)}  # still shows from the 16th
    t.overwrite(
        events(days=1, per_day=2, seed=4, start="2024-01-20"), interval=("2024-01-16", "2024-02-01")
    )
    assert t.count() == 4
    cat.run_retention(now=datetime.now(UTC) + timedelta(days=30))
    assert month.id not in {s.id for s in t.segments(all=True)}
    assert month.location is not None
    assert not os.path.exists(os.path.join(cat.warehouse.root, month.location))


def test_a_major_compaction_of_sparse_hours_rewrites_only_the_hours_with_data(
    cat: lamina.Catalog,
) -> None:
    """Two rows a year apart on an HOUR table: the compaction rewrote every hour between
    them, a tombstone per empty hour (8,787 segments, 2 s). Empty chunks need none."""
    t = cat.create_table("s", schema=SCHEMA, time_column="ts", segment_granularity="HOUR")
    t.append(events(days=1, per_day=1, start="2024-01-01"))
    t.append(events(days=1, per_day=1, start="2025-01-01", seed=1))
    before = ordered(t.to_arrow())
    c = t.compact(mode="major")
    assert c is not None and len(c.added) == 2
    assert ordered(t.to_arrow()) == before
    assert len(t.segments(all=True)) == 4  # the two appends' and the two rewrites'


def test_a_major_compaction_whose_interval_a_write_emptied_meanwhile_publishes_nothing(
    cat: lamina.Catalog,
) -> None:
    """The random history checker (PostgreSQL) caught a major compaction publishing an
    empty APPEND commit: a delete emptied its interval between its sizing read and its
    base. It now finds nothing to rewrite at its base and publishes nothing."""

    t = cat.create_table("d", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=4))
    t.append(events(days=1, per_day=4, seed=1))

    def emptied_meanwhile(**_: object) -> None:
        t.delete_segments([s.id for s in t.segments()])

    history = t.history()
    with failpoints.armed("compaction.major.sized", emptied_meanwhile):
        assert t.compact(mode="major") is None
    assert [c.id for c in t.history() if c.state == "COMPLETED"] == [
        c.id for c in history if c.state == "COMPLETED"
    ] + [history[-1].id + 1]  # the delete only
    assert t.count() == 0
