"""Pipelines can be rerun: ``create_table(..., exist_ok=True)`` returns the table of the
same definition and refuses, listing the differences, one that differs; schemas may be
Spark DDL strings; a time column of epoch numbers takes its unit (``time_unit``); a
primary key column typed nullable, as Spark computes it, is a NOT NULL constraint."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.core.columns import EPOCH_UNIT
from lamina.core.schema_text import parse_schema, parse_type
from lamina.errors import SchemaError, TableExistsError, TimeColumnError

DDL = "ts timestamp, v long, id string"


def test_spark_ddl_strings() -> None:
    schema = parse_schema(
        "ts timestamp, n timestamp_ntz, `my col` decimal(10,2) NOT NULL, i int, b bigint,"
        " s short, y byte, f float, d double, ok boolean, day date, raw binary,"
        " tags array<string>, m map<string,int>, st struct<a:int, b string>, x:int64"
    )
    assert schema == pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("n", pa.timestamp("us")),
            pa.field("my col", pa.decimal128(10, 2), nullable=False),
            ("i", pa.int32()),
            ("b", pa.int64()),
            ("s", pa.int16()),
            ("y", pa.int8()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("ok", pa.bool_()),
            ("day", pa.date32()),
            ("raw", pa.binary()),
            ("tags", pa.list_(pa.string())),
            ("m", pa.map_(pa.string(), pa.int32())),
            ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
            ("x", pa.int64()),
        ]
    )
    assert parse_type("LONG") == pa.int64()
    for bad in ("ts", "a array<int,int>", "v long, v int", "`open int"):
        with pytest.raises(SchemaError):
            parse_schema(bad)


def test_exist_ok_returns_the_same_table_and_lists_differences(local_cat: lamina.Catalog) -> None:
    make = {"time_column": "ts", "segment_granularity": "HOUR", "properties": {"a": "1"}}
    t = local_cat.create_table("e", DDL, **make)
    t.append(pa.table({"ts": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], "v": [1], "id": ["x"]}))
    again = local_cat.create_table("e", DDL, **make, exist_ok=True)
    assert again.schema == t.schema and again.count() == 1
    with pytest.raises(TableExistsError, match="already exists"):
        local_cat.create_table("e", DDL, **make)  # without exist_ok
    t.add_columns(pa.field("extra", pa.string()))  # grown since: still the definition
    assert local_cat.create_table("e", DDL, **make, exist_ok=True).schema == t.schema
    other = {
        "time_column": "ts",
        "segment_granularity": "DAY",
        "properties": {"a": "2"},
        "exist_ok": True,
    }
    with pytest.raises(TableExistsError) as info:
        local_cat.create_table("e", "ts timestamp, v int, id string", **other)
    text = str(info.value)
    assert "column 'v': int32 given, int64 in the table" in text
    assert "granularity DAY given, the table has HOUR" in text
    assert "property a='2' given, the table has '1'" in text
    with pytest.raises(TableExistsError, match="primary key|upsert.primary_key"):
        local_cat.create_table("e", DDL, **make, primary_key="id", exist_ok=True)
    assert local_cat.load_table("e").count() == 1


def test_a_time_column_of_epoch_numbers(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", "ts long, v long", time_column="ts", time_unit="ms")
    field = t.schema.field("ts")
    assert field.type == pa.timestamp("ms", tz="UTC") and field.metadata == {EPOCH_UNIT: b"ms"}
    t.append(pa.table({"ts": [1704067200000, 1704153600123], "v": [1, 2]}))  # numbers
    t.append(pa.table({"ts": [dt.datetime(2024, 1, 3, tzinfo=dt.UTC)], "v": [3]}))  # or times
    got = t.to_arrow().sort_by("v").column("ts").to_pylist()
    assert [x.isoformat() for x in got] == [
        "2024-01-01T00:00:00+00:00",
        "2024-01-02T00:00:00.123000+00:00",
        "2024-01-03T00:00:00+00:00",
    ]
    days = sorted(s.interval for s in t.segments())  # chunked by time
    want = [f"2024-01-0{d}T00:00:00Z/2024-01-0{d + 1}T00:00:00Z" for d in (1, 2, 3)]
    assert [str(iv) for iv in days] == want
    again = local_cat.create_table("e", "ts long, v long", "ts", time_unit="ms", exist_ok=True)
    assert again.schema == t.schema
    with pytest.raises(TableExistsError, match="of epoch ms in the table"):
        local_cat.create_table("e", "ts long, v long", "ts", time_unit="s", exist_ok=True)
    with pytest.raises(TimeColumnError, match="time_unit='ms'"):
        local_cat.create_table("f", "ts long", time_column="ts")  # refused, with the way out
    with pytest.raises(TimeColumnError, match="one of s, ms, us, ns"):
        local_cat.create_table("f", "ts long", time_column="ts", time_unit="days")
    with pytest.raises(TimeColumnError, match="epoch numbers"):
        local_cat.create_table("f", "ts timestamp", time_column="ts", time_unit="ms")
    assert local_cat.list_tables() == ["e"]


def test_a_nullable_key_column_is_a_not_null_constraint(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("u", DDL, time_column="ts", primary_key="id")  # id nullable
    assert not t.schema.field("id").nullable
    at = [dt.datetime(2024, 1, 1, h, tzinfo=dt.UTC) for h in range(4)]
    t.upsert(pa.table({"ts": at[:2], "v": [1, 2], "id": ["a", "b"]}))
    bad = pa.table({"ts": at, "v": [3, 4, 5, 6], "id": ["a", None, "c", None]})
    for write in (t.upsert, t.append):
        with pytest.raises(SchemaError, match=r"'id' is NOT NULL .* 2 null\(s\) there: rows 1, 3"):
            write(bad)
    assert t.count() == 2 and len(t.history()) == 1


def test_a_struct_type_with_a_nullable_key_makes_an_upsert_table(
    local_cat: lamina.Catalog,
) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    spark_schema = StructType(  # Spark computes columns nullable: no pyarrow advice needed
        [StructField("ts", TimestampType()), StructField("id", StringType()),
         StructField("v", LongType())]
    )  # fmt: skip
    t = local_cat.create_table("u", spark_schema, time_column="ts", primary_key="id")
    assert t.primary_key == ("id",) and not t.schema.field("id").nullable
    again = local_cat.create_table("u", spark_schema, "ts", primary_key="id", exist_ok=True)
    assert again.schema == t.schema


def test_the_cli_reruns_create_table(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
    args = ["--warehouse", wh, "create-table", "e", "-t", "ts", "-s", "ts long, v long"]
    args += ["--time-unit", "ms"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0 and "created table" in first.stdout, first.output
    again = runner.invoke(app, [*args, "--exist-ok"])
    assert again.exit_code == 0 and "exists with this definition" in again.stdout
    refused = runner.invoke(app, [*args[:-2], "--time-unit", "s", "--exist-ok"])
    assert refused.exit_code == 1 and "another definition" in refused.stderr
    (tmp_path / "a.csv").write_text("ts,v\n1704067200000,1\n2024-01-02T00:00:00Z,2\n")
    got = runner.invoke(
        app, ["--warehouse", wh, "ingest", "e", str(tmp_path / "a.csv"), "-e", "local"]
    )
    assert got.exit_code == 0, got.output
    with lamina.connect(warehouse=wh) as cat:
        days = [x.day for x in cat.load_table("e").to_arrow().sort_by("v").column("ts").to_pylist()]
    assert days == [1, 2]
