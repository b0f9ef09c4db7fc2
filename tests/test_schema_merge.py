"""An opt-in schema merge, as Delta's ``mergeSchema``: ``evolve=True`` on a write adds
the input's new nullable columns in the same commit as its rows; a NOT NULL new
column, a type that does not fit or a reserved or clashing name is refused, and a
refused write changes nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import CommitConflictError, SchemaError
from tests.helpers import SCHEMA, events

NEW = pa.schema([("country", pa.string()), ("seen", pa.timestamp("ns"))])


def _with_new(data: pa.Table) -> pa.Table:
    n = data.num_rows
    seen = pa.array([dt.datetime(2024, 2, 1)] * n, pa.timestamp("ns"))
    return data.append_column("country", pa.array(["fr"] * n)).append_column("seen", seen)


def test_evolve_adds_new_columns_in_the_commit_of_the_rows(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    first = t.append(events(days=1, per_day=2))
    other = local_cat.load_table("e")
    with pytest.raises(SchemaError, match=r"unknown columns \['country', 'seen'\]"):
        t.append(_with_new(events(days=1, per_day=1)))  # not without evolve
    done = t.append(_with_new(events(days=1, per_day=1, seed=1)), evolve=True)
    assert [c.action for c in t.history()] == ["APPEND", "APPEND"]  # no ALTER of its own
    assert done.metadata["add_columns"] == [
        {"name": "country", "type": "string"},
        {"name": "seen", "type": "timestamp[us, tz=UTC]"},  # the inferred timestamp type
    ]
    assert t.schema.names == [*SCHEMA.names, "country", "seen"]
    assert local_cat.load_table("e").schema == t.schema
    got = t.to_arrow().sort_by("k")
    assert got.column("country").to_pylist() == [None, "fr", None]
    assert got.column("seen").null_count == 2
    assert t.to_arrow(as_of=first.version).schema.names == SCHEMA.names  # the schema it had
    assert local_cat.sql("SELECT count(country) AS n FROM e").to_pylist() == [{"n": 1}]
    other.append(events(days=1, per_day=1, seed=2))  # an older handle: nulls there
    assert local_cat.load_table("e").count() == 4


def test_evolve_on_overwrite_and_upsert(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=2))
    t.overwrite(_with_new(events(days=1, per_day=1, seed=1)), evolve=True)
    assert t.to_arrow().column("country").to_pylist() == ["fr"]
    keyed = pa.schema([pa.field("k", pa.int64()), ("ts", pa.timestamp("us")), ("v", pa.float64())])
    u = local_cat.create_table("u", keyed, time_column="ts", primary_key="k")
    u.upsert(events(days=1, per_day=2).select(["k", "ts", "v"]))
    u.upsert(_with_new(events(days=1, per_day=1).select(["k", "ts"])), evolve=True)
    got = u.to_arrow().sort_by("k")
    assert got.column("country").to_pylist() == ["fr", None]
    assert got.column("v").to_pylist()[0] is None  # the newer record of key 0 has no v
    p = local_cat.create_table("p", keyed, time_column="ts", primary_key="k", partial_upsert={})
    p.upsert(events(days=1, per_day=1).select(["k", "ts", "v"]))
    later = events(days=1, per_day=1, start="2024-01-02").select(["k", "ts"])
    p.upsert(_with_new(later), evolve=True)
    assert p.to_arrow().select(["k", "country"]).to_pylist() == [{"k": 0, "country": "fr"}]
    assert p.to_arrow().column("v").null_count == 0  # a partial upsert keeps v


def test_bad_merges_are_refused_and_change_nothing(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=1))
    base = events(days=1, per_day=1, seed=1)
    fixed = base.append_column(pa.field("n", pa.int64(), nullable=False), pa.array([1]))
    with pytest.raises(SchemaError, match=r"declares \['n'\] NOT NULL"):
        t.append(fixed, evolve=True)
    with pytest.raises(SchemaError, match="k: string -> int64"):
        t.append(
            base.set_column(1, "k", pa.array(["x"])).append_column("c", pa.array([1])), evolve=True
        )
    with pytest.raises(SchemaError, match="reserved"):
        t.append(base.append_column("_change", pa.array(["x"])), evolve=True)
    with pytest.raises(SchemaError, match="'City' and 'city', which name one column"):
        t.append(
            base.append_column("City", pa.array([1])).append_column("city", pa.array([2])),
            evolve=True,
        )
    with pytest.raises(lamina.errors.InvalidArgumentError, match="evolve"):
        t.append(base, evolve="yes")  # type: ignore[arg-type]
    assert t.schema == SCHEMA and local_cat.load_table("e").schema == SCHEMA
    assert t.count() == 1 and len(t.history()) == 1


def test_a_column_added_meanwhile_is_taken_if_it_is_the_same(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    old = local_cat.load_table("e")
    t.add_columns(pa.field("country", pa.string()))
    data = events(days=1, per_day=1).append_column("country", pa.array(["fr"]))
    old.append(data, evolve=True)  # its commit adds what the table has now: kept as it is
    assert old.schema == t.schema == local_cat.load_table("e").schema
    assert t.to_arrow().column("country").to_pylist() == ["fr"]
    stale = local_cat.create_table("f", SCHEMA, time_column="ts")
    other = local_cat.load_table("f")
    other.add_columns(pa.field("country", pa.int64()))
    with pytest.raises(CommitConflictError, match="adds column 'country'"):
        stale.append(data, evolve=True)  # another type: refused, nothing published
    assert other.count() == 0 and other.schema.field("country").type == pa.int64()


def test_ingest_evolve(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
    schema = "ts:timestamp[us, tz=UTC],k:int64"
    made = runner.invoke(app, ["--warehouse", wh, "create-table", "e", "-t", "ts", "-s", schema])
    assert made.exit_code == 0, made.output
    (tmp_path / "a.csv").write_text("ts,k,country\n2024-01-01T00:00:00Z,1,fr\n")
    args = ["--warehouse", wh, "ingest", "e", str(tmp_path / "a.csv"), "-e", "local"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "unknown columns ['country']" in refused.stderr
    got = runner.invoke(app, [*args, "--evolve"])
    assert got.exit_code == 0, got.output
    with lamina.connect(warehouse=wh) as cat:
        t = cat.load_table("e")
        assert t.schema.names == ["ts", "k", "country"] and len(t.history()) == 1
        assert t.to_arrow().column("country").to_pylist() == ["fr"]
