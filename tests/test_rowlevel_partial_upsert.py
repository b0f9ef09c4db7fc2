"""Row-level updates and merges of a partial-upsert table: their records are computed
whole from the ones they read (``SET n = n * 10``), so they are stored as computed,
not merged column by column again with the records they came from (an INCREMENT
column would count twice, an IGNORE column would keep its old value). A commit that
published after the change read its records makes it read them again."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina import failpoints
from tests.test_rowlevel_conflicts import once
from tests.test_upsert_partial import make, upsert, visible

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")

STRATEGIES = {"n": "INCREMENT", "tag": "IGNORE", "note": "OVERWRITE"}
COLUMNS = [("n", pa.int64()), ("tag", pa.string()), ("note", pa.string())]


def counters(cat: lamina.Catalog) -> tuple[lamina.Table, pa.Schema]:
    """Keys a, b, c: n is counted up, tag kept from the first record, note overwritten."""
    t, schema = make(cat, COLUMNS, STRATEGIES)
    for key, n in (("a", 1), ("b", 2), ("c", 3)):
        upsert(t, schema, {"key": key, "ts": 0, "n": n, "tag": "first", "note": "x"})
    upsert(t, schema, {"key": "a", "ts": 1, "n": 10, "tag": "second", "note": "y"})
    return t, schema


def state(t: lamina.Table) -> dict[str, tuple[Any, ...]]:
    return {r["key"]: (r["n"], r["tag"], r["note"]) for r in visible(t)}


def test_an_update_of_a_partial_upsert_table_stores_the_records_it_computed(
    local_cat: lamina.Catalog,
) -> None:
    t, _ = counters(local_cat)
    assert state(t) == {"a": (11, "first", "y"), "b": (2, "first", "x"), "c": (3, "first", "x")}
    done = t.update("key IN ('a', 'b')", set={"n": "n * 10", "tag": "'set'"})
    assert done is not None and done.action == "UPSERT"
    assert done.metadata["row_change"]["updated"] == 2
    assert state(t) == {"a": (110, "set", "y"), "b": (20, "set", "x"), "c": (3, "first", "x")}


def test_upserts_after_an_update_of_a_partial_upsert_table_merge_with_its_records(
    local_cat: lamina.Catalog,
) -> None:
    t, schema = counters(local_cat)
    t.update("key = 'b'", set={"n": "0", "tag": "'reset'"})
    upsert(t, schema, {"key": "b", "ts": 5, "n": 4, "tag": "later", "note": None})
    assert state(t)["b"] == (4, "reset", "x")


def test_a_merge_into_a_partial_upsert_table_stores_what_its_clauses_computed(
    local_cat: lamina.Catalog,
) -> None:
    t, schema = counters(local_cat)
    source = pa.Table.from_pylist(
        [
            {"key": "a", "ts": None, "n": 5, "tag": "src", "note": "m"},
            {"key": "z", "ts": None, "n": 7, "tag": "src", "note": "new"},
        ],
        schema=pa.schema([(f.name, f.type) for f in schema if f.name != "deleted"]),
    )
    source = source.set_column(1, "ts", t.to_arrow().column("ts").take([0, 0]))
    done = (
        t.merge(source, on=["key"])
        .when_matched_update(set={"n": "target.n + source.n", "tag": "source.tag"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert done is not None
    got = state(t)
    assert got["a"] == (16, "src", "y")  # 11 + 5 once, not 11 + 16
    assert got["z"] == (7, "src", "new")
    assert got["b"] == (2, "first", "x") and got["c"] == (3, "first", "x")


@pytest.mark.parametrize(
    ("other_key", "want"),
    [
        # the upsert published first (2 + 5), the update read it again: (2 + 5) * 10
        ("b", {"a": (11, "first", "y"), "b": (70, "first", "z"), "c": (3, "first", "x")}),
        # another key: the update's records still stand, it publishes once
        ("c", {"a": (11, "first", "y"), "b": (20, "first", "x"), "c": (8, "first", "z")}),
    ],
    ids=["same-key", "other-key"],
)
def test_an_update_beside_a_concurrent_upsert_reads_again_only_when_its_key_changed(
    cat: lamina.Catalog, other_key: str, want: dict[str, tuple[Any, ...]]
) -> None:
    t, schema = counters(cat)
    other = cat.load_table("p")
    race = once(lambda: upsert(other, schema, {"key": other_key, "ts": 2, "n": 5, "note": "z"}))
    with failpoints.armed("write.publish.before", race):
        done = t.update("key = 'b'", set={"n": "n * 10"})
    assert done is not None
    assert state(t) == want
    assert [c.action for c in t.history()][-2:] == ["UPSERT", "UPSERT"]
