"""Apache Pinot's upsert compaction tests, retold for lamina (SQLite and PostgreSQL).

Ported, in our own words, from Pinot's minion task tests (pinot-plugins/pinot-minion-tasks/
pinot-minion-builtin-tasks/src/test/java/org/apache/pinot/plugin/minion/tasks/):
``upsertcompaction/UpsertCompactionTaskGeneratorTest`` (thresholds, segments to delete,
buffer period, config checks), ``upsertcompaction/UpsertCompactionTaskExecutorTest`` and
``MinionTaskUtilsTest`` (which records a compaction keeps: the valid doc ids, deletes kept
by default), ``upsertcompactmerge/UpsertCompactMergeTaskGeneratorTest`` and the merge
generator (grouping small segments by the records they keep).

How they map:
* Pinot's *invalid* records are lamina's *superseded* ones (hidden by deletion vectors);
  ``invalidRecordsThresholdPercent`` is ``compaction.max_superseded_percent``. lamina has
  no ``invalidRecordsThresholdCount``.
* ``bufferTimePeriod`` is ``compaction.skip_offset_from_latest``, counted from the end of
  the newest data rather than from the wall clock.
* Pinot's default ``validDocIdsType`` (SNAPSHOT) keeps delete records that are still their
  key's latest, as lamina always does (it has no ``*_WITH_DELETE`` type or
  ``deletedKeysTTL``).
* A Pinot partition's segments are a lamina chunk's segments, in partition order.

Not ported (no counterpart): consuming segments, CRC checks, replica consensus, server
readiness, download URLs, task counts and ordering, retention-expiry buffers.

Every test checks the table's answers (``to_arrow``, ``cat.sql``) before and after
compacting, and that a later upsert still resolves against the compacted data.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.errors import PropertyError
from tests.test_upsert import PSCHEMA, SCHEMA, latest, prow, pstate, rows

DAY = 24 * 60  # minutes


def table(cat: lamina.Catalog, name: str = "u", **policy: Any) -> lamina.Table:
    """An upsert table of tests/test_upsert.py's SCHEMA with a compaction policy."""
    t = cat.create_table(name, SCHEMA, time_column="ts", primary_key="key", delete_column="deleted")
    if policy:
        t.set_properties(**{f"compaction.{k}": v for k, v in policy.items()})
    return t


def answers(cat: lamina.Catalog, t: lamina.Table) -> dict[str, int]:
    """The latest value per key, read by ``to_arrow`` and by SQL (which must agree)."""
    got = latest(t)
    by_sql = cat.sql(f"SELECT key, value FROM {t.name}").to_pylist()
    assert {r["key"]: r["value"] for r in by_sql} == got and len(by_sql) == len(got)
    total = cat.sql(f"SELECT count(*) AS n, sum(value) AS s FROM {t.name}").to_pylist()
    assert total == [{"n": len(got), "s": sum(got.values()) if got else None}]
    return got


def status(cat: lamina.Catalog, name: str = "u") -> dict[str, tuple[str, str]]:
    """Each chunk's (status, action) in a dry run of auto-compaction, by its first day."""
    return {
        str(r.status.chunk)[:10]: (r.status.status, r.status.action)
        for r in cat.compact_auto(tables=[name], dry_run=True)
    }


def day_segments(t: lamina.Table, day: str) -> list[lamina.Segment]:
    """The visible segments of the chunk starting on ``day`` (YYYY-MM-DD)."""
    return [s for s in t.segments() if str(s.interval).startswith(day)]


def stored(t: lamina.Table) -> set[tuple[Any, ...]]:
    """Every stored record (key, ts, value, deleted) of the latest snapshot."""
    got = t.to_arrow(all_versions=True).select(["key", "ts", "value", "deleted"])
    return {tuple(r.values()) for r in got.to_pylist()}


# -- UpsertCompactionTaskGeneratorTest ------------------------------------------------------


def test_the_threshold_percent_is_inclusive_and_clean_segments_are_never_picked(
    cat: lamina.Catalog,
) -> None:
    """Pinot (testProcessValidDocIdsMetadata): a segment with half its records invalid is
    picked under thresholds of 1% and 30%, not under 60%; a segment without invalid
    records is never picked (testGenerateTasksWithNewlyCompletedSegment). The comparison
    is >=, so 50% picks it at 50 and not at 51."""
    t = table(cat, small_segment_rows=1)  # no segment is small: only superseding counts
    t.upsert(rows(*[(f"a{i:03d}", 1, i) for i in range(100)]))  # day 1
    t.upsert(rows(*[(f"b{i}", DAY + 1, i) for i in range(10)]))  # day 2: never superseded
    before = t.upsert(rows(*[(f"a{i:03d}", 2 * DAY + 1, -i) for i in range(50)]))  # day 3
    want = answers(cat, t)
    clean = {s.id for s in t.segments() if not str(s.interval).startswith("2024-01-01")}
    for pct, picked in ((60, False), (51, False), (50, True), (30, True), (1, True)):
        t.set_properties(**{"compaction.max_superseded_percent": pct})
        got = status(cat)
        assert got["2024-01-01"] == (("PENDING", "minor") if picked else ("COMPLETE", "none"))
        assert got["2024-01-02"] == got["2024-01-03"] == ("COMPLETE", "none")
        if not picked:
            assert t.compact() is None  # t.compact() picks by the same threshold
    t.set_properties(**{"compaction.max_superseded_percent": 30})
    done = [r for r in cat.compact_auto(tables=["u"]) if r.commit is not None]
    assert [str(r.status.chunk)[:10] for r in done] == ["2024-01-01"]
    assert [s.row_count for s in day_segments(t, "2024-01-01")] == [50]
    assert clean <= {s.id for s in t.segments()}  # the clean segments were not rewritten
    assert answers(cat, t) == want and latest(t, before.version) == want
    assert status(cat)["2024-01-01"] == ("COMPLETE", "none")
    # a000's dropped record (ts 1) is older than this one, its latest (day 3) newer: ignored
    t.upsert(rows(("a000", 2, 7), ("a099", 3 * DAY, 99), ("b0", 0, 5)))  # b0: older
    assert answers(cat, t) == {**want, "a099": 99}


def test_a_segment_whose_records_are_all_superseded_is_emptied(cat: lamina.Catalog) -> None:
    """Pinot (testProcessValidDocIdsMetadata, ...WithSegmentsForDeletion): a segment whose
    records are all invalid is deleted whatever the thresholds, while one with 95% invalid
    stays under a higher threshold. lamina picks it under any threshold (100% >= 100) and
    rewrites it into one empty segment (documented in docs/upserts.md, Compaction), which
    is never picked again; the chunk's other segments stay as they were."""
    t = table(cat, small_segment_rows=1, max_superseded_percent=100)
    t.upsert(rows(*[(f"x{i}", 1, i) for i in range(20)]))  # day 1: all superseded below
    t.upsert(rows(*[(f"y{i}", 2, i) for i in range(10)]))  # day 1: never superseded
    t.upsert(rows(*[(f"x{i}", DAY + 1, 100 + i) for i in range(20)]))  # day 2
    t.upsert(rows(*[(f"z{i}", DAY + 2, i) for i in range(20)]))  # day 2: 95% below
    t.upsert(rows(*[(f"z{i}", 2 * DAY + 1, -i) for i in range(19)]))  # day 3
    want = answers(cat, t)
    assert status(cat) == {
        "2024-01-03": ("COMPLETE", "none"),
        "2024-01-02": ("COMPLETE", "none"),  # 95% < 100%: not picked
        "2024-01-01": ("PENDING", "minor"),
    }
    day1 = {s.id: s.row_count for s in day_segments(t, "2024-01-01")}
    day2 = {s.id for s in day_segments(t, "2024-01-02")}
    assert any(r.commit is not None for r in cat.compact_auto(tables=["u"]))
    after = {s.id: s.row_count for s in day_segments(t, "2024-01-01")}
    assert [n for i, n in after.items() if i not in day1] == [0]  # an empty segment
    assert [n for i, n in day1.items() if i in after] == [10]  # y's segment stays
    assert {s.id for s in day_segments(t, "2024-01-02")} == day2
    assert answers(cat, t) == want
    assert set(status(cat).values()) == {("COMPLETE", "none")}  # not picked again
    t.upsert(rows(("x0", 5, -1), ("x1", 3 * DAY, 1), ("w0", 7, 70)))  # older; newer; new
    assert answers(cat, t) == {**want, "x1": 1, "w0": 70}


def test_skip_offset_from_latest_skips_the_newest_chunks_as_a_buffer_period_does(
    cat: lamina.Catalog,
) -> None:
    """Pinot (testGetCompletedSegments): a segment is a candidate when it ends no later
    than the buffer period before now; one ending a moment later is not. lamina counts
    ``skip_offset_from_latest`` back from the end of the newest chunk (here 2024-01-05),
    not from the wall clock: with Pinot's buffer, data from 2024 would all be old enough.
    The boundary is inclusive in both."""
    t = table(cat, small_segment_rows=1)
    for d in range(4):  # each day: 5 shared keys (superseded the next day), 5 of its own
        t.upsert(rows(*[(f"s{i}", d * DAY + 1, d) for i in range(5)],
                      *[(f"d{d}-{i}", d * DAY + 1, d) for i in range(5)]))  # fmt: skip
    want = answers(cat, t)
    skipped = ("SKIPPED", "none")
    picked = ("PENDING", "minor")
    for offset, eligible in (("0s", 3), ("47h", 2), ("48h", 2), ("49h", 1), ("4d", 0)):
        t.set_properties(**{"compaction.skip_offset_from_latest": offset})
        got = status(cat)
        days = ["2024-01-01", "2024-01-02", "2024-01-03"]
        assert [got[d] for d in days] == [picked] * eligible + [skipped] * (3 - eligible)
        assert got["2024-01-04"] == (skipped if offset != "0s" else ("COMPLETE", "none"))
    t.set_properties(**{"compaction.skip_offset_from_latest": "48h"})  # ends 2024-01-03
    day3 = {s.id for s in day_segments(t, "2024-01-03")}
    done = [r for r in cat.compact_auto(tables=["u"]) if r.commit is not None]
    assert sorted(str(r.status.chunk)[:10] for r in done) == ["2024-01-01", "2024-01-02"]
    assert {s.id for s in day_segments(t, "2024-01-03")} == day3  # within the offset
    assert [s.row_count for s in day_segments(t, "2024-01-01")] == [5]
    assert answers(cat, t) == want
    t.upsert(rows(("s0", 1, -1), ("d0-0", 2, 20), ("s1", 4 * DAY, 44)))  # older; newer; newer
    assert answers(cat, t) == {**want, "d0-0": 20, "s1": 44}


def test_the_policy_is_checked_as_pinots_task_config_is(cat: lamina.Catalog) -> None:
    """Pinot (testUpsertCompactionTaskConfig, testUpsertCompactMergeTaskConfig): a
    threshold percent outside 0..100 and a malformed buffer period are refused. lamina
    takes 1..100: 0, which Pinot accepts (it then relies on the count threshold), is
    refused, and there is no count threshold to set. Without an upsert definition
    Pinot makes no task (testGenerateTasksValidatesTableConfigs); a plain lamina table
    takes the setting and ignores it; a table without segments has nothing to do."""
    t = table(cat)
    assert cat.compact_auto(tables=["u"]) == [] and t.compact() is None  # no segments
    t.upsert(rows(*[(f"k{i}", 1, i) for i in range(10)]))
    t.upsert(rows(("k0", DAY, 100)))
    want = answers(cat, t)
    props = dict(t.properties)
    bad = [
        ("max_superseded_percent", "-1"), ("max_superseded_percent", "101"),
        ("max_superseded_percent", "0"), ("max_superseded_percent", "ten"),
        ("skip_offset_from_latest", "5hd"), ("invalid_records_threshold_count", "1"),
    ]  # fmt: skip
    for key, value in bad:
        with pytest.raises(PropertyError):
            t.set_properties(**{f"compaction.{key}": value})
    assert cat.load_table("u").properties == props  # nothing changed
    t.set_properties(**{"compaction.max_superseded_percent": "100"})  # the bounds are valid
    t.set_properties(**{"compaction.max_superseded_percent": "1"})
    plain = cat.create_table("plain", SCHEMA, time_column="ts")
    plain.set_properties(**{"compaction.max_superseded_percent": "1"})
    plain.append(rows(("k0", 1, 1)))
    plain.append(rows(("k0", 2, 2)))  # a plain table keeps both: nothing is superseded
    assert status(cat, "plain") == {"2024-01-01": ("PENDING", "minor")}
    assert "superseded" not in cat.compact_auto(tables=["plain"], dry_run=True)[0].status.reason
    assert cat.compact_auto(tables=["plain"])[0].commit is not None  # small segments merged
    assert cat.sql("SELECT count(*) AS n FROM plain")["n"][0].as_py() == 2
    assert t.compact() is not None  # the upsert table: k0's first record goes
    assert answers(cat, t) == want and len(stored(t)) == 10
    t.upsert(rows(("k0", DAY - 1, -1), ("k1", DAY, 11)))  # older than k0's latest; newer
    assert answers(cat, t) == {**want, "k1": 11}


# -- UpsertCompactionTaskExecutorTest, MinionTaskUtilsTest: what a compaction keeps -------


def test_a_compaction_keeps_exactly_the_valid_records(cat: lamina.Catalog) -> None:
    """Pinot's executor rewrites a segment keeping exactly its valid doc ids: each key's
    latest record, deletes included under the default validDocIdsType (SNAPSHOT). After
    lamina compacts every segment with a superseded record, what is stored is exactly each
    key's latest record (live tombstones included), by an oracle of the rules."""
    t = table(cat, max_superseded_percent=1)
    rng = random.Random(20240101)
    winner: dict[str, tuple[int, int, bool]] = {}  # key -> (minute, value, deleted)
    commits = []
    for b in range(12):
        batch = []
        for j in range(15):
            key, minute = f"k{rng.randrange(25)}", (b % 3) * DAY + rng.randrange(40)
            if j == 14 and batch:  # a tie with the batch's first record: the later wins
                key, minute = batch[0][0], batch[0][1]
            rec = (key, minute, b * 100 + j, rng.random() < 0.15)
            batch.append(rec)
            if key not in winner or minute >= winner[key][0]:
                winner[key] = rec[1:]
        commits.append((t.upsert(rows(*batch)), latest(t)))
    want = answers(cat, t)
    assert want == {k: v for k, (_, v, dead) in winner.items() if not dead}
    expected = stored_of(winner)
    assert stored(t) > expected  # superseded and out-of-order records are stored too
    assert cat.compact_auto(tables=["u"])
    assert stored(t) == expected  # exactly the latest records and live tombstones
    assert answers(cat, t) == want
    assert all(latest(t, c.version) == seen for c, seen in commits)  # time travel as before
    assert set(status(cat).values()) <= {("COMPLETE", "none")}
    dead = sorted(k for k, (_, _, d) in winner.items() if d)
    alive = sorted(want)
    assert dead and alive
    t.upsert(rows((dead[0], winner[dead[0]][0] - 1, 1),  # older than its delete: stays gone
                  (alive[0], winner[alive[0]][0], 2),  # a tie with the kept record: wins
                  (alive[-1], winner[alive[-1]][0] - 1, 3)))  # older: ignored  # fmt: skip
    assert answers(cat, t) == {**want, alive[0]: 2}


def stored_of(winner: dict[str, tuple[int, int, bool]]) -> set[tuple[Any, ...]]:
    """The records (key, ts, value, deleted) an oracle's winners are stored as."""
    data = rows(*[(k, m, v, d) for k, (m, v, d) in winner.items()])
    return {tuple(r.values()) for r in data.to_pylist()}


def test_deletes_stay_until_superseded_as_pinots_default_valid_doc_ids_keep_them(
    cat: lamina.Catalog,
) -> None:
    """MinionTaskUtilsTest: delete records stay by default (SNAPSHOT) until they expire
    (deletedKeysTTL); *_WITH_DELETE types would drop them. lamina keeps a tombstone while
    it is its key's latest record, so it still hides an older record arriving later, and
    drops one superseded by a newer record or a newer delete, and an out-of-order delete.
    A segment holding only live tombstones has nothing superseded: never picked."""
    t = table(cat, small_segment_rows=1)
    t.upsert(rows(("a", 1, 1), ("b", 1, 1), ("c", 1, 1)))  # day 1
    t.upsert(rows(("a", DAY + 1, 0, True), ("b", DAY + 1, 0, True), ("e", DAY + 1, 3)))
    t.upsert(rows(("a", 2 * DAY + 1, 5), ("b", 2 * DAY + 2, 0, True),  # revive a; delete
                  ("c", 0, 9, True)))  # an out-of-order delete: c stays  # fmt: skip
    t.upsert(rows(("f", 3 * DAY, 6), ("g", 3 * DAY, 7)))  # day 4
    last = t.upsert(rows(("f", 3 * DAY + 1, 0, True), ("g", 3 * DAY + 1, 0, True)))
    want = answers(cat, t)
    assert want == {"a": 5, "c": 1, "e": 3}
    tombs = {s.id for s in t.segments() if s.commit_id == last.id}  # only live tombstones
    assert len(tombs) == 1
    assert status(cat)["2024-01-04"] == ("PENDING", "minor")  # f and g's first records
    assert cat.compact_auto(tables=["u"])
    kept = {(k, v, d) for k, _, v, d in stored(t)}
    assert kept == {("a", 5, False), ("c", 1, False), ("e", 3, False),
                    ("b", 0, True), ("f", 0, True), ("g", 0, True)}  # fmt: skip
    assert tombs <= {s.id for s in t.segments()}  # not rewritten
    assert answers(cat, t) == want and latest(t, last.version) == want
    t.upsert(rows(("b", 2 * DAY, 1), ("f", 3 * DAY, 2), ("c", 0, 3)))  # all older: ignored
    assert answers(cat, t) == want
    t.upsert(rows(("b", 4 * DAY, 4), ("g", 3 * DAY + 1, 5)))  # newer; a tie with the delete
    assert answers(cat, t) == {**want, "b": 4, "g": 5}


def test_records_superseded_while_a_compaction_runs_stay_hidden(cat: lamina.Catalog) -> None:
    """Pinot reads a segment's valid doc ids when its task starts; records invalidated
    while it runs are resolved when the new segment replaces the old one, and a merged
    segment takes its inputs' newest creation time so that ties resolve as before
    (UpsertCompactMergeTaskExecutorTest). In lamina an upsert publishing during the
    compaction, ties included, stays the latest, also once the key index is rebuilt from
    the files; a later tie with a compacted record goes to the later record."""
    from lamina import failpoints

    t = table(cat, small_segment_rows=1)
    t.upsert(rows(("a", 10, 1), ("b", 10, 1), ("c", 10, 1), ("d", 10, 1)))  # day 1
    base = t.upsert(rows(("a", DAY + 10, 2)))  # day 2: a quarter of day 1 superseded
    want = answers(cat, t)

    def then_upsert(**_: Any) -> None:  # the compaction has read what is superseded
        t.upsert(rows(("b", 10, 3), ("c", 5, 3), ("d", 10, 0, True)))  # tie; older; tie

    with failpoints.armed("compaction.minor.superseded_read", then_upsert):
        assert t.compact() is not None
    now = {"a": 2, "b": 3, "c": 1}
    assert answers(cat, t) == now and latest(t, base.version) == want
    t._handle.ctx.keys.forget(t._handle.record.id)  # rebuilt from the files
    t.upsert(rows(("c", 10, 4), ("d", 10, 5), ("b", 9, 6)))  # tie; tie with the delete; older
    assert answers(cat, t) == {"a": 2, "b": 3, "c": 4, "d": 5}


def test_a_partial_upsert_tables_merged_records_survive_compaction(
    cat: lamina.Catalog, pt: lamina.Table
) -> None:
    """What Pinot keeps of a partial-upsert table is its stored (merged) latest records;
    a later partial upsert merges with the compacted record."""

    def put(*records: dict[str, Any]) -> None:
        pt.upsert(pa.Table.from_pylist(list(records), PSCHEMA))

    put(prow("a", 1, clicks=1, tags=["x"]), prow("b", 1, clicks=5))
    put(prow("a", 2, clicks=2, tags=["y"], best=3))
    put(prow("a", 3, clicks=3, name="n"), prow("b", 2, clicks=1))

    def clicks() -> dict[str, int]:
        by_sql = cat.sql("SELECT key, clicks FROM p").to_pylist()
        got = {r["key"]: r["clicks"] for r in by_sql}
        assert len(got) == len(by_sql) and got == {k: v["clicks"] for k, v in pstate(pt).items()}
        return got

    want = pstate(pt)
    assert want["a"]["tags"] == ["x", "y"] and clicks() == {"a": 6, "b": 6}
    assert pt.compact() is not None
    assert pstate(pt) == want and pt.to_arrow(all_versions=True).num_rows == 2
    assert clicks() == {"a": 6, "b": 6}
    put(prow("a", 4, clicks=4, tags=["z"]))
    assert pstate(pt)["a"] == {**want["a"], "clicks": 10, "tags": ["x", "y", "z"]}
    assert clicks() == {"a": 10, "b": 6}


# -- UpsertCompactMergeTaskGeneratorTest: grouping small segments --------------------------


def test_adjacent_small_segments_are_grouped_up_to_the_target(cat: lamina.Catalog) -> None:
    """The merge generator groups a partition's segments in creation order while their
    records stay within maxNumRecordsPerSegment (inclusive) and drops groups of fewer
    than minNumSegmentsPerTask (2): six segments of 20 records under a limit of 100 make
    one group of five; the sixth, alone, and a lone clean segment elsewhere stay."""
    t = table(cat, target_rows_per_segment=100)
    for b in range(6):
        t.upsert(rows(*[(f"k{b}-{i}", b, b * 100 + i) for i in range(20)]))  # day 1
    lone = t.upsert(rows(*[(f"m{i}", DAY, i) for i in range(20)]))  # day 2
    want = answers(cat, t)
    day1 = [s.id for s in sorted(day_segments(t, "2024-01-01"), key=lambda s: s.partition_id)]
    day2 = {s.id for s in day_segments(t, "2024-01-02")}
    assert status(cat) == {"2024-01-02": ("COMPLETE", "none"), "2024-01-01": ("PENDING", "minor")}
    assert any(r.commit is not None for r in cat.compact_auto(tables=["u"]))
    after = {s.id: s.row_count for s in day_segments(t, "2024-01-01")}
    assert sorted(after.values()) == [20, 100] and day1[-1] in after  # the sixth stays
    assert {s.id for s in day_segments(t, "2024-01-02")} == day2
    assert answers(cat, t) == want and latest(t, lone.version) == want
    t.upsert(rows(("k1-0", 0, -1), ("k5-0", DAY, 55), ("m0", DAY + 1, 66)))  # older; newer
    assert answers(cat, t) == {**want, "k5-0": 55, "m0": 66}


def test_grouping_counts_the_records_a_compaction_keeps(cat: lamina.Catalog) -> None:
    """The merge generator sizes a group by its segments' *valid* records (the output
    holds only those): two segments of 80 records, 75 of each superseded, keep 10 in all
    and are merged into one segment under a limit of 100."""
    t = table(cat, target_rows_per_segment=100)
    t.upsert(rows(*[(f"a{i:02d}", 1, i) for i in range(80)]))  # day 1
    t.upsert(rows(*[(f"b{i:02d}", 1, i) for i in range(80)]))  # day 1
    t.upsert(rows(*[(f"{x}{i:02d}", DAY + 1, -i) for x in "ab" for i in range(75)]))  # day 2
    want = answers(cat, t)
    assert status(cat)["2024-01-01"] == ("PENDING", "minor")
    assert cat.compact_auto(tables=["u"])
    assert answers(cat, t) == want and len(stored(t)) == 160
    t.upsert(rows(("a79", 2 * DAY, 79), ("b00", DAY, 5)))  # newer; older than its latest
    assert answers(cat, t) == {**want, "a79": 79}
    assert [s.row_count for s in day_segments(t, "2024-01-01")] == [10]  # one group


def test_a_rewritten_segment_is_sized_by_the_records_it_keeps(cat: lamina.Catalog) -> None:
    """Pinot's UpsertCompactionTask rewrites one segment into one segment of its valid
    records: 250 records, 240 of them superseded, become one segment of 10 even under a
    limit of 100 records per segment."""
    t = table(cat, small_segment_rows=1, target_rows_per_segment=100)
    t.upsert(rows(*[(f"k{i:03d}", 1, i) for i in range(250)]))  # day 1
    t.upsert(rows(*[(f"k{i:03d}", DAY + 1, -i) for i in range(240)]))  # day 2
    want = answers(cat, t)
    assert [s.row_count for s in day_segments(t, "2024-01-01")] == [250]
    assert t.compact() is not None
    assert answers(cat, t) == want and len(stored(t)) == 250
    t.upsert(rows(("k249", 2 * DAY, 1), ("k000", DAY, 2)))  # newer; older than its latest
    assert answers(cat, t) == {**want, "k249": 1}
    assert [s.row_count for s in day_segments(t, "2024-01-01")] == [10]
