"""Missing nullable columns read as nulls: a writer that still sends the columns a
table had before ``add_columns`` keeps working, through any handle and any input
kind, as Delta and Iceberg appends do; NOT NULL columns and the time column are still
required, named, and a refused write changes nothing. (Spark's path:
tests/test_spark_schema_inputs.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import SchemaError
from tests.helpers import SCHEMA, events

C = pa.field("country", pa.string())


def _as_reader(t: pa.Table) -> Any:
    return pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=2))


def _as_polars(t: pa.Table) -> Any:
    import polars as pl

    return pl.from_arrow(t)


INPUTS: dict[str, Callable[[pa.Table], Any]] = {
    "table": lambda t: t,
    "batch": lambda t: t.combine_chunks().to_batches()[0],
    "reader": _as_reader,
    "pandas": lambda t: t.to_pandas(),
    "polars": _as_polars,
}


def test_a_writer_without_an_added_column_writes_nulls_there(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    old = local_cat.load_table("e")  # loaded before the change
    t.add_columns(C)
    new = local_cat.load_table("e")  # loaded after it
    for i, kind in enumerate(INPUTS):  # every input kind, through every handle
        for j, handle in enumerate([t, old, new]):
            handle.append(INPUTS[kind](events(days=1, per_day=2, seed=3 * i + j)))
    t.append(events(days=1, per_day=1).append_column(C, pa.array(["fr"])))  # one that knows it
    got = local_cat.load_table("e").to_arrow()
    assert got.num_rows == 31 and got.schema.names == [*SCHEMA.names, "country"]
    assert [c for c in got.column("country").to_pylist() if c is not None] == ["fr"]
    nulls = local_cat.sql("SELECT count(*) AS n FROM e WHERE country IS NULL")
    assert nulls.to_pylist() == [{"n": 30}]


def test_an_overwrite_and_an_upsert_take_inputs_without_nullable_columns(
    local_cat: lamina.Catalog,
) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    t.overwrite(events(days=1, per_day=2).drop_columns(["v", "s"]))
    assert t.to_arrow().column("s").to_pylist() == [None, None]
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), *SCHEMA.remove(1)])
    u = local_cat.create_table("u", schema, time_column="ts", primary_key="k")
    u.upsert(events(days=1, per_day=2).select(["k", "ts", "v"]))
    assert u.to_arrow().column("s").to_pylist() == [None, None]


def test_not_null_and_time_columns_stay_required(local_cat: lamina.Catalog) -> None:
    schema = SCHEMA.append(pa.field("n", pa.int64(), nullable=False))
    t = local_cat.create_table("e", schema, time_column="ts")
    data = events(days=1, per_day=2).append_column("n", pa.array([1, 2]))
    t.append(data)
    with pytest.raises(SchemaError, match=r"missing columns \['n'\].*NOT NULL columns \['n'\]"):
        t.append(data.drop_columns(["n"]))
    with pytest.raises(SchemaError, match=r"missing columns \['ts'\].*time, key"):
        t.append(data.drop_columns(["ts"]))  # nullable, but the time column
    with pytest.raises(SchemaError, match=r"unknown columns \['x'\]"):
        t.append(data.append_column("x", pa.array([1, 2])))
    assert t.count() == 2 and [c.action for c in t.history()] == ["APPEND"]


def test_a_null_in_a_not_null_column_names_the_rows(local_cat: lamina.Catalog) -> None:
    schema = SCHEMA.append(pa.field("n", pa.int64(), nullable=False))
    t = local_cat.create_table("e", schema, time_column="ts")
    data = events(days=1, per_day=8).append_column("n", pa.array([1, None, 3, 4, 5, 6, 7, None]))
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=4))
    with pytest.raises(SchemaError, match=r"2 null\(s\) there: rows 1, 7 .*k=1,") as info:
        t.append(data)
    assert "/data/c" not in str(info.value)  # no file of lamina's own
    with pytest.raises(SchemaError, match=r"2 null\(s\) there: rows 1, 7 "):
        t.append(reader)
    assert t.count() == 0


def test_the_cli_ingests_a_file_without_a_nullable_column(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
    run = [
        ["create-table", "e", "-t", "ts", "-s", "ts:timestamp[us, tz=UTC],k:int64,v:float64"],
        ["add-columns", "e", "-s", "country:string"],
    ]
    for args in run:
        assert runner.invoke(app, ["--warehouse", wh, *args]).exit_code == 0
    (tmp_path / "a.csv").write_text("ts,k,v\n2024-01-01T00:00:00Z,1,0.5\n")
    (tmp_path / "b.jsonl").write_text('{"ts": "2024-01-01T01:00:00Z", "k": 2}\n')
    for f in ("a.csv", "b.jsonl"):
        got = runner.invoke(
            app, ["--warehouse", wh, "ingest", "e", str(tmp_path / f), "-e", "local"]
        )
        assert got.exit_code == 0, got.output
    with lamina.connect(warehouse=wh) as cat:
        rows = cat.load_table("e").to_arrow().sort_by("k").to_pylist()
    assert [(r["k"], r["v"], r["country"]) for r in rows] == [(1, 0.5, None), (2, None, None)]
