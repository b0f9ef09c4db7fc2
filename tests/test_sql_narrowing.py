"""Time-bounded SQL: the pruned relation of a table (its files read whole where the
query's WHERE cuts them anyway, written into the query's FROM in place of the
table's name) answers as the whole table does: overwrites that leave a file visible
in pieces, upsert tables' deletion vectors, columns added since, aliases and quoted
names, and errors worded against the user's own text."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.core.interval import Granularity, Interval
from lamina.core.model import TableRecord
from lamina.core.scan import ScanPlan, ScanTask, prune_plan
from lamina.core.segment import Segment
from lamina.engines.duckdb import _uncut
from lamina.errors import SqlError
from tests.helpers import SCHEMA, events

DAY = 86_400_000_000


def whole_table(query: str) -> str:
    """``query`` reading ``events`` through a subquery: no time bound, no pruning."""
    unbound = "FROM (SELECT * FROM events) AS"
    for name in ("FROM events AS", 'FROM "Events" AS', "FROM EVENTS AS", "FROM events e "):
        if name in query:
            return query.replace(name, f"{unbound} e " if name.endswith("e ") else unbound)
    return query.replace('FROM "events"', "FROM events").replace("FROM events", f"{unbound} events")


def rows(t: pa.Table) -> list[tuple[Any, ...]]:
    """The rows, sorted; sums to 9 decimals (their order of addition may differ)."""
    out = [
        tuple(round(x, 9) if isinstance(x, float) else x for x in r.values()) for r in t.to_pylist()
    ]
    return sorted(out, key=repr)


def same_as_whole(cat: lamina.Catalog, query: str) -> int:
    """Check ``query`` answers as over the whole table; its row count."""
    got, want = rows(cat.sql(query)), rows(cat.sql(whole_table(query)))
    assert got == want, query
    return len(got)


def bounds(day: int) -> list[tuple[str, str]]:
    """Time ranges around ``day`` of January 2024: inside, across, open-ended."""
    d = dt.date(2024, 1, day)
    return [
        (f"{d}", f"{d + dt.timedelta(1)}"),
        (f"{d} 06:00:00", f"{d + dt.timedelta(3)} 18:00:00"),
        (f"{d - dt.timedelta(5)}", f"{d + dt.timedelta(9)}"),
        (f"{d}", "2100-01-01"),
        ("1970-01-01", f"{d} 12:00:00"),
    ]


@pytest.fixture
def pieces(local_cat: lamina.Catalog) -> lamina.Catalog:
    """30 days in DAY segments, the week of January 8 compacted into one WEEK segment,
    then days 10-11 overwritten: the week's file is visible in two pieces."""
    t = local_cat.create_table("events", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=30, per_day=20))
    week = ("2024-01-08", "2024-01-15")
    t.compact(week, mode="major", segment_granularity="WEEK", engine="local")
    t.overwrite(events(days=2, per_day=5, start="2024-01-10", seed=9), ("2024-01-10", "2024-01-12"))
    assert len(t.scan().partial_files) == 2
    return local_cat


@pytest.mark.parametrize("day", [2, 9, 10, 11, 12, 15, 29])
def test_bounded_queries_answer_as_the_whole_table(pieces: lamina.Catalog, day: int) -> None:
    for lo, hi in bounds(day):
        where = f"ts >= TIMESTAMP '{lo}' AND ts < TIMESTAMP '{hi}'"
        assert same_as_whole(pieces, f"SELECT ts, k, v, s FROM events WHERE {where}") > 0
        same_as_whole(pieces, f"SELECT count(*), sum(v) FROM events WHERE {where}")


def test_the_pruned_relation_is_written_into_the_from(pieces: lamina.Catalog) -> None:
    where = "ts >= TIMESTAMP '2024-01-09' AND ts < TIMESTAMP '2024-01-13'"
    for query in [
        f"SELECT count(*) FROM events WHERE {where}",
        f"SELECT e.k, e.ts FROM events e WHERE e.{where}",
        f"SELECT events.k FROM events WHERE events.{where}",
        f'SELECT "Events".k FROM "Events" AS "Events" WHERE {where}',
        f'SELECT k FROM "events" WHERE {where}',
        f"SELECT x.k FROM EVENTS AS x WHERE x.{where} ORDER BY x.k LIMIT 3",
        f"SELECT count(*) FROM events WHERE {where} AND s LIKE 'row1%'",
        f"SELECT 'é—' AS x, count(*) FROM events WHERE {where}",  # offsets in bytes
    ]:
        assert same_as_whole(pieces, query) > 0
        assert pieces.sql_engine()._froms[(query, "events")] is not None, query


def test_errors_name_the_users_text_not_the_files(pieces: lamina.Catalog) -> None:
    query = "SELECT nope FROM events WHERE ts >= TIMESTAMP '2024-01-09'"
    with pytest.raises(SqlError, match="nope") as info:
        pieces.sql(query)
    assert "read_parquet" not in str(info.value)
    assert "parquet" not in str(info.value)


def test_upsert_deletion_vectors_apply_to_bounded_queries(local_cat: lamina.Catalog) -> None:
    schema = SCHEMA.set(1, pa.field("k", pa.int64(), nullable=False))
    t = local_cat.create_table(
        "events", schema, time_column="ts", segment_granularity="DAY", primary_key="k"
    )
    first = events(days=10, per_day=20).cast(schema)
    t.upsert(first)
    # a later record for every third key, ten days on: the older rows are hidden
    later = first.filter(pc.equal(pc.bit_wise_and(first["k"], 3), 0))
    shifted = pc.add(later["ts"], pa.scalar(dt.timedelta(days=10), pa.duration("us")))
    t.upsert(later.set_column(0, "ts", shifted))
    assert t.scan().deletes
    for day in (2, 5, 9, 12, 19):
        for lo, hi in bounds(day):
            where = f"ts >= TIMESTAMP '{lo}' AND ts < TIMESTAMP '{hi}'"
            same_as_whole(local_cat, f"SELECT k, ts, v FROM events WHERE {where}")


def test_columns_added_since_read_in_bounded_queries(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("events", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=5, per_day=10))
    t.add_columns(pa.field("extra", pa.int64()))
    later = events(days=5, per_day=10, start="2024-01-06", seed=3)
    later = later.append_column("extra", pa.array(range(len(later)), pa.int64()))
    local_cat.load_table("events").append(later)
    for day in (3, 5, 6, 8):
        for lo, hi in bounds(day):
            where = f"ts >= TIMESTAMP '{lo}' AND ts < TIMESTAMP '{hi}'"
            same_as_whole(local_cat, f"SELECT k, extra FROM events WHERE {where}")


def _plan(segments: list[Segment], spans: list[Interval]) -> ScanPlan:
    table = TableRecord(1, "t", SCHEMA, "ts", Granularity.DAY, properties={})
    tasks = []
    for seg, span in zip(segments, spans, strict=True):
        whole = span == seg.interval
        tasks.append(ScanTask(seg, None if whole else span, span))
    return ScanPlan(table, 7, 3, tasks)


def _seg(i: int, start: int, end: int, lo: int, hi: int) -> Segment:
    return Segment("t", Interval.of(start, end), i, 0, 1, f"/f{i}.parquet", 10, 1, lo, hi)


def test_uncut_reads_whole_what_the_bound_alone_cuts() -> None:
    a = _seg(1, 0, DAY, 0, DAY - 1)
    b = _seg(2, DAY, 2 * DAY, DAY + 10, 2 * DAY - 10)
    c = _seg(3, 2 * DAY, 3 * DAY, 2 * DAY + 5000, 2 * DAY + 9000)  # rows early in its day
    plan = _plan([a, b, c], [a.interval, b.interval, c.interval])
    # no file pruned away: the shared plan itself
    bound = Interval.of(DAY // 2, 3 * DAY)
    assert _uncut(plan, prune_plan(plan, bound), bound) is plan
    # b cut by the bound only: whole; c holds no row inside the bound: not read
    bound = Interval.of(DAY + DAY // 2, 2 * DAY + 1000)
    out = _uncut(plan, prune_plan(plan, bound), bound)
    assert out.reads() == [("/f2.parquet", None)]
    bound = Interval.of(DAY + DAY // 2, 2 * DAY + 6000)
    out = _uncut(plan, prune_plan(plan, bound), bound)
    assert out.reads() == [("/f2.parquet", None), ("/f3.parquet", None)]


def test_uncut_keeps_the_cuts_of_a_file_seen_in_pieces() -> None:
    # one file visible in two pieces (a newer one overshadows its middle)
    a = _seg(1, 0, 4 * DAY, 0, 4 * DAY - 1)
    new = _seg(2, DAY, 2 * DAY, DAY, 2 * DAY - 1)
    pieces = [Interval.of(0, DAY), new.interval, Interval.of(2 * DAY, 4 * DAY)]
    table = TableRecord(1, "t", SCHEMA, "ts", Granularity.DAY, properties={})
    tasks = [ScanTask(a, pieces[0], pieces[0]), ScanTask(new, None, pieces[1])]
    tasks.append(ScanTask(a, pieces[2], pieces[2]))
    plan = ScanPlan(table, 7, 3, tasks)
    bound = Interval.of(DAY // 2, 3 * DAY)  # across both pieces of /f1
    out = _uncut(plan, prune_plan(plan, bound), bound)
    assert out is plan  # nothing pruned: the shared view's cuts
    bound = Interval.of(DAY + 1, 3 * DAY)  # the middle and the second piece
    out = _uncut(plan, prune_plan(plan, bound), bound)
    assert out.reads() == [
        ("/f2.parquet", None),
        ("/f1.parquet", Interval.of(2 * DAY, 3 * DAY)),
    ]
