"""Schema evolution (``t.add_columns``): one ALTER commit, rows written before read the
new columns as nulls on every read path, snapshots before it read with the schema they
had, bad requests change nothing. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.errors import (
    CommitConflictError,
    PropertyError,
    SchemaError,
    UpsertError,
)
from tests.helpers import SCHEMA, events
from tests.test_remote_warehouse import remote, s3_endpoint  # noqa: F401 - fixtures

C = pa.field("c", pa.float64())


def with_c(data: pa.Table, values: list[float | None] | None = None) -> pa.Table:
    """``data`` with a column ``c`` (the given values, or 0.5, 1.5, ...)."""
    got = values if values is not None else [i + 0.5 for i in range(data.num_rows)]
    return data.append_column(C, pa.array(got, pa.float64()))


def test_added_columns_read_as_nulls_before_and_values_after(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    c1 = t.append(events(days=2, per_day=5))
    alter = t.add_columns(C, pa.field("d", pa.string()))
    assert alter.action == "ALTER" and alter.seq == c1.seq + 1  # type: ignore[operator]
    assert alter.metadata["add_columns"] == [
        {"name": "c", "type": "double"},
        {"name": "d", "type": "string"},
    ]
    assert t.schema.names == [*SCHEMA.names, "c", "d"]
    assert cat.load_table("e").schema == t.schema
    new = with_c(events(days=1, per_day=3, start="2024-01-05", seed=1), [1.0, None, 3.0])
    t.append(new.append_column("d", pa.array(["x", "y", "z"])))

    got = t.to_arrow().sort_by("ts")
    assert got.schema.names == t.schema.names and got.num_rows == 13
    assert got.column("c").to_pylist() == [None] * 10 + [1.0, None, 3.0]
    assert got.column("d").to_pylist() == [None] * 10 + ["x", "y", "z"]
    assert t.count() == 13
    assert t.to_pandas()["c"].isna().sum() == 11
    sql = cat.sql("SELECT count(c) AS n, sum(c) AS s, count(*) AS rows FROM e")
    assert sql.to_pylist() == [{"n": 2, "s": 4.0, "rows": 13}]
    whole = cat.sql("SELECT * FROM e ORDER BY ts")  # two scans united: no column of lamina's
    assert whole.schema.names == t.schema.names and whole.num_rows == 13
    assert whole.column("c").to_pylist() == got.column("c").to_pylist()
    one_day = cat.sql(
        "SELECT d FROM e WHERE ts >= TIMESTAMP '2024-01-01' AND ts < TIMESTAMP '2024-01-02'"
    )
    assert one_day.column("d").to_pylist() == [None] * 5
    assert [c.action for c in t.history()] == ["APPEND", "ALTER", "APPEND"]


def test_snapshots_before_the_change_read_with_their_schema(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    c1 = t.append(events(days=1, per_day=4))
    a1 = t.add_columns(C)
    c2 = t.append(with_c(events(days=1, per_day=2, start="2024-01-03")))
    a2 = t.add_columns(pa.field("d", pa.int32()))
    before = t.to_arrow(as_of=c1.version)
    assert before.schema == SCHEMA and before.num_rows == 4
    assert t.to_arrow(as_of=a1.version).schema.names == [*SCHEMA.names, "c"]
    middle = t.to_arrow(as_of=c2.version)
    assert middle.schema.names == [*SCHEMA.names, "c"] and middle.num_rows == 6
    assert sorted(middle.column("c").to_pylist(), key=str) == [0.5, 1.5, None, None, None, None]
    latest = t.to_arrow(as_of=a2.version)
    assert latest.schema.names == [*SCHEMA.names, "c", "d"]
    assert latest.column("d").null_count == 6
    assert t.to_arrow(as_of=c1.version, columns=["k"]).num_rows == 4
    with pytest.raises(SchemaError, match="unknown columns"):  # not a column then
        t.to_arrow(as_of=c1.version, columns=["c"])


def test_sql_sees_the_new_column_at_once_and_a_cached_view_is_rebuilt(
    cat: lamina.Catalog,
) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=2, per_day=3))
    assert cat.sql("SELECT count(*) AS n FROM e").to_pylist() == [{"n": 6}]  # view cached
    t.add_columns(C)
    got = cat.sql("SELECT c FROM e")  # no file holds c yet
    assert got.schema.field("c").type == pa.float64() and got.column("c").null_count == 6
    t.append(with_c(events(days=1, per_day=2, start="2024-01-02", seed=3), [7.0, 8.0]))
    assert cat.sql("SELECT sum(c) AS s FROM e WHERE c > 7").to_pylist() == [{"s": 8.0}]


def test_bad_columns_are_refused_and_nothing_changes(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=2))
    cases: list[tuple[object, str]] = [
        (pa.field("v", pa.int64()), "already has a column 'v'"),
        (pa.field("V", pa.int64()), "does not tell it from 'V'"),
        (pa.field("n", pa.int64(), nullable=False), "not null"),
        (pa.field("__lamina_x", pa.int64()), "lamina's own"),
        (pa.field("_change", pa.string()), "read_changes"),
        (pa.field("", pa.string()), "empty name"),
        (pa.field("iv", pa.month_day_nano_interval()), "iv"),
        ("c", "pa.field"),
        (["c"], "pa.field"),
    ]
    for bad, why in cases:
        with pytest.raises(SchemaError, match=why):
            t.add_columns(bad)
    with pytest.raises(SchemaError, match="twice"):
        t.add_columns(C, C)
    with pytest.raises(SchemaError, match="no column"):
        t.add_columns()
    with pytest.raises(SchemaError, match="no column"):
        t.add_columns(pa.schema([]))
    assert t.schema == SCHEMA == cat.load_table("e").schema
    assert [c.action for c in t.history()] == ["APPEND"]
    for setting in ({"schema.changed_seq": 1}, {"schema.other": "x"}):
        with pytest.raises(PropertyError, match="schema"):
            t.set_properties(**setting)
    with pytest.raises(PropertyError, match="schema"):
        t.unset_properties("schema.changed_seq")
    with pytest.raises(PropertyError, match="schema"):
        cat.create_table("f", SCHEMA, properties={"schema.changed_seq": "3"})


def test_several_fields_as_a_schema_or_a_list(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.add_columns(pa.schema([C]), [pa.field("d", pa.int8()), pa.field("e", pa.date32())])
    assert t.schema.names == [*SCHEMA.names, "c", "d", "e"]
    assert t.to_arrow().schema == t.schema


def test_a_handle_loaded_before_writes_without_the_column_and_is_told_to_reload(
    cat: lamina.Catalog,
) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    old = cat.load_table("e")
    t.add_columns(C)
    old.append(events(days=1, per_day=2))  # as before: its rows read c as null
    with pytest.raises(SchemaError, match=r"columns \['c'\] were added .*load_table"):
        old.append(with_c(events(days=1, per_day=1)))
    assert cat.load_table("e").to_arrow().column("c").to_pylist() == [None, None]
    t.append(events(days=1, per_day=1))  # this handle knows c: its rows lack it, as nulls
    assert cat.load_table("e").to_arrow().column("c").to_pylist() == [None] * 3


def test_a_write_begun_before_the_change_publishes_after_it(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    with t.transaction() as tx:
        tx.append(events(days=1, per_day=3))
        cat.load_table("e").add_columns(C)
    got = cat.load_table("e").to_arrow()
    assert got.num_rows == 3 and got.column("c").null_count == 3
    by_seq = sorted(t.history(), key=lambda c: c.seq or 0)
    assert [c.action for c in by_seq] == ["ALTER", "APPEND"]  # the append began first


def test_compaction_pads_old_files_and_keeps_new_values(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    stale = cat.load_table("e")
    for i in range(3):
        t.append(events(days=1, per_day=2, seed=i))
    t.add_columns(C)
    t.append(with_c(events(days=1, per_day=2, seed=9), [4.0, 5.0]))
    want = sorted(t.to_arrow().column("c").to_pylist(), key=str)
    assert stale.compact(mode="minor") is not None  # a handle loaded before the change
    after = cat.load_table("e")
    assert len(after.segments()) == 1
    assert sorted(after.to_arrow().column("c").to_pylist(), key=str) == want
    assert after.compact(mode="major") is not None
    got = after.to_arrow()
    assert got.num_rows == 8 and sorted(got.column("c").to_pylist(), key=str) == want


def test_padding_refuses_columns_the_schema_does_not_have() -> None:
    from lamina.io.reader import padded

    data = pa.table({"ts": pa.array([0], pa.timestamp("us")), "z": [1]})
    with pytest.raises(CommitConflictError, match=r"\['z'\]"):
        padded(data, pa.schema([("ts", pa.timestamp("us"))]))
    got = padded(data.select(["ts"]), pa.schema([("ts", pa.timestamp("us")), C]))
    assert got.column("c").to_pylist() == [None]


def test_a_dropped_table_takes_its_schema_history_along(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.add_columns(C)
    cat.drop_table("e")
    again = cat.create_table("e", SCHEMA, time_column="ts")
    c = again.append(events(days=1, per_day=2))
    assert again.to_arrow(as_of=c.version).schema == SCHEMA
    assert "schema.changed_seq" not in again.properties


# -- upsert tables ----------------------------------------------------------------------

USCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        pa.field("id", pa.int64(), nullable=False),
        ("v", pa.float64()),
    ]
)


def records(ids: list[int], hour: int, **extra: list[object]) -> pa.Table:
    ts = pa.array([dt.datetime(2024, 1, 1, hour)] * len(ids), pa.timestamp("us"))
    cols: dict[str, object] = {"ts": ts, "id": ids, "v": [float(i * hour) for i in ids]}
    return pa.table({**cols, **extra})


def test_an_upsert_table_hides_superseded_records_after_the_change(cat: lamina.Catalog) -> None:
    u = cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    u.upsert(records([1, 2, 3, 4], 1))
    u.upsert(records([2, 3], 2))  # hides two rows of the first file
    u.add_columns(C)
    u.upsert(records([3, 5], 3, c=[30.0, 50.0]))
    want = {1: (1.0, None), 2: (4.0, None), 3: (9.0, 30.0), 4: (4.0, None), 5: (15.0, 50.0)}
    got = u.to_arrow()
    assert {r["id"]: (r["v"], r["c"]) for r in got.to_pylist()} == want
    sql = cat.sql("SELECT id, v, c FROM u ORDER BY id").to_pylist()
    assert {r["id"]: (r["v"], r["c"]) for r in sql} == want
    assert cat.sql("SELECT count(*) AS n FROM u").to_pylist() == [{"n": 5}]
    every = u.to_arrow(all_versions=True)
    assert every.num_rows == 8 and every.column("c").null_count == 6
    changes = u.read_changes(0)
    assert changes.column("c").to_pylist().count(30.0) == 1
    hidden = u.to_arrow(as_of=u.history()[1].version)
    assert hidden.schema.names == USCHEMA.names and hidden.num_rows == 4


def test_a_partial_upsert_merges_an_added_column(cat: lamina.Catalog) -> None:
    p = cat.create_table(
        "p", USCHEMA, time_column="ts", primary_key="id", partial_upsert={"v": "INCREMENT"}
    )
    p.upsert(records([1, 2], 1))
    stale = cat.load_table("p")
    p.add_columns(C)
    p.upsert(records([1], 2, c=[5.0]))
    p.upsert(records([1], 3, c=[None]))  # OVERWRITE (the default): a null keeps 5.0
    got = {r["id"]: (r["v"], r["c"]) for r in p.to_arrow().to_pylist()}
    assert got == {1: (1.0 + 2.0 + 3.0, 5.0), 2: (2.0, None)}
    before = p.history()
    with pytest.raises(SchemaError, match="cat.load_table it again"):
        stale.upsert(records([1], 4))  # it would lose c's 5.0
    assert p.history() == before and cat.sql("SELECT c FROM p WHERE id = 1").to_pylist() == [
        {"c": 5.0}
    ]


def test_an_upsert_table_refuses_columns_it_cannot_take(cat: lamina.Catalog) -> None:
    u = cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    for name in ("$x", "file_row_number", "file_index"):
        with pytest.raises(UpsertError):
            u.add_columns(pa.field(name, pa.int64()))
    p = cat.create_table(
        "p", USCHEMA, time_column="ts", primary_key="id", partial_upsert={"*": "INCREMENT"}
    )
    with pytest.raises(UpsertError, match="INCREMENT"):
        p.add_columns(pa.field("s", pa.string()))  # the default strategy cannot merge it
    p.add_columns(pa.field("n", pa.int64()))
    assert u.schema == USCHEMA and p.schema.names == [*USCHEMA.names, "n"]


def test_another_process_index_catches_up_over_the_change(cat: lamina.Catalog) -> None:
    """A key index kept by this process replays the ALTER commit (no files) with
    the upserts around it."""
    u = cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    u.upsert(records([1, 2], 1))
    other = cat.load_table("u")
    other.add_columns(C)
    cat.load_table("u").upsert(records([2], 2, c=[2.5]))
    u = cat.load_table("u")
    u.upsert(records(list(np.arange(1, 3).tolist()), 3, c=[1.0, None]))
    got = {r["id"]: (r["ts"].hour, r["c"]) for r in u.to_arrow().to_pylist()}
    assert got == {1: (3, 1.0), 2: (3, None)}


@pytest.mark.spark
def test_spark_reads_writes_and_compacts_across_the_change(
    spark: object, local_cat: lamina.Catalog
) -> None:
    utc = SCHEMA.set(0, pa.field("ts", pa.timestamp("us", "UTC")))  # as Spark types it
    t = local_cat.create_table("e", utc, time_column="ts")
    c1 = t.append(events(days=1, per_day=3).cast(utc))
    t.add_columns(C)
    frame = spark.createDataFrame(  # type: ignore[attr-defined]
        with_c(events(days=1, per_day=2, seed=4), [1.0, 2.0]).to_pandas()
    )
    t.append(frame)
    got = t.to_spark(spark)
    assert got.columns == t.schema.names and got.count() == 5
    assert sorted(r["c"] for r in got.where("c IS NOT NULL").collect()) == [1.0, 2.0]
    assert t.to_spark(spark, as_of=c1.version).columns == utc.names
    assert t.compact(mode="minor", engine="spark") is not None
    after = t.to_arrow()
    assert after.num_rows == 5 and sorted(after.column("c").to_pylist(), key=str) == [
        1.0,
        2.0,
        None,
        None,
        None,
    ]
    u = local_cat.create_table("u", USCHEMA, time_column="ts", primary_key="id")
    u.upsert(records([1, 2, 3], 1))
    u.add_columns(C)
    u.upsert(records([2], 2, c=[2.0]))
    rows = {r["id"]: r["c"] for r in u.to_spark(spark).collect()}
    assert rows == {1: None, 2: 2.0, 3: None}


def test_the_command_line_adds_columns(tmp_path: object) -> None:
    from tests.test_cli import fails, ok

    wh = str(tmp_path) + "/wh"
    ok(wh, "create-table", "e", "--time-column", "ts", "--schema", "ts:timestamp[us],k:int64")
    out = ok(wh, "add-columns", "e", "--schema", "c:float64,note:string")
    assert "added c (double), note (string) to e (version 1)" in out
    with lamina.connect(warehouse=wh) as cat:
        assert cat.load_table("e").schema.names == ["ts", "k", "c", "note"]
    assert "already has a column 'k'" in fails(wh, "add-columns", "e", "--schema", "k:int8")
    assert "no table named 'nope'" in fails(wh, "add-columns", "nope", "--schema", "x:int8")
    fails(wh, "add-columns", "e", "--schema", "x:nosuchtype")


def test_an_object_store_warehouse_reads_and_compacts_across_the_change(
    remote: tuple[str, str],  # noqa: F811 - the fixture imported above
) -> None:
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts")
        first = t.append(events(days=1, per_day=3))
        t.add_columns(C)
        t.append(with_c(events(days=1, per_day=2, seed=5), [1.0, 2.0]))
        assert sorted(t.to_arrow().column("c").to_pylist(), key=str) == [1.0, 2.0, None, None, None]
        assert t.to_arrow(as_of=first).schema == SCHEMA
        assert t.compact(mode="minor") is not None
        assert t.to_arrow().column("c").null_count == 3 and len(t.segments()) == 1


def test_scans_united_show_the_table_s_columns_only(cat: lamina.Catalog) -> None:
    """A MONTH segment shown in part under a DAY overwrite, files from before and after
    a column was added: four scans united, each leading with a constant column of
    lamina's that the view drops."""
    t = cat.create_table("m", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=4, per_day=3))
    assert t.compact(mode="major", segment_granularity="MONTH") is not None
    t.add_columns(C)
    t.overwrite(
        with_c(events(days=1, per_day=2, start="2024-01-02", seed=2)), "2024-01-02/2024-01-03"
    )
    got = cat.sql("SELECT * FROM m ORDER BY ts")
    assert got.schema.names == t.schema.names and got.num_rows == 11
    assert cat.sql("SELECT count(*) AS n FROM m").to_pylist() == [{"n": 11}]
    assert got.column("c").to_pylist().count(None) == 9
