"""Schema evolution (``t.add_columns``) against writes, compactions and handles that
began before it, and the upsert read paths that read with a snapshot's schema (each
case failed on the first version of the feature)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from tests.helpers import SCHEMA, events
from tests.test_schema_evolution import USCHEMA, C, records, with_c

# -- conflict checks: a commit ALTER among those completed since a write's base -------


@pytest.mark.parametrize("op", ["overwrite", "delete", "txn_append"])
def test_a_write_begun_before_add_columns_publishes_after_it(cat: lamina.Catalog, op: str) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=2, per_day=3))
    ids = [s.id for s in t.segments()]
    txn = ("app", 1) if op == "txn_append" else None
    with t.transaction(txn=txn) as tx:
        if op == "overwrite":
            tx.overwrite(events(days=1, per_day=2, seed=5))
        elif op == "delete":
            tx.delete_segments(ids[:1])
        else:
            tx.append(events(days=1, per_day=2, start="2024-01-05"))
        cat.load_table("e").add_columns(C)  # another handle, meanwhile
    got = cat.load_table("e").to_arrow()
    assert "c" in got.column_names and got.column("c").null_count == got.num_rows


def test_a_minor_compaction_begun_before_add_columns_publishes_after_it(
    cat: lamina.Catalog,
) -> None:
    from lamina import failpoints

    t = cat.create_table("e", SCHEMA, time_column="ts")
    for i in range(3):
        t.append(events(days=1, per_day=2, seed=i))

    def meanwhile(**_: object) -> None:  # the commit is open
        cat.load_table("e").add_columns(C)

    with failpoints.armed("compaction.minor.opened", meanwhile):
        assert t.compact(mode="minor") is not None
    after = cat.load_table("e")
    assert len(after.segments()) == 1 and after.to_arrow().column("c").null_count == 6


# -- partial upserts through a transaction -------------------------------------------


def test_a_stale_handles_partial_upsert_in_a_transaction_keeps_added_values(
    cat: lamina.Catalog,
) -> None:
    p = cat.create_table(
        "p", USCHEMA, time_column="ts", primary_key="id", partial_upsert={"v": "INCREMENT"}
    )
    p.upsert(records([1, 2], 1))
    stale = cat.load_table("p")
    p.add_columns(C)
    p.upsert(records([1], 2, c=[5.0]))
    try:
        with stale.transaction() as tx:  # t.upsert refuses it: merged without c
            tx.upsert(records([1], 3))
    except lamina.errors.SchemaError:
        pass  # refused as t.upsert is: fine
    got = {r["id"]: r["c"] for r in cat.load_table("p").to_arrow().to_pylist()}
    assert got[1] == 5.0


# -- all_versions -----------------------------------------------------------------------


def test_all_versions_as_of_before_the_change_has_the_schema_of_then(
    cat: lamina.Catalog,
) -> None:
    u = cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    c1 = u.upsert(records([1, 2], 1))
    u.add_columns(C)
    u.upsert(records([2], 2, c=[2.0]))
    assert u.to_arrow(as_of=c1.version).schema.names == USCHEMA.names
    every = u.to_arrow(as_of=c1.version, all_versions=True)
    assert every.schema.names == [*USCHEMA.names, "$valid_from", "$valid_until"]


@pytest.mark.parametrize("read", ["all_versions", "read_changes"])
def test_a_stale_handles_upsert_reads_keep_the_added_column(cat: lamina.Catalog, read: str) -> None:
    """A handle loaded before the change reads c in every read: they read with the
    snapshot's schema (all_versions and the upsert change feed read with the handle's,
    and dropped c)."""
    u = cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    u.upsert(records([1, 2], 1))
    stale = cat.load_table("u")
    u.add_columns(C)
    u.upsert(records([2], 2, c=[2.0]))
    assert "c" in stale.to_arrow().column_names  # the latest snapshot's schema
    got = stale.to_arrow(all_versions=True) if read == "all_versions" else stale.read_changes(0)
    assert "c" in got.column_names and 2.0 in got.column("c").to_pylist()


# -- partial upserts merging a column no stored column precedes -----------------------


def test_a_partial_upsert_merges_when_no_stored_file_has_a_merged_column(
    cat: lamina.Catalog,
) -> None:
    """A partial-upsert table whose only merged column is one added: the key index reads
    no column of the old files (``columns=[]``; its nulls were sized by that empty read,
    an IndexError)."""
    import datetime as dt

    schema = pa.schema([("ts", pa.timestamp("us")), pa.field("id", pa.int64(), nullable=False)])
    p = cat.create_table(
        "p", schema, time_column="ts", primary_key="id", partial_upsert={"*": "OVERWRITE"}
    )

    def ts(hour: int) -> pa.Array:
        return pa.array([dt.datetime(2024, 1, 1, hour)] * 2, pa.timestamp("us"))

    p.upsert(pa.table({"ts": ts(1), "id": [1, 2]}))
    p.add_columns(C)
    p.upsert(pa.table({"ts": ts(2), "id": [1, 2], "c": [1.0, None]}))
    got = {r["id"]: r["c"] for r in p.to_arrow().to_pylist()}
    assert got == {1: 1.0, 2: None}


# -- a major compaction whose table was read before a concurrent add_columns ----------


def test_a_major_compaction_racing_add_columns_keeps_the_rows_or_retries(
    cat: lamina.Catalog,
) -> None:
    """compact() reloads the table, then opens its transaction (waiting for its REPLACE
    lock, or in compact_auto: after earlier compactions of the run). An ALTER and an
    append with the new column landing in between: the rows it reads hold c. It must
    keep them, or refuse with a retryable conflict (it raised a SchemaError, which
    compact_auto does not take for a race)."""
    from lamina import failpoints
    from lamina.errors import CommitConflictError

    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=3))

    def racing() -> None:  # the compaction just reloaded the table
        cat.load_table("e").add_columns(C)
        cat.load_table("e").append(with_c(events(days=1, per_day=2, seed=3), [1.0, 2.0]))

    try:
        with failpoints.armed("compaction.reloaded", racing):
            t.compact(mode="major")
    except CommitConflictError as exc:
        assert exc.retryable  # do it again: fine
    got = cat.load_table("e").to_arrow()
    assert got.num_rows == 5 and sorted(got.column("c").to_pylist(), key=str) == [
        1.0,
        2.0,
        None,
        None,
        None,
    ]
