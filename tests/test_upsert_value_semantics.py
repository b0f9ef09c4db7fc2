"""More of Apache Pinot's upsert tests, retold on lamina upsert tables.

These are the scenarios of Pinot's tests that ``test_upsert_partial.py``,
``test_upsert_visibility.py`` and ``test_upsert.py`` do not cover yet. Sources, in
apache/pinot (``pinot-segment-local/src/test/java/org/apache/pinot/segment/local/`` unless
a module is named):

- ``upsert/merger/columnar/PartialUpsertColumnMergerTest``: the mergers on Java's
  ``Integer`` and ``Float`` values and on types whose ``compareTo`` MAX/MIN use;
- ``upsert/ConcurrentMapPartitionUpsertMetadataManagerTest``: ``removeSegment`` (forgets
  the keys located in the removed segment) followed by ``addRecord``/``updateRecord``;
  ``testGetQueryableDocIds`` (a null delete flag is no delete) on a partial-upsert table;
- ``indexsegment/mutable/MutableSegmentImplUpsertComparisonColTest``: a comparison column
  that disagrees with the time column, and which records are out of order;
- pinot-integration-tests ``UpsertTableIntegrationTest.testDeleteWithFullUpsert`` and
  ``testDeleteWithPartialUpsert``, and ``custom/OfflineUpsertTableTest``, with their data.

Not retold (lamina has no such feature or differs by design, docs/upserts.md): several
comparison columns (``ComparisonColumnsTest``, ``MutableSegmentImplUpsertTest
.testMultipleComparisonColumns``), a null comparison value (Pinot's default null time,
``MutableSegmentImplUpsertTest.testHashFunctions``), ``dropOutOfOrderRecord`` (the
``outOfOrderRecordColumn`` case is checked through ``all_versions``), post-partial-upsert
transforms, custom row mergers and a delete column that is not boolean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lamina
from tests.test_upsert_partial import at, check_merge, make, only, upsert, upsert_pair

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")
#: a test of what merge-on-read stores (every record, vectors over them): copy-on-write
#: stores a copy without the superseded records instead (tests/test_copy_on_write.py)
MERGE_ON_READ_STORAGE = pytest.mark.parametrize("write_mode", ["merge-on-read"], indirect=True)

I32 = pa.int32()
F32 = pa.float32()
LI32 = pa.list_(pa.int32())
TS = pa.timestamp("us")
DATE = pa.date32()
DEC = pa.decimal128(10, 2)
I32_MAX = 2**31 - 1
I32_MIN = -(2**31)


def f32(*values: float) -> float:
    """The sum of ``values`` added one by one in single precision (Java's float +)."""
    total = np.float32(values[0])
    for v in values[1:]:
        total = np.float32(total + np.float32(v))
    return float(total)


# -- the mergers on the types of Pinot's merger tests --------------------------------

COLUMN = "PartialUpsertColumnMergerTest"

#: (strategy, column type, previous value, new value, merged value, Pinot source)
TYPED_CASES: list[tuple[str, pa.DataType, Any, Any, Any, str]] = [
    ("INCREMENT", I32, 1, 2, 3, f"{COLUMN}.testIncrementMergers (Integer)"),
    ("INCREMENT", I32, I32_MAX, 1, I32_MIN, "IncrementMerger (Java int addition wraps)"),
    ("INCREMENT", F32, 0.1, 0.2, f32(0.1, 0.2), "IncrementMerger (Float + Float)"),
    ("APPEND", LI32, [1, 2, 3], [3, 4, 6], [1, 2, 3, 3, 4, 6], f"{COLUMN}.testAppendMergers"),
    ("UNION", LI32, [1, 2, 3], [3, 4, 6], [1, 2, 3, 4, 6], "UnionMerger (TreeSet of Integer)"),
    ("MAX", I32, 0, 1, 1, f"{COLUMN}.testMaxMinMergers"),
    ("MAX", I32, 1, 0, 1, f"{COLUMN}.testMaxMinMergers"),
    ("MIN", I32, 0, 1, 0, f"{COLUMN}.testMaxMinMergers"),
    ("MIN", I32, 1, 0, 0, f"{COLUMN}.testMaxMinMergers"),
    ("MAX", F32, 2.5, -1.0, 2.5, "MaxMerger (Float.compareTo)"),
    ("OVERWRITE", LI32, [1, 2], None, [1, 2], "PartialUpsertColumnarMerger (Integer[])"),
    ("IGNORE", LI32, [1, 2], [3], [1, 2], "PartialUpsertColumnarMerger (Integer[])"),
    # Comparable values of other types (a TIMESTAMP is stored as a long, a BIG_DECIMAL
    # compares as BigDecimal)
    ("MAX", TS, datetime(2024, 5, 1), datetime(2023, 1, 1), datetime(2024, 5, 1), "MaxMerger"),
    ("MIN", TS, datetime(2024, 5, 1), datetime(2023, 1, 1), datetime(2023, 1, 1), "MinMerger"),
    ("MAX", DATE, date(2024, 1, 2), date(2024, 1, 9), date(2024, 1, 9), "MaxMerger"),
    ("MIN", DATE, date(2024, 1, 2), date(2024, 1, 9), date(2024, 1, 2), "MinMerger"),
    ("MAX", DEC, Decimal("-2.25"), Decimal("1.50"), Decimal("1.50"), "MaxMerger (BigDecimal)"),
    ("MIN", DEC, Decimal("-2.25"), Decimal("1.50"), Decimal("-2.25"), "MinMerger (BigDecimal)"),
    ("MAX", DEC, Decimal("10.00"), Decimal("9.99"), Decimal("10.00"), "MaxMerger (BigDecimal)"),
]


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
@pytest.mark.parametrize(
    "case", TYPED_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]!r}-{c[3]!r}" for c in TYPED_CASES]
)
def test_a_strategy_merges_values_of_each_pinot_type(
    cat: lamina.Catalog, case: tuple[str, pa.DataType, Any, Any, Any, str], one_input: bool
) -> None:
    """PartialUpsertColumnMergerTest's values are Java Integers (INT columns) and the
    mergers dispatch on the value's class: INCREMENT adds ints and floats in their own
    width, MAX/MIN use any Comparable."""
    check_merge(cat, case, one_input)


def test_a_null_delete_flag_is_no_delete_and_the_record_merges(cat: lamina.Catalog) -> None:
    """ConcurrentMapPartitionUpsertMetadataManagerTest.testGetQueryableDocIds (a record
    whose delete column is null stays queryable) with doUpdateRecord: the next record
    merges with it, and a record with a null flag merges too."""
    t, schema = make(cat, [("n", pa.int64()), ("s", pa.string())], {"n": "INCREMENT"})
    upsert(t, schema, {"ts": 1, "n": 1, "s": "x", "deleted": None})
    assert only(t)["n"] == 1
    upsert(t, schema, {"ts": 2, "n": 2, "deleted": None})
    upsert(t, schema, {"ts": 3, "n": 4, "deleted": False})
    got = only(t)
    assert (got["ts"], got["n"], got["s"]) == (at(3), 7, "x")


DELETE_FLAGS = [  # (type, value, a delete?) as Pinot's BooleanUtils.toBoolean reads them
    (pa.string(), "true", True), (pa.string(), "TRUE", True), (pa.string(), "1", True),
    (pa.string(), "false", False), (pa.string(), "yes", False), (pa.string(), "01", False),
    (pa.large_string(), "True", True),
    (pa.int32(), 1, True), (pa.int32(), 0, False), (pa.int32(), 2, False),
    (pa.int64(), 2**32 + 1, True),  # Long.intValue(): the low 32 bits
    (pa.uint8(), 1, True),
    (pa.float64(), 1.0, True), (pa.float64(), 1.9, True), (pa.float64(), 2.0, False),
    (pa.float64(), 0.99, False), (pa.float64(), math.nan, False), (pa.float32(), 1.5, True),
    (pa.decimal128(12, 2), Decimal("1.50"), True), (pa.decimal128(12, 2), Decimal("0.50"), False),
]  # fmt: skip


@pytest.mark.parametrize(("typ", "flag", "deletes"), DELETE_FLAGS, ids=str)
def test_a_string_or_numeric_delete_column_marks_deletes_as_pinot_reads_them(
    cat: lamina.Catalog, typ: pa.DataType, flag: Any, deletes: bool
) -> None:
    """TableConfigUtilsTest.testValidateUpsertConfig: a delete column may be boolean,
    string or numeric; the flag is read with BooleanUtils.toBoolean. The same after the
    key index is rebuilt from the files."""
    schema = pa.schema(
        [pa.field("key", pa.string(), nullable=False), ("ts", TS), ("v", pa.int64()), ("d", typ)]
    )
    t = cat.create_table("dt", schema, time_column="ts", primary_key="key", delete_column="d")

    def put(minute: int, v: int, d: Any) -> None:
        t.upsert(pa.Table.from_pylist([{"key": "k", "ts": at(minute), "v": v, "d": d}], schema))

    put(1, 1, None)
    put(2, 2, flag)
    assert [r["v"] for r in t.to_arrow().to_pylist()] == ([] if deletes else [2])
    t._handle.ctx.keys.forget(t._handle.record.id)  # rebuilt: same reading
    put(0, 0, None)  # older than the flagged record: out of order either way
    assert [r["v"] for r in t.to_arrow().to_pylist()] == ([] if deletes else [2])


@pytest.mark.parametrize("typ", [pa.string(), pa.int32(), pa.decimal128(5, 1)], ids=str)
def test_a_partial_record_without_its_delete_column_is_no_delete(
    cat: lamina.Catalog, typ: pa.DataType
) -> None:
    schema = pa.schema(
        [pa.field("key", pa.string(), nullable=False), ("ts", TS), ("n", pa.int64()), ("d", typ)]
    )
    t = cat.create_table(
        "pd", schema, time_column="ts", primary_key="key", delete_column="d",
        partial_upsert={"n": "INCREMENT"},
    )  # fmt: skip
    t.upsert(pa.table({"key": ["k"], "ts": pa.array([at(1)], TS), "n": [1]}))
    t.upsert(pa.table({"key": ["k"], "ts": pa.array([at(2)], TS), "n": [2]}))
    assert [r["n"] for r in t.to_arrow().to_pylist()] == [3]


def test_a_delete_column_of_another_type_is_refused(cat: lamina.Catalog) -> None:
    schema = pa.schema(
        [pa.field("key", pa.string(), nullable=False), ("ts", TS), ("d", pa.date32())]
    )
    with pytest.raises(lamina.errors.UpsertError, match="a string .'true' or '1'. or a number"):
        cat.create_table("x", schema, time_column="ts", primary_key="key", delete_column="d")
    assert cat.list_tables() == []


# -- removing the segment that holds a key's latest record ---------------------------

DAY_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("ts", TS),
        pa.field("version", pa.int64()),
        pa.field("n", pa.int64()),
        pa.field("deleted", pa.bool_()),
    ]
)
T0 = datetime(2024, 1, 1)


def day_table(cat: lamina.Catalog, partial: bool) -> lamina.Table:
    """Compared by ``version``; each day a chunk (a Pinot segment) of its own."""
    return cat.create_table(
        "u",
        DAY_SCHEMA,
        time_column="ts",
        primary_key=["key"],
        comparison_column="version",
        delete_column="deleted",
        partial_upsert={"n": "INCREMENT"} if partial else None,
        segment_granularity="DAY",
    )


def day_upsert(t: lamina.Table, day: int, version: int, n: int, deleted: bool = False) -> str:
    """Upsert one record of key ``k`` into ``day``'s chunk; the ids of its segments."""
    row = {"key": "k", "ts": T0 + timedelta(days=day), "version": version, "n": n,
           "deleted": deleted}  # fmt: skip
    commit = t.upsert(pa.Table.from_pylist([row], schema=DAY_SCHEMA))
    # (a copy-on-write upsert adds the copy of the day it superseded the record in too)
    ids = [s.id for s in t.segments() if s.commit_id == commit.id and s.minor_version == 0]
    assert len(ids) == 1
    return ids[0]


def shown(t: lamina.Table) -> list[tuple[int, int]]:
    return [(r["version"], r["n"]) for r in t.to_arrow().to_pylist()]


@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
@pytest.mark.parametrize("latest_is_a_delete", [False, True], ids=["record", "tombstone"])
@pytest.mark.parametrize("next_version", [5, 30], ids=["older-than-all", "newer"])
def test_removing_the_latest_records_segment_forgets_the_key(
    cat: lamina.Catalog, partial: bool, latest_is_a_delete: bool, next_version: int
) -> None:
    """ConcurrentMapPartitionUpsertMetadataManagerTest (removeSegment, as in
    testAddReplaceRemoveSegment's last step, then testAddRecord): removing the segment
    that holds a key's latest record drops the key from the map; the older record
    elsewhere stays invalid. The key's next record is then in order whatever its
    comparison value (there is nothing to compare it with), and on a partial-upsert
    table it is not merged (doUpdateRecord's computeIfPresent finds no previous row)."""
    t = day_table(cat, partial)
    day_upsert(t, 1, 10, 1)
    latest = day_upsert(t, 2, 20, 2, deleted=latest_is_a_delete)
    if not latest_is_a_delete:
        assert shown(t) == [(20, 3 if partial else 2)]
    t.delete_segments([latest])
    assert shown(t) == []
    day_upsert(t, 3, next_version, 4)
    assert shown(t) == [(next_version, 4)]
    day_upsert(t, 4, next_version, 8)  # and the key merges again from there
    assert shown(t) == [(next_version, 12 if partial else 8)]


# -- a comparison column that is not the time column ---------------------------------

EVENTS = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("description", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("secondsSinceEpoch", TS),
    ]
)
#: MutableSegmentImplUpsertComparisonColTest's records: (key, description, offset, time)
COMPARISON_COL_DATA = [
    ("aa", "first", 100, 1567205394),
    ("bb", "first", 300, 1567205396),
    ("aa", "update", 200, 1567205390),
    ("bb", "late arrival", 140, 1567205398),
]


@MERGE_ON_READ_STORAGE
@pytest.mark.parametrize("days_apart", [0, 2], ids=["one-chunk", "across-chunks"])
def test_the_comparison_column_orders_records_not_the_time_column(
    cat: lamina.Catalog, days_apart: int
) -> None:
    """MutableSegmentImplUpsertComparisonColTest.testHashFunctions and
    testUpsertOutOfOrderRecordColumn: compared by ``offset``, aa's update wins although
    its time is earlier, and bb's late arrival (a later time, a smaller offset) is out of
    order: stored, never shown (Pinot's out-of-order flag is set on it alone). With
    ``days_apart`` the two later records lie that many days away, in other chunks."""
    t = cat.create_table(
        "events",
        EVENTS,
        time_column="secondsSinceEpoch",
        primary_key=["event_id"],
        comparison_column="offset",
        segment_granularity="DAY",
    )
    shift = {"update": -days_apart, "late arrival": days_apart}
    for key, desc, offset, secs in COMPARISON_COL_DATA:  # one record at a time, as ingested
        when = datetime(1970, 1, 1) + timedelta(seconds=secs, days=shift.get(desc, 0))
        row = {"event_id": key, "description": desc, "offset": offset, "secondsSinceEpoch": when}
        t.upsert(pa.Table.from_pylist([row], schema=EVENTS))
    want = [("aa", "update", 200), ("bb", "first", 300)]
    got = sorted((r["event_id"], r["description"], r["offset"]) for r in t.to_arrow().to_pylist())
    assert got == want
    by_sql = cat.sql('SELECT event_id, description, "offset" FROM events ORDER BY event_id')
    assert [tuple(r.values()) for r in by_sql.to_pylist()] == want
    every = t.to_arrow(all_versions=True).to_pylist()
    assert len(every) == 4
    never_shown = [r["description"] for r in every if r["$valid_from"] == r["$valid_until"]]
    assert never_shown == ["late arrival"]


# -- Pinot's integration tests, with their data --------------------------------------


def game_schema(game: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("playerId", I32, nullable=False),
            pa.field("name", pa.string()),
            pa.field("game", game),
            pa.field("score", F32),
            pa.field("timestampInEpoch", pa.timestamp("ms")),
            pa.field("deleted", pa.bool_()),
        ]
    )


#: gameScores_csv / gameScores_partial_upsert_csv: (playerId, name, game, score, ms)
GAME_SCORES = [
    (100, "Zook", "counter-strike", 2001.9, 1571036400000),
    (101, "Suess", "counter-strike", 8038, 1571900400000),
    (102, "Clifford", "counter-strike", 98, 1571036400000),
    (101, "Suess", "counter-strike", 9425, 1571036407201),
    (101, "Suess", "counter-strike", 9722, 1572200400000),
    (101, "Suess", "counter-strike", 10311, 1572239402000),
    (102, "Clifford", "counter-strike", 102, 1681036400000),
    (100, "Zook", "counter-strike", 2050, 1681256400000),
    (100, "Suess", "counter-strike", 12000.55, 1681256390000),
    (101, "Suess", "counter-strike", 12500.20, 1681258290000),
]
#: the partial-upsert file differs in two games
PARTIAL_GAMES: dict[tuple[int, float], str] = {
    (102, 98): "world-of-warcraft",
    (100, 2050): "world-of-warcraft",
}


def game_rows(
    schema: pa.Schema, records: Sequence[tuple[int, str, str | None, float, int, bool]]
) -> pa.Table:
    is_list = pa.types.is_list(schema.field("game").type)
    rows = [
        {"playerId": pid, "name": name, "game": ([game] if game else None) if is_list else game,
         "score": score, "timestampInEpoch": ms, "deleted": deleted}
        for pid, name, game, score, ms, deleted in records
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=schema)


def game_table(cat: lamina.Catalog, partial: bool) -> tuple[lamina.Table, pa.Schema]:
    schema = game_schema(pa.list_(pa.string()) if partial else pa.string())
    t = cat.create_table(
        "gameScores",
        schema,
        time_column="timestampInEpoch",
        primary_key=["playerId"],
        delete_column="deleted",
        partial_upsert={"game": "UNION", "score": "INCREMENT"} if partial else None,
    )
    records = [
        (pid, name, PARTIAL_GAMES.get((pid, score), game) if partial else game, score, ms, False)
        for pid, name, game, score, ms in GAME_SCORES
    ]
    t.upsert(game_rows(schema, records))
    return t, schema


def players(t: lamina.Table) -> dict[int, tuple[Any, ...]]:
    got = t.to_arrow().to_pylist()
    assert len({r["playerId"] for r in got}) == len(got)
    return {r["playerId"]: (r["name"], r["game"], r["score"]) for r in got}


@MERGE_ON_READ_STORAGE
def test_delete_with_full_upsert(cat: lamina.Catalog) -> None:
    """UpsertTableIntegrationTest.testDeleteWithFullUpsert: three players; deleting
    100 and 102 leaves 101; the deletes are stored (skipUpsert finds them with
    deleted = true); a newer record revives 100, taken whole (its null game stays
    null), and 100's earlier records are all still stored."""
    t, schema = game_table(cat, partial=False)
    assert players(t) == {
        100: ("Zook", "counter-strike", f32(2050)),
        101: ("Suess", "counter-strike", f32(12500.20)),
        102: ("Clifford", "counter-strike", f32(102)),
    }
    # a filter sees only the latest records: 100's out-of-order "Suess" record is hidden
    by_name = cat.sql("SELECT playerId FROM gameScores WHERE name = 'Suess'").to_pylist()
    assert by_name == [{"playerId": 101}]
    t.upsert(
        game_rows(schema, [(102, "Clifford", "counter-strike", 102, 1681254200000, True),
                           (100, "Zook", "counter-strike", 2050, 1681377200000, True)])
    )  # fmt: skip
    assert list(players(t)) == [101]
    assert cat.sql("SELECT count(*) AS n FROM gameScores").to_pylist() == [{"n": 1}]
    every = t.to_arrow(all_versions=True).to_pylist()
    assert len(every) == 12
    assert sorted(r["playerId"] for r in every if r["deleted"]) == [100, 102]

    t.upsert(game_rows(schema, [(100, "Zook-New", None, 0.0, 1684707335000, False)]))
    assert players(t)[100] == ("Zook-New", None, 0.0)
    got = cat.sql("SELECT playerId, name, game FROM gameScores WHERE playerId = 100")
    assert got.to_pylist() == [{"playerId": 100, "name": "Zook-New", "game": None}]
    every = t.to_arrow(all_versions=True).to_pylist()
    assert len(every) == 13
    assert sum(r["playerId"] == 100 for r in every) > 1


@MERGE_ON_READ_STORAGE
def test_delete_with_partial_upsert(cat: lamina.Catalog) -> None:
    """UpsertTableIntegrationTest.testDeleteWithPartialUpsert (game UNION, score
    INCREMENT, the rest OVERWRITE): the merged players before the deletes (101's record
    at ...407201 and 100's "Suess" record are out of order: not merged); the deletes
    are stored as they came; 100 revived is taken whole."""
    t, schema = game_table(cat, partial=True)
    cs, wow = "counter-strike", "world-of-warcraft"
    assert players(t) == {
        100: ("Zook", [cs, wow], f32(2001.9, 2050)),
        101: ("Suess", [cs], f32(8038, 9722, 10311, 12500.20)),
        102: ("Clifford", [cs, wow], f32(98, 102)),
    }
    t.upsert(
        game_rows(schema, [(102, "Clifford", cs, 102, 1681054200000, True),
                           (100, "Zook", cs, 2050, 1681377200000, True)])
    )  # fmt: skip
    assert list(players(t)) == [101]
    every = t.to_arrow(all_versions=True).to_pylist()
    assert len(every) == 12
    deletes = sorted((r["playerId"], r["game"], r["score"]) for r in every if r["deleted"])
    assert deletes == [(100, [cs], f32(2050)), (102, [cs], f32(102))]

    t.upsert(game_rows(schema, [(100, "Zook", None, 0.0, 1684707335000, False)]))
    assert players(t) == {100: ("Zook", None, 0.0), 101: players(t)[101]}
    every = t.to_arrow(all_versions=True).to_pylist()
    assert len(every) == 13
    assert sum(r["playerId"] == 100 for r in every) > 1


#: OfflineUpsertTableTest's three uploaded segments: (playerId, name, score, ms)
OFFLINE_SEGMENTS = [
    [(100, "Alice", 2000.0, 1671036400000), (101, "Bob", 3000.0, 1671036400000)],
    [(100, "Alice", 2500.0, 1681036400000), (102, "Charlie", 4000.0, 1671036400000)],
    [(101, "Bob", 3500.0, 1681036400000), (102, "Charlie", 4500.0, 1681036400000)],
]


@MERGE_ON_READ_STORAGE
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0)], ids=["in-order", "reversed"])
def test_offline_upsert_table(cat: lamina.Catalog, order: tuple[int, int, int]) -> None:
    """custom/OfflineUpsertTableTest: three segments uploaded hold six records of three
    players (in any upload order: no comparison value ties); a later segment updates
    100. skipUpsert counts every stored record."""
    schema = game_schema(pa.string())
    t = cat.create_table(
        "offline", schema, time_column="timestampInEpoch", primary_key=["playerId"]
    )
    for i in order:
        recs = [(pid, name, "chess", score, ms, False) for pid, name, score, ms in
                OFFLINE_SEGMENTS[i]]  # fmt: skip
        t.upsert(game_rows(schema, recs))
    want = {100: 2500.0, 101: 3500.0, 102: 4500.0}
    assert {k: v[2] for k, v in players(t).items()} == want
    assert len(t.to_arrow(all_versions=True)) == 6
    got = cat.sql("SELECT playerId, score FROM offline ORDER BY playerId").to_pylist()
    assert got == [{"playerId": k, "score": v} for k, v in want.items()]

    t.upsert(game_rows(schema, [(100, "UpdatedPlayer", "chess", 9999.0, 1691036400000, False)]))
    assert {k: v[2] for k, v in players(t).items()} == {**want, 100: 9999.0}
    assert len(t.to_arrow(all_versions=True)) == 7
    assert cat.sql("SELECT count(*) AS n FROM offline").to_pylist() == [{"n": 3}]


# -- the order of comparison values ---------------------------------------------------


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
def test_a_negative_zero_comparison_value_is_older_than_zero(
    cat: lamina.Catalog, one_input: bool
) -> None:
    """ComparisonColumnsTest.testRealtimeComparison ("reject same col with smaller
    value": a record whose value compareTo()s below the stored one is out of order),
    with a DOUBLE comparison column, whose values Pinot compares as java.lang.Double."""
    t, schema = make(cat, [("version", pa.float64()), ("v", pa.int64())], {"v": "OVERWRITE"},
                     comparison_column="version", delete=False)  # fmt: skip
    first, second = {"ts": 1, "version": 0.0, "v": 1}, {"ts": 2, "version": -0.0, "v": 2}
    upsert_pair(t, schema, first, second, one_input)
    assert only(t)["v"] == 1


@pytest.mark.parametrize("one_input", [False, True], ids=["two-upserts", "one-input"])
@pytest.mark.parametrize(
    ("strategy", "prev", "new", "negative"),
    [
        ("MAX", -0.0, 0.0, False),
        ("MAX", 0.0, -0.0, False),
        ("MAX", -0.0, -0.0, True),
        ("MIN", 0.0, -0.0, True),
        ("MIN", -0.0, 0.0, True),
        ("MIN", 0.0, 0.0, False),
    ],
)
def test_max_and_min_order_signed_zeros_as_java(
    cat: lamina.Catalog, strategy: str, prev: float, new: float, negative: bool, one_input: bool
) -> None:
    """MaxMerger/MinMerger on DOUBLE values (Java's Math.max/min, Double.compareTo):
    0.0 is above -0.0, so MAX of the two is 0.0 and MIN is -0.0."""
    t, schema = make(cat, [("v", pa.float64())], {"v": strategy})
    first, second = {"ts": 1, "v": prev}, {"ts": 2, "v": new}
    upsert_pair(t, schema, first, second, one_input)
    got = only(t)["v"]
    assert got == 0.0 and math.copysign(1.0, got) == (-1.0 if negative else 1.0)


# -- a partial upsert's record may leave columns out -------------------------------------


def _partial_record(**columns: Any) -> pa.Table:
    """One record of key "k" at minute ``ts`` with only the columns given."""
    return pa.table(
        {"key": ["k"], "ts": pa.array([at(columns.pop("ts"))], TS)}
        | {name: [value] for name, value in columns.items()}
    )


@pytest.mark.parametrize("in_transaction", [False, True], ids=["upsert", "transaction"])
def test_a_partial_upsert_record_may_leave_columns_out(
    cat: lamina.Catalog, in_transaction: bool
) -> None:
    """PartialUpsertHandlerTest with a record whose fields are missing: Pinot's
    ingestion gives a missing field its null value, so OVERWRITE keeps the previous
    value, FORCE_OVERWRITE takes the null and INCREMENT adds nothing; a delete flag
    left out is false (Pinot's null is no delete either)."""
    cols = [("n", pa.int64()), ("s", pa.string()), ("f", pa.string())]
    t, schema = make(cat, cols, {"n": "INCREMENT", "f": "FORCE_OVERWRITE"})
    upsert(t, schema, {"ts": 1, "n": 1, "s": "x", "f": "y"})
    if in_transaction:
        with t.transaction() as tx:
            tx.upsert(_partial_record(ts=2, n=2))
    else:
        t.upsert(_partial_record(ts=2, n=2))
    got = only(t)
    assert (got["ts"], got["n"], got["s"], got["f"], got["deleted"]) == (at(2), 3, "x", None, False)
    t.upsert(_partial_record(ts=3, s="z"))
    got = only(t)
    assert (got["n"], got["s"]) == (3, "z")


def test_an_upsert_takes_records_without_nullable_columns(cat: lamina.Catalog) -> None:
    """A full upsert stores whole records: a nullable column it lacks is stored as
    null (as a Delta append does); any upsert still needs its key and time columns,
    named, and nothing is written without them."""
    full = cat.create_table(
        "full",
        pa.schema([pa.field("key", pa.string(), nullable=False), ("ts", TS), ("s", pa.string())]),
        time_column="ts",
        primary_key=["key"],
    )
    full.upsert(_partial_record(ts=1))
    assert full.to_arrow().select(["key", "s"]).to_pylist() == [{"key": "k", "s": None}]
    with pytest.raises(lamina.SchemaError, match=r"missing columns \['ts'\]"):
        full.upsert(pa.table({"key": ["j"], "s": ["x"]}))
    assert full.count() == 1
    t, _ = make(cat, [("n", pa.int64())], {"n": "INCREMENT"})
    with pytest.raises(lamina.SchemaError, match=r"missing columns \['ts'\]"):
        t.upsert(pa.table({"key": ["k"], "n": [1]}))
    assert t.count() == 0


def test_increment_adds_decimals_exactly_and_refuses_an_overflow(cat: lamina.Catalog) -> None:
    """Pinot accepts INCREMENT on a BIG_DECIMAL column (its IncrementMerger goes through
    a double); lamina adds decimals exactly, and a sum past the column's precision is
    an UpsertError that publishes nothing."""
    t, schema = make(cat, [("amt", pa.decimal128(5, 2))], {"amt": "INCREMENT"})
    upsert(t, schema, {"ts": 1, "amt": Decimal("0.10")})
    upsert(t, schema, {"ts": 2, "amt": Decimal("0.20")})
    upsert(t, schema, {"ts": 3, "amt": None})
    assert only(t)["amt"] == Decimal("0.30")  # not 0.30000000000000004
    history = t.history()
    with pytest.raises(lamina.errors.UpsertError, match="overflows the decimal128.5, 2."):
        upsert(t, schema, {"ts": 4, "amt": Decimal("999.90")})
    assert t.history() == history and only(t)["amt"] == Decimal("0.30")


def test_union_of_floats_is_a_java_treeset(cat: lamina.Catalog) -> None:
    """UnionMerger keeps a TreeSet: Double.compareTo puts -0.0 below 0.0 and keeps one
    NaN, the greatest (a hunt found 0.0 and -0.0 merged, NaN kept twice)."""
    t, schema = make(cat, [("xs", pa.list_(pa.float64()))], {"xs": "UNION"})
    upsert(t, schema, {"ts": 1, "xs": [0.0, math.nan, 3.0]})
    upsert(t, schema, {"ts": 2, "xs": [-0.0, math.nan, math.inf, 3.0]})
    got = only(t)["xs"]
    assert [str(x) for x in got] == ["-0.0", "0.0", "3.0", "inf", "nan"]
