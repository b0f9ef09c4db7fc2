"""The command line's table commands: ``describe``, ``drop-table``,
``set-properties``/``unset-properties``, ``retention --dry-run`` and exactly-once
``ingest --txn``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

import lamina
from lamina.cli import app
from lamina.core.schema_text import parse_schema

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
SCHEMA = "ts:timestamp[us, tz=UTC],k:int64,v:float64"


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


@pytest.fixture
def cat(wh: str) -> lamina.Catalog:
    c = lamina.connect(warehouse=wh)
    yield c
    c.close()


def run(wh: str, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, ["--warehouse", wh, *args], input=input)


def ok(wh: str, *args: str, input: str | None = None) -> str:
    result = run(wh, *args, input=input)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(wh: str, *args: str, code: int = 1) -> str:
    result = run(wh, *args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.stderr


def _rows(days: list[int], k0: int = 0) -> pa.Table:
    ts = [dt.datetime(2024, 1, 1 + d, tzinfo=dt.UTC) for d in days]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": pa.array(range(k0, k0 + len(ts)), pa.int64()),
            "v": pa.array([1.5] * len(ts)),
        }
    )


@pytest.fixture
def events(cat: lamina.Catalog) -> lamina.Table:
    t = cat.create_table("events", parse_schema(SCHEMA), "ts", "DAY", {"owner": "ops"})
    t.append(_rows([0, 1, 2]))
    return t


def test_describe_shows_definition_and_counts(wh: str, events: lamina.Table) -> None:
    out = ok(wh, "describe", "events")
    assert "time column  ts" in out and "granularity  DAY" in out
    assert "rows         3" in out and "3 visible" in out and "(latest: 1)" in out
    assert "timestamp[us, tz=UTC]" in out and "owner=ops" in out
    data = json.loads(ok(wh, "describe", "events", "-f", "json"))
    assert data["rows"] == 3 and data["segments"] == 3 and data["commits"] == 1
    assert data["size_bytes"] == sum(s.size_bytes for s in events.segments())
    assert data["columns"][0] == {
        "name": "ts",
        "type": "timestamp[us, tz=UTC]",
        "nullable": True,
        "role": "time",
    }
    assert data["properties"]["owner"] == "ops" and data["primary_key"] is None
    lines = ok(wh, "describe", "events", "-f", "csv").splitlines()
    assert len(lines) == 4 and lines[0].endswith("column,type,nullable,role")

    assert "no table named 'nope'" in fails(wh, "describe", "nope")


def test_describe_an_upsert_table_names_its_key(wh: str, cat: lamina.Catalog) -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64(), False)])
    cat.create_table("planes", schema, "ts", "DAY", primary_key=["id"])
    data = json.loads(ok(wh, "describe", "planes", "-f", "json"))
    assert data["primary_key"] == ["id"] and data["rows"] == 0
    assert [c["role"] for c in data["columns"]] == ["time", "key"]
    assert "primary key  id" in ok(wh, "describe", "planes")


def test_drop_table_asks_first(wh: str, events: lamina.Table, cat: lamina.Catalog) -> None:
    result = run(wh, "drop-table", "events", input="n\n")
    assert result.exit_code == 1 and "nothing dropped" in result.stderr
    assert "drop table events (3 segments, 3 rows" in result.stdout
    assert cat.list_tables() == ["events"]
    out = ok(wh, "drop-table", "events", input="y\n")
    assert "dropped table events" in out and cat.list_tables() == []
    cat.create_table("again", parse_schema(SCHEMA), "ts")
    assert "dropped table again" in ok(wh, "drop-table", "again", "--yes")
    assert not (Path(wh) / "again").exists()
    assert "no table named 'again'" in fails(wh, "drop-table", "again", "-y")


def test_set_and_unset_properties(wh: str, events: lamina.Table, cat: lamina.Catalog) -> None:
    out = ok(wh, "set-properties", "events", "team=data", "target_rows_per_segment=5000")
    assert "set on events: target_rows_per_segment=5000, team=data" in out
    props = cat.load_table("events").properties
    assert props["team"] == "data" and props["target_rows_per_segment"] == "5000"

    # refused values change nothing: all or none
    err = fails(wh, "set-properties", "events", "team=x", "target_rows_per_segment=lots")
    assert "target_rows_per_segment" in err
    assert cat.load_table("events").properties["team"] == "data"
    assert "KEY=VALUE" in fails(wh, "set-properties", "events", "novalue", code=2)
    fails(wh, "set-properties", "events", code=2)  # nothing to set
    assert "retention" in fails(wh, "set-properties", "events", "replaced_segment_retention=1h")

    out = ok(wh, "unset-properties", "events", "team", "target_rows_per_segment")
    assert "unset on events: target_rows_per_segment (unset), team (unset)" in out
    assert "team" not in cat.load_table("events").properties
    assert "no property of events changed" in ok(wh, "unset-properties", "events", "team")


def test_retention_dry_run_deletes_nothing(wh: str, events: lamina.Table) -> None:
    events.overwrite(_rows([1], k0=10))  # day 1's first segment is replaced
    visible = {s.id for s in events.segments()}
    replaced = [s for s in events.segments(all=True) if s.location and s.id not in visible]
    stray = Path(wh) / "events" / "data" / "stray.parquet"
    stray.write_bytes(b"not a segment")
    later = "2100-01-01T00:00:00"
    out = ok(wh, "retention", "--dry-run", "--now", later)
    listed = [line.split() for line in out.splitlines() if line.startswith(("segment", "orphan"))]
    assert ["orphan", "events/data/stray.parquet"] in listed
    segs = [p for kind, p in listed if kind == "segment"]
    assert len(segs) == len(replaced) == 1
    assert "would delete 1 segment file and 1 orphan file; nothing was deleted" in out
    assert stray.exists() and (Path(wh) / segs[0]).exists()
    assert events.count(as_of=1) == 3  # the snapshot before the overwrite still reads

    out = ok(wh, "retention", "--now", later)
    assert "deleted 1 segment file and 1 orphan file" in out
    assert not stray.exists() and not (Path(wh) / segs[0]).exists()
    again = ok(wh, "retention", "--dry-run", "--now", later)
    assert "would delete 0 segment files and 0 orphan files" in again


def test_ingest_txn_applies_once(wh: str, tmp_path: Path, events: lamina.Table) -> None:
    data = tmp_path / "day.csv"
    data.write_text("ts,k,v\n2024-01-05T00:00:00,7,1.0\n")
    out = ok(wh, "ingest", "events", str(data), "--txn", "nightly:20240105")
    assert "1 row, 1 segment added" in out
    out = ok(wh, "ingest", "events", str(data), "--txn", "nightly:20240105")  # the retry
    assert "skipped" in out and "nothing written" in out
    ok(wh, "ingest", "events", str(data), "--txn", "nightly:20240104")  # an older version
    assert events.count() == 4
    ok(wh, "ingest", "events", str(data), "--txn", "nightly:20240106")
    assert events.count() == 5

    for bad in ("nightly", "nightly:x", ":3", "nightly:-1"):
        assert "APP:VERSION" in fails(wh, "ingest", "events", str(data), "--txn", bad, code=2)
    assert events.count() == 5


def test_usage_errors_exit_2(wh: str, tmp_path: Path, events: lamina.Table) -> None:
    data = tmp_path / "day.csv"
    data.write_text("ts,k,v\n2024-01-05T00:00:00,7,1.0\n")
    err = fails(wh, "ingest", "events", str(data), "--local-max-bytes", "lots", code=2)
    assert "--local-max-bytes" in err and "2GB" in err
    fails(wh, "push", "events", str(data), "--local-max-bytes", "1XB", code=2)
    fails(wh, "upsert", "events", str(data), "--local-max-bytes", "", code=2)
    ok(wh, "ingest", "events", str(data), "--local-max-bytes", "1.5MB")
    for args in (
        ["timeline", "events", "-i", "yesterday"],
        ["ingest", "events", str(data), "-m", "overwrite", "-i", "2024-01-02"],
        ["push", "events", str(data), "-i", "2024-01-02/2024-01-01"],
        ["compact", "events", "--interval", "soon"],
        ["retention", "--now", "later"],
    ):
        assert "Invalid value for" in fails(wh, *args, code=2), args
    fails(wh, "describe", code=2)
    fails(wh, "drop-table", code=2)
    fails(wh, "unset-properties", "events", code=2)
