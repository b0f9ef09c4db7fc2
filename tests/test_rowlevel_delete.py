"""``t.delete(where)``: the rows a predicate matches disappear in one commit, stored as
the table's ``write.update.mode`` says (deletion vectors, or copies of the files
without them); every read path, time travel, the change feed, compaction and
retention agree. On an upsert table a delete is a tombstone per matched key."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import RowLevelError, SqlError

RUNNER = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})

T0 = datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int64()), ("region", pa.string()), ("v", pa.float64())]
)
MODES = ("merge-on-read", "copy-on-write")


def rows(keys: range) -> pa.Table:
    """Rows of keys ``keys`` over three days: region eu for even keys, v = key."""
    return pa.Table.from_pylist(
        [
            {"ts": T0 + timedelta(days=k % 3, seconds=k), "k": k,
             "region": "eu" if k % 2 == 0 else "us", "v": float(k)}
            for k in keys
        ],
        schema=SCHEMA,
    )  # fmt: skip


def plain(cat: lamina.Catalog, mode: str, name: str = "t") -> lamina.Table:
    t = cat.create_table(
        name, SCHEMA, time_column="ts", segment_granularity="DAY",
        properties={"write.update.mode": mode},
    )  # fmt: skip
    t.append(rows(range(30)))
    return t


def keys(t: lamina.Table, as_of: int | None = None) -> list[int]:
    return sorted(t.to_arrow(as_of=as_of).column("k").to_pylist())


@pytest.mark.parametrize("mode", MODES)
def test_deleted_rows_disappear_from_every_read_path_in_one_commit(
    cat: lamina.Catalog, mode: str
) -> None:
    t = plain(cat, mode)
    before = t.history()[-1]
    done = t.delete("k < 10 AND region = 'eu'")
    assert done is not None and done.action == "DELETE_ROWS"
    assert done.metadata["row_change"]["deleted"] == 5
    assert [c.id for c in t.history()] == [before.id, done.id]
    left = [k for k in range(30) if not (k < 10 and k % 2 == 0)]
    assert keys(t) == left
    assert t.count() == len(left)
    assert sorted(cat.sql("SELECT k FROM t").column("k").to_pylist()) == left
    assert keys(t, before.version) == list(range(30))  # time travel stays exact


@pytest.mark.parametrize("mode", MODES)
def test_copy_on_write_rewrites_and_merge_on_read_adds_vectors(
    local_cat: lamina.Catalog, mode: str
) -> None:
    t = plain(local_cat, mode)
    done = t.delete("k = 4")
    assert done is not None
    if mode == "copy-on-write":  # the day holding k=4 copied without it
        assert len(done.removed) == 1 and len(done.added) == 1
    else:
        assert done.removed == () and done.added == ()
    assert 4 not in keys(t)


def test_a_pyarrow_expression_selects_the_rows(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    done = t.delete((pc.field("v") >= 25) & (pc.field("region") == "us"))
    assert done is not None and done.metadata["row_change"]["deleted"] == 3
    assert keys(t) == [k for k in range(30) if not (k >= 25 and k % 2)]


def test_a_delete_matching_nothing_commits_nothing(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    assert t.delete("k > 1000") is None
    assert len(t.history()) == n


@pytest.mark.parametrize("mode", MODES)
def test_the_change_feed_reports_exactly_the_deleted_rows(
    local_cat: lamina.Catalog, mode: str
) -> None:
    t = plain(local_cat, mode)
    seq = t.history()[-1].seq
    assert seq is not None
    t.delete("k IN (3, 4, 5)")
    feed = t.read_changes(seq)
    assert sorted(feed.column("k").to_pylist()) == [3, 4, 5]
    assert set(feed.column("_change").to_pylist()) == {"delete"}
    everything = t.read_changes(0)  # the append's rows, then the delete's
    assert everything.num_rows == 33


@pytest.mark.parametrize("mode", MODES)
def test_compaction_and_retention_keep_deleted_rows_deleted(
    local_cat: lamina.Catalog, mode: str
) -> None:
    t = plain(local_cat, mode)
    t.append(rows(range(30, 36)))  # a second, small file per day to compact with
    t.delete("k % 5 = 0")
    at = t.history()[-1].version
    t.compact()
    want = [k for k in range(36) if k % 5]
    assert keys(t) == want
    assert keys(t, at) == want
    local_cat.run_retention(now=datetime.now() + timedelta(days=30))
    assert keys(t) == want
    assert t.delete("k = 1") is not None and keys(t) == [k for k in want if k != 1]


def test_a_delete_after_another_deletes_the_rest(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    t.delete("k < 5")
    done = t.delete("k < 8")  # the rows hidden already are not counted again
    assert done is not None and done.metadata["row_change"]["deleted"] == 3
    assert keys(t) == list(range(8, 30))


UPSERT_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us"), nullable=False),
        pa.field("v", pa.float64()),
        pa.field("gone", pa.bool_()),
    ]
)


def upsert_table(cat: lamina.Catalog, delete_column: str | None = "gone") -> lamina.Table:
    t = cat.create_table(
        "u", UPSERT_SCHEMA, time_column="ts", primary_key="k", delete_column=delete_column
    )
    t.upsert(
        pa.Table.from_pylist(
            [{"k": k, "ts": T0 + timedelta(seconds=k), "v": float(k), "gone": False}
             for k in range(10)],
            schema=UPSERT_SCHEMA,
        )
    )  # fmt: skip
    return t


def test_an_upsert_tables_delete_writes_tombstones(cat: lamina.Catalog) -> None:
    t = upsert_table(cat)
    seq = t.history()[-1].seq
    assert seq is not None
    done = t.delete("v >= 7")
    assert done is not None and done.action == "UPSERT"
    assert sorted(t.to_arrow().column("k").to_pylist()) == list(range(7))
    feed = t.read_changes(seq)
    assert sorted(feed.column("k").to_pylist()) == [7, 8, 9]
    assert set(feed.column("_change").to_pylist()) == {"delete"}
    versions = t.to_arrow(all_versions=True)
    ended = versions.filter(pc.field("$valid_until") == done.seq)
    # the records stop showing at the delete; its tombstones never show
    assert sorted(ended.column("k").to_pylist()) == [7, 7, 8, 8, 9, 9]
    tombstones = ended.filter(pc.field("gone"))
    assert tombstones.column("$valid_from").to_pylist() == [done.seq] * 3


@pytest.mark.parametrize("mode", MODES)
def test_all_versions_of_a_plain_table_end_the_rows_row_level_changes_hid(
    local_cat: lamina.Catalog, mode: str
) -> None:
    t = plain(local_cat, mode)
    first = t.history()[-1].version
    gone = t.delete("k IN (1, 2)")
    changed = t.update("k = 3", set={"v": "-3"})
    merged = (
        t.merge(rows(range(4, 6)).set_column(3, "v", pa.array([-4.0, -5.0])), on=["k"])
        .when_matched_update_all()
        .execute()
    )
    assert gone is not None and changed is not None and merged is not None
    history = [c.version for c in t.history()]
    for as_of in history:  # each snapshot's stored rows, and which of them it shows
        every = t.to_arrow(as_of=as_of, all_versions=True).to_pylist()
        shown = sorted((r["k"], r["v"]) for r in every if r["$valid_until"] is None)
        assert shown == sorted(keys_values(t, as_of)), as_of
        assert all(r["$valid_from"] <= as_of for r in every)
    ends = {
        (r["k"], r["v"]): r["$valid_until"]
        for r in t.to_arrow(all_versions=True).to_pylist()
        if r["$valid_until"] is not None
    }
    if mode == "merge-on-read":  # the old rows stay in their files, ended
        assert ends == {
            (1, 1.0): gone.version, (2, 2.0): gone.version, (3, 3.0): changed.version,
            (4, 4.0): merged.version, (5, 5.0): merged.version,
        }  # fmt: skip
        every = t.to_arrow(all_versions=True)
        starts = every.filter(pc.field("$valid_from") > first)
        assert sorted(starts.column("v").to_pylist()) == [-5.0, -4.0, -3.0]
    else:  # the files were copied without them: the copies' rows start at the copy
        assert ends == {}


def keys_values(t: lamina.Table, as_of: int | None) -> list[tuple[int, float]]:
    got = t.to_arrow(as_of=as_of)
    return list(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True))


def test_an_upsert_table_without_a_delete_column_refuses_a_delete(
    local_cat: lamina.Catalog,
) -> None:
    t = upsert_table(local_cat, delete_column=None)
    n = len(t.history())
    with pytest.raises(RowLevelError, match="delete column"):
        t.delete("k = 1")
    assert len(t.history()) == n and t.count() == 10


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("nope > 1", "nope"),
        ("region > 5", "region"),  # a string compared with a number
        ("", "SQL expression"),
        (42, "SQL expression"),
        (pc.field("nope") > 1, "nope"),
    ],
)
def test_a_bad_predicate_is_refused_and_leaves_the_table_unchanged(
    local_cat: lamina.Catalog, where: object, says: str
) -> None:
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    with pytest.raises(RowLevelError, match=says):
        t.delete(where)
    assert len(t.history()) == n and keys(t) == list(range(30))


def test_lamina_delete_deletes_by_a_predicate(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(warehouse=wh) as cat:
        plain(cat, "merge-on-read")
    got = RUNNER.invoke(app, ["--warehouse", wh, "delete", "t", "--where", "k >= 20"])
    assert got.exit_code == 0, got.output
    assert "10 rows deleted" in got.output
    got = RUNNER.invoke(app, ["--warehouse", wh, "delete", "t", "--where", "k >= 20"])
    assert got.exit_code == 0 and "nothing committed" in got.output
    got = RUNNER.invoke(app, ["--warehouse", wh, "delete", "t", "--where", "nope = 1"])
    assert got.exit_code == 1 and "nope" in got.output
    with lamina.connect(warehouse=wh) as cat:
        assert keys(cat.load_table("t")) == list(range(20))


@pytest.mark.parametrize(
    ("sql", "method"),
    [
        ("DELETE FROM t WHERE k < 3", "t.delete(where)"),
        ("UPDATE t SET v = 0 WHERE k < 3", "t.update(where, set="),
        ("MERGE INTO t USING t AS s ON t.k = s.k WHEN MATCHED THEN DELETE", "t.merge(source"),
    ],
)
def test_sql_that_changes_rows_is_refused_naming_the_method_that_does(
    local_cat: lamina.Catalog, sql: str, method: str
) -> None:
    t = plain(local_cat, "merge-on-read")
    with pytest.raises(SqlError) as err:
        local_cat.sql(sql)
    assert method in str(err.value)
    assert keys(t) == list(range(30)) and len(t.history()) == 1


def test_spark_pipeline_deletes_on_the_driver_and_reads_without_the_rows(
    spark: Any, tmp_path: Path
) -> None:
    """A Spark job writes through ``format("lamina")``, its driver deletes with
    ``t.delete``, and Spark's readers (the data source, ``to_spark``) apply the vectors."""
    url, wh = f"sqlite:///{tmp_path}/cat.db", str(tmp_path / "wh")
    opts = {"table": "t", "catalog": url, "warehouse": wh}
    with lamina.connect(url, wh) as cat:
        utc = SCHEMA.set(0, pa.field("ts", pa.timestamp("us", tz="UTC")))  # as Spark has it
        t = cat.create_table("t", utc, time_column="ts", segment_granularity="DAY")
        df = spark.createDataFrame(rows(range(30)).cast(utc).to_pandas())
        df.write.format("lamina").options(**opts).mode("append").save()
        done = t.delete("region = 'eu' AND k < 20")
        assert done is not None and done.metadata["row_change"]["deleted"] == 10
        want = [k for k in range(30) if not (k % 2 == 0 and k < 20)]
        read = spark.read.format("lamina").options(**opts).load()
        assert sorted(r["k"] for r in read.collect()) == want
        assert sorted(r["k"] for r in t.to_spark(spark).collect()) == want
