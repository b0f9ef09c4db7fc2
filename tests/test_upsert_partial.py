"""Apache Pinot's partial-upsert merger and handler tests, ported to lamina upserts.

Every case performs real upserts (two or more records of one key, in separate upsert
calls or in one input) and checks the record that becomes visible. Sources, in
apache/pinot ``pinot-segment-local/src/test/java/org/apache/pinot/segment/local/``:

- ``upsert/merger/columnar/PartialUpsertColumnMergerTest`` (one method per strategy);
- ``upsert/PartialUpsertHandlerTest`` (``testOverwrite``, ``testForceOverwrite``,
  ``testNonOverwrite``, ``testComparisonColumn``);
- ``utils/TableConfigUtilsTest.testValidatePartialUpsertConfig`` (which columns may
  carry a strategy);

with the null handling of ``PartialUpsertColumnarMerger.merge``, the defaults of
``UpsertConfig`` and, for deletes, ties and out-of-order records,
``ConcurrentMapPartitionUpsertMetadataManager.doUpdateRecord``. A few cases follow
what reaches the mergers in Pinot: its ingestion turns NaN and empty multi-values into
nulls (``SpecialValueTransformer``, ``DataTypeTransformerUtils.standardize``), and
MAX/MIN compare with Java's ``compareTo``; lamina differs there by design (values are
merged as written; strings order by code point), and those cases check lamina's rule.
Not ported: custom row mergers (``partialUpsertMergerClass``), post-partial-upsert
transforms and several comparison columns, which lamina does not have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.errors import UpsertError

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")

T0 = datetime(2024, 1, 1)
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def atz(minute: int) -> datetime:
    """:func:`at` as an instant (UTC)."""
    return at(minute).replace(tzinfo=UTC)


def key_field() -> pa.Field:
    return pa.field("key", pa.string(), nullable=False)


def make(
    cat: lamina.Catalog,
    columns: Sequence[tuple[str, pa.DataType]],
    partial_upsert: dict[str, str],
    *,
    primary_key: Sequence[pa.Field] = (),
    comparison_column: str | None = None,
    delete: bool = True,
) -> tuple[lamina.Table, pa.Schema]:
    """An upsert table: the key (``key`` unless ``primary_key``), ``ts``, ``columns``
    and (``delete``) a boolean delete column ``deleted``."""
    keys = list(primary_key) or [key_field()]
    fields = [*keys, pa.field("ts", pa.timestamp("us"))]
    fields += [pa.field(name, typ) for name, typ in columns]
    if delete:
        fields.append(pa.field("deleted", pa.bool_()))
    schema = pa.schema(fields)
    t = cat.create_table(
        "p",
        schema,
        time_column="ts",
        primary_key=[f.name for f in keys],
        comparison_column=comparison_column,
        delete_column="deleted" if delete else None,
        partial_upsert=partial_upsert,
    )
    return t, schema


def upsert(t: lamina.Table, schema: pa.Schema, *records: dict[str, Any]) -> None:
    """One upsert call of ``records`` (key ``"k"`` and ``deleted=False`` by default;
    ``ts`` given as minutes after T0)."""
    rows = []
    for r in records:
        row: dict[str, Any] = {"key": "k", **r, "ts": at(r["ts"])}
        if "deleted" in schema.names:
            row.setdefault("deleted", False)
        rows.append({name: row.get(name) for name in schema.names})
    t.upsert(pa.Table.from_pylist(rows, schema=schema))


def visible(t: lamina.Table) -> list[dict[str, Any]]:
    """The visible records, sorted by key."""
    got = t.to_arrow().to_pylist()
    return sorted(got, key=lambda r: str(r.get("key")))


def only(t: lamina.Table) -> dict[str, Any]:
    """The one visible record."""
    got = visible(t)
    assert len(got) == 1, got
    return got[0]


def stored(t: lamina.Table) -> list[dict[str, Any]]:
    """Every stored record (``all_versions``), in the order they were stored."""
    got = t.to_arrow(all_versions=True).to_pylist()
    return sorted(got, key=lambda r: (r["$valid_from"], r["ts"]))


def same(a: Any, b: Any) -> bool:
    """Equal (NaN equals NaN), and of the same Python type (3 is not 3.0)."""
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return bool(a == b or both_nan) and type(a) is type(b)


# -- one strategy, one column: previous value, new value, merged value ----------------

I64 = pa.int64()
F64 = pa.float64()
STR = pa.string()
TSZ = pa.timestamp("us", "Asia/Kolkata")
LSTR = pa.list_(pa.string())
LI64 = pa.list_(pa.int64())

HANDLER = "PartialUpsertHandlerTest"
COLUMN = "PartialUpsertColumnMergerTest"
NULLS = "PartialUpsertColumnarMerger.merge"
EMPTY = "DataTypeTransformerUtils.standardize + PartialUpsertColumnarMerger.merge"
NAN = "SpecialValueTransformer (NaN -> null) + PartialUpsertColumnarMerger.merge"
AS_WRITTEN = "lamina: values as written (Pinot's ingestion nulls NaN and empty lists)"
CODE_POINTS = "lamina: code point order (Pinot: Java's UTF-16 String.compareTo)"

#: (strategy, column type, previous value, new value, merged value, Pinot source)
CASES: list[tuple[str, pa.DataType, Any, Any, Any, str]] = [
    # OVERWRITE: a null new value keeps the previous one
    ("OVERWRITE", I64, None, None, None, f"{HANDLER}.testOverwrite"),
    ("OVERWRITE", I64, None, 8, 8, f"{HANDLER}.testOverwrite"),
    ("OVERWRITE", I64, 8, None, 8, f"{HANDLER}.testOverwrite"),
    ("OVERWRITE", I64, 3, 5, 5, f"{HANDLER}.testOverwrite"),
    ("OVERWRITE", STR, "oldValue", "newValue", "newValue", f"{COLUMN}.testOverwriteMergers"),
    # FORCE_OVERWRITE: always the new value, null included
    ("FORCE_OVERWRITE", I64, None, None, None, f"{HANDLER}.testForceOverwrite"),
    ("FORCE_OVERWRITE", I64, None, 1, 1, f"{HANDLER}.testForceOverwrite"),
    ("FORCE_OVERWRITE", I64, 0, None, None, f"{HANDLER}.testForceOverwrite"),
    ("FORCE_OVERWRITE", I64, 3, 5, 5, f"{HANDLER}.testForceOverwrite"),
    # IGNORE: the previous value, unless it is null
    ("IGNORE", I64, None, None, None, f"{HANDLER}.testNonOverwrite"),
    ("IGNORE", I64, None, 8, 8, f"{HANDLER}.testNonOverwrite"),
    ("IGNORE", I64, 8, None, 8, f"{HANDLER}.testNonOverwrite"),
    ("IGNORE", I64, 3, 5, 3, f"{HANDLER}.testNonOverwrite"),
    ("IGNORE", I64, None, 3, 3, f"{COLUMN}.testIgnoreMergers"),  # via the handler's nulls
    ("IGNORE", I64, 3, None, 3, f"{COLUMN}.testIgnoreMergers"),
    ("IGNORE", STR, "first", "second", "first", f"{COLUMN}.testIgnoreMergers"),
    # INCREMENT
    ("INCREMENT", I64, 1, 2, 3, f"{COLUMN}.testIncrementMergers"),
    ("INCREMENT", I64, None, None, None, NULLS),
    ("INCREMENT", I64, None, 2, 2, NULLS),
    ("INCREMENT", I64, 1, None, 1, NULLS),
    ("INCREMENT", I64, -5, 2, -3, "IncrementMerger"),
    ("INCREMENT", F64, 1.5, 2.25, 3.75, "IncrementMerger"),
    ("INCREMENT", F64, None, 2.25, 2.25, NULLS),
    ("INCREMENT", F64, 1.5, None, 1.5, NULLS),
    ("INCREMENT", I64, I64_MAX, 1, I64_MIN, "IncrementMerger (Java long addition wraps)"),
    # APPEND: concatenation, duplicates kept, in order
    ("APPEND", LI64, [1, 2, 3], [3, 4, 6], [1, 2, 3, 3, 4, 6], f"{COLUMN}.testAppendMergers"),
    ("APPEND", LSTR, ["b", "a"], ["a"], ["b", "a", "a"], "AppendMerger"),
    ("APPEND", LSTR, None, None, None, NULLS),
    ("APPEND", LSTR, None, ["y", "x"], ["y", "x"], NULLS),
    ("APPEND", LSTR, ["y", "x"], None, ["y", "x"], NULLS),
    # UNION: a sorted set of both sides; a null side gives the other side as it is
    (
        "UNION",
        LSTR,
        ["a", "b", "c"],
        ["c", "d", "e"],
        ["a", "b", "c", "d", "e"],
        f"{COLUMN}.testUnionMergers",
    ),
    ("UNION", LSTR, ["c", "a", "c"], ["b", "a"], ["a", "b", "c"], "UnionMerger (TreeSet)"),
    ("UNION", LI64, [10, 2], [9, 2], [2, 9, 10], "UnionMerger (TreeSet of numbers)"),
    ("UNION", LSTR, None, None, None, NULLS),
    ("UNION", LSTR, None, ["c", "a", "c"], ["c", "a", "c"], NULLS),
    ("UNION", LSTR, ["c", "a", "c"], None, ["c", "a", "c"], NULLS),
    # MAX / MIN
    ("MAX", I64, 0, 1, 1, f"{COLUMN}.testMaxMinMergers"),
    ("MAX", I64, 1, 0, 1, f"{COLUMN}.testMaxMinMergers"),
    ("MIN", I64, 0, 1, 0, f"{COLUMN}.testMaxMinMergers"),
    ("MIN", I64, 1, 0, 0, f"{COLUMN}.testMaxMinMergers"),
    ("MAX", I64, None, None, None, NULLS),
    ("MAX", I64, None, -1, -1, NULLS),
    ("MAX", I64, -1, None, -1, NULLS),
    ("MIN", I64, None, None, None, NULLS),
    ("MIN", I64, None, 7, 7, NULLS),
    ("MIN", I64, 7, None, 7, NULLS),
    ("MAX", F64, 2.5, -1.0, 2.5, "MaxMerger"),
    ("MIN", F64, 2.5, -1.0, -1.0, "MinMerger"),
    ("MAX", STR, "B", "a", "a", "MaxMerger (String.compareTo)"),
    ("MIN", STR, "B", "a", "B", "MinMerger (String.compareTo)"),
    # Pinot's ingestion turns NaN and empty multi-values into nulls and drops null list
    # elements before merging (SpecialValueTransformer, DataTypeTransformerUtils); lamina
    # merges values as they were written: NaN and an empty list are values, not nulls
    # (docs/upserts.md). MAX and MIN skip a NaN, as Arrow's do.
    ("OVERWRITE", F64, 1.5, math.nan, math.nan, AS_WRITTEN),
    ("INCREMENT", F64, 1.5, math.nan, math.nan, AS_WRITTEN),
    ("IGNORE", F64, math.nan, 2.0, math.nan, AS_WRITTEN),
    ("MAX", F64, 1.0, math.nan, 1.0, NAN),
    ("MAX", F64, math.nan, 1.0, 1.0, NAN),
    ("MIN", F64, 1.0, math.nan, 1.0, NAN),
    ("FORCE_OVERWRITE", F64, 1.5, math.nan, math.nan, AS_WRITTEN),
    ("OVERWRITE", LSTR, ["a"], [], [], AS_WRITTEN),
    ("IGNORE", LSTR, [], ["b"], [], AS_WRITTEN),
    ("FORCE_OVERWRITE", LSTR, ["a"], [], [], AS_WRITTEN),
    ("UNION", LSTR, ["b"], [], ["b"], EMPTY),
    ("UNION", LSTR, ["b", None], ["a", None], ["a", "b", None], AS_WRITTEN),
    # Java compares strings by UTF-16 code unit (a surrogate pair sorts below U+FF61);
    # lamina by code point, as Arrow, Parquet statistics and SQL engines do
    ("MAX", STR, "\uff61", "\U0001f600", "\U0001f600", CODE_POINTS),
    ("MIN", STR, "\uff61", "\U0001f600", "\uff61", CODE_POINTS),
    # zoned timestamps compare as instants (pyarrow has no MAX/MIN kernel for them)
    ("MAX", TSZ, atz(5), atz(1), atz(5), "MaxMerger"),
    ("MIN", TSZ, atz(5), atz(1), atz(1), "MinMerger"),
    ("MAX", TSZ, None, atz(1), atz(1), NULLS),
]


def _case_id(case: tuple[str, pa.DataType, Any, Any, Any, str]) -> str:
    strategy, typ, prev, new, _, _ = case
    label = {I64: "int64", F64: "double", STR: "string", LSTR: "list<str>", LI64: "list<int64>"}
    label[TSZ] = "timestamp-tz"
    return f"{strategy}-{label[typ]}-{prev!r}-{new!r}"


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_a_strategy_merges_the_new_value_into_the_previous_one(
    cat: lamina.Catalog, case: tuple[str, pa.DataType, Any, Any, Any, str], one_input: bool
) -> None:
    check_merge(cat, case, one_input)


def upsert_pair(
    t: lamina.Table, schema: pa.Schema, first: dict[str, Any], second: dict[str, Any], one: bool
) -> None:
    """Upsert two records of key "k": in one input (``one``) or one after the other."""
    if one:
        upsert(t, schema, first, second)
    else:
        upsert(t, schema, first)
        upsert(t, schema, second)


def check_merge(
    cat: lamina.Catalog, case: tuple[str, pa.DataType, Any, Any, Any, str], one_input: bool
) -> None:
    """``case``'s strategy merges its new value into the previous one as it says."""
    strategy, typ, prev, new, want, source = case
    t, schema = make(cat, [("v", typ)], {"v": strategy})
    upsert_pair(t, schema, {"ts": 1, "v": prev}, {"ts": 2, "v": new}, one_input)
    got = only(t)
    assert got["ts"] == at(2)
    assert same(got["v"], want), f"got {got['v']!r}, want {want!r} ({source})"


@pytest.mark.parametrize(
    ("strategy", "values", "want"),
    [
        ("INCREMENT", [1, 2, None, 4], 7),
        ("MAX", [3, None, 9, 4], 9),
        ("MIN", [3, None, 9, 1], 1),
        ("IGNORE", [None, 5, 6, None], 5),
        ("OVERWRITE", [1, 2, None, None], 2),
        ("FORCE_OVERWRITE", [1, 2, 3, None], None),
    ],
)
def test_each_record_merges_with_the_previous_merged_record(
    cat: lamina.Catalog, strategy: str, values: list[int | None], want: int | None
) -> None:
    """Pinot merges each record with the key's latest record, itself already merged."""
    t, schema = make(cat, [("v", I64)], {"v": strategy})
    for i, v in enumerate(values[:2]):
        upsert(t, schema, {"ts": i, "v": v})
    upsert(t, schema, *({"ts": i + 2, "v": v} for i, v in enumerate(values[2:])))
    assert only(t)["v"] == want


def test_the_first_record_of_a_key_is_stored_as_it_came(cat: lamina.Catalog) -> None:
    """No previous record: nothing is merged (a UNION value is not sorted, say)."""
    t, schema = make(cat, [("u", LSTR), ("n", I64)], {"u": "UNION", "n": "INCREMENT"})
    upsert(t, schema, {"ts": 1, "u": ["z", "a", "z"], "n": 5})
    assert {k: only(t)[k] for k in ("u", "n")} == {"u": ["z", "a", "z"], "n": 5}


# -- the handler: default strategy, unlisted, key and comparison columns -------------


def test_the_default_strategy_is_overwrite(cat: lamina.Catalog) -> None:
    """UpsertConfig's defaultPartialUpsertStrategy is OVERWRITE: unlisted columns keep
    their previous value only when the new one is null."""
    t, schema = make(cat, [("clicks", I64), ("a", I64), ("s", STR)], {"clicks": "INCREMENT"})
    upsert(t, schema, {"ts": 1, "clicks": 1, "a": 1, "s": "x"})
    upsert(t, schema, {"ts": 2, "clicks": 2, "a": None, "s": "y"})
    got = only(t)
    assert (got["clicks"], got["a"], got["s"]) == (3, 1, "y")


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
def test_listed_columns_use_their_strategy_and_the_rest_the_default(
    cat: lamina.Catalog, one_input: bool
) -> None:
    """PartialUpsertHandlerTest.testMerge's table: field1 OVERWRITE, field4
    FORCE_OVERWRITE, default IGNORE (field2 is not listed)."""
    cols = [("field1", I64), ("field2", I64), ("field4", I64)]
    t, schema = make(cat, cols, {"field1": "OVERWRITE", "field4": "FORCE_OVERWRITE", "*": "IGNORE"})
    records: list[dict[str, Any]] = [
        {"ts": 1, "field1": 3, "field2": 3, "field4": 3},
        {"ts": 2, "field1": 5, "field2": 5, "field4": 5},
        {"ts": 3, "field1": None, "field2": None, "field4": None},
    ]
    wants = [(3, 3, 3), (5, 3, 5), (5, 3, None)]  # after each record

    def fields() -> tuple[Any, ...]:
        got = only(t)
        return (got["field1"], got["field2"], got["field4"])

    if one_input:
        upsert(t, schema, *records)
        assert fields() == wants[-1]
    else:
        for record, want in zip(records, wants, strict=True):
            upsert(t, schema, record)
            assert fields() == want


@pytest.mark.parametrize(
    ("default", "new_a", "want_a"),
    [("IGNORE", 4, 1), ("FORCE_OVERWRITE", None, None), ("MAX", 4, 4), ("MIN", 4, 1)],
)
def test_the_default_strategy_applies_to_every_unlisted_column(
    cat: lamina.Catalog, default: str, new_a: int | None, want_a: int | None
) -> None:
    t, schema = make(cat, [("a", I64), ("s", STR)], {"s": "OVERWRITE", "*": default}, delete=False)
    upsert(t, schema, {"ts": 1, "a": 1, "s": "x"})
    upsert(t, schema, {"ts": 2, "a": new_a, "s": "y"})
    got = only(t)
    assert (got["a"], got["s"]) == (want_a, "y")


def test_primary_key_columns_are_never_merged(cat: lamina.Catalog) -> None:
    """A default strategy that would change them (INCREMENT) leaves the key alone."""
    keys = (pa.field("k1", I64, nullable=False), pa.field("k2", I64, nullable=False))
    t, schema = make(cat, [("v", I64)], {"*": "INCREMENT"}, primary_key=keys, delete=False)
    for ts in (1, 2, 3):
        upsert(t, schema, {"k1": 1, "k2": 2, "ts": ts, "v": 10})
    got = visible(t)
    assert [(r["k1"], r["k2"], r["v"]) for r in got] == [(1, 2, 30)]


@pytest.mark.parametrize("default", ["IGNORE", "MIN", "FORCE_OVERWRITE"])
def test_the_comparison_column_is_never_merged(cat: lamina.Catalog, default: str) -> None:
    """PartialUpsertHandlerTest.testComparisonColumn: a default IGNORE (or any other
    strategy) does not apply to the comparison column: the new record's value stays."""
    t, schema = make(
        cat,
        [("version", I64), ("v", I64)],
        {"*": default},
        comparison_column="version",
        delete=False,
    )
    upsert(t, schema, {"ts": 1, "version": 2, "v": 1})
    upsert(t, schema, {"ts": 2, "version": 8, "v": 5})
    got = only(t)
    assert got["version"] == 8
    assert got["v"] == {"IGNORE": 1, "MIN": 1, "FORCE_OVERWRITE": 5}[default]


def test_the_time_column_as_comparison_column_is_never_merged(cat: lamina.Catalog) -> None:
    t, schema = make(cat, [("v", I64)], {"*": "IGNORE"})
    upsert(t, schema, {"ts": 1, "v": 1})
    upsert(t, schema, {"ts": 5, "v": 2})
    got = only(t)
    assert (got["ts"], got["v"]) == (at(5), 1)


def test_a_time_column_that_is_not_the_comparison_column_can_be_merged(
    cat: lamina.Catalog,
) -> None:
    """TableConfigUtilsTest (the partial upsert nullability tests' table): with a
    comparison column, the time column may carry a strategy (IGNORE keeps the first)."""
    t, schema = make(
        cat, [("version", I64), ("v", I64)], {"ts": "IGNORE"}, comparison_column="version"
    )
    upsert(t, schema, {"ts": 1, "version": 1, "v": 1})
    upsert(t, schema, {"ts": 7, "version": 2, "v": 2})
    got = only(t)
    assert (got["ts"], got["version"], got["v"]) == (at(1), 2, 2)


@pytest.mark.parametrize(
    ("partial", "comparison_column", "match"),
    [
        ({"key": "OVERWRITE"}, None, "never merged"),  # primary key
        ({"version": "IGNORE"}, "version", "never merged"),  # comparison column
        ({"ts": "IGNORE"}, None, "never merged"),  # the time column compares
        ({"randomCol": "OVERWRITE"}, None, "randomCol"),
        ({"s": "INCREMENT"}, None, "INCREMENT"),  # not numeric
        ({"s": "APPEND"}, None, "APPEND"),  # single-value
        ({"n": "UNION"}, None, "UNION"),  # single-value
        ({"ts": "INCREMENT"}, "version", "INCREMENT"),  # a date-time column
    ],
)
def test_strategies_pinot_refuses_are_refused(
    cat: lamina.Catalog, partial: dict[str, str], comparison_column: str | None, match: str
) -> None:
    """TableConfigUtilsTest.testValidatePartialUpsertConfig."""
    with pytest.raises(UpsertError, match=match):
        make(
            cat,
            [("version", I64), ("s", STR), ("n", I64)],
            partial,
            comparison_column=comparison_column,
        )
    assert "p" not in cat.list_tables()


@pytest.mark.parametrize("default", ["MAX", "MIN"])
def test_a_default_max_or_min_accepts_a_boolean_delete_column(
    cat: lamina.Catalog, default: str
) -> None:
    """Pinot checks only the explicitly listed strategies (TableConfigUtils
    .validatePartialUpsertStrategies), and MAX/MIN compare any Comparable (a BOOLEAN
    is stored as an INT): a default MAX or MIN is accepted on a table with a delete
    column, which merges like any other column."""
    t, schema = make(cat, [("v", I64)], {"*": default})
    upsert(t, schema, {"ts": 1, "v": 3})
    upsert(t, schema, {"ts": 2, "v": 5})
    assert only(t)["v"] == {"MAX": 5, "MIN": 3}[default]
    upsert(t, schema, {"ts": 3, "deleted": True})
    assert visible(t) == []


def test_a_null_comparison_value_is_refused(cat: lamina.Catalog) -> None:
    """PartialUpsertHandler copies a previous comparison value into a new record's null
    one; Pinot needs this for several comparison columns (each record sets one). lamina
    has one comparison column and refuses nulls in it (a documented deviation)."""
    t, schema = make(
        cat, [("version", I64), ("v", I64)], {"v": "INCREMENT"}, comparison_column="version"
    )
    upsert(t, schema, {"ts": 1, "version": 2, "v": 1})
    with pytest.raises(UpsertError):
        upsert(t, schema, {"ts": 2, "version": None, "v": 1})
    assert only(t)["v"] == 1


# -- deletes, ties and out-of-order records (doUpdateRecord) -------------------------

DCOLS = [("n", I64), ("s", STR), ("tags", LSTR)]
DSTRAT = {"n": "INCREMENT", "tags": "UNION", "*": "IGNORE"}


def values(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["n"], r["s"], r["tags"])


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
@pytest.mark.parametrize("revive_at", [3, 2], ids=["later", "tie"])
def test_a_record_after_a_delete_is_taken_whole(
    cat: lamina.Catalog, one_input: bool, revive_at: int
) -> None:
    """The previous record is not queryable: nothing is merged from it."""
    t, schema = make(cat, DCOLS, DSTRAT)
    records: list[dict[str, Any]] = [
        {"ts": 1, "n": 1, "s": "x", "tags": ["a"]},
        {"ts": 2, "deleted": True},
        {"ts": revive_at, "n": 2, "tags": ["b"]},
    ]
    if one_input:
        upsert(t, schema, *records)
    else:
        upsert(t, schema, records[0])
        upsert(t, schema, records[1])
        assert visible(t) == []
        upsert(t, schema, records[2])
    assert values(only(t)) == (2, None, ["b"])
    upsert(t, schema, {"ts": 9, "n": 5, "s": "y", "tags": ["a"]})  # merges again
    assert values(only(t)) == (7, "y", ["a", "b"])


def test_a_delete_record_is_not_merged(cat: lamina.Catalog) -> None:
    """A delete record is stored as it came (doUpdateRecord skips deletes)."""
    t, schema = make(cat, DCOLS, DSTRAT)
    upsert(t, schema, {"ts": 1, "n": 1, "s": "x", "tags": ["a"]})
    upsert(t, schema, {"ts": 2, "n": 4, "deleted": True})
    assert visible(t) == []
    tomb = [r for r in stored(t) if r["deleted"]]
    assert [values(r) for r in tomb] == [(4, None, None)]


def test_an_out_of_order_delete_changes_nothing(cat: lamina.Catalog) -> None:
    t, schema = make(cat, DCOLS, DSTRAT)
    upsert(t, schema, {"ts": 5, "n": 1, "s": "x", "tags": ["a"]})
    upsert(t, schema, {"ts": 3, "deleted": True})
    assert values(only(t)) == (1, "x", ["a"])
    upsert(t, schema, {"ts": 6, "n": 2, "s": "y", "tags": ["b"]})
    assert values(only(t)) == (3, "x", ["a", "b"])


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
def test_an_out_of_order_record_is_stored_as_it_came_and_never_merged(
    cat: lamina.Catalog, one_input: bool
) -> None:
    """Older than the key's latest record: not merged (stored as it came), not visible,
    and the next record merges with the latest, not with it."""
    t, schema = make(cat, DCOLS, DSTRAT)
    records: list[dict[str, Any]] = [
        {"ts": 5, "n": 1, "s": "x", "tags": ["a"]},
        {"ts": 3, "n": 10, "s": "old", "tags": ["z", "o"]},
    ]
    if one_input:
        upsert(t, schema, *records)
    else:
        upsert(t, schema, records[0])
        upsert(t, schema, records[1])
    assert values(only(t)) == (1, "x", ["a"])
    old = [r for r in stored(t) if r["ts"] == at(3)]
    assert [values(r) for r in old] == [(10, "old", ["z", "o"])]
    upsert(t, schema, {"ts": 6, "n": 2, "s": "y", "tags": ["b"]})
    assert values(only(t)) == (3, "x", ["a", "b"])


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
def test_a_tie_is_merged(cat: lamina.Catalog, one_input: bool) -> None:
    """An equal comparison value is in order (compareTo >= 0): the record merges."""
    t, schema = make(cat, DCOLS, DSTRAT)
    records: list[dict[str, Any]] = [
        {"ts": 4, "n": 1, "s": "x", "tags": ["b"]},
        {"ts": 4, "n": 2, "s": "y", "tags": ["a"]},
    ]
    if one_input:
        upsert(t, schema, *records)
    else:
        upsert(t, schema, records[0])
        upsert(t, schema, records[1])
    assert values(only(t)) == (3, "x", ["a", "b"])


def test_records_of_one_input_merge_in_order(cat: lamina.Catalog) -> None:
    """As Pinot ingests a stream: each record in order merges with the latest one;
    an out-of-order one in between changes nothing; keys do not mix."""
    t, schema = make(cat, DCOLS, DSTRAT)
    upsert(
        t,
        schema,
        {"ts": 1, "n": 1, "s": "x", "tags": ["c"]},
        {"key": "other", "ts": 2, "n": 100, "s": "o", "tags": ["o"]},
        {"ts": 3, "n": 2, "s": "y", "tags": ["a"]},
        {"ts": 2, "n": 50, "s": "late", "tags": ["l"]},
        {"ts": 3, "n": 4, "tags": None},
        {"ts": 4, "deleted": True},
        {"ts": 5, "n": 8},
        {"ts": 6, "n": 16, "s": "z", "tags": ["b", "a"]},
    )
    got = {r["key"]: values(r) for r in visible(t)}
    assert got == {"k": (24, "z", ["b", "a"]), "other": (100, "o", ["o"])}
