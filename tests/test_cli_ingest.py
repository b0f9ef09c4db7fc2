"""What ``lamina ingest`` and ``lamina push`` say: where a CSV or JSON file is wrong
(1-based line, column), JSON records larger than a block, inputs without rows, the
schema ``--create`` inferred, Ctrl-C, and pushes that could not be reverted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import lamina
from lamina import failpoints
from lamina.cli import app
from lamina.core.schema_text import parse_schema
from lamina.engines.files import FileFormat
from lamina.engines.local import read_batches
from lamina.errors import InputFileError

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
SCHEMA = "ts:timestamp[us, tz=UTC],user:string,amount:float64"
ROW = "2024-01-01T00:00:00"


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


@pytest.fixture
def events(wh: str) -> lamina.Table:
    cat = lamina.connect(warehouse=wh)
    t = cat.create_table("events", parse_schema(SCHEMA), "ts", "DAY")
    cat.close()
    return t


def run(wh: str, *args: str) -> Result:
    return runner.invoke(app, ["--warehouse", wh, *args])


def error_of(wh: str, *args: str) -> str:
    result = run(wh, *args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("value.csv", f"ts,user,amount\n{ROW},a,1.5\n{ROW},b,x\n", "line 3, column 'amount'"),
        ("fields.csv", f"ts,user,amount\n{ROW},a,1\n\n{ROW},b,2,3\n", "line 4:"),
        (
            "quoted.csv",
            f'ts,user,amount\n{ROW},"a, b",1\n{ROW},c,oops\n',
            "line 3, column 'amount'",
        ),
        ("time.csv", f"ts,user,amount\n{ROW},a,1\nyesterday,b,2\n", "line 3, column 'ts'"),
        ("tabs.tsv", f"ts\tuser\tamount\n{ROW}\ta\t1\n{ROW}\tb\t?\n", "line 3, column 'amount'"),
        (
            "kind.jsonl",
            f'{{"ts":"{ROW}","user":"a","amount":1}}\n{{"ts":"{ROW}","user":"b","amount":"x"}}\n',
            "line 2, column 'amount'",
        ),
        ("syntax.jsonl", f'{{"ts":"{ROW}","user":"a"}}\n\n{{"ts":"{ROW}",\n', "line 3:"),
        (
            "time.jsonl",
            f'{{"ts":"{ROW}","user":"a"}}\n{{"ts":"soon","user":"b"}}\n',
            "line 2, column 'ts'",
        ),
    ],
)
def test_errors_name_line_and_column(
    wh: str, tmp_path: Path, events: lamina.Table, name: str, text: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    message = error_of(wh, "ingest", "events", str(path))
    assert f"cannot read {path} as " in message and where in message, message
    assert " in row " not in message  # Arrow's row of a block: not the file's
    assert events.count() == 0


def test_a_json_record_larger_than_a_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("w") as f:
        f.write(json.dumps({"k": 1, "s": "a"}) + "\n")
        f.write(json.dumps({"k": 2, "s": "x" * (12 << 20)}) + "\n")  # 3 blocks of 4 MiB
        for k in range(3, 20_003):
            f.write(json.dumps({"k": k, "s": "b"}) + "\n")
    got = read_batches(FileFormat.json, [str(path)]).read_all()
    assert got.column("k").to_pylist() == list(range(1, 20_003))  # each row once
    assert len(got.column("s")[1].as_py()) == 12 << 20

    monkeypatch.setenv("LAMINA_JSON_MAX_BLOCK", "4MB")
    with pytest.raises(InputFileError, match=r"raise \$LAMINA_JSON_MAX_BLOCK \(e.g."):
        read_batches(FileFormat.json, [str(path)]).read_all()


def test_inputs_without_rows_commit_nothing(wh: str, tmp_path: Path, events: lamina.Table) -> None:
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("ts,user,amount\n")
    (tmp_path / "empty.jsonl").write_text("")
    for name in ("empty.csv", "header.csv", "empty.jsonl"):
        path = str(tmp_path / name)
        result = run(wh, "ingest", "events", path)
        assert result.exit_code == 0, result.output
        assert f"no rows in {path}: nothing ingested (no commit)" in result.stderr
        result = run(wh, "ingest", "fresh", path, "--create", "-t", "ts")
        assert result.exit_code == 0, result.output
        assert "table fresh not created" in result.stderr
    assert events.history() == []
    cat = lamina.connect(warehouse=wh)
    assert cat.list_tables() == ["events"]
    cat.close()
    # an empty file among others is skipped
    (tmp_path / "day.csv").write_text(f"ts,user,amount\n{ROW},a,1\n")
    both = [str(tmp_path / "empty.csv"), str(tmp_path / "day.csv")]
    assert run(wh, "ingest", "events", *both).exit_code == 0
    assert events.count() == 1


def test_create_prints_what_it_inferred(wh: str, tmp_path: Path) -> None:
    path = tmp_path / "day.csv"
    path.write_text(f"ts,user,amount\n{ROW},a,1.5\n")
    result = run(wh, "ingest", "timed", str(path), "--create", "-t", "ts", "-g", "hour")
    assert result.exit_code == 0, result.output
    assert "created table timed (time column ts, HOUR chunks)" in result.stdout
    assert "timestamp[us, tz=UTC]" in result.stdout and "double" in result.stdout
    assert "warning" not in result.stderr

    result = run(wh, "ingest", "untimed", str(path), "--create")
    assert result.exit_code == 0, result.output
    assert "created table untimed (no time column)" in result.stdout
    assert "warning: column ts holds times, but no --time-column was given" in result.stderr
    assert "--create --time-column ts" in result.stderr


def _interrupt(**_: object) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_says_what_was_published(wh: str, tmp_path: Path, events: lamina.Table) -> None:
    path = tmp_path / "day.csv"
    path.write_text(f"ts,user,amount\n{ROW},a,1\n")
    with failpoints.armed("write.publish.before", _interrupt):
        result = run(wh, "ingest", "events", str(path))
    assert result.exit_code == 130
    assert "interrupted: nothing was published" in result.stderr
    assert events.count() == 0

    with failpoints.armed("write.publish.after", _interrupt):
        result = run(wh, "ingest", "events", str(path))
    assert result.exit_code == 130
    committed = [c.id for c in events.history() if c.state == "COMPLETED"]
    assert f"interrupted after commit {committed[-1]} was published on events" in result.stderr
    assert events.count() == 1

    with failpoints.armed("write.publish.before", _interrupt):
        result = run(wh, "ingest", "fresh", str(path), "--create", "-t", "ts")
    assert result.exit_code == 130 and "nothing was published" in result.stderr
    cat = lamina.connect(warehouse=wh)
    assert "fresh" not in cat.list_tables()
    cat.close()


def test_a_push_that_cannot_be_reverted_asks_for_force(
    wh: str, tmp_path: Path, events: lamina.Table
) -> None:
    path = tmp_path / "day.csv"
    path.write_text(f"ts,user,amount\n{ROW},a,1\n")
    message = error_of(wh, "push", "events", str(path), "-e", "local")
    assert "consistent_push=false" in message and "pass --force" in message
    assert events.count() == 0
    result = run(wh, "push", "events", str(path), "-e", "local", "--force")
    assert result.exit_code == 0, result.output
    assert events.count() == 1 and "lineage entry" not in result.stdout

    cat = lamina.connect(warehouse=wh)
    schema = parse_schema("ts:timestamp[us, tz=UTC],user:string")
    schema = schema.set(1, schema.field("user").with_nullable(False))
    cat.create_table("planes", schema, "ts", "DAY", primary_key=["user"])
    cat.close()
    message = error_of(wh, "push", "planes", str(path), "-e", "local")
    assert "upsert table" in message and "pass --force" in message


def test_ctrl_c_during_a_push(wh: str, tmp_path: Path) -> None:
    with lamina.connect(warehouse=wh) as cat:
        t = cat.create_table("snap", parse_schema(SCHEMA), "ts", "DAY", consistent_push=True)
        t.append(lamina_rows())
    path = tmp_path / "day.csv"
    path.write_text(f"ts,user,amount\n{ROW},z,9\n")
    with failpoints.armed("write.publish.before", _interrupt):
        result = run(wh, "push", "snap", str(path), "-e", "local")
    assert result.exit_code == 130, result.output
    assert "interrupted: nothing was published" in result.stderr
    with lamina.connect(warehouse=wh) as cat:
        assert cat.sql("SELECT user FROM snap").column("user").to_pylist() == ["a"]


def lamina_rows() -> object:
    import datetime as dt

    import pyarrow as pa

    return pa.table(
        {
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
            "user": ["a"],
            "amount": [1.0],
        }
    )
