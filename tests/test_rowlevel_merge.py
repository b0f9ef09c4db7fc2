"""``t.merge(source, on=...)``: Delta's MERGE as a builder, one commit. Each row takes
the first clause whose condition holds (only the last of a kind may omit it); a target
row several source rows match is refused, unless the one matched clause is an
unconditional delete; sources come in every form ``t.append`` takes; on an upsert
table a plain merge is an upsert."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import lamina
from lamina.errors import RowLevelError
from tests.test_rowlevel_delete import MODES, keys, plain, upsert_table

DAY = datetime(2024, 1, 2)


def values(t: lamina.Table) -> dict[int, float]:
    got = t.to_arrow()
    return dict(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True))


def source(ks: list[int], vs: list[float]) -> pa.Table:
    return pa.table(
        {"ts": pa.array([DAY] * len(ks), pa.timestamp("us")), "k": ks,
         "region": ["src"] * len(ks), "v": vs}
    )  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_every_clause_kind_in_one_commit(local_cat: lamina.Catalog, mode: str) -> None:
    t = plain(local_cat, mode)
    seq = t.history()[-1].seq
    src = source([1, 2, 3, 40, 41], [100.0, 200.0, 300.0, 400.0, 410.0])
    done = (
        t.merge(src, on="k")
        .when_matched_update(set={"v": "source.v + target.v"}, condition="source.k = 1")
        .when_matched_delete(condition="source.k = 2")
        .when_not_matched_insert_all(condition="source.k = 40")
        .when_not_matched_by_source_delete(condition="target.k >= 28")
        .execute()
    )
    assert done is not None and done.action == "MERGE"
    assert done.metadata["row_change"] == {
        "operation": "MERGE", "on": ["k"], "updated": 1, "deleted": 3, "inserted": 1,
    }  # fmt: skip
    got = values(t)
    assert got[1] == 101.0 and got[3] == 3.0 and got[40] == 400.0  # 3: no clause took it
    assert 2 not in got and 28 not in got and 29 not in got and 41 not in got
    assert len(got) == 30 - 3 + 1
    assert seq is not None
    feed = t.read_changes(seq)
    got_feed = zip(feed.column("_change").to_pylist(), feed.column("k").to_pylist(), strict=True)
    assert sorted(got_feed) == [
        ("delete", 1), ("delete", 2), ("delete", 28), ("delete", 29), ("insert", 1),
        ("insert", 40),
    ]  # fmt: skip


def test_an_update_all_insert_all_merge_sees_only_visible_rows(local_cat: lamina.Catalog) -> None:
    """The common merge joins the source with the files themselves (their key column):
    rows a deletion vector hides never match — a key deleted is inserted again, a key
    updated (its old row hidden, its new one in another file) matches once."""
    t = plain(local_cat, "merge-on-read")
    t.delete("k = 3")
    t.update("k = 5", set={"v": "50.0"})
    done = (
        t.merge(source([3, 5, 7, 99], [3.5, 5.5, 7.5, 99.5]), on="k")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert done is not None
    counts = {k: done.metadata["row_change"][k] for k in ("updated", "deleted", "inserted")}
    assert counts == {"updated": 2, "deleted": 0, "inserted": 2}
    got = t.to_arrow()
    assert sorted(got.column("k").to_pylist()) == sorted([*range(30), 99])
    assert {k: v for k, v in values(t).items() if k in (3, 5, 7, 99)} == {
        3: 3.5, 5: 5.5, 7: 7.5, 99: 99.5,
    }  # fmt: skip
    assert got.filter(pa.compute.equal(got["k"], 7))["region"].to_pylist() == ["src"]


def test_updates_and_merges_into_a_day_split_into_hours(local_cat: lamina.Catalog) -> None:
    """A major compaction cut day 1 into hours: the rows an update or a merge writes
    there go hour by hour, as an append's do (Druid's allocation): the first try, split
    by day, is refused at publish and aborts; the second publishes."""
    t = plain(local_cat, "merge-on-read")
    t.compact(mode="major", segment_granularity="HOUR", interval="2024-01-01/2024-01-02")
    day1 = sorted(k for k in range(30) if k % 3 == 0)
    assert t.update("k % 3 = 0", set={"v": "v + 0.5"}) is not None
    assert [c.state for c in t.history()][-2:] == ["ABORTED", "COMPLETED"]
    on_day1 = source([3, 6, 99], [30.0, 60.0, 990.0])
    on_day1 = on_day1.set_column(
        0, "ts", pa.array([datetime(2024, 1, 1, 5)] * 3, pa.timestamp("us"))
    )
    done = (
        t.merge(on_day1, on="k").when_matched_update_all().when_not_matched_insert_all().execute()
    )
    assert done is not None and [c.state for c in t.history()][-2:] == ["ABORTED", "COMPLETED"]
    got = values(t)
    assert got[3] == 30.0 and got[6] == 60.0 and got[99] == 990.0 and got[9] == 9.5
    assert len(got) == 31 and all(got[k] in (k + 0.5, 30.0, 60.0) for k in day1)
    hours = {s.interval for s in t.segments() if str(s.interval).startswith("2024-01-01")}
    assert all(iv.end - iv.start == 3_600_000_000 for iv in hours)  # no day chunk came back


def test_the_first_clause_whose_condition_holds_wins(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    (
        t.merge(source([4, 5, 6], [0.0, 0.0, 0.0]), on=["k"])
        .when_matched_update(set={"v": "-1"}, condition="target.v > 4")
        .when_matched_update(set={"v": "-2"}, condition="target.v > 3")
        .when_matched_delete()  # the rows no clause before took
        .execute()
    )
    got = values(t)
    assert (got[4], got[5], got[6]) == (-2.0, -1.0, -1.0)
    t.merge(source([1, 2], [0.0, 0.0]), on=["k"]).when_matched_update(
        set={"v": "-3"}, condition="target.v > 1"
    ).when_matched_delete().execute()
    got = values(t)
    assert got[2] == -3.0 and 1 not in got


@pytest.mark.parametrize(
    "make",
    [
        lambda t: pd.DataFrame(t.to_pydict()),
        lambda t: pl.from_arrow(t),
        lambda t: pa.RecordBatchReader.from_batches(t.schema, t.to_batches()),
        lambda t: duckdb.from_arrow(t),
    ],
    ids=["pandas", "polars", "reader", "duckdb"],
)
def test_a_source_comes_in_every_form_append_takes(local_cat: lamina.Catalog, make) -> None:  # type: ignore[no-untyped-def]
    t = plain(local_cat, "merge-on-read")
    src = make(source([7, 50], [70.0, 500.0]))
    t.merge(src, on="k").when_matched_update_all().when_not_matched_insert_all().execute()
    got = values(t)
    assert got[7] == 70.0 and got[50] == 500.0 and len(got) == 31


@pytest.mark.parametrize("insert", [False, True], ids=["update", "update-insert"])
def test_several_source_rows_for_one_target_row_are_refused(
    local_cat: lamina.Catalog, insert: bool
) -> None:
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    merge = t.merge(source([3, 3, 70], [1.0, 2.0, 0.0]), on="k").when_matched_update_all()
    if insert:  # the update-all, insert-all merge writes the source rows as they are
        merge = merge.when_not_matched_insert_all()
    with pytest.raises(RowLevelError, match=r"several source rows .*'k': 3"):
        merge.execute()
    assert len(t.history()) == n and values(t)[3] == 3.0 and 70 not in values(t)


@pytest.mark.parametrize("mode", MODES)
def test_several_source_rows_may_match_a_target_row_an_unconditional_delete_deletes(
    local_cat: lamina.Catalog, mode: str
) -> None:
    """Delta's exception: with one matched clause, an unconditional delete, several
    source rows matching one target row are not ambiguous — it is deleted once."""
    t = plain(local_cat, mode)
    seq = t.history()[-1].seq
    src = source([3, 3, 4, 60], [0.0, 0.0, 0.0, 0.0])
    done = t.merge(src, on="k").when_matched_delete().when_not_matched_insert_all().execute()
    assert done is not None
    counts = {k: done.metadata["row_change"][k] for k in ("updated", "deleted", "inserted")}
    assert counts == {"updated": 0, "deleted": 2, "inserted": 1}
    assert keys(t) == sorted([*(k for k in range(30) if k not in (3, 4)), 60])
    assert seq is not None
    feed = t.read_changes(seq).to_pylist()
    assert sorted((r["_change"], r["k"]) for r in feed) == [
        ("delete", 3), ("delete", 4), ("insert", 60),
    ]  # fmt: skip


def test_several_source_rows_for_a_conditional_delete_are_refused(
    local_cat: lamina.Catalog,
) -> None:
    t = plain(local_cat, "merge-on-read")
    merge = t.merge(source([3, 3], [0.0, 0.0]), on="k").when_matched_delete(
        condition="target.v > 1"
    )
    with pytest.raises(RowLevelError, match="several source rows"):
        merge.execute()
    assert 3 in keys(t)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: m.when_matched_delete().when_matched_update_all(),
        lambda m: m.when_not_matched_insert_all().when_not_matched_insert_all(
            condition="source.v > 0"
        ),
        lambda m: m.when_not_matched_by_source_delete().when_not_matched_by_source_delete(
            condition="target.v > 0"
        ),
    ],
    ids=["matched", "not-matched", "not-matched-by-source"],
)
def test_only_the_last_clause_of_a_kind_may_omit_its_condition(
    local_cat: lamina.Catalog, build
) -> None:  # type: ignore[no-untyped-def]
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    with pytest.raises(RowLevelError, match="only the last may omit its condition"):
        build(t.merge(source([3, 70], [1.0, 2.0]), on="k")).execute()
    assert len(t.history()) == n and keys(t) == list(range(30))


@pytest.mark.parametrize("update", [False, True], ids=["insert", "update-insert"])
def test_duplicate_source_keys_that_match_nothing_are_inserted(
    local_cat: lamina.Catalog, update: bool
) -> None:
    t = plain(local_cat, "merge-on-read")
    merge = t.merge(source([60, 60, 7], [1.0, 2.0, 7.5]), on="k")
    if update:
        merge = merge.when_matched_update_all()
    done = merge.when_not_matched_insert_all().execute()
    assert done is not None and keys(t).count(60) == 2
    assert values(t)[7] == (7.5 if update else 7.0)
    assert done.metadata["row_change"]["inserted"] == 2
    assert done.metadata["row_change"]["updated"] == (1 if update else 0)


def test_an_update_all_insert_all_source_is_taken_by_column_name_and_cast(
    local_cat: lamina.Catalog,
) -> None:
    """The source's columns in another order, one more the table lacks, a narrower
    key type: the rows written are the source's, as the table's columns."""
    t = plain(local_cat, "merge-on-read")
    src = source([7, 80], [7.5, 80.5])
    src = pa.table(
        {
            "extra": ["x", "y"],
            "v": src["v"],
            "k": src["k"].cast(pa.int32()),
            "region": src["region"],
            "ts": src["ts"],
        }
    )
    t.merge(src, on="k").when_matched_update_all().when_not_matched_insert_all().execute()
    got = t.to_arrow()
    assert got.schema == t.schema
    assert values(t)[7] == 7.5 and values(t)[80] == 80.5 and len(got) == 31


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda m: m.when_matched_update(set={"v": "source.nope"}), "nope"),
        (lambda m: m.when_matched_update(set={"v": "'x'"}), "convert string"),
        (lambda m: m.when_matched_delete(condition="target.region > 1"), "cannot be evaluated"),
        (lambda m: m, "at least one clause"),
    ],
)
def test_a_bad_clause_is_refused_and_leaves_the_table_unchanged(
    local_cat: lamina.Catalog,
    build,
    says: str,  # type: ignore[no-untyped-def]
) -> None:
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    with pytest.raises(RowLevelError, match=says):
        build(t.merge(source([1], [1.0]), on="k")).execute()
    assert len(t.history()) == n and keys(t) == list(range(30))


def test_an_unknown_on_column_is_refused(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    with pytest.raises(RowLevelError, match="on= names column 'id'"):
        t.merge(source([1], [1.0]), on="id")


def test_a_plain_merge_into_an_upsert_table_is_an_upsert(local_cat: lamina.Catalog) -> None:
    cat = local_cat
    t = upsert_table(cat)
    src = pa.table(
        {"k": [1, 20], "ts": pa.array([datetime(2024, 1, 2)] * 2, pa.timestamp("us")),
         "v": [11.0, 20.0], "gone": [False, False]}
    )  # fmt: skip
    done = t.merge(src, on="k").when_matched_update_all().when_not_matched_insert_all().execute()
    assert done is not None and done.action == "UPSERT"
    got = values(t)
    assert got[1] == 11.0 and got[20] == 20.0 and len(got) == 11
    gone = t.merge(src.slice(0, 1), on="k").when_matched_delete().execute()
    assert gone is not None and 1 not in values(t)


def test_a_merge_into_an_upsert_table_matches_on_its_key(local_cat: lamina.Catalog) -> None:
    t = upsert_table(local_cat)
    src = pa.table({"k": [1], "v": [1.0]})
    with pytest.raises(RowLevelError, match="primary key"):
        t.merge(src, on="v")
