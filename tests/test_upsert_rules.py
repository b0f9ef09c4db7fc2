"""The pure upsert rules of lamina.core.upsert.

The scenarios retell, with lamina's API, the cases of Pinot's upsert metadata-manager
and partial-upsert tests (within one input, across inputs, ties, out of order, deletes
and revival, every partial strategy with nulls on either side), the seed's AccountBalance
example, and bad definitions; a Hypothesis oracle holds the vectorized rules to a plain
record-by-record dict model.

``Store`` stands in for the catalog: it keeps the stored inputs as segments, a key index
(key -> segment, row), and which rows are valid and queryable, and feeds
``resolve_against`` the current records of the keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.core.upsert import (
    DELETED,
    ROW,
    SEGMENT,
    SEQ,
    Resolution,
    Strategy,
    UpsertSpec,
    resolve_against,
    resolve_batch,
    resolve_rewrite,
)
from lamina.errors import LaminaError, UpsertError

Row = dict[str, Any]


def nn(name: str, t: pa.DataType) -> pa.Field:
    return pa.field(name, t, nullable=False)


class Store:
    """A minimal catalog: segments, a key index, valid/queryable flags per stored row."""

    def __init__(self, spec: UpsertSpec, schema: pa.Schema, current_all_keys: bool = False):
        self.spec, self.schema = spec, schema
        self.current_all_keys = current_all_keys
        self.segments: list[pa.Table] = []
        self.valid: list[np.ndarray] = []
        self.queryable: list[np.ndarray] = []
        self.index: dict[tuple[Any, ...], tuple[int, int]] = {}
        self.last: Resolution | None = None

    def key(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.spec.primary_key)

    def current(self, batch: pa.Table) -> pa.Table:
        keys = set(self.index)
        if not self.current_all_keys:
            keys &= {self.key(r) for r in batch.select(list(self.spec.primary_key)).to_pylist()}
        rows = []
        for k in sorted(keys, key=repr):
            seg, r = self.index[k]
            rec = self.segments[seg].slice(r, 1).to_pylist()[0]
            rec.update({DELETED: not self.queryable[seg][r], SEGMENT: seg, ROW: r, SEQ: seg + 1})
            rows.append(rec)
        schema = self.schema.append(pa.field(DELETED, pa.bool_()))
        schema = schema.append(pa.field(SEGMENT, pa.int64())).append(pa.field(ROW, pa.int64()))
        return pa.Table.from_pylist(rows, schema=schema.append(pa.field(SEQ, pa.int64())))

    def upsert(self, rows: list[Row] | pa.Table) -> Resolution:
        batch = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, self.schema)
        current, br = self.current(batch), resolve_batch(batch, self.spec)
        res = resolve_against(current, br, self.spec, len(self.segments) + 1)
        # the same with the rows of current named per key (as a key index lookup does)
        at = {self.key(r): i for i, r in enumerate(current.to_pylist())}
        winners = batch.take(pa.array(br.winners)).to_pylist()
        match = np.array([at.get(self.key(r), -1) for r in winners], np.int64)
        named = resolve_against(current, br, self.spec, len(self.segments) + 1, match=match)
        for f in dataclasses.fields(res):
            a, b = getattr(res, f.name), getattr(named, f.name)
            assert a.equals(b) if isinstance(a, pa.Table) else np.array_equal(a, b), f.name
        self.apply(res)
        return res

    def apply(self, res: Resolution) -> None:
        seg = len(self.segments)
        for s, r in zip(
            res.invalidated.column(SEGMENT).to_pylist(),
            res.invalidated.column(ROW).to_pylist(),
            strict=True,
        ):
            assert self.valid[s][r]
            self.valid[s][r] = self.queryable[s][r] = False
        self.segments.append(res.records)
        self.valid.append(res.valid.copy())
        self.queryable.append(res.queryable.copy())
        recs = res.records.to_pylist()
        for r in np.flatnonzero(res.valid):
            self.index[self.key(recs[r])] = (seg, int(r))
        self.last = res
        self.check()

    def check(self) -> None:
        """Exactly the indexed rows are valid; queryable implies valid."""
        valid = {(s, int(r)) for s, v in enumerate(self.valid) for r in np.flatnonzero(v)}
        assert valid == set(self.index.values())
        for v, q in zip(self.valid, self.queryable, strict=True):
            assert not (q & ~v).any()

    def visible(self) -> dict[tuple[Any, ...], Row]:
        out: dict[tuple[Any, ...], Row] = {}
        for seg, q in zip(self.segments, self.queryable, strict=True):
            recs = seg.to_pylist()
            for r in np.flatnonzero(q):
                k = self.key(recs[r])
                assert k not in out, f"key {k} visible twice"
                out[k] = recs[r]
        return out

    def stored(self) -> list[Row]:
        return [r for seg in self.segments for r in seg.to_pylist()]


# --- definitions --------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        nn("id", pa.int64()),
        nn("ts", pa.int64()),
        pa.field("deleted", pa.bool_()),
        pa.field("v", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("tags", pa.list_(pa.int64())),
        pa.field("flag", pa.bool_()),
        pa.field("obj", pa.struct([("a", pa.int64())])),
        pa.field("objs", pa.list_(pa.struct([("a", pa.int64())]))),
        pa.field("nullable_id", pa.int64()),
        nn("nn_obj", pa.struct([("a", pa.int64())])),
    ]
)


def test_parse_full_upsert_defaults_to_the_time_column() -> None:
    spec = UpsertSpec.parse(SCHEMA, "ts", "id")
    assert spec == UpsertSpec(("id",), "ts", None, None)
    assert not spec.is_partial and spec.strategy("v") is None


def test_parse_partial_upsert_with_a_default_strategy() -> None:
    spec = UpsertSpec.parse(
        SCHEMA,
        "ts",
        ["id"],
        delete_column="deleted",
        partial_upsert={"v": "increment", "tags": Strategy.UNION, "*": "IGNORE"},
    )
    assert spec.is_partial and spec.default_strategy is Strategy.IGNORE
    assert spec.strategies == {"v": Strategy.INCREMENT, "tags": Strategy.UNION}
    assert spec.strategy("v") is Strategy.INCREMENT
    assert spec.strategy("name") is Strategy.IGNORE
    assert spec.strategy("id") is None and spec.strategy("ts") is None
    assert UpsertSpec.parse(SCHEMA, "ts", "id", partial_upsert={}).default_strategy is (
        Strategy.OVERWRITE
    )


def test_parse_comparison_column_and_no_time_column() -> None:
    spec = UpsertSpec.parse(SCHEMA, None, ("id",), comparison_column="name")
    assert spec.comparison_column == "name"
    hash(spec)  # frozen and hashable


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("empty key", {"primary_key": []}, "primary_key is empty"),
    ("repeated key", {"primary_key": ["id", "id"]}, "names a column twice"),
    ("unknown key", {"primary_key": ["nope"]}, "primary key column 'nope' is not a column"),
    ("nullable key", {"primary_key": ["nullable_id"]}, "key columns are NOT NULL"),
    ("nested key", {"primary_key": ["id", "nn_obj"]}, "must be a scalar"),
    ("no comparison", {"time_column": None}, "no time column: name a comparison_column"),
    ("unknown comparison", {"comparison_column": "nope"}, "comparison column 'nope' is not"),
    ("list comparison", {"comparison_column": "tags"}, "which has no order"),
    ("struct comparison", {"comparison_column": "obj"}, "which has no order"),
    ("unknown delete", {"delete_column": "nope"}, "delete column 'nope' is not"),
    ("list delete", {"delete_column": "tags"}, "must be boolean"),  # ints: Pinot allows them
    ("unknown strategy", {"partial_upsert": {"v": "SUM"}}, "unknown partial upsert strategy"),
    ("strategy on key", {"partial_upsert": {"id": "MAX"}}, "'id' is the primary key column"),
    ("strategy on comparison", {"partial_upsert": {"ts": "MAX"}}, "comparison column"),
    ("strategy unknown col", {"partial_upsert": {"nope": "MAX"}}, "'nope' is not a column"),
    ("increment string", {"partial_upsert": {"name": "INCREMENT"}}, "INCREMENT needs"),
    ("append int", {"partial_upsert": {"v": "APPEND"}}, "APPEND needs a list column"),
    ("union structs", {"partial_upsert": {"objs": "UNION"}}, "UNION needs a list column"),
    ("max bool", {"partial_upsert": {"flag": "MAX"}}, "MAX needs"),
    ("default increment", {"partial_upsert": {"*": "INCREMENT"}}, "(the default strategy"),
    ("partial not dict", {"partial_upsert": ["v"]}, "must be a dict"),
]


@pytest.mark.parametrize(
    ("kwargs", "message"), [b[1:] for b in BAD_SPECS], ids=[b[0] for b in BAD_SPECS]
)
def test_bad_spec_raises_typed_error(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"time_column": "ts", "primary_key": ["id"], **kwargs}
    with pytest.raises(UpsertError, match=message.replace("(", r"\(")) as exc:
        UpsertSpec.parse(SCHEMA, **args)
    assert isinstance(exc.value, LaminaError) and isinstance(exc.value, ValueError)


def test_delete_column_cannot_be_the_comparison_column() -> None:
    schema = pa.schema([nn("id", pa.int64()), nn("b", pa.bool_())])
    with pytest.raises(UpsertError, match="cannot also be a key or the comparison"):
        UpsertSpec.parse(schema, "b", "id", delete_column="b")


# --- full upserts: Pinot's metadata-manager cases ------------------------------------

FULL = pa.schema([nn("id", pa.int64()), nn("ts", pa.int64()), pa.field("v", pa.int64())])
FULL_SPEC = UpsertSpec.parse(FULL, "ts", "id")


def rows(*triples: tuple[int, int, int | None]) -> list[Row]:
    return [{"id": i, "ts": t, "v": v} for i, t, v in triples]


def values(store: Store) -> dict[int, Any]:
    return {k[0]: r["v"] for k, r in store.visible().items()}


def test_within_one_batch_the_greatest_comparison_wins() -> None:
    s = Store(FULL_SPEC, FULL)
    res = s.upsert(rows((1, 5, 10), (2, 3, 20), (1, 9, 11), (1, 7, 12), (2, 1, 21)))
    assert values(s) == {1: 11, 2: 20}
    assert res.valid.tolist() == [False, True, True, False, False]
    assert res.out_of_order.tolist() == [False, False, False, True, True]
    assert res.invalidated.num_rows == 0


def test_within_one_batch_a_tie_goes_to_the_later_row() -> None:
    s = Store(FULL_SPEC, FULL)
    res = s.upsert(rows((1, 5, 10), (1, 5, 11), (1, 5, 12), (2, 5, 20)))
    assert values(s) == {1: 12, 2: 20}
    assert res.valid.tolist() == [False, False, True, True]
    assert not res.out_of_order.any()


def test_across_batches_a_newer_record_replaces_and_invalidates() -> None:
    s = Store(FULL_SPEC, FULL)
    s.upsert(rows((1, 5, 10), (2, 5, 20)))
    res = s.upsert(rows((1, 6, 11), (3, 1, 30)))
    assert values(s) == {1: 11, 2: 20, 3: 30}
    assert res.invalidated.to_pylist() == [{SEGMENT: 0, ROW: 0}]
    assert s.valid[0].tolist() == [False, True]


def test_across_batches_a_tie_goes_to_the_later_commit() -> None:
    s = Store(FULL_SPEC, FULL)
    s.upsert(rows((1, 5, 10)))
    res = s.upsert(rows((1, 5, 11)))
    assert values(s) == {1: 11} and res.valid.tolist() == [True]
    assert res.invalidated.to_pylist() == [{SEGMENT: 0, ROW: 0}]


def test_out_of_order_record_is_stored_but_never_replaces_a_newer_one() -> None:
    s = Store(FULL_SPEC, FULL)
    s.upsert(rows((1, 5, 10)))
    res = s.upsert(rows((1, 4, 99), (1, 3, 98)))
    assert values(s) == {1: 10}
    assert res.records.num_rows == 2 and [r["v"] for r in s.stored()] == [10, 99, 98]
    assert res.out_of_order.tolist() == [True, True] and not res.valid.any()
    assert res.invalidated.num_rows == 0 and s.valid[0].tolist() == [True]
    # A later in-order record still wins over the first one.
    s.upsert(rows((1, 5, 12)))
    assert values(s) == {1: 12}


def test_current_records_of_other_keys_are_ignored() -> None:
    s = Store(FULL_SPEC, FULL, current_all_keys=True)
    s.upsert(rows((1, 5, 10), (2, 5, 20), (3, 5, 30)))
    res = s.upsert(rows((2, 6, 21)))
    assert values(s) == {1: 10, 2: 21, 3: 30}
    assert res.invalidated.to_pylist() == [{SEGMENT: 0, ROW: 1}]


def test_multi_column_key_and_string_comparison() -> None:
    schema = pa.schema(
        [nn("a", pa.string()), nn("b", pa.int32()), nn("c", pa.string()), pa.field("v", pa.int64())]
    )
    spec = UpsertSpec.parse(schema, None, ["a", "b"], comparison_column="c")
    s = Store(spec, schema, current_all_keys=True)
    s.upsert([{"a": "x", "b": 1, "c": "m", "v": 1}, {"a": "x", "b": 2, "c": "m", "v": 2}])
    s.upsert(
        [
            {"a": "x", "b": 1, "c": "l", "v": 3},  # older: out of order
            {"a": "x", "b": 2, "c": "n", "v": 4},
            {"a": "y", "b": 1, "c": "a", "v": 5},
        ]
    )
    assert {k: r["v"] for k, r in s.visible().items()} == {("x", 1): 1, ("x", 2): 4, ("y", 1): 5}


def test_timestamp_comparison_and_empty_input() -> None:
    schema = pa.schema([nn("id", pa.string()), nn("t", pa.timestamp("us", "UTC"))])
    spec = UpsertSpec.parse(schema, "t", "id")
    s = Store(spec, schema)
    res = s.upsert(pa.Table.from_pylist([], schema))
    assert res.records.num_rows == 0 and res.valid.tolist() == []
    s.upsert(pa.table({"id": ["a", "a"], "t": pa.array([2, 1], pa.timestamp("us", "UTC"))}))
    assert s.index == {("a",): (1, 0)}


def test_chunked_input_resolves_like_one_chunk() -> None:
    batch = pa.Table.from_pylist(rows((1, 5, 1), (2, 5, 2), (1, 6, 3), (2, 4, 4), (1, 6, 5)), FULL)
    chunked = pa.concat_tables([batch.slice(0, 2), batch.slice(2, 1), batch.slice(3)])
    for spec in (FULL_SPEC, UpsertSpec.parse(FULL, "ts", "id", partial_upsert={"v": "MAX"})):
        one, many = Store(spec, FULL), Store(spec, FULL)
        for s, b in ((one, batch), (many, chunked)):
            s.upsert(pa.Table.from_pylist(rows((1, 5, 9), (2, 9, 9)), FULL))
            s.upsert(b)
        assert many.visible() == one.visible() and many.stored() == one.stored()
        assert values(one) == ({1: 5, 2: 9} if not spec.is_partial else {1: 9, 2: 9})


# --- deletes ---------------------------------------------------------------------------

DEL = pa.schema(
    [
        nn("id", pa.int64()),
        nn("ts", pa.int64()),
        pa.field("del", pa.bool_()),
        pa.field("v", pa.int64()),
    ]
)
DEL_SPEC = UpsertSpec.parse(DEL, "ts", "id", delete_column="del")


def drows(*quads: tuple[int, int, bool | None, int | None]) -> list[Row]:
    return [{"id": i, "ts": t, "del": d, "v": v} for i, t, d, v in quads]


def test_a_delete_wins_and_hides_its_key_and_is_valid_but_not_queryable() -> None:
    s = Store(DEL_SPEC, DEL)
    s.upsert(drows((1, 5, False, 10), (2, 5, None, 20)))
    res = s.upsert(drows((1, 6, True, None)))
    assert values(s) == {2: 20}
    assert res.valid.tolist() == [True] and res.queryable.tolist() == [False]
    assert res.invalidated.to_pylist() == [{SEGMENT: 0, ROW: 0}]
    assert s.index[(1,)] == (1, 0)  # the tombstone is the key's latest record


def test_a_delete_of_a_new_key_and_a_delete_tie() -> None:
    s = Store(DEL_SPEC, DEL)
    res = s.upsert(drows((1, 5, True, None), (2, 5, False, 20), (2, 5, True, None)))
    assert values(s) == {}
    assert res.valid.tolist() == [True, False, True] and not res.queryable.any()


def test_a_later_record_revives_a_deleted_key() -> None:
    s = Store(DEL_SPEC, DEL)
    s.upsert(drows((1, 5, False, 10)))
    s.upsert(drows((1, 6, True, None)))
    res = s.upsert(drows((1, 6, False, 12)))  # a tie with the tombstone: the later wins
    assert values(s) == {1: 12}
    assert res.invalidated.to_pylist() == [{SEGMENT: 1, ROW: 0}]


def test_an_older_delete_is_just_out_of_order() -> None:
    s = Store(DEL_SPEC, DEL)
    s.upsert(drows((1, 5, False, 10)))
    res = s.upsert(drows((1, 4, True, None)))
    assert values(s) == {1: 10}
    assert res.out_of_order.tolist() == [True] and not res.valid.any()


def test_an_older_record_does_not_revive_a_deleted_key() -> None:
    s = Store(DEL_SPEC, DEL)
    s.upsert(drows((1, 5, False, 10), (1, 6, True, None)))
    s.upsert(drows((1, 5, False, 11)))
    assert values(s) == {}


# --- partial upserts ------------------------------------------------------------------

PARTIAL = pa.schema(
    [
        nn("id", pa.int64()),
        nn("ts", pa.int64()),
        pa.field("del", pa.bool_()),
        pa.field("ow", pa.int64()),
        pa.field("fo", pa.int64()),
        pa.field("ig", pa.int64()),
        pa.field("inc", pa.int64()),
        pa.field("mx", pa.string()),
        pa.field("mn", pa.float64()),
        pa.field("ap", pa.list_(pa.int64())),
        pa.field("un", pa.large_list(pa.string())),
    ]
)
STRATEGY_OF = {
    "fo": "FORCE_OVERWRITE",
    "ig": "IGNORE",
    "inc": "INCREMENT",
    "mx": "MAX",
    "mn": "MIN",
    "ap": "APPEND",
    "un": "UNION",
}  # "ow" and "del" take the default, OVERWRITE
PARTIAL_SPEC = UpsertSpec.parse(
    PARTIAL, "ts", "id", delete_column="del", partial_upsert=STRATEGY_OF
)

#: column, previous, new, merged -- Pinot's PartialUpsertHandlerTest pattern for each
#: strategy: previous null, new null, both null, both present.
MERGE_CASES: list[tuple[str, Any, Any, Any]] = [
    ("ow", None, 8, 8),
    ("ow", 8, None, 8),
    ("ow", None, None, None),
    ("ow", 3, 5, 5),
    ("fo", None, 8, 8),
    ("fo", 8, None, None),
    ("fo", None, None, None),
    ("fo", 3, 5, 5),
    ("ig", None, 8, 8),
    ("ig", 8, None, 8),
    ("ig", None, None, None),
    ("ig", 3, 5, 3),
    ("inc", None, 8, 8),
    ("inc", 8, None, 8),
    ("inc", None, None, None),
    ("inc", 3, 5, 8),
    ("mx", None, "b", "b"),
    ("mx", "b", None, "b"),
    ("mx", None, None, None),
    ("mx", "b", "a", "b"),
    ("mx", "a", "b", "b"),
    ("mn", None, 2.5, 2.5),
    ("mn", 2.5, None, 2.5),
    ("mn", None, None, None),
    ("mn", 2.5, 1.5, 1.5),
    ("mn", 1.5, 2.5, 1.5),
    ("ap", None, [2, 1], [2, 1]),
    ("ap", [2, 1], None, [2, 1]),
    ("ap", None, None, None),
    ("ap", [3, 1], [1, 2], [3, 1, 1, 2]),
    ("ap", [], [1], [1]),
    ("un", None, ["b", "a", "b"], ["b", "a", "b"]),  # a null side takes the other as is
    ("un", ["b", "a", "b"], None, ["b", "a", "b"]),
    ("un", None, None, None),
    ("un", ["c", "a"], ["b", "a"], ["a", "b", "c"]),
    ("un", [], ["b", "b"], ["b"]),
    # the delete column is never merged: each record's flag is its own (null: not deleted)
    ("del", None, False, False),
    ("del", False, None, None),
]


def prow(i: int, ts: int, **cols: Any) -> Row:
    return {"id": i, "ts": ts, **cols}


@pytest.mark.parametrize(("col", "prev", "new", "merged"), MERGE_CASES)
def test_partial_strategy_with_nulls(col: str, prev: Any, new: Any, merged: Any) -> None:
    s = Store(PARTIAL_SPEC, PARTIAL)
    s.upsert([prow(1, 1, **{col: prev})])
    res = s.upsert([prow(1, 2, **{col: new})])
    assert s.visible()[(1,)][col] == merged
    assert res.records.to_pylist()[0][col] == merged  # the merged record is what is stored


def test_partial_key_and_comparison_columns_are_never_merged() -> None:
    spec = UpsertSpec.parse(PARTIAL, "ts", "id", partial_upsert={"*": "IGNORE"})
    s = Store(spec, PARTIAL)
    s.upsert([prow(1, 1, ow=1)])
    s.upsert([prow(1, 2, ow=2)])
    assert s.visible()[(1,)] == prow(1, 2, ow=1) | {c: None for c in [*STRATEGY_OF, "del"]}


def test_partial_records_of_one_key_in_one_input_fold_in_order() -> None:
    s = Store(PARTIAL_SPEC, PARTIAL)
    s.upsert([prow(1, 1, inc=1, ap=[1])])
    res = s.upsert(
        [
            prow(1, 2, inc=10, ap=[2]),
            prow(1, 1, inc=100, ap=[3]),  # out of order: stored as it came, not merged
            prow(1, 3, inc=1000, ap=[4]),
            prow(2, 3, inc=5),
        ]
    )
    stored = res.records.to_pylist()
    assert [r["inc"] for r in stored] == [11, 100, 1011, 5]
    assert [r["ap"] for r in stored] == [[1, 2], [3], [1, 2, 4], None]
    assert res.valid.tolist() == [False, False, True, True]
    assert s.visible()[(1,)]["inc"] == 1011


def test_partial_a_delete_is_stored_whole_and_a_revived_key_is_taken_whole() -> None:
    s = Store(PARTIAL_SPEC, PARTIAL)
    s.upsert([prow(1, 1, inc=5, ig=7, ap=[1])])
    res = s.upsert([prow(1, 2, **{"del": True, "inc": 1})])
    assert res.records.to_pylist()[0]["inc"] == 1 and res.records.to_pylist()[0]["ig"] is None
    assert s.visible() == {}
    s.upsert([prow(1, 3, inc=2)])
    assert s.visible()[(1,)] == prow(1, 3, inc=2) | {
        c: None for c in ("del", "ow", "fo", "ig", "mx", "mn", "ap", "un")
    }
    # ... and so is a record after a delete inside one input.
    res = s.upsert([prow(1, 4, inc=3), prow(1, 5, **{"del": True}), prow(1, 6, inc=4)])
    assert [r["inc"] for r in res.records.to_pylist()] == [5, None, 4]


def test_partial_increment_wraps_around_like_java() -> None:
    schema = pa.schema([nn("id", pa.int8()), nn("ts", pa.int8()), pa.field("n", pa.int8())])
    spec = UpsertSpec.parse(schema, "ts", "id", partial_upsert={"n": "INCREMENT"})
    s = Store(spec, schema)
    s.upsert([{"id": 1, "ts": 1, "n": 127}])
    s.upsert([{"id": 1, "ts": 2, "n": 1}])
    assert s.visible()[(1,)]["n"] == -128


# --- the seed's example and concurrency -------------------------------------------------


def test_seed_account_balance_example() -> None:
    schema = pa.schema(
        [nn("UserId", pa.string()), nn("ts", pa.int64()), pa.field("AccountBalance", pa.int64())]
    )
    spec = UpsertSpec.parse(schema, "ts", "UserId")
    s = Store(spec, schema)

    def averages() -> tuple[float, float]:
        latest = [r["AccountBalance"] for r in s.visible().values()]
        every = [r["AccountBalance"] for r in s.stored()]
        return sum(latest) / len(latest), sum(every) / len(every)

    s.upsert(
        [
            {"UserId": "abc-12", "ts": 1, "AccountBalance": 100},
            {"UserId": "abc-13", "ts": 1, "AccountBalance": 102},
        ]
    )
    assert averages() == (101, 101)
    s.upsert([{"UserId": "abc-12", "ts": 2, "AccountBalance": 200}])
    assert s.visible()[("abc-12",)]["AccountBalance"] == 200
    assert averages() == (151, 134)
    s.upsert([{"UserId": "abc-13", "ts": 2, "AccountBalance": 300}])
    assert averages() == (250, 175.5)


@pytest.mark.parametrize(
    "spec",
    [
        DEL_SPEC,
        UpsertSpec.parse(DEL, "ts", "id", delete_column="del", partial_upsert={"v": "INCREMENT"}),
    ],
    ids=["full", "partial"],
)
def test_commit_order_decides_not_write_order(spec: UpsertSpec) -> None:
    """Two writers resolve their inputs while writing; the catalog applies them at
    publish in completion order. The result is that of the later one's rows following
    the earlier one's, whichever input was written first."""
    a = pa.Table.from_pylist(drows((1, 5, False, 1), (2, 5, False, 2), (3, 4, True, None)), DEL)
    b = pa.Table.from_pylist(drows((1, 5, False, 10), (2, 4, False, 20), (3, 4, False, 30)), DEL)
    ra, rb = resolve_batch(a, spec), resolve_batch(b, spec)  # both written before either commits
    for first, second, joined in (
        (ra, rb, pa.concat_tables([a, b])),
        (rb, ra, pa.concat_tables([b, a])),
    ):
        s = Store(spec, DEL)
        for br in (first, second):
            s.apply(resolve_against(s.current(br.batch), br, spec, len(s.segments) + 1))
        one = Store(spec, DEL)
        one.upsert(joined)
        assert s.visible() == one.visible()
        assert s.stored() == one.stored()
    s = Store(spec, DEL)
    s.upsert(a)
    s.upsert(b)
    assert values(s) == {1: 10 if not spec.is_partial else 11, 2: 2, 3: 30}


# --- bad input ---------------------------------------------------------------------------


def test_bad_inputs_raise_typed_errors() -> None:
    with pytest.raises(UpsertError, match="'id' holds 1 null"):
        resolve_batch(pa.table({"id": [1, None], "ts": [1, 2]}), FULL_SPEC)
    with pytest.raises(UpsertError, match="the input has no column 'id'"):
        resolve_batch(pa.table({"ts": [1]}), FULL_SPEC)
    with pytest.raises(UpsertError, match="comparison column 'ts' holds 1 null"):
        resolve_batch(pa.table({"id": [1], "ts": pa.array([None], pa.int64())}), FULL_SPEC)
    spec = UpsertSpec.parse(pa.schema([nn("id", pa.int64()), nn("f", pa.float64())]), "f", "id")
    with pytest.raises(UpsertError, match="NaN"):
        resolve_batch(pa.table({"id": [1], "f": [float("nan")]}), spec)


def test_bad_current_raises_typed_errors() -> None:
    br = resolve_batch(pa.Table.from_pylist(rows((1, 5, 1)), FULL), FULL_SPEC)
    cur = pa.table({"id": [1, 1], "ts": [1, 2], SEGMENT: [0, 0], ROW: [0, 1], SEQ: [1, 1]})
    with pytest.raises(UpsertError, match="hold one key twice"):
        resolve_against(cur, br, FULL_SPEC)
    with pytest.raises(UpsertError, match="not before the incoming commit 1"):
        resolve_against(cur, br, FULL_SPEC, seq=1)
    with pytest.raises(UpsertError, match="current has no column '\\$row'"):
        resolve_against(cur.drop_columns([ROW]), br, FULL_SPEC)
    with pytest.raises(UpsertError, match="do not match the input's types"):
        resolve_against(cur.set_column(1, "ts", pa.array(["x", "y"])), br, FULL_SPEC)
    pbr = resolve_batch(pa.Table.from_pylist([prow(1, 1)], PARTIAL), PARTIAL_SPEC)
    with pytest.raises(UpsertError, match="current has no column 'ow'"):
        resolve_against(cur, pbr, PARTIAL_SPEC)
    assert resolve_against(None, pbr, PARTIAL_SPEC).valid.tolist() == [True]
    for bad in (np.array([0, 1]), np.array([2])):  # two keys for one; a row current lacks
        with pytest.raises(UpsertError, match="match must give one row of current"):
            resolve_against(cur.slice(0, 1), br, FULL_SPEC, match=bad)


# --- the oracle ---------------------------------------------------------------------------

ORACLE = pa.schema(
    [
        nn("k", pa.int64()),
        nn("k2", pa.string()),
        nn("ts", pa.int64()),
        pa.field("del", pa.bool_()),
        pa.field("a", pa.int64()),
        pa.field("b", pa.int64()),
        pa.field("c", pa.int64()),
        pa.field("l", pa.list_(pa.int64())),
        pa.field("m", pa.list_(pa.int64())),
    ]
)
SCALAR_STRATEGIES = ["OVERWRITE", "FORCE_OVERWRITE", "IGNORE", "INCREMENT", "MAX", "MIN"]
LIST_STRATEGIES = ["OVERWRITE", "FORCE_OVERWRITE", "IGNORE", "APPEND", "UNION"]


def model_merge(strategy: Strategy, prev: Any, new: Any) -> Any:
    """Pinot's partial-upsert merge of one value, written plainly."""
    if strategy is Strategy.FORCE_OVERWRITE:
        return new
    if strategy is Strategy.OVERWRITE:
        return prev if new is None else new
    if prev is None:
        return new
    if new is None:
        return prev
    return {
        Strategy.IGNORE: lambda: prev,
        Strategy.INCREMENT: lambda: prev + new,
        Strategy.MAX: lambda: max(prev, new),
        Strategy.MIN: lambda: min(prev, new),
        Strategy.APPEND: lambda: prev + new,
        Strategy.UNION: lambda: sorted(set(prev) | set(new)),
    }[strategy]()


class Model:
    """The rules record by record: key -> (latest record, is a tombstone)."""

    def __init__(self, spec: UpsertSpec):
        self.spec = spec
        self.latest: dict[tuple[Any, ...], tuple[Row, bool]] = {}

    def apply(self, rows: list[Row]) -> tuple[list[Row], list[bool]]:
        """The rows as stored and which of them were out of order."""
        spec, stored, late = self.spec, [], []
        for row in rows:
            key = tuple(row[c] for c in spec.primary_key)
            cur = self.latest.get(key)
            if cur is not None and row[spec.comparison_column] < cur[0][spec.comparison_column]:
                stored.append(row)
                late.append(True)
                continue
            deleted = bool(spec.delete_column and row[spec.delete_column])
            rec = dict(row)
            if spec.is_partial and cur is not None and not cur[1] and not deleted:
                for col, s in ((c, spec.strategy(c)) for c in row):
                    if s is not None:
                        rec[col] = model_merge(s, cur[0][col], row[col])
            self.latest[key] = (rec, deleted)
            stored.append(rec)
            late.append(False)
        return stored, late

    def visible(self) -> dict[tuple[Any, ...], Row]:
        return {k: rec for k, (rec, deleted) in self.latest.items() if not deleted}


small = st.integers(-3, 3)
oracle_row = st.fixed_dictionaries(
    {
        "k": st.integers(0, 2),
        "k2": st.sampled_from(["x", "y"]),
        "ts": st.integers(0, 4),
        "del": st.sampled_from([None, False, False, True]),
        "a": st.none() | small,
        "b": st.none() | small,
        "c": st.none() | small,
        "l": st.none() | st.lists(small, max_size=3),
        "m": st.none() | st.lists(small, max_size=3),
    }
)


@st.composite
def oracle_specs(draw: st.DrawFn) -> UpsertSpec:
    keys = draw(st.sampled_from([["k"], ["k", "k2"]]))
    delete = draw(st.sampled_from([None, "del"]))
    if draw(st.booleans()):
        return UpsertSpec.parse(ORACLE, "ts", keys, delete_column=delete)
    partial = {
        "*": draw(st.sampled_from(["OVERWRITE", "IGNORE", "FORCE_OVERWRITE"])),
        **{c: draw(st.sampled_from(SCALAR_STRATEGIES)) for c in ("a", "b")},
        "l": draw(st.sampled_from(LIST_STRATEGIES)),
        "m": draw(st.sampled_from(LIST_STRATEGIES)),
    }
    return UpsertSpec.parse(ORACLE, "ts", keys, delete_column=delete, partial_upsert=partial)


@settings(max_examples=250, deadline=None)
@given(
    spec=oracle_specs(),
    batches=st.lists(st.lists(oracle_row, max_size=8), min_size=1, max_size=6),
    all_keys=st.booleans(),
)
def test_oracle_matches_record_by_record_model(
    spec: UpsertSpec, batches: list[list[Row]], all_keys: bool
) -> None:
    store, model = Store(spec, ORACLE, current_all_keys=all_keys), Model(spec)
    for batch in batches:
        res = store.upsert(batch)
        stored, late = model.apply(batch)
        assert res.records.to_pylist() == stored
        assert res.out_of_order.tolist() == late
        assert store.visible() == model.visible()


def test_a_rewrite_shows_exactly_the_copies_of_records_still_latest() -> None:
    """A major compaction's copies: a copy shows when its key's latest record is still
    the one it copies, whatever the comparison values; a tombstone's copy stays valid
    but hidden; nothing is invalidated (the copied files go)."""
    batch = pa.table(
        {"id": [1, 2, 3], "ts": [5, 5, 5], "del": [False, False, True]},
        schema=pa.schema([nn("id", pa.int64()), ("ts", pa.int64()), ("del", pa.bool_())]),
    )
    res = resolve_batch(batch, DEL_SPEC)
    still = np.zeros(res.num_keys, bool)  # per key id: rows 0 and 2's keys still latest
    still[res.group] = [True, False, True]
    out = resolve_rewrite(res, still)
    assert out.valid.tolist() == [True, False, True]
    assert out.queryable.tolist() == [True, False, False]
    assert out.out_of_order.tolist() == [False, True, False]
    assert out.invalidated.num_rows == 0
    with pytest.raises(UpsertError, match="one flag per key"):
        resolve_rewrite(res, np.array([True]))
