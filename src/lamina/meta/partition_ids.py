"""Partition ids of new segments that no segment row of their chunk version ever took:
the next later-generation ids of compaction outputs, and the highest ids of the rows
retention deletes (kept in ``lamina_retired_pids``), so an id is never given out again
(a segment id names one file in the history, lineage lists and change feeds)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    update,
)

from lamina.core.interval import Interval
from lamina.core.segment import OVERWRITE_PARTITION_START
from lamina.meta.schema import retired, segments

#: the top later-generation partition id of one chunk version (prebuilt: a compaction's
#: publish asks for a few while it holds the catalog's write lock)
_TOP_PID = select(func.max(segments.c.partition_id)).where(
    segments.c.table_id == bindparam("tid"),
    segments.c.start_us == bindparam("start"),
    segments.c.end_us == bindparam("end"),
    segments.c.version == bindparam("version"),
    segments.c.partition_id >= OVERWRITE_PARTITION_START,
)
#: up to this many chunk versions are asked for one by one with :data:`_TOP_PID`
_ONE_BY_ONE = 8


def next_overwrite_pids(
    conn: Connection, table_id: int, keys: Collection[tuple[Interval, int]]
) -> dict[tuple[Interval, int], int]:
    """For each (chunk, version) of ``keys``, the first later-generation partition id
    no row ever took: a prebuilt query per chunk version for a few, else one aggregate
    query per ``_OR_BATCH`` of them."""
    wanted = sorted(set(keys), key=lambda k: (k[0].start, k[0].end, k[1]))
    out = dict.fromkeys(wanted, OVERWRITE_PARTITION_START)
    if len(wanted) <= _ONE_BY_ONE:
        for iv, v in wanted:
            top = conn.execute(
                _TOP_PID, {"tid": table_id, "start": iv.start, "end": iv.end, "version": v}
            ).scalar()
            if top is not None:
                out[(iv, v)] = int(top) + 1
        return _above_retired(conn, table_id, out)
    for i in range(0, len(wanted), _OR_BATCH):  # SQLite: an OR of n terms is n deep
        which = or_(
            *(
                and_(
                    segments.c.start_us == iv.start,
                    segments.c.end_us == iv.end,
                    segments.c.version == v,
                )
                for iv, v in wanted[i : i + _OR_BATCH]
            )
        )
        stmt = (
            select(
                segments.c.start_us,
                segments.c.end_us,
                segments.c.version,
                func.max(segments.c.partition_id),
            )
            .where(
                segments.c.table_id == table_id,
                segments.c.partition_id >= OVERWRITE_PARTITION_START,
                which,
            )
            .group_by(segments.c.start_us, segments.c.end_us, segments.c.version)
        )
        for s, e, v, top in conn.execute(stmt):
            out[(Interval.of(s, e), int(v))] = int(top) + 1
    return _above_retired(conn, table_id, out)


def _above_retired(
    conn: Connection, table_id: int, out: dict[tuple[Interval, int], int]
) -> dict[tuple[Interval, int], int]:
    """``out``'s next later-generation ids, raised above those deleted rows took (few:
    only chunk versions where retention deleted a segment have a row)."""
    if not out:
        return out
    lo, hi = min(iv.start for iv, _ in out), max(iv.end for iv, _ in out)
    stmt = select(retired.c.start_us, retired.c.end_us, retired.c.version, retired.c.later).where(
        retired.c.table_id == table_id,
        retired.c.start_us >= lo,
        retired.c.end_us <= hi,
        retired.c.later >= 0,
    )
    for s, e, v, later in conn.execute(stmt):
        key = (Interval.of(s, e), int(v))
        if key in out:
            out[key] = max(out[key], int(later) + 1)
    return out


#: terms per OR (SQLite limits an expression's depth to 1,000)
_OR_BATCH = 200


def retire(conn: Connection, table_id: int, cond: tuple[ColumnElement[bool], ...]) -> None:
    """Keep the highest partition ids of the rows ``cond`` selects, about to be
    deleted, per chunk version: they are never given out again."""
    first_gen = segments.c.partition_id < OVERWRITE_PARTITION_START
    groups = conn.execute(
        select(
            segments.c.start_us,
            segments.c.end_us,
            segments.c.version,
            func.max(case((first_gen, segments.c.partition_id), else_=segments.c.root_end - 1)),
            func.max(case((first_gen, -1), else_=segments.c.partition_id)),
        )
        .where(*cond)
        .group_by(segments.c.start_us, segments.c.end_us, segments.c.version)
    ).all()
    for s, e, v, first, later in groups:
        key = (
            retired.c.table_id == table_id,
            retired.c.start_us == s,
            retired.c.end_us == e,
            retired.c.version == v,
        )
        old = conn.execute(select(retired.c.first, retired.c.later).where(*key)).first()
        first, later = int(first if first is not None else -1), int(later)
        if old is None:
            conn.execute(
                insert(retired).values(
                    table_id=table_id, start_us=s, end_us=e, version=v, first=first, later=later
                )
            )
        elif first > old.first or later > old.later:
            conn.execute(
                update(retired)
                .where(*key)
                .values(first=max(first, int(old.first)), later=max(later, int(old.later)))
            )
