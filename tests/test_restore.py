"""``t.restore(version or time)`` and ``lamina restore``: one RESTORE commit makes the
table show exactly what that version showed, writing no file but copies of files whose
rows deletion vectors hid since; history stays intact
(every version readable as before, the restore a version of its own), the change feed
reports what it changed, and whatever cannot be restored exactly is refused with the
table unchanged."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina import failpoints
from lamina.cli import app
from lamina.errors import (
    CommitConflictError,
    InvalidArgumentError,
    LineageError,
    RestoreError,
    SnapshotNotFoundError,
    SnapshotTooOldError,
)
from tests.helpers import SCHEMA, events

FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[lamina.Catalog]:
    with lamina.connect(warehouse=str(tmp_path / "wh")) as c:
        yield c


def rows(t: lamina.Table, as_of: Any = None) -> list[tuple[Any, ...]]:
    got = t.to_arrow(as_of=as_of, columns=["ts", "k", "v"])
    return sorted(zip(*(got.column(c).to_pylist() for c in got.column_names), strict=True))


def state(cat: lamina.Catalog, t: lamina.Table) -> tuple[Any, ...]:
    """What a refused restore leaves exactly as it was."""
    done = [c for c in t.history() if c.state == "COMPLETED"]
    return rows(t), sorted(s.id for s in t.segments(all=True)), [c.id for c in done]


@contextmanager
def unchanged(cat: lamina.Catalog, t: lamina.Table) -> Iterator[None]:
    before = state(cat, t)
    yield
    assert state(cat, t) == before


def layered(cat: lamina.Catalog) -> tuple[lamina.Table, list[lamina.Commit]]:
    """Versions that stack: appends, an overwrite of one day, a day emptied, a minor
    compaction of a day's partitions, a month overwritten under finer chunks."""
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    done = [
        t.append(events(days=3, per_day=4)),
        t.append(events(days=2, per_day=3, seed=1)),
        t.overwrite(events(days=1, per_day=2, start="2024-01-02", seed=2)),
        t.overwrite(events(days=1, per_day=1).slice(0, 0), interval="2024-01-03/2024-01-04"),
    ]
    compacted = t.compact(mode="minor")
    assert compacted is not None
    done.append(compacted)
    done.append(t.append(events(days=1, per_day=5, seed=3)))
    return t, done


def test_restore_makes_each_earlier_version_current_exactly(cat: lamina.Catalog) -> None:
    t, done = layered(cat)
    before = {c.version: rows(t, c) for c in done}
    last = done[-1].version
    for c in done[:-1]:
        r = t.restore(c.version)
        assert r.action == "RESTORE" and r.version == last + 1 and not r.already_applied
        assert r.metadata == {"restored_version": c.version}
        assert rows(t) == before[c.version] == rows(t, r)  # the restore is a version too
        sql = cat.sql("SELECT ts, k, v FROM t ORDER BY ts, k, v").to_pylist()
        assert [tuple(x.values()) for x in sql] == before[c.version]
        assert t.count() == len(before[c.version])
        assert {v: rows(t, v) for v in before} == before  # history intact
        last = r.version
    # back to the latest, by the Commit a write returned
    t.restore(done[-1])
    assert rows(t) == before[done[-1].version]


def test_restore_by_time_and_then_writes_go_on(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=2, per_day=3))
    t.overwrite(events(days=1, per_day=1, seed=1))
    assert c1.completed_at is not None
    t.restore(c1.completed_at.isoformat())
    assert rows(t) == rows(t, c1)
    more = t.append(events(days=1, per_day=2, seed=2))  # appends join the restored chunk
    assert t.count() == 6 + 2 and more.version == 4
    t.overwrite(events(days=1, per_day=1, seed=3), interval="2024-01-01/2024-01-02")
    assert t.count() == 1 + 3  # day 2 as restored
    t.restore(1)
    assert rows(t) == rows(t, 1)


def test_the_change_feed_reports_what_a_restore_changed(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=2, per_day=3))
    t.overwrite(events(days=1, per_day=1, seed=1))  # day 1 replaced
    t.append(events(days=1, per_day=2, start="2024-01-02", seed=2))
    r = t.restore(1)
    feed = t.read_changes(3, r)
    got = Counter((x["_change"], x["k"], x["v"]) for x in feed.to_pylist())
    now, then = Counter((k, v) for _, k, v in rows(t)), Counter((k, v) for _, k, v in rows(t, 3))
    assert got == Counter({("delete", *kv): n for kv, n in (then - now).items()}) + Counter(
        {("insert", *kv): n for kv, n in (now - then).items()}
    )
    assert {x["_commit_seq"] for x in feed.to_pylist()} == {r.version}
    assert ("delete", 0, rows(t, 3)[0][2]) in got  # a row of day 1 the restore undid
    assert not any(k >= 3 and c == "insert" for c, k, _ in got)  # day 2's kept rows: no change


def test_retention_after_a_restore_keeps_the_files_it_shows(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=2, per_day=3))
    t.overwrite(events(days=2, per_day=1, seed=1))
    want = rows(t, c1)
    t.restore(c1)
    t.set_properties(replaced_segments_retention="0s")
    report = cat.run_retention(now=FUTURE)
    assert report.segment_files == 2  # the overwrite's files; version 1's are shown again
    assert rows(t) == want and cat.find_orphans() == []
    with pytest.raises(SnapshotTooOldError, match="oldest restorable is version 3"):
        t.restore(c1)  # retention purged version 1: its rows are shown by version 3 only


def test_a_refresh_table_restores_across_pushes(cat: lamina.Catalog) -> None:
    t = cat.create_table(
        "ev", SCHEMA, time_column="ts", ingestion_type="REFRESH", consistent_push=True
    )
    first = t.refresh(events(days=2, per_day=3, value=1.0))
    t.refresh(events(days=1, per_day=2, value=2.0))
    t.restore(first)
    assert rows(t) == rows(t, first) and cat.sql("SELECT count(*) FROM ev")[0][0].as_py() == 6
    t.refresh(events(days=1, per_day=4, value=3.0))
    assert {r[2] for r in rows(t)} == {3.0}  # a push after the restore swaps as ever
    assert t.lineage()[-1].state == "COMPLETED"


def test_refused_restores_leave_the_table_unchanged(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=1, per_day=3))
    t.append(events(days=1, per_day=2, seed=1))
    cases: list[tuple[Any, type[Exception], str]] = [
        (1.5, InvalidArgumentError, "not float"),
        ("1", InvalidArgumentError, "pass a version as an int"),
        (None, RestoreError, "needs the version"),
        (7, SnapshotNotFoundError, "has no version 7: its versions are 1 to 2"),
        ("2001-01-01", SnapshotTooOldError, "cannot restore.*oldest restorable is version 1"),
    ]
    for target, error, match in cases:
        with unchanged(cat, t), pytest.raises(error, match=match):
            t.restore(target)
    with unchanged(cat, t), pytest.raises(lamina.MetadataError):
        t.restore(c1, metadata={"restored_version": 5})


def test_a_restore_conflicts_with_a_write_committed_meanwhile(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=1, per_day=3))
    t.append(events(days=1, per_day=2, seed=1))
    other = cat.load_table("t")

    started: list[int] = []

    def append_meanwhile(commit_id: int) -> None:
        if not started:  # once: the append publishes through this failpoint too
            started.append(commit_id)
            other.append(events(days=1, per_day=1, seed=2))

    armed = failpoints.armed("write.publish.before", append_meanwhile)
    with armed, pytest.raises(CommitConflictError, match="RESTORE"):
        t.restore(c1)
    assert t.count() == 3 + 2 + 1 and t.history()[-2].state == "ABORTED"


def test_an_upsert_table_is_restored_to_the_records_it_showed(
    cat: lamina.Catalog, write_mode: str
) -> None:
    """Its key index only moves forward: the restore writes again each key's latest
    record of that version, replacing every chunk, in one RESTORE commit; reads, the
    change feed and later upserts then go on from there."""
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us")),
            pa.field("key", pa.string(), nullable=False),
            ("v", pa.int64()),
            ("gone", pa.bool_()),
        ]
    )
    u = cat.create_table(
        "u", schema, time_column="ts", primary_key="key", comparison_column="v",
        delete_column="gone",
    )  # fmt: skip

    def rec(key: str, v: int, day: int = 1, gone: bool = False) -> pa.Table:
        return pa.table(
            {"ts": [dt.datetime(2024, 1, day)], "key": [key], "v": [v], "gone": [gone]},
            schema=schema,
        )

    u.upsert(pa.concat_tables([rec("a", 1), rec("b", 1, day=2)]))
    one = u.history()[-1]
    u.upsert(pa.concat_tables([rec("a", 5), rec("c", 5, day=3)]))
    u.upsert(rec("b", 9, day=2, gone=True))  # b deleted
    before = u.to_arrow(as_of=one).sort_by("key").to_pylist()
    done = u.restore(one)
    assert done.action == "RESTORE" and done.metadata["restored_version"] == one.version
    assert u.to_arrow().sort_by("key").to_pylist() == before  # a=1, b=1; no c
    assert u.count() == 2 and [c.state for c in u.history()].count("COMPLETED") == 4
    feed = u.read_changes(done.version - 1)
    changed = sorted(zip(feed["_change"].to_pylist(), feed["key"].to_pylist(), strict=True))
    assert ("delete", "c") in changed and ("insert", "b") in changed
    u.upsert(rec("a", 0))  # older than a's restored record (v=1): it loses
    u.upsert(rec("b", 2, day=2))  # newer: it wins
    got = {r["key"]: r["v"] for r in u.to_arrow().to_pylist()}
    assert got == {"a": 1, "b": 2}
    assert {r["key"]: r["v"] for r in u.to_arrow(as_of=done.version - 1).to_pylist()} == {
        "a": 5, "c": 5,
    }  # fmt: skip


def test_a_push_in_progress_is_refused(cat: lamina.Catalog) -> None:
    t = cat.create_table("ev", SCHEMA, time_column="ts", consistent_push=True)
    first = t.append(events(days=1, per_day=2))
    push = t.push()
    push.__enter__()
    push.append(events(days=1, per_day=3, seed=1))
    with unchanged(cat, t), pytest.raises(LineageError, match="push is in progress"):
        t.restore(first)
    push.__exit__(None, None, None)
    assert t.count() == 2 + 3
    t.restore(first)
    assert t.count() == 2


def test_lamina_restore(cat: lamina.Catalog, tmp_path: Path) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=2, per_day=3))
    t.overwrite(events(days=1, per_day=1, seed=1))
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})

    def run(*args: str, code: int = 0) -> str:
        got = runner.invoke(app, ["--warehouse", str(tmp_path / "wh"), "restore", "t", *args])
        assert got.exit_code == code, got.output
        return got.output

    out = run("1")
    assert "version 3 (restore) on t: as of version 1; 2 segments shown again" in out
    assert rows(t) == rows(t, c1)
    assert c1.completed_at is not None
    assert "version 4 (restore) on t: as of version 1" in run(c1.completed_at.isoformat())
    assert "neither a version" in run("yesterday", code=2)
    assert "has no version 9" in run("9", code=1)
    assert "oldest restorable is version 1" in run("2001-01-01", code=1)
    history = runner.invoke(app, ["--warehouse", str(tmp_path / "wh"), "history", "t"]).output
    assert [line.split()[:2] for line in history.splitlines()[1:]] == [
        ["1", "APPEND"],
        ["2", "OVERWRITE"],
        ["3", "RESTORE"],
        ["4", "RESTORE"],
    ]


def test_writes_that_began_before_a_restore_publish_as_beside_an_overwrite(
    cat: lamina.Catalog,
) -> None:
    """An overwrite that began before a restore conflicts with it (it would replace rows
    it never saw); an append joins the restored chunks, its rows on top."""
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    c1 = t.append(events(days=1, per_day=3))
    t.append(events(days=1, per_day=2, seed=1))
    other = cat.load_table("t")
    started: list[int] = []

    def restore_meanwhile(commit_id: int) -> None:
        if not started:  # once: the restore publishes through this failpoint too
            started.append(commit_id)
            other.restore(c1)

    armed = failpoints.armed("write.publish.before", restore_meanwhile)
    with armed, pytest.raises(CommitConflictError, match="conflicts with commit"):
        t.overwrite(events(days=1, per_day=7, seed=2))
    assert rows(t) == rows(t, c1)
    started.clear()
    with failpoints.armed("write.publish.before", restore_meanwhile):
        late = t.append(events(days=1, per_day=4, seed=3))
    assert late.version == 5 and t.count() == 3 + 4  # version 4: the second restore
    done = sorted((c.version, c.action) for c in t.history() if c.version)
    assert done[-2:] == [(4, "RESTORE"), (5, "APPEND")]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_a_restore_takes_row_level_changes_back(cat: lamina.Catalog, mode: str) -> None:
    """A delete (or update) hid rows by deletion vectors, or rewrote their files: the
    restore shows the version before it exactly — a file whose rows vectors hid since is
    copied with the rows it showed then — and the change feed's net effect is the rows
    it brought back (the rows of a copied file it did not change come as a delete and
    an insert that cancel); the delete's own version still reads as it did."""
    t = cat.create_table(
        "t", SCHEMA, time_column="ts", segment_granularity="DAY",
        properties={"write.update.mode": mode},
    )  # fmt: skip
    t.append(events(days=2, per_day=6))
    before = rows(t)
    deleted = t.delete("k % 3 = 0")
    assert deleted is not None
    t.update("k % 3 = 1", set={"v": "v + 100"})
    after = rows(t)
    r = t.restore(1)
    assert rows(t) == before
    assert rows(t, deleted.version) != before and rows(t, r.version - 1) == after
    feed = Counter(
        (x["_change"], x["k"], x["v"]) for x in t.read_changes(r.version - 1, r).to_pylist()
    )
    now, then = Counter((k, v) for _, k, v in before), Counter((k, v) for _, k, v in after)
    ins = Counter({tuple(kv): n for (c, *kv), n in feed.items() if c == "insert"})
    dels = Counter({tuple(kv): n for (c, *kv), n in feed.items() if c == "delete"})
    assert ins - dels == now - then and dels - ins == then - now
    assert cat.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": len(before)}]
    t.delete("k % 3 = 2")  # the restored table takes row-level changes again
    assert rows(t) == [x for x in before if x[1] % 3 != 2]
