"""Writes, snapshots and time travel through the local engine, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina import Interval, failpoints
from lamina.core.interval import ETERNITY
from tests.helpers import SCHEMA, events


def test_create_load_list_drop(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts", segment_granularity="day")
    assert t.granularity is lamina.Granularity.DAY
    assert cat.list_tables() == ["events"]
    loaded = cat.load_table("events")
    assert loaded.schema == SCHEMA and loaded.time_column == "ts"
    cat.create_table("dim", schema=pa.schema([("id", pa.int64())]))
    assert cat.load_table("dim").granularity is lamina.Granularity.ALL
    t.append(events())
    cat.drop_table("events")
    assert cat.list_tables() == ["dim"]
    assert not (cat.warehouse.exists(cat.warehouse.path("events")))


def test_a_table_created_again_while_the_old_is_dropped_keeps_its_files(
    cat: lamina.Catalog, catalog_url: str
) -> None:
    """The files were removed by name after the rows' transaction: a table created
    and written under the name in between lost its files (a retention hunt). The
    folder is now moved aside inside that transaction, and removed from there."""
    import threading

    cat.create_table("e", schema=SCHEMA, time_column="ts").append(events(days=1, per_day=5))
    removing, go = threading.Event(), threading.Event()

    def slow_delete(**_: object) -> None:  # the real removal, held up
        removing.set()
        go.wait(10)

    with failpoints.armed("catalog.drop.before_remove_files", slow_delete):
        dropping = threading.Thread(target=cat.drop_table, args=("e",))
        dropping.start()
        assert removing.wait(10)
        with lamina.connect(catalog=catalog_url, warehouse=cat.warehouse.location) as other:
            refused: list[Exception] = []

            def create_again() -> None:
                try:
                    t = other.create_table("e", schema=SCHEMA, time_column="ts")
                except lamina.TableExistsError as exc:  # PostgreSQL: the old row still shows
                    refused.append(exc)
                    return
                t.append(events(days=1, per_day=3, seed=1))

            creating = threading.Thread(target=create_again)
            creating.start()
            creating.join(0.5)  # the old files are being removed meanwhile
            go.set()
            dropping.join(10)
            creating.join(30)
            if refused:
                create_again()
            assert other.load_table("e").to_arrow().num_rows == 3


def test_append_joins_chunks_and_hides_nothing(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    c1 = t.append(events(days=3, per_day=100))
    assert c1.state == "COMPLETED" and c1.action == "APPEND" and len(c1.added) == 3
    c2 = t.append(events(days=2, per_day=10, start="2024-01-02", seed=1))
    assert t.count() == 320
    segs = t.segments()
    assert len(segs) == 5
    by_chunk: dict[Interval, set[int]] = {}
    for s in segs:
        by_chunk.setdefault(s.interval, set()).add(s.version)
    # an append joins the chunk's current version: one version per chunk
    assert all(len(v) == 1 for v in by_chunk.values())
    assert {s.partition_id for s in segs if s.interval == Interval("2024-01-02", "2024-01-03")} == {
        0,
        1,
    }
    assert c2.id > c1.id
    assert c2.removed == ()


def test_overwrite_interval_replaces_and_time_travel(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    c1 = t.append(events(days=5, per_day=50, value=1.0))
    fix = events(days=1, per_day=7, start="2024-01-02", value=2.0)
    c2 = t.overwrite(fix, interval="2024-01-02/2024-01-04")
    # day 2 replaced by 7 rows, day 3 emptied (tombstone), others untouched
    assert t.count() == 50 * 3 + 7
    day3 = t.to_arrow(interval="2024-01-03/2024-01-04")
    assert day3.num_rows == 0
    day2 = t.to_arrow(interval="2024-01-02/2024-01-03")
    assert day2.num_rows == 7 and pc.all(pc.equal(day2["v"], 2.0)).as_py()
    assert t.count(as_of=c1.version) == 250
    assert t.count(as_of=c2.version) == 157
    hist = t.history()
    assert [h.id for h in hist] == [c1.id, c2.id]
    assert hist[1].action == "OVERWRITE" and len(hist[1].removed) == 2
    assert set(c2.removed) == set(hist[1].removed) and set(c2.added) == set(hist[1].added)
    # versions strictly increase and the overwrite's is higher than what it replaced
    v_new = {s.version for s in t.segments() if s.interval == Interval("2024-01-02", "2024-01-03")}
    v_old = {s.version for s in t.segments(as_of=c1.version)}
    assert min(v_new) > max(v_old)


def test_overwrite_default_interval_is_chunks_touched(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=3, per_day=10))
    t.overwrite(events(days=1, per_day=4, start="2024-01-03"))
    assert t.count() == 24
    assert t.to_arrow(interval="2024-01-03/2024-01-04").num_rows == 4


def test_overwrite_then_append_joins_new_version(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=10))
    t.overwrite(events(days=1, per_day=3))
    t.append(events(days=1, per_day=2, seed=3))
    assert t.count() == 5
    segs = t.segments()
    assert len({s.version for s in segs}) == 1 and len(segs) == 2


def test_table_without_time_column(cat: lamina.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    t = cat.create_table("dim", schema=schema)
    t.append(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    t.append(pa.table({"id": [3], "name": ["c"]}))
    assert t.count() == 3
    assert all(s.interval == ETERNITY for s in t.segments())
    t.overwrite(pa.table({"id": [9], "name": ["z"]}))
    assert t.to_arrow().to_pydict() == {"id": [9], "name": ["z"]}


def test_empty_table_reads(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    assert t.to_arrow().num_rows == 0
    assert t.to_arrow().schema == SCHEMA
    assert cat.sql("select count(*) as n from events").to_pydict() == {"n": [0]}
    assert t.segments() == [] and t.history() == []


def test_columns_and_interval_filter_prunes_segments(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=10, per_day=20))
    plan = t.scan(interval="2024-01-04/2024-01-06")
    assert len(plan.tasks) == 2
    out = t.to_arrow(columns=["k"], interval=Interval("2024-01-04T12:00:00", "2024-01-05"))
    assert out.column_names == ["k"]
    lo, hi = dt.datetime(2024, 1, 4, 12), dt.datetime(2024, 1, 5)
    expected = [r for r in t.to_arrow()["ts"].to_pylist() if lo <= r < hi]
    assert out.num_rows == len(expected) > 0


def test_large_chunk_splits_into_core_partitions(cat: lamina.Catalog) -> None:
    t = cat.create_table(
        "events",
        schema=SCHEMA,
        time_column="ts",
        properties={"target_rows_per_segment": 40},
    )
    t.overwrite(events(days=1, per_day=100))
    segs = t.segments()
    assert len(segs) == 3 and {s.num_core_partitions for s in segs} == {3}
    assert sorted(s.partition_id for s in segs) == [0, 1, 2]
    assert sum(s.row_count for s in segs) == 100


def test_sql_over_snapshots(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=4, per_day=25))
    dim = cat.create_table("dim", schema=pa.schema([("k", pa.int64()), ("name", pa.string())]))
    dim.append(pa.table({"k": [0, 1, 2], "name": ["a", "b", "c"]}))
    assert cat.sql("select count(*) n from events").to_pydict() == {"n": [100]}
    one_day = cat.sql(
        "select count(*) n from events where ts >= '2024-01-02' and ts < TIMESTAMP '2024-01-03'"
    )
    assert one_day.to_pydict() == {"n": [25]}
    joined = cat.sql("select d.name from events e join dim d on e.k = d.k order by d.name")
    assert joined.column("name").to_pylist() == ["a", "b", "c"]
    t.overwrite(events(days=1, per_day=5, start="2024-01-02"))
    assert cat.sql("select count(*) n from events").to_pydict() == {"n": [80]}


def test_partial_overshadow_reads_only_visible_rows(cat: lamina.Catalog) -> None:
    """A MONTH-chunk overwrite over DAY data hides the days it covers, not others."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=3, per_day=10, start="2024-01-30"))  # Jan 30, 31, Feb 1
    from lamina.core.plans import OverwritePlan
    from lamina.io.writer import split_by_chunk, write_parts
    from lamina.write import WriteTransaction

    rec = t._handle.record
    parts = split_by_chunk(
        events(days=1, per_day=4, start="2024-01-05"), "ts", lamina.Granularity.MONTH, 1000
    )
    with WriteTransaction(cat.context, rec, "OVERWRITE", {}) as txn:
        txn.inflight()
        files = write_parts(cat.warehouse, txn.dir, parts)
        txn.publish(
            OverwritePlan(files=tuple(files), chunks=(Interval("2024-01-01", "2024-02-01"),))
        )
    assert t.count() == 4 + 10  # January replaced by 4 rows; Feb 1 stays
    assert cat.sql("select count(*) n from events").to_pydict() == {"n": [14]}


def test_interval_reads_find_segments_longer_than_the_granularity(cat: lamina.Catalog) -> None:
    """An interval read bounds segment starts by the longest span published: a MONTH
    segment in a DAY table still answers a day late in that month."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    from lamina.core.plans import OverwritePlan
    from lamina.io.writer import split_by_chunk, write_parts
    from lamina.write import WriteTransaction

    parts = split_by_chunk(
        events(days=31, per_day=2, start="2024-01-01"), "ts", lamina.Granularity.MONTH, 1000
    )
    with WriteTransaction(cat.context, t._handle.record, "OVERWRITE", {}) as txn:
        txn.inflight()
        files = write_parts(cat.warehouse, txn.dir, parts)
        txn.publish(
            OverwritePlan(files=tuple(files), chunks=(Interval("2024-01-01", "2024-02-01"),))
        )
    t.append(events(days=1, per_day=5, start="2024-02-10"))
    assert t.to_arrow(interval="2024-01-30/2024-01-31").num_rows == 2
    assert t.count() == 62 + 5
    got = cat.sql("select count(*) n from events where ts >= '2024-01-30' and ts < '2024-01-31'")
    assert got.to_pydict() == {"n": [2]}


def test_table_record_schema_is_decoded_on_use(cat: lamina.Catalog) -> None:
    import copy
    import pickle

    from lamina.core.model import TableRecord
    from lamina.meta.tables import get_table

    t = cat.create_table("ev", SCHEMA, "ts", properties={"a": "1"})
    rec = get_table(cat.context.db, "ev")
    assert isinstance(rec._schema, bytes)  # listing tables decodes no schema
    assert rec.schema.equals(SCHEMA) and isinstance(rec._schema, pa.Schema)
    again = pickle.loads(pickle.dumps(get_table(cat.context.db, "ev")))
    assert again == rec == copy.deepcopy(rec) and hash(again) == hash(rec)
    assert again.properties == t.properties and again.schema.equals(SCHEMA)
    assert rec.with_properties({}) == rec  # properties are not compared
    assert TableRecord(rec.id, "ev", SCHEMA, "ts", rec.granularity, {}) == rec


def test_segment_files_dictionary_encode_strings_and_small_integers(
    local_cat: lamina.Catalog,
) -> None:
    """A string column of 10,000 distinct values stays dictionary-encoded in the whole
    file (a 16 KiB dictionary limit dropped it to plain after the first page: a GROUP BY
    on it read 1.6x slower); 64-bit integers and floats are written plain."""
    import duckdb
    import numpy as np

    rng = np.random.default_rng(0)
    n = 50_000
    names = pa.array([f"user_{i:05d}" for i in range(10_000)])
    data = pa.table(
        {
            "ts": pa.array(np.full(n, 1_700_000_000_000_000), pa.timestamp("us")),
            "name": names.take(pa.array(rng.integers(0, 10_000, n))),
            "qty": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "v": pa.array(rng.random(n)),
        }
    )
    t = local_cat.create_table("e", data.schema, time_column="ts")
    t.append(data)
    (seg,) = t.segments()
    rows = duckdb.sql(
        "SELECT path_in_schema, encoding_stats FROM parquet_metadata(?)", params=[seg.location]
    ).fetchall()
    pages = {col: {(p["page_type"], p["encoding"]) for p in stats} for col, stats in rows}
    for col in ("name", "qty"):  # every data page dictionary-encoded: no fallback
        assert {e for kind, e in pages[col] if kind == "DATA_PAGE"} == {"RLE_DICTIONARY"}, col
    for col in ("id", "v", "ts"):
        assert {kind for kind, _ in pages[col]} == {"DATA_PAGE"}, (col, pages[col])
    assert t.to_arrow().sort_by("id").equals(data)


def test_as_of_takes_a_version_or_the_commit_a_write_returned(cat: lamina.Catalog) -> None:
    """``as_of`` takes the table version or the Commit itself (numpy integers too); a
    commit of another table is refused with SnapshotNotFoundError, a value of another
    type with InvalidArgumentError."""
    import numpy as np
    import pytest

    t = cat.create_table("e", schema=SCHEMA, time_column="ts")
    first = t.append(events(days=1, per_day=3, seed=1))
    t.append(events(days=1, per_day=4, seed=2))
    assert t.count() == 7
    for as_of in (first, first.version, np.int64(first.version)):
        assert t.count(as_of=as_of) == 3
        assert t.to_arrow(as_of=as_of).num_rows == 3
        assert len(t.segments(as_of=as_of)) == 1
    other = cat.create_table("f", schema=SCHEMA, time_column="ts")
    theirs = other.append(events(days=1, per_day=2, seed=3))
    with pytest.raises(lamina.SnapshotNotFoundError, match="of table 'f', not of 'e'"):
        t.to_arrow(as_of=theirs)
    for bad in ("1", 1.0, True):
        with pytest.raises(lamina.InvalidArgumentError, match="as_of"):
            t.to_arrow(as_of=bad)  # type: ignore[arg-type]


def test_a_publish_whose_answer_was_lost_returns_its_commit(cat: lamina.Catalog) -> None:
    """The connection dropped after the publish's COMMIT reached the catalog: the write
    raised CatalogUnavailableError though its rows showed, and the natural retry wrote
    them twice (a PostgreSQL hunt). It now asks the catalog and returns the commit;
    one whose publish never arrived is aborted and raises (a retry is safe)."""
    from lamina.errors import CatalogUnavailableError

    t = cat.create_table("events", schema=SCHEMA, time_column="ts")

    def dropped(**_: Any) -> None:
        raise CatalogUnavailableError("the connection to the catalog dropped")

    with failpoints.armed("write.publish.after", dropped):  # the answer was lost
        c = t.append(events(days=1, per_day=4))
    assert c.state == "COMPLETED" and t.count() == 4 and c.added

    with (
        failpoints.armed("write.publish.before", dropped),  # the publish never arrived
        pytest.raises(CatalogUnavailableError, match="dropped"),
    ):
        t.append(events(days=1, per_day=4, seed=1))
    assert t.count() == 4 and [x.state for x in t.history()] == ["COMPLETED", "ABORTED"]


def test_a_begin_whose_answer_was_lost_leaves_no_open_commit(cat: lamina.Catalog) -> None:
    """PostgreSQL opens a commit in one autocommitted statement, run again when its
    answer is lost: the first try's commit was left open for the life of the process
    (a live local writer is never judged dead). The second try aborts it."""
    from lamina.meta.db import Db, run

    if cat.context.db.sqlite:
        pytest.skip("SQLite opens a commit in a transaction: a lost answer rolls it back")
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")

    def twice(db: Db, fn: Any) -> None:  # reached the catalog; its answer never came
        run(db.engine, fn, write=True, single=True)

    with failpoints.armed("db.write.single", twice):
        c = t.append(events(days=1, per_day=4))
    states = {x.id: x.state for x in t.history()}
    assert states[c.id] == "COMPLETED" and t.count() == 4
    assert sorted(states.values()) == ["ABORTED", "COMPLETED"]


def test_a_dropped_catalog_connection_is_replaced(cat: lamina.Catalog) -> None:
    """A pooled connection the server dropped (a failover, a pooler restart) failed the
    next read or write with CatalogUnavailableError, though a second try worked (a
    PostgreSQL hunt). A transaction that never reached its COMMIT runs again on a
    fresh connection."""
    from sqlalchemy import text

    if cat.context.db.sqlite:
        pytest.skip("SQLite has no server to drop connections")
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=4))
    for step in (t.count, lambda: t.append(events(days=1, per_day=4, seed=1))):
        with cat.engine.connect() as conn:  # the pool's idle connections
            pids = [conn.execute(text("SELECT pg_backend_pid()")).scalar()]
        with cat.engine.connect() as a, cat.engine.connect() as b:
            pids += [c.execute(text("SELECT pg_backend_pid()")).scalar() for c in (a, b)]
        killer = lamina.connect(
            catalog=str(cat.engine.url.render_as_string(False)), warehouse=cat.warehouse.location
        )
        with killer.engine.connect() as k:
            for pid in set(pids):
                k.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        killer.close()
        step()
    assert t.count() == 8


def test_a_drop_that_fails_keeps_the_table_whole(cat: lamina.Catalog) -> None:
    """A drop whose catalog transaction fails leaves the table as it was, files too
    (a review: files removed inside the transaction were gone for a table still
    listed)."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=2, per_day=3))

    def failing(**_: Any) -> None:  # the files are set aside, the rows not committed
        raise lamina.CatalogUnavailableError("the connection to the catalog dropped")

    with (
        failpoints.armed("tables.drop.before_commit", failing),
        pytest.raises(lamina.CatalogUnavailableError),
    ):
        cat.drop_table("events")
    assert cat.list_tables() == ["events"] and t.to_arrow().num_rows == 6
    cat.drop_table("events")
    assert cat.list_tables() == []
    assert os.listdir(cat.warehouse.root) == ["_lamina_catalog.json"]  # nothing set aside


_DIE_IN_DROP = """
import os, sys
import lamina
from lamina import failpoints

where = sys.argv[3]
# killed right after the folder moved aside, or after the commit, before the folder
# set aside is deleted
if where == "before commit":
    name = "tables.drop.before_commit"
else:
    name = "catalog.drop.before_remove_files"
with failpoints.armed(name, lambda **_: os._exit(9)):
    lamina.connect(catalog=sys.argv[1], warehouse=sys.argv[2]).drop_table("events")
"""


def _die_in_drop(cat: lamina.Catalog, catalog_url: str, where: str) -> None:
    """Drop ``events`` in a process that dies ``where`` (before or after the commit)."""
    import subprocess
    import sys

    args = [sys.executable, "-c", _DIE_IN_DROP, catalog_url, cat.warehouse.location, where]
    assert subprocess.run(args, timeout=120).returncode == 9


def _set_aside(cat: lamina.Catalog) -> list[str]:
    return [n for n in os.listdir(cat.warehouse.root) if n.startswith(".dropped-")]


def test_retention_moves_back_the_files_of_a_drop_that_died_before_its_commit(
    cat: lamina.Catalog, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between moving a table's folder aside and committing the drop
    left the table listed without its files; retention moves them back once the folder
    is older than orphan_grace_period (and ten minutes by the clock), beside the files
    written since."""
    from lamina.maintenance import drops

    t = cat.create_table("events", schema=SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=2, per_day=3))
    _die_in_drop(cat, catalog_url, "before commit")
    assert cat.list_tables() == ["events"] and len(_set_aside(cat)) == 1
    t.append(events(days=1, per_day=4, seed=2))  # into a new folder of the same name
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    report = cat.run_retention(now=later)  # the folder is seconds old: a drop may commit
    assert (report.drop_folders_restored, report.drop_folders_deleted) == (0, 0)
    monkeypatch.setattr(drops, "MIN_AGE_S", 0)
    report = cat.run_retention()
    assert (report.drop_folders_restored, report.drop_folders_deleted) == (0, 0)  # grace
    report = cat.run_retention(now=later)
    assert (report.drop_folders_restored, report.drop_folders_deleted) == (1, 0)
    assert _set_aside(cat) == [] and t.to_arrow().num_rows == 10
    assert cat.find_orphans(now=later) == []


def test_retention_deletes_the_folder_of_a_drop_that_died_after_its_commit(
    cat: lamina.Catalog, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed after the drop committed, before it deleted the folder it had
    set aside, left that folder; retention deletes it (not while within the grace
    period, nor for other tables). Once a table took the name again, the folder's files
    are moved into its folder as orphans, which the same run deletes."""
    from lamina.maintenance import drops

    monkeypatch.setattr(drops, "MIN_AGE_S", 0)
    for again in (False, True):
        cat.create_table("events", schema=SCHEMA, time_column="ts").append(events(days=1))
        _die_in_drop(cat, catalog_url, "after commit")
        assert "events" not in cat.list_tables() and len(_set_aside(cat)) == 1
        if again:
            made = cat.create_table("events", schema=SCHEMA, time_column="ts")
            made.append(events(days=1, per_day=2, seed=3))
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        cat.create_table("other", schema=SCHEMA)
        report = cat.run_retention(now=later, tables=["other"])  # not its folder
        assert report.drop_folders_deleted == 0 and len(_set_aside(cat)) == 1
        assert cat.run_retention().drop_folders_deleted == 0  # within the grace period
        report = cat.run_retention(now=later)
        assert (report.drop_folders_restored, report.drop_folders_deleted) == (again, not again)
        assert _set_aside(cat) == [] and cat.find_orphans() == []
        if again:
            assert report.orphan_files > 0 and made.to_arrow().num_rows == 2
            cat.drop_table("events")
        cat.drop_table("other")
    assert os.listdir(cat.warehouse.root) == ["_lamina_catalog.json"]  # nothing left


def test_the_commit_a_write_returns_is_the_one_history_records(cat: lamina.Catalog) -> None:
    t = cat.create_table("h", SCHEMA, time_column="ts", segment_granularity="DAY")
    got = [t.append(events(days=2, per_day=5)), t.append(events(days=2, per_day=5, seed=2))]
    got.append(t.compact())
    got.append(t.overwrite(events(days=1, per_day=3, seed=3)))
    got.append(t.delete_segments([t.segments()[-1].id]))
    recorded = {c.id: c for c in t.history()}
    for c in got:
        assert c is not None
        h = recorded[c.id]
        assert (c, c.metadata, c.inflight_at) == (h, h.metadata, h.inflight_at), c.action
