"""Bad input: a typed error whose message says what to fix, and the table as before."""

from __future__ import annotations

import os
import re
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
    # SQL does not tell names apart by case: `SELECT * FROM "EVENTS"` read 'events'
    with pytest.raises(errors.TableExistsError, match="'events' already exists, and SQL"):
        cat.create_table("EVENTS", schema=pa.schema([("x", pa.int64())]))
    assert cat.list_tables() == ["events"]
    assert _state(table) == before


def test_time_column_not_in_schema(cat: lamina.Catalog) -> None:
    with pytest.raises(errors.TimeColumnError, match="'when' is not in the schema"):
        cat.create_table("t", schema=SCHEMA, time_column="when")
    with pytest.raises(errors.TimeColumnError, match="must be a timestamp or a date"):
        cat.create_table("t", schema=SCHEMA, time_column="k")
    assert cat.list_tables() == []


@pytest.mark.parametrize(
    "t",
    [pa.timestamp("us", tz="Mars/Olympus"), pa.list_(pa.timestamp("ms", tz="Nope/Nowhere"))],
)
def test_a_time_zone_arrow_cannot_find_is_refused_at_create(
    cat: lamina.Catalog, t: pa.DataType
) -> None:
    """It was stored, then every read converting the rows failed (pandas, to_pylist)."""
    with pytest.raises(errors.SchemaError, match="not in the time zone database"):
        cat.create_table("z", pa.schema([("ts", pa.timestamp("us")), ("c", t)]), "ts")
    assert cat.list_tables() == []
    good = pa.schema(
        [("ts", pa.timestamp("us", tz="Europe/Paris")), ("c", pa.timestamp("s", tz="+01:00"))]
    )
    assert cat.create_table("z", good, "ts").schema == good


def test_hour_chunks_on_a_date_column_are_refused(cat: lamina.Catalog) -> None:
    schema = pa.schema([("d", pa.date32()), ("v", pa.int64())])
    with pytest.raises(errors.InvalidGranularityError, match="holds dates"):
        cat.create_table("d", schema, time_column="d", segment_granularity="HOUR")
    assert cat.list_tables() == []
    assert cat.create_table("d", schema, time_column="d").granularity.value == "DAY"


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
    with pytest.raises(errors.SnapshotNotFoundError, match="has no version 999"):
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
    # a CLI hunt: a file that is not a database, a warehouse URI of no known filesystem
    (tmp_path / "d.csv").write_text("a,b\n1,2\n")
    with pytest.raises(errors.CatalogUnavailableError, match="not a database"):
        lamina.connect(catalog=f"sqlite:///{tmp_path}/d.csv", warehouse=str(tmp_path / "wh"))
    with pytest.raises(errors.WarehouseError, match="cannot open warehouse 'ftp://x/y'"):
        lamina.connect(catalog=f"sqlite:///{tmp_path}/c.db", warehouse="ftp://x/y")
    with pytest.raises(errors.WarehouseError, match="empty"):  # not ./warehouse silently
        lamina.connect(catalog=f"sqlite:///{tmp_path}/c.db", warehouse="")


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


# -- table definitions and inputs an input hunt found (each refused before anything) --


def test_create_table_refuses_upsert_properties_and_bad_policies(cat: lamina.Catalog) -> None:
    """``upsert.*`` properties would skip every check of the upsert definition; a
    compaction policy naming no column would fail at each auto-compaction run."""
    with pytest.raises(errors.PropertyError, match="primary_key, comparison_column"):
        cat.create_table("u", SCHEMA, time_column="ts", properties={"upsert.primary_key": "k"})
    with pytest.raises(errors.CompactionError, match="'nope', not a column"):
        cat.create_table("c", SCHEMA, time_column="ts", properties={"compaction.sort_by": "nope"})
    with pytest.raises(errors.CompactionError, match="do not nest"):
        cat.create_table(
            "w", SCHEMA, time_column="ts", segment_granularity="MONTH",
            properties={"compaction.segment_granularity": "WEEK"},
        )  # fmt: skip
    assert cat.list_tables() == []


@pytest.mark.parametrize(
    ("schema", "primary_key", "error", "match"),
    [
        (pa.schema([("ts", pa.timestamp("us")), ("a", pa.int64()), ("a", pa.string())]),
         None, errors.SchemaError, "'a' appears twice"),
        (pa.schema([("ts", pa.timestamp("us")), ("_change", pa.string())]),
         None, errors.SchemaError, "t.read_changes adds"),
        # SQL does not tell these apart: `SELECT "Amount"` read the other column
        (pa.schema([("ts", pa.timestamp("us")), ("amount", pa.int64()), ("Amount", pa.int64())]),
         None, errors.SchemaError, "'amount' and 'Amount' differ only in case"),
        (pa.schema([("ts", pa.timestamp("us")), ("", pa.int64())]),
         None, errors.SchemaError, "an empty name"),
        # a Spark write replaced such a column by its chunk column (a Spark hunt)
        (pa.schema([("ts", pa.timestamp("us")), ("__lamina_chunk", pa.int64())]),
         None, errors.SchemaError, "names starting with __lamina are lamina's own"),
        (pa.schema([("ts", pa.timestamp("us")), ("__LAMINA_r", pa.int64())]),
         None, errors.SchemaError, "names starting with __lamina are lamina's own"),
        (pa.schema([("ts", pa.timestamp("us")), ("c", pa.decimal128(4, -2))]),
         None, errors.UnsupportedTypeError, "decimal128\\(4, -2\\), which lamina cannot store"),
        (pa.schema([("ts", pa.timestamp("us")), pa.field("k", pa.int64(), False),
                    ("$valid_from", pa.int64())]),
         "k", errors.UpsertError, "starting with '\\$'"),
        (pa.schema([("ts", pa.timestamp("us")), pa.field("$k", pa.int64(), False)]),
         "$k", errors.UpsertError, "starting with '\\$'"),
    ],
)  # fmt: skip
def test_create_table_refuses_repeated_and_reserved_column_names(
    cat: lamina.Catalog, schema: pa.Schema, primary_key: str | None, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        cat.create_table("t", schema, time_column="ts", primary_key=primary_key)
    assert cat.list_tables() == []


@pytest.mark.parametrize("upsert", [False, True])
def test_inputs_arrow_refuses_get_typed_errors_and_write_nothing(
    cat: lamina.Catalog, upsert: bool
) -> None:
    """A null in a NOT NULL column, a column given twice, a pandas frame Arrow cannot
    take: SchemaError before the commit opens (no ABORTED commit in the history)."""
    import pandas as pd

    schema = pa.schema(
        [
            ("ts", pa.timestamp("us")),
            pa.field("k", pa.int64(), False),
            pa.field("req", pa.int64(), False),
        ]
    )
    t = cat.create_table("t", schema, time_column="ts", primary_key="k" if upsert else None)
    write = t.upsert if upsert else t.append
    ts = pa.array([0, 1], pa.timestamp("us"))
    write(pa.table({"ts": ts, "k": [1, 2], "req": [1, 2]}, schema=schema))
    history, files = t.history(), _files(cat)
    with pytest.raises(errors.SchemaError, match="'req' is NOT NULL .* 1 null"):
        write(pa.table({"ts": ts, "k": [3, 4], "req": [5, None]}))
    with pytest.raises(errors.SchemaError, match="column 'req' more than once"):
        write(pa.Table.from_arrays([ts, pa.array([3, 4]), pa.array([1, 1]), pa.array([2, 2])],
                                   names=["ts", "k", "req", "req"]))  # fmt: skip
    with pytest.raises(errors.SchemaError, match="pandas DataFrame to Arrow"):
        write(pd.DataFrame({"ts": ts.to_pandas(), "k": [3, 4], "req": [1, "x"]}))
    assert t.history() == history and _files(cat) == files
    assert t.to_arrow().sort_by("k")["k"].to_pylist() == [1, 2]


def test_an_upsert_overwrite_outside_its_interval_opens_no_commit(cat: lamina.Catalog) -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), pa.field("k", pa.int64(), False)])
    t = cat.create_table("t", schema, time_column="ts", primary_key="k")
    t.upsert(pa.table({"ts": pa.array([0], pa.timestamp("us")), "k": [1]}, schema=schema))
    history = t.history()
    late = pa.table({"ts": pa.array([3 * 86_400_000_000], pa.timestamp("us")), "k": [1]})
    with pytest.raises(errors.DataOutsideIntervalError, match="widen the interval"):
        t.overwrite(late, interval="1970-01-01/1970-01-02")
    assert t.history() == history


def test_time32_comparison_columns_and_narrow_decimal_keys_upsert(cat: lamina.Catalog) -> None:
    """Types create_table took but upserts failed on (untyped Arrow errors): a time32
    comparison column; decimal32/decimal64 keys and comparison columns (now stored as
    decimal128, what Parquet readers give back)."""
    import datetime as dt
    from decimal import Decimal as D

    d32 = pa.decimal32(5, 2)
    schema = pa.schema(
        [("ts", pa.timestamp("us")), pa.field("k", d32, False), ("c", pa.time32("s")),
         ("m", pa.decimal64(12, 2)), ("v", pa.int64())]
    )  # fmt: skip
    by_time = cat.create_table(
        "a", schema, time_column="ts", primary_key="k", comparison_column="c"
    )
    by_dec = cat.create_table("b", schema, time_column="ts", primary_key="k", comparison_column="m")
    assert by_time.schema.field("k").type == pa.decimal128(5, 2)

    def batch(*rows: tuple[str, int, str, int]) -> pa.Table:
        return pa.table(
            {
                "ts": pa.array([dt.datetime(2024, 1, 1)] * len(rows), pa.timestamp("us")),
                "k": pa.array([D(r[0]) for r in rows], d32),
                "c": pa.array([dt.time(r[1]) for r in rows], pa.time32("s")),
                "m": pa.array([D(r[2]) for r in rows], pa.decimal64(12, 2)),
                "v": [r[3] for r in rows],
            }
        )

    for t in (by_time, by_dec):
        t.upsert(batch(("1.00", 5, "9.50", 1), ("2.00", 5, "1.00", 2), ("1.00", 6, "10.00", 3)))
        t.upsert(batch(("1.00", 4, "11.00", 4), ("2.00", 7, "0.50", 5)))
    assert sorted(by_time.to_arrow()["v"].to_pylist()) == [3, 5]  # by time of day
    assert sorted(by_dec.to_arrow()["v"].to_pylist()) == [2, 4]  # by amount


def test_sorting_by_a_column_without_an_order_is_refused(cat: lamina.Catalog) -> None:
    """A list column in sort_by: an Arrow error mid-compaction (a 500 over REST, and
    every auto-compaction run of the table failing once set as its policy)."""
    schema = SCHEMA.append(pa.field("tags", pa.list_(pa.string())))
    t = cat.create_table("t", schema, time_column="ts")
    t.append(events(days=1, per_day=3).append_column("tags", pa.array([["a"]] * 3)))
    history = t.history()
    with pytest.raises(errors.CompactionError, match="'tags' of type list<.*has no order"):
        t.compact(mode="major", sort_by=["tags"])
    with pytest.raises(errors.CompactionError, match="sort_by names 'tags'"):
        t.set_properties(**{"compaction.sort_by": "tags"})
    with pytest.raises(errors.CompactionError, match="sort_by names 'tags'"):
        cat.create_table("u", schema, time_column="ts", properties={"compaction.sort_by": "tags"})
    assert t.history() == history and "u" not in cat.list_tables()


def test_durations_and_commit_ids_out_of_range_are_refused_typed(table: lamina.Table) -> None:
    """OverflowErrors before: a retention period of 10^15 days stopped every table's
    retention run; an as_of of 2^63 or more stopped the read."""
    with pytest.raises(errors.PropertyError, match="too long; at most 36500d"):
        table.set_properties(replaced_segments_retention="999999999999999d")
    with pytest.raises(errors.SnapshotNotFoundError, match="has no version"):
        table.to_arrow(as_of=2**63)
    with pytest.raises(errors.InvalidArgumentError, match="versions are numbers >= 1"):
        table.to_arrow(as_of=-(2**63) - 1)


def test_floats_out_of_a_float32_columns_range_are_refused(cat: lamina.Catalog) -> None:
    """What a type hunt found: float64 values into a float32 column became inf or 0.0
    silently. Rounding stays (0.1 is a float32 near 0.1); NaN, inf and nulls pass."""
    import math

    import pandas as pd

    schema = pa.schema([("ts", pa.timestamp("us")), ("f", pa.float32())])
    t = cat.create_table("f32", schema, time_column="ts")

    def data(*values: float | None) -> pa.Table:
        ts = pa.array(range(len(values)), pa.timestamp("us"))
        return pa.table({"ts": ts, "f": pa.array(values, pa.float64())})

    t.append(data(0.1, float("nan"), float("inf"), None, -0.0))
    got = t.to_arrow()["f"].to_pylist()
    assert got[0] == pytest.approx(0.1) and math.isnan(got[1])
    assert got[2:4] == [float("inf"), None]
    history = t.history()
    for bad in (1e300, -1e300, 1e-300):
        with pytest.raises(errors.SchemaError, match=re.escape(f"value {bad!r} is out of")):
            t.append(data(1.0, bad))
    with pytest.raises(errors.SchemaError, match="out of float's range"):  # pandas: float64
        t.append(pd.DataFrame({"ts": pd.to_datetime([0]), "f": [3.5e38]}))
    assert t.history() == history and t.count() == 5


def test_floats_narrowed_inside_lists_maps_and_structs_are_checked(cat: lamina.Catalog) -> None:
    """[[1e39]] into list<float32> was stored as [[inf]] (a Spark hunt's side find)."""
    schema = pa.schema(
        [
            ("l", pa.list_(pa.float32())),
            ("m", pa.map_(pa.string(), pa.float32())),
            ("s", pa.struct([("a", pa.float32())])),
        ]
    )
    t = cat.create_table("nested", schema)
    wide = pa.schema(
        [
            ("l", pa.list_(pa.float64())),
            ("m", pa.map_(pa.string(), pa.float64())),
            ("s", pa.struct([("a", pa.float64())])),
        ]
    )
    ok = {"l": [1.5, None], "m": [("x", 2.5)], "s": {"a": 0.25}}
    t.append(pa.Table.from_pylist([ok, {"l": None, "m": None, "s": None}], wide))
    for col, value in (("l", [1e39]), ("m", [("x", -1e39)]), ("s", {"a": 1e-60})):
        with pytest.raises(errors.SchemaError, match=f"column '{col}'.*is out of"):
            t.append(pa.Table.from_pylist([{**ok, col: value}], wide))
    assert t.count() == 2 and t.to_arrow().column("l").to_pylist()[0] == [1.5, None]


def test_to_pandas_of_values_pandas_cannot_hold_is_a_typed_error(cat: lamina.Catalog) -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), ("at", pa.time64("ns"))])
    t = cat.create_table("tn", schema, time_column="ts")
    t.append(
        pa.table({"ts": pa.array([0], pa.timestamp("us")), "at": pa.array([1], pa.time64("ns"))})
    )
    with pytest.raises(errors.SchemaError, match="cannot be converted to pandas .* to_arrow"):
        t.to_pandas()
    assert t.to_arrow()["at"].to_pylist() == [pa.scalar(1, pa.time64("ns")).as_py()]
    assert t.to_pandas(columns=["ts"]).shape == (1, 1)


def test_a_write_through_another_warehouse_is_refused(tmp_path: Path) -> None:
    """What a CLI hunt found: a catalog paired with the wrong warehouse took writes
    whose files no reader of the right warehouse finds (nor the older files the
    wrong one). The first write to a table checks the warehouse holds its newest file."""
    url = f"sqlite:///{tmp_path}/c.db"
    with lamina.connect(catalog=url, warehouse=str(tmp_path / "wh")) as cat:
        t = cat.create_table("events", schema=SCHEMA, time_column="ts")
        t.append(events(days=1, per_day=2))
    with lamina.connect(catalog=url, warehouse=str(tmp_path / "other")) as cat:
        t = cat.load_table("events")
        history = t.history()
        with pytest.raises(errors.WarehouseError, match="does not hold the files of table"):
            t.append(events(days=1, per_day=2))
        assert t.history() == history
    with lamina.connect(catalog=url, warehouse=str(tmp_path / "wh")) as cat:
        cat.load_table("events").append(events(days=1, per_day=2))  # the right one writes
        assert cat.load_table("events").count() == 4


def test_a_time_column_name_too_long_for_the_catalog(cat: lamina.Catalog) -> None:
    """PostgreSQL failed with an untyped DataError; SQLite took it."""
    long = "t" * 257
    with pytest.raises(errors.TimeColumnError, match="at most 256"):
        cat.create_table("t", pa.schema([(long, pa.timestamp("us"))]), time_column=long)
    assert cat.list_tables() == []


def test_a_second_catalog_on_a_warehouse_is_refused(catalog_url: str, tmp_path: Path) -> None:
    """Two catalogs on one warehouse both number commit folders from 1: a cancelled
    write of one removed the other's committed files, and each one's retention deleted
    the other's files as orphans (a PostgreSQL hunt). The warehouse records its catalog."""
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("events", schema=SCHEMA, time_column="ts").append(events())
    other = f"sqlite:///{tmp_path}/other.db"
    with pytest.raises(errors.WarehouseError, match="holds the tables of another catalog"):
        lamina.connect(catalog=other, warehouse=wh)
    assert not os.path.exists(tmp_path / "other.db")  # refused before anything was made
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:  # its own: fine
        assert cat.load_table("events").count() == 300
    os.remove(os.path.join(wh, "_lamina_catalog.json"))  # "if that catalog is gone for good"
    lamina.connect(catalog=other, warehouse=wh).close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"heartbeat_s": 0}, "heartbeat_s = 0: give a finite number of seconds, above 0"),
        ({"heartbeat_s": -1}, "heartbeat_s = -1"),
        ({"heartbeat_s": float("nan")}, "heartbeat_s = nan"),
        ({"stale_after_s": -1}, "stale_after_s = -1"),
        ({"stale_after_s": "60"}, "stale_after_s must be a number of seconds, not '60'"),
        ({"writer_wait_s": float("inf")}, "writer_wait_s = inf"),
        ({"writer_wait_s": True}, "writer_wait_s must be a number"),
        ({"heartbeat_s": 10, "stale_after_s": 5}, "must be longer than heartbeat_s"),
    ],
)
def test_bad_writer_timings_are_refused(
    tmp_path: Path, kwargs: dict[str, object], match: str
) -> None:
    """A hunt: heartbeat_s=0 spun a thread writing the catalog in a tight loop, and
    stale_after_s="60" failed later with a bare TypeError."""
    wh = tmp_path / "wh"
    with pytest.raises(errors.PropertyError, match=re.escape(match)):
        lamina.connect(warehouse=str(wh), **kwargs)
    assert not wh.exists()  # refused before anything was made
    lamina.connect(warehouse=str(wh), writer_wait_s=0, heartbeat_s=0.1, stale_after_s=0.5).close()


@pytest.mark.parametrize("name", ["q?x", "p%41", "h#1"])
def test_the_default_catalog_lies_in_any_warehouse_path(tmp_path: Path, name: str) -> None:
    """The default catalog's URL was the path unescaped: a '%' gave a misleading
    CatalogUnavailableError, a '?' put the catalog outside the warehouse (a hunt)."""
    wh = tmp_path / name
    with lamina.connect(warehouse=str(wh)) as cat:
        cat.create_table("t", pa.schema([("a", pa.int64())]))
    assert (wh / "lamina.db").exists() and sorted(os.listdir(tmp_path)) == [name]
    with lamina.connect(warehouse=str(wh)) as cat:
        assert cat.list_tables() == ["t"]


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda t: t.compact(priority="25"), errors.CompactionError, "priority must be a whole"),
        (lambda t: t.compact(mode="major", priority=2.5), errors.CompactionError, "not 2.5"),
        (lambda t: t.compact(wait_s="x"), errors.CompactionError, "number of seconds"),
        (lambda t: t.compact(wait_s=-1), errors.CompactionError, "number of seconds >= 0"),
        (lambda t: t.compact(mode="major", wait_s="x"), errors.CompactionError, "seconds"),
        (lambda t: t.compact(mode="major", sort_by="k"), errors.CompactionError, r"\['k'\]"),
        (lambda t: t.compact(segments="abc"), errors.CompactionError, r"pass \['abc'\]"),
        (lambda t: t.transaction(lock="APPEND", wait_s="x"), errors.LockError, "seconds"),
        (lambda t: t.transaction(lock="APPEND", wait_s=float("nan")), errors.LockError, "finite"),
        (lambda t: t.transaction(lock="APPEND", priority=2.5), errors.LockError, "whole number"),
        (
            lambda t: t.delete_segments(t.segments()[0].id),
            errors.SegmentNotFoundError,
            "list of segment ids",
        ),
    ],
)
def test_arguments_of_the_wrong_type_are_refused(
    table: lamina.Table, call: object, error: type[Exception], says: str
) -> None:
    """A Druid audit: a string priority or wait escaped as a builtin TypeError or
    ValueError, a float priority was truncated, a negative or non-number wait of a
    minor compaction was taken (and the compaction published), and a lone string
    where a list goes was read as its characters."""
    before = _state(table)
    with pytest.raises(error, match=says):
        call(table)  # type: ignore[operator]
    assert _state(table) == before


def test_a_lone_table_name_is_refused_where_a_list_goes(
    table: lamina.Table, cat: lamina.Catalog
) -> None:
    """``tables="e"`` read as ['e'] (a one-letter table's name) and ``"events"`` as
    'no table named e'."""
    cat.create_table("e", schema=SCHEMA, time_column="ts")
    before = _state(table)
    for call in (cat.compact_auto, cat.run_retention, cat.find_orphans):
        with pytest.raises(errors.InvalidTableNameError, match=r"pass \['events'\]"):
            call(tables="events")  # type: ignore[operator]
    assert _state(table) == before


def _segment(t: lamina.Table) -> str:
    return t.segments()[0].id


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        # a caller's function is refused, not run as lamina's own file writer (it wiped
        # a day, or published an empty commit)
        (lambda t: t.append(lambda d: []), errors.UnsupportedInputError, "call it"),
        (
            lambda t: t.overwrite(lambda d: [], interval="2024-01-01/2024-01-02"),
            errors.UnsupportedInputError,
            "a function",
        ),
        (lambda t: t.append(t.to_arrow().to_pandas), errors.UnsupportedInputError, "call it"),
        # a rollup that names nothing nulled every column but the time
        (lambda t: t.compact(mode="major", rollup={}), errors.CompactionError, "no dimensions"),
        (
            lambda t: t.compact(mode="major", rollup={"dimensions": None, "metrics": None}),
            errors.CompactionError,
            "no dimensions",
        ),
        (
            lambda t: t.compact(mode="major", rollup={"dimensions": "sk"}),
            errors.CompactionError,
            r"pass \['sk'\]",
        ),
        (
            lambda t: t.compact(mode="major", rollup={"metrics": ["v"]}),
            errors.CompactionError,
            "dict of column",
        ),
        (lambda t: t.compact(mode="major", engine="spark"), errors.CompactionError, "minor"),
        (lambda t: t.compact(mode="major", priority=2**63), errors.CompactionError, "at most"),
        (lambda t: t.append(events(days=1), retries=True), errors.InvalidArgumentError, "True"),
        (lambda t: t.append(events(days=1), retries=-1), errors.InvalidArgumentError, ">= 0"),
        (lambda t: t.append(events(days=1), metadata=_deep(2000)), errors.MetadataError, "deep"),
        (lambda t: t.to_arrow(interval=(0, 10**30)), errors.InvalidIntervalError, "inf"),
        (lambda t: t.to_arrow(columns=iter(["k"])), errors.SchemaError, "list of column names"),
        (lambda t: t.to_arrow(columns={"k"}), errors.SchemaError, "list of column names"),
        (lambda t: t.delete_segments([]), errors.SegmentNotFoundError, "at least one"),
        (lambda t: t.revert_replace(["x"]), errors.LineageEntryNotFoundError, "string"),
        (lambda t: t.start_replace([], "abc"), errors.LineageError, r"pass \['abc'\]"),
        (lambda t: t.start_replace(_segment(t), []), errors.LineageError, "list of segment"),
        (lambda t: t.start_replace([], [1]), errors.LineageError, "strings"),
        (
            lambda t: t.start_replace([], [], force_cleanup="no"),
            errors.InvalidArgumentError,
            "force",
        ),
        (lambda t: t.set_properties(owner=None), errors.PropertyError, "string, a number"),
        (
            lambda t: t.set_properties(**{"compaction.segment_granularity": "ALL"}),
            errors.CompactionError,
            "without a time column",
        ),
        (lambda t: t.foreach_batch(123), errors.TransactionError, "app_id"),  # type: ignore[arg-type]
        (lambda t: t.foreach_batch("app")(events(days=1), 1.7), errors.TransactionError, "1.7"),
        (lambda t: t.foreach_batch("app")(events(days=1), True), errors.TransactionError, "True"),
    ],
)
def test_more_arguments_of_the_wrong_type_are_refused(
    table: lamina.Table, call: object, error: type[Exception], says: str
) -> None:
    """An argument sweep: calls that ran a caller's function as a file writer, nulled
    columns, read a string as its characters or as True, truncated a number, or let a
    plain TypeError, OverflowError or RecursionError escape. Each is refused with a
    typed error, and the table is as before."""
    before = _state(table)
    with pytest.raises(error, match=says):
        call(table)  # type: ignore[operator]
    assert _state(table) == before


def _deep(levels: int) -> dict[str, object]:
    out: dict[str, object] = {}
    inner = out
    for _ in range(levels):
        inner["a"] = {}
        inner = inner["a"]  # type: ignore[assignment]
    return out


def test_a_lineage_entry_forced_by_a_string_is_refused(table: lamina.Table) -> None:
    """``revert_replace(entry, force="false")`` reverted an IN_PROGRESS entry (a
    non-empty string is true)."""
    entry = table.start_replace([], [])
    with pytest.raises(errors.InvalidArgumentError, match="force must be True or False"):
        table.revert_replace(entry, force="false")  # type: ignore[arg-type]
    assert [e.state for e in table.lineage()] == ["IN_PROGRESS"]
    table.revert_replace(entry, force=True)


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda c: lamina.connect(warehouse=123), errors.WarehouseError, "path or a URI"),
        (lambda c: lamina.connect(catalog=""), errors.CatalogUnavailableError, "database URL"),
        (lambda c: c.load_table(["events"]), errors.InvalidTableNameError, "is a string"),
        (lambda c: c.drop_table(["events"]), errors.InvalidTableNameError, "is a string"),
        (lambda c: c.sql(None), errors.SqlError, "as a string"),
        (lambda c: c.compact_auto(dry_run="no"), errors.InvalidArgumentError, "dry_run"),
        (lambda c: c.run_retention(lineage_only="no"), errors.InvalidArgumentError, "lineage"),
        (
            lambda c: c.create_table("x", SCHEMA, time_column="ts", consistent_push="no"),
            errors.PropertyError,
            "true or false",
        ),
        (
            lambda c: c.create_table("x", SCHEMA, time_column="ts", segment_granularity=""),
            errors.InvalidGranularityError,
            "unknown segment granularity",
        ),
        (lambda c: c.create_table("x", SCHEMA, time_column=True), errors.TimeColumnError, "name"),
        (
            lambda c: c.create_table("x", SCHEMA, properties=[("owner", "x")]),
            errors.PropertyError,
            "dict",
        ),
        (lambda c: c.create_table("x", SCHEMA, properties={"": "x"}), errors.PropertyError, "name"),
        (lambda c: c.create_table("x", SCHEMA, ingestion_type=None), errors.PropertyError, "None"),
    ],
)
def test_catalog_arguments_of_the_wrong_type_are_refused(
    table: lamina.Table, cat: lamina.Catalog, call: object, error: type[Exception], says: str
) -> None:
    before = (_state(table), cat.list_tables())
    with pytest.raises(error, match=says):
        call(cat)  # type: ignore[operator]
    assert (_state(table), cat.list_tables()) == before


def test_create_table_reads_consistent_push_false_as_false(cat: lamina.Catalog) -> None:
    """``consistent_push="false"`` made a consistent-push table (``bool("false")``)."""
    t = cat.create_table("x", SCHEMA, time_column="ts", consistent_push="false")  # type: ignore[arg-type]
    assert t.consistent_push is False


def test_a_transaction_deleting_an_unknown_segment_says_so(table: lamina.Table) -> None:
    """It said the segment was 'removed meanwhile'."""
    with (
        pytest.raises(errors.SegmentNotFoundError, match="has no segments"),
        table.transaction() as tx,
    ):
        tx.delete_segments(["nope"])
    with (
        pytest.raises(errors.SegmentNotFoundError, match="list of segment ids"),
        table.transaction() as tx,
    ):
        tx.delete_segments("abc")


def test_numpy_values_tuples_and_decimals_are_taken_where_they_mean_the_same(
    table: lamina.Table, cat: lamina.Catalog
) -> None:
    """The argument checks take what Python code hands over as numbers, bools and
    lists: numpy ints and bools, decimals, tuples of columns (a review of the checks)."""
    from decimal import Decimal

    import numpy as np

    table.set_properties(target_rows_per_segment=np.int64(5000), owner=Decimal("1.5"))
    assert table.properties["target_rows_per_segment"] == "5000"
    assert table.properties["owner"] == "1.5"
    table.set_properties(consistent_push=np.False_)
    assert table.consistent_push is False
    assert cat.compact_auto(dry_run=np.True_) is not None
    assert cat.find_orphans(with_grace=np.True_) == []
    table.compact(wait_s=Decimal("1"))  # nothing to merge here: taken, not refused
    assert table.to_arrow(columns=("k",)).column_names == ["k"]
    assert table.read_changes(0, columns=("k", "v")).num_rows == table.count()
