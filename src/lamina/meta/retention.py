"""Retention: delete the segment rows that lineage and later commits made garbage.

What a commit removed stays while a write that began before that commit is open: at
publish, that write checks every commit since its base against what it read, and the
check reads the removed segments (their ids and intervals); a row-level change may
also read its base snapshot again. Without them a concurrent overwrite would go
unseen, and an update made on the old rows would bring them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, select

from lamina.core.lineage import LineageState
from lamina.core.model import OPEN_STATES
from lamina.meta import deletes
from lamina.meta import lineage as entries_rows
from lamina.meta.db import Db
from lamina.meta.lineage_lists import entry_row
from lamina.meta.schema import commits, key_snapshots, manifests, segments
from lamina.meta.segments import delete_rows, purge_before, referenced_locations
from lamina.meta.tables import lock_table, now_us, read_table
from lamina.meta.writers import dead


class _Rehearsed(Exception):
    """A dry run's result, raised to roll its transaction back."""

    def __init__(self, garbage: list[str]) -> None:
        super().__init__("dry run")
        self.garbage = garbage


def retention(
    db: Db,
    name: str,
    now: int,
    replaced_after_us: int,
    lineage_after_us: int,
    stale_after_s: float,
    dry_run: bool = False,
) -> list[str]:
    """Delete segments that lineage or later commits made garbage; return their files
    (``dry_run``: the same transaction, rolled back: what it would delete).

    * COMPLETED entries older than ``replaced_after_us``: their segments_from;
    * REVERTED entries, and IN_PROGRESS ones older than ``lineage_after_us``: their
      segments_to;
    * segments removed by a commit (overwrite, delete) longer than
      ``replaced_after_us`` ago.
    But none that a commit removed (or swapped) after the base of an open write whose
    writer is alive (``stale_after_s``: how long a silent remote writer counts as
    alive): that write's conflict check reads them (see the module). An entry goes
    once its segments are gone; its commits stay in the history. Raises
    TableNotFoundError.
    """

    def txn(conn: Connection) -> list[str]:
        trow = lock_table(db, conn, name)
        table_id = int(trow.id)
        pinned = _pinned(conn, table_id, stale_after_s)
        garbage: list[str] = []
        purge = 0
        current = entries_rows.entries(conn, table_id)
        dropped: set[str] = set()
        for entry in current:
            if entry.id in dropped:
                continue
            row = entry_row(db, conn, table_id, entry.id)
            age = now - int(row.timestamp)
            if entry.state == LineageState.COMPLETED and age >= replaced_after_us:
                if int(row.completed_seq) > pinned:
                    continue  # swapped after an open write's base: it checks the swap
                gone = set(entry.segments_from)
                # snapshots before the swap read segments_from (deleted now), and those
                # after the push's first batch had the entry hide it: without it they
                # would show a push half done (a one-commit push has no such snapshot)
                if gone or _shown_before(conn, table_id, entry.segments_to, row.completed_seq):
                    purge = max(purge, int(row.completed_seq))
            elif entry.state == LineageState.REVERTED or (
                entry.state == LineageState.IN_PROGRESS and age >= lineage_after_us
            ):
                gone = set(entry.segments_to)
                if row.completed_seq is not None and int(row.reverted_seq) > pinned:
                    continue  # swapped back after an open write's base (as above)
                if row.completed_seq is not None:  # swapped for a while: those snapshots
                    purge = max(purge, int(row.reverted_seq))  # read it through the entry
            else:
                continue
            garbage += delete_rows(conn, table_id, gone)
            entries_rows.drop_entry(conn, entry.id)
            dropped |= {entry.id} | entries_rows.drop_dangling(conn, current, gone)
        removed = conn.execute(
            select(segments.c.segment_id, segments.c.removed_seq)
            .join(commits, commits.c.id == segments.c.removed_commit)
            .where(
                segments.c.table_id == table_id,
                segments.c.removed_seq.is_not(None),
                segments.c.removed_seq <= pinned,
                commits.c.completed_at <= now - replaced_after_us,
            )
        ).all()
        if removed:
            garbage += delete_rows(conn, table_id, {r[0] for r in removed})
            purge = max(purge, max(int(r[1]) for r in removed))
        if purge:
            purge_before(conn, table_id, purge)
        if garbage:  # the deletion vectors of files going now: no snapshot reads them
            deletes.drop(conn, table_id, garbage)
        if dry_run:
            raise _Rehearsed(garbage)
        return garbage

    try:
        return db.write(txn)
    except _Rehearsed as rehearsed:
        return rehearsed.garbage


def _pinned(conn: Connection, table_id: int, stale_after_s: float) -> int:
    """The oldest base seq of the table's open writes whose writers are alive (no
    bound when there is none): what commits removed after it stays."""
    open_ = conn.execute(
        select(commits.c.base_seq, commits.c.owner, commits.c.heartbeat_at).where(
            commits.c.table_id == table_id,
            commits.c.state.in_(OPEN_STATES),
            commits.c.base_seq.is_not(None),
        )
    ).all()
    now = now_us()
    bases = [int(r.base_seq) for r in open_ if not dead(r, stale_after_s, now)]
    return min(bases, default=2**62)


def _shown_before(conn: Connection, table_id: int, ids: Sequence[str], seq: int) -> bool:
    """Whether a snapshot before ``seq`` holds one of the segments ``ids``."""
    ids = list(ids)
    for i in range(0, len(ids), 500):  # bound the statement's parameters
        first = conn.execute(
            select(func.min(segments.c.added_seq)).where(
                segments.c.table_id == table_id, segments.c.segment_id.in_(ids[i : i + 500])
            )
        ).scalar()
        if first is not None and int(first) < int(seq):
            return True
    return False


def referenced_files(db: Db, name: str) -> set[str]:
    """Relative locations of every file a segment row, a key index snapshot row or a
    segment manifest row of the table names. Raises TableNotFoundError."""

    def read(conn: Connection) -> set[str]:
        table_id = read_table(conn, name).id
        named = {
            r[0]
            for t in (key_snapshots, manifests)
            for r in conn.execute(select(t.c.location).where(t.c.table_id == table_id))
        }
        return referenced_locations(conn, table_id) | named

    return db.read(read)
