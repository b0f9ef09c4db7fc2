"""cat.sql prunes segments by time bounds only when that cannot change the answer."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

import lamina
from lamina.core.interval import Interval
from lamina.engines.sql_bounds import time_bound
from tests.helpers import SCHEMA, events


@pytest.fixture
def cat10(local_cat: lamina.Catalog) -> lamina.Catalog:
    t = local_cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=10, per_day=30))
    return local_cat


def _bound(query: str, schema: pa.Schema = SCHEMA, column: str = "ts") -> Interval | None:
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    return time_bound(con, query, "events", column, schema)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("ts >= '2024-01-03' and ts < '2024-01-04'", "2024-01-03/2024-01-04"),
        ("ts >= TIMESTAMP '2024-01-03' and k > 5 and ts < '2024-01-04'", "2024-01-03/2024-01-04"),
        ("'2024-01-03' <= e.ts and '2024-01-04' > e.ts", "2024-01-03/2024-01-04"),
        (
            "ts between '2024-01-03' and '2024-01-03 23:59:59'",
            "2024-01-03/2024-01-03T23:59:59.000001",
        ),
        ("ts <= '2024-01-04'", "-inf/2024-01-04T00:00:00.000001"),
        ("ts = '2024-01-04 12:00'", "2024-01-04T12:00:00/2024-01-04T12:00:00.000001"),
    ],
)
def test_bounds_extracted(where: str, expected: str) -> None:
    assert _bound(f"select * from events e where {where}") == Interval.parse(expected)


@pytest.mark.parametrize(
    "query",
    [
        "select * from events where ts >= '2024-01-03' or ts < '2024-01-02'",
        "select * from events",
        "select * from events a join events b on a.k = b.k where a.ts >= '2024-01-03'",
        "select * from events where ts >= '2024-01-03' and k in (select k from events)",
        "with x as (select * from events) select * from x where ts >= '2024-01-03'",
        "select * from events where cast(ts as date) = '2024-01-03'",
        "select * from events where ts >= now() - interval 1 day",
        "select * from (select * from events) where ts > '2024-01-03'",
    ],
)
def test_no_bound_when_unsure(query: str) -> None:
    assert _bound(query) is None


def test_date_column_bounds() -> None:
    schema = pa.schema([("d", pa.date32())])
    q = "select * from events where d >= DATE '2024-01-03' and d <= '2024-01-04'"
    assert _bound(q, schema, "d") == Interval.parse("2024-01-03/2024-01-05")
    q = "select * from events where d < '2024-01-04'"
    assert _bound(q, schema, "d") == Interval.parse("-inf/2024-01-04")


def test_one_day_query_plans_one_segment(cat10: lamina.Catalog) -> None:
    t = cat10.load_table("events")
    q = "select count(*) from events where ts >= '2024-01-03' and ts < '2024-01-04'"
    plan = t.scan(interval=_bound(q))
    assert len(plan.tasks) == 1 and plan.partial_files == []


QUERIES = [
    "select count(*) n, sum(v) s from events where ts >= '2024-01-03' and ts < '2024-01-05'",
    "select count(*) n from events where ts between '2024-01-03 05:00' and '2024-01-03 07:00'",
    "select count(*) n from events where ts >= '2024-01-03' or k = 3",
    "select count(*) n from events where ts > '2024-01-09 23:00' and ts <= '2024-01-10 01:00'",
    "select count(*) n from events where ts < '2023-01-01'",
    "select count(*) n from events where ts >= '2024-01-05' and ts < '2024-01-03'",
    "select count(*) n from events a join events b on a.k = b.k where a.ts < '2024-01-02'",
]


@pytest.mark.parametrize("query", QUERIES)
def test_pruned_answers_equal_unpruned(cat10: lamina.Catalog, query: str) -> None:
    reference = duckdb.connect()
    reference.execute("SET TimeZone='UTC'")
    reference.register("events", cat10.load_table("events").to_arrow())
    expected = reference.execute(query).fetchall()
    got = cat10.sql(query)
    flat = [v for r in got.to_pylist() for v in r.values()]
    assert flat == pytest.approx([v for row in expected for v in row])
