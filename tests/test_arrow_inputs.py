"""Every Arrow input: the types pyarrow, Polars, DuckDB and DataFusion hand out, stored
natively or in their Parquet-compatible form, and read back with equal values."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.errors import SchemaError, UnsupportedTypeError


@pytest.fixture
def catalog_url(tmp_path: Path) -> str:
    """SQLite only: these tests are about Arrow types, not the catalog database."""
    return f"sqlite:///{tmp_path}/catalog.db"


UTC = dt.UTC
D = decimal.Decimal
SV = pa.string_view()


def _dict(indices: list[int | None], values: pa.Array) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.uint32()), values)


def _list_of_dict() -> pa.Array:
    values = _dict([0, 1, None, 0], pa.array(["x", "yy" * 10], SV))
    return pa.LargeListArray.from_arrays(pa.array([0, 2, 2, 4], pa.int64()), values)


def _ts(unit: str, tz: str | None) -> tuple[pa.DataType, list[Any]]:
    t = pa.timestamp(unit, tz=tz)
    base = dt.datetime(2024, 3, 10, 1, 2, 3, tzinfo=UTC if tz else None)
    sub = dt.timedelta(microseconds={"s": 0, "ms": 4000, "us": 4005, "ns": 4005}[unit])
    return t, [base + sub, None, base]


# id -> (input array, stored type); each array has 3 rows
CASES: dict[str, tuple[pa.Array, pa.DataType]] = {
    "string_view": (pa.array(["a", None, "a string longer than twelve"], SV), pa.large_string()),
    "binary_view": (pa.array([b"a", None, b"x" * 20], pa.binary_view()), pa.large_binary()),
    "list_view": (
        pa.array([[1, 2], None, []], pa.list_view(pa.int32())),
        pa.list_(pa.int32()),
    ),
    "large_list_view": (
        pa.array([["a"], None, ["b", None]], pa.large_list_view(SV)),
        pa.large_list(pa.large_string()),
    ),
    "large_string": (pa.array(["a", None, "b"], pa.large_string()), pa.large_string()),
    "large_binary": (pa.array([b"a", None, b"b"], pa.large_binary()), pa.large_binary()),
    "large_list": (
        pa.array([[1], None, [2, 3]], pa.large_list(pa.int64())),
        pa.large_list(pa.int64()),
    ),
    "dictionary": (
        pa.array(["a", None, "a"], pa.dictionary(pa.int32(), pa.string())),
        pa.string(),
    ),
    "dictionary_of_views": (_dict([0, None, 1], pa.array(["a", "b" * 20], SV)), pa.large_string()),
    "dictionary_of_ints": (
        pa.array([7, None, 7], pa.dictionary(pa.int8(), pa.int64())),
        pa.int64(),
    ),
    "struct_of_views": (
        pa.array(
            [{"a": "x", "b": [b"1"]}, None, {"a": None, "b": None}],
            pa.struct([("a", SV), ("b", pa.list_view(pa.binary_view()))]),
        ),
        pa.struct([("a", pa.large_string()), ("b", pa.list_(pa.large_binary()))]),
    ),
    "list_of_struct_of_views": (
        pa.array([[{"a": "x"}, None], None, []], pa.list_(pa.struct([("a", SV)]))),
        pa.list_(pa.struct([("a", pa.large_string())])),
    ),
    "map_of_views": (
        pa.array([[("k", [1])], None, []], pa.map_(SV, pa.list_view(pa.int64()))),
        pa.map_(pa.large_string(), pa.list_(pa.int64())),
    ),
    "list_of_dictionary_of_views": (_list_of_dict(), pa.large_list(pa.large_string())),
    "fixed_size_list": (
        pa.array([[1, 2], None, [3, 4]], pa.list_(pa.int32(), 2)),
        pa.list_(pa.int32(), 2),
    ),
    "decimal128": (pa.array([D("1.234"), None, D("-5")], pa.decimal128(10, 3)), None),
    "decimal256": (
        pa.array(
            [D("12345678901234567890123456789012345678.5"), None, D("0")], pa.decimal256(50, 1)
        ),
        None,
    ),
    "decimal256_small": (pa.array([D("1.23"), None, D("0")], pa.decimal256(20, 2)), None),
    "time32_s": (pa.array([dt.time(1, 2, 3), None, dt.time(0)], pa.time32("s")), None),
    "time32_ms": (pa.array([dt.time(1, 2, 3, 4000), None, dt.time(0)], pa.time32("ms")), None),
    "time64_us": (pa.array([dt.time(1, 2, 3, 4), None, dt.time(0)], pa.time64("us")), None),
    "time64_ns": (pa.array([5, None, 86_399_999_999_999], pa.int64()).cast(pa.time64("ns")), None),
    **{
        f"duration_{u}": (pa.array([5, None, -(10**12)], pa.int64()).cast(pa.duration(u)), None)
        for u in ("s", "ms", "us", "ns")
    },
    "date32": (pa.array([dt.date(2024, 1, 1), None, dt.date(1900, 2, 28)], pa.date32()), None),
    "date64": (
        pa.array([dt.date(2024, 1, 1), None, dt.date(1900, 2, 28)], pa.date64()),
        pa.date32(),
    ),
    "float16": (
        pa.array(np.array([1.5, 0, -65504], np.float16), mask=np.array([0, 1, 0], bool)),
        pa.float32(),
    ),
    "run_end_encoded": (pc.run_end_encode(pa.array(["a", "a", None])), pa.string()),
    **{
        f"timestamp_{u}_{tz or 'naive'}": (pa.array(_ts(u, tz)[1], _ts(u, tz)[0]), None)
        for u in ("s", "ms", "us", "ns")
        for tz in (None, "UTC", "America/New_York")
    },
}

# pyarrow has no cast back to these input types: their values are compared as Python
NO_CAST_BACK = {
    "list_view",
    "large_list_view",
    "struct_of_views",
    "map_of_views",
    "dictionary_of_ints",
    "run_end_encoded",
}

# row times: out of order over two days, so the writer gathers rows (take) per chunk
TIMES = [dt.datetime(2024, 1, 2, 5), dt.datetime(2024, 1, 1, 7), dt.datetime(2024, 1, 2, 1)]


def _frame(column: pa.Array) -> pa.Table:
    return pa.table({"ts": pa.array(TIMES, pa.timestamp("us")), "k": [0, 1, 2], "c": column})


def _read(t: lamina.Table) -> pa.Table:
    return t.to_arrow().sort_by("k")


def _table_files(cat: lamina.Catalog, name: str) -> list[Path]:
    return sorted(p for p in Path(cat.warehouse.root, name).rglob("*") if p.is_file())


@pytest.mark.parametrize("case", list(CASES))
def test_type_round_trip(cat: lamina.Catalog, case: str) -> None:
    column, stored = CASES[case]
    stored = stored or column.type
    data = _frame(column)
    t = cat.create_table("t", schema=data.schema, time_column="ts")
    assert t.schema.field("c").type == stored
    t.append(data)
    assert len(t.segments()) == 2
    out = _read(t)
    assert out.schema == t.schema
    assert out.column("c").type == stored
    assert out.column("c").to_pylist() == column.to_pylist()
    if stored != column.type and case not in NO_CAST_BACK:
        back = out.column("c").cast(column.type).combine_chunks()
        assert back.to_pylist() == column.to_pylist()
        assert back.type == column.type
    valid = sum(v is not None for v in column.to_pylist())
    assert cat.sql("select count(*) n, count(c) v from t").to_pylist() == [{"n": 3, "v": valid}]


@pytest.mark.parametrize("case", ["string_view", "struct_of_views", "dictionary_of_views"])
def test_input_types_into_a_plain_table(cat: lamina.Catalog, case: str) -> None:
    """Data is conformed to the stored schema of an existing table before it is split."""
    column, stored = CASES[case]
    plain = pa.schema([("ts", pa.timestamp("ms")), ("k", pa.int32()), ("c", stored)])
    t = cat.create_table("t", schema=plain, time_column="ts")
    t.append(_frame(column))
    t.overwrite(_frame(column), interval="2024-01-01/2024-01-03")
    with t.push() as p:
        p.append(_frame(column))
    out = _read(t)
    assert out.schema == plain and out.num_rows == 6
    assert out.column("c").to_pylist() == [v for v in column.to_pylist() for _ in (0, 1)]
    t.refresh(_frame(column))
    assert _read(t).column("c").to_pylist() == column.to_pylist()


def _polars_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [dt.datetime(2024, 1, 2, 3), dt.datetime(2024, 1, 1, 4)],
            "s": ["a", None],
            "b": [b"x", None],
            "l": [[1, 2], None],
            "cat": pl.Series(["x", "y"], dtype=pl.Categorical),
            "enum": pl.Series(["y", None], dtype=pl.Enum(["x", "y"])),
            "st": [{"a": "q", "n": [1]}, None],
            "dec": pl.Series([D("1.5"), None], dtype=pl.Decimal(10, 2)),
            "tm": [dt.time(1, 2, 3, 4), None],
            "du": [dt.timedelta(seconds=3, microseconds=7), None],
            "d": [dt.date(2024, 1, 1), None],
            "tz": pl.Series([dt.datetime(2024, 1, 1), None]).cast(pl.Datetime("ns", "Asia/Tokyo")),
            "arr": pl.Series([[1, 2], [3, 4]], dtype=pl.Array(pl.Int32, 2)),
            "f16": pl.Series([1.5, None], dtype=pl.Float16),
            "lcat": pl.Series([["a", "b"], None], dtype=pl.List(pl.Categorical)),
            "u64": pl.Series([2**64 - 1, 0], dtype=pl.UInt64),
        }
    )


class _Stream:
    """Only the Arrow C stream protocol, as third-party producers expose it."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.source.__arrow_c_stream__(requested_schema)


def _same_polars(t: lamina.Table, df: pl.DataFrame, copies: int) -> None:
    out = pl.from_arrow(t.to_arrow()).sort("ts")  # type: ignore[union-attr]
    expected = pl.concat([df] * copies).sort("ts")
    assert out.cast(dict(df.schema)).equals(expected)  # type: ignore[arg-type]


def test_polars_dataframe_direct_and_through_the_stream(cat: lamina.Catalog) -> None:
    df = _polars_frame()
    schema = pa.table(df).schema  # what Polars hands out: views, dictionaries, float16...
    assert pa.types.is_string_view(schema.field("s").type)
    t = cat.create_table("p", schema=schema, time_column="ts")
    assert pa.types.is_large_string(t.schema.field("s").type)
    t.append(df)
    t.append(_Stream(df))
    t.append(df.to_arrow())  # Polars' compat export: large types
    _same_polars(t, df, 3)
    assert cat.sql("select count(s) n, max(tm) t from p").to_pylist() == [
        {"n": 3, "t": dt.time(1, 2, 3, 4)}
    ]


def test_polars_parquet_file(cat: lamina.Catalog, tmp_path: Path) -> None:
    df = _polars_frame()
    path = tmp_path / "polars.parquet"
    df.write_parquet(path)
    data = pq.read_table(path)
    t = cat.create_table("p", schema=data.schema, time_column="ts")
    t.append(data)
    t.append(pq.read_table(path))
    _same_polars(t, df, 2)


def test_parquet_file_of_views(cat: lamina.Catalog, tmp_path: Path) -> None:
    """A file whose Arrow schema holds view types (as Polars and DataFusion write them)."""
    path = tmp_path / "views.parquet"
    pq.write_table(_frame(CASES["string_view"][0]), path)
    data = pq.read_table(path)
    assert pa.types.is_string_view(data.schema.field("c").type)
    t = cat.create_table("v", schema=data.schema, time_column="ts")
    t.append(data)
    assert _read(t).column("c").to_pylist() == data.column("c").to_pylist()


def test_datafusion_reading_a_polars_file(cat: lamina.Catalog, tmp_path: Path) -> None:
    datafusion = pytest.importorskip("datafusion")
    df = _polars_frame().select("ts", "s", "b", "l", "st", "d")
    path = tmp_path / "polars.parquet"
    df.write_parquet(path)
    ctx = datafusion.SessionContext()
    ctx.register_parquet("f", str(path))
    frame = ctx.sql("select * from f")
    assert pa.types.is_string_view(pa.table(frame).schema.field("s").type)
    t = cat.create_table("p", schema=pa.table(frame).schema, time_column="ts")
    t.append(frame)
    _same_polars(t, df, 1)


DUCK = """
select * from (values
  (timestamp '2024-01-02 03:00:00', 'a', [1, 2], {'a': 1, 'b': 'x'}, map {'k': [1.5]},
   12.25::decimal(10, 2), time '01:02:03.456789', 'x'::blob, hugeint '170141183460469231731',
   ['a', 'b']::varchar[2], timestamptz '2024-01-01 00:00:00+05'),
  (timestamp '2024-01-01 04:00:00', null, null, null, null, null, null, null, null, null, null)
) v(ts, s, l, st, m, dec, tm, b, h, arr, tz)
"""


def test_duckdb_relation(cat: lamina.Catalog) -> None:
    rel = duckdb.sql(DUCK)
    expected = rel.arrow().read_all()
    t = cat.create_table("d", schema=expected.schema, time_column="ts")
    t.append(rel)
    t.append(duckdb.sql(DUCK).arrow())
    out = t.to_arrow().sort_by("ts").cast(expected.schema)
    assert out.to_pylist() == pa.concat_tables([expected, expected]).sort_by("ts").to_pylist()
    assert cat.sql("select sum(dec) s, max(h) h from d").to_pylist() == [
        {"s": D("24.50"), "h": D("170141183460469231731")}
    ]


@pytest.mark.parametrize(
    ("select", "kind"),
    [
        ("union_value(num := 2)::union(num int, str varchar)", "union"),
        ("interval 1 day", "interval"),
        ("[union_value(num := 2)::union(num int, str varchar)]", "union"),
    ],
)
def test_unstorable_input_type(cat: lamina.Catalog, select: str, kind: str) -> None:
    t = cat.create_table("t", schema=pa.schema([("ts", pa.timestamp("us")), ("x", pa.int64())]))
    rel = duckdb.sql(f"select timestamp '2024-01-01' ts, {select} x")
    with pytest.raises(UnsupportedTypeError, match=rf"column 'x' has type .*{kind}.*; cast it"):
        t.append(rel)
    assert t.history() == [] and t.count() == 0
    assert _table_files(cat, "t") == []


@pytest.mark.parametrize(
    "bad",
    [
        pa.sparse_union([pa.field("i", pa.int32()), pa.field("s", pa.string())]),
        pa.dense_union([pa.field("i", pa.int32())]),
        pa.month_day_nano_interval(),
        pa.struct([("inner", pa.list_(pa.month_day_nano_interval()))]),
    ],
)
def test_create_table_refuses_unstorable_types(cat: lamina.Catalog, bad: pa.DataType) -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), ("u", bad)])
    with pytest.raises(UnsupportedTypeError, match=r"column 'u' has type .*cast it"):
        cat.create_table("t", schema=schema, time_column="ts")
    assert cat.list_tables() == []
    assert _table_files(cat, "t") == []


def test_polars_type_arrow_cannot_import(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", schema=pa.schema([("x", pa.decimal128(38, 0))]))
    with pytest.raises(UnsupportedTypeError, match="Int128"):
        t.append(pl.DataFrame({"x": pl.Series([1], dtype=pl.Int128)}))
    assert t.history() == []


@pytest.mark.parametrize(
    ("stored", "data"),
    [
        (pa.time32("s"), pa.array([5], pa.int64()).cast(pa.time64("ns"))),  # sub-second
        (pa.duration("s"), pa.array([1500], pa.duration("ms"))),
        (pa.list_(pa.int8()), pa.array([[300]], pa.list_view(pa.int64()))),
        (pa.large_list(pa.timestamp("us")), pa.array([[1]], pa.list_(pa.timestamp("ns")))),
        (pa.struct([("a", pa.string())]), pa.array([{"b": "x"}], pa.struct([("b", SV)]))),
        (pa.date32(), pa.array([86_400_000 + 5], pa.int64()).cast(pa.date64())),
    ],
)
def test_lossy_or_mismatched_input_is_refused(
    cat: lamina.Catalog, stored: pa.DataType, data: pa.Array
) -> None:
    t = cat.create_table("t", schema=pa.schema([("c", stored)]))
    with pytest.raises(SchemaError, match="'c'|c: "):
        t.append(pa.table({"c": data}))
    assert t.history() == [] and _table_files(cat, "t") == []


@pytest.mark.parametrize(
    "case",
    [
        "list_view",
        "large_list_view",
        "struct_of_views",
        "list_of_struct_of_views",
        "map_of_views",
        "list_of_dictionary_of_views",
        "fixed_size_list",
        "dictionary_of_views",
    ],
)
def test_sliced_nested_input(cat: lamina.Catalog, case: str) -> None:
    """Zero-copy slices (offsets into shared children) convert value for value."""
    column, _ = CASES[case]
    data = pa.concat_tables([_frame(column), _frame(column)]).combine_chunks().slice(2, 3)
    t = cat.create_table("t", schema=data.schema, time_column="ts")
    t.append(data)
    expected = sorted(zip(data.column("k").to_pylist(), data.column("c").to_pylist(), strict=True))
    out = _read(t)
    assert list(zip(out.column("k").to_pylist(), out.column("c").to_pylist(), strict=True)) == (
        sorted(expected, key=lambda r: r[0])
    )
