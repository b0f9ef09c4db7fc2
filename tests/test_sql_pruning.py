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
        # date arithmetic, as TPC-H writes its ranges
        (
            "ts >= DATE '2024-01-03' and ts < DATE '2024-01-03' + INTERVAL 1 DAY",
            "2024-01-03/2024-01-04",
        ),
        (
            "ts >= TIMESTAMP '2024-03-01' - INTERVAL '2' MONTH and ts < '2024-01-05'",
            "2024-01-01/2024-01-05",
        ),
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
        "select * from events where ts >= k + interval 1 day",
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


def _answers(cat: lamina.Catalog, name: str, queries: list[str]) -> None:
    """cat.sql answers each query as DuckDB does over the table's rows, unpruned."""
    reference = duckdb.connect()
    reference.execute("SET TimeZone='UTC'")
    reference.register(name, cat.load_table(name).to_arrow())
    for q in queries:
        want = sorted(reference.execute(q).fetchall())
        assert sorted(tuple(r.values()) for r in cat.sql(q).to_pylist()) == want, q


def test_a_date_column_against_a_timestamp_is_compared_as_duckdb_widens_it(
    local_cat: lamina.Catalog,
) -> None:
    # DuckDB compares a DATE with a TIMESTAMP as midnight of that day: d < noon of Jan 2
    # holds Jan 2. Read as a date, the literal would have pruned Jan 2's segment.
    import datetime as dt

    schema = pa.schema([("d", pa.date32())])
    q = "select * from events where d < TIMESTAMP '2024-01-02 12:00:00'"
    assert _bound(q, schema, "d") == Interval.parse("-inf/2024-01-02T12:00:00")
    s = pa.schema([pa.field("k", pa.int64(), nullable=False), ("d", pa.date32())])
    for name, pk in (("plain", None), ("up", ["k"])):
        t = local_cat.create_table(name, s, time_column="d", primary_key=pk)
        days = [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(4)]
        t.append(pa.table({"k": list(range(4)), "d": days}, schema=s))
        _answers(
            local_cat,
            name,
            [
                f"select k from {name} where d < TIMESTAMP '2024-01-02 12:00:00'",
                f"select k from {name} where d < TIMESTAMPTZ '2024-01-03 06:00:00+00'",
                f"select k from {name} where d <= TIMESTAMP '2024-01-02 12:00:00'",
                f"select k from {name} where d > TIMESTAMP '2024-01-02 12:00:00'",
                f"select k from {name} where d = TIMESTAMP '2024-01-03'",
                f"select k from {name} where d between TIMESTAMP '2024-01-01 06:00' "
                "and TIMESTAMP '2024-01-02 06:00'",
                f"select k from {name} where d < '2024-01-03 12:00:00'",
            ],
        )


def test_a_nanosecond_column_against_a_literal_below_a_microsecond(
    local_cat: lamina.Catalog,
) -> None:
    # the literal is read as the column's TIMESTAMP_NS: 0.0000005 s after midnight is
    # after the next day's first rows (read as microseconds it was midnight itself)
    s = pa.schema([pa.field("k", pa.int64(), nullable=False), ("ts", pa.timestamp("ns"))])
    day2 = 1_704_153_600_000_000_000  # 2024-01-02 in ns
    for name, pk in (("plain", None), ("up", ["k"])):
        t = local_cat.create_table(name, s, time_column="ts", primary_key=pk)
        ts = [day2 - 1, day2, day2 + 400, day2 + 600, day2 + 86_400_000_000_000]
        t.append(pa.table({"k": list(range(5)), "ts": pa.array(ts, pa.timestamp("ns"))}))
        _answers(
            local_cat,
            name,
            [
                f"select k from {name} where ts < '2024-01-02 00:00:00.0000005'",
                f"select k from {name} where ts <= '2024-01-02 00:00:00.0000004'",
                f"select k from {name} where ts > '2024-01-02 00:00:00.0000005'",
                f"select k from {name} where ts = '2024-01-02 00:00:00.0000004'",
                f"select k from {name} where ts >= TIMESTAMP_NS '2024-01-02 00:00:00.0000005'",
            ],
        )
