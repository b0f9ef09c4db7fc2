"""Spark's path of the schema rules (tests/test_schema_missing_columns.py and others
for Arrow's): a DataFrame without a nullable column writes nulls there, names match
ignoring case, naive (TIMESTAMP_NTZ) times go into a UTC column as UTC wall-clock
times whatever the session's time zone, epoch numbers into a ``time_unit`` table, and
a null in a NOT NULL column names the row, not a file."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.errors import SchemaError


def test_spark_writes_follow_the_schema_rules(spark: Any, local_cat: lamina.Catalog) -> None:
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            pa.field("user", pa.string(), nullable=False),
            ("n", pa.int64()),
        ]
    )
    t = local_cat.create_table("e", schema, time_column="ts")
    t.add_columns(pa.field("country", pa.string()))
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # not UTC: no matter
    try:
        df = spark.sql(
            "SELECT TIMESTAMP_NTZ'2024-01-01 23:30:00.000001' AS TS, 'ann' AS User, 1L AS n"
        )
        t.append(df)  # no country; TS, User spelled otherwise; a naive time
        bad = spark.sql("SELECT TIMESTAMP_NTZ'2024-01-02 00:00:00' AS ts, 7L AS n, "
                        "CAST(NULL AS STRING) AS user")  # fmt: skip
        with pytest.raises(SchemaError, match=r"'user' is NOT NULL .*\"n\":7") as info:
            t.append(bad)
        assert "/data/c" not in str(info.value)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    got = t.to_arrow().to_pylist()
    assert got == [
        {
            "ts": dt.datetime(2024, 1, 1, 23, 30, 0, 1, tzinfo=dt.UTC),
            "user": "ann",
            "n": 1,
            "country": None,
        }
    ]
    opts = {"table": "e", "catalog": local_cat.url, "warehouse": local_cat.warehouse.location}
    source = spark.sql("SELECT TIMESTAMP'2024-01-05 00:00:00Z' AS ts, 'bob' AS USER")
    source.write.format("lamina").options(**opts).mode("append").save()  # lacks n, country
    bob = [r for r in local_cat.load_table("e").to_arrow().to_pylist() if r["user"] == "bob"]
    assert [(r["n"], r["country"]) for r in bob] == [(None, None)]
    epoch = local_cat.create_table("m", "ts long, v long", time_column="ts", time_unit="ms")
    epoch.append(spark.sql("SELECT 1704067200123L AS ts, 1L AS v"))
    assert epoch.to_arrow().column("ts").to_pylist() == [
        dt.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)
    ]
