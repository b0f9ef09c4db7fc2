"""Row-level changes under concurrency (ROWS in lamina.core.conflicts): a delete or
update conflicts with a commit that changed a file it read — removed or rewrote it,
or hid rows of it — as Delta's ConcurrentDeleteReadException; it is then made again,
its predicate evaluated on the newer snapshot. Appends commit beside it. Writes that
began before it and would undo it (a compaction of its files, an overwrite of its
rows) conflict in turn."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import lamina
from lamina import failpoints
from lamina.core.conflicts import Footprint, Kind, SegmentRef, check
from lamina.core.interval import Interval
from lamina.errors import CommitConflictError
from tests.test_rowlevel_delete import keys, plain, rows

DAY = Interval.of(0, 86_400_000_000)


def once(action):  # type: ignore[no-untyped-def]
    """A failpoint action that runs ``action`` the first time only."""
    done: list[int] = []

    def run(**_: object) -> None:
        if not done:
            done.append(1)
            action()

    return run


def test_a_delete_beside_a_concurrent_delete_of_its_files_is_made_again(
    cat: lamina.Catalog,
) -> None:
    t = plain(cat, "merge-on-read")
    other = cat.load_table("t")
    attempts: list[int] = []

    def race(table: object, attempt: int) -> None:
        attempts.append(attempt)
        if len(attempts) == 1:
            other.delete("k = 27")  # passes here too (its attempts[1]): then goes on

    with failpoints.armed("rowlevel.before_publish", race):
        done = t.delete("k >= 24")
    attempts.pop(1)  # the other delete's
    assert attempts == [0, 1]  # lost once, then decided again on the newer snapshot
    assert done is not None and done.metadata["row_change"]["deleted"] == 5
    assert keys(t) == list(range(24))


def test_without_retries_the_conflict_is_raised_and_nothing_is_published(
    local_cat: lamina.Catalog,
) -> None:
    t = plain(local_cat, "copy-on-write")
    other = local_cat.load_table("t")
    with (
        failpoints.armed("rowlevel.before_publish", once(lambda: other.delete("k = 3"))),
        pytest.raises(CommitConflictError, match="whose rows this write read") as err,
    ):
        t.delete("k = 0", retries=0)
    assert err.value.retryable
    assert keys(t) == [k for k in range(30) if k != 3]


def test_an_update_made_again_reads_the_rows_as_the_other_commit_left_them(
    local_cat: lamina.Catalog,
) -> None:
    t = plain(local_cat, "merge-on-read")
    other = local_cat.load_table("t")
    race = once(lambda: other.update("k = 3", set={"v": "50"}))
    with failpoints.armed("rowlevel.before_publish", race):
        t.update("v < 5", set={"v": "v + 100"})
    got = dict(zip(*(t.to_arrow().column(c).to_pylist() for c in ("k", "v")), strict=True))
    assert got[3] == 50.0  # no longer matched on the second try
    assert [got[k] for k in (0, 1, 2, 4)] == [100.0, 101.0, 102.0, 104.0]


def test_a_concurrent_append_commits_beside_a_delete(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    other = local_cat.load_table("t")
    attempts: list[int] = []

    def race(table: object, attempt: int) -> None:
        attempts.append(attempt)
        other.append(rows(range(100, 103)))

    with failpoints.armed("rowlevel.before_publish", race):
        t.delete("k >= 20")
    assert attempts == [0]  # no conflict: the appended rows were never read
    assert keys(t) == [*range(20), 100, 101, 102]  # Delta's WriteSerializable: kept


def test_a_compaction_that_read_before_a_delete_conflicts(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "merge-on-read")
    t.append(rows(range(30, 33)))  # two files a day: something to compact
    other = local_cat.load_table("t")
    with (
        failpoints.armed("compaction.minor.opened", once(lambda: other.delete("k = 30"))),
        pytest.raises(CommitConflictError, match="deleted or updated rows"),
    ):
        t.compact()
    assert 30 not in keys(t) and len(keys(t)) == 32


def test_an_overwrite_that_began_before_a_delete_of_its_rows_conflicts(
    local_cat: lamina.Catalog,
) -> None:
    t = plain(local_cat, "merge-on-read")
    other = local_cat.load_table("t")
    day = rows(range(1, 30, 3))  # the rows of 2024-01-02
    with (
        failpoints.armed("write.publish.before", once(lambda: other.delete("k = 1"))),
        pytest.raises(CommitConflictError, match="deleted or updated rows"),
    ):
        t.overwrite(day.slice(0, 2), interval="2024-01-02/2024-01-03")
    assert 1 not in keys(t) and len(keys(t)) == 29


def ref(i: str) -> SegmentRef:
    return SegmentRef(i, DAY)


@pytest.mark.parametrize(
    ("other", "conflicts"),
    [
        (Footprint(2, Kind.APPEND, added=(ref("new"),)), False),
        (Footprint(2, Kind.ROWS, changed=(ref("b"),)), False),
        (Footprint(2, Kind.ROWS, changed=(ref("a"),)), True),
        (Footprint(2, Kind.COMPACT, removed=(ref("a"),), added=(ref("c"),)), True),
        (Footprint(2, Kind.DELETE, removed=(ref("a"),)), True),
        (Footprint(2, Kind.REPLACE, replaced=(DAY,)), True),
        (
            Footprint(2, Kind.REPLACE, replaced=(Interval.of(DAY.end, DAY.end + 1),)),
            False,
        ),
    ],
)
def test_the_rows_rule_against_each_kind_of_commit(other: Footprint, conflicts: bool) -> None:
    mine = Footprint(1, Kind.ROWS, read=(ref("a"),))
    verdict = check(mine, [other])
    assert (verdict.conflict is not None) is conflicts
    if conflicts:
        assert verdict.conflict is not None and verdict.conflict.retryable


def test_a_rewrite_conflicts_with_rows_hidden_in_its_interval() -> None:
    other = Footprint(2, Kind.ROWS, changed=(ref("a"),), added=(ref("upd"),))
    assert check(Footprint(1, Kind.REPLACE, replaced=(DAY,)), [other]).conflict is not None
    assert check(Footprint(1, Kind.COMPACT, removed=(ref("a"),)), [other]).conflict is not None
    assert check(Footprint(1, Kind.COMPACT, removed=(ref("b"),)), [other]).conflict is None
    assert check(Footprint(1, Kind.APPEND), [other]).conflict is None


def test_rows_deleted_while_a_delete_waited_are_not_counted_twice(
    local_cat: lamina.Catalog,
) -> None:
    t = plain(local_cat, "merge-on-read")
    other = local_cat.load_table("t")
    race = once(lambda: other.delete("k < 3"))
    with failpoints.armed("rowlevel.before_publish", race):
        done = t.delete("k < 5")
    assert done is not None and done.metadata["row_change"]["deleted"] == 2
    assert keys(t) == list(range(5, 30))


def test_a_change_decides_again_on_the_version_its_commit_is_based_on(
    local_cat: lamina.Catalog,
) -> None:
    """Another table's commits make commit ids run ahead of this table's versions; an
    append lands after the delete decided and before its commit opened: the delete
    decides again on that version (its base), not on one numbered like a commit id."""
    other = plain(local_cat, "merge-on-read", name="other")
    for _ in range(3):
        other.delete("k = 0")
        other.append(rows(range(1)))
    t = plain(local_cat, "merge-on-read")
    writer = local_cat.load_table("t")
    race = once(lambda: writer.append(rows(range(100, 103))))
    with failpoints.armed("rowlevel.decided", race):
        done = t.delete("k = 4 OR k = 101")
    assert done is not None and done.id != done.version  # ids count both tables'
    assert done.metadata["row_change"]["deleted"] == 2  # decided again: 101 is there
    assert keys(t) == sorted([*(k for k in range(30) if k != 4), 100, 102])


@pytest.mark.parametrize("how", ["overwrite", "delete_segments"])
def test_retention_keeps_what_an_open_change_read_so_its_conflict_is_seen(
    cat: lamina.Catalog, how: str
) -> None:
    """An overwrite (or a delete) of the day an update read lands while the update
    is open, and retention with no grace period runs right after: it must keep the
    segments the update read, else the update's check no longer sees that they went
    and its new rows bring back rows the overwrite replaced."""
    t = plain(cat, "merge-on-read")
    t.set_properties(replaced_segments_retention="0s")
    other = cat.load_table("t")
    day2 = [k for k in range(30) if k % 3 == 1]

    def race() -> None:
        if how == "overwrite":
            other.overwrite(rows(range(100, 103)).filter(pc.equal(pc.field("k"), 100)))
        else:
            other.delete_segments([s.id for s in other.segments() if "_20240102T000000Z_2" in s.id])
        cat.run_retention(tables=["t"])

    with failpoints.armed("rowlevel.before_publish", once(race)):
        t.update("k % 3 = 1", set={"v": "v + 1000"})
    got = dict(zip(*(t.to_arrow().column(c).to_pylist() for c in ("k", "v")), strict=True))
    assert not set(day2) & set(got)  # gone with their day: not brought back updated
    if how == "overwrite":
        assert got[100] == 1100.0  # the overwrite's row, updated on the second try
    assert {k: v for k, v in got.items() if k < 30} == {
        k: float(k) for k in range(30) if k % 3 != 1
    }
