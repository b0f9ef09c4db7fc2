"""Column names match as Spark and Delta match them: ignoring case, keeping the
table's spelling; a schema or an input with two names differing only in case is
refused, and the refusal changes nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import SchemaError

SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("user", pa.string()), ("n", pa.int64())])
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def test_input_names_match_ignoring_case_and_the_table_keeps_its_spelling(
    local_cat: lamina.Catalog,
) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    t.append(pa.table({"TS": [T0], "User": ["ann"], "N": [1]}))
    t.append(pa.table({"n": [2], "USER": ["bob"], "Ts": [T0]}).to_pandas())
    got = t.to_arrow().sort_by("n")
    assert got.schema.names == ["ts", "user", "n"]
    assert got.column("user").to_pylist() == ["ann", "bob"]
    assert local_cat.load_table("e").schema.names == ["ts", "user", "n"]


def test_two_input_names_differing_in_case_are_refused(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    with pytest.raises(SchemaError, match="'user' and 'User', which name one column"):
        t.append(pa.table({"ts": [T0], "user": ["a"], "User": ["b"], "n": [1]}))
    assert t.history() == []


def test_a_schema_with_names_differing_in_case_is_refused(local_cat: lamina.Catalog) -> None:
    with pytest.raises(SchemaError, match="differ only in case"):
        local_cat.create_table("e", pa.schema([("ts", pa.timestamp("us")), ("TS", pa.int64())]))
    assert local_cat.list_tables() == []
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    with pytest.raises(SchemaError, match="already has a column 'user'"):
        t.add_columns(pa.field("USER", pa.string()))
    with pytest.raises(SchemaError, match="differ only in case"):
        t.add_columns(pa.field("city", pa.string()), pa.field("City", pa.string()))
    assert t.schema == SCHEMA and t.history() == []


def test_an_upsert_key_matches_ignoring_case(local_cat: lamina.Catalog) -> None:
    schema = pa.schema(
        [("ts", pa.timestamp("us", tz="UTC")), ("Id", pa.int64()), ("v", pa.int64())]
    )
    t = local_cat.create_table("u", schema, time_column="ts", primary_key="Id")
    t.upsert(pa.table({"ts": [T0], "id": [1], "V": [1]}))
    t.upsert(pa.table({"TS": [T0 + dt.timedelta(hours=1)], "ID": [1], "v": [2]}))
    assert t.to_arrow().select(["Id", "v"]).to_pylist() == [{"Id": 1, "v": 2}]


def test_the_cli_reads_headers_in_any_case(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
    schema = "ts:timestamp[us, tz=UTC],user:string,n:int64"
    made = runner.invoke(app, ["--warehouse", wh, "create-table", "e", "-t", "ts", "-s", schema])
    assert made.exit_code == 0, made.output
    (tmp_path / "a.csv").write_text("TS,User,N\n2024-01-01 10:00:00,ann,1\n")
    (tmp_path / "b.jsonl").write_text('{"Ts": "2024-01-01T11:00:00Z", "USER": "bob", "n": 2}\n')
    for f in ("a.csv", "b.jsonl"):
        got = runner.invoke(
            app, ["--warehouse", wh, "ingest", "e", str(tmp_path / f), "-e", "local"]
        )
        assert got.exit_code == 0, got.output
    with lamina.connect(warehouse=wh) as cat:
        rows = cat.load_table("e").to_arrow().sort_by("n").to_pylist()
    assert [(r["ts"].hour, r["user"], r["n"]) for r in rows] == [(10, "ann", 1), (11, "bob", 2)]
