"""Segment manifests in the catalog: which snapshot each one holds, and their upkeep.

A manifest at seq ``m`` holds every segment row live at ``m`` (lineage not applied:
which entries hide what depends on the reader's seq). A reader at seq ``s >= m`` gets
its snapshot as the manifest minus the rows removed in ``(m, s]`` plus the rows added
in ``(m, s]``. That only holds while every row the manifest names is still in the
catalog with its removal recorded, so whatever deletes segment rows (retention,
lineage cleanup) drops the table's manifests in the same transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, case, delete, func, insert, or_, select

from lamina.meta.db import Db
from lamina.meta.schema import manifests, segments, tables
from lamina.meta.tables import lock_table

#: Manifests kept per table besides the newest (older snapshots plan from them).
KEEP = 2


def newest(conn: Connection, table_id: int, seq: int) -> Any:
    """The newest manifest row usable for a snapshot at ``seq``, or None."""
    purged = select(tables.c.purged_seq).where(tables.c.id == table_id).scalar_subquery()
    return conn.execute(
        select(manifests.c.seq, manifests.c.location, manifests.c.segments)
        .where(
            manifests.c.table_id == table_id,
            manifests.c.seq <= seq,
            manifests.c.seq >= purged,
        )
        .order_by(manifests.c.seq.desc())
        .limit(1)
    ).first()


def drop_all(conn: Connection, table_id: int) -> list[str]:
    """Forget every manifest of the table; return their files (relative) to delete."""
    locs = [
        r[0]
        for r in conn.execute(select(manifests.c.location).where(manifests.c.table_id == table_id))
    ]
    if locs:
        conn.execute(delete(manifests).where(manifests.c.table_id == table_id))
    return locs


def register(
    db: Db, table_id: int, seq: int, location: str, count: int, decored: int, now: int
) -> list[str]:
    """Record a written manifest of ``count`` segments at ``seq``, ``decored`` of them
    with no core partition count — unless the rows it was built from changed meanwhile
    (then it is stale and not recorded): a row deleted (retention) changes the count,
    a row :func:`lamina.meta.segments.decore` changed in place the ``decored`` count,
    which only ever grows. It replaces one recorded at the same seq (whose file a
    reader found missing). Returns the files to delete: older manifests beyond
    :data:`KEEP`, or this one."""

    def txn(conn: Connection) -> list[str]:
        # the table's writers hold its row while they delete or decore rows (and drop
        # the manifests): checked after them, never between their check and insert
        lock_table(db, conn, table_id)
        live, zeros = conn.execute(
            select(
                func.count(),
                func.coalesce(func.sum(case((segments.c.num_core_partitions == 0, 1), else_=0)), 0),
            )
            .select_from(segments)
            .where(
                segments.c.table_id == table_id,
                segments.c.added_seq <= seq,
                or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq),
            )
        ).one()
        if live != count or zeros != decored:  # changed since it was read
            return [location]
        twin = [manifests.c.table_id == table_id, manifests.c.seq == seq]
        replaced = [r[0] for r in conn.execute(select(manifests.c.location).where(*twin))]
        conn.execute(delete(manifests).where(*twin))
        conn.execute(
            insert(manifests).values(
                table_id=table_id, seq=seq, location=location, segments=count, created_at=now
            )
        )
        old = conn.execute(
            select(manifests.c.seq, manifests.c.location)
            .where(manifests.c.table_id == table_id)
            .order_by(manifests.c.seq.desc())
            .offset(KEEP + 1)
        ).all()
        if old:
            conn.execute(
                delete(manifests).where(
                    and_(manifests.c.table_id == table_id, manifests.c.seq.in_([r[0] for r in old]))
                )
            )
        return replaced + [r[1] for r in old]

    return db.write(txn)
