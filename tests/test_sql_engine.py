"""SqlEngine: one DuckDB connection per catalog, views cached per snapshot, pruned
plans private to a query, re-planning when files vanish; prune_plan; count()."""

from __future__ import annotations

import datetime as dt
import glob
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina.core.interval import Granularity, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.plans import AppendPlan
from lamina.core.scan import ScanPlan, plan_scan, prune_plan
from lamina.core.segment import Segment
from lamina.engines.duckdb import SqlEngine
from lamina.errors import SnapshotNotFoundError, SqlError
from lamina.io.writer import split_by_chunk, write_parts
from lamina.meta.snapshots import snapshot
from lamina.meta.tables import latest_seqs
from lamina.write import WriteTransaction
from tests.helpers import SCHEMA, events

DAY = 86_400_000_000


def counting_engine(cat: lamina.Catalog) -> tuple[SqlEngine, list[str]]:
    """An engine wired like Catalog.sql's, recording every plan it asks for."""
    planned: list[str] = []

    def plan(name: str, as_of: int | None = None) -> ScanPlan:
        planned.append(name)
        return plan_scan(snapshot(cat.context.db, name, as_of))

    return SqlEngine(lambda names: latest_seqs(cat.context.db, names), plan), planned


def n(result: pa.Table) -> int:
    return int(result.column(0)[0].as_py())


def one_day(day: int) -> str:
    lo = dt.date(2024, 1, day)
    return f"select count(*) from events where ts >= '{lo}' and ts < '{lo + dt.timedelta(1)}'"


@pytest.fixture
def cat10(local_cat: lamina.Catalog) -> lamina.Catalog:
    t = local_cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=10, per_day=30))
    return local_cat


# -- prune_plan ----------------------------------------------------------------------


def _random_snapshot(rng: random.Random, timeless: bool = False) -> Snapshot:
    table = TableRecord(1, "t", SCHEMA, None if timeless else "ts", Granularity.DAY, properties={})
    segs = []
    for i in range(rng.randint(0, 12)):
        if timeless:
            start, end = -(2**62), 2**62
        else:
            width = rng.choice([1, 1, 2, 4, 8])
            start = rng.randint(0, 12 - width)
            start, end = start * DAY, (start + width) * DAY
        lo = rng.randint(start, end - 1)
        hi = rng.randint(lo, end - 1)
        location = None if rng.random() < 0.1 else f"/f{i}.parquet"
        segs.append(Segment("t", Interval.of(start, end), i + 1, 0, 1, location, 10, 1, lo, hi))
    return Snapshot(table, 7, 3, segs)


@pytest.mark.parametrize("seed", range(300))
def test_pruning_the_full_plan_equals_planning_with_the_interval(seed: int) -> None:
    rng = random.Random(seed)
    snap = _random_snapshot(rng, timeless=seed % 10 == 9)
    full = plan_scan(snap)
    for _ in range(5):
        a = rng.randint(-1, 13) * DAY + rng.choice([0, 1, DAY // 2])
        iv = Interval.of(a, a + rng.choice([1, DAY // 3, DAY, 3 * DAY, 20 * DAY]))
        # as the catalog plans with an interval: only the segments overlapping it
        near = [s for s in snap.segments if s.interval.overlaps(iv)]
        planned = plan_scan(Snapshot(snap.table, snap.seq, snap.commit_id, near), iv)
        assert prune_plan(full, iv) == planned
        assert prune_plan(full, iv) == plan_scan(snap, iv)


def test_pruning_a_catalog_plan_with_partial_overshadowing(local_cat: lamina.Catalog) -> None:
    t = month_under_days(local_cat)
    full = t.scan()
    assert any(task.keep is not None for task in full.tasks)  # the case under test
    for iv in ["2024-01-04/2024-01-07", "2024-01-05/2024-01-06", "2024-01-20T06:00/2024-02-02"]:
        assert prune_plan(full, Interval.parse(iv)) == t.scan(interval=iv)


# -- the engine -------------------------------------------------------------------------


def test_views_are_rebuilt_only_when_the_snapshot_changes(cat10: lamina.Catalog) -> None:
    engine, planned = counting_engine(cat10)
    try:
        assert n(engine.sql("select count(*) from events")) == 300
        assert n(engine.sql("select count(*) from events")) == 300
        assert n(engine.sql(one_day(3))) == 30  # pruned from the cached plan
        assert planned == ["events"]
        cat10.load_table("events").append(events(days=1, per_day=5, start="2024-01-03"))
        assert n(engine.sql(one_day(3))) == 35
        assert n(engine.sql("select count(*) from events")) == 305
        assert planned == ["events", "events"]
    finally:
        engine.close()


def test_a_repeated_query_reuses_its_time_bound(cat10: lamina.Catalog) -> None:
    """Bounds depend only on the query text and the column: parsed once per query."""
    from lamina import failpoints

    parsed: list[str] = []

    def counting(query: str, column: str) -> None:
        parsed.append(query)

    t = cat10.load_table("events")
    with failpoints.armed("sql.time_bound.parse", counting):
        assert n(cat10.sql(one_day(3))) == 30
        t.append(events(days=1, per_day=5, start="2024-01-03"))
        assert n(cat10.sql(one_day(3))) == 35  # a new plan, the same bound
        assert n(cat10.sql(one_day(4))) == 30
    assert parsed == [one_day(3), one_day(4)]


def test_a_repeated_query_is_parsed_once_and_sees_every_commit(
    cat10: lamina.Catalog, tmp_path: Path
) -> None:
    """Table names are remembered by query text; the catalog is still asked for the
    tables' latest snapshots on every query: commits made by another Catalog object,
    or another process, in between are seen, and a table created after the query
    was first parsed (then it failed) is read."""
    from lamina import failpoints

    parsed: list[str] = []
    q = "SELECT count(*) FROM events e JOIN other o ON e.k = o.k"
    with failpoints.armed("sql.parse", lambda query: parsed.append(query)):
        with pytest.raises(SqlError, match="other"):
            cat10.sql(q)
        other = cat10.create_table("other", schema=SCHEMA, time_column="ts")
        other.append(events(days=1, per_day=5))
        first = n(cat10.sql(q))
        assert first > 0
        writer = lamina.connect(warehouse=str(tmp_path / "wh"))  # another Catalog object
        try:
            writer.load_table("other").append(events(days=1, per_day=5, start="2024-01-02"))
        finally:
            writer.close()
        second = n(cat10.sql(q))
        assert second > first
        child = textwrap.dedent(
            f"""
            import lamina
            from tests.helpers import events
            cat = lamina.connect(warehouse={str(tmp_path / "wh")!r})
            cat.load_table("events").append(events(days=1, per_day=7, start="2024-01-02"))
            cat.close()
            """
        )
        done = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).parent.parent)
        assert done.returncode == 0
        assert n(cat10.sql(q)) > second
    assert parsed == [q]  # the failed query parsed; then remembered


def test_one_day_query_reads_only_that_days_file(cat10: lamina.Catalog) -> None:
    """Pruned from the cached plan: the other days' files are never opened."""
    assert n(cat10.sql("select count(*) from events")) == 300  # caches the full plan
    t = cat10.load_table("events")
    for seg in t.segments():
        if seg.interval != Interval.parse("2024-01-04/2024-01-05"):
            assert seg.location is not None
            os.remove(seg.location)
    assert n(cat10.sql(one_day(4))) == 30
    with pytest.raises(SqlError):
        cat10.sql("select count(*) from events")


def test_pruned_views_are_private_to_their_query(cat10: lamina.Catalog) -> None:
    """Threads running differently pruned queries at once never see each other's view."""
    expected = {d: 30 for d in range(1, 11)}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(40):
                day = (k * 3 + i) % 10 + 1
                if i % 4 == 3:
                    assert n(cat10.sql("select count(*) from events")) == 300
                else:
                    assert n(cat10.sql(one_day(day))) == expected[day]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert n(cat10.sql("select count(*) from events")) == 300  # nothing leaked


def test_files_removed_under_a_cached_plan_are_planned_again(cat10: lamina.Catalog) -> None:
    t = cat10.load_table("events")
    t.set_properties(replaced_segments_retention="0s")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    calls = 0

    def plan_then_replace(name: str, as_of: None = None) -> ScanPlan:
        """Plans, then (first time only) an overwrite and retention delete its files."""
        nonlocal calls
        calls += 1
        plan = plan_scan(snapshot(cat10.context.db, name))
        if calls == 1:
            t.overwrite(events(days=10, per_day=2))
            cat10.run_retention(now=later)
        return plan

    engine = SqlEngine(lambda names: latest_seqs(cat10.context.db, names), plan_then_replace)
    try:
        assert n(engine.sql("select count(*) from events")) == 20
        assert calls == 2
    finally:
        engine.close()


def test_a_dropped_table_is_not_answered_from_the_cache(cat10: lamina.Catalog) -> None:
    assert n(cat10.sql("select count(*) from events")) == 300
    cat10.drop_table("events")
    with pytest.raises(SqlError, match="events"):
        cat10.sql("select count(*) from events")
    t = cat10.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=7))
    assert n(cat10.sql("select count(*) from events")) == 7


def test_an_emptied_table_reads_empty(cat10: lamina.Catalog) -> None:
    t = cat10.load_table("events")
    assert n(cat10.sql("select count(*) from events")) == 300
    t.delete_segments([s.id for s in t.segments()])
    assert n(cat10.sql("select count(*) from events")) == 0
    # by any name: the shared view itself reads empty (a query's own view shadowed it
    # for unqualified names only, and memory.main.events read the old snapshot)
    for name in ("main.events", "memory.main.events", "memory.events"):
        assert n(cat10.sql(f"select count(*) from {name}")) == 0, name
    assert cat10.sql("select * from events").schema.names == SCHEMA.names
    assert n(cat10.sql(one_day(2))) == 0
    t.append(events(days=1, per_day=7))
    assert n(cat10.sql("select count(*) from memory.main.events")) == 7


def test_statements_other_than_select_leave_nothing_behind(cat10: lamina.Catalog) -> None:
    cat10.sql("create table scratch as select 1 as x")
    cat10.sql("create or replace view events as select 42 as x")
    with pytest.raises(SqlError, match="scratch"):
        cat10.sql("select * from scratch")
    assert n(cat10.sql("select count(*) from events")) == 300
    assert cat10.sql("create table s2 as select count(*) from events").num_rows in (0, 1)


def test_parse_errors_and_failures_are_sql_errors(cat10: lamina.Catalog) -> None:
    with pytest.raises(SqlError, match="parse"):
        cat10.sql("selec * from events")
    with pytest.raises(SqlError, match="query failed"):
        cat10.sql("select nope from events")
    before = n(cat10.sql("SELECT count(*) AS n FROM events"))
    for write, advice in (
        ("INSERT INTO events SELECT * FROM events", "write with t.append"),
        ("DELETE FROM events", r"use t\.delete\(where\)"),  # docs/rowlevel.md
    ):
        with pytest.raises(SqlError, match=f"cannot change them: {advice}"):
            cat10.sql(write)
    assert n(cat10.sql("SELECT count(*) AS n FROM events")) == before


def test_joins_using_columns(cat10: lamina.Catalog) -> None:
    """DuckDB binds ``JOIN ... USING`` to find the tables a query names (it fails
    without them); the tables come from the parse tree then, CTEs included."""
    other = cat10.create_table("other", schema=SCHEMA, time_column="ts")
    other.append(events(days=1, per_day=5))
    q = "SELECT count(*) AS n FROM events JOIN other USING ({c})"
    on = "SELECT count(*) AS n FROM events e JOIN other o ON e.{c} = o.{c}"
    col = "k"
    assert n(cat10.sql(q.format(c=col))) == n(cat10.sql(on.format(c=col))) > 0
    cte = f"WITH x AS (SELECT * FROM events) SELECT count(*) AS n FROM x JOIN other USING ({col})"
    assert n(cat10.sql(cte)) == n(cat10.sql(on.format(c=col)))
    with pytest.raises(SqlError, match="query failed"):
        cat10.sql(f"SELECT count(*) FROM events JOIN nope USING ({col})")


def test_close_then_query_again(cat10: lamina.Catalog) -> None:
    assert n(cat10.sql("select count(*) from events")) == 300
    cat10.close()
    assert n(cat10.sql(one_day(1))) == 30  # a new connection, lazily


def test_latest_seqs_matches_names_regardless_of_case(cat10: lamina.Catalog) -> None:
    t = cat10.load_table("events")
    got = latest_seqs(cat10.context.db, ["EVENTS", "missing"])
    assert list(got) == ["events"]
    assert got["events"][1] == t.snapshot().seq
    t.append(events(days=1, per_day=1))
    assert latest_seqs(cat10.context.db, ["events"])["events"][1] == got["events"][1] + 1
    assert latest_seqs(cat10.context.db, []) == {}


# -- count ----------------------------------------------------------------------------


def month_under_days(cat: lamina.Catalog) -> lamina.Table:
    """A DAY table whose January is one MONTH segment, one day of it overwritten:
    the month segment is read with row ranges (partial overshadowing)."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    parts = split_by_chunk(
        events(days=31, per_day=10, start="2024-01-01"), "ts", Granularity.MONTH, 10_000
    )
    with WriteTransaction(cat.context, t._handle.record, "APPEND", {}) as txn:
        txn.inflight()
        txn.publish(AppendPlan(files=tuple(write_parts(cat.warehouse, txn.dir, parts))))
    t.overwrite(events(days=1, per_day=3, start="2024-01-05", seed=1))
    t.append(events(days=2, per_day=4, start="2024-02-01"))
    return t


def delete_data_files(cat: lamina.Catalog, t: lamina.Table) -> int:
    files = glob.glob(os.path.join(cat.warehouse.path(t.name), "**", "*.parquet"), recursive=True)
    for f in files:
        os.remove(f)
    return len(files)


@pytest.mark.parametrize("partial", [False, True])
def test_count_equals_rows_read(local_cat: lamina.Catalog, partial: bool) -> None:
    if partial:
        t = month_under_days(local_cat)
        expected = 310 - 10 + 3 + 8
    else:
        t = local_cat.create_table("events", schema=SCHEMA, time_column="ts")
        t.append(events(days=3, per_day=20))
        t.overwrite(events(days=1, per_day=5, start="2024-01-02"))
        expected = 20 + 5 + 20
    assert any(task.keep is not None for task in t.scan().tasks) == partial
    assert t.count() == len(t.to_arrow()) == expected


def test_count_without_row_ranges_reads_no_file(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=3, per_day=20))
    before = t.count()
    assert delete_data_files(local_cat, t) == 3
    assert t.count() == before == 60
    with pytest.raises(SnapshotNotFoundError):
        t.to_arrow()


def test_count_with_row_ranges_reads_the_files(local_cat: lamina.Catalog) -> None:
    t = month_under_days(local_cat)
    assert t.count() == 311
    assert delete_data_files(local_cat, t) > 0
    with pytest.raises(SnapshotNotFoundError):
        t.count()


def test_count_reads_only_the_files_shown_in_part(local_cat: lamina.Catalog) -> None:
    """A review: with one segment shown in part, count read the time column of every
    file of the table (`lamina tables` over a 6M-row table: 0.30 s -> 0.68 s, 47 -> 271
    MB). The files shown whole are not read: deleting them changes nothing."""
    t = month_under_days(local_cat)
    whole = [task.segment.location for task in t.scan().tasks if task.keep is None]
    assert len(whole) == 3  # the overwritten day and February's two
    for path in whole:
        os.remove(path)
    assert t.count() == 311


def test_an_empty_answer_has_the_types_of_the_files(cat: lamina.Catalog) -> None:
    """What a type hunt found: with no file to read (an empty table, a day pruned
    away) the view came from an empty Arrow table, which DuckDB types otherwise than
    Parquet files: a duration became an INTERVAL (``wait > 60`` failed) and a
    decimal256 could not be read at all."""
    from decimal import Decimal

    schema = pa.schema(
        [
            ("ts", pa.timestamp("s")),
            ("wait", pa.duration("s")),
            ("amt", pa.decimal256(40, 2)),
            ("tags", pa.list_(pa.int32(), 2)),
        ]
    )
    t = cat.create_table("d", schema, time_column="ts")
    query = "SELECT * FROM d WHERE ts >= TIMESTAMP '2024-01-01' AND ts < TIMESTAMP '2024-01-02'"
    empty = cat.sql(query)
    t.append(
        pa.table(
            {
                "ts": pa.array([dt.datetime(2024, 1, 1, 5)], pa.timestamp("s")),
                "wait": pa.array([90], pa.duration("s")),
                "amt": pa.array([Decimal("1.50")], pa.decimal256(40, 2)),
                "tags": pa.array([[1, 2]], pa.list_(pa.int32(), 2)),
            }
        )
    )
    full = cat.sql(query)
    pruned = cat.sql(query.replace("2024-01-0", "2025-01-0"))
    assert full.num_rows == 1 and empty.num_rows == 0 and pruned.num_rows == 0
    assert empty.schema == full.schema == pruned.schema
    got = cat.sql(
        "SELECT count(*) AS n, sum(amt) AS s FROM d WHERE wait > 60 AND ts < TIMESTAMP '2000-01-01'"
    )
    assert got.to_pylist() == [{"n": 0, "s": None}]
