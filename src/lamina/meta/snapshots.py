"""Reading one snapshot of a table: its seq, then its visible segment rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from lamina.core.interval import Interval, format_us, from_us
from lamina.core.model import AsOf, Commit, Snapshot
from lamina.core.segment import Segment
from lamina.core.versions import AtTime, travel
from lamina.errors import SnapshotNotFoundError, SnapshotTooOldError
from lamina.failpoints import failpoint
from lamina.meta.db import Db
from lamina.meta.lineage_lists import hidden_at
from lamina.meta.schema import commits, segments, tables
from lamina.meta.schemas import schema_at
from lamina.meta.segments import overlapping
from lamina.meta.tables import read_table

COLUMNS = (
    segments.c.start_us,
    segments.c.end_us,
    segments.c.version,
    segments.c.partition_id,
    segments.c.num_core_partitions,
    segments.c.location,
    segments.c.row_count,
    segments.c.size_bytes,
    segments.c.min_time,
    segments.c.max_time,
    segments.c.commit_id,
    segments.c.suffix,
    segments.c.minor_version,
    segments.c.root_start,
    segments.c.root_end,
    segments.c.aug_size,
    segments.c.segment_id,
)


def resolve(conn: Connection, table_id: int, name: str, as_of: AsOf) -> tuple[int, int | None]:
    """(version, commit id) of the latest snapshot, or of the one ``as_of`` names: a
    table version, a Commit of this table, or a time (the latest version completed at
    or before it). Raises InvalidArgumentError (a wrong type), SnapshotNotFoundError (no
    such version), SnapshotTooOldError (before the first commit, or purged)."""
    at = travel(as_of)
    if at is None:
        seq = int(
            conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar_one()
        )
        commit_id = conn.execute(
            select(commits.c.id).where(commits.c.table_id == table_id, commits.c.seq == seq)
        ).scalar()
        return seq, commit_id
    if isinstance(at, Commit):
        if at.table and at.table != name:
            raise SnapshotNotFoundError(
                f"as_of is commit {at.id} of table {at.table!r}, not of {name!r}: "
                f"pass a version of {name!r} (see t.history())"
            )
        if at.seq is None:
            raise SnapshotNotFoundError(
                f"commit {at.id} of {name!r} is {at.state}: it made no version; "
                "see t.history() for the versions you can read"
            )
        at = at.seq
    version = _version_at(conn, table_id, name, at) if isinstance(at, AtTime) else at
    in_range = 0 < version < 2**63  # a catalog seq is a 64-bit integer
    commit_id = (
        conn.execute(
            select(commits.c.id).where(commits.c.table_id == table_id, commits.c.seq == version)
        ).scalar()
        if in_range
        else None
    )
    if commit_id is None:
        first, last = _range(conn, table_id)
        which = "it has no versions yet" if first is None else f"its versions are {first} to {last}"
        raise SnapshotNotFoundError(
            f"table {name!r} has no version {version}: {which} (see t.history())"
        )
    purged = conn.execute(select(tables.c.purged_seq).where(tables.c.id == table_id)).scalar_one()
    if version < purged:
        raise too_old(
            conn,
            table_id,
            name,
            f"version {version} of {name!r} is no longer readable: retention deleted "
            "segments it used",
        )
    return version, int(commit_id)


def _range(conn: Connection, table_id: int) -> tuple[int | None, int]:
    """The table's first and last versions (None, 0: no commit yet)."""
    first = conn.execute(
        select(func.min(commits.c.seq)).where(
            commits.c.table_id == table_id, commits.c.seq.is_not(None)
        )
    ).scalar()
    last = conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar_one()
    return (None if first is None else int(first)), int(last)


def _version_at(conn: Connection, table_id: int, name: str, at: AtTime) -> int:
    """The latest version completed at or before ``at``: the one before the first
    version completed after it (so a version's time is the latest completion up to it,
    whatever the clocks of the writers said). Raises SnapshotTooOldError."""
    after = conn.execute(
        select(func.min(commits.c.seq)).where(
            commits.c.table_id == table_id,
            commits.c.seq.is_not(None),
            commits.c.completed_at > at.us,
        )
    ).scalar()
    first, last = _range(conn, table_id)
    version = last if after is None else int(after) - 1
    if first is None or version < first:
        raise too_old(conn, table_id, name, f"table {name!r} has no version as of {at}")
    return version


def too_old(conn: Connection, table_id: int, name: str, why: str) -> SnapshotTooOldError:
    """SnapshotTooOldError saying ``why`` and the oldest version (and time) readable."""
    first, _ = _range(conn, table_id)
    purged = conn.execute(select(tables.c.purged_seq).where(tables.c.id == table_id)).scalar_one()
    if first is None:
        return SnapshotTooOldError(f"{why}: it has no commit yet")
    earliest = max(first, int(purged))
    us = int(
        conn.execute(
            select(func.max(commits.c.completed_at)).where(
                commits.c.table_id == table_id,
                commits.c.seq.is_not(None),
                commits.c.seq <= earliest,
            )
        ).scalar_one()
    )
    when = from_us(us)
    return SnapshotTooOldError(
        f"{why}; the earliest available is version {earliest}, completed at "
        f"{format_us(us)} (see t.history())",
        earliest,
        when,
    )


def snapshot(
    db: Db,
    name: str,
    as_of: AsOf = None,
    *,
    all_published: bool = False,
    interval: Interval | None = None,
) -> Snapshot:
    """Live segments of the latest snapshot, or of the one completed by ``as_of``;
    only those overlapping ``interval`` when given (visibility at an instant depends
    only on the segments covering it). Raises TableNotFoundError, SnapshotNotFoundError."""

    def txn(conn: Connection) -> Snapshot:
        rec = read_table(conn, name)
        seq, commit_id = resolve(conn, rec.id, name, as_of)
        # the snapshot is resolved (not purged); its segments are not listed yet
        failpoint("snapshots.resolved", table=rec, seq=seq)
        rec = schema_at(conn, rec, seq)
        hidden = set() if all_published else hidden_at(conn, rec.id, seq)
        cond = [segments.c.table_id == rec.id, segments.c.added_seq <= seq]
        if not all_published:
            cond.append(or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq))
        if interval is not None:
            cond += overlapping(conn, rec.id, interval)
        rows = conn.execute(select(*COLUMNS).where(and_(*cond))).all()
        return Snapshot(rec, seq, commit_id, segments_of(db.root, rec.name, rows, hidden))

    return db.read(txn)


def shown_at(conn: Connection, table_id: int, name: str, seq: int) -> list[Segment]:
    """The live segments of snapshot ``seq`` that lineage did not hide then, tombstones
    too, their locations relative to the warehouse (what a restore copies)."""
    hidden = hidden_at(conn, table_id, seq)
    live = or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq)
    cond = and_(segments.c.table_id == table_id, segments.c.added_seq <= seq, live)
    return segments_of(None, name, conn.execute(select(*COLUMNS).where(cond)).all(), hidden)


def segments_of(
    root: str | None, tname: str, rows: Sequence[Any], hidden: set[str]
) -> list[Segment]:
    """Segments of catalog rows but those ``hidden``; locations under ``root`` (None:
    relative, as stored)."""
    intervals: dict[tuple[int, int], Interval] = {}  # shared, not one per segment
    segs = []
    for s, e, v, p, n, loc, rc, sb, mn, mx, cid, sfx, minor, lo, hi, aug, sid in rows:
        if sid in hidden:
            continue
        iv = intervals.get((s, e))
        if iv is None:
            iv = intervals[(s, e)] = Interval.of(s, e)
        location = (loc if root is None else f"{root}/{loc}") if loc else None
        if minor:  # a later generation
            seg = Segment(
                tname, iv, v, p, n, location, rc, sb, mn, mx, cid, sfx or "",
                minor_version=minor,
                root_partition_range=(lo, hi),
                atomic_update_group_size=aug,
            )  # fmt: skip
        else:
            seg = Segment(tname, iv, v, p, n, location, rc, sb, mn, mx, cid, sfx or "")
        segs.append(seg)
    return segs
