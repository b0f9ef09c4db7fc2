"""Optimistic concurrency through the catalog: two transactions opened before either
commits, for every conflict rule; on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina.errors import CommitConflictError, TransactionError
from tests.helpers import SCHEMA, events


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    table = cat.create_table("o", SCHEMA, time_column="ts", segment_granularity="DAY")
    table.append(events(days=3, per_day=10, value=1.0))  # Jan 1-3, v = 1.0
    return table


def day(d: int, rows: int, value: float) -> pa.Table:
    return events(days=1, per_day=rows, value=value, seed=int(value * 10), start=f"2024-01-0{d}")


def values(t: lamina.Table) -> Counter[float]:
    return Counter(t.to_arrow(columns=["v"]).column("v").to_pylist())


def commit_dirs(cat: lamina.Catalog) -> set[str]:
    return {p.name for p in (Path(cat.warehouse.root) / "o" / "data").iterdir()}


def test_two_appends_both_publish(t: lamina.Table) -> None:
    with t.transaction() as a, t.transaction() as b:
        assert a.base_seq == b.base_seq
        a.append(day(2, 3, 2.0))
        b.append(day(2, 4, 3.0))
    assert values(t) == {1.0: 30, 2.0: 3, 3.0: 4}


def test_overwrites_of_one_chunk_the_later_conflicts(t: lamina.Table, cat: lamina.Catalog) -> None:
    a, b = t.transaction(), t.transaction()
    a.overwrite(day(2, 3, 2.0))
    b.overwrite(day(2, 4, 3.0))
    first = a.commit()
    before = commit_dirs(cat)
    with pytest.raises(CommitConflictError, match=f"commit {first.id}") as err:
        b.commit()
    assert err.value.other == first.id and not err.value.retryable
    assert values(t) == {1.0: 20, 2.0: 3}  # nothing of b
    assert len(commit_dirs(cat)) == len(before) - 1  # b's files are gone
    with pytest.raises(TransactionError, match="aborted"):
        b.append(day(1, 1, 9.0))


def test_overwrites_of_overlapping_intervals_conflict_where_nothing_was(t: lamina.Table) -> None:
    """An overwrite tombstones only chunks where segments lie, but it still replaces
    its whole interval: a concurrent overwrite of an overlapping one conflicts even
    when their rows fall in days that were empty."""
    a, b = t.transaction(), t.transaction()
    a.overwrite(day(5, 2, 2.0), interval="2024-01-04/2024-01-10")
    b.overwrite(day(7, 2, 3.0), interval="2024-01-06/2024-01-08")
    a.commit()
    with pytest.raises(CommitConflictError, match="replaced"):
        b.commit()
    assert values(t) == {1.0: 30, 2.0: 2}


def test_an_overwrite_of_a_wide_interval_costs_what_lies_there(t: lamina.Table) -> None:
    """What a CLI hunt found: an overwrite of 2024-01-03 to year 99999 built a tombstone
    per day in memory (16 GB); a century-long push left 36k tombstone rows. Tombstones
    go only where segments lie (Druid's too)."""
    t.append(day(9, 2, 4.0))
    t.overwrite(day(3, 1, 5.0), interval="2024-01-03/9000-01-01")
    assert values(t) == {1.0: 20, 5.0: 1}
    tombstones = [str(s.interval)[:10] for s in t.segments(all=True) if s.location is None]
    assert tombstones == ["2024-01-09"]
    assert t.to_arrow(as_of=t.history()[-2].version).num_rows == 32  # before: as it was


def test_overwrites_of_other_chunks_both_publish(t: lamina.Table) -> None:
    with t.transaction() as a, t.transaction() as b:
        a.overwrite(day(1, 3, 2.0))
        b.overwrite(day(3, 4, 3.0))
    assert values(t) == {1.0: 10, 2.0: 3, 3.0: 4}


def test_an_overwrite_keeps_rows_appended_meanwhile(t: lamina.Table, cat: lamina.Catalog) -> None:
    """Druid's concurrent append + replace: the overwrite replaces what it saw; the
    rows appended while it ran stay visible on top of its version."""
    ow = t.transaction()
    ow.overwrite(day(2, 3, 2.0))
    t.append(day(2, 5, 5.0))  # completes while the overwrite runs
    c = ow.commit()
    assert values(t) == {1.0: 20, 2.0: 3, 5.0: 5}
    chunk = [s for s in t.segments() if s.interval.start_dt.day == 2]
    assert {s.version for s in chunk} == {max(s.version for s in t.segments())}
    assert len(c.added) == 2  # its file, and the carried one
    # the carried file outlives the original's retention (it is shared)
    t.set_properties(replaced_segments_retention="0s")
    cat.run_retention(now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert values(t) == {1.0: 20, 2.0: 3, 5.0: 5}
    assert cat.find_orphans() == []


def test_a_serializable_overwrite_refuses_rows_appended_meanwhile(t: lamina.Table) -> None:
    ow = t.transaction(isolation="serializable")
    ow.overwrite(day(2, 3, 2.0))
    appended = t.append(day(2, 5, 5.0))
    with pytest.raises(CommitConflictError, match="serializable") as err:
        ow.commit()
    assert err.value.other == appended.id
    assert values(t) == {1.0: 30, 5.0: 5}


def test_an_append_after_an_overwrite_joins_its_version(t: lamina.Table) -> None:
    ap = t.transaction()
    ap.append(day(2, 5, 5.0))
    t.overwrite(day(2, 3, 2.0))  # completes while the append runs
    ap.commit()
    assert values(t) == {1.0: 20, 2.0: 3, 5.0: 5}


def test_a_delete_of_segments_an_overwrite_replaced_conflicts(t: lamina.Table) -> None:
    victim = next(s.id for s in t.segments() if s.interval.start_dt.day == 2)
    dl = t.transaction()
    dl.delete_segments([victim])
    ow = t.overwrite(day(2, 3, 2.0))
    with pytest.raises(CommitConflictError, match=f"commit {ow.id}"):
        dl.commit()
    assert values(t) == {1.0: 20, 2.0: 3}


def test_deletes_of_one_segment_conflict_and_of_two_do_not(t: lamina.Table) -> None:
    t.append(day(2, 2, 2.0))
    segs = [s.id for s in t.segments() if s.interval.start_dt.day == 2]
    assert len(segs) == 2
    a, b, c = t.transaction(), t.transaction(), t.transaction()
    a.delete_segments([segs[0]])
    b.delete_segments([segs[0]])
    c.delete_segments([segs[1]])
    a.commit()
    with pytest.raises(CommitConflictError, match="removed segment"):
        b.commit()
    c.commit()
    assert values(t) == {1.0: 20}


def test_a_write_under_an_entry_reverted_meanwhile_conflicts(t: lamina.Table) -> None:
    """Never clobber a lineage entry (Pinot #10103): a batch of a push still being
    written when its entry is reverted does not publish."""
    from lamina.core.plans import AppendPlan, LineageBatch
    from lamina.io.writer import split_by_chunk, write_parts
    from lamina.write import WriteTransaction

    entry = t.start_replace([], [])
    with WriteTransaction(t._handle.ctx, t._handle.record, "APPEND", {}) as w:
        w.inflight()
        parts = split_by_chunk(day(2, 2, 2.0), "ts", t.granularity, 1000)
        files = write_parts(t._handle.ctx.warehouse, w.dir, parts)
        reverted = max(c.seq for c in t.history() if c.seq is not None)
        t.revert_replace(entry, force=True)  # completes while the batch is written
        with pytest.raises(CommitConflictError, match=f"lineage entry {entry}") as err:
            w.publish(AppendPlan(files=tuple(files), lineage=LineageBatch(entry)))
    assert err.value.other == next(c.id for c in t.history() if c.seq == reverted + 1)
    assert values(t) == {1.0: 30}


def test_a_transaction_publishes_all_its_operations_as_one_commit(t: lamina.Table) -> None:
    victim = next(s.id for s in t.segments() if s.interval.start_dt.day == 3)
    seq = t.history()[-1].seq
    with t.transaction(metadata={"job": "nightly"}) as tx:
        tx.append(day(1, 2, 2.0))
        tx.overwrite(day(2, 3, 3.0))
        tx.delete_segments([victim])
        assert values(t) == {1.0: 30}  # nothing visible before the commit
    c = tx.commit_result
    assert c is not None and c.seq == seq + 1 and c.action == "OVERWRITE"
    assert c.metadata["job"] == "nightly"
    assert values(t) == {1.0: 10, 2.0: 2, 3.0: 3}


def test_overwrites_of_one_day_in_a_transaction_replace_it_together(t: lamina.Table) -> None:
    """A day written in batches: the overwrites of one transaction replace it with the
    rows of all of them (docs/concurrency.md), in one commit."""
    with t.transaction() as tx:
        tx.overwrite(day(2, 2, 2.0))
        tx.overwrite(day(2, 3, 3.0))
    assert values(t) == {1.0: 20, 2.0: 2, 3.0: 3}
    assert t.history()[-1].action == "OVERWRITE"


def test_an_append_then_an_overwrite_of_its_empty_day_is_refused(t: lamina.Table) -> None:
    """An overwrite tombstones only days where segments lie; an append this
    transaction made into an empty day of its interval still clashes (order matters)."""
    tx = t.transaction()
    tx.append(day(7, 1, 2.0))
    with pytest.raises(TransactionError, match="two transactions"):
        tx.overwrite(day(5, 1, 3.0), interval="2024-01-04/2024-01-10")
    tx.abort()


def test_an_exception_or_abort_discards_everything(t: lamina.Table, cat: lamina.Catalog) -> None:
    before = commit_dirs(cat)
    with pytest.raises(RuntimeError), t.transaction() as tx:
        tx.append(day(1, 2, 2.0))
        raise RuntimeError("boom")
    tx2 = t.transaction()
    tx2.overwrite(day(2, 2, 2.0))
    tx2.abort()
    assert values(t) == {1.0: 30} and commit_dirs(cat) == before
    assert [c.state for c in t.history()][-2:] == ["ABORTED", "ABORTED"]
    # the history shows what each was doing (a soak saw aborted major compactions,
    # which overwrite, listed as APPEND)
    assert [str(c.action) for c in t.history()][-2:] == ["APPEND", "OVERWRITE"]


def test_bad_transactions_are_typed_errors(t: lamina.Table) -> None:
    with pytest.raises(TransactionError, match="write_serializable, serializable"):
        t.transaction(isolation="snapshot")
    tx = t.transaction()
    tx.overwrite(day(2, 1, 2.0))
    with pytest.raises(TransactionError, match="two transactions"):
        tx.append(day(2, 1, 3.0))
    tx.commit()
    with pytest.raises(TransactionError, match="committed"):
        tx.commit()
    assert values(t) == {1.0: 20, 2.0: 1}


def test_deleting_what_was_appended_after_an_overwrite_began_is_no_conflict(
    t: lamina.Table,
) -> None:
    """The overwrite never read segment X (appended after its base, deleted again), as
    Delta checks deletes only against the files a transaction read (a hunt: refused)."""
    ow = t.transaction()
    ow.overwrite(day(2, 3, 2.0))
    x = t.append(day(2, 4, 9.0))
    t.delete_segments(list(x.added))
    ow.commit()
    assert values(t) == {1.0: 20, 2.0: 3}  # X neither carried back nor a conflict
