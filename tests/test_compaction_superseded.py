"""Compaction of an upsert table's superseded records by the age of its deletion vectors
(``compaction.max_vector_age``, Hudi's merge-on-read compaction by time) and inline,
right after an upsert commit (``compaction.inline``, Hudi's inline compaction); SQLite
and PostgreSQL.

The age of a vector is the time since its commit completed. Tests move the clock the
compaction reads (``lamina.operations.compaction.now_us``) rather than wait: no test
depends on how long anything takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

import lamina
import lamina.operations.compaction as compaction
from lamina import failpoints
from lamina.core.autocompact import (
    Policy,
    duration_text,
    policy_of,
    statuses,
    to_age_out,
)
from lamina.core.interval import to_us
from lamina.errors import PropertyError
from lamina.operations.compaction.inline import after_commit
from tests.test_autocompact import seg
from tests.test_upsert import SCHEMA, latest, rows

DAY = 24 * 60  # minutes
HOUR_US = 3600 * 1_000_000


def table(cat: lamina.Catalog, name: str = "u", **policy: Any) -> lamina.Table:
    """An upsert table of tests/test_upsert.py's SCHEMA; no segment counts as small, and
    a segment is rewritten by its share of superseded records only at 50% or more."""
    t = cat.create_table(name, SCHEMA, time_column="ts", primary_key="key", delete_column="deleted")
    props = {"small_segment_rows": 1, "max_superseded_percent": 50, **policy}
    t.set_properties(**{f"compaction.{k}": v for k, v in props.items()})
    return t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """``clock(us)``: the time compaction reads vector ages against is ``us`` from now on."""

    def at(us: int) -> None:
        monkeypatch.setattr(compaction, "now_us", lambda: us)

    yield at


def status(cat: lamina.Catalog, name: str = "u") -> dict[str, tuple[str, str, str]]:
    """Each chunk's (status, action, reason) in a dry run, by its first day."""
    return {
        str(r.status.chunk)[:10]: (r.status.status, r.status.action, r.status.reason)
        for r in cat.compact_auto(tables=[name], dry_run=True)
    }


def snapshots(t: lamina.Table) -> dict[int, list[dict[str, Any]]]:
    """Every completed commit's rows (sorted): what time travel reads."""
    return {
        c.id: sorted(t.to_arrow(as_of=c.version).to_pylist(), key=lambda r: r["key"])
        for c in t.history()
        if c.state == "COMPLETED"
    }


def day_rows(t: lamina.Table, day: str) -> list[int]:
    """The row counts of the visible segments of the chunk starting on ``day``."""
    return sorted(s.row_count for s in t.segments() if str(s.interval).startswith(day))


# -- the rules, pure -------------------------------------------------------------------


def test_the_age_rule_is_inclusive_and_off_when_unset() -> None:
    oldest = {"a": 1_000, "b": 2_000}
    assert to_age_out(oldest, None, 10**12) == frozenset()
    assert to_age_out(oldest, 500, 1_500) == {"a"}  # exactly 500 old: taken
    assert to_age_out(oldest, 500, 1_499) == frozenset()
    assert to_age_out(oldest, 0, 2_000) == {"a", "b"}  # 0s: any superseded record
    assert [duration_text(u) for u in (HOUR_US, 90 * 10**6, 7 * 24 * HOUR_US, 1_500_000)] == [
        "1h",
        "90s",
        "7d",
        "1.5s",
    ]


def test_the_reason_says_which_rule_picked_the_segments() -> None:
    pol = Policy(100, small_rows=1, max_superseded_pct=50, max_vector_age_us=HOUR_US)
    segs = [seg(0, 0, 10, 1), seg(0, 1, 10, 2), seg(1, 0, 10, 3)]
    by_pct, by_age = segs[0].id, segs[1].id
    got = statuses(segs, {}, pol, frozenset({by_pct, by_age}), aged=frozenset({by_age}))
    assert [(st.status, st.action) for st in got] == [("COMPLETE", "none"), ("PENDING", "minor")]
    assert got[1].reason == (
        "1 segment(s) with >= 50% of their records superseded by newer ones; "
        "1 segment(s) with records superseded 1h ago or more (max_vector_age 1h), under 50%"
    )


def test_the_properties_are_checked(cat: lamina.Catalog) -> None:
    """A malformed duration or flag is refused with what to write instead; nothing is
    stored. A flag is stored as ``true``/``false``, whatever its case or type."""
    t = table(cat)
    props = dict(t.properties)
    for bad in ("1 hour", "5hd", "-1h", "1w", "", "36501d"):
        with pytest.raises(PropertyError, match="compaction.max_vector_age") as got:
            t.set_properties(**{"compaction.max_vector_age": bad})
        assert "write a number and a unit" in str(got.value) or "at most" in str(got.value)
    for bad in ("yes", "1", ""):
        with pytest.raises(PropertyError, match="compaction.inline = .*use true or false"):
            t.set_properties(**{"compaction.inline": bad})
    with pytest.raises(PropertyError, match="compaction.max_vector_age"):  # at creation too
        cat.create_table("v", SCHEMA, properties={"compaction.max_vector_age": "soon"})
    assert cat.load_table("u").properties == props
    t.set_properties(**{"compaction.inline": "TRUE", "compaction.max_vector_age": "90m"})
    assert t.properties["compaction.inline"] == "true"
    t.set_properties(**{"compaction.inline": False})
    assert t.properties["compaction.inline"] == "false"
    assert policy_of(t.properties, 10).max_vector_age_us == 90 * 60 * 10**6


# -- by age ----------------------------------------------------------------------------


def test_a_segment_with_records_superseded_long_enough_ago_is_rewritten_under_the_percent(
    cat: lamina.Catalog, clock: Callable[[int], None]
) -> None:
    """10% of day 1 superseded: under the 50% threshold, so only the age rule picks it,
    from exactly ``max_vector_age`` after the superseding commit completed. A segment
    whose hidden rows are only live tombstones (its key's latest: the delete record of
    a19) holds nothing superseded and is never picked. t.compact() and auto-compaction
    both follow the rule, and time travel reads the same rows before and after."""
    t = table(cat, max_vector_age="1h")
    t.upsert(rows(*[(f"a{i:02d}", 1, i) for i in range(20)]))  # day 1
    sup = t.upsert(rows(("a00", 2 * DAY + 1, -1), ("a19", 2 * DAY + 2, 0, True)))  # day 3
    assert sup.completed_at is not None
    done = to_us(sup.completed_at)
    clock(done + HOUR_US - 1)
    assert {d: s[:2] for d, s in status(cat).items()} == {
        "2024-01-03": ("COMPLETE", "none"),
        "2024-01-01": ("COMPLETE", "none"),
    }
    assert t.compact() is None
    clock(done + HOUR_US)
    got = status(cat)
    assert got["2024-01-01"][:2] == ("PENDING", "minor")
    assert got["2024-01-01"][2] == (
        "1 segment(s) with records superseded 1h ago or more (max_vector_age 1h), under 50%"
    )
    assert got["2024-01-03"][:2] == ("COMPLETE", "none")  # tombstones never age
    before = snapshots(t)
    commit = t.compact()
    assert commit is not None and commit.action == "COMPACT"
    assert day_rows(t, "2024-01-01") == [18] and day_rows(t, "2024-01-03") == [2]
    assert {k: v for k, v in snapshots(t).items() if k in before} == before
    assert snapshots(t)[commit.id] == before[sup.id]
    assert all(s[:2] != ("PENDING", "minor") for s in status(cat).values())
    t.upsert(rows(("a00", 3, 5), ("a01", 3 * DAY, 50), ("a19", 4, 4)))  # older; newer; older
    assert latest(t)["a00"] == -1 and latest(t)["a01"] == 50 and "a19" not in latest(t)


def test_auto_compaction_and_the_services_purge_aged_vectors(
    cat: lamina.Catalog, clock: Callable[[int], None]
) -> None:
    """cat.compact_auto() compacts what the age rule picks, in one minor commit; the
    chunk is COMPLETE after, until a newer vector ages in turn."""
    t = table(cat, max_vector_age="2h")
    t.upsert(rows(*[(f"a{i:02d}", 1, i) for i in range(10)]))  # day 1
    t.upsert(rows(*[(f"b{i:02d}", DAY + 1, i) for i in range(10)]))  # day 2
    first = t.upsert(rows(("a00", 2 * DAY, 100), ("b00", 2 * DAY, 100)))  # day 3
    assert first.completed_at is not None
    want = latest(t)
    clock(to_us(first.completed_at) + 2 * HOUR_US)
    results = cat.compact_auto(tables=["u"])
    picked = sorted(str(r.status.chunk)[:10] for r in results if r.commit is not None)
    assert picked == ["2024-01-01", "2024-01-02"]
    assert len({r.commit.id for r in results if r.commit is not None}) == 1  # one commit
    assert day_rows(t, "2024-01-01") == day_rows(t, "2024-01-02") == [9]
    assert latest(t) == want and latest(t, first.version) == want
    later = t.upsert(rows(("a01", 2 * DAY, 101)))
    assert later.completed_at is not None
    assert status(cat)["2024-01-01"][:2] == ("COMPLETE", "none")  # a new vector: young
    clock(to_us(later.completed_at) + 2 * HOUR_US)
    assert status(cat)["2024-01-01"][:2] == ("PENDING", "minor")


def test_compact_auto_dry_run_on_the_command_line_says_why(
    tmp_path: Path, clock: Callable[[int], None]
) -> None:
    from tests.test_cli import ok

    wh = str(tmp_path / "wh")
    cat = lamina.connect(warehouse=wh)
    try:
        t = table(cat, max_vector_age="30m")
        t.upsert(rows(*[(f"a{i:02d}", 1, i) for i in range(10)]))
        sup = t.upsert(rows(("a00", DAY, 100)))
        assert sup.completed_at is not None
        clock(to_us(sup.completed_at) + HOUR_US)
        out = ok(wh, "compact", "--auto", "--dry-run", "--format", "csv")
        assert "PENDING,minor" in out and "max_vector_age 30m" in out
    finally:
        cat.close()


# -- inline ----------------------------------------------------------------------------


def test_after_commit_reads_no_catalog_rows_unless_inline_is_set(cat: lamina.Catalog) -> None:
    t = table(cat)
    t.upsert(rows(*[(f"a{i}", 1, i) for i in range(4)]))
    sup = t.upsert(rows(("a0", DAY, 9), ("a1", DAY, 9)))  # 50%: crossed
    statements: list[str] = []
    engine = t._handle.ctx.db.engine

    def seen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert after_commit(t._handle, sup) is None
        assert statements == []
        t.set_properties(**{"compaction.inline": "false"})
        statements.clear()
        assert after_commit(t._handle, sup) is None and statements == []
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    t.set_properties(**{"compaction.inline": True})
    done = after_commit(t._handle, sup)
    assert done is not None and day_rows(t, "2024-01-01") == [2]


def test_inline_compaction_rewrites_what_crossed_a_threshold_in_a_commit_of_its_own(
    cat: lamina.Catalog, clock: Callable[[int], None]
) -> None:
    """With compaction.inline, each upsert compacts the segments that crossed the
    percent (or the age) threshold, and only those (a clean small segment beside
    stays), as a COMPACT commit right after the upsert's; time travel is exact."""
    t = table(cat, inline=True, max_vector_age="1h")

    def last() -> lamina.Commit:
        return [c for c in t.history() if c.state == "COMPLETED"][-1]

    c1 = t.upsert(rows(*[(f"a{i}", 1, i) for i in range(10)]))  # day 1
    c2 = t.upsert(rows(*[(f"b{i}", DAY + 1, i) for i in range(10)]))  # day 2
    assert last().id == c2.id and c1.seq is not None  # nothing superseded: no compaction
    c3 = t.upsert(rows(*[(f"a{i}", 2 * DAY, 10 + i) for i in range(5)], ("b0", 2 * DAY, 1)))
    assert c3.completed_at is not None
    done = last()  # day 1 crossed 50%; day 2 (10%) did not
    assert done.action == "COMPACT" and done.seq == (c3.seq or 0) + 1
    assert done.metadata["compaction"] == "minor"
    assert day_rows(t, "2024-01-01") == [5] and day_rows(t, "2024-01-02") == [10]
    after = snapshots(t)
    assert after[done.id] == after[c3.id]
    clock(to_us(c3.completed_at) + HOUR_US)  # day 2's vector is an hour old now
    c4 = t.upsert(rows(("c", 3 * DAY, 1)))  # supersedes nothing itself
    assert last().action == "COMPACT" and last().seq == (c4.seq or 0) + 1
    assert day_rows(t, "2024-01-02") == [9]
    assert after_commit(t._handle, c4) is None  # nothing left to do
    assert {k: v for k, v in snapshots(t).items() if k in after} == after


def test_a_failed_inline_compaction_never_fails_the_upsert(
    cat: lamina.Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    t = table(cat, inline=True)
    t.upsert(rows(*[(f"a{i}", 1, i) for i in range(4)]))
    want = {"a0": 9, "a1": 9, "a2": 2, "a3": 3}

    def boom(**_: Any) -> None:
        raise OSError("disk full")

    with (
        caplog.at_level(logging.WARNING, logger="lamina"),
        failpoints.armed("compaction.minor.before_write_run", boom),
    ):
        sup = t.upsert(rows(("a0", DAY, 9), ("a1", DAY, 9)))  # committed all the same
    assert "inline compaction of 'u' after commit" in caplog.text and "disk full" in caplog.text
    assert latest(t) == want and t.history()[-1].state != "COMPLETED"  # aborted, not published
    assert [c.action for c in t.history() if c.state == "COMPLETED"][-1] == "UPSERT"
    assert after_commit(t._handle, sup) is not None  # the next try compacts
    assert latest(t) == want and day_rows(t, "2024-01-01") == [2]


def test_upserts_proceed_while_an_inline_compaction_holds_its_locks(
    cat: lamina.Catalog, catalog_url: str, tmp_path: Path
) -> None:
    """While the compaction holds its SEGMENT locks (opened, then again after reading
    what is superseded), upserts from another connection commit — superseding records
    in its inputs too, and ties. Its output hides them; every snapshot reads as before."""
    t = table(cat)
    t.upsert(rows(*[(f"a{i}", 10, i) for i in range(6)]))  # day 1
    sup = t.upsert(rows(*[(f"a{i}", DAY, 10 + i) for i in range(3)]))  # day 1 at 50%
    t.set_properties(**{"compaction.inline": True})  # its after_commit, run by hand below
    t = cat.load_table("u")
    other = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    u = other.load_table("u")
    landed: list[lamina.Commit] = []

    def upsert_beside(**_: Any) -> None:
        held = [lk for lk in t.locks() if lk.type == "SEGMENT" and lk.state == "GRANTED"]
        assert held and held[0].priority == 25
        n = len(landed)
        landed.append(u.upsert(rows((f"a{3 + n}", 10, 100 + n), (f"n{n}", 5, n))))  # a tie

    try:
        with (
            failpoints.armed("compaction.minor.opened", upsert_beside),
            failpoints.armed("compaction.minor.superseded_read", upsert_beside),
        ):
            before = snapshots(t)
            done = after_commit(t._handle, sup)
        assert done is not None and len(landed) == 2
        assert all(c.seq is not None and c.seq < (done.seq or 0) for c in landed)
        assert {k: v for k, v in snapshots(t).items() if k in before} == before
        want = {"a0": 10, "a1": 11, "a2": 12, "a3": 100, "a4": 101, "a5": 5, "n0": 0, "n1": 1}
        assert latest(t) == want and latest(t, landed[-1].version) == want
        assert latest(u) == want
        u.upsert(rows(("a3", 10, 7), ("a0", DAY, 70)))  # a tie with a compacted record; newer
        assert latest(t) == {**want, "a3": 7, "a0": 70}
    finally:
        other.close()
