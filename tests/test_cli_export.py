"""``lamina query ... --output FILE``: a whole result written as CSV, JSON lines, a JSON
array or Parquet (streamed), read back equal to the query's own result."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import lamina
from lamina.cli import app

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
UTC = dt.UTC
SQL = "SELECT * FROM events ORDER BY k"


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A table whose values test the writers: zoned times (UTC and another zone),
    nulls, text needing quotes, non-finite floats (read only: shared by the tests)."""
    path = str(tmp_path_factory.mktemp("export") / "wh")
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)
    n = 2500  # more than one batch of the readers
    data = pa.table(
        {
            "ts": pa.array(
                [start + dt.timedelta(minutes=i, microseconds=i) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "k": pa.array(range(n), pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f'a, "b"\nc{i}' for i in range(n)]),
            "v": pa.array([float("nan") if i == 3 else i / 4 for i in range(n)]),
            "paris": pa.array(
                [start + dt.timedelta(hours=i) for i in range(n)],
                pa.timestamp("ms", tz="Europe/Paris"),
            ),
        }
    )
    with lamina.connect(warehouse=path) as cat:
        cat.create_table("events", data.schema, "ts", "DAY").append(data)
    return path


def run(wh: str, *args: str) -> Result:
    return runner.invoke(app, ["--warehouse", wh, *args])


def written(wh: str, *args: str) -> str:
    result = run(wh, *args)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the rows go to the file, the note to stderr
    return result.stderr


def expected(wh: str, sql: str = SQL) -> pa.Table:
    with lamina.connect(warehouse=wh) as cat:
        return cat.sql(sql)


def test_csv_reads_back_equal(wh: str, tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    note = written(wh, "query", SQL, "--output", str(out))
    assert f"wrote 2,500 rows to {out} (csv" in note
    want = expected(wh)
    lines = out.read_text().splitlines()
    assert lines[0] == '"ts","k","name","v","paris"'
    assert lines[1].startswith('"2024-01-01 00:00:00.000000Z",0,,0')  # UTC as Arrow writes it
    got = pacsv.read_csv(
        out,
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=want.schema, strings_can_be_null=True, null_values=[""]
        ),
    )
    assert got.num_rows == want.num_rows
    for name in ("ts", "k", "name", "paris"):
        assert got.column(name).equals(want.column(name)), name
    v = got.column("v").to_pylist()
    assert v[3] != v[3] and v[:3] == want.column("v").to_pylist()[:3]  # NaN stays NaN


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_reads_back_equal(wh: str, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"out.{fmt}"
    written(wh, "query", SQL, "-o", str(out))
    text = out.read_text()
    records = json.loads(text) if fmt == "json" else [json.loads(x) for x in text.splitlines()]
    want = expected(wh).to_pylist()
    assert len(records) == len(want)
    assert [r["k"] for r in records] == [w["k"] for w in want]
    assert [r["name"] for r in records] == [w["name"] for w in want]
    first = dt.datetime.fromisoformat(records[1]["ts"])
    assert first == want[1]["ts"]


def test_parquet_keeps_the_types(wh: str, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    written(wh, "query", SQL, "--output", str(out), "--format", "parquet")
    got = pq.read_table(out)
    want = expected(wh)
    assert got.num_rows == want.num_rows
    for name in ("ts", "k", "name"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist()


def test_limit_format_and_extension(wh: str, tmp_path: Path) -> None:
    out = tmp_path / "few.data"
    assert "wrote 3 rows" in written(wh, "query", SQL, "-o", str(out), "-f", "jsonl", "-n", "3")
    assert [json.loads(x)["k"] for x in out.read_text().splitlines()] == [0, 1, 2]
    empty = tmp_path / "none.csv"
    assert "wrote 0 rows" in written(
        wh, "query", "SELECT k FROM events WHERE k < 0", "-o", str(empty)
    )
    assert empty.read_text().strip() == '"k"'


def test_refusals(wh: str, tmp_path: Path) -> None:
    def usage(*args: str) -> str:
        result = run(wh, "query", SQL, *args)
        assert result.exit_code == 2, result.output
        return result.output

    assert "from its extension" in usage("-o", str(tmp_path / "out.txt"))
    assert "a file takes csv, json, jsonl or parquet" in usage("-o", "x.csv", "-f", "table")
    assert "give --output" in usage("-f", "parquet")
    result = run(wh, "query", SQL, "-o", str(tmp_path / "no" / "out.csv"))
    assert result.exit_code == 1 and "there is no folder" in result.stderr
    result = run(wh, "query", "SELECT * FROM nope", "-o", str(tmp_path / "x.csv"))
    assert result.exit_code == 1 and "query failed" in result.stderr
    assert not (tmp_path / "x.csv").exists()
