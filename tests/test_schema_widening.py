"""Type widening (``t.widen_column``): the rule against an oracle of values, and the
read paths over files written before and after a widening, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.core.widening import widenings, widens
from lamina.errors import SchemaError, UpsertError

TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(5, 2),
    pa.decimal128(12, 2),
    pa.decimal128(12, 3),
    pa.decimal128(38, 2),
    pa.string(),
    pa.bool_(),
    pa.date32(),
    pa.timestamp("ms"),
    pa.timestamp("us"),
]


def extremes(t: pa.DataType) -> pa.Array:
    """The values of ``t`` hardest to hold in another type."""
    if pa.types.is_integer(t):
        info = (
            (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
            if pa.types.is_signed_integer(t)
            else (0, 2**t.bit_width - 1)
        )
        return pa.array(info, t)
    if pa.types.is_float32(t):
        return pa.array([3.4028234663852886e38, 1.401298464324817e-45, -0.0, float("inf")], t)
    if pa.types.is_float64(t):
        return pa.array([1.7976931348623157e308, 5e-324, 0.1, -0.0, float("inf")], t)
    if pa.types.is_decimal(t):
        top = "9" * (t.precision - t.scale) + "." + "9" * t.scale  # no context rounding
        return pa.array([decimal.Decimal(top), decimal.Decimal("-" + top)], t)
    return pa.array([], t)


def oracle(old: pa.DataType, new: pa.DataType) -> bool:
    """A widening keeps the kind of number (an integer stays an integer, a decimal its
    scale) and every value: the extremes cast safely and come back equal."""
    kinds = [pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal]
    same_kind = any(k(old) and k(new) for k in kinds)
    if old == new or not same_kind:
        return False
    if pa.types.is_decimal(old) and old.scale != new.scale:
        return False
    values = extremes(old)
    try:
        back = pc.cast(pc.cast(values, new, safe=True), old, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return bool(back.equals(values))


def test_the_rule_keeps_exactly_the_changes_every_value_survives() -> None:
    for old, new in itertools.product(TYPES, TYPES):
        assert widens(old, new) == oracle(old, new), (old, new)
        assert (new in widenings(old)) == widens(old, new) or pa.types.is_decimal(new), (old, new)


C = "n"
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        pa.field("id", pa.int64(), nullable=False),
        (C, pa.int32()),
        ("f", pa.float32()),
        ("d", pa.decimal128(5, 2)),
    ]
)


def rows(ids: list[int], hour: int, n: list[int], d: str = "1.25") -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([dt.datetime(2024, 1, 1, hour)] * len(ids), pa.timestamp("us")),
            "id": ids,
            C: n,
            "f": [0.5] * len(ids),
            "d": [decimal.Decimal(d)] * len(ids),
        }
    )


def widened_schema(**types: pa.DataType) -> pa.Schema:
    out = SCHEMA
    for name, t in types.items():
        out = out.set(out.names.index(name), out.field(name).with_type(t))
    return out


def test_files_written_before_read_as_the_wider_type(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    first = t.append(rows([1, 2], 1, [7, -(2**31)]))
    alter = t.widen_column(C, pa.int64())
    assert alter.action == "ALTER"
    assert alter.metadata["widen_column"] == {"name": C, "from": "int32", "to": "int64"}
    t.widen_column("f", pa.float64())
    t.widen_column("d", pa.decimal128(12, 2))
    t.append(rows([3], 2, [2**40], "1234567890.12"))
    want = widened_schema(n=pa.int64(), f=pa.float64(), d=pa.decimal128(12, 2))
    assert t.schema == want == cat.load_table("e").schema
    got = t.to_arrow().sort_by("id")
    assert got.schema == want
    assert got.column(C).to_pylist() == [7, -(2**31), 2**40]
    assert got.column("d").to_pylist()[2] == decimal.Decimal("1234567890.12")
    assert t.to_arrow(as_of=first.version).schema == SCHEMA  # as it was
    sql = cat.sql(f"SELECT sum({C}) AS s, max(d) AS d, count(*) AS n FROM e")
    assert sql.to_pylist() == [
        {"s": 7 - 2**31 + 2**40, "d": decimal.Decimal("1234567890.12"), "n": 3}
    ]
    assert cat.sql(f"SELECT {C} FROM e ORDER BY id").schema.field(C).type == pa.int64()
    assert t.compact(mode="minor") is not None
    assert t.to_arrow().sort_by("id").equals(got)
    assert t.count() == 3


def test_what_is_no_widening_is_refused_and_nothing_changes(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(rows([1], 1, [1]))
    cases: list[tuple[object, object, str]] = [
        # each refusal says which reason applies
        (C, pa.int16(), "would not all survive: int16 does not hold .*widenings of int32: int64"),
        (C, pa.float64(), "cannot become double: double is not a widening of int32"),
        (C, pa.uint32(), "uint32 does not hold every int32 value"),
        ("d", pa.decimal128(12, 3), "keeps its scale"),
        ("d", pa.decimal128(4, 2), r"decimal128\(4, 2\) does not hold"),
        ("ts", pa.timestamp("ns"), r"timestamp\[ns\] is not a widening"),
        (C, pa.int32(), "cannot become int32: it is int32 already: nothing to widen"),
        ("nope", pa.int64(), "not a column"),
        (C, "int64", "pyarrow type"),
    ]
    for column, new, why in cases:
        with pytest.raises(SchemaError, match=why):
            t.widen_column(column, new)  # type: ignore[arg-type]
    assert t.schema == SCHEMA == cat.load_table("e").schema
    assert [c.action for c in t.history()] == ["APPEND"]


def test_an_upsert_table_widens_values_but_not_its_keys(cat: lamina.Catalog) -> None:
    key = pa.schema([("ts", pa.timestamp("us")), pa.field("k", pa.int32(), nullable=False)])
    keyed = cat.create_table("k", key, time_column="ts", primary_key="k")
    with pytest.raises(UpsertError, match="primary key"):
        keyed.widen_column("k", pa.int64())
    p = cat.create_table(
        "p", SCHEMA, time_column="ts", primary_key="id", comparison_column=C,
        partial_upsert={"d": "INCREMENT"},
    )  # fmt: skip
    p.upsert(rows([1, 2], 1, [10, 10]))
    p.widen_column(C, pa.int64())  # the comparison column: int64 in the index either way
    p.widen_column("d", pa.decimal128(12, 2))
    p.upsert(rows([1], 2, [2**33], "1000000.00"))
    p.upsert(rows([2], 3, [5], "9.99"))  # compares lower: out of order, no merge
    got = {r["id"]: (r[C], r["d"]) for r in p.to_arrow().to_pylist()}
    assert got == {1: (2**33, decimal.Decimal("1000001.25")), 2: (10, decimal.Decimal("1.25"))}
    sql = cat.sql(f"SELECT id, {C}, d FROM p ORDER BY id").to_pylist()
    assert [(r["id"], r[C], r["d"]) for r in sql] == [(i, *v) for i, v in sorted(got.items())]
    with pytest.raises(UpsertError, match="comparison column"):
        f = cat.create_table("f", SCHEMA, time_column="ts", primary_key="id", comparison_column="d")
        f.widen_column("d", pa.decimal128(20, 2))  # past 18 digits: not a 64-bit number


def test_a_handle_loaded_before_writes_the_narrower_type(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    stale = cat.load_table("e")
    t.widen_column(C, pa.int64())
    stale.append(rows([1], 1, [5]))  # an int32 file: read as int64
    t.append(rows([2], 2, [2**35]))
    got = cat.load_table("e").to_arrow().sort_by("id")
    assert got.column(C).type == pa.int64() and got.column(C).to_pylist() == [5, 2**35]
    assert cat.sql(f"SELECT sum({C}) AS s FROM e").to_pylist() == [{"s": 5 + 2**35}]


@pytest.mark.spark
def test_spark_reads_a_widened_column(spark: object, local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("e", SCHEMA, time_column="ts")
    t.append(rows([1], 1, [3]))
    t.widen_column(C, pa.int64())
    t.append(rows([2], 2, [2**36]))
    got = sorted(r[C] for r in t.to_spark(spark).collect())
    assert got == [3, 2**36]
    assert t.compact(mode="minor", engine="spark") is not None
    assert sorted(t.to_arrow().column(C).to_pylist()) == [3, 2**36]


def test_the_command_line_widens_a_column(tmp_path: object) -> None:
    from tests.test_cli import fails, ok

    wh = str(tmp_path) + "/wh"
    ok(wh, "create-table", "e", "--time-column", "ts", "--schema", "ts:timestamp[us],k:int32")
    out = ok(wh, "widen-column", "e", "k", "int64")
    assert "widened k (int32 -> int64) of e (version" in out
    with lamina.connect(warehouse=wh) as cat:
        assert cat.load_table("e").schema.field("k").type == pa.int64()
    assert "widenings of int64: none" in fails(wh, "widen-column", "e", "k", "int32")
    assert "not a column" in fails(wh, "widen-column", "e", "nope", "int64")
