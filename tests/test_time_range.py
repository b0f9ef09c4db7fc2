"""Times at both ends of the range a table holds: 0001-01-01 to 9999-12-31.

The chunks of 9999-12-31 end in year 10000, past Python's datetime; they are written,
read, compacted and overwritten like any other. Times outside the range are refused
before anything is written.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import lamina
from lamina.errors import TimeColumnError

UTC = dt.UTC
SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
FIRST = dt.datetime(1, 1, 1, tzinfo=UTC)
LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def rows(*pairs: tuple[dt.datetime, int]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([p[0] for p in pairs], SCHEMA.field("ts").type),
            "v": [p[1] for p in pairs],
        },
        schema=SCHEMA,
    )


@pytest.mark.parametrize(
    ("granularity", "last_chunk"),
    [
        ("DAY", ("9999-12-31", "10000-01-01")),
        ("WEEK", ("9999-12-27", "10000-01-03")),
        ("MONTH", ("9999-12-01", "10000-01-01")),
        ("YEAR", ("9999-01-01", "10000-01-01")),
    ],
)
def test_first_and_last_days_are_written_read_compacted_and_overwritten(
    cat: lamina.Catalog, granularity: str, last_chunk: tuple[str, str]
) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity=granularity)
    noon = dt.datetime(9999, 12, 31, 12, tzinfo=UTC)
    t.append(rows((FIRST, 1), (noon, 2), (LAST, 3)))
    t.append(rows((LAST, 4)))
    assert sorted(t.to_arrow()["v"].to_pylist()) == [1, 2, 3, 4]
    last = [s for s in t.segments() if s.interval.start > 0]
    assert {str(s.interval) for s in last} == {
        f"{last_chunk[0]}T00:00:00Z/{last_chunk[1]}T00:00:00Z"
    }
    got = cat.sql("SELECT v FROM t WHERE ts >= TIMESTAMPTZ '9999-12-31 12:00:00+00' ORDER BY v")
    assert got["v"].to_pylist() == [2, 3, 4]
    assert cat.sql("SELECT count(*) AS n FROM t WHERE ts < '0001-01-02'")["n"].to_pylist() == [1]

    assert t.compact() is not None  # the two segments of the last chunk become one
    assert len([s for s in t.segments() if s.interval.start > 0]) == 1
    # a major compaction of the last chunk, named by its end in year 10000
    major = t.compact(mode="major", interval=last_chunk, sort_by=["v"])
    assert major is not None
    assert sorted(t.to_arrow()["v"].to_pylist()) == [1, 2, 3, 4]
    t.overwrite(rows((noon, 9)), interval=last_chunk)
    assert sorted(t.to_arrow()["v"].to_pylist()) == [1, 9]
    assert cat.sql("SELECT sum(v) AS s FROM t")["s"].to_pylist() == [10]
    # and time travel to before the overwrite
    before = [c for c in t.history() if c.id == major.id][0].seq
    assert sorted(t.to_arrow(as_of=before)["v"].to_pylist()) == [1, 2, 3, 4]


def test_an_upsert_table_takes_the_last_day_too(cat: lamina.Catalog) -> None:
    keyed = pa.schema([SCHEMA.field("ts"), pa.field("v", pa.int64(), nullable=False)])
    t = cat.create_table("u", keyed, time_column="ts", primary_key=["v"])
    t.upsert(rows((LAST, 1), (FIRST, 2)).cast(keyed))
    t.upsert(rows((LAST, 2)).cast(keyed))  # key 2 moves from year 1 to year 9999
    assert sorted(t.to_arrow()["ts"].to_pylist()) == [LAST, LAST]
    assert cat.sql("SELECT count(*) AS n FROM u WHERE ts > '9999-01-01'")["n"].to_pylist() == [2]


@pytest.mark.parametrize(
    "us",
    [
        2**62,  # about year 148,000
        -(2**62),  # about 144,000 BC
        253_402_300_800_000_000,  # 10000-01-01 exactly
        -62_135_596_800_000_001,  # a µs before 0001-01-01
    ],
    ids=["far future", "far past", "10000-01-01", "year 0"],
)
def test_times_outside_years_1_to_9999_are_refused(cat: lamina.Catalog, us: int) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="HOUR")
    t.append(rows((LAST, 1)))
    last_us = 253_402_300_800_000_000 - 1
    ts = pa.array([last_us, us], pa.int64()).cast(SCHEMA.field("ts").type)
    bad = pa.table({"ts": ts, "v": [2, 3]}, schema=SCHEMA)
    with pytest.raises(TimeColumnError, match="between 0001-01-01 and 9999-12-31"):
        t.append(bad)
    assert t.to_arrow()["v"].to_pylist() == [1]
    assert [c.action for c in t.history()] == ["APPEND"]


def test_nanosecond_bounds_past_2262_are_compared_as_timestamps(cat: lamina.Catalog) -> None:
    """A MONTH chunk of April 2262 ends past the last nanosecond timestamp (2262-04-11):
    the bounds of the part a newer DAY overwrite leaves of it cannot be TIMESTAMP_NS
    literals."""
    ns = pa.schema([("ts", pa.timestamp("ns")), ("v", pa.int64())])
    t = cat.create_table("n", ns, time_column="ts", segment_granularity="DAY")

    def at(*days: int) -> list[dt.datetime]:
        return [dt.datetime(2262, 4, d) for d in days]

    t.append(pa.table({"ts": pa.array(at(5, 8), pa.timestamp("ns")), "v": [1, 2]}, schema=ns))
    t.compact(mode="major", interval=("2262-04-01", "2262-05-01"), segment_granularity="MONTH")
    t.overwrite(
        pa.table({"ts": pa.array(at(5), pa.timestamp("ns")), "v": [10]}, schema=ns),
        interval=("2262-04-05", "2262-04-06"),
    )
    assert cat.sql("SELECT sum(v) AS s FROM n")["s"].to_pylist() == [12]
    assert sorted(t.to_arrow()["v"].to_pylist()) == [2, 10]


def test_spark_and_duckdb_read_a_month_of_9999_a_day_overwrite_hides_in_part(
    cat: lamina.Catalog, spark: object
) -> None:
    """The part of a MONTH segment a DAY overwrite leaves visible ends in year 10000:
    every engine's bounds take that end."""
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    dec5 = dt.datetime(9999, 12, 5, tzinfo=UTC)
    t.append(rows((dec5, 1), (LAST, 2)))
    t.compact(mode="major", interval=("9999-12-01", "10000-01-01"), segment_granularity="MONTH")
    t.overwrite(rows((dec5, 10)), interval=("9999-12-05", "9999-12-06"))
    assert sorted(t.to_arrow()["v"].to_pylist()) == [2, 10]
    assert cat.sql("SELECT sum(v) AS s FROM t")["s"].to_pylist() == [12]
    df = t.to_spark(spark)
    assert sorted(r["v"] for r in df.select("v").collect()) == [2, 10]


def test_nanoseconds_before_1970_round_down_to_their_day(cat: lamina.Catalog) -> None:
    """-500 ns is 1969-12-31: Arrow's cast rounds toward zero (to 1970-01-01), which
    put the row in the wrong chunk, and an overwrite of 1970-01-01 then deleted it."""
    schema = pa.schema([("ts", pa.timestamp("ns")), ("v", pa.int64())])
    t = cat.create_table("e", schema=schema, time_column="ts", segment_granularity="DAY")

    def ns(*values: int) -> pa.Table:
        return pa.table({"ts": pa.array(values, pa.timestamp("ns")), "v": list(range(len(values)))})

    t.append(ns(-500, 12 * 3600 * 10**9))
    assert sorted((str(s.interval), s.min_time) for s in t.segments()) == [
        ("1969-12-31T00:00:00Z/1970-01-01T00:00:00Z", -1),
        ("1970-01-01T00:00:00Z/1970-01-02T00:00:00Z", 12 * 3600 * 10**6),
    ]
    assert t.to_arrow(interval="1969-12-31/1970-01-01")["v"].to_pylist() == [0]
    assert cat.sql("SELECT v FROM e WHERE ts < '1970-01-01'")["v"].to_pylist() == [0]
    t.overwrite(ns(-400), interval="1969-12-31/1970-01-01")
    assert t.count() == 2


@pytest.mark.parametrize(
    ("typ", "raw"),
    [
        (pa.timestamp("s"), -(-(2**64) // 10**6)),  # µs would wrap around int64
        (pa.timestamp("ms", "UTC"), -(-(2**64) // 10**3)),
        (pa.date32(), 2**31 - 1),
    ],
)
def test_times_whose_microseconds_overflow_are_refused(
    cat: lamina.Catalog, typ: pa.DataType, raw: int
) -> None:
    schema = pa.schema([("ts", typ), ("v", pa.int64())])
    t = cat.create_table("w", schema=schema, time_column="ts", segment_granularity="DAY")
    storage = pa.int32() if typ == pa.date32() else pa.int64()
    with pytest.raises(TimeColumnError, match="between 0001-01-01 and 9999-12-31"):
        t.append(pa.table({"ts": pa.array([raw], storage).cast(typ), "v": [1]}, schema=schema))
    assert t.history() == []
