"""Transactions on upsert tables: every operation's records resolved by key as one
upsert when the transaction commits, SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.errors import TransactionError, UpsertError
from tests.test_upsert import (
    PSCHEMA,
    SCHEMA,
    STRATEGIES,
    _same_after_rebuild,
    latest,
    prow,
    pstate,
    rows,
)

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")

DAY = 24 * 60


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )


def test_a_transaction_is_one_upsert_of_all_its_operations(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """An overwrite of day 1, upserts into days 2 and 3 and a deleted segment publish as
    one commit; the answer equals the same writes made one by one, the deletion and
    the overwrite first (the records are upserted against what remains)."""
    seq = cat.create_table(
        "s", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )
    first = rows(("a", 1, 1), ("b", 1, 1), ("c", DAY + 1, 1), ("d", 2 * DAY + 1, 1))
    for table in (t, seq):
        table.upsert(first)
        table.upsert(rows(("e", 3 * DAY, 1)))
    day3 = [
        next(
            s.id for s in table.segments() if s.interval.start == table.segments()[2].interval.start
        )
        for table in (t, seq)
    ]
    over = rows(("b", 2, 10), ("c", 3, 10))  # day 1: a's record goes, c's is out of order
    ups = [rows(("c", DAY + 2, 20), ("d", 2 * DAY, 0)), rows(("b", DAY, 30), ("a", DAY, 30, True))]
    before = len(t.history())
    with t.transaction() as tx:
        tx.overwrite(over, ("2024-01-01", "2024-01-02"))
        tx.upsert(ups[0])  # c: newer on day 2; d: older than its record on day 3, which
        tx.append(ups[1])  # goes below; b newer still; a deleted
        tx.delete_segments([day3[0]])
        assert latest(t) == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}  # nothing shows yet
    seq.delete_segments([day3[1]])
    seq.overwrite(over, ("2024-01-01", "2024-01-02"))
    for data in ups:
        seq.upsert(data)
    assert len(t.history()) == before + 1
    assert latest(t) == latest(seq) == {"b": 30, "c": 20, "d": 0, "e": 1}
    got = cat.sql("SELECT key, value FROM u ORDER BY key").to_pylist()
    assert got == [{"key": k, "value": v} for k, v in sorted(latest(seq).items())]
    _same_after_rebuild(t)
    t.upsert(rows(("c", DAY + 2, 21)))  # a tie with the transaction's record: later wins
    assert latest(t)["c"] == 21


def test_a_later_operation_wins_a_tie_and_an_older_record_never_replaces(
    t: lamina.Table,
) -> None:
    t.upsert(rows(("a", 5, 1), ("b", 5, 1)))
    with t.transaction() as tx:
        tx.upsert(rows(("a", 5, 2), ("b", 4, 2)))  # a: a tie with the table's (later wins)
        tx.upsert(rows(("a", 5, 3)))  # a tie within the transaction: the later operation
    assert latest(t) == {"a": 3, "b": 1}
    assert tx.commit_result is not None and tx.commit_result.action == "UPSERT"  # as t.upsert
    versions = t.to_arrow(all_versions=True)
    assert versions.num_rows == 5  # every record is stored, superseded ones too
    _same_after_rebuild(t)


def test_bad_records_are_refused_at_the_operation_and_nothing_is_published(
    t: lamina.Table,
) -> None:
    t.upsert(rows(("a", 1, 1)))
    nulls = rows(("x", 1, 1), ("y", 1, 2)).set_column(
        0, pa.field("key", pa.string()), pa.array(["x", None])
    )
    with t.transaction() as tx:
        with pytest.raises((UpsertError, lamina.SchemaError)):
            tx.upsert(nulls)
        tx.upsert(rows(("b", 1, 2)))  # the transaction goes on
    assert latest(t) == {"a": 1, "b": 2}
    with pytest.raises(RuntimeError), t.transaction() as tx:
        tx.upsert(rows(("a", 9, 9)))
        raise RuntimeError("the caller fails")
    with t.transaction() as tx:
        tx.upsert(rows(("a", 9, 9)))
        tx.abort()
    assert latest(t) == {"a": 1, "b": 2}
    with t.transaction() as tx:
        tx.overwrite(rows(("a", DAY + 1, 5)), ("2024-01-02", "2024-01-03"))
        with pytest.raises(TransactionError, match="overwrites"):
            tx.upsert(rows(("c", DAY + 2, 5)))  # a chunk the transaction overwrites
    assert latest(t) == {"a": 5, "b": 2}
    _same_after_rebuild(t)


def test_exactly_once_transactions(t: lamina.Table) -> None:
    with t.transaction(txn=("app", 1)) as tx:
        tx.upsert(rows(("a", 1, 1)))
    with t.transaction(txn=("app", 1)) as tx:  # a replay: skipped
        tx.upsert(rows(("a", 2, 2)))
    assert latest(t) == {"a": 1}
    with t.transaction(txn=("app", 0)) as tx:  # older than the applied version too
        tx.upsert(rows(("a", 3, 3)))
    assert latest(t) == {"a": 1}
    assert [c.state for c in t.history()].count("COMPLETED") == 1
    with t.transaction(txn=("app", 2)) as tx:
        tx.upsert(rows(("a", 3, 3)))
    assert latest(t) == {"a": 3}


def _upsert_elsewhere(catalog_url: str, wh: str, data: dict[str, list[Any]]) -> None:
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.load_table("u").upsert(pa.table(data, schema=SCHEMA))


def test_an_upsert_published_while_a_transaction_is_open_is_resolved_against(
    t: lamina.Table, catalog_url: str, tmp_path: Path
) -> None:
    """Another process upserts the same keys after the transaction opened: both
    succeed; per key the greater comparison value wins, then the later commit."""
    t.upsert(rows(("a", 1, 1), ("b", 1, 1), ("c", 1, 1)))
    with t.transaction() as tx:
        tx.upsert(rows(("a", 5, 2), ("b", 5, 2)))
        other = rows(("a", 6, 3), ("b", 5, 3), ("c", 5, 3)).to_pydict()
        p = mp.get_context("spawn").Process(
            target=_upsert_elsewhere, args=(catalog_url, str(tmp_path / "wh"), other)
        )
        p.start()
        p.join(60)
        assert p.exitcode == 0
    # a: the other's is newer; b: a tie, the transaction committed later; c: the other's
    assert latest(t) == {"a": 3, "b": 2, "c": 3}
    _same_after_rebuild(t)


def precs(*rs: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(list(rs), schema=PSCHEMA)


def test_a_partial_upsert_transaction_merges_as_its_writes_made_one_by_one(
    cat: lamina.Catalog, pt: lamina.Table
) -> None:
    """Deletion and overwrite first, then every operation's records merged in order
    with what remains: the same records as the writes made one by one."""
    seq = cat.create_table(
        "s", PSCHEMA, time_column="ts", primary_key="key", delete_column="deleted",
        partial_upsert=STRATEGIES,
    )  # fmt: skip
    for table in (pt, seq):
        table.upsert(precs(prow("a", 1, clicks=1, tags=["x"]), prow("b", 1, clicks=1)))
        table.upsert(precs(prow("a", DAY + 1, clicks=2, name="n"), prow("c", DAY, clicks=5)))
        table.upsert(precs(prow("d", 2 * DAY, clicks=7)))
    day3 = [
        next(
            s.id
            for s in t.segments()
            if s.interval == sorted({x.interval for x in t.segments()})[2]
        )
        for t in (pt, seq)
    ]
    over = precs(prow("b", 2, clicks=10), prow("e", 3, clicks=1))  # day 1: a and b go
    ups = [
        precs(prow("a", DAY + 2, clicks=1, tags=["y"]), prow("d", 2 * DAY + 1, clicks=1)),
        precs(prow("a", DAY + 3, clicks=1), prow("c", DAY + 1, deleted=True)),
    ]
    with pt.transaction() as tx:
        tx.overwrite(over, ("2024-01-01", "2024-01-02"))
        tx.upsert(ups[0])  # a merges with its day-2 record; d's goes below: taken whole
        tx.append(ups[1])  # a again; c deleted
        tx.delete_segments([day3[0]])
        assert pstate(pt)["a"]["clicks"] == 3  # nothing shows yet
    seq.delete_segments([day3[1]])
    seq.overwrite(over, ("2024-01-01", "2024-01-02"))
    for data in ups:
        seq.upsert(data)
    assert pstate(pt) == pstate(seq)
    assert pstate(pt)["a"] == {
        "clicks": 5,
        "tags": ["x", "y"],
        "best": None,
        "name": "n",
        "first": None,
    }  # its day-2 record (3, ["x"]) stays: +1, +1
    assert {k: v["clicks"] for k, v in pstate(pt).items()} == {"a": 5, "b": 10, "d": 1, "e": 1}
    _same_after_rebuild(pt)


def test_a_key_changed_before_the_publish_is_merged_again(
    pt: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upsert of a held key publishes between the transaction's merge and its
    publish: the publish refuses (retryable), the transaction merges again and counts
    both increments."""
    from lamina import failpoints

    pt.upsert(precs(prow("hot", 1, clicks=1)))
    calls: list[int] = []

    def merged_then_upsert() -> None:
        calls.append(1)
        if len(calls) == 1:
            pt.upsert(precs(prow("hot", 1, clicks=10)))

    with failpoints.armed("transaction.merged", merged_then_upsert), pt.transaction() as tx:
        tx.upsert(precs(prow("hot", 1, clicks=100), prow("new", 1, clicks=1)))
    assert len(calls) == 2
    assert {k: v["clicks"] for k, v in pstate(pt).items()} == {"hot": 111, "new": 1}
    assert [c.state for c in pt.history()].count("COMPLETED") == 3
    _same_after_rebuild(pt)


def test_upsert_in_a_transaction_needs_a_primary_key(cat: lamina.Catalog) -> None:
    plain = cat.create_table("plain", SCHEMA, time_column="ts")
    with plain.transaction() as tx:
        with pytest.raises(UpsertError, match="no primary key"):
            tx.upsert(rows(("a", 1, 1)))
        tx.append(rows(("a", 1, 1)))
    assert plain.count() == 1


def _parquet_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


@pytest.mark.parametrize("upsert", [True, False])
def test_an_operation_refused_after_it_wrote_leaves_no_files(
    cat: lamina.Catalog, tmp_path: Path, upsert: bool
) -> None:
    """An operation the transaction refuses once its files are written (outside the
    transaction's lock: LockError; a chunk it also overwrites: TransactionError) was
    not added, and its files are removed at once, not left for orphan cleaning."""
    kwargs: dict[str, Any] = {"primary_key": "key", "delete_column": "deleted"} if upsert else {}
    t = cat.create_table("w", SCHEMA, time_column="ts", **kwargs)
    t.append(rows(("a", 1, 1), ("b", DAY + 1, 1)))
    root = tmp_path / "wh"
    before = _parquet_under(root)
    with t.transaction(lock="REPLACE", interval=("2024-01-01", "2024-01-02"), wait_s=0) as tx:
        with pytest.raises(lamina.LockError, match="outside it"):
            tx.append(rows(("c", 1, 2), ("d", DAY + 2, 2)))  # day 2 lies outside the lock
        assert _parquet_under(root) == before
        tx.overwrite(rows(("a", 2, 3)), ("2024-01-01", "2024-01-02"))
        written = _parquet_under(root)
        with pytest.raises(TransactionError, match="overwrites"):
            tx.append(rows(("e", 3, 4)))  # day 1, which it overwrites
        assert _parquet_under(root) == written
    got = {r["key"]: r["value"] for r in t.to_arrow().to_pylist()}
    assert got == {"a": 3, "b": 1}
    live = {str(Path(str(s.location)).relative_to(root)) for s in t.segments()}
    assert _parquet_under(root) - before == live - before  # the overwrite's file alone
