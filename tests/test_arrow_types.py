"""Real-world Arrow types and input kinds through the local engine."""

from __future__ import annotations

import datetime as dt
import decimal

import pandas as pd
import pyarrow as pa
import pytest

import lamina


@pytest.mark.parametrize(
    "ts_type",
    [
        pa.timestamp("us"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("ns", tz="America/New_York"),
        pa.timestamp("s"),
    ],
)
def test_timestamp_time_columns(local_cat: lamina.Catalog, ts_type: pa.DataType) -> None:
    schema = pa.schema([("ts", ts_type), ("x", pa.int64())])
    t = local_cat.create_table("t", schema=schema, time_column="ts", segment_granularity="HOUR")
    times = [dt.datetime(2024, 3, 10, h, 30, tzinfo=dt.UTC) for h in (1, 1, 5, 23)]
    values = pa.array(times, pa.timestamp("us", tz="UTC")).cast(ts_type)
    t.append(pa.table({"ts": values, "x": [1, 2, 3, 4]}))
    assert len(t.segments()) == 3  # hours 01, 05 and 23 (UTC instants, whatever the zone)
    assert t.to_arrow().schema == schema
    assert t.to_arrow(interval="2024-03-10T01:00:00Z/2024-03-10T02:00:00Z").num_rows == 2
    n = local_cat.sql("select count(*) n from t where ts >= '2024-03-10 05:00:00+00'")
    assert n.to_pydict() == {"n": [2]}


def test_date_time_column_week_and_month(local_cat: lamina.Catalog) -> None:
    schema = pa.schema([("d", pa.date32()), ("x", pa.int64())])
    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 7), dt.date(2024, 1, 8), dt.date(2024, 2, 29)]
    data = pa.table({"d": days, "x": [1, 2, 3, 4]})
    w = local_cat.create_table("w", schema=schema, time_column="d", segment_granularity="WEEK")
    w.append(data)
    weeks = sorted(str(s.interval) for s in w.segments())
    assert weeks[0] == "2024-01-01T00:00:00Z/2024-01-08T00:00:00Z"  # Monday-aligned
    assert len(weeks) == 3
    m = local_cat.create_table("m", schema=schema, time_column="d", segment_granularity="MONTH")
    m.append(data)
    assert len(m.segments()) == 2
    assert m.to_arrow(interval="2024-02-01/2024-03-01").column("x").to_pylist() == [4]
    q = local_cat.sql("select sum(x) s from m where d between DATE '2024-01-02' and '2024-01-08'")
    assert int(q.column("s")[0].as_py()) == 5


def test_decimals_and_string_kinds(local_cat: lamina.Catalog) -> None:
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us")),
            ("amount", pa.decimal128(18, 4)),
            ("name", pa.string_view()),
            ("note", pa.large_string()),
        ]
    )
    t = local_cat.create_table("money", schema=schema, time_column="ts")
    data = pa.table(
        {
            "ts": [dt.datetime(2024, 1, 1, 3), dt.datetime(2024, 1, 2, 4)],
            "amount": pa.array(
                [decimal.Decimal("1.2345"), decimal.Decimal("-7.5")], pa.decimal128(18, 4)
            ),
            "name": pa.array(["a", "b"], pa.string_view()),
            "note": pa.array(["x", None], pa.large_string()),
        }
    )
    t.append(data)
    # string input into string_view / large_string columns is cast safely
    t.append(
        data.cast(
            pa.schema(
                [
                    ("ts", pa.timestamp("us")),
                    ("amount", pa.decimal128(18, 4)),
                    ("name", pa.string()),
                    ("note", pa.string()),
                ]
            )
        )
    )
    out = t.to_arrow()
    stored = schema.set(2, pa.field("name", pa.large_string()))  # views stored as large
    assert t.schema == stored and out.schema == stored and out.num_rows == 4
    total = local_cat.sql("select sum(amount) s from money").column("s")[0].as_py()
    assert total == decimal.Decimal("-12.5310")


def test_input_kinds(local_cat: lamina.Catalog) -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), ("x", pa.int64())])
    t = local_cat.create_table("t", schema=schema, time_column="ts")
    tbl = pa.table({"ts": [dt.datetime(2024, 1, 1)], "x": [1]})
    t.append(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches()))
    t.append(pd.DataFrame({"ts": [pd.Timestamp("2024-01-02")], "x": [2]}))

    class Stream:  # any object speaking the Arrow C stream protocol
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return tbl.__arrow_c_stream__(requested_schema)

    t.append(Stream())
    t.append(tbl.to_batches()[0])
    assert sorted(t.to_pandas()["x"].tolist()) == [1, 1, 1, 2]


@pytest.mark.parametrize(
    "t, why",
    [
        (pa.timestamp("ns"), "nanosecond timestamps"),
        (pa.time64("us"), "times of day"),
        (pa.decimal256(40, 2), "decimals of more than 38 digits"),
        (pa.list_(pa.time32("ms")), "times of day"),
        (pa.uint8(), "unsigned integers"),
        (pa.struct([("u", pa.uint64())]), "unsigned integers"),
    ],
)
def test_spark_reads_of_types_spark_cannot_hold_are_typed_errors(
    cat: lamina.Catalog, t: pa.DataType, why: str
) -> None:
    """They failed only once the DataFrame was evaluated, with a Java error (a Spark
    hunt); refused up front, before any Spark work (no session needed)."""
    table = cat.create_table("t", pa.schema([("ts", pa.timestamp("us")), ("c", t)]), "ts")
    for read in (lambda: table.to_spark(None), lambda: table.read_changes_spark(None, 0)):
        with pytest.raises(lamina.errors.UnsupportedTypeError, match=f"'c': {why}"):
            read()


def test_auto_compaction_of_types_spark_would_change_stays_local(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine='auto' hands runs bigger than LAMINA_LOCAL_MAX_BYTES to Spark, which
    cannot write uint or fixed-size binary columns back as they are: such a table could
    never be compacted once big (a Spark hunt). It stays local; engine='spark' says why."""
    monkeypatch.setenv("LAMINA_LOCAL_MAX_BYTES", "1")  # every run "too big" for here
    schema = pa.schema([("ts", pa.timestamp("us")), ("u", pa.uint32()), ("b", pa.binary(2))])
    t = cat.create_table("t", schema, "ts")
    for i in range(2):
        t.append(pa.table({"ts": [i], "u": [i], "b": [b"ab"]}, schema=schema))
    with pytest.raises(lamina.errors.UnsupportedTypeError, match="engine='local'"):
        t.compact(engine="spark")
    assert t.compact() is not None  # no JVM started: local
    assert len(t.segments()) == 1 and t.to_arrow().column("u").to_pylist() == [0, 1]
