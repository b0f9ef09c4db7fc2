"""Upsert tables (issue 9): Pinot's semantics on every read path, SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina import failpoints
from lamina.errors import PropertyError, UpsertError

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")
#: a test of what merge-on-read stores (every record, vectors over them): copy-on-write
#: stores a copy without the superseded records instead (tests/test_copy_on_write.py)
MERGE_ON_READ_STORAGE = pytest.mark.parametrize("write_mode", ["merge-on-read"], indirect=True)

T0 = datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("value", pa.int64()),
        pa.field("deleted", pa.bool_()),
    ]
)


def rows(*records: tuple[Any, ...]) -> pa.Table:
    """Records (key, minutes after T0, value[, deleted])."""
    return pa.Table.from_pylist(
        [
            {
                "key": r[0],
                "ts": T0 + timedelta(minutes=r[1]),
                "value": r[2],
                "deleted": r[3] if len(r) > 3 else False,
            }
            for r in records
        ],
        schema=SCHEMA,
    )


def latest(t: lamina.Table, as_of: int | None = None) -> dict[str, int]:
    got = t.to_arrow(as_of=as_of).to_pylist()
    keys = [r["key"] for r in got]
    assert len(keys) == len(set(keys)), f"a key shows twice: {sorted(keys)}"
    return {r["key"]: r["value"] for r in got}


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )


def test_the_seeds_example(cat: lamina.Catalog, t: lamina.Table) -> None:
    """Seed 002: avg 101, then 151, then 250 (134 and 175.5 without upsert)."""
    plain = cat.create_table("plain", SCHEMA, time_column="ts")
    batches = [rows(("abc-12", 0, 100), ("abc-13", 1, 102)), rows(("abc-12", 2, 200)),
               rows(("abc-13", 3, 300))]  # fmt: skip
    want = [101, 151, 250]
    for data, avg in zip(batches, want, strict=True):
        t.upsert(data)
        plain.append(data)
        assert cat.sql("SELECT avg(value) AS a FROM u")["a"][0].as_py() == avg
        vals = latest(t)
        assert sum(vals.values()) / len(vals) == avg
    assert cat.sql("SELECT avg(value) AS a FROM plain")["a"][0].as_py() == 175.5


def test_out_of_order_records_never_replace_newer_ones(t: lamina.Table) -> None:
    t.upsert(rows(("a", 10, 1), ("b", 10, 1)))
    t.upsert(rows(("a", 5, 2), ("b", 20, 2)))  # a's is older: ignored
    assert latest(t) == {"a": 1, "b": 2}
    t.upsert(rows(("a", 9, 3), ("a", 11, 4), ("a", 8, 5)))  # within one input too
    assert latest(t) == {"a": 4, "b": 2}


def test_ties_go_to_the_later_commit_then_the_later_row(t: lamina.Table) -> None:
    t.upsert(rows(("a", 10, 1)))
    t.upsert(rows(("a", 10, 2)))  # the same comparison value, a later commit
    assert latest(t) == {"a": 2}
    t.upsert(rows(("a", 10, 3), ("a", 10, 4)))  # the later row of one input
    assert latest(t) == {"a": 4}


def test_deletes_hide_a_key_until_a_newer_record_revives_it(t: lamina.Table) -> None:
    t.upsert(rows(("a", 10, 1), ("b", 10, 1)))
    t.upsert(rows(("a", 20, 0, True)))  # a tombstone: a goes
    assert latest(t) == {"b": 1}
    t.upsert(rows(("a", 15, 7)))  # older than the delete: out of order, a stays gone
    assert latest(t) == {"b": 1}
    t.upsert(rows(("b", 5, 0, True)))  # an older delete is just out of order
    assert latest(t) == {"b": 1}
    t.upsert(rows(("a", 30, 9)))  # newer: revives a, taken whole
    assert latest(t) == {"a": 9, "b": 1}


def test_time_travel_reads_the_latest_record_as_of_each_commit(t: lamina.Table) -> None:
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1)))
    c2 = t.upsert(rows(("a", 2, 2)))
    c3 = t.upsert(rows(("b", 3, 0, True), ("c", 3, 3)))
    assert latest(t, c1.version) == {"a": 1, "b": 1}
    assert latest(t, c2.version) == {"a": 2, "b": 1}
    assert latest(t, c3.version) == {"a": 2, "c": 3}
    assert latest(t) == {"a": 2, "c": 3}


def test_keys_move_between_chunks(t: lamina.Table) -> None:
    """A key's records may lie in different time chunks: still one visible."""
    t.upsert(rows(("a", 0, 1)))
    t.upsert(rows(("a", 3 * 24 * 60, 2)))  # three days later: another chunk
    assert latest(t) == {"a": 2}
    assert len(t.segments()) == 2


def test_append_on_an_upsert_table_upserts(t: lamina.Table) -> None:
    t.append(rows(("a", 1, 1)))
    t.append(rows(("a", 2, 2)))
    assert latest(t) == {"a": 2}


def test_exactly_once_upserts(t: lamina.Table) -> None:
    first = t.upsert(rows(("a", 1, 1)), txn=("app", 1))
    again = t.upsert(rows(("a", 1, 5)), txn=("app", 1))  # a replayed batch: skipped
    assert again.id == first.id and latest(t) == {"a": 1}
    t.upsert(rows(("a", 2, 2)), txn=("app", 2))
    assert latest(t) == {"a": 2}


def test_a_new_process_sees_and_upserts_correctly(
    catalog_url: str, tmp_path: Path, t: lamina.Table
) -> None:
    """The key index is rebuilt from the data files and deletion vectors."""
    t.upsert(rows(("a", 1, 1), ("b", 1, 1)))
    t.upsert(rows(("a", 2, 2), ("c", 2, 3)))
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_upsert_elsewhere, args=(catalog_url, str(tmp_path / "wh")))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    t.upsert(rows(("b", 9, 9)))  # this process catches up with the other's commit
    assert latest(t) == {"a": 3, "b": 9, "c": 3}


def _upsert_elsewhere(catalog_url: str, wh: str) -> None:
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("u")
        assert latest(t) == {"a": 2, "b": 1, "c": 3}
        t.upsert(rows(("a", 3, 3), ("b", 0, 7)))  # b's is older: ignored
        assert latest(t) == {"a": 3, "b": 1, "c": 3}


def _writer(catalog_url: str, wh: str, w: int, n: int) -> None:
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("u")
        for i in range(n):  # keys shared by both writers; comparison values unique
            t.upsert(rows(*[(f"k{j}", 2 * (i * 10 + j) + w, 100 * w + i) for j in range(10)]))


def test_concurrent_writers_on_the_same_keys_both_succeed(
    catalog_url: str, tmp_path: Path, t: lamina.Table
) -> None:
    """No conflict error; afterwards exactly one record per key, the one with the
    greatest comparison value (Hudi cannot promise this: #9831)."""
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_writer, args=(catalog_url, str(tmp_path / "wh"), w, 8)) for w in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    # the greatest ts of key kj: i = 7, writer 1 -> value 107
    assert latest(t) == {f"k{j}": 107 for j in range(10)}
    assert len(t.history()) == 16


# -- bad input -------------------------------------------------------------------------


def test_null_keys_are_refused_and_nothing_is_written(t: lamina.Table) -> None:
    bad = pa.table(
        {"key": pa.array(["a", None]), "ts": pa.array([T0, T0], pa.timestamp("us")),
         "value": [1, 2], "deleted": [False, False]}
    )  # fmt: skip
    with pytest.raises((UpsertError, lamina.SchemaError)):
        t.upsert(bad)
    assert t.history() == [] and latest(t) == {}


def test_upsert_into_a_table_without_a_primary_key(cat: lamina.Catalog) -> None:
    plain = cat.create_table("plain", SCHEMA, time_column="ts")
    with pytest.raises(UpsertError, match="primary_key"):
        plain.upsert(rows(("a", 1, 1)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"primary_key": "nope"}, "not a column"),
        ({"primary_key": "key", "delete_column": "ts"}, "boolean"),  # ints are allowed
        ({"primary_key": "key", "partial_upsert": {"key": "INCREMENT"}}, "never merged"),
        (
            {
                "primary_key": "key",
                "delete_column": "deleted",
                "partial_upsert": {"deleted": "MAX"},
            },
            "delete column: it is never merged",
        ),
        ({"comparison_column": "value"}, "primary_key"),
        ({"primary_key": 5}, "name a column, or a list of columns"),
        ({"primary_key": ["key", 5]}, "name a column, or a list of columns"),
    ],
)
def test_bad_definitions_are_refused(
    cat: lamina.Catalog, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(UpsertError, match=match):
        cat.create_table("bad", SCHEMA, time_column="ts", **kwargs)
    assert "bad" not in cat.list_tables()


def test_bad_key_and_comparison_types_are_refused_with_advice_that_works(
    cat: lamina.Catalog,
) -> None:
    schema = SCHEMA.append(pa.field("n", pa.null())).append(pa.field("l", pa.list_(pa.int64())))
    with pytest.raises(UpsertError, match="'n' has type null .*give it a type"):
        cat.create_table("bad", schema, time_column="ts", primary_key="n")
    with pytest.raises(UpsertError, match="no order: use a numeric, decimal, date/time or bool"):
        cat.create_table("bad", schema, time_column="ts", primary_key="key", comparison_column="l")
    assert cat.list_tables() == []


@pytest.mark.parametrize("column", ["file_row_number", "file_index"])
def test_a_column_named_as_the_readers_row_position_is_refused(
    cat: lamina.Catalog, column: str
) -> None:
    """cat.sql finds a row's deletion-vector bit by DuckDB's virtual columns of these
    names; a column of the same name would shadow them and show superseded rows."""
    schema = SCHEMA.append(pa.field(column, pa.int64()))
    with pytest.raises(UpsertError, match=f"column '{column}' .* rename it"):
        cat.create_table("bad", schema, time_column="ts", primary_key="key")
    assert "bad" not in cat.list_tables()
    cat.create_table("fine", schema, time_column="ts")  # an append table reads no vectors


def test_the_definition_is_fixed(t: lamina.Table) -> None:
    with pytest.raises(PropertyError, match="upsert definition"):
        t.set_properties(**{"upsert.primary_key": '["value"]'})
    assert t.primary_key == ("key",)


def test_a_push_is_refused_on_upsert_tables(t: lamina.Table) -> None:
    t.upsert(rows(("a", 1, 1)))
    with pytest.raises(UpsertError, match="not supported on upsert table"):
        t.push()
    for call in (lambda: t.end_replace("nope"), lambda: t.revert_replace("nope", force=True)):
        with pytest.raises(UpsertError, match="not supported on upsert table"):
            call()
    assert latest(t) == {"a": 1}


@pytest.mark.parametrize("write_mode", ["merge-on-read"], indirect=True)
def test_all_versions_gives_every_record_with_its_validity(t: lamina.Table) -> None:
    """Pinot's skipUpsert, with the seqs between which each record was its key's latest
    (merge-on-read: every record stays stored; copy-on-write keeps what it rewrites as
    a compaction does, see test_copy_on_write.py)."""
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1)))
    c2 = t.upsert(rows(("a", 2, 2), ("a", 0, 9)))  # (a, 0) is out of order: never shows
    c3 = t.upsert(rows(("b", 3, 0, True)))  # a delete: hides b, never shows itself
    got = {
        (r["key"], r["value"]): (r["$valid_from"], r["$valid_until"])
        for r in t.to_arrow(all_versions=True).to_pylist()
    }
    assert got == {
        ("a", 1): (c1.seq, c2.seq),
        ("b", 1): (c1.seq, c3.seq),
        ("a", 2): (c2.seq, None),
        ("a", 9): (c2.seq, c2.seq),
        ("b", 0): (c3.seq, c3.seq),
    }
    old = t.to_arrow(as_of=c2.version, all_versions=True, columns=["key", "value"])
    assert sorted(old.column_names) == ["$valid_from", "$valid_until", "key", "value"]
    assert {(r["key"], r["value"]): r["$valid_until"] for r in old.to_pylist()} == {
        ("a", 1): c2.seq, ("b", 1): None, ("a", 2): None, ("a", 9): c2.seq
    }  # fmt: skip


def test_count_and_sql_agree_with_the_latest_records(cat: lamina.Catalog, t: lamina.Table) -> None:
    t.upsert(rows(*[(f"k{i}", i, i) for i in range(10)]))
    t.upsert(rows(*[(f"k{i}", 100 + i, -i) for i in range(0, 10, 2)]))
    t.upsert(rows(("k1", 200, 0, True)))
    assert t.count() == 9
    got = cat.sql("SELECT count(*) AS n, sum(value) AS s FROM u WHERE ts >= '2024-01-01 00:05:00'")
    want = [v for k, v in latest(t).items() if int(k[1:]) >= 5 or int(k[1:]) % 2 == 0]
    assert got.to_pylist() == [{"n": len(want), "s": sum(want)}]


@MERGE_ON_READ_STORAGE
def test_sql_hides_superseded_rows_by_a_bitmap_per_file(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """cat.sql hides many rows of a file by a bitmap per file, in one table per view:
    only files that hide rows have one (the others are read apart, with no filter)."""
    for n in range(5):  # five files of 10 records; each later one updates half the keys
        t.upsert(rows(*[(f"k{i}", 10 * n + i, 100 * n + i) for i in range(5 * n, 5 * n + 10)]))
    assert len([p for p in t.to_arrow(all_versions=True)["$valid_until"] if p.is_valid]) == 20
    got = cat.sql("SELECT key, value FROM u").to_pylist()
    assert {r["key"]: r["value"] for r in got} == latest(t)
    assert len(got) == len(latest(t)) == 30
    masks = "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '__lamina_mask_%'"
    (mask,) = cat.sql(masks)["table_name"].to_pylist()
    files = cat.sql(f'SELECT count(*) AS n FROM "{mask}"')["n"].to_pylist()
    assert files == [4]  # the first four files hide rows, the last hides none


def test_the_change_feed_pairs_each_update_as_a_delete_and_an_insert(t: lamina.Table) -> None:
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1)))
    c2 = t.upsert(rows(("a", 2, 2), ("c", 2, 3), ("b", 0, 9)))  # b's is out of order
    c3 = t.upsert(rows(("c", 3, 0, True)))  # a delete
    got = [
        (r["_commit_seq"], r["_change"], r["key"], r["value"])
        for r in t.read_changes(0, columns=["key", "value"]).to_pylist()
    ]
    assert sorted(got) == sorted(
        [
            (c1.seq, "insert", "a", 1),
            (c1.seq, "insert", "b", 1),
            (c2.seq, "delete", "a", 1),
            (c2.seq, "insert", "a", 2),
            (c2.seq, "insert", "c", 3),
            (c3.seq, "delete", "c", 3),
        ]
    )
    # folding the feed gives the latest records
    state: dict[str, int] = {}
    for _seq, change, key, value in sorted(got, key=lambda r: (r[0], r[1] != "delete")):
        if change == "delete":
            assert state.pop(key) == value
        else:
            state[key] = value
    assert state == latest(t)
    assert t.read_changes(c2.seq, columns=["key"]).num_rows == 1


# -- partial upserts --------------------------------------------------------------------

PSCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("clicks", pa.int64()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("best", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("first", pa.string()),
        pa.field("deleted", pa.bool_()),
    ]
)
STRATEGIES = {
    "clicks": "INCREMENT",
    "tags": "UNION",
    "best": "MAX",
    "first": "IGNORE",
    "*": "OVERWRITE",
}


def prow(key: str, minute: int, **values: Any) -> dict[str, Any]:
    return {"key": key, "ts": T0 + timedelta(minutes=minute), "deleted": False, **values}


def pstate(t: lamina.Table) -> dict[str, dict[str, Any]]:
    got = t.to_arrow().to_pylist()
    assert len({r["key"] for r in got}) == len(got)
    return {r["key"]: {c: r[c] for c in ("clicks", "tags", "best", "name", "first")} for r in got}


def test_an_overwrite_of_a_partial_upsert_table_merges_with_what_remains(
    pt: lamina.Table,
) -> None:
    """The records stored in the chunks go; each new record merges with its key's
    latest record elsewhere, if one remains, and is taken whole if not."""
    day = 24 * 60

    def write(how: str, *rs: dict[str, Any], interval: Any = None) -> None:
        data = pa.Table.from_pylist(list(rs), schema=PSCHEMA)
        if how == "upsert":
            pt.upsert(data)
        else:
            getattr(pt, how)(data, interval=interval)

    def clicks() -> dict[str, int]:
        return {k: v["clicks"] for k, v in pstate(pt).items()}

    write("upsert", prow("a", 1, clicks=1), prow("b", 1, clicks=1))  # day 1
    write("upsert", prow("a", day + 1, clicks=2))  # day 2
    assert clicks() == {"a": 3, "b": 1}
    write("overwrite", prow("b", 2, clicks=10), prow("c", 2, clicks=5))  # day 1
    assert clicks() == {"a": 3, "b": 10, "c": 5}  # b's latest went: taken whole
    write(
        "overwrite", prow("a", day + 3, clicks=1, name="n"), interval=("2024-01-02", "2024-01-03")
    )
    assert clicks() == {"a": 1, "b": 10, "c": 5}  # a's latest went with day 2
    write("overwrite", prow("a", 2 * day, clicks=2))  # day 3: a's latest on day 2 stays
    assert pstate(pt)["a"] == {"clicks": 3, "tags": None, "best": None, "name": "n",
                               "first": None}  # fmt: skip
    write("overwrite", prow("a", 5, clicks=100), prow("b", 5, clicks=1), prow("c", 5, clicks=5))
    assert clicks() == {"a": 3, "b": 1, "c": 5}  # a's is older than its latest: not merged
    # a refresh of days 2-3: a's records there go; c's latest (day 1) stays and merges
    write("refresh", prow("c", 2 * day + 1, clicks=1), interval=("2024-01-02", "2024-01-04"))
    assert clicks() == {"b": 1, "c": 6}
    _same_after_rebuild(pt)
    write("upsert", prow("c", 2 * day + 2, clicks=1), prow("a", 0, clicks=1))
    assert clicks() == {"a": 1, "b": 1, "c": 7}


def test_partial_upserts_merge_with_pinots_strategies(pt: lamina.Table) -> None:
    up = lambda *rs: pt.upsert(pa.Table.from_pylist(list(rs), schema=PSCHEMA))  # noqa: E731
    up(prow("a", 1, clicks=1, tags=["x"], best=5, name="n1", first="f1"))
    up(prow("a", 2, clicks=2, tags=["y", "x"], best=3, name=None, first="f2"))
    assert pstate(pt) == {
        "a": {"clicks": 3, "tags": ["x", "y"], "best": 5, "name": "n1", "first": "f1"}
    }
    up(prow("a", 0, clicks=100, name="old"))  # out of order: stored, never merged
    assert pstate(pt)["a"]["clicks"] == 3
    up(prow("a", 3, clicks=None, best=None, tags=None, name="n2"))  # nulls keep the old
    assert pstate(pt) == {
        "a": {"clicks": 3, "tags": ["x", "y"], "best": 5, "name": "n2", "first": "f1"}
    }
    up(prow("a", 4, deleted=True))  # a delete, then a revival taken whole
    assert pstate(pt) == {}
    up(prow("a", 5, clicks=7, first="f3"))
    assert pstate(pt) == {
        "a": {"clicks": 7, "tags": None, "best": None, "name": None, "first": "f3"}
    }
    # within one input, records of a key fold left to right
    up(prow("b", 1, clicks=1, tags=["p"]), prow("b", 2, clicks=2, tags=["q"]))
    assert pstate(pt)["b"] == {"clicks": 3, "tags": ["p", "q"], "best": None, "name": None,
                               "first": None}  # fmt: skip


def _incrementer(catalog_url: str, wh: str, n: int) -> None:
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("p")
        for _ in range(n):  # the same comparison value: every record is in order
            t.upsert(pa.Table.from_pylist([prow("hot", 1, clicks=1)], schema=PSCHEMA))


def test_concurrent_partial_upserts_lose_no_increment(
    catalog_url: str, tmp_path: Path, pt: lamina.Table
) -> None:
    """Each writer merges with what it read; one whose key changed before it published
    merges again (retry), so no increment is lost."""
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_incrementer, args=(catalog_url, str(tmp_path / "wh"), 6))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert pstate(pt)["hot"]["clicks"] == 12


def _first_upsert(catalog_url: str, wh: str, out: Any) -> None:
    """A new process: how many data files its first upsert read to build the index."""
    import pyarrow.parquet as pq_mod

    reads = []
    real = pq_mod.read_table

    def counting(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[0])
        return real(*args, **kwargs)

    pq_mod.read_table = counting
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("u")
        t.upsert(rows(("k1", 10_000, -1)))
        out.put((len(reads), latest(t)["k1"], len(latest(t))))


def test_a_new_process_starts_from_the_saved_key_index(
    catalog_url: str, tmp_path: Path, t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the index grew enough, the upserting process saves it; a new process loads
    it (and the upserts since) instead of reading every data file."""
    from lamina.meta.keyindex import snapshots as key_snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    for b in range(4):  # 4 x 40 keys: a snapshot after the second batch
        t.upsert(rows(*[(f"k{i}", b, b * 1000 + i) for i in range(40 * b, 40 * b + 40)]))
    t.upsert(rows(("k1", 5, 7)))
    t._handle.ctx.keys.wait()  # saved in the background
    saved = list((tmp_path / "wh" / "u" / "_keys").glob("*.keys"))
    assert len(saved) == 2  # at 80 and at 160 keys; older ones are deleted
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_first_upsert, args=(catalog_url, str(tmp_path / "wh"), q))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    data_reads, k1, n = q.get()
    assert (k1, n) == (-1, 160)
    assert data_reads <= 2  # the one upsert after the newest snapshot (not all 6 files)
    for f in saved:
        f.write_bytes(b"damaged")  # a damaged snapshot: rebuilt from the data instead
    t._handle.ctx.keys.forget(t._handle.record.id)
    t.upsert(rows(("k2", 10_000, -2)))
    assert latest(t)["k2"] == -2 and len(latest(t)) == 160


@MERGE_ON_READ_STORAGE
def test_a_table_of_updates_saves_its_key_index_too(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is saved again once the commits since the newest snapshot wrote enough
    rows for a new process to replay, even when no key was added."""
    from sqlalchemy import select

    from lamina.meta.keyindex import snapshots as key_snapshots
    from lamina.meta.schema import key_snapshots as snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)

    def saved() -> list[int]:
        t._handle.ctx.keys.wait()  # saved in the background
        stmt = select(snapshots.c.seq).where(snapshots.c.table_id == t._handle.record.id)
        return sorted(r[0] for r in t._handle.ctx.db.read(lambda conn: conn.execute(stmt).all()))

    first = t.upsert(rows(*[(f"k{i}", 0, i) for i in range(60)]))
    assert saved() == [first.seq]
    for b in (1, 2):
        t.upsert(rows(*[(f"k{i}", b, b * 100 + i) for i in range(20)]))
    assert saved() == [first.seq]  # 40 rows to replay: not yet
    third = t.upsert(rows(*[(f"k{i}", 9, 900 + i) for i in range(20, 40)]))
    assert saved() == [first.seq, third.seq]  # 60 rows since: saved


@MERGE_ON_READ_STORAGE
def test_a_snapshot_is_written_in_the_background_from_a_copy(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upsert that makes a snapshot due does not wait for its file; upserts that
    change the index meanwhile do not change what is written: the snapshot equals the
    index rebuilt from the files at its commit."""
    import json
    import threading

    from sqlalchemy import select

    from lamina import failpoints
    from lamina.io import keyindex as io_keys
    from lamina.meta.keyindex import replay as key_replay
    from lamina.meta.keyindex import snapshots as key_snapshots
    from lamina.meta.schema import key_snapshots as snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    gate = threading.Event()

    def held_back(seq: int) -> None:  # the snapshot's file is not written until the gate
        assert gate.wait(30)

    db, rec, wh = t._handle.ctx.db, t._handle.record, t._handle.ctx.warehouse

    def registered(conn: Any) -> list[Any]:
        return conn.execute(select(snapshots).where(snapshots.c.table_id == rec.id)).all()

    with failpoints.armed("keyindex.snapshot.before_write", held_back):
        due = t.upsert(rows(*[(f"k{i}", 0, i) for i in range(60)]))  # returns, file unwritten
        for b in (1, 2):  # the same keys again: the index's entries change in place
            t.upsert(rows(*[(f"k{i}", b, b * 100 + i) for i in range(0, 60, 3)]))
        assert db.read(registered) == []
        gate.set()
        t._handle.ctx.keys.wait()
    [row] = db.read(registered)
    assert row.seq == due.seq

    def entries(index: Any, files: list[str]) -> set[tuple[Any, ...]]:
        a = index.to_arrow().to_pydict()
        return {
            (h, lo, files[s], r, c, d)
            for h, lo, s, r, c, d in zip(
                *(a[k] for k in ("hi", "lo", "segment", "row", "cmp", "tomb")), strict=True
            )
        }

    spec = t._handle.upsert_spec
    assert spec is not None
    built = db.read(lambda conn: key_replay.rebuild(conn, rec, spec, wh, due.seq))
    saved = io_keys.read_index(wh.path(row.location))
    assert entries(saved, json.loads(row.files)) == entries(built.index, built.locations)
    assert len(saved) == 60


def test_retention_deletes_key_index_files_no_snapshot_row_names(
    cat: lamina.Catalog, t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save killed before it registered its file (or mid-write, leaving its temporary)
    leaves orphans in ``_keys``: listed, and deleted by retention past the grace
    period; the registered snapshots stay and a new process still starts from one."""
    from datetime import datetime, timedelta

    from lamina.meta.keyindex import snapshots as key_snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    t.upsert(rows(*[(f"k{i}", 0, i) for i in range(60)]))
    t._handle.ctx.keys.wait()
    keys_dir = Path(cat.warehouse.root) / "u" / "_keys"
    [registered] = [p.name for p in keys_dir.iterdir()]
    (keys_dir / "000000000009-deadbeef.keys").write_bytes(b"never registered")
    (keys_dir / ".000000000009-cafe.keys.0123456789ab.tmp").write_bytes(b"half")
    stray = [
        "u/_keys/.000000000009-cafe.keys.0123456789ab.tmp",
        "u/_keys/000000000009-deadbeef.keys",
    ]
    assert cat.find_orphans(tables=["u"]) == stray
    assert cat.find_orphans(tables=["u"], with_grace=True) == []  # younger than the grace
    later = datetime.now(UTC) + timedelta(days=2)
    assert cat.run_retention(now=later, tables=["u"]).orphan_files == 2
    assert [p.name for p in keys_dir.iterdir()] == [registered]
    t._handle.ctx.keys.forget(t._handle.record.id)
    t.upsert(rows(("k1", 5, -1)))
    assert latest(t)["k1"] == -1 and len(latest(t)) == 60


@pytest.mark.parametrize("write_mode", ["merge-on-read"], indirect=True)  # copy-on-write
# reads the index before it publishes, to know which files to rewrite
def test_a_new_process_reads_the_saved_key_index_at_publish_or_while_spark_writes(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process without the index reads the newest saved snapshot: a local batch's
    upsert at publish, in its own thread; a Spark DataFrame's upsert starts the read in
    the background (``_prefetch_keys``) and its publish takes that read; a read of a
    snapshot that is no longer the newest is not taken (the newest is read then)."""
    import threading
    from concurrent.futures import Future

    from lamina.meta import keyindex as key_index
    from lamina.meta.keyindex import snapshots as key_snapshots
    from lamina.operations import upsert as upsert_mod

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    for b in range(3):
        t.upsert(rows(*[(f"k{i}", b, b * 1000 + i) for i in range(40 * b, 40 * b + 40)]))
    t._handle.ctx.keys.wait()  # the snapshot at 80 keys, saved in the background
    loads: list[tuple[str, int]] = []
    real = key_index._load

    def load(wh: Any, row: Any, table: Any) -> Any:
        loads.append((threading.current_thread().name, int(row.seq)))
        return real(wh, row, table)

    monkeypatch.setattr(key_index, "_load", load)
    keys, tid = t._handle.ctx.keys, t._handle.record.id
    keys.forget(tid)  # as a new process
    t.upsert(rows(("k1", 9, -1)))
    assert loads == [("MainThread", 2)]  # the snapshot at 80 keys, at publish
    assert keys._loading == {} and latest(t)["k1"] == -1 and len(latest(t)) == 120

    keys.forget(tid)
    loads.clear()
    upsert_mod._prefetch_keys(t._handle)  # what a Spark DataFrame's upsert starts with
    t.upsert(rows(("k3", 9, -3)))
    assert loads == [("lamina-key-index", 2)]  # read in the background, then taken
    assert keys._loading == {} and latest(t)["k3"] == -3 and len(latest(t)) == 120

    keys.forget(tid)
    loads.clear()
    stale: Future[Any] = Future()
    stale.set_exception(AssertionError("a stale snapshot's read was taken"))
    keys._loading[tid] = ("u/_keys/older.keys", stale)
    t.upsert(rows(("k2", 9, -2)))
    assert loads == [("MainThread", 2)] and keys._loading == {}
    assert latest(t)["k2"] == -2 and len(latest(t)) == 120


@MERGE_ON_READ_STORAGE
def test_a_decimal_comparison_column_orders_by_value(cat: lamina.Catalog) -> None:
    """A decimal comparison column (precision <= 18) orders by its value, negative ones
    included, ties to the later record; the same after the index is rebuilt from the
    files; all_versions gives the stored values back. Wider decimals are refused."""
    from decimal import Decimal as D

    version = pa.decimal128(12, 3)
    schema = pa.schema(
        [pa.field("k", pa.string(), nullable=False), ("ver", version), ("v", pa.int64())]
    )
    t = cat.create_table("d", schema, primary_key="k", comparison_column="ver")

    def put(*recs: tuple[str, str, int]) -> None:
        t.upsert(pa.Table.from_pylist([{"k": k, "ver": D(x), "v": v} for k, x, v in recs], schema))

    put(("a", "-1.500", 1), ("b", "2.000", 1), ("c", "999999999.999", 1))
    put(("a", "-1.501", 2), ("b", "10.000", 2), ("c", "999999999.998", 2))  # a, c: older
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {"a": 1, "b": 2, "c": 1}
    t._handle.ctx.keys.forget(t._handle.record.id)  # rebuilt from the files
    put(("a", "-1.500", 3), ("b", "9.999", 3))  # a: a tie wins; b: older
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {"a": 3, "b": 2, "c": 1}
    stored = t.to_arrow(all_versions=True).sort_by([("k", "ascending"), ("v", "ascending")])
    assert [str(x) for x in stored["ver"].to_pylist()][:3] == ["-1.500", "-1.501", "-1.500"]
    wide = pa.schema([pa.field("k", pa.int64(), nullable=False), ("ver", pa.decimal128(20, 2))])
    with pytest.raises(UpsertError, match="precision <= 18"):
        cat.create_table("wide", wide, primary_key="k", comparison_column="ver")
    assert "wide" not in cat.list_tables()  # nothing created


@MERGE_ON_READ_STORAGE
def test_a_minor_compaction_drops_superseded_records_and_keeps_every_answer(
    t: lamina.Table,
) -> None:
    """Superseded records go; live tombstones stay (hidden, still deciding later
    comparisons); an upsert publishing while the compaction runs is carried onto its
    outputs; every snapshot before reads as it did."""

    commits = [t.upsert(rows(*[(f"k{i}", b * 10 + i, b * 100 + i) for i in range(b, 6)]))
               for b in range(4)]  # fmt: skip
    t.upsert(rows(("k5", 100, 0, True)))  # a tombstone: k5 goes
    before = {c.id: latest(t, c.version) for c in commits}
    stored = t.to_arrow(all_versions=True).num_rows

    def then_upsert(**_: Any) -> None:
        # the compaction read what is superseded, when an upsert supersedes one more
        t.upsert(rows(("k4", 500, -4)))

    with failpoints.armed("compaction.minor.superseded_read", then_upsert):
        c = t.compact()
    assert c is not None and len(t.segments()) == 2  # the compaction's output + the upsert
    assert latest(t) == {"k0": 0, "k1": 101, "k2": 202, "k3": 303, "k4": -4}
    assert {c_.id: latest(t, c_.version) for c_ in commits} == before
    kept = t.to_arrow(all_versions=True).num_rows
    # kept: k0-k4's latest at the time (k4's superseded meanwhile: hidden, still stored),
    # k5's tombstone, and the upsert's own record
    assert kept == 5 + 1 + 1 < stored
    t.upsert(rows(("k5", 50, 5)))  # older than the delete: out of order, k5 stays gone
    assert "k5" not in latest(t)
    t.upsert(rows(("k5", 200, 6)))  # newer: revived
    assert latest(t)["k5"] == 6


def _index_entries(t: lamina.Table) -> set[tuple[Any, ...]]:
    """This process's key index of ``t``, caught up to the latest commit, as (key hash,
    file, row, comparison value, tombstone) tuples."""
    from sqlalchemy import select

    from lamina.meta.schema import tables

    ctx, rec, spec = t._handle.ctx, t._handle.record, t._handle.upsert_spec
    assert spec is not None

    def read(conn: Any) -> set[tuple[Any, ...]]:
        seq = conn.execute(select(tables.c.last_seq).where(tables.c.id == rec.id)).scalar_one()
        st = ctx.keys.state(conn, rec, spec, ctx.warehouse, seq)
        a = st.index.to_arrow().to_pydict()
        return {
            (hi, lo, st.locations[seg], row, cmp, tomb)
            for hi, lo, seg, row, cmp, tomb in zip(*(a[c] for c in a), strict=True)
        }

    got: set[tuple[Any, ...]] = ctx.db.read(read)
    return got


def _same_after_rebuild(t: lamina.Table) -> None:
    """This process's key index equals one rebuilt from the files."""
    mine = _index_entries(t)
    t._handle.ctx.keys.forget(t._handle.record.id)
    assert _index_entries(t) == mine


def _count_rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at each rebuild of a key index from the files."""
    from lamina.meta.keyindex import replay as key_replay

    rebuilds: list[int] = []
    real = key_replay.rebuild

    def counted(*args: Any) -> Any:
        rebuilds.append(1)
        return real(*args)

    monkeypatch.setattr(key_replay, "rebuild", counted)
    return rebuilds


@MERGE_ON_READ_STORAGE
def test_the_key_index_follows_a_compaction_without_a_rebuild(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's index replays a compaction (its outputs' latest records, with the
    vectors carried onto them) instead of rebuilding from every file, and ends equal to
    a rebuilt index, an upsert that landed while the compaction ran included."""

    for b in range(4):
        t.upsert(rows(*[(f"k{i}", b * 10 + i, b * 100 + i) for i in range(b, 8)]))
    t.upsert(rows(("k6", 100, 0, True)))  # a live tombstone
    t.upsert(rows(("k0", -5, -1)))  # out of order

    def then_upsert(**_: Any) -> None:
        t.upsert(rows(("k4", 500, -4), ("k9", 500, 9)))  # publishes while it runs

    with failpoints.armed("compaction.minor.superseded_read", then_upsert):
        assert t.compact() is not None
    rebuilds = _count_rebuilds(monkeypatch)
    caught_up = _index_entries(t)
    assert rebuilds == []  # replayed, not rebuilt
    t._handle.ctx.keys.forget(t._handle.record.id)
    assert _index_entries(t) == caught_up and rebuilds == [1]
    t.upsert(rows(("k4", 400, 44), ("k6", 50, 66), ("k7", 600, 77)))  # older, older, newer
    assert latest(t) == {
        "k0": 0, "k1": 101, "k2": 202, "k3": 303, "k4": -4, "k5": 305, "k7": 77, "k9": 9
    }  # fmt: skip


def test_the_key_index_replays_every_kind_of_commit(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each kind of commit, the index of the process that published it and an
    index caught up from before it (replaying the files it hid and showed) both equal
    one rebuilt from every file; nothing but the forced rebuilds rebuilds."""
    from lamina.core.keyindex import KeyIndex
    from lamina.meta.keyindex.replay import KeyState

    t = cat.create_table(  # ordered by value: each day holds some keys' latest record
        "v", SCHEMA, time_column="ts", primary_key="key", comparison_column="value",
        delete_column="deleted",
    )  # fmt: skip

    keys, tid = t._handle.ctx.keys, t._handle.record.id
    rebuilds = _count_rebuilds(monkeypatch)
    day = 24 * 60

    def check(write: Any) -> None:
        _index_entries(t)  # current
        st = keys._states[tid]
        before = KeyState(
            KeyIndex.from_arrow(st.index.to_arrow()), st.seq, list(st.locations), dict(st.codes)
        )
        n = len(rebuilds)
        write()
        published = _index_entries(t)
        keys._states[tid] = before
        replayed = _index_entries(t)
        assert len(rebuilds) == n, "caught up by a rebuild"
        keys.forget(tid)
        assert published == replayed == _index_entries(t)

    for d in range(4):  # keys k0-k7 spread over 4 days, each key's records on two days
        t.upsert(rows(*[(f"k{i}", ((i + d) % 4) * day + d, d * 10 + i) for i in range(8)]))
    t.upsert(rows(("k7", 5 * day, 99, True)))  # a live tombstone on day 6
    check(lambda: t.upsert(rows(("k1", 6 * day, 111), ("k2", 0, -2))))  # newer; older
    shown = latest(t)
    check(lambda: t.overwrite(rows(("k3", day + 1, 333)), interval="2024-01-02/2024-01-03"))
    assert len(latest(t)) < len(shown)  # keys whose latest record was there went
    check(lambda: t.refresh(rows(("k4", 2 * day + 7, 444)), interval="2024-01-03/2024-01-04"))
    first = min(s.interval.start for s in t.segments())
    check(lambda: t.delete_segments([s.id for s in t.segments() if s.interval.start == first]))
    check(lambda: t.compact())
    check(lambda: t.compact(mode="major", segment_granularity="WEEK"))
    assert 0 < len(latest(t)) < len(shown)


@MERGE_ON_READ_STORAGE
def test_the_key_index_replays_runs_of_upserts_in_one_step(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index caught up over many commits replays each run of upserts in a row in one
    step (the vectors as of the run's last upsert), other commits one by one, and equals
    the index rebuilt from every file: a key upserted twice in a run, an out-of-order
    record, a tombstone revived in the same run, one revived and deleted again in the
    next, keys whose latest record an overwrite removed between two runs."""
    from lamina.core.keyindex import KeyIndex
    from lamina.meta.keyindex import replay as key_replay

    t = cat.create_table(
        "r", SCHEMA, time_column="ts", primary_key="key", comparison_column="value",
        delete_column="deleted",
    )  # fmt: skip
    keys, tid = t._handle.ctx.keys, t._handle.record.id
    day = 24 * 60
    t.upsert(rows(*[(f"k{i}", (i % 3) * day, i) for i in range(9)]))
    _index_entries(t)
    st = keys._states[tid]
    before = key_replay.KeyState(
        KeyIndex.from_arrow(st.index.to_arrow()), st.seq, list(st.locations), dict(st.codes)
    )
    t.upsert(rows(("k1", day, 10), ("k2", 0, 20)))  # a run: k1 twice, k2 moves day
    t.upsert(rows(("k1", 2 * day, 11), ("k3", day, -3)))  # k3 out of order
    t.upsert(rows(("k4", 0, 40, True)))  # a tombstone
    t.upsert(rows(("k4", day, 41), ("k7", 0, 70, True)))  # k4 revived in the same run
    t.overwrite(rows(("k5", 2 * day + 1, 55)), interval="2024-01-03/2024-01-04")  # k1, k8 go
    t.upsert(rows(("k7", day, 71), ("k6", 2 * day, 66)))  # k7 revived; k6 into the new day
    t.upsert(rows(("k9", 0, 9), ("k6", day, 67), ("k7", 0, 72, True)))  # k7 deleted again
    steps: list[int] = []
    real = key_replay.add_files

    def counted(st: Any, wh: Any, spec: Any, schema: Any, files: dict[str, Any]) -> None:
        steps.append(len(files))
        real(st, wh, spec, schema, files)

    monkeypatch.setattr(key_replay, "add_files", counted)
    keys._states[tid] = before
    replayed = _index_entries(t)
    assert len(steps) == 3  # four upserts, the overwrite, two upserts
    keys.forget(tid)
    assert replayed == _index_entries(t)
    assert latest(t) == {"k0": 0, "k2": 20, "k3": 3, "k4": 41, "k5": 55, "k6": 67, "k9": 9}


@MERGE_ON_READ_STORAGE
def test_a_major_compaction_keeps_each_keys_latest_record(cat: lamina.Catalog) -> None:
    """HOUR chunks into DAY ones, sorted by value: only each key's latest record (and
    live tombstones) is rewritten; every answer, past snapshots included, stays; a
    later older record stays out of order, a rolled-up compaction is refused."""
    t = cat.create_table(
        "h", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted",
        segment_granularity="HOUR",
    )  # fmt: skip
    commits = [
        t.upsert(rows(*[(f"k{i}", b * 70 + i, b * 100 + i) for i in range(b, 6)])) for b in range(4)
    ]
    commits.append(t.upsert(rows(("k5", 400, 0, True))))  # a tombstone: k5 goes
    before = {c.id: latest(t, c.version) for c in commits}
    stored = t.to_arrow(all_versions=True).num_rows
    with pytest.raises(UpsertError, match="rollup"):
        t.compact(mode="major", rollup={"dimensions": ["key"], "metrics": {"value": "sum"}})
    c = t.compact(mode="major", segment_granularity="DAY", sort_by=["value"])
    assert c is not None
    assert {s.interval.end - s.interval.start for s in t.segments()} == {24 * 3600 * 10**6}
    assert latest(t) == {"k0": 0, "k1": 101, "k2": 202, "k3": 303, "k4": 304}
    assert {c_.id: latest(t, c_.version) for c_ in commits} == before
    assert t.to_arrow(all_versions=True).num_rows == 5 + 1 < stored  # + k5's tombstone
    assert cat.sql("SELECT count(*) AS n FROM h").column("n")[0].as_py() == 5
    t.upsert(rows(("k5", 300, 5), ("k4", 200, -1)))  # both older: out of order
    t.upsert(rows(("k3", 500, 33)))
    assert latest(t) == {"k0": 0, "k1": 101, "k2": 202, "k3": 33, "k4": 304}


def test_a_major_compaction_into_finer_segments_takes_whole_segments(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """The week in one WEEK segment, then one day of it into HOUR segments: the
    compaction grows to the whole WEEK segment. Shown in part, that file would hide its
    records under the HOUR chunks, and their copies would not show either (a copy shows
    only where the file it copies went). Answers, past snapshots and the change feed
    stay (a read-path hunt found the loss)."""
    day = 24 * 60
    t.upsert(rows(("a", day + 5 * 60, 1), ("b", 5 * day + 19 * 60, 2), ("c", 5 * day + 600, 3)))
    t.upsert(rows(("a", day + 6 * 60, 10), ("d", 3 * day, 4), ("c", 5 * day + 700, 0, True)))
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    want = {"a": 10, "b": 2, "d": 4}
    before = t.history()[-1]
    c = t.compact(mode="major", interval="2024-01-06/2024-01-07", segment_granularity="HOUR")
    assert c is not None
    assert latest(t) == want and latest(t, before.version) == want
    assert t.count() == 3
    assert sorted(cat.sql("SELECT key FROM u").column("key").to_pylist()) == sorted(want)
    assert all(s.interval.end - s.interval.start == 3600 * 10**6 for s in t.segments())
    changes = t.read_changes(before.seq)
    assert sorted(changes.filter(pc.equal(changes["_change"], "insert"))["key"].to_pylist()) == (
        sorted(changes.filter(pc.equal(changes["_change"], "delete"))["key"].to_pylist())
    )


def test_a_major_compaction_of_a_day_with_no_latest_record_leaves_it_empty(
    t: lamina.Table,
) -> None:
    """(The history checker met it: a later overwrite removes the empty segment.)"""
    day = 24 * 60
    t.upsert(rows(("a", 1, 1), ("b", 2, 1)))
    t.upsert(rows(("a", day + 1, 2), ("b", day + 2, 2)))  # day 2 supersedes day 1
    assert t.compact(mode="major", interval="2024-01-01/2024-01-02") is not None
    every = t.segments(all=True)
    first = min(s.interval for s in every)
    assert any(s.interval == first and s.location is None for s in every)  # empty segment
    assert all(s.interval != first for s in t.segments()) and latest(t) == {"a": 2, "b": 2}
    t.overwrite(rows(("c", 5, 3)), interval="2024-01-01/2024-01-02")
    assert latest(t) == {"a": 2, "b": 2, "c": 3}
    assert _index_entries(t) == _index_entries(t)  # caught up
    t.upsert(rows(("a", 3, 9)))  # older than day 2's: out of order
    assert latest(t) == {"a": 2, "b": 2, "c": 3}


def test_auto_compaction_sorts_an_upsert_table_by_its_policy(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """A policy that sorts makes auto-compaction run major compactions of an upsert
    table too; the answers stay; a rollup policy is skipped with the reason."""
    for b in range(3):
        t.upsert(rows(*[(f"k{i}", b * 10 + i, b * 100 + i) for i in range(6)]))
    t.set_properties(**{"compaction.sort_by": "value"})
    results = cat.compact_auto(tables=["u"])
    assert results and all(r.commit is not None for r in results if r.status.action == "major")
    assert any(r.commit is not None and r.commit.action == "OVERWRITE" for r in results)
    assert latest(t) == {f"k{i}": 200 + i for i in range(6)}
    assert t.to_arrow(all_versions=True).num_rows == 6
    t.set_properties(
        **{"compaction.rollup": '{"dimensions": ["key"], "metrics": {"value": "sum"}}'}
    )
    skipped = [r for r in cat.compact_auto(tables=["u"]) if r.status.action == "major"]
    assert skipped and all(r.error and "one record per key" in r.error for r in skipped)
    assert latest(t) == {f"k{i}": 200 + i for i in range(6)}


def test_upserts_during_a_major_compaction_stay_the_latest(t: lamina.Table) -> None:
    """An upsert publishing while a major compaction runs keeps its records, a tie with
    the record the compaction rewrites included (it came later); the compaction's
    copies of what it superseded stay hidden, also when the newer record is removed
    again before the compaction publishes (the history checker found that case)."""

    day = 24 * 60
    t.upsert(rows(("a", 10, 1), ("b", 10, 1), ("c", 10, 1), ("d", 10, 1, True), ("f", 10, 1)))

    def then_upsert(table: object) -> None:  # read at the base; now an upsert publishes
        t.upsert(rows(("a", 10, 2), ("b", 11, 2), ("c", 9, 2), ("d", 10, 2)))
        t.upsert(rows(("f", 2 * day, 2)))  # f: newer, on another day...
        t.refresh(rows(("g", 2 * day, 1)), interval="2024-01-03/2024-01-04")  # ...and gone

    with failpoints.armed("compaction.major.read", then_upsert):
        assert t.compact(mode="major", interval="2024-01-01/2024-01-02") is not None
    # a: a tie goes to the later upsert; b: newer; c: older, stays out; d: a tie with
    # the tombstone goes to the later record, which revives it; f: superseded, then its
    # newer record removed: no record (its older ones stay superseded)
    want = {"a": 2, "b": 2, "c": 1, "d": 2, "g": 1}
    assert latest(t) == want
    t._handle.ctx.keys.forget(t._handle.record.id)  # rebuilt from the files
    t.upsert(rows(("e", 10, 1)))
    assert latest(t) == {**want, "e": 1}


def test_a_major_compaction_of_a_partial_upsert_table_merges_nothing_again(
    pt: lamina.Table,
) -> None:
    pt.upsert(pa.Table.from_pylist([prow("a", 1, clicks=1), prow("b", 1, clicks=5)], PSCHEMA))
    pt.upsert(pa.Table.from_pylist([prow("a", 2, clicks=2)], PSCHEMA))
    want = pstate(pt)
    assert want["a"]["clicks"] == 3
    assert pt.compact(mode="major") is not None
    assert pstate(pt) == want
    pt.upsert(pa.Table.from_pylist([prow("a", 3, clicks=4)], PSCHEMA))
    assert pstate(pt)["a"]["clicks"] == 7


@MERGE_ON_READ_STORAGE
def test_a_run_whose_records_are_all_superseded_compacts_to_an_empty_segment(
    t: lamina.Table,
) -> None:
    """(The random history checker found it: the rewrite raised ValueError.)"""
    day = 24 * 60
    first = t.upsert(rows(("a", 1, 1)))
    t.upsert(rows(("b", 2, 2)))  # day 1: two small segments
    t.upsert(rows(("a", day + 1, 3), ("b", day + 1, 4)))  # day 2 supersedes both
    c = t.compact()
    assert c is not None
    day1 = [
        s for s in t.segments() if s.interval.start == min(x.interval.start for x in t.segments())
    ]
    assert [s.row_count for s in day1] == [0]
    assert latest(t) == {"a": 3, "b": 4} and latest(t, first.version) == {"a": 1}


@MERGE_ON_READ_STORAGE
def test_a_segment_with_many_superseded_records_is_rewritten_without_them(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """Pinot's upsert compaction: once a segment's deletion vectors supersede
    compaction.max_superseded_percent of its records (default 10), auto-compaction
    rewrites it without them, however it was compacted before; below that, nothing."""
    t.set_properties(**{"compaction.small_segment_rows": 1})  # no segment is small
    first = t.upsert(rows(*[(f"k{i:03d}", 1, i) for i in range(100)]))  # one segment
    t.upsert(rows(*[(f"k{i:03d}", 2, -i) for i in range(9)]))  # 9% superseded
    assert [r.status.status for r in cat.compact_auto(dry_run=True)] == ["COMPLETE"]
    t.upsert(rows(("k050", 3, -50)))  # 10%
    (st,) = [r.status for r in cat.compact_auto(dry_run=True)]
    assert (st.status, st.action) == ("PENDING", "minor")
    assert "10% of their records superseded" in st.reason
    assert t.compact() is not None and t.compact() is None  # t.compact() does it too
    t.upsert(rows(("k051", 3, -51)))
    t.upsert(rows(*[(f"k{i:03d}", 4, -i) for i in range(60, 69)]))  # 10 of its 90
    (st,) = [r.status for r in cat.compact_auto(dry_run=True)]  # compacted, yet pending
    assert (st.status, st.action) == ("PENDING", "minor")
    want, before = latest(t), latest(t, first.version)
    (done,) = [r for r in cat.compact_auto() if r.commit is not None]
    assert latest(t) == want and latest(t, first.version) == before
    assert t.to_arrow(all_versions=True).num_rows == 100  # the superseded ones went
    assert [r.status.status for r in cat.compact_auto(dry_run=True)] == ["COMPLETE"]
    got = cat.sql("SELECT count(*) AS n, sum(value) AS s FROM u").to_pylist()
    assert got == [{"n": 100, "s": sum(want.values())}]


def test_a_refresh_replaces_the_records_stored_in_its_interval(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """As an overwrite of the interval (default: the whole table), in one commit; the
    index catches up with it (the next upsert resolves against what is left)."""
    day = 24 * 60
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1), ("c", 2 * day, 1)))  # days 1 and 3
    t.refresh(rows(("a", day + 1, 5), ("d", day, 5)), interval=("2024-01-02", "2024-01-04"))
    assert latest(t) == {"a": 5, "b": 1, "d": 5}  # c's record on day 3 went
    t.upsert(rows(("a", 2, 9), ("b", 2, 7)))  # a's is older than the refresh's: out of order
    assert latest(t) == {"a": 5, "b": 7, "d": 5}
    got = cat.sql("SELECT key, value FROM u ORDER BY key").to_pylist()
    assert got == [{"key": "a", "value": 5}, {"key": "b", "value": 7}, {"key": "d", "value": 5}]
    r = t.refresh(rows(("z", 3 * day, 0)))  # the whole table
    assert latest(t) == {"z": 0} and r.action == "REFRESH"
    assert latest(t, c1.version) == {"a": 1, "b": 1, "c": 1}  # time travel as before


def test_consistent_push_is_refused_on_upsert_tables(cat: lamina.Catalog, t: lamina.Table) -> None:
    with pytest.raises(UpsertError, match="consistent_push is not available"):
        cat.create_table("p", SCHEMA, time_column="ts", primary_key="key", consistent_push=True)
    assert "p" not in cat.list_tables()
    with pytest.raises(UpsertError, match="consistent_push is not available"):
        t.set_properties(consistent_push=True)
    assert cat.load_table("u").consistent_push is False


def test_an_overwrite_replaces_the_records_stored_in_its_chunks(t: lamina.Table) -> None:
    """The records stored in the chunks go; the new ones are upserted against those
    elsewhere; a key whose latest record went has none (its older ones elsewhere stay
    superseded, as when Pinot removes a segment)."""
    day = 24 * 60
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1)))  # day 1
    t.upsert(rows(("a", day + 1, 2), ("c", day + 1, 3)))  # day 2
    assert latest(t) == {"a": 2, "b": 1, "c": 3}
    t.overwrite(rows(("b", 2, 10), ("d", 1, 4)))  # day 1: a's old record and b go
    assert latest(t) == {"a": 2, "b": 10, "c": 3, "d": 4}
    t.overwrite(rows(("c", day + 1, 30)), interval=("2024-01-02", "2024-01-03"))
    assert latest(t) == {"b": 10, "c": 30, "d": 4}  # a's latest went: a has none
    t.overwrite(rows(("c", 1, 99)))  # day 1: older than c's record on day 2
    assert latest(t) == {"c": 30}
    assert latest(t, c1.version) == {"a": 1, "b": 1}  # time travel as before


@pytest.mark.parametrize("rebuilt", [False, True])
def test_second_units_compare_and_hash_as_upserted_after_a_rebuild_and_a_compaction(
    cat: lamina.Catalog, rebuilt: bool
) -> None:
    """What a type hunt found: Parquet has no unit of seconds, so files of a
    ``timestamp[s]`` or ``time32[s]`` column read back in milliseconds; the key index
    rebuilt from them, and a major compaction's records read back, compared a newer
    record as 1000x older (it never showed) and hashed a key as another (two rows)."""
    schema = pa.schema(
        [
            ("ts", pa.timestamp("s")),
            pa.field("k", pa.time32("s"), nullable=False),
            ("v", pa.int64()),
        ]
    )
    t = cat.create_table("secs", schema, time_column="ts", primary_key="k")

    def put(second: int, *kv: tuple[int, int]) -> None:
        ts = datetime(2024, 1, 1, 0, 0, second)
        t.upsert(
            pa.table(
                {
                    "ts": pa.array([ts] * len(kv), pa.timestamp("s")),
                    "k": pa.array([k for k, _ in kv], pa.time32("s")),
                    "v": [v for _, v in kv],
                },
                schema=schema,
            )
        )

    def forget() -> None:
        if rebuilt:  # as a new process: the index comes from the files
            t._handle.ctx.keys.forget(t._handle.record.id)

    def latest() -> dict[Any, int]:
        got = {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}
        assert t.count() == len(got)  # one row per key
        return got

    put(10, (0, 1), (3600, 1))
    forget()
    put(20, (0, 2), (3600, 2))
    assert sorted(latest().values()) == [2, 2]
    t.compact(mode="major")
    forget()
    put(30, (0, 3))
    put(15, (3600, 9))  # older than the stored :20 record: out of order
    got = latest()
    assert sorted(got.values()) == [2, 3]
    assert cat.sql("SELECT count(*) AS n FROM secs").to_pylist() == [{"n": 2}]


def test_retention_between_a_plan_and_its_vectors_fails_the_read(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """A soak: a read plans its segments in one catalog read and looks up their deletion
    vectors in another. Retention committing in between (another process's) deleted the
    snapshot's vectors, and the read showed every superseded record (two per key). It
    now fails with SnapshotNotFoundError, as a read planned after retention does."""
    t.set_properties(replaced_segments_retention="0s", orphan_grace_period="0s")
    t.upsert(rows(("a", 0, 1), ("b", 0, 1)))
    second = t.upsert(rows(("a", 1, 2), ("b", 1, 2)))
    t.compact()  # replaces both files: retention may delete them and their vectors
    assert latest(t, second.version) == {"a": 2, "b": 2}

    def retention_meanwhile(ctx: Any, plan: Any) -> None:
        # another process's retention commits its catalog transaction between the
        # plan's read and the vectors' read (its files are deleted after it)
        from lamina.meta.retention import retention
        from lamina.meta.tables import now_us

        retention(ctx.db, "u", now_us(), 0, 0, ctx.stale_after_s)

    with (
        failpoints.armed("read.plan.before_deletes", retention_meanwhile),
        pytest.raises(lamina.SnapshotNotFoundError, match="no longer readable"),
    ):
        t.to_arrow(as_of=second.version)
    assert latest(t) == {"a": 2, "b": 2}


@MERGE_ON_READ_STORAGE
def test_retention_before_all_versions_reads_validity_fails_the_read(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """The same race in all_versions: the seqs a record shows between are read after
    the plan; with retention in between, every record showed valid until now."""
    t.set_properties(replaced_segments_retention="0s", orphan_grace_period="0s")
    t.upsert(rows(("a", 0, 1), ("b", 0, 1)))
    second = t.upsert(rows(("a", 1, 2), ("b", 1, 2)))
    t.compact()
    got = t.to_arrow(as_of=second.version, all_versions=True).to_pylist()
    assert sorted((r["key"], r["value"], r["$valid_until"]) for r in got) == [
        ("a", 1, second.seq),
        ("a", 2, None),
        ("b", 1, second.seq),
        ("b", 2, None),
    ]

    def retention_meanwhile(table: Any, plan: Any) -> None:
        from lamina.meta.retention import retention
        from lamina.meta.tables import now_us

        retention(cat.context.db, "u", now_us(), 0, 0, cat.context.stale_after_s)

    with (
        failpoints.armed("upsert.read.validity.before", retention_meanwhile),
        pytest.raises(lamina.SnapshotNotFoundError, match="no longer readable"),
    ):
        t.to_arrow(as_of=second.version, all_versions=True)
