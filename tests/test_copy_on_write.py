"""Copy-on-write upserts (``write.update.mode = copy-on-write``): an upsert rewrites, in
its own commit, the files holding the records it supersedes, so that readers apply no
deletion vector there. Every answer (latest records, time travel, the change feed,
SQL) equals a merge-on-read table's given the same writes; what differs is what is
stored. The upsert semantics tests (test_upsert*.py) run in both modes."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina import failpoints
from lamina.errors import PropertyError

T0 = datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("key", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us"), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("deleted", pa.bool_()),
        pa.field("value", pa.float64()),
    ]
)
MODES = ("merge-on-read", "copy-on-write")


def table(cat: lamina.Catalog, name: str, mode: str) -> lamina.Table:
    return cat.create_table(
        name,
        SCHEMA,
        time_column="ts",
        primary_key=["key"],
        comparison_column="version",
        delete_column="deleted",
        segment_granularity="DAY",
        properties={"write.update.mode": mode},
    )


def batch(rows: list[tuple[int, int, int, bool, float]]) -> pa.Table:
    """(key, day, version, deleted, value) records."""
    return pa.Table.from_pylist(
        [
            {"key": k, "ts": T0 + timedelta(days=d, seconds=k), "version": v, "deleted": x,
             "value": val}
            for k, d, v, x, val in rows
        ],
        schema=SCHEMA,
    )  # fmt: skip


def random_batches(seed: int, n: int = 8) -> list[pa.Table]:
    """Upserts with updates, ties, out-of-order records, deletes and revivals, spread
    over four days."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rows = [
            (rng.randrange(60), rng.randrange(4), rng.randrange(6) + i, rng.random() < 0.1,
             float(rng.randrange(1000)))
            for _ in range(rng.randrange(5, 40))
        ]  # fmt: skip
        out.append(batch(rows))
    return out


def answer(t: lamina.Table, as_of: int | None = None) -> list[dict[str, Any]]:
    return t.to_arrow(as_of=as_of).sort_by("key").to_pylist()


def vectors(t: lamina.Table) -> dict[str, Any]:
    """The deletion vectors a read of the latest snapshot applies, by file."""
    return {p: list(rows) for p, rows in t.scan().deletes.items() if len(rows)}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_answer_equals_merge_on_reads(cat: lamina.Catalog, seed: int) -> None:
    """Latest records, every past snapshot, SQL and the change feed are the same in
    both modes; a copy-on-write table's vectors hide only what no rewrite can drop
    (tombstones, which decide later comparisons, and its own superseded records)."""
    mor, cow = table(cat, "mor", MODES[0]), table(cat, "cow", MODES[1])
    commits: list[tuple[lamina.Commit, lamina.Commit]] = []
    for b in random_batches(seed):
        commits.append((mor.upsert(b), cow.upsert(b)))
    assert answer(cow) == answer(mor)
    for a, b in commits:
        assert answer(cow, b.version) == answer(mor, a.version)
    q = "SELECT count(*) AS n, sum(value) AS s, max(version) AS v FROM {}"
    assert cat.sql(q.format("cow")).to_pylist() == cat.sql(q.format("mor")).to_pylist()
    cols = ["key", "version", "deleted", "value", "_change"]

    def feed(t: lamina.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r.values()) for r in t.read_changes(0).select(cols).to_pylist())

    assert feed(cow) == feed(mor)
    assert any(c.removed for _, c in commits), "no upsert rewrote a file"
    new_files = {str(s.location) for s in cow.segments() if s.minor_version == 0}
    for path, rows in vectors(cow).items():
        if path not in new_files:  # a copy hides its live tombstones only
            flags = pq.read_table(path, columns=["deleted"]).column("deleted")
            assert all(flags.take(pa.array(rows)).to_pylist()), path
    assert sum(map(len, vectors(cow).values())) < sum(map(len, vectors(mor).values()))


def test_an_update_leaves_no_vector_to_apply(cat: lamina.Catalog) -> None:
    """Updates that win (the common case) leave the table with no deletion vector: the
    files they superseded records in are replaced by copies without them."""
    cow = table(cat, "cow", MODES[1])
    cow.upsert(batch([(k, k % 3, 1, False, 1.0) for k in range(30)]))
    before = {s.id for s in cow.segments()}
    done = cow.upsert(batch([(k, 3, 2, False, 2.0) for k in range(0, 30, 4)]))
    assert vectors(cow) == {}
    assert set(done.removed) == before  # every day held an updated key
    assert cow.count() == 30 and sum(r["value"] for r in answer(cow)) == 30 + 8
    assert [s.minor_version > 0 for s in cow.segments()].count(True) == 3


def test_another_catalog_replays_a_copy_on_write_upsert(
    cat: lamina.Catalog, catalog_url: str, tmp_path: Any
) -> None:
    """Another catalog's key index, caught up by replaying the rewrites, resolves the
    next upsert as the writer's own index would."""
    cow = table(cat, "cow", MODES[1])
    other = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    try:
        theirs = other.load_table("cow")
        theirs.upsert(batch([(1, 0, 1, False, 1.0), (2, 1, 1, False, 1.0)]))  # index built
        cow.upsert(batch([(k, k % 2, 1, False, 1.0) for k in range(3, 20)]))
        cow.upsert(batch([(k, 2, 5, False, 5.0) for k in range(1, 20, 3)]))  # rewrites
        theirs.upsert(batch([(k, 3, 6, False, 6.0) for k in range(1, 20, 2)]))  # replays
        want = {k: 1.0 for k in range(1, 20)}
        want.update({k: 5.0 for k in range(1, 20, 3)})
        want.update({k: 6.0 for k in range(1, 20, 2)})
        assert {r["key"]: r["value"] for r in answer(cow)} == want
        assert vectors(cat.load_table("cow")) == {}
    finally:
        other.close()


def test_a_file_removed_meanwhile_keeps_vectors_instead(cat: lamina.Catalog) -> None:
    """A compaction that removes a file between the upsert's rewrite and its publish:
    the rewrite is left out, vectors hide the superseded records, nothing is lost."""
    cow = table(cat, "cow", MODES[1])
    for k in range(6):  # six small segments of day 0
        cow.upsert(batch([(k, 0, 1, False, 1.0)]))

    def compact(**_: Any) -> None:
        assert cat.load_table("cow").compact() is not None

    with failpoints.armed("upsert.copy_on_write.rewritten", compact):
        done = cow.upsert(batch([(2, 0, 2, False, 2.0)]))
    assert done.removed == ()  # its rewrite's input went with the compaction
    assert {r["key"]: r["value"] for r in answer(cow)} == {k: 1.0 + (k == 2) for k in range(6)}
    assert sum(map(len, vectors(cow).values())) == 1
    assert cat.find_orphans() == []  # the copy it could not install is deleted


def test_concurrent_upserts_all_publish(cat: lamina.Catalog) -> None:
    """Two threads upserting the same keys with rewrites: no conflict error, and
    exactly one latest record per key."""
    cow = table(cat, "cow", MODES[1])
    cow.upsert(batch([(k, k % 4, 0, False, 0.0) for k in range(40)]))
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            t = cat.load_table("cow")
            for i in range(1, 6):
                t.upsert(batch([(k, (k + i) % 4, i, False, float(w)) for k in range(40)]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in (1, 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    got = answer(cow)
    assert [r["key"] for r in got] == list(range(40))
    assert {r["version"] for r in got} == {5}


def test_a_bad_write_mode_is_refused(cat: lamina.Catalog) -> None:
    with pytest.raises(PropertyError, match="merge-on-read .* copy-on-write"):
        table(cat, "bad", "copy_on_write")
    assert "bad" not in cat.list_tables()
    t = table(cat, "good", MODES[0])
    with pytest.raises(PropertyError, match="write.update.mode"):
        t.set_properties(**{"write.update.mode": "rewrite"})
    t.set_properties(**{"write.update.mode": "Copy-On-Write"})
    assert cat.load_table("good").properties["write.update.mode"] == "copy-on-write"


def test_a_stream_of_small_batches_keeps_few_files(cat: lamina.Catalog) -> None:
    """Each copy-on-write upsert merges the small files beside the ones it rewrites (a
    minor compaction's runs), so a table streamed in small batches does not pile up
    files as a merge-on-read one does until it is compacted."""
    mor, cow = table(cat, "mor", MODES[0]), table(cat, "cow", MODES[1])
    for i in range(10):
        rows = [(100 * i + k, k % 4, i, False, float(i)) for k in range(20)]  # new keys
        rows += [(100 * (i - 1) + k, k % 4, i, False, float(i)) for k in range(8) if i]
        mor.upsert(batch(rows))
        cow.upsert(batch(rows))
    assert answer(cow) == answer(mor)
    assert len(mor.segments()) == 40  # a file per day per batch
    assert len(cow.segments()) <= 8  # per day: the merged one, the last batch's
    assert vectors(cow) == {}
