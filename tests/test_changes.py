"""Incremental reads (t.read_changes): per-commit inserts and deletes, in seq order.

The invariant checked everywhere: the snapshot at seq a, with the changes of
(a, b] applied in order, is the snapshot at seq b (as multisets of rows).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
from collections import Counter

import pyarrow as pa
import pytest

import lamina
from lamina.core.changes import merge, subtract
from lamina.core.interval import Interval
from lamina.errors import InvalidArgumentError, SchemaError, SnapshotNotFoundError
from tests.helpers import SCHEMA, events

KEY = ["ts", "k", "v", "s"]


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table("c", SCHEMA, time_column="ts", segment_granularity="DAY")


def rows(table: pa.Table) -> Counter[tuple]:
    return Counter(zip(*(table.column(c).to_pylist() for c in KEY), strict=True))


def snapshot_rows(t: lamina.Table, seq: int) -> Counter[tuple]:
    if seq == 0:
        return Counter()
    commit = next(c for c in t.history() if c.seq == seq)
    return rows(t.to_arrow(as_of=commit.version))


def apply(base: Counter[tuple], changes: pa.Table) -> Counter[tuple]:
    out = Counter(base)
    seqs = changes.column("_commit_seq").to_pylist()
    assert seqs == sorted(seqs), "in completion order"
    for change, row in zip(changes.column("_change").to_pylist(), rows_list(changes), strict=True):
        if change == "insert":
            out[row] += 1
        else:
            assert out[row] > 0, f"deleted a row that was not visible: {row}"
            out[row] -= 1
    return +out


def rows_list(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in KEY), strict=True))


def check_all_ranges(t: lamina.Table) -> None:
    last = max((c.seq for c in t.history() if c.seq is not None), default=0)
    for a in range(last + 1):
        for b in range(a, last + 1):
            assert apply(snapshot_rows(t, a), t.read_changes(a, b)) == snapshot_rows(t, b), (a, b)


def test_appends_are_inserts_tagged_with_their_commit(t: lamina.Table) -> None:
    c1 = t.append(events(days=2, per_day=3))
    c2 = t.append(events(days=1, per_day=2, seed=1))
    ch = t.read_changes(0)
    assert ch.column("_change").to_pylist() == ["insert"] * 8
    assert ch.column("_commit_id").to_pylist() == [c1.id] * 6 + [c2.id] * 2
    assert ch.column("_commit_seq").to_pylist() == [c1.seq] * 6 + [c2.seq] * 2
    assert t.read_changes(c1.seq).num_rows == 2
    assert t.read_changes(c2.seq).num_rows == 0
    check_all_ranges(t)


def test_an_overwrite_deletes_what_it_hides_and_inserts_its_rows(t: lamina.Table) -> None:
    t.append(events(days=3, per_day=4))
    c = t.overwrite(events(days=1, per_day=2, seed=5, start="2024-01-02"))
    ch = t.read_changes(c.seq - 1)
    assert Counter(ch.column("_change").to_pylist()) == {"delete": 4, "insert": 2}
    assert set(ch.column("_commit_seq").to_pylist()) == {c.seq}
    check_all_ranges(t)


def test_a_push_shows_up_when_it_completes_not_when_it_started(
    t: lamina.Table,
) -> None:
    """Completion order: a reader that pulled while the push ran never misses it."""
    t.set_properties(consistent_push="true")
    t.append(events(days=1, per_day=2))
    with t.push() as p:
        p.append(events(days=1, per_day=3, seed=1))
        polled = max(c.seq for c in t.history() if c.seq is not None)
        assert t.read_changes(0, polled).num_rows == 2  # the push is not visible yet
    ch = t.read_changes(polled)
    assert ch.num_rows == 3 and set(ch.column("_change").to_pylist()) == {"insert"}
    t.revert_replace(t.lineage()[-1].id)
    check_all_ranges(t)


def test_refresh_and_rollback(t: lamina.Table) -> None:
    t.set_properties(consistent_push="true")
    t.append(events(days=3, per_day=3))
    t.refresh(events(days=2, per_day=2, seed=3))
    t.revert_replace(t.lineage()[-1].id)  # the rollback: the old rows come back
    t.refresh(events(days=2, per_day=1, seed=4))
    check_all_ranges(t)


def test_random_histories_fold_to_their_snapshots(t: lamina.Table) -> None:
    rng = random.Random(7)
    t.set_properties(consistent_push="true")
    for step in range(8):
        op = rng.choice(["append", "append", "overwrite", "refresh", "delete", "push"])
        day = rng.randint(1, 4)
        data = events(
            days=rng.randint(1, 2), per_day=rng.randint(1, 3), seed=step, start=f"2024-01-0{day}"
        )
        if op == "append":
            t.append(data)
        elif op == "overwrite":
            t.overwrite(data)
        elif op == "refresh":
            t.refresh(data, interval=(f"2024-01-0{day}", f"2024-01-0{day + 1}"))
        elif op == "delete" and t.segments():
            free = [s.id for s in t.segments()]
            with contextlib.suppress(lamina.LaminaError):  # held by a lineage entry
                t.delete_segments([rng.choice(free)])
        elif op == "push":
            with t.push() as p:
                p.append(data)
    check_all_ranges(t)


def test_a_table_without_time_column(cat: lamina.Catalog) -> None:
    t = cat.create_table("dim", pa.schema([("k", pa.int64()), ("v", pa.float64())]))
    c1 = t.append(pa.table({"k": [1, 2], "v": [1.0, 2.0]}))
    c2 = t.refresh(pa.table({"k": [3], "v": [3.0]}))
    ch = t.read_changes(c1.seq, c2.seq, columns=["k"])
    assert sorted(zip(ch["_change"].to_pylist(), ch["k"].to_pylist(), strict=True)) == [
        ("delete", 1),
        ("delete", 2),
        ("insert", 3),
    ]
    assert ch.schema.names == ["k", "_change", "_commit_id", "_commit_seq"]


@pytest.mark.parametrize(
    ("after", "until", "match"),
    [(2, 1, "must not exceed"), (0, 99, "versions run from 0"), (-1, None, "versions run from 0")],
)
def test_seqs_out_of_range_are_refused(
    t: lamina.Table, after: int, until: int | None, match: str
) -> None:
    t.append(events(days=1, per_day=1))
    t.append(events(days=1, per_day=1, seed=1))
    with pytest.raises(SnapshotNotFoundError, match=match):
        t.read_changes(after, until)


def test_versions_of_numpy_integers_and_commits_are_read_and_other_types_refused(
    t: lamina.Table,
) -> None:
    """Before, SQLite compared a numpy seq as a BLOB (an empty feed) and a float matched
    no commit (every row inserted again). A Commit stands for its version."""
    import numpy as np

    t.append(events(days=1, per_day=2))
    c = t.append(events(days=1, per_day=3, seed=1))
    assert t.read_changes(np.int64(1)).num_rows == 3
    assert t.read_changes(np.int32(0), np.int64(c.seq)).num_rows == 5
    assert t.read_changes(0, c).num_rows == 5 and t.read_changes(c).num_rows == 0
    for bad in (1.5, True, "1"):
        with pytest.raises(InvalidArgumentError, match="after_seq takes a table version"):
            t.read_changes(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="until_seq takes a table version"):
            t.read_changes(0, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("columns", "match"),
    [(["nope"], "nope"), (["k", "k"], "named twice"), ("k", "pass a list"), ("kv", "pass a list")],
)
def test_bad_columns_are_refused(t: lamina.Table, columns: object, match: str) -> None:
    t.append(events(days=1, per_day=1))
    with pytest.raises(SchemaError, match=match):
        t.read_changes(0, columns=columns)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match=match):
        t.to_arrow(columns=columns)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "metadata",
    [{"compaction": "major"}, {"entry": "x", "job": 1}, {"rollup": {}}, {1: "x"}, ["x"],
     {"when": dt.datetime(2024, 1, 1)}, {"x": float("nan")}],
)  # fmt: skip
def test_commit_metadata_lamina_writes_itself_or_cannot_keep_is_refused(
    cat: lamina.Catalog, t: lamina.Table, metadata: object
) -> None:
    """A user's ``{"compaction": "major"}`` made the change feed skip the commit as a
    compaction: lamina's own keys are refused, before anything is written."""
    t.append(events(days=1, per_day=2))
    u = cat.create_table(
        "u", pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())]),
        primary_key="k", comparison_column="v",
    )  # fmt: skip
    one = pa.table({"k": pa.array([1], pa.int64()), "v": [1]}, schema=u.schema)
    before = [len(t.history()), len(u.history())]
    writes = [
        lambda: t.append(events(days=1, per_day=1), metadata=metadata),
        lambda: t.overwrite(events(days=1, per_day=1), metadata=metadata),
        lambda: t.refresh(events(days=1, per_day=1), metadata=metadata),
        lambda: t.transaction(metadata=metadata),
        lambda: t.push(metadata=metadata),
        lambda: u.upsert(one, metadata=metadata),
        lambda: u.append(one, metadata=metadata),
    ]
    for write in writes:
        with pytest.raises(lamina.MetadataError):
            write()  # type: ignore[no-untyped-call]
    assert [len(t.history()), len(u.history())] == before
    c = t.append(events(days=1, per_day=1, seed=3), metadata={"job": "nightly", "compacted": 1})
    assert c.metadata == {"job": "nightly", "compacted": 1}
    assert t.read_changes(c.seq - 1).num_rows == 1


def test_changes_retention_deleted_are_refused(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.set_properties(replaced_segments_retention="0s")
    t.append(events(days=1, per_day=2))
    c = t.overwrite(events(days=1, per_day=1, seed=1))
    cat.run_retention(now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    with pytest.raises(SnapshotNotFoundError, match="retention"):
        t.read_changes(0)
    assert t.read_changes(c.seq).num_rows == 0


def test_interval_sets() -> None:
    iv = Interval.of
    assert merge([iv(5, 7), iv(0, 2), iv(2, 3), iv(6, 9)]) == [iv(0, 3), iv(5, 9)]
    assert subtract([iv(0, 10)], [iv(2, 3), iv(5, 6)]) == [iv(0, 2), iv(3, 5), iv(6, 10)]
    assert subtract([iv(0, 10)], [iv(-5, 20)]) == []
    assert subtract([iv(0, 2), iv(4, 6)], []) == [iv(0, 2), iv(4, 6)]


def test_a_table_created_again_continues_its_seqs(cat: lamina.Catalog) -> None:
    """A consumer's checkpoint of a dropped table must not skip the first commits of
    the table created again under its name (a hunt: seqs restarted at 1, so
    read_changes(3) returned only the 4th and 5th; Hudi's instants are times)."""
    t = cat.create_table("e", SCHEMA, time_column="ts")
    for i in range(3):
        t.append(events(days=1, per_day=1, value=float(i), seed=i))
    checkpoint, old_id = t.history()[-1].seq, t._handle.record.id
    cat.drop_table("e")
    t = cat.create_table("E2", SCHEMA, time_column="ts")  # another name: its own seqs
    assert t.append(events(days=1, per_day=1)).seq == 1
    t = cat.create_table("E", SCHEMA, time_column="ts")  # the name again, in any case
    assert t._handle.record.id != old_id  # SQLite gave the greatest id again: caches key on it
    for i in range(5):
        t.append(events(days=1, per_day=1, value=10.0 + i, seed=i))
    assert checkpoint is not None and t.history()[0].seq == checkpoint + 1
    got = t.read_changes(checkpoint).column("v").to_pylist()
    assert sorted(got) == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert t.to_arrow(as_of=t.history()[0].version).num_rows == 1


def test_a_commit_without_a_seq_is_refused_without_a_wrong_hint(t: lamina.Table) -> None:
    """An aborted commit has no version: the error said "pass its .seq" (None)."""
    with pytest.raises(KeyError), t.transaction() as tx:
        tx.append(events(days=1, per_day=1))
        raise KeyError("fail the transaction")
    (aborted,) = [c for c in t.history() if c.state == "ABORTED"]
    with pytest.raises(InvalidArgumentError, match="not completed"):
        t.read_changes(aborted)
