"""Bad input: a typed error whose message says what to fix, and the table as before."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina import errors
from tests.helpers import SCHEMA, events


def _state(t: lamina.Table) -> tuple[object, ...]:
    """Everything a reader can observe of a table."""
    snap = t.snapshot()
    return (
        snap.seq,
        sorted(s.id for s in snap.segments),
        t.to_arrow().sort_by("k").to_pydict(),
        [(c.id, c.state) for c in t.history() if c.state == "COMPLETED"],
    )


@pytest.fixture
def table(cat: lamina.Catalog) -> lamina.Table:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=3, per_day=10))
    return t


def _files(cat: lamina.Catalog) -> set[str]:
    root = Path(cat.warehouse.root)
    return {str(p) for p in root.rglob("*.parquet")}


def test_missing_time_column(table: lamina.Table) -> None:
    before = _state(table)
    with pytest.raises(errors.SchemaError, match="missing columns \\['ts'\\]"):
        table.append(events().drop_columns(["ts"]))
    assert _state(table) == before


def test_null_times(table: lamina.Table, cat: lamina.Catalog) -> None:
    before, files = _state(table), _files(cat)
    data = events(days=1, per_day=5)
    ts = pa.array([None, *data["ts"].to_pylist()[1:]], pa.timestamp("us"))
    with pytest.raises(errors.TimeColumnError, match="null"):
        table.append(data.set_column(0, "ts", ts))
    assert _state(table) == before
    assert _files(cat) == files


def test_schema_mismatch(table: lamina.Table) -> None:
    before = _state(table)
    bad = events().set_column(1, "k", pa.array(["x"] * 300))
    with pytest.raises(errors.SchemaError, match="k: string -> int64"):
        table.append(bad)
    with pytest.raises(errors.SchemaError, match="unknown columns \\['extra'\\]"):
        table.append(events().append_column("extra", pa.array([1] * 300)))
    assert _state(table) == before


def test_rows_outside_overwrite_interval(table: lamina.Table) -> None:
    before = _state(table)
    with pytest.raises(errors.DataOutsideIntervalError, match="outside the overwrite interval"):
        table.overwrite(events(days=2, per_day=3), interval="2024-01-01/2024-01-02")
    assert _state(table) == before


def test_unaligned_and_invalid_intervals(table: lamina.Table) -> None:
    before = _state(table)
    with pytest.raises(errors.InvalidIntervalError, match="not aligned to DAY"):
        table.overwrite(events(days=1), interval="2024-01-01T06:00:00/2024-01-02")
    with pytest.raises(errors.InvalidIntervalError, match="START/END"):
        table.overwrite(events(days=1), interval="yesterday")
    with pytest.raises(errors.InvalidIntervalError, match="must be after"):
        lamina.Interval.parse("2024-01-02/2024-01-01")
    with pytest.raises(errors.InvalidIntervalError):
        table.to_arrow(interval="2024-13-01/2024-01-01")
    assert _state(table) == before


def test_unknown_table(cat: lamina.Catalog) -> None:
    with pytest.raises(errors.TableNotFoundError, match="no table named 'nope'"):
        cat.load_table("nope")
    with pytest.raises(errors.TableNotFoundError):
        cat.drop_table("nope")
    with pytest.raises(lamina.LaminaError):
        cat.sql("select * from nope")


def test_duplicate_table(table: lamina.Table, cat: lamina.Catalog) -> None:
    before = _state(table)
    with pytest.raises(errors.TableExistsError, match="already exists"):
        cat.create_table("events", schema=pa.schema([("x", pa.int64())]))
    assert cat.load_table("events").schema == SCHEMA
    assert _state(table) == before


def test_time_column_not_in_schema(cat: lamina.Catalog) -> None:
    with pytest.raises(errors.TimeColumnError, match="'when' is not in the schema"):
        cat.create_table("t", schema=SCHEMA, time_column="when")
    with pytest.raises(errors.TimeColumnError, match="must be a timestamp or a date"):
        cat.create_table("t", schema=SCHEMA, time_column="k")
    assert cat.list_tables() == []


def test_invalid_granularity_and_name(cat: lamina.Catalog) -> None:
    with pytest.raises(errors.InvalidGranularityError, match="use one of HOUR, DAY"):
        cat.create_table("t", schema=SCHEMA, time_column="ts", segment_granularity="FORTNIGHT")
    with pytest.raises(errors.InvalidGranularityError):
        cat.create_table("t", schema=SCHEMA, segment_granularity="DAY")
    with pytest.raises(errors.InvalidTableNameError):
        cat.create_table("../etc", schema=SCHEMA)
    with pytest.raises(errors.InvalidTableNameError):
        cat.create_table("events\n", schema=SCHEMA)
    assert cat.list_tables() == []


def test_unsupported_input(table: lamina.Table) -> None:
    before = _state(table)
    with pytest.raises(errors.UnsupportedInputError, match="pass a pyarrow Table"):
        table.append([1, 2, 3])
    assert _state(table) == before


def test_bad_as_of(table: lamina.Table) -> None:
    with pytest.raises(errors.SnapshotNotFoundError, match="no completed commit 999"):
        table.to_arrow(as_of=999)


def test_unreachable_catalog(tmp_path: Path) -> None:
    with pytest.raises(errors.CatalogUnavailableError, match="reachable"):
        lamina.connect(
            catalog="postgresql://nobody@127.0.0.1:1/none", warehouse=str(tmp_path / "wh")
        )
    with pytest.raises(errors.CatalogUnavailableError, match="unsupported catalog backend"):
        lamina.connect(catalog="oracle://x/y", warehouse=str(tmp_path / "wh"))
    with pytest.raises(errors.CatalogUnavailableError):
        lamina.connect(catalog="sqlite:////nonexistent/dir/x.db", warehouse=str(tmp_path / "wh"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_warehouse_not_writable_nonroot(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(errors.WarehouseError, match="not writable"):
        lamina.connect(warehouse=str(ro / "wh"))


def test_warehouse_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(errors.WarehouseError, match="not writable"):
        lamina.connect(warehouse=str(blocker / "wh"))
