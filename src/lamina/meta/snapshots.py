"""Reading one snapshot of a table: its seq, then its visible segment rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, and_, or_, select

from lamina.core.columnar import SEGMENT_SCHEMA, segment_table
from lamina.core.interval import Interval
from lamina.core.lineage import hidden_by
from lamina.core.model import Snapshot, TableRecord
from lamina.core.segment import Segment
from lamina.errors import SnapshotNotFoundError
from lamina.meta import manifests
from lamina.meta.db import Db
from lamina.meta.lineage import entries
from lamina.meta.schema import commits, segments, tables
from lamina.meta.segments import overlapping
from lamina.meta.tables import read_table

_COLUMNS = (
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
    segments.c.segment_id,
)


def _resolve(
    conn: Connection, table_id: int, name: str, as_of: int | None
) -> tuple[int, int | None]:
    """(seq, commit id) of the latest snapshot, or of the one ``as_of`` completed.
    Raises SnapshotNotFoundError."""
    if as_of is None:
        seq = int(
            conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar_one()
        )
        commit_id = conn.execute(
            select(commits.c.id).where(commits.c.table_id == table_id, commits.c.seq == seq)
        ).scalar()
        return seq, commit_id
    row = conn.execute(
        select(commits.c.seq, commits.c.state).where(
            commits.c.id == as_of, commits.c.table_id == table_id
        )
    ).first()
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


@dataclass(frozen=True)
class SnapshotDelta:
    """A big snapshot, as changes to a segment manifest (or, without one, every row).

    The snapshot's segments are the manifest's (``manifest``, written at
    ``manifest_seq``; None: no manifest) minus ``removed`` plus ``added``, each
    restricted to the planned interval; ``hidden``: identities the snapshot's lineage
    hides. Identities are ``(start_us, end_us, version, partition_id)``.
    """

    table: TableRecord
    seq: int
    commit_id: int | None
    manifest: str | None
    manifest_seq: int
    added: pa.Table  # SEGMENT_SCHEMA
    removed: frozenset[Identity]
    hidden: frozenset[Identity]


Identity = tuple[int, int, int, int]


def snapshot(
    db: Db,
    name: str,
    as_of: int | None = None,
    *,
    all_published: bool = False,
    interval: Interval | None = None,
) -> Snapshot:
    """Live segments of the latest snapshot, or of the one completed by ``as_of``;
    only those overlapping ``interval`` when given (visibility at an instant depends
    only on the segments covering it). Raises TableNotFoundError, SnapshotNotFoundError."""

    def txn(conn: Connection) -> Snapshot:
        rec = read_table(conn, name)
        seq, commit_id = _resolve(conn, rec.id, name, as_of)
        hidden = set() if all_published else hidden_by(entries(conn, rec.id, seq))
        cond = [segments.c.table_id == rec.id, segments.c.added_seq <= seq]
        if not all_published:
            cond.append(or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq))
        if interval is not None:
            cond += overlapping(conn, rec.id, interval)
        rows = conn.execute(select(*_COLUMNS).where(and_(*cond))).all()
        return Snapshot(rec, seq, commit_id, _segments(db.root, rec.name, rows, hidden))

    return db.read(txn)


def snapshot_or_delta(
    db: Db,
    name: str,
    as_of: int | None,
    interval: Interval | None,
    columnar_at: int,
    manifest: bool = True,
) -> Snapshot | SnapshotDelta:
    """The snapshot's live segments as objects when fewer than ``columnar_at`` of them
    overlap ``interval``; else as a :class:`SnapshotDelta` (columnar, against the
    newest usable manifest unless ``manifest`` is False). One consistent read.
    Raises TableNotFoundError, SnapshotNotFoundError."""

    def txn(conn: Connection) -> Snapshot | SnapshotDelta:
        rec = read_table(conn, name)
        seq, commit_id = _resolve(conn, rec.id, name, as_of)
        hidden_ids = hidden_by(entries(conn, rec.id, seq))
        live = [
            segments.c.table_id == rec.id,
            segments.c.added_seq <= seq,
            or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq),
        ]
        bound = [] if interval is None else overlapping(conn, rec.id, interval)
        base = manifests.newest(conn, rec.id, seq) if manifest else None
        rows: list[Any] | None = None
        if base is None or interval is not None:  # few rows may answer
            query = select(*_COLUMNS).where(and_(*live, *bound))
            if base is not None:
                query = query.limit(columnar_at)
            rows = list(conn.execute(query).all())
            if len(rows) < columnar_at:
                return Snapshot(rec, seq, commit_id, _segments(db.root, rec.name, rows, hidden_ids))
        hidden = _identities(conn, rec.id, hidden_ids)
        if base is None:
            assert rows is not None
            return SnapshotDelta(rec, seq, commit_id, None, 0, _columns(rows), frozenset(), hidden)
        mseq = int(base.seq)
        added = conn.execute(
            select(*_COLUMNS).where(and_(*live, *bound, segments.c.added_seq > mseq))
        ).all()
        removed = conn.execute(
            select(*_IDENTITY).where(
                segments.c.table_id == rec.id,
                segments.c.removed_seq > mseq,
                segments.c.removed_seq <= seq,
                segments.c.added_seq <= mseq,
            )
        ).all()
        return SnapshotDelta(
            rec,
            seq,
            commit_id,
            str(base.location),
            mseq,
            _columns(added),
            frozenset(tuple(r) for r in removed),
            hidden,
        )

    return db.read(txn, consistent=True)


def live_columns(db: Db, table_id: int, seq: int) -> pa.Table:
    """Every segment row live at ``seq`` (lineage not applied), as columns."""

    def txn(conn: Connection) -> pa.Table:
        rows = conn.execute(
            select(*_COLUMNS).where(
                segments.c.table_id == table_id,
                segments.c.added_seq <= seq,
                or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq),
            )
        ).all()
        return _columns(rows)

    return db.read(txn, consistent=True)


_IDENTITY = (segments.c.start_us, segments.c.end_us, segments.c.version, segments.c.partition_id)


def _segments(root: str, tname: str, rows: Sequence[Any], hidden: set[str]) -> list[Segment]:
    intervals: dict[tuple[int, int], Interval] = {}  # shared, not one per segment
    segs = []
    for s, e, v, p, n, loc, rc, sb, mn, mx, cid, sfx, sid in rows:
        if sid in hidden:
            continue
        iv = intervals.get((s, e))
        if iv is None:
            iv = intervals[(s, e)] = Interval.of(s, e)
        location = f"{root}/{loc}" if loc else None
        segs.append(Segment(tname, iv, v, p, n, location, rc, sb, mn, mx, cid, sfx or ""))
    return segs


def _columns(rows: Sequence[Any]) -> pa.Table:
    """Segment rows (of :data:`_COLUMNS`) as a :data:`SEGMENT_SCHEMA` table."""
    names = [c.name for c in _COLUMNS[:-1]]  # the segment id is not kept
    if not rows:
        return SEGMENT_SCHEMA.empty_table()
    cols = list(zip(*rows, strict=True))
    return segment_table(dict(zip(names, cols, strict=False)))


def _identities(conn: Connection, table_id: int, ids: set[str]) -> frozenset[Identity]:
    out: set[Identity] = set()
    id_list = sorted(ids)
    for i in range(0, len(id_list), 5000):
        batch = id_list[i : i + 5000]
        out |= {
            (int(a), int(b), int(c), int(d))
            for a, b, c, d in conn.execute(
                select(*_IDENTITY).where(
                    segments.c.table_id == table_id, segments.c.segment_id.in_(batch)
                )
            )
        }
    return frozenset(out)
