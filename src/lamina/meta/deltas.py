"""A big snapshot as columns: a segment manifest plus the catalog rows changed since.

See :mod:`lamina.read` for how plans use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, or_, select

from lamina.core.interval import Interval
from lamina.core.model import AsOf, Snapshot, TableRecord
from lamina.meta import manifests
from lamina.meta.db import Db
from lamina.meta.lineage_lists import hidden_at
from lamina.meta.schema import segments
from lamina.meta.schemas import schema_at
from lamina.meta.segments import overlapping
from lamina.meta.snapshots import COLUMNS, resolve, segments_of
from lamina.meta.tables import read_table

if TYPE_CHECKING:  # a small snapshot needs no Arrow: imported with the first columns
    import pyarrow as pa


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


def snapshot_or_delta(
    db: Db,
    name: str,
    as_of: AsOf,
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
        seq, commit_id = resolve(conn, rec.id, name, as_of)
        rec = schema_at(conn, rec, seq)
        hidden_ids = hidden_at(conn, rec.id, seq)
        live = [
            segments.c.table_id == rec.id,
            segments.c.added_seq <= seq,
            or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq),
        ]
        bound = [] if interval is None else overlapping(conn, rec.id, interval)
        base = manifests.newest(conn, rec.id, seq) if manifest else None
        rows: list[Any] | None = None
        if base is None or interval is not None:  # few rows may answer
            query = select(*COLUMNS).where(and_(*live, *bound))
            if base is not None:
                query = query.limit(columnar_at)
            rows = list(conn.execute(query).all())
            if len(rows) < columnar_at:
                return Snapshot(
                    rec, seq, commit_id, segments_of(db.root, rec.name, rows, hidden_ids)
                )
        hidden = _identities(conn, rec.id, hidden_ids)
        if base is None:
            assert rows is not None
            return SnapshotDelta(rec, seq, commit_id, None, 0, _columns(rows), frozenset(), hidden)
        mseq = int(base.seq)
        added = conn.execute(
            select(*COLUMNS).where(and_(*live, *bound, segments.c.added_seq > mseq))
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

    return db.read(txn)


def live_columns(db: Db, table_id: int, seq: int) -> pa.Table:
    """Every segment row live at ``seq`` (lineage not applied), as columns."""

    def txn(conn: Connection) -> pa.Table:
        rows = conn.execute(
            select(*COLUMNS).where(
                segments.c.table_id == table_id,
                segments.c.added_seq <= seq,
                or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq),
            )
        ).all()
        return _columns(rows)

    return db.read(txn)


_IDENTITY = (segments.c.start_us, segments.c.end_us, segments.c.version, segments.c.partition_id)


def _columns(rows: Sequence[Any]) -> pa.Table:
    """Segment rows (of :data:`COLUMNS`) as a :data:`SEGMENT_SCHEMA` table."""
    from lamina.core.columnar import SEGMENT_SCHEMA, segment_table  # loads numpy, pyarrow

    names = [c.name for c in COLUMNS[:-1]]  # the segment id is not kept
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
