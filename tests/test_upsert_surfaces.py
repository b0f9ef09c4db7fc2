"""Every API surface of an upsert table against the ground truth: the latest record per
key, ``t.to_arrow()`` (or ``t.to_arrow(as_of=...)``), read right after each commit.

The state: records over three days with updates, an out-of-order record, a delete
(tombstone) and an out-of-order record after it; then the operation under test (minor
and major compaction, overwrite, refresh, deleted segments, retention, a dropped
table) and every surface that answers with rows, counts, changes or key statistics:
``cat.sql`` (pruned by a time bound too), ``t.count``, ``t.to_pandas``,
``t.to_arrow(columns=, interval=)``, time travel, ``t.read_changes``, the command line,
the REST server and ``t.to_spark``. Runs on SQLite and PostgreSQL (``cat``).
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import lamina
from lamina import failpoints
from lamina.cli import app
from lamina.errors import UpsertError
from tests.test_upsert import SCHEMA, rows

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")

with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient

DAY = 24 * 60
FUTURE = dt.datetime(2100, 1, 1)  # retention acts as if every retention period passed
#: the latest records after :func:`build`
WANT = {"a": 3, "b": 4, "c": 1, "e": 1, "f": 1}

runner = CliRunner(
    env={"COLUMNS": "250", "NO_COLOR": "1", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
)


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )


def build(t: lamina.Table) -> list[lamina.Commit]:
    """Five upserts over three days (DAY chunks); the latest records are :data:`WANT`."""
    return [
        t.upsert(rows(("a", 10, 1), ("b", 20, 1), ("c", 30, 1), ("d", 40, 1))),  # day 1
        t.upsert(rows(("a", DAY + 10, 2), ("b", DAY + 20, 2), ("e", DAY + 5, 1))),  # day 2
        t.upsert(rows(("c", 5, 9))),  # older than c's: out of order, c stays 1
        t.upsert(  # day 3: d deleted (a tombstone), a updated, f new
            rows(("d", 2 * DAY + 1, 0, True), ("a", 2 * DAY + 10, 3), ("f", 2 * DAY + 30, 1))
        ),
        t.upsert(rows(("b", DAY + 50, 4), ("e", DAY + 1, 7))),  # b updated; e out of order
    ]


def truth(t: lamina.Table, as_of: int | None = None) -> list[dict[str, Any]]:
    """The ground truth: the snapshot's latest records (one per key), sorted by key."""
    got = sorted(t.to_arrow(as_of=as_of).to_pylist(), key=lambda r: r["key"])
    keys = [r["key"] for r in got]
    assert len(keys) == len(set(keys)), f"a key shows twice: {keys}"
    return got


def by_key(records: list[dict[str, Any]]) -> dict[str, int]:
    return {r["key"]: r["value"] for r in records}


def new_process(t: lamina.Table) -> None:
    """Forget this process's key index of ``t``: the next upsert starts as a new
    process would (from a saved snapshot of the index, else from the files)."""
    t._handle.ctx.keys.forget(t._handle.record.id)


# -- cat.sql ---------------------------------------------------------------------------

#: (query returning key and value, which ground-truth timestamps it selects)
QUERIES: list[tuple[str, Callable[[dt.datetime], bool]]] = [
    ("SELECT key, value FROM u", lambda ts: True),
    (
        "SELECT key, value FROM u WHERE ts >= '2024-01-02' AND ts < '2024-01-03'",
        lambda ts: dt.datetime(2024, 1, 2) <= ts < dt.datetime(2024, 1, 3),
    ),
    (
        "SELECT key, value FROM u WHERE ts BETWEEN '2024-01-01' AND '2024-01-02 00:30:00'",
        lambda ts: dt.datetime(2024, 1, 1) <= ts <= dt.datetime(2024, 1, 2, 0, 30),
    ),
    (
        "SELECT x.key, x.value FROM u AS x WHERE x.ts < TIMESTAMP '2024-01-02 00:30:00'",
        lambda ts: ts < dt.datetime(2024, 1, 2, 0, 30),
    ),
    (
        "SELECT key, value FROM u WHERE ts >= '2024-01-02 00:40:00' AND value > 0",
        lambda ts: ts >= dt.datetime(2024, 1, 2, 0, 40),
    ),
    (
        "SELECT key, value FROM u WHERE ts = '2024-01-02 00:50:00'",
        lambda ts: ts == dt.datetime(2024, 1, 2, 0, 50),
    ),
]


def check_sql(cat: lamina.Catalog, t: lamina.Table) -> None:
    """``cat.sql`` (whole and pruned by time bounds) answers as the latest records."""
    want = truth(t)
    for query, selects in QUERIES:
        got = sorted(cat.sql(query).to_pylist(), key=lambda r: r["key"])
        expected = [{"key": r["key"], "value": r["value"]} for r in want if selects(r["ts"])]
        assert got == expected, query
    agg = cat.sql(
        "SELECT count(*) AS n, count(DISTINCT key) AS k, sum(value) AS s, "
        "bool_or(deleted) AS dead FROM u"
    ).to_pylist()
    total = sum(r["value"] for r in want) if want else None
    assert agg == [{"n": len(want), "k": len(want), "s": total, "dead": False if want else None}]
    with_cte = "WITH v AS (SELECT * FROM u) SELECT count(*) AS n FROM v"
    assert cat.sql(with_cte).to_pylist() == [{"n": len(want)}]


def test_sql_answers_with_the_latest_records_pruned_and_after_compactions(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    build(t)
    assert by_key(truth(t)) == WANT
    check_sql(cat, t)
    assert t.compact() is not None  # minor: superseded records dropped
    assert by_key(truth(t)) == WANT
    check_sql(cat, t)
    t.upsert(rows(("b", DAY + 55, 5), ("g", 2 * DAY + 2, 1)))  # onto the compacted files
    check_sql(cat, t)
    assert t.compact(mode="major", segment_granularity="WEEK", sort_by=["value"]) is not None
    assert by_key(truth(t)) == {**WANT, "b": 5, "g": 1}
    check_sql(cat, t)  # one WEEK file: a day's bound reads a part of it
    t.upsert(rows(("c", 2 * DAY + 3, 0, True), ("a", 0, 100)))  # a delete; a: out of order
    assert by_key(truth(t)) == {"a": 3, "b": 5, "e": 1, "f": 1, "g": 1}
    check_sql(cat, t)


# -- reads and time travel after each kind of commit -------------------------------------


def _op_minor(t: lamina.Table) -> dict[str, int]:
    assert t.compact() is not None
    return WANT


def _op_major(t: lamina.Table) -> dict[str, int]:
    assert t.compact(mode="major", segment_granularity="WEEK", sort_by=["value"]) is not None
    return WANT


def _op_major_same_granularity(t: lamina.Table) -> dict[str, int]:
    assert t.compact(mode="major", sort_by=["value"]) is not None
    return WANT


def _op_overwrite(t: lamina.Table) -> dict[str, int]:
    # day 2's records go: b's latest (b has none then), e's (its new one is taken)
    t.overwrite(rows(("x", DAY + 1, 1), ("e", DAY + 2, 8)), interval="2024-01-02/2024-01-03")
    return {"a": 3, "c": 1, "e": 8, "f": 1, "x": 1}


def _op_refresh(t: lamina.Table) -> dict[str, int]:
    # day 3's records go (a's latest, d's tombstone, f); a's new record is taken
    t.refresh(rows(("y", 2 * DAY + 5, 1), ("a", 2 * DAY + 1, 30)), interval="2024-01-03/2024-01-04")
    return {"a": 30, "b": 4, "c": 1, "e": 1, "y": 1}


def _op_delete_segments(t: lamina.Table) -> dict[str, int]:
    day1 = [
        s.id
        for s in t.segments()
        if s.interval.start == min(x.interval.start for x in t.segments())
    ]
    # commit 1's and the out-of-order record's (one file once a copy-on-write upsert
    # merged them)
    assert 1 <= len(day1) <= 2
    t.delete_segments(day1)
    return {"a": 3, "b": 4, "e": 1, "f": 1}  # c's latest went with day 1


OPS: dict[str, Callable[[lamina.Table], dict[str, int]]] = {
    "minor_compaction": _op_minor,
    "major_compaction_week": _op_major,
    "major_compaction_day": _op_major_same_granularity,
    "overwrite": _op_overwrite,
    "refresh": _op_refresh,
    "delete_segments": _op_delete_segments,
}

INTERVALS = [
    "2024-01-02/2024-01-03",  # a chunk
    "2024-01-02T00:00:00/2024-01-02T00:30:00",  # a part of one
    "2024-01-01T00:20:00/2024-01-03T00:20:00",  # parts of three
]


def check_reads(t: lamina.Table, as_of: int | None, want: list[dict[str, Any]]) -> None:
    """count, to_pandas, to_arrow(columns=, interval=) of a snapshot against ``want``."""
    assert truth(t, as_of) == want
    assert t.count(as_of=as_of) == len(want)
    df = t.to_pandas(as_of=as_of)
    got = sorted(zip(df["key"], df["value"], strict=True))
    assert got == sorted((r["key"], r["value"]) for r in want)
    kv = t.to_arrow(as_of=as_of, columns=["key", "value"])
    assert kv.column_names == ["key", "value"]
    assert sorted(kv.to_pylist(), key=lambda r: r["key"]) == [
        {"key": r["key"], "value": r["value"]} for r in want
    ]
    for iv in INTERVALS:
        lo, hi = (dt.datetime.fromisoformat(x) for x in iv.split("/"))
        sub = t.to_arrow(as_of=as_of, columns=["value", "key"], interval=iv).to_pylist()
        expected = [{"value": r["value"], "key": r["key"]} for r in want if lo <= r["ts"] < hi]
        assert sorted(sub, key=lambda r: r["key"]) == expected, iv


@pytest.mark.parametrize("op", list(OPS))
def test_reads_time_travel_and_the_next_upsert_after(
    cat: lamina.Catalog, t: lamina.Table, op: str
) -> None:
    """After the operation: the latest records are as the upsert rules say; every
    earlier snapshot reads as it did; count, pandas, column and interval reads, SQL
    and the change feed agree with them; the next upsert resolves against them."""
    commits = build(t)
    before = {c.id: truth(t, c.version) for c in commits}
    for c in commits:
        check_reads(t, c.version, before[c.id])
    seq = t.history()[-1].seq
    assert seq is not None
    want = OPS[op](t)
    assert by_key(truth(t)) == want
    check_reads(t, None, truth(t))
    check_reads(t, t.history()[-1].id, truth(t))
    for c in commits:  # time travel, as before
        check_reads(t, c.version, before[c.id])
    check_sql(cat, t)
    state = by_key(before[commits[-1].id])  # the feed since: folds onto the answer
    for r in sorted(
        t.read_changes(seq, columns=["key", "value"]).to_pylist(),
        key=lambda r: (r["_commit_seq"], r["_change"] != "delete"),
    ):
        if r["_change"] == "delete":
            assert state.pop(r["key"]) == r["value"]
        else:
            assert r["key"] not in state
            state[r["key"]] = r["value"]
    assert state == want
    # newer c; a older than its latest (out of order); z new
    t.upsert(rows(("c", 3 * DAY, 11), ("a", 1, -1), ("z", 3 * DAY + 1, 1)))
    assert by_key(truth(t)) == {**want, "c": 11, "z": 1}
    new_process(t)  # a new process, its key index rebuilt from the files
    t.upsert(rows(("c", 3 * DAY - 1, 12), ("z", 3 * DAY + 2, 2)))  # c older: out of order
    assert by_key(truth(t)) == {**want, "c": 11, "z": 2}
    check_sql(cat, t)


def test_an_overwrite_of_part_of_a_coarser_compacted_segment_is_refused(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """After a major compaction into WEEK segments, an overwrite of one DAY chunk would
    leave the WEEK file showing in part, which the key index cannot follow: refused
    (UpsertError, nothing published). An overwrite of the whole week upserts against
    what remains, as without the compaction (``ref``)."""
    ref = cat.create_table(
        "ref", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )
    build(ref)
    build(t)
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    assert by_key(truth(t)) == by_key(truth(ref)) == WANT
    before = len(t.history()), [s.id for s in t.segments()]
    data = rows(("x", DAY + 1, 1), ("e", DAY + 2, 8))
    with pytest.raises(UpsertError, match="whole span"):
        t.overwrite(data, interval="2024-01-02/2024-01-03")
    assert by_key(truth(t)) == WANT
    assert [c.state for c in t.history()].count("COMPLETED") == before[0]
    assert [s.id for s in t.segments()] == before[1]
    (week,) = {s.interval for s in t.segments()}
    for table in (ref, t):
        table.overwrite(data, interval=week)
    assert by_key(truth(ref)) == {"e": 8, "x": 1}
    assert by_key(truth(t)) == by_key(truth(ref))
    for table in (ref, t):
        table.upsert(rows(("b", DAY + 3, 9), ("e", DAY, 0)))  # b new again; e's is older
    assert by_key(truth(t)) == by_key(truth(ref)) == {"b": 9, "e": 8, "x": 1}


def _fold(t: lamina.Table, after_seq: int) -> dict[str, int]:
    """The snapshot of ``after_seq`` with the change feed since applied (checked)."""
    base = next((c.version for c in t.history() if c.seq == after_seq), None)
    state = {} if base is None else by_key(truth(t, base))
    feed = t.read_changes(after_seq, columns=["key", "value"]).to_pylist()
    for r in sorted(feed, key=lambda r: (r["_commit_seq"], r["_change"] != "delete")):
        if r["_change"] == "delete":
            assert state.get(r["key"]) == r["value"], f"deleted {r} is not showing"
            del state[r["key"]]
        else:
            assert r["key"] not in state, f"inserted {r} while its key shows"
            state[r["key"]] = r["value"]
    return state


def test_the_change_feed_of_writes_over_a_coarser_compacted_segment(
    t: lamina.Table,
) -> None:
    """Records that stop showing because a refresh or an overwrite replaces a WEEK
    segment are deletes in the feed; folding the feed gives the latest records."""
    build(t)
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    seq = t.history()[-1].seq
    assert seq is not None
    (week,) = {s.interval for s in t.segments()}
    t.overwrite(rows(("x", DAY + 1, 1), ("a", DAY, 5)), interval=week)  # the week goes
    assert by_key(truth(t)) == {"a": 5, "x": 1}
    assert _fold(t, seq) == by_key(truth(t))
    t.upsert(rows(("y", 10, 1), ("a", DAY + 1, 6)))
    t.compact(mode="major", segment_granularity="WEEK")
    seq2 = t.history()[-1].seq
    assert seq2 is not None
    t.refresh(rows(("z", 3 * DAY, 1)), interval="2024-01-04/2024-01-05")  # the WEEK file goes
    assert by_key(truth(t)) == {"z": 1}
    assert _fold(t, seq2) == _fold(t, seq) == by_key(truth(t))
    assert _fold(t, 0) == by_key(truth(t))


def test_the_change_feed_of_a_file_shown_in_two_pieces(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A WEEK segment a later HOUR segment hides in the middle answers for two time
    spans: updates in both show as delete + insert pairs (the feed kept one span per
    file and lost the other's). Major compactions now take whole segments on upsert
    tables; the layout comes here from a compaction made as earlier versions did (it
    also hid day 2's records, b and e)."""
    import lamina.operations.compaction.span as compaction_span

    build(t)
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    monkeypatch.setattr(compaction_span, "whole_segments", lambda table, iv, g: iv)
    day2 = "2024-01-02/2024-01-03"
    assert t.compact(mode="major", segment_granularity="HOUR", interval=day2) is not None
    seq = t.history()[-1].seq
    assert seq is not None
    t.upsert(rows(("c", 2 * DAY + 40, 7), ("f", 2 * DAY + 31, 8)))  # day 1 and day 3
    assert _fold(t, seq) == by_key(truth(t)) == {"a": 3, "c": 7, "f": 8}


def test_the_change_feed_skips_compactions_that_change_no_record(t: lamina.Table) -> None:
    """As on other tables (test_compaction.py): a minor or major compaction shows no
    record and hides none, so it has no changes to report."""
    build(t)
    seq = t.history()[-1].seq
    assert seq is not None
    assert t.compact() is not None
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    assert by_key(truth(t)) == WANT
    feed = t.read_changes(seq, columns=["key", "value"]).to_pylist()
    assert [(r["_change"], r["key"]) for r in feed] == []


# -- retention ---------------------------------------------------------------------------


def test_retention_keeps_the_latest_records_and_upserts_resolving(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """Retention deletes what compactions, an overwrite and deleted segments replaced:
    the latest answer stays on every surface, no file of it goes, and upserts (in this
    process and in a new one) resolve as before."""
    build(t)
    assert t.compact() is not None
    t.overwrite(rows(("x", DAY + 1, 1), ("e", DAY + 2, 8)), interval="2024-01-02/2024-01-03")
    assert t.compact(mode="major", interval="2024-01-03/2024-01-04", sort_by=["value"])
    first = min(s.interval.start for s in t.segments())
    t.delete_segments([s.id for s in t.segments() if s.interval.start == first])  # day 1
    want = truth(t)
    assert by_key(want) == {"e": 8, "f": 1, "x": 1, "a": 3}
    report = cat.run_retention(now=FUTURE)
    assert report.segment_files > 0
    assert truth(t) == want and t.count() == len(want)
    check_sql(cat, t)
    assert cat.find_orphans() == []
    assert all(Path(str(s.location)).exists() for s in t.segments())
    with cat.engine.connect() as conn:  # vectors of deleted files went with them (a hunt)
        from sqlalchemy import select

        from lamina.meta.schema import deletes, segments

        named = select(segments.c.location).where(segments.c.table_id == t._handle.record.id)
        vectors = select(deletes.c.location).where(deletes.c.table_id == t._handle.record.id)
        assert conn.execute(vectors).all()
        assert conn.execute(vectors.where(deletes.c.location.not_in(named))).all() == []
    with pytest.raises(lamina.SnapshotNotFoundError):
        t.to_arrow(as_of=t.history()[0].version)  # its files are gone: refused, not wrong
    t.upsert(rows(("a", 2 * DAY + 9, -1), ("b", DAY + 3, 9), ("f", 3 * DAY, 2)))
    expected = {"a": 3, "b": 9, "e": 8, "f": 2, "x": 1}  # a: out of order; b: none left
    assert by_key(truth(t)) == expected
    new_process(t)
    t.upsert(rows(("e", DAY + 1, -8), ("x", DAY + 9, 2)))  # e: older; x: newer
    assert by_key(truth(t)) == {**expected, "x": 2}
    check_sql(cat, t)


def _retention_after(name: str, work: Callable[[], None]) -> Any:
    """Arm failpoint ``name`` (a step that plans a read is done, the read's files are
    not read yet) to run ``work`` (another process's, as far as the read can tell) once."""
    done: list[None] = []

    def then_work(**_: Any) -> None:
        if not done:
            done.append(work())

    return failpoints.armed(name, then_work)


def test_reads_of_every_version_and_the_change_feed_racing_retention(
    cat: lamina.Catalog, t: lamina.Table, catalog_url: str
) -> None:
    """A Hudi audit: a file retention deleted between planning and reading raised a
    plain FileNotFoundError from ``all_versions`` and from the change feed of an upsert
    table. A latest ``all_versions`` read now plans again, as a latest read does; the
    change feed raises SnapshotNotFoundError (Hudi's
    testFailEarlyForIncrViewQueryForNonExistingFiles), as it does on other tables."""
    build(t)
    t.set_properties(replaced_segments_retention="0s")
    other = lamina.connect(catalog=catalog_url, warehouse=cat.warehouse.location)

    def compact_and_clean() -> None:
        other.load_table("u").compact(mode="major")
        other.run_retention(now=FUTURE)

    want = t.to_arrow(all_versions=True).num_rows
    with _retention_after("upsert.read.validity.after", compact_and_clean):
        got = t.to_arrow(all_versions=True)
    assert got.num_rows == len(WANT) + 1 < want  # the compaction's: d's tombstone too
    shown = got.filter(pc.is_null(got["$valid_until"]))
    assert by_key(shown.to_pylist()) == by_key(truth(t)) == WANT
    t.upsert(rows(("a", 3 * DAY, 4)))
    with (
        _retention_after("upsert.read.changes_planned", compact_and_clean),
        pytest.raises(lamina.SnapshotNotFoundError, match="read the changes again"),
    ):
        t.read_changes(t.history()[-2].seq)
    other.close()


def test_the_change_feed_after_retention_says_how_to_resume_without_losing_rows(
    cat: lamina.Catalog, t: lamina.Table
) -> None:
    """A Hudi audit: the error said 'read changes after seq N or later'; a consumer that
    did lost the rows of the commits it skipped. It now names the oldest snapshot to
    read whole first; doing so, then reading on from it, gives the table."""
    import re

    build(t)
    t.set_properties(replaced_segments_retention="0s")
    t.compact(mode="major")
    cat.run_retention(now=FUTURE)
    with pytest.raises(lamina.SnapshotNotFoundError) as err:
        t.read_changes(1)
    found = re.search(r"as_of=(\d+).*read changes after version (\d+)", str(err.value))
    assert found is not None, str(err.value)
    whole = t.to_arrow(as_of=int(found[1]))
    t.upsert(rows(("g", 3 * DAY, 7)))
    changes = t.read_changes(int(found[2]))
    assert changes["key"].to_pylist() == ["g"] and whole.num_rows + 1 == t.to_arrow().num_rows


def _saving_key_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process saves its key index after every upsert (as it does for big tables)."""
    from lamina.meta.keyindex import snapshots as key_snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 1)


@pytest.mark.parametrize("retention", [False, True])
def test_a_process_starting_from_a_saved_key_index_after_retention(
    cat: lamina.Catalog, t: lamina.Table, monkeypatch: pytest.MonkeyPatch, retention: bool
) -> None:
    """A new process starts from the newest saved key index and replays the commits
    since. Retention deleting what those commits replaced must not change how it
    resolves: the overwrite removed b's and e's latest records, so their new records
    show."""
    _saving_key_indexes(monkeypatch)
    build(t)
    t._handle.ctx.keys.wait()
    assert list((Path(cat.warehouse.root) / "u" / "_keys").glob("*.keys"))  # saved
    t.overwrite(rows(("x", DAY + 1, 1)), interval="2024-01-02/2024-01-03")  # b, e go
    want = by_key(truth(t))
    assert want == {"a": 3, "c": 1, "f": 1, "x": 1}
    if retention:
        assert cat.run_retention(now=FUTURE).segment_files > 0
    assert by_key(truth(t)) == want
    new_process(t)
    t.upsert(rows(("b", DAY + 3, 9), ("e", 0, 5)))  # b and e have no record: both show
    assert by_key(truth(t)) == {**want, "b": 9, "e": 5}


@pytest.mark.parametrize("retention", [False, True])
def test_a_partial_upsert_after_retention_merges_only_with_a_latest_record(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch, retention: bool
) -> None:
    """INCREMENT: b's latest record went with an overwrite, so b's next record is
    taken whole — never merged with b's older, superseded record."""
    _saving_key_indexes(monkeypatch)
    p = cat.create_table(
        "p", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted",
        partial_upsert={"value": "INCREMENT"},
    )  # fmt: skip
    p.upsert(rows(("a", 10, 1), ("b", 20, 1)))
    p.upsert(rows(("a", DAY + 10, 2), ("b", DAY + 20, 2)))
    p.upsert(rows(("a", 2 * DAY + 10, 4)))
    assert by_key(truth(p)) == {"a": 7, "b": 3}
    p.overwrite(rows(("x", DAY + 1, 1)), interval="2024-01-02/2024-01-03")
    assert by_key(truth(p)) == {"a": 7, "x": 1}
    if retention:
        assert cat.run_retention(now=FUTURE).segment_files > 0
    new_process(p)
    p.upsert(rows(("b", 3 * DAY, 10)))
    assert by_key(truth(p)) == {"a": 7, "b": 10, "x": 1}


# -- the catalog -------------------------------------------------------------------------


def test_dropping_an_upsert_table(cat: lamina.Catalog, t: lamina.Table) -> None:
    """drop_table removes an upsert table (its deletion vectors with it); a new table
    of that name starts empty and resolves its own upserts."""
    build(t)
    assert by_key(truth(t)) == WANT
    cat.drop_table("u")
    assert "u" not in cat.list_tables()
    again = cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )
    assert truth(again) == []
    build(again)
    assert by_key(truth(again)) == WANT
    check_sql(cat, again)


# -- the command line --------------------------------------------------------------------


def cli(catalog_url: str, cat: lamina.Catalog, *args: str) -> str:
    result = runner.invoke(
        app, ["--catalog", catalog_url, "--warehouse", cat.warehouse.root, *args]
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_cli_query_compact_ingest_upsert_and_retention(
    catalog_url: str, cat: lamina.Catalog, t: lamina.Table, tmp_path: Path
) -> None:
    """`lamina query` (pruned too) answers as the latest records after `lamina
    compact` (minor, major), `lamina ingest --mode overwrite`, `lamina upsert` and
    `lamina retention`."""
    build(t)

    def query_matches() -> None:
        for query, selects in QUERIES:
            got = json.loads(cli(catalog_url, cat, "query", query, "--format", "json"))
            expected = [
                {"key": r["key"], "value": r["value"]} for r in truth(t) if selects(r["ts"])
            ]
            assert sorted(got, key=lambda r: r["key"]) == expected, query
        n = json.loads(cli(catalog_url, cat, "query", "SELECT count(*) AS n FROM u", "-f", "json"))
        assert n == [{"n": t.count()}]

    query_matches()
    assert "compacted u (minor)" in cli(catalog_url, cat, "compact", "u")
    assert by_key(truth(t)) == WANT
    query_matches()
    out = cli(catalog_url, cat, "compact", "u", "--mode", "major", "--granularity", "DAY",
              "--sort-by", "value")  # fmt: skip
    assert "compacted u (major)" in out and by_key(truth(t)) == WANT
    query_matches()
    day2 = tmp_path / "day2.parquet"
    pq.write_table(rows(("x", DAY + 1, 1), ("e", DAY + 2, 8)), day2)
    cli(catalog_url, cat, "ingest", "u", str(day2), "--mode", "overwrite",
        "--interval", "2024-01-02/2024-01-03")  # fmt: skip
    assert by_key(truth(t)) == {"a": 3, "c": 1, "e": 8, "f": 1, "x": 1}
    query_matches()
    more = tmp_path / "more.parquet"
    pq.write_table(rows(("b", DAY + 3, 9), ("a", 0, -1), ("c", 3 * DAY, 0, True)), more)
    assert "(upsert) on u" in cli(catalog_url, cat, "upsert", "u", str(more))
    assert by_key(truth(t)) == {"a": 3, "b": 9, "e": 8, "f": 1, "x": 1}
    query_matches()
    want = truth(t)
    cli(catalog_url, cat, "retention", "--now", "2100-01-01T00:00:00")
    assert truth(t) == want
    query_matches()
    assert json.loads(cli(catalog_url, cat, "orphans", "--format", "json")) == []


def test_cli_tables_lists_the_rows_a_query_sees(
    catalog_url: str, cat: lamina.Catalog, t: lamina.Table
) -> None:
    """`lamina tables` lists each table's rows: for an upsert table, its latest
    records (what `SELECT count(*)` and t.count() answer), not every stored record."""
    build(t)
    (row,) = json.loads(cli(catalog_url, cat, "tables", "--format", "json"))
    assert row["table"] == "u"
    assert row["rows"] == t.count() == len(truth(t)) == 5


def _key_stats(catalog_url: str, cat: lamina.Catalog) -> dict[str, Any]:
    (got,) = json.loads(cli(catalog_url, cat, "keys", "u", "--format", "json"))
    assert isinstance(got, dict)
    return got


def test_cli_keys_reports_the_deletion_vectors_of_the_latest_snapshot(
    catalog_url: str, cat: lamina.Catalog, t: lamina.Table
) -> None:
    """`lamina keys`: keys (latest records and live tombstones) and the rows deletion
    vectors hide in the snapshot's files — stored records that do not show — before
    and after compactions and retention."""

    def check() -> None:
        got = _key_stats(catalog_url, cat)
        stored = t.to_arrow(all_versions=True).num_rows  # the snapshot's files' records
        shown = len(truth(t))
        files = {str(s.location) for s in t.segments()}
        assert got["keys"] == shown + 1  # + d's live tombstone
        assert got["hidden_rows"] == stored - shown
        assert got["files_with_vectors"] <= len(files)

    build(t)
    check()
    assert t.compact() is not None  # superseded records dropped: only the tombstone hides
    check()
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    check()
    cat.run_retention(now=FUTURE)
    check()


# -- the REST server -------------------------------------------------------------------------


@pytest.fixture
def client(cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    from lamina.rest import create_app

    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    with TestClient(create_app(cat, token=None)) as c:
        yield c


def test_rest_compactions_and_listings_of_an_upsert_table(
    cat: lamina.Catalog, t: lamina.Table, client: TestClient
) -> None:
    """The REST server has no endpoint returning rows, SQL results, counts or changes;
    its compactions (minor, major) keep every answer and its listings work."""
    commits = build(t)
    before = {c.id: truth(t, c.version) for c in commits}
    paths = {r.path for r in client.app.routes if hasattr(r, "path")}  # type: ignore[attr-defined]
    assert not any(w in p for p in paths for w in ("rows", "sql", "query", "count", "changes"))
    statuses = client.get("/tables/u/compaction")
    assert statuses.status_code == 200 and statuses.json()
    r = client.post("/tables/u/compact", json={"mode": "minor"})
    assert r.status_code == 200 and r.json()["commitId"] is not None
    assert by_key(truth(t)) == WANT
    check_sql(cat, t)
    r = client.post(
        "/tables/u/compact",
        json={"mode": "major", "segmentGranularity": "WEEK", "sortBy": ["value"]},
    )
    assert r.status_code == 200 and r.json()["segmentsAfter"] == 1
    assert by_key(truth(t)) == WANT
    check_sql(cat, t)
    assert {c.id: truth(t, c.version) for c in commits} == before
    segs = client.get("/tables/u/segments")
    assert segs.status_code == 200 and len(segs.json()) == 1
    r = client.post("/tables/u/startReplaceSegments", json={"segmentsFrom": [], "segmentsTo": []})
    assert r.status_code == 400 and "upsert table" in r.json()["detail"]  # refused, cleanly
    assert by_key(truth(t)) == WANT


# -- Spark -----------------------------------------------------------------------------------


@pytest.mark.spark
def test_to_spark_reads_the_latest_records_and_every_version_at_every_snapshot(
    spark: Any, local_cat: lamina.Catalog
) -> None:
    t = local_cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted"
    )
    commits = build(t)
    assert t.compact() is not None
    commits.append(t.upsert(rows(("b", DAY + 55, 5))))
    assert t.compact(mode="major", segment_granularity="WEEK") is not None
    commits.append(t.upsert(rows(("e", DAY + 6, 0, True))))

    def spark_rows(as_of: int | None, interval: Any = None) -> list[tuple[str, int]]:
        df = t.to_spark(spark, as_of=as_of, interval=interval)
        return sorted((r["key"], r["value"]) for r in df.select("key", "value").collect())

    cols = ["key", "value", "deleted", "$valid_from", "$valid_until"]

    def versions(spark_: bool, as_of: int | None, interval: Any = None) -> list[tuple[Any, ...]]:
        """Every stored record with its validity: through Spark, or ``to_arrow``."""
        if spark_:
            df = t.to_spark(spark, as_of=as_of, interval=interval, all_versions=True)
            got = [tuple(r[c] for c in cols) for r in df.collect()]
        else:
            tb = t.to_arrow(as_of=as_of, interval=interval, all_versions=True)
            got = list(zip(*(tb[c].to_pylist() for c in cols), strict=True))
        return sorted(got, key=repr)

    for as_of in [None, *(c.version for c in commits)]:
        assert spark_rows(as_of) == sorted(by_key(truth(t, as_of)).items())
        assert versions(True, as_of) == versions(False, as_of)
    day2 = [(r["key"], r["value"]) for r in truth(t) if r["ts"].date() == dt.date(2024, 1, 2)]
    assert spark_rows(None, "2024-01-02/2024-01-03") == sorted(day2)
    assert by_key(truth(t)) == {"a": 3, "b": 5, "c": 1, "f": 1}
    # the WEEK segment read in part; superseded records ended, some never shown
    part = versions(True, None, "2024-01-02/2024-01-03")
    assert part == versions(False, None, "2024-01-02/2024-01-03")
    assert any(r[4] is not None for r in part) and any(r[4] is None for r in part)
    first = commits[0].id
    assert versions(True, first) == versions(False, first) != []
    # a plain table's rows a row-level delete hid end at the delete's version
    plain = local_cat.create_table("plain", SCHEMA, time_column="ts")
    first = plain.append(rows(("a", DAY, 1), ("b", DAY + 1, 2)))
    gone = plain.delete("key = 'a'")
    assert gone is not None
    df = plain.to_spark(spark, all_versions=True)
    got = sorted((r["key"], r["$valid_from"], r["$valid_until"]) for r in df.collect())
    assert got == [("a", first.version, gone.version), ("b", first.version, None)]
