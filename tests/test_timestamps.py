"""One timestamp rule: every schema lamina infers (CSV, JSON, Parquet files, a bare
``timestamp`` in a schema string, columns a write's ``evolve`` adds) types times as
``timestamp[us, tz=UTC]``; naive and UTC-aware inputs convert into each other
losslessly (a naive time is a UTC wall-clock time); nanoseconds go into microseconds
only when none is lost, else a SchemaError that says so."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.core.schema_text import parse_type
from lamina.errors import SchemaError

UTC_US = pa.timestamp("us", tz="UTC")


def test_naive_and_aware_inputs_convert_into_each_other(local_cat: lamina.Catalog) -> None:
    aware = local_cat.create_table("a", pa.schema([("ts", UTC_US), ("v", pa.int64())]), "ts")
    # pandas datetime64[ns], as Spark's toPandas() gives them: naive nanoseconds
    frame = pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 23:30", "2024-01-02 00:15"])})
    assert str(frame["ts"].dtype) == "datetime64[ns]"
    aware.append(frame.assign(v=[1, 2]))
    paris = pa.timestamp("us", tz="Europe/Paris")
    aware.append(
        pa.table({"ts": pa.array([dt.datetime(2024, 1, 3, tzinfo=dt.UTC)], paris), "v": [3]})
    )
    got = aware.to_arrow().sort_by("v")
    assert got.schema.field("ts").type == UTC_US
    assert [t.isoformat() for t in got.column("ts").to_pylist()] == [
        "2024-01-01T23:30:00+00:00",  # the wall-clock time, read as UTC
        "2024-01-02T00:15:00+00:00",
        "2024-01-03T00:00:00+00:00",  # the same instant
    ]
    assert sorted(str(s.interval) for s in aware.segments())[0].startswith("2024-01-01T")
    naive = local_cat.create_table("n", pa.schema([("ts", pa.timestamp("us"))]), "ts")
    at = dt.datetime(2024, 1, 1, 1, tzinfo=dt.UTC)
    naive.append(pa.table({"ts": pa.array([at], paris)}))  # 02:00 in Paris, 01:00 UTC
    assert naive.to_arrow().column("ts").to_pylist() == [dt.datetime(2024, 1, 1, 1)]


def test_nanoseconds_go_into_microseconds_only_when_none_is_lost(
    local_cat: lamina.Catalog,
) -> None:
    t = local_cat.create_table("a", pa.schema([("ts", UTC_US)]), "ts")
    t.append(pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 00:00:00.000001"])}))
    finer = pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 00:00:00.000000001"])})
    with pytest.raises(SchemaError, match="finer than .* never truncates .*dt.floor\\('us'\\)"):
        t.append(finer)
    assert t.count() == 1 and len(t.history()) == 1


def test_schema_strings_follow_the_rule() -> None:
    assert parse_type("timestamp") == UTC_US  # Spark's TIMESTAMP: an instant
    assert parse_type("timestamp_ntz") == pa.timestamp("us")
    assert parse_type("timestamp[us]") == pa.timestamp("us")  # Arrow's own spelling: as written


def test_every_inferred_table_gets_utc_microseconds(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})

    def ok(*args: str) -> None:
        got = runner.invoke(app, ["--warehouse", wh, *args])
        assert got.exit_code == 0, got.output

    (tmp_path / "a.csv").write_text("ts,v\n2024-01-01 10:00:00,1\n")
    naive_ns = pa.table(
        {"ts": pa.array([dt.datetime(2024, 1, 1, 11)], pa.timestamp("ns")), "v": [2]}
    )
    pq.write_table(naive_ns, tmp_path / "b.parquet")  # pandas-style: naive nanoseconds
    ok("ingest", "csv_born", str(tmp_path / "a.csv"), "--create", "-t", "ts", "-e", "local")
    ok("ingest", "csv_born", str(tmp_path / "b.parquet"), "-e", "local")  # converted
    ok("ingest", "pq_born", str(tmp_path / "b.parquet"), "--create", "-t", "ts", "-e", "local")
    ok("create-table", "like_pq", "--like", str(tmp_path / "b.parquet"), "-t", "ts")
    ok("create-table", "text", "-s", "ts timestamp, v long", "-t", "ts")
    with lamina.connect(warehouse=wh) as cat:
        for name in ("csv_born", "pq_born", "like_pq", "text"):
            assert cat.load_table(name).schema.field("ts").type == UTC_US, name
        rows = cat.load_table("csv_born").to_arrow().sort_by("v").column("ts").to_pylist()
    assert [r.hour for r in rows] == [10, 11]
