"""Reading one snapshot of a table: its seq, then its visible segment rows."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, or_, select

from lamina.core.interval import Interval
from lamina.core.model import AsOf, Commit, Snapshot
from lamina.core.segment import Segment
from lamina.errors import SnapshotNotFoundError
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
    """(seq, commit id) of the latest snapshot, or of the one ``as_of`` (a commit id or a
    Commit of this table) completed. Raises SnapshotNotFoundError."""
    if isinstance(as_of, Commit):
        if as_of.table and as_of.table != name:
            raise SnapshotNotFoundError(
                f"as_of is commit {as_of.id} of table {as_of.table!r}, not of {name!r}: "
                f"pass a commit of {name!r} (see t.history())"
            )
        as_of = as_of.id
    elif as_of is not None:
        try:  # an int, or any integer type (numpy's too); not a bool, float or string
            if isinstance(as_of, bool):
                raise TypeError
            as_of = operator.index(as_of)
        except TypeError:
            raise SnapshotNotFoundError(
                f"as_of takes a commit id (int) or a Commit, not {type(as_of).__name__} "
                f"{as_of!r}: see t.history() for the commits you can read"
            ) from None
    if as_of is None:
        seq = int(
            conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar_one()
        )
        commit_id = conn.execute(
            select(commits.c.id).where(commits.c.table_id == table_id, commits.c.seq == seq)
        ).scalar()
        return seq, commit_id
    in_range = -(2**63) <= as_of < 2**63  # a catalog id is a 64-bit integer
    row = (
        conn.execute(
            select(commits.c.seq, commits.c.state).where(
                commits.c.id == as_of, commits.c.table_id == table_id
            )
        ).first()
        if in_range
        else None
    )
    if row is None or row.seq is None:
        state = "no such commit" if row is None else row.state
        raise SnapshotNotFoundError(
            f"table {name!r} has no completed commit {as_of} ({state}); "
            "see t.history() for the commits you can read"
        )
    purged = conn.execute(select(tables.c.purged_seq).where(tables.c.id == table_id)).scalar_one()
    if int(row.seq) < purged:
        raise SnapshotNotFoundError(
            f"the snapshot of commit {as_of} of {name!r} is no longer readable: "
            "retention deleted segments it used; read a newer commit (see t.history())"
        )
    return int(row.seq), as_of


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


def segments_of(root: str, tname: str, rows: Sequence[Any], hidden: set[str]) -> list[Segment]:
    intervals: dict[tuple[int, int], Interval] = {}  # shared, not one per segment
    segs = []
    for s, e, v, p, n, loc, rc, sb, mn, mx, cid, sfx, minor, lo, hi, aug, sid in rows:
        if sid in hidden:
            continue
        iv = intervals.get((s, e))
        if iv is None:
            iv = intervals[(s, e)] = Interval.of(s, e)
        location = f"{root}/{loc}" if loc else None
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
