"""Tests of the ``lamina`` command line against real warehouses (embedded SQLite)."""

from __future__ import annotations

import bz2
import csv as csv_module
import datetime as dt
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner, Result

import lamina
from lamina import errors
from lamina.cli import app
from lamina.core.schema_text import parse_schema, parse_type
from lamina.engines.files import format_of
from lamina.errors import LaminaError, SchemaError

UTC = dt.UTC
# plain, wide, uncoloured output whatever the environment of the test run
runner = CliRunner(
    env={"COLUMNS": "250", "NO_COLOR": "1", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
)


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


def run(wh: str, *args: str) -> Result:
    return runner.invoke(app, ["--warehouse", wh, *args])


def ok(wh: str, *args: str) -> str:
    result = run(wh, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(wh: str, *args: str, code: int = 1) -> str:
    """Run a command that must fail cleanly; return its (one-line) error message."""
    result = run(wh, *args)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no crash
    assert "Traceback" not in result.output
    if code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return result.stderr


@pytest.fixture
def cat(wh: str) -> Iterator[lamina.Catalog]:
    c = lamina.connect(warehouse=wh)
    yield c
    c.close()


def _day(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(days=day, hours=hour)


def _rows(days: list[int], per_day: int, k0: int = 0) -> pa.Table:
    ts = [_day(d, h) for d in days for h in range(per_day)]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": pa.array(range(k0, k0 + len(ts)), pa.int64()),
            "v": pa.array([float(i) for i in range(len(ts))]),
        }
    )


SCHEMA = "ts:timestamp[us, tz=UTC],k:int64,v:float64"


# -- schema strings, formats -------------------------------------------------------------


def test_parse_schema_types() -> None:
    schema = parse_schema(
        "ts:timestamp[us, tz=UTC], n:timestamp[ns], d:date, day:date32, a:int8, b:uint32,"
        "f:float32, g:double, s:string, ls:large_string, ok:bool, m:decimal(10, 2),"
        "big:decimal(50,5), raw:binary"
    )
    assert schema == pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("n", pa.timestamp("ns")),
            ("d", pa.date32()),
            ("day", pa.date32()),
            ("a", pa.int8()),
            ("b", pa.uint32()),
            ("f", pa.float32()),
            ("g", pa.float64()),
            ("s", pa.string()),
            ("ls", pa.large_string()),
            ("ok", pa.bool_()),
            ("m", pa.decimal128(10, 2)),
            ("big", pa.decimal256(50, 5)),
            ("raw", pa.binary()),
        ]
    )
    # pyarrow's own spellings round-trip
    for t in (pa.timestamp("ms", tz="Europe/Paris"), pa.decimal128(38, 0), pa.date64()):
        assert parse_type(str(t)) == t


@pytest.mark.parametrize(
    "text", ["ts:int65", "ts", "ts:", ":int64", "a:int64,a:int8", "m:decimal128(40,2)"]
)
def test_parse_schema_errors(text: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema(text)


def test_format_of(tmp_path: Path) -> None:
    assert format_of(["a.csv", "b.CSV.gz"]).value == "csv"
    assert format_of(["x.jsonl", "y.ndjson"]).value == "json"
    assert format_of(["part-0.snappy.parquet"]).value == "parquet"
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "_SUCCESS").touch()
    (tmp_path / "dir" / "part-0.parquet").touch()
    assert format_of([str(tmp_path / "dir")]).value == "parquet"
    for bad in (["a.txt"], ["a.csv", "b.parquet"]):
        with pytest.raises(LaminaError, match="--format"):
            format_of(bad)


# -- init, create-table, tables --------------------------------------------------------------


def test_init_with_global_command_and_env_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # init writes ./.lamina.toml
    out = ok(str(tmp_path / "a"), "init")
    assert str(tmp_path / "a") in out and "lamina.db" in out and "tables" in out
    assert (tmp_path / "a" / "lamina.db").exists()

    result = runner.invoke(app, ["init", "--warehouse", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "lamina.db").exists()

    catalog = f"sqlite:///{tmp_path}/elsewhere.db"
    env = {"LAMINA_WAREHOUSE": str(tmp_path / "c"), "LAMINA_CATALOG": catalog}
    result = runner.invoke(app, ["init"], env=env)
    assert result.exit_code == 0, result.output
    assert "elsewhere.db" in result.stdout and (tmp_path / "elsewhere.db").exists()
    assert (tmp_path / "c").is_dir() and not (tmp_path / "c" / "lamina.db").exists()


def test_create_table_with_schema(wh: str, cat: lamina.Catalog) -> None:
    out = ok(
        wh, "create-table", "events", "--time-column", "ts", "--granularity", "hour",
        "--schema", SCHEMA + ",price:decimal(10,2)", "--property", "owner=ops",
        "-p", "target_rows_per_segment=1000",
    )  # fmt: skip
    assert "created table events" in out and "timestamp[us, tz=UTC]" in out
    t = cat.load_table("events")
    assert t.schema == parse_schema(SCHEMA + ",price:decimal(10,2)")
    assert t.time_column == "ts" and t.granularity is lamina.Granularity.HOUR
    assert t.properties.items() >= {"owner": "ops", "target_rows_per_segment": "1000"}.items()

    ok(wh, "create-table", "dims", "--schema", "k:int64,name:string")  # no time column
    assert cat.load_table("dims").granularity is lamina.Granularity.ALL

    out = ok(wh, "tables")
    assert "events" in out and "HOUR" in out and "dims" in out and "ALL" in out


@pytest.mark.parametrize("kind", ["parquet", "csv", "jsonl"])
def test_create_table_like_file(kind: str, wh: str, tmp_path: Path, cat: lamina.Catalog) -> None:
    path = tmp_path / f"sample.{kind}"
    if kind == "parquet":
        pq.write_table(_rows([0], 2), path)
        expected = pa.timestamp("us", tz="UTC")
    elif kind == "csv":
        path.write_text("ts,k,v,name\n2024-01-01 00:00:00,1,1.5,a\n2024-01-01 01:00:00,2,2.5,b\n")
        # pyarrow infers timestamp[s]: widened to lamina's µs, naive times read as UTC, as
        # `ingest --create` and Spark read them (a CLI audit found --like kept them naive)
        expected = pa.timestamp("us", tz="UTC")
    else:
        path.write_text('{"ts": "2024-01-01T00:00:00Z", "k": 1, "v": 1.5}\n')
        expected = pa.timestamp("us", tz="UTC")  # pyarrow's JSON reader drops the zone
    ok(wh, "create-table", "t", "--time-column", "ts", "--like", str(path))
    schema = cat.load_table("t").schema
    assert schema.field("ts").type == expected
    assert schema.field("k").type == pa.int64() and schema.field("v").type == pa.float64()


def test_create_table_errors(wh: str, tmp_path: Path) -> None:
    assert "int65" in fails(wh, "create-table", "t", "--schema", "ts:int65")
    assert "not in the schema" in fails(wh, "create-table", "t", "-t", "when", "-s", SCHEMA)
    assert "invalid table name" in fails(wh, "create-table", "9t", "-s", SCHEMA)
    assert "cannot read" in fails(wh, "create-table", "t", "--like", str(tmp_path / "no.csv"))
    fails(wh, "create-table", "t", code=2)  # neither --schema nor --like
    fails(wh, "create-table", "t", "-s", SCHEMA, "--like", "x.csv", code=2)
    fails(wh, "create-table", "t", "-s", SCHEMA, "-p", "novalue", code=2)
    ok(wh, "create-table", "t", "-t", "ts", "-s", SCHEMA)
    assert "already exists" in fails(wh, "create-table", "t", "-t", "ts", "-s", SCHEMA)


# -- query and inspection over tables written with the library ---------------------------------


@pytest.fixture
def events(wh: str, cat: lamina.Catalog) -> lamina.Table:
    """Days 0-2 appended (v1), day 0 topped up, day 1 overwritten (v2), day 2 deleted (v3)."""
    t = cat.create_table("events", parse_schema(SCHEMA), "ts", "DAY")
    t.append(_rows([0, 1, 2], 3), metadata={"job": "load"})  # commit 1
    t.append(_rows([0], 1, k0=100))  # commit 2: joins day 0's v1 as a new partition
    t.overwrite(_rows([1], 2, k0=200))  # commit 3: day 1 at v2
    t.overwrite(_rows([], 0), interval="2024-01-03/2024-01-04")  # commit 4: day 2 emptied
    return t


def test_query_formats(wh: str, events: lamina.Table) -> None:
    out = ok(wh, "query", "SELECT count(*) AS n, sum(k) AS total FROM events")
    assert "n" in out and "6" in out and "1 row" in out  # 3 + 1 on day 0, 2 on day 1

    out = ok(wh, "query", "SELECT k, ts FROM events ORDER BY k", "--format", "csv")
    lines = out.splitlines()
    assert lines[0] == "k,ts" and lines[1] == "0,2024-01-01T00:00:00+00:00" and len(lines) == 7

    data = json.loads(ok(wh, "query", "SELECT k, v FROM events ORDER BY k", "-f", "json"))
    assert [r["k"] for r in data] == [0, 1, 2, 100, 200, 201]
    jsonl = ok(wh, "query", "SELECT k FROM events ORDER BY k", "-f", "jsonl", "-n", "2")
    assert [json.loads(x) for x in jsonl.splitlines()] == [{"k": 0}, {"k": 1}]

    out = ok(wh, "query", "SELECT k FROM events ORDER BY k", "--limit", "2")
    assert "2 of 6 rows shown" in out and "200" not in out


def test_tables_segments_history(wh: str, events: lamina.Table) -> None:
    out = ok(wh, "tables")
    assert "events" in out and "DAY" in out and " 3 " in out and " 6 " in out

    out = ok(wh, "segments", "events")
    assert "events_20240101T000000Z_20240102T000000Z_v1_p1" in out
    assert "_v2_p0" in out and "_v3_" not in out  # tombstones hold no rows: not listed
    assert "3 visible segments, 6 rows" in out

    out = ok(wh, "segments", "events", "--all")
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.startswith("  ev")}
    assert "overshadowed by v2" in lines["events_20240102T000000Z_20240103T000000Z_v1_p0"]
    assert "overshadowed by v3" in lines["events_20240103T000000Z_20240104T000000Z_v1_p0"]
    assert "tombstone" in lines["events_20240103T000000Z_20240104T000000Z_v3_p0"]
    assert "visible" in lines["events_20240102T000000Z_20240103T000000Z_v2_p0"]
    assert "6 published segments; 3 visible" in out

    out = ok(wh, "segments", "events", "--as-of", "1")
    assert "3 visible segments, 9 rows" in out and "version 1" in out

    out = ok(wh, "history", "events")
    commits = [line.split() for line in out.splitlines()[1:]]
    assert [c[0] for c in commits] == ["1", "2", "3", "4"]  # one number: the version
    assert [c[1] for c in commits] == ["APPEND", "APPEND", "OVERWRITE", "OVERWRITE"]
    assert all(c[2] == "COMPLETED" for c in commits)
    assert "job" not in out  # metadata on request
    assert '{"job": "load"}' in ok(wh, "history", "events", "--metadata")


def test_timeline_shows_versions(wh: str, events: lamina.Table) -> None:
    out = ok(wh, "timeline", "events")
    lines = out.splitlines()
    assert "3 chunks (2 with several versions)" in lines[0]
    assert "version 4" in lines[0]
    body = "\n".join(lines[2:])
    day0, day1, day2 = (
        out.split("2024-01-01")[1].split("2024-01-02")[0],
        out.split("2024-01-02")[1].split("2024-01-03")[0],
        out.split("2024-01-03")[1],
    )
    assert "v1" in day0 and "█" in day0 and "p0..p1" in day0 and "visible" in day0
    assert day1.index("v2") < day1.index("v1")  # highest version first
    assert "overshadowed by v2" in day1 and "░" in day1
    assert "deleted (tombstone)" in day2 and "overshadowed by v3" in day2
    assert "overshadowed" in body and "█ visible" in out  # legend

    past = ok(wh, "timeline", "events", "--as-of", "2")
    assert "overshadowed" not in past.split("█ visible")[0]
    assert "version 2" in past

    only = ok(wh, "timeline", "events", "--interval", "2024-01-02/2024-01-03")
    assert "2024-01-02" in only and "2024-01-01 " not in only and "2024-01-03 " not in only


def test_timeline_limits_long_tables(wh: str, cat: lamina.Catalog) -> None:
    t = cat.create_table("daily", parse_schema(SCHEMA), "ts", "DAY")
    t.append(_rows(list(range(100)), 1))
    out = ok(wh, "timeline", "daily")
    assert "100 chunks" in out and "... 40 more chunks" in out
    assert "2024-02-29" in out and "2024-03-01" not in out  # chunk 60 is the last shown
    full = ok(wh, "timeline", "daily", "--limit", "0")
    assert "more chunks" not in full and "2024-04-09" in full


def test_errors_are_one_red_line(wh: str, events: lamina.Table) -> None:
    for command in ("segments", "timeline", "history"):
        assert "no table named 'nope'; `lamina tables`" in fails(wh, command, "nope")
    assert "query failed" in fails(wh, "query", "SELECT * FROM nope")
    assert "has no version 99" in fails(wh, "timeline", "events", "--as-of", "99")
    assert "`lamina history events`" in fails(wh, "segments", "events", "--as-of", "99")
    assert "START/END" in fails(wh, "timeline", "events", "--interval", "yesterday", code=2)
    assert "--create" in fails(wh, "ingest", "nope", __file__, "--format", "csv")
    assert "does not exist" in fails(wh, "ingest", "events", "/no/such/file.csv")
    fails(wh, "ingest", "events", "x.csv", "--interval", "2024-01-01/2024-01-02", code=2)


# -- ingest with Spark -------------------------------------------------------------------------


@pytest.mark.spark
def test_ingest_with_spark(wh: str, tmp_path: Path, spark: Any) -> None:
    csv = tmp_path / "day0.csv"
    csv.write_text(
        "ts,k,v\n2024-01-01 00:00:00,1,1.5\n2024-01-01 06:00:00,2,2.5\n2024-01-02 01:00:00,3,3.5\n"
    )
    out = ok(wh, "ingest", "events", str(csv), "--create", "--time-column", "ts", "-e", "spark")
    assert "created table events" in out
    assert "version 1 (append) on events: 3 rows, 2 segments added" in out and "Spark task" in out

    parquet = tmp_path / "more.parquet"
    pq.write_table(_rows([2, 3], 2, k0=10), parquet)
    out = ok(wh, "ingest", "events", str(parquet), "--engine", "spark")
    assert "version 2 (append) on events: 4 rows, 2 segments added" in out

    fixed = tmp_path / "fixed.csv"
    fixed.write_text("ts,k,v\n2024-01-01 12:00:00,7,7.0\n")
    out = ok(
        wh, "ingest", "events", str(fixed), "--mode", "overwrite",
        "--interval", "2024-01-01/2024-01-03", "--engine", "spark",
    )  # fmt: skip
    assert "version 3 (overwrite) on events: 1 row, 1 segment added, 2 replaced" in out
    assert "1 chunk emptied" in out  # 2024-01-02 had rows, the new data has none

    out = ok(wh, "query", "SELECT count(*) AS n, sum(k) AS s FROM events")
    assert out.splitlines()[1].split() == ["5", "53"]  # 7 + (10+11+12+13)

    out = ok(wh, "timeline", "events")
    assert "overshadowed by v3" in out and "deleted (tombstone)" in out
    assert '"format": "parquet"' in ok(wh, "history", "events", "--metadata")

    bad = tmp_path / "bad.csv"
    bad.write_text("ts,k,v\n2024-01-05 00:00:00,abc,1.0\n")
    message = fails(wh, "ingest", "events", str(bad), "-e", "spark")
    assert "Spark failed" in message and "abc" in message
    assert "ABORTED" in ok(wh, "history", "events")


# -- segment lineage: lineage, revert, push; retention, orphans ------------------------------------


@pytest.fixture
def pushed(wh: str, cat: lamina.Catalog) -> lamina.Table:
    """A consistent_push table: days 0-2 appended (3 rows each), then refreshed to 2 rows."""
    t = cat.create_table("events", parse_schema(SCHEMA), "ts", "DAY", consistent_push=True)
    t.append(_rows([0, 1, 2], 3))  # entry 1: from [] to three segments
    t.refresh(_rows([0, 1], 1, k0=50))  # entry 2: replaces them
    return t


def test_lineage_and_revert(wh: str, pushed: lamina.Table, cat: lamina.Catalog) -> None:
    first, second = pushed.lineage()
    assert pushed.count() == 2
    out = ok(wh, "lineage", "events")
    assert first.id in out and second.id in out and "COMPLETED" in out
    assert "2 entries: 2 completed" in out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == [second.id])
    assert row[-2:] == ["3", "2"]  # -segments, +segments
    detail = ok(wh, "lineage", "events", "--segments")
    assert f"  - {second.segments_from[0]}" in detail and f"  + {second.segments_to[0]}" in detail

    message = fails(wh, "revert", "events", first.id)  # not the newest link
    assert "revert those first" in message
    out = ok(wh, "revert", "events", second.id)
    assert f"reverted lineage entry {second.id} on events (was completed)" in out
    assert "3 segments visible again, 2 segments hidden" in out
    assert pushed.count() == 9
    assert "REVERTED" in ok(wh, "lineage", "events")
    assert "already reverted" in ok(wh, "revert", "events", second.id)

    assert "`lamina lineage events` lists them" in fails(wh, "revert", "events", "nope")
    assert "no table named 'nope'" in fails(wh, "revert", "nope", second.id)
    running = pushed.start_replace([], [])
    assert "pass --force" in fails(wh, "revert", "events", running)
    out = ok(wh, "revert", "events", running, "--force")
    assert "(was in_progress)" in out and "0 segments will never be visible" in out

    other = cat.create_table("plain", parse_schema(SCHEMA), "ts")
    assert "has no lineage entries" in ok(wh, "lineage", other.name)


def test_retention_and_orphans(wh: str, pushed: lamina.Table) -> None:
    reverted = pushed.lineage()[-1]
    pushed.revert_replace(reverted.id)
    stray = Path(wh) / "events" / "data" / "stray.parquet"
    stray.write_bytes(b"not a segment")
    assert "no orphan" not in ok(wh, "orphans")
    result = run(wh, "orphans")
    assert result.stdout.splitlines() == ["events/data/stray.parquet"]
    assert "1 orphan file" in result.stderr

    out = ok(wh, "retention")  # now: the reverted push's files go, the stray is too young
    assert "deleted 2 segment files and 0 orphan files" in out
    assert stray.exists() and pushed.count() == 9
    assert reverted.id not in ok(wh, "lineage", "events")

    # a table named twice is one table (a CLI audit: "2 tables")
    out = ok(wh, "retention", "--now", "2100-01-01T00:00:00Z", "-t", "events", "-t", "events")
    assert "retention on 1 table: deleted 0 segment files and 1 orphan file" in out
    assert not stray.exists() and pushed.count() == 9
    first = min(c.version or 0 for c in pushed.history() if c.state == "COMPLETED")
    purged = fails(wh, "segments", "events", "--as-of", str(first))  # the reason, kept
    assert "is no longer readable" in purged and "`lamina history events`" in purged
    assert run(wh, "orphans").stdout == ""

    assert "cannot read 'yesterday'" in fails(wh, "retention", "--now", "yesterday", code=2)
    assert "point in time" in fails(wh, "retention", "--now", "+inf", code=2)
    assert "no table named 'nope'" in fails(wh, "retention", "--table", "nope")
    assert "no table named 'nope'" in fails(wh, "orphans", "--table", "nope")


def test_serve_on_a_taken_port_says_so(wh: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = fails(wh, "serve", "--port", str(port))
    assert f"cannot listen on 127.0.0.1:{port}" in out and "another --port" in out


def test_serve_warns_without_token_off_loopback(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from lamina import rest as server

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(server, "serve", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    result = run(wh, "serve", "--host", "0.0.0.0", "--port", "9999")
    assert result.exit_code == 0, result.output
    assert "without $LAMINA_API_TOKEN" in result.stderr
    assert calls[0][0] == ("0.0.0.0", 9999)
    kw = calls[0][1]
    assert (kw["catalog"], kw["warehouse"], kw["log_level"], kw["create"]) == (
        None, wh, "info", False,
    )  # fmt: skip
    result = run(wh, "serve")
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert calls[-1][0] == ("127.0.0.1", 8080)
    # a CLI hunt: these were tracebacks (KeyError in uvicorn, OverflowError in sleep)
    result = run(wh, "serve", "--log-level", "bogus")
    assert result.exit_code == 2 and "'bogus' is not one of" in result.output
    result = run(wh, "serve", "--log-level", "WARNING")
    assert result.exit_code == 0 and calls[-1][1]["log_level"] == "warning"
    assert run(wh, "services", "--every", "1e308", "--rounds", "1").exit_code == 2


@pytest.mark.spark
def test_push_with_spark(wh: str, tmp_path: Path, pushed: lamina.Table, spark: Any) -> None:
    pushed.revert_replace(pushed.lineage()[-1].id)  # back to days 0-2, 3 rows each
    assert pushed.count() == 9
    csv = tmp_path / "day0.csv"
    csv.write_text("ts,k,v\n2024-01-01 01:00:00,70,1.0\n2024-01-01 02:00:00,71,2.0\n")
    out = ok(wh, "push", "events", str(csv), "--interval", "2024-01-01/2024-01-02", "-e", "spark")
    entry = pushed.lineage()[-1]
    assert "(refresh) on events: 2 rows, 1 segment added" in out
    assert f"lineage entry {entry.id} (completed): replaced 1 segment" in out
    assert f"lamina revert events {entry.id}" in out
    assert pushed.count() == 8 and entry.state == "COMPLETED"
    assert "1 segment visible again" in ok(wh, "revert", "events", entry.id)
    assert pushed.count() == 9

    bad = tmp_path / "bad.csv"
    bad.write_text("ts,k,v\n2024-01-02 00:00:00,abc,1.0\n")
    message = fails(wh, "push", "events", str(bad), "--engine", "spark")
    assert "push failed, nothing was published" in message and "abc" in message
    assert pushed.count() == 9
    assert all(e.state != "IN_PROGRESS" for e in pushed.lineage())
    assert "aligned" in fails(wh, "push", "events", str(csv), "-i", "2024-01-01/2024-01-01T12:00")


# -- --format table|csv|json|jsonl on every listing ----------------------------------------------


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv_module.DictReader(io.StringIO(text)))


def _listing(wh: str, *args: str) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The rows of a listing command as csv, as json, and (checked equal) as jsonl."""
    as_csv = _csv(ok(wh, *args, "--format", "csv"))
    as_json = json.loads(ok(wh, *args, "--format", "json"))
    as_jsonl = [json.loads(line) for line in ok(wh, *args, "-f", "jsonl").splitlines()]
    assert as_jsonl == as_json
    assert [list(r) for r in as_csv] == [list(r) for r in as_json]  # same columns, same order
    return as_csv, as_json


def test_tables_formats(wh: str, events: lamina.Table, cat: lamina.Catalog) -> None:
    cat.create_table("dims", parse_schema("k:int64"))
    rows, data = _listing(wh, "tables")
    assert [r["table"] for r in rows] == ["dims", "events"]
    assert rows[1] == {
        "table": "events", "time_column": "ts", "granularity": "DAY", "segments": "3",
        "rows": "6", "size_bytes": str(sum(s.size_bytes for s in events.segments())),
    }  # fmt: skip
    assert data[0]["time_column"] is None and rows[0]["time_column"] == ""
    assert data[1]["rows"] == 6 and data[1]["segments"] == 3
    empty = wh + "-empty"
    lamina.connect(warehouse=empty).close()  # listings never create a warehouse
    assert _listing(empty, "tables") == ([], [])
    assert "no tables yet" in ok(empty, "tables")


def test_segments_formats(wh: str, events: lamina.Table) -> None:
    rows, data = _listing(wh, "segments", "events")
    assert [r["segment"] for r in data] == [s.id for s in events.segments()]
    day1 = next(r for r in data if r["start"] == "2024-01-02T00:00:00Z")
    assert day1["version"] == 2 and day1["rows"] == 2 and day1["end"] == "2024-01-03T00:00:00Z"
    assert day1["tombstone"] is False and "status" not in day1
    assert rows[0]["tombstone"] == "false" and rows[0]["version"] == "1"
    made = {c.id: c.version for c in events.history()}  # the table version that added each
    assert [r["added_in"] for r in data] == [made[s.commit_id] for s in events.segments()]
    assert day1["added_in"] == 3 and day1["commit"] == events.history()[2].id  # the overwrite
    assert "added in" in ok(wh, "segments", "events")

    rows, data = _listing(wh, "segments", "events", "--all")
    by_id = {r["segment"]: r for r in data}
    tomb = by_id["events_20240103T000000Z_20240104T000000Z_v3_p0"]
    assert tomb["tombstone"] is True and tomb["size_bytes"] is None and tomb["status"] == "visible"
    old = by_id["events_20240102T000000Z_20240103T000000Z_v1_p0"]
    assert old["status"] == "overshadowed" and old["detail"] == "overshadowed by v2"
    assert len(rows) == 6 and {r["status"] for r in rows} == {"visible", "overshadowed"}


def test_timeline_formats(wh: str, events: lamina.Table) -> None:
    rows, data = _listing(wh, "timeline", "events")
    assert [(r["chunk"], r["version"], r["status"]) for r in data] == [
        ("2024-01-01", 1, "visible"),
        ("2024-01-02", 2, "visible"),
        ("2024-01-02", 1, "overshadowed"),
        ("2024-01-03", 3, "visible"),
        ("2024-01-03", 1, "overshadowed"),
    ]
    assert data[0]["rows"] == 4 and data[0]["partitions"] == "p0..p1"
    assert data[3]["tombstone"] is True and data[3]["detail"] == "deleted (tombstone)"
    assert rows[2]["detail"] == "overshadowed by v2" and rows[2]["start"] == "2024-01-02T00:00:00Z"
    assert "█" not in ok(wh, "timeline", "events", "-f", "csv")  # no drawings in data


def test_timeline_data_formats_list_every_chunk(wh: str, cat: lamina.Catalog) -> None:
    cat.create_table("daily", parse_schema(SCHEMA), "ts", "DAY").append(_rows(list(range(70)), 1))
    rows, _ = _listing(wh, "timeline", "daily")
    assert len(rows) == 70  # --limit 60 is for the drawing
    assert len(_listing(wh, "timeline", "daily", "--interval", "2024-01-02/2024-01-04")[0]) == 2


def test_history_formats(wh: str, events: lamina.Table) -> None:
    rows, data = _listing(wh, "history", "events")
    assert [r["version"] for r in data] == [1, 2, 3, 4] == [r["commit"] for r in data]
    assert [r["action"] for r in rows] == ["APPEND", "APPEND", "OVERWRITE", "OVERWRITE"]
    assert data[0]["metadata"] == {"job": "load"} and json.loads(rows[0]["metadata"]) == {
        "job": "load"
    }
    assert data[1]["base_version"] == 1
    assert data[2]["segments_added"] == 1 and data[2]["segments_removed"] == 1
    started = dt.datetime.fromisoformat(data[0]["started_at"])
    assert started.tzinfo is not None and data[0]["state"] == "COMPLETED"


def test_lineage_formats(wh: str, pushed: lamina.Table) -> None:
    first, second = pushed.lineage()
    rows, data = _listing(wh, "lineage", "events")
    assert [r["entry"] for r in data] == [first.id, second.id]
    assert data[1]["segments_from"] == list(second.segments_from)
    assert data[1]["segments_to"] == list(second.segments_to)
    assert json.loads(rows[0]["segments_to"]) == list(first.segments_to)
    assert {r["state"] for r in rows} == {"COMPLETED"}


def test_orphans_formats(wh: str, events: lamina.Table) -> None:
    assert _listing(wh, "orphans") == ([], [])
    stray = Path(wh) / "events" / "data" / "stray.parquet"
    stray.write_bytes(b"x")
    rows, data = _listing(wh, "orphans")
    assert rows == [{"path": "events/data/stray.parquet"}] and data == rows


def test_query_csv_and_json_agree(wh: str, events: lamina.Table) -> None:
    sql = "SELECT k, v, ts, k > 100 AS big FROM events ORDER BY k"
    rows, data = _listing(wh, "query", sql)
    assert [r["k"] for r in data] == [0, 1, 2, 100, 200, 201]
    assert rows[3] == {"k": "100", "v": "0.0", "ts": "2024-01-01T00:00:00+00:00", "big": "false"}
    assert data[4]["big"] is True and data[4]["ts"] == "2024-01-02T00:00:00+00:00"


@pytest.mark.parametrize("extra", ["", ", [1] AS l, [2] AS l"])  # plain rows, Arrow
def test_query_output_keeps_repeated_names_and_non_finite_numbers(
    wh: str, events: lamina.Table, extra: str
) -> None:
    """Rows were dicts by column name: the last of two columns named alike showed in
    both; NaN and infinities went out as JSON that JSON parsers refuse."""
    sql = f"SELECT 1 AS a, 2 AS a, 'nan'::DOUBLE AS x, -'inf'::DOUBLE AS y{extra}"
    (row,) = json.loads(ok(wh, "query", sql, "-f", "json"), parse_constant=_refuse)
    assert [row["a"], row["a_1"], row["x"], row["y"]] == [1, 2, "NaN", "-Infinity"]
    assert ok(wh, "query", sql, "-f", "csv").splitlines()[0].startswith("a,a_1,x,y")
    table = ok(wh, "query", sql).splitlines()
    assert table[0].split()[:2] == ["a", "a"] and table[1].split()[:2] == ["1", "2"]


def _refuse(constant: str) -> None:
    raise ValueError(f"not JSON: {constant}")


def test_unknown_output_format_is_a_usage_error(wh: str, events: lamina.Table) -> None:
    fails(wh, "tables", "--format", "xml", code=2)


# -- start-up: heavy modules only in the commands that need them --------------------------------

HEAVY = (
    "pyspark",
    "fastapi",
    "uvicorn",
    "pandas",
    "duckdb",
    "sqlalchemy",
    "pyarrow",
    "numpy",
    "pydantic",
    "py4j",
)
_PROBE = """
import sys
sys.argv[0] = "lamina"
from lamina.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
print(sorted({m.split(".")[0] for m in sys.modules} & set(%r)))
"""


def _modules_after(*args: str) -> set[str]:
    """Top-level heavy modules imported by ``lamina ARGS`` in a fresh interpreter."""
    src = str(Path(lamina.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE % (HEAVY,), *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1].replace("'", '"')))


def test_startup_imports_only_what_the_command_needs(wh: str, events: lamina.Table) -> None:
    assert _modules_after("--help") == set()
    # listing tables reads catalog rows only (schemas stay undecoded Arrow IPC bytes);
    # typer's conversion of the options leaves pydantic alone
    assert _modules_after("--warehouse", wh, "tables") == {"sqlalchemy"}
    assert _modules_after("--warehouse", wh, "tables", "-f", "json") == {"sqlalchemy"}
    # plain result columns are read with DuckDB's fetchall, not through Arrow
    used = _modules_after("--warehouse", wh, "query", "-n", "5", "SELECT count(*) FROM events")
    assert used == {"sqlalchemy", "duckdb"}
    used = _modules_after("--warehouse", wh, "query", "SELECT [1, 2] AS l")  # a list: Arrow
    assert used == {"sqlalchemy", "duckdb", "pyarrow", "numpy"}
    assert _modules_after("--warehouse", wh, "timeline", "events") == {"sqlalchemy"}
    assert _modules_after("ingest", "--help") == set()


def test_a_command_imports_only_its_own_module(wh: str, events: lamina.Table) -> None:
    code = (
        "import sys; from lamina.cli import app\n"
        "try:\n    app(sys.argv[1:])\nexcept SystemExit as exc:\n    assert not exc.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('lamina.cli.')))"
    )
    src = str(Path(lamina.__file__).resolve().parent.parent)
    proc = subprocess.run(
        [sys.executable, "-c", code, "--warehouse", wh, "tables"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.strip().splitlines()[-1]
    assert loaded == (
        "['lamina.cli.coerce', 'lamina.cli.config', 'lamina.cli.output', 'lamina.cli.tables']"
    )


def test_program_exits_cleanly(wh: str, events: lamina.Table) -> None:
    """``python -m lamina.cli`` (which keeps start-up objects out of the collection at
    exit) prints nothing more than the command does, e.g. no DuckDB leak reports."""
    src = str(Path(lamina.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src, "NO_COLOR": "1"}
    for args in (["tables"], ["query", "SELECT count(*) AS n, [1] AS l FROM events"]):
        proc = subprocess.run(
            [sys.executable, "-m", "lamina.cli", "--warehouse", wh, *args],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert "events" in proc.stdout or "1 row" in proc.stdout


def test_command_modules_are_as_listed() -> None:
    from typer.core import TyperGroup
    from typer.main import get_command

    from lamina.cli import COMMANDS, app

    group = get_command(app)
    assert isinstance(group, TyperGroup)
    defined = {n: str(c.callback.__module__).rsplit(".", 1)[1] for n, c in group.commands.items()}
    assert defined == COMMANDS
    assert list(group.commands)[:4] == ["init", "info", "create-table", "tables"]  # --help order


def test_top_level_names_are_lazy() -> None:
    code = (
        "import sys, lamina; assert 'lamina.catalog' not in sys.modules; "
        "assert lamina.Table.__name__ == 'Table' and lamina.connect and lamina.Granularity.DAY; "
        "assert 'lamina.catalog' in sys.modules; print(lamina.__version__)"
    )
    src = str(Path(lamina.__file__).resolve().parent.parent)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == lamina.__version__
    with pytest.raises(AttributeError):
        _ = lamina.NoSuchName  # type: ignore[attr-defined]


# -- ingest and push with the local engine (pyarrow, no JVM) ----------------------------------


def test_ingest_local_csv_jsonl_parquet(wh: str, tmp_path: Path, cat: lamina.Catalog) -> None:
    csv_file = tmp_path / "day0.csv"
    csv_file.write_text(
        "ts,k,v\n2024-01-01 00:00:00,1,1.5\n2024-01-01 06:00:00,2,2.5\n2024-01-02 01:00:00,3,\n"
    )
    out = ok(wh, "ingest", "events", str(csv_file), "--create", "-t", "ts", "--engine", "local")
    assert "created table events" in out and "local engine" in out
    assert "version 1 (append) on events: 3 rows, 2 segments added" in out
    t = cat.load_table("events")
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")  # naive text read as UTC
    assert t.schema.field("k").type == pa.int64() and t.schema.field("v").type == pa.float64()

    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text(
        '{"ts": "2024-01-03T00:00:00Z", "k": 10, "v": 1}\n'
        '{"k": 11, "ts": "2024-01-03T05:00:00+02:00", "v": null}\n'
        '{"ts": "2024-01-03 07:30:00", "k": 12, "v": 2.5}\n'  # no zone: UTC
    )
    out = ok(wh, "ingest", "events", str(jsonl))  # auto: small input, local engine
    assert "version 2 (append) on events: 3 rows, 1 segment added" in out and "local" in out

    parquet = tmp_path / "p.parquet"
    pq.write_table(_rows([4], 2, k0=20), parquet)
    ok(wh, "ingest", "events", str(parquet), "-e", "local")

    got = t.to_arrow().sort_by("k").to_pylist()
    assert [r["k"] for r in got] == [1, 2, 3, 10, 11, 12, 20, 21]
    assert got[2]["v"] is None and got[4]["ts"] == dt.datetime(2024, 1, 3, 3, tzinfo=UTC)
    assert got[5]["ts"] == dt.datetime(2024, 1, 3, 7, 30, tzinfo=UTC)
    meta = t.history()[0].metadata
    assert meta["engine"] == "local" and meta["format"] == "csv" and meta["input_count"] == 1

    fixed = tmp_path / "fixed.tsv"
    fixed.write_text("ts\tk\tv\n2024-01-01 12:00:00\t7\t7.0\n")
    out = ok(
        wh, "ingest", "events", str(fixed), "-m", "overwrite", "-i", "2024-01-01/2024-01-03",
        "-e", "local",
    )  # fmt: skip
    assert "version 4 (overwrite) on events: 1 row, 1 segment added, 2 replaced" in out
    assert "1 chunk emptied" in out
    assert sorted(t.to_arrow()["k"].to_pylist()) == [7, 10, 11, 12, 20, 21]


def test_ingest_into_a_day_a_compaction_split_into_hours(wh: str, tmp_path: Path) -> None:
    """The CLI streams its input: rows of a day a major compaction cut into HOUR chunks
    go hour by hour on the first try (no aborted commit), local engine and auto."""
    first = tmp_path / "a.csv"
    first.write_text("ts,v\n2024-01-01 01:00:00,1\n2024-01-01 05:00:00,2\n")
    ok(wh, "ingest", "ev", str(first), "--create", "-t", "ts", "--granularity", "DAY")
    out = ok(wh, "compact", "ev", "--mode", "major", "--granularity", "HOUR",
             "--interval", "2024-01-01/2024-01-02")  # fmt: skip
    assert "24 chunks, 1 -> 2 segments and 22 tombstones" in out  # hours without rows
    more = tmp_path / "b.csv"
    more.write_text("ts,v\n2024-01-01 01:30:00,3\n2024-01-01 03:00:00,4\n")
    ok(wh, "ingest", "ev", str(more), "--engine", "local")
    t = lamina.connect(warehouse=wh).load_table("ev")
    assert sorted(t.to_arrow()["v"].to_pylist()) == [1, 2, 3, 4]
    assert {c.state for c in t.history()} == {"COMPLETED"}
    hours = sorted(s.interval.start_dt.hour for s in t.segments())
    assert hours == [1, 1, 3, 5]


def test_ingest_csv_reads_only_an_empty_field_as_null(
    wh: str, tmp_path: Path, cat: lamina.Catalog
) -> None:
    """What a CLI hunt found: "NA", "N/A", "null" became NULL and "NaN" too (pyarrow's
    list of null spellings); Spark keeps them as text and NaN."""
    import math

    ok(wh, "create-table", "s1", "-s", "s:string,f:float64,i:int64")
    csv_file = tmp_path / "nulls.csv"
    csv_file.write_text('s,f,i\nNA,NaN,1\nnull,1.5,2\nN/A,,3\n"",2.5,\n')
    ok(wh, "ingest", "s1", str(csv_file), "-e", "local")
    got = sorted(cat.load_table("s1").to_arrow().to_pylist(), key=lambda r: r["f"] or 0)
    by_s = {r["s"]: r for r in got}
    assert set(by_s) == {"NA", "null", "N/A", None}
    assert math.isnan(by_s["NA"]["f"]) and by_s["N/A"]["f"] is None
    assert by_s[None]["i"] is None and by_s[None]["f"] == 2.5


def test_ingest_parquet_nanoseconds_into_microseconds(wh: str, tmp_path: Path) -> None:
    """pandas writes nanosecond timestamps: exact ones ingest into a microsecond
    table (they went through text and failed to parse), lossy ones are refused."""
    import pandas as pd

    ok(wh, "create-table", "big", "-s", "ts:timestamp[us, tz=UTC],v:int64", "-t", "ts")
    exact, lossy = tmp_path / "exact.parquet", tmp_path / "lossy.parquet"
    pd.DataFrame({"ts": pd.to_datetime(["2024-07-01"], utc=True), "v": [1]}).to_parquet(exact)
    at = pd.to_datetime(["2024-07-01 00:00:00.000000001"], utc=True)
    pd.DataFrame({"ts": at, "v": [2]}).to_parquet(lossy)
    assert "1 row" in ok(wh, "ingest", "big", str(exact), "-e", "local")
    assert "without loss" in fails(wh, "ingest", "big", str(lossy), "-e", "local")


def test_ingest_a_json_array_says_json_lines_are_read(wh: str, tmp_path: Path) -> None:
    arr = tmp_path / "arr.json"
    arr.write_text('[{"ts": "2024-01-01T00:00:00Z", "v": 1}]\n')
    out = fails(wh, "ingest", "j", str(arr), "--create", "-t", "ts", "-e", "local")
    assert "JSON lines: one object per line, not a JSON array" in out


def test_a_failed_ingest_create_leaves_no_table(
    wh: str, tmp_path: Path, cat: lamina.Catalog
) -> None:
    good, bad = tmp_path / "a1.csv", tmp_path / "a2.csv"
    good.write_text("ts,k\n2024-01-01T10:00:00,1\n")
    bad.write_text("ts,k\n2024-01-01T11:00:00,xyz\n")
    for mode in ("append", "overwrite"):
        out = fails(wh, "ingest", "cr", str(good), str(bad), "--create", "-t", "ts", "-m", mode)
        assert "a2.csv" in out and "xyz" in out
        assert cat.list_tables() == []
    assert "1 row" in ok(wh, "ingest", "cr", str(good), "--create", "-t", "ts")


def test_ingest_local_folder_of_files(wh: str, tmp_path: Path, cat: lamina.Catalog) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    pq.write_table(_rows([0], 3), folder / "part-0.parquet")
    pq.write_table(_rows([1], 2, k0=10), folder / "part-1.parquet")
    (folder / "_SUCCESS").touch()
    out = ok(wh, "ingest", "events", str(folder), "--create", "-t", "ts", "-g", "day")
    assert "5 rows, 2 segments added" in out
    assert cat.load_table("events").count() == 5


def test_ingest_local_bad_files_publish_nothing(
    wh: str, tmp_path: Path, events: lamina.Table
) -> None:
    before = (events.count(), len(events.history()))
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,k,v\n2024-01-05 00:00:00,abc,1.0\n")
    message = fails(wh, "ingest", "events", str(bad), "-e", "local")
    assert "bad.csv" in message and "abc" in message and "int64" in message

    late = tmp_path / "late.csv"  # the bad value is far from the first block
    late.write_text("ts,k,v\n" + "2024-01-05 00:00:00,1,1.0\n" * 50_000 + "yesterday,2,2.0\n")
    message = fails(wh, "ingest", "events", str(late), "--engine", "local")
    assert "late.csv" in message and "yesterday" in message

    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"ts": "2024-01-05T00:00:00Z", "k": 1, "v": 1.0, "what": "x"}\n')
    assert "unknown columns ['what']" in fails(wh, "ingest", "events", str(extra), "-e", "local")

    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert "broken.parquet" in fails(wh, "ingest", "events", str(broken), "-e", "local")

    assert "--format" in fails(wh, "ingest", "events", str(tmp_path / "bad.csv"), str(broken))
    assert (events.count(), len(events.history())) == before  # nothing published or begun


def test_push_local(wh: str, tmp_path: Path, pushed: lamina.Table) -> None:
    pushed.revert_replace(pushed.lineage()[-1].id)  # back to days 0-2, 3 rows each
    day0 = tmp_path / "day0.csv"
    day0.write_text("ts,k,v\n2024-01-01 01:00:00,70,1.0\n2024-01-01 02:00:00,71,2.0\n")
    out = ok(wh, "push", "events", str(day0), "-i", "2024-01-01/2024-01-02", "-e", "local")
    entry = pushed.lineage()[-1]
    assert "(refresh) on events: 2 rows, 1 segment added" in out and "local engine" in out
    assert f"lineage entry {entry.id} (completed): replaced 1 segment" in out
    assert pushed.count() == 8 and entry.state == "COMPLETED"

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": "2024-01-02T00:00:00Z", "k": "abc", "v": 1.0}\n')
    message = fails(wh, "push", "events", str(bad), "-e", "local")
    assert "push failed, nothing was published" in message and "bad.jsonl" in message
    assert pushed.count() == 8
    assert all(e.state != "IN_PROGRESS" for e in pushed.lineage())


def test_engine_choice_by_input_size(tmp_path: Path) -> None:
    from lamina.cli.write import Engine, choose_engine
    from lamina.engines.files import input_bytes, parse_size

    data = tmp_path / "d"
    data.mkdir()
    (data / "a.csv").write_text("x\n" + "1\n" * 500)  # 1,002 bytes
    (data / "b.csv").write_text("x\n1\n")  # 4 bytes
    paths = [str(data)]
    assert input_bytes(paths) == 1006 and input_bytes([str(data / "b.csv")]) == 4
    assert choose_engine(Engine.auto, paths, "1006") is Engine.local
    assert choose_engine(Engine.auto, paths, "1KB") is Engine.spark  # 1,000 bytes
    assert choose_engine(Engine.auto, paths, None) is Engine.local  # default 2 GB
    assert choose_engine(Engine.local, paths, "1") is Engine.local
    assert choose_engine(Engine.spark, paths, None) is Engine.spark
    assert parse_size("2GB") == 2_000_000_000 and parse_size("1.5m") == 1_500_000
    with pytest.raises(LaminaError, match="as a size"):
        parse_size("lots")


def test_local_max_bytes_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lamina.cli.write import Engine, choose_engine

    f = tmp_path / "a.csv"
    f.write_text("x\n1\n")
    monkeypatch.setenv("LAMINA_LOCAL_MAX_BYTES", "3")
    assert choose_engine(Engine.auto, [str(f)], None) is Engine.spark
    assert choose_engine(Engine.auto, [str(f)], "4") is Engine.local  # the option wins


@pytest.mark.spark
def test_spark_ingest_prints_no_spark_logs(wh: str, tmp_path: Path) -> None:
    """A fresh process (its own JVM): stderr holds nothing of Spark's unless --verbose."""
    data = tmp_path / "d.csv"
    data.write_text("ts,k\n2024-01-01 00:00:00,1\n2024-01-02 00:00:00,2\n")
    src = str(Path(lamina.__file__).resolve().parent.parent)
    code = "import sys; sys.argv[0] = 'lamina'; from lamina.cli import app; app()"
    env = {k: v for k, v in os.environ.items() if k != "LAMINA_SPARK_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, "-c", code, "--warehouse", wh, "ingest", "events", str(data),
         "--create", "-t", "ts", "--engine", "spark"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**env, "PYTHONPATH": src, "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "2 rows, 2 segments added" in proc.stdout and "Spark task" in proc.stdout
    assert proc.stderr.strip() == "", proc.stderr  # no log4j, JVM or pyspark lines


def test_direct_option_conversion_agrees_with_typer() -> None:
    from typer._adapters import try_build_adapter

    from lamina import Granularity
    from lamina.cli.coerce import converter
    from lamina.cli.output import OutputFormat

    cases: list[tuple[Any, Any, list[Any]]] = [
        (str, typer.Option(), ["x", "", "ü", "-1", "2024-01-01/2024-02-01"]),
        (str, typer.Argument(), ["select 1"]),
        (int, typer.Option(min=0), ["0", "7", "123456789012", 50]),
        (int, typer.Option(min=0, max=65535), ["65535", "8080"]),
        (Granularity, typer.Option(case_sensitive=False), ["day", "DAY", "Week", Granularity.ALL]),
        (OutputFormat, typer.Option(), ["json", OutputFormat.table]),
        (list[str], typer.Argument(), [["a", "b"], ("c",), "d"]),
        (bool, typer.Option(), [True, False]),
    ]
    for annotation, info, values in cases:
        convert = converter(annotation, info)
        adapter = try_build_adapter(annotation, info)
        assert convert is not None and adapter is not None
        for value in values:
            got = convert(value, None)
            assert got == adapter.validate_python(value) and type(got) is type(
                adapter.validate_python(value)
            ), (annotation, value)
    left_to_typer = [
        (int, typer.Option(min=0), "-1"),
        (int, typer.Option(), "1_000"),
        (int, typer.Option(), " 7"),
        (int, typer.Option(), "+7"),
        (int, typer.Option(), "007"),
        (OutputFormat, typer.Option(), "JSON"),
        (bool, typer.Option(), "yes"),
    ]
    for annotation, info, value in left_to_typer:
        convert = converter(annotation, info)
        assert convert is not None
        with pytest.raises(Exception):  # noqa: B017 - any: typer converts or explains
            convert(value, None)


def test_locks_lists_the_task_locks(wh: str, events: lamina.Table) -> None:
    assert "has no locks" in ok(wh, "locks", "events")
    tx = events.transaction(lock="REPLACE", interval=("2024-01-01", "2024-01-08"), priority=25)
    tx.overwrite(_rows([1], 1, k0=300))
    out = ok(wh, "locks", "events", "--format", "csv")
    header, row = out.strip().splitlines()
    assert header == "lock,type,interval,priority,state,commit,holder"
    assert ",REPLACE,2024-01-01T00:00:00Z/2024-01-08T00:00:00Z,25,GRANTED," in row
    tx.abort()
    assert "has no locks" in ok(wh, "locks", "events")


def test_compact_minor_major_and_auto(wh: str, events: lamina.Table) -> None:
    n = events.count()
    out = ok(wh, "compact", "--auto", "--dry-run", "--format", "csv")
    assert "events,2024-01-01T00:00:00Z/2024-01-02T00:00:00Z,PENDING,minor,2,2," in out
    assert "COMPLETE" in out and events.count() == n  # day 1 (one segment): nothing to do
    # what it rewrote (day 0's two segments into one), not the whole table's count
    assert "compacted events (minor): 1 chunk, 2 -> 1 segment" in ok(wh, "compact", "events")
    timeline = ok(wh, "timeline", "events")
    assert "m1 p0..p1 -> p32768: visible" in timeline
    _, data = _listing(wh, "timeline", "events")  # day 0's rows, not its inputs' twice
    assert [r["rows"] for r in data if r["chunk"] == "2024-01-01"] == [4]
    assert "nothing to compact" in ok(wh, "compact", "events")
    out = ok(wh, "compact", "events", "--mode", "major", "--sort-by", "v")
    assert "compacted events (major)" in out and events.count() == n
    commits = len(events.history())
    for extra in (
        ["--mode", "bogus"],
        ["--interval", "2024-01-01/2024-01-02"],
        ["--target-rows", "5"],
    ):
        out = fails(wh, "compact", "events", "--auto", *extra)
        assert f"{extra[0]} cannot go with --auto" in out
    assert "`lamina tables`" in fails(wh, "compact", "nosuch", "--auto", "--dry-run")
    assert len(events.history()) == commits  # nothing ran
    events.append(_rows([0], 2, k0=500))
    auto = ok(wh, "compact", "--auto", "--format", "csv")
    assert "PENDING" not in auto and ",COMPACTED,minor," in auto
    assert "mode='odd'" in fails(wh, "compact", "events", "--mode", "odd")
    assert "--dry-run goes with --auto" in fails(wh, "compact", "events", "--dry-run")
    assert "name a table" in fails(wh, "compact")
    assert "round 1:" in ok(wh, "services", "--rounds", "1", "--every", "0.1")
    assert events.count() == n + 2


def test_upsert_tables_from_the_command_line(wh: str, tmp_path: Path) -> None:
    """Seed 002's example: create-table --primary-key, upsert, query, keys."""
    files = {
        "a": "plane,ts,alt\nabc-12,2024-01-01T00:00:00,100\nabc-13,2024-01-01T00:01:00,102\n",
        "b": "plane,ts,alt\nabc-12,2024-01-01T00:02:00,200\n",
        "c": "plane,ts,alt\nabc-13,2024-01-01T00:03:00,300\n",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.csv").write_text(text)
    out = ok(wh, "create-table", "planes", "--like", str(tmp_path / "a.csv"), "-t", "ts",
             "--primary-key", "plane")  # fmt: skip
    assert 'upsert.primary_key=["plane"]' in out
    for name, avg in (("a", "101.0"), ("b", "151.0"), ("c", "250.0")):
        out = ok(wh, "upsert", "planes", str(tmp_path / f"{name}.csv"))
        assert "(upsert) on planes" in out
        assert avg in ok(wh, "query", "SELECT avg(alt) AS a FROM planes")
    got = json.loads(ok(wh, "keys", "planes", "-f", "json"))
    assert got[0]["keys"] == 2 and got[0]["hidden_rows"] == 2 and got[0]["seq"] == 3
    # an empty CSV field is null, quoted or not, as Spark reads it: an empty key is
    # refused whichever engine --engine auto picks, and an empty string value is null
    (tmp_path / "d.csv").write_text("plane,ts,alt\n,2024-01-01T00:04:00,1\n")
    assert "1 null" in fails(wh, "upsert", "planes", str(tmp_path / "d.csv"), "-e", "local")
    ok(wh, "create-table", "notes", "--schema", "ts:timestamp,k:int64,note:string", "-t", "ts")
    (tmp_path / "e.csv").write_text('ts,k,note\n2024-01-01,1,\n2024-01-01,2,""\n2024-01-01,3,x\n')
    ok(wh, "ingest", "notes", str(tmp_path / "e.csv"), "-e", "local")
    out = ok(wh, "query", "SELECT count(note) AS n, count(*) AS m FROM notes", "-f", "csv")
    assert out.split() == ["n,m", "1,3"]
    ok(wh, "create-table", "plain", "--like", str(tmp_path / "a.csv"), "-t", "ts")
    assert "has no primary key" in fails(wh, "upsert", "plain", str(tmp_path / "a.csv"))
    assert "`lamina tables` lists" in fails(wh, "upsert", "nosuch", str(tmp_path / "a.csv"))
    (tmp_path / "empty").mkdir()
    assert "no data files in" in fails(wh, "upsert", "planes", str(tmp_path / "empty"))
    assert "has no primary key" in fails(wh, "keys", "plain")
    assert "give --primary-key too" in fails(
        wh, "create-table", "x", "--like", str(tmp_path / "a.csv"), "--delete-column", "alt",
        code=2,
    )  # fmt: skip


def test_query_prints_intervals_as_duckdb_writes_them(wh: str, cat: lamina.Catalog) -> None:
    """An INTERVAL result printed as a list of its Arrow parts, [14, 0, 0]."""
    import random

    import duckdb

    rng = random.Random(7)
    exprs = ["interval 14 month", "-interval 90 minute", "interval 0 second"] + [
        f"to_months({rng.randint(-30, 30)}) + to_days({rng.randint(-40, 40)}) "
        f"+ to_microseconds({rng.choice([0, 1, -1]) * rng.randint(0, 10**11)})"
        for _ in range(20)
    ]
    sql = "SELECT " + ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs))
    texts = ", ".join(f"({e})::VARCHAR" for e in exprs)
    want = list(duckdb.sql(f"SELECT {texts}").fetchall()[0])
    out = ok(wh, "query", sql, "--format", "csv").splitlines()
    assert out[1].split(",") == want
    assert '"c0": "1 year 2 months"' in ok(wh, "query", sql, "--format", "json")
    assert "1 year 2 months" in ok(wh, "query", "SELECT interval 14 month AS y")


def _csv_pair(folder: Path) -> None:
    """Two CSV files naming their columns in other orders (a CLI audit)."""
    folder.mkdir(exist_ok=True)
    (folder / "o1.csv").write_text("ts,a,b\n2024-01-01T00:00:00,A1,B1\n")
    (folder / "o2.csv").write_text("ts,b,a\n2024-01-02T00:00:00,B2,A2\n")


def _pairs(cat: lamina.Catalog, name: str) -> set[tuple[str, str]]:
    got = cat.load_table(name).to_arrow()
    return set(zip(got.column("a").to_pylist(), got.column("b").to_pylist(), strict=True))


def test_a_folder_gives_its_data_files_only_and_tsv_however_compressed(
    wh: str, tmp_path: Path, cat: lamina.Catalog
) -> None:
    """A CLI audit: a folder's a.csv.bak or notes were read as data (rows twice, or a
    schema of 'some notes'), and TSV files in a folder or compressed with bz2/zstd were
    read as comma-separated (one column named 'ts\\tuser\\tamount')."""
    folder = tmp_path / "fold"
    _csv_pair(folder)
    (folder / "o1.csv.bak").write_text((folder / "o1.csv").read_text())
    (folder / "README").write_text("some notes\n")
    out = ok(wh, "ingest", "e", str(folder), "--create", "-t", "ts", "-e", "local")
    assert "2 rows" in out
    assert _pairs(cat, "e") == {("A1", "B1"), ("A2", "B2")}

    tsv = tmp_path / "tsv"
    tsv.mkdir()
    (tsv / "a.tsv").write_text("ts\tuser\tamount\n2024-01-01T00:00:00\tu1\t1.5\n")
    (tsv / "b.tsv.bz2").write_bytes(bz2.compress(b"ts\tuser\tamount\n2024-01-02T00:00:00\tu2\t2\n"))
    assert "2 rows" in ok(wh, "ingest", "t", str(tsv), "--create", "-t", "ts", "-e", "local")
    assert cat.load_table("t").schema.names == ["ts", "user", "amount"]


@pytest.mark.spark
def test_spark_reads_csv_columns_by_name_in_every_file(
    wh: str, tmp_path: Path, cat: lamina.Catalog, spark: Any
) -> None:
    """A CLI audit: Spark named the columns of every CSV file by the first file's header
    (o2's a and b were swapped), and read a folder's backup file as data."""
    folder = tmp_path / "in"
    _csv_pair(folder)
    (folder / "o1.csv.bak").write_text((folder / "o1.csv").read_text())
    ok(wh, "ingest", "s", str(folder / "o1.csv"), "--create", "-t", "ts", "-e", "local")
    ok(wh, "ingest", "s", str(folder / "o2.csv"), str(folder / "o1.csv"), "-e", "spark")
    ok(wh, "ingest", "s", str(folder), "-e", "spark")
    got = cat.load_table("s").to_arrow()
    assert got.num_rows == 5
    assert _pairs(cat, "s") == {("A1", "B1"), ("A2", "B2")}
    other = tmp_path / "o3.csv"
    other.write_text("ts,a,c\n2024-01-03T00:00:00,A3,C3\n")
    before = len(cat.load_table("s").history())
    out = fails(wh, "ingest", "s", str(folder / "o1.csv"), str(other), "-e", "spark")
    assert "o3.csv has columns ['ts', 'a', 'c']" in out and "one layout" in out
    assert len(cat.load_table("s").history()) == before
    # a review: partition folders still give their columns (the folder is read file by
    # file now), an empty file and blank lines before a header are skipped as Spark
    # skips them, and a folder with no data file is refused, not a traceback
    hive = tmp_path / "hive"
    (hive / "day=1").mkdir(parents=True)
    (hive / "day=2").mkdir()
    (hive / "day=1" / "a.csv").write_text("ts,v\n2024-01-01T00:00:00,1\n")
    (hive / "day=2" / "b.csv").write_text("\n\nts,v\n2024-01-02T00:00:00,2\n")
    (hive / "day=2" / "empty.csv").write_text("")
    ok(wh, "ingest", "h", str(hive), "--create", "-t", "ts", "-e", "spark")
    got = cat.load_table("h").to_arrow().sort_by("ts")
    assert got.column("day").to_pylist() == [1, 2] and got.column("v").to_pylist() == [1, 2]
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    (nothing / "_SUCCESS").write_text("")
    out = fails(wh, "ingest", "h", str(nothing), "--format", "csv", "-e", "spark")
    assert "no data files" in out


def test_listings_count_the_rows_readers_see(wh: str, cat: lamina.Catalog) -> None:
    """A CLI audit: after a MONTH compaction and a day's overwrite the MONTH segment
    shows in part, and `lamina tables` and the segments summary counted all its rows
    (6 where queries saw 2); the summary also counted rows deletion vectors hide."""
    t = cat.create_table("m", parse_schema(SCHEMA), "ts", "DAY")
    t.append(_rows([0, 1], 2))
    t.compact(mode="major", segment_granularity="MONTH")
    t.overwrite(_rows([1], 1, k0=50))
    assert t.count() == 3  # day 0's 2 from the MONTH segment, day 1's new one
    rows, data = _listing(wh, "tables")
    assert [(r["table"], r["rows"]) for r in data] == [("m", 3)]
    assert "2 visible segments, 3 rows (5 stored)" in " ".join(ok(wh, "segments", "m").split())

    keyed = parse_schema(SCHEMA)
    keyed = keyed.set(1, keyed.field("k").with_nullable(False))
    u = cat.create_table("u", keyed, "ts", "DAY", primary_key=["k"])
    u.upsert(_rows([0], 3))
    u.upsert(_rows([0], 1))  # k=0 again: one record superseded
    assert [r["rows"] for r in _listing(wh, "tables")[1] if r["table"] == "u"] == [3]
    assert "3 rows (4 stored)" in " ".join(ok(wh, "segments", "u").split())
    # a file of the MONTH segment lost: the other tables still list (a review)
    (month,) = {task.segment.location for task in t.scan().tasks if task.keep is not None}
    os.remove(month)
    result = run(wh, "tables", "-f", "json")
    assert result.exit_code == 0 and "m: rows not counted" in result.stderr
    listed = {r["table"]: r["rows"] for r in json.loads(result.stdout)}
    assert listed == {"m": None, "u": 3}


def test_a_failed_auto_compaction_exits_non_zero(wh: str, events: lamina.Table) -> None:
    """A CLI audit: `compact --auto` listed a chunk's error and exited 0. A chunk it
    skips (a lineage entry holds it) or that races another writer is tried again next
    run (exit 0, the race noted); a compaction that fails exits 1."""
    first = events.segments()[0].interval
    day0 = [s for s in events.segments() if s.interval == first]
    assert len(day0) == 2  # two small segments: auto-compaction merges them
    events.set_properties(**{"compaction.segment_granularity": "MONTH"})
    entry = events.start_replace([day0[0].id], [])
    result = run(wh, "compact", "--auto", "-f", "csv")
    assert result.exit_code == 0 and "skipped: a lineage entry" in result.stdout
    assert "tried again" not in result.output
    events.revert_replace(entry, force=True)
    events.set_properties(**{"compaction.segment_granularity": "DAY"})

    from lamina import failpoints

    def refused(**_: Any) -> None:
        raise errors.CompactionError("refused for the test")

    def raced(**_: Any) -> None:
        raise errors.CommitConflictError("another writer won")

    with failpoints.armed("compaction.minor.begin", refused):
        out = fails(wh, "compact", "--auto")
    assert "1 chunk compaction failed" in out and "refused for the test" in out
    with failpoints.armed("compaction.minor.begin", raced):
        result = run(wh, "compact", "--auto")
    assert result.exit_code == 0 and "tried again next run" in result.output
    os.remove(day0[0].location)  # a live segment's file lost: no retry helps
    out = fails(wh, "compact", "--auto")
    assert "1 chunk compaction failed" in out and "is missing" in out
    assert [s for s in events.segments() if s.interval == first] == day0  # kept


def test_inferred_schemas_need_named_columns_and_type_empty_ones_as_text(
    wh: str, tmp_path: Path, cat: lamina.Catalog
) -> None:
    """A CLI audit: a header naming a column twice (or blank) gave a KeyError traceback
    with --create; a column a sample leaves empty was typed null (no value could ever
    go in); `create-table --like` typed naive times without a zone where `ingest
    --create` gave them UTC's."""
    for header in ("ts,a,a", "ts,,"):
        f = tmp_path / "h.csv"
        f.write_text(f"{header}\n2024-01-01T00:00:00,1,2\n")
        out = fails(wh, "ingest", "d", str(f), "--create", "-t", "ts", "-e", "local")
        assert ("more than once" in out) if "a,a" in header else ("blank name" in out)
    assert cat.list_tables() == []
    empty = tmp_path / "empty_col.csv"
    empty.write_text("ts,a,b\n2024-01-01T00:00:00,1,\n2024-01-02T00:00:00,2,\n")
    ok(wh, "ingest", "y", str(empty), "--create", "-t", "ts", "-e", "local")
    assert cat.load_table("y").schema.field("b").type == pa.string()
    later = tmp_path / "later.csv"
    later.write_text("ts,a,b\n2024-01-03T00:00:00,3,x\n")
    ok(wh, "ingest", "y", str(later), "-e", "local")
    assert cat.load_table("y").to_arrow().column("b").to_pylist() == [None, None, "x"]
    ok(wh, "create-table", "z", "--like", str(later), "-t", "ts")
    assert cat.load_table("z").schema == cat.load_table("y").schema


def test_query_shows_infinite_times_as_they_are(wh: str, cat: lamina.Catalog) -> None:
    """A CLI audit: an infinite timestamp next to a list column raised OverflowError
    (a traceback) in every format, and alone printed as 9999-12-31 (-infinity as year
    1)."""
    sql = (
        "select 'infinity'::timestamp t, '-infinity'::timestamp n, 'infinity'::date d, "
        "'-infinity'::timestamptz z, '2024-01-02 10:00'::timestamp x"
    )
    for extra in ("", ", [1] l"):
        (row,) = json.loads(ok(wh, "query", sql + extra, "-f", "json"))
        assert (row["t"], row["n"], row["d"], row["z"]) == (
            "infinity",
            "-infinity",
            "infinity",
            "-infinity",
        )
        assert row["x"] == "2024-01-02T10:00:00"
        assert "infinity" in ok(wh, "query", sql + extra) and "9999" not in ok(wh, "query", sql)
    mixed = (  # a column holding infinity keeps its other values (a review caught them
        # shown as '<out of range: 19724>'); years past 9999 show as Arrow writes them
        "SELECT * FROM (VALUES (DATE '2024-01-02'), ('infinity'::DATE), (NULL), "
        "(DATE '10000-01-01')) v(d)"
    )
    rows = json.loads(ok(wh, "query", mixed, "-f", "json"))
    assert [r["d"] for r in rows] == ["2024-01-02", "infinity", None, "10000-01-01"]


def test_csv_times_mixing_zoned_naive_and_dates(
    wh: str, tmp_path: Path, events: lamina.Table
) -> None:
    """A CLI audit: a date alone beside zoned times was read as zoned ('-02' of
    2024-01-02 taken for an offset) and refused with pyarrow's advice to call
    assume_timezone. Naive values and dates are UTC, zoned ones keep their offset."""
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(
        "ts,k,v\n2024-01-05T10:00:00Z,901,1.0\n2024-01-06,902,2.0\n"
        "2024-01-06 12:00:00+02:00,903,3.0\n2024-01-07T08:30:00,904,4.0\n"
    )
    assert "4 rows" in ok(wh, "ingest", "events", str(mixed), "-e", "local")
    got = [r for r in events.to_arrow().sort_by("k").to_pylist() if r["k"] > 900]
    assert [r["ts"].isoformat() for r in got] == [
        "2024-01-05T10:00:00+00:00",
        "2024-01-06T00:00:00+00:00",
        "2024-01-06T10:00:00+00:00",
        "2024-01-07T08:30:00+00:00",
    ]


def test_messages_name_their_cause(
    wh: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI audit: every JSON parse error said lamina reads JSON lines, not arrays (a
    JSON-lines file whose value changes type is not an array); a bad
    $LAMINA_LOCAL_MAX_BYTES was not named."""
    lines = tmp_path / "changes.jsonl"
    lines.write_text(
        '{"ts": "2024-01-01T00:00:00Z", "v": 1}\n{"ts": "2024-01-02T00:00:00Z", "v": "x"}\n'
    )
    out = fails(wh, "ingest", "j", str(lines), "--create", "-t", "ts", "-e", "local")
    assert "changed from number to string" in out and "JSON array" not in out
    events = tmp_path / "e.csv"
    events.write_text("ts,v\n2024-01-01T00:00:00,1\n")
    monkeypatch.setenv("LAMINA_LOCAL_MAX_BYTES", "junk")
    out = fails(wh, "ingest", "e", str(events), "--create", "-t", "ts")
    assert "$LAMINA_LOCAL_MAX_BYTES: cannot read 'junk' as a size" in out
    args = ("ingest", "e", str(events), "--create", "-t", "ts", "--local-max-bytes", "x")
    out = fails(wh, *args, code=2)  # a usage error
    assert "'--local-max-bytes': cannot read 'x'" in out


def test_errors_give_advice_in_the_command_line_s_words(wh: str, events: lamina.Table) -> None:
    """A CLI audit: errors named Python arguments (mode='major', segment_granularity,
    time_column) where the command line has options."""
    out = fails(wh, "compact", "events", "--granularity", "WEEK")
    assert "--granularity and --sort-by rewrite whole chunks: use --mode major" in out
    out = fails(wh, "create-table", "q", "-s", "a:int64", "-g", "DAY")
    assert "drop --granularity or name a --time-column" in out
    assert "mode='major'" not in out and "time_column" not in out


def test_what_a_folder_holds_is_told_alike_by_format_size_and_files(tmp_path: Path) -> None:
    """A review: the size that picks the engine counted a folder's 5 MB a.csv.bak that
    is not read, and the format looked into _temporary/ that is not read either."""
    from lamina.engines.files import data_files, input_bytes

    folder = tmp_path / "out"
    (folder / "_temporary" / "0").mkdir(parents=True)
    (folder / "part-0.csv").write_text("ts,v\n2024-01-01T00:00:00,1\n")
    (folder / "part-0.csv.bak").write_bytes(b"x" * 5_000_000)
    (folder / "_temporary" / "0" / "part-1.json").write_text("{}\n")
    (folder / "raw").mkdir()
    (folder / "raw" / "part-00000").write_text("ts,v\n2024-01-02T00:00:00,2\n")
    assert format_of([str(folder)]).value == "csv"
    files = data_files([str(folder)])
    assert [os.path.relpath(f, folder) for f in files] == ["part-0.csv", "raw/part-00000"]
    assert input_bytes([str(folder)]) == sum(os.path.getsize(f) for f in files)
