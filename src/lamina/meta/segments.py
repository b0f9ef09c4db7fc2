"""Segment rows: the live ones in a span, existence checks, partition ids, deletion."""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    select,
    true,
    update,
)

from lamina.core.interval import MIN_US, Interval
from lamina.core.planner import Target
from lamina.core.segment import OVERWRITE_PARTITION_START, Segment
from lamina.meta.db import Db
from lamina.meta.manifests import drop_all as drop_manifests
from lamina.meta.partition_ids import retire
from lamina.meta.rows import segment_of
from lamina.meta.schema import MAX_SPAN_US, lineage, retired, segments, tables

_BATCH = 5000  # ids per IN (...) list


def overlapping(
    conn: Connection, table_id: int, span: Interval, longest: int | None = None
) -> list[ColumnElement[bool]]:
    """Conditions: a segment of the table overlapping ``span``. Its start is bounded
    below too (no segment is longer than the table's ``max_span_us``, read unless
    given as ``longest``), so the start index serves both ends of the range."""
    conds = [
        segments.c.table_id == table_id,
        segments.c.start_us < span.end,
        segments.c.end_us > span.start,
    ]
    if span.start > MIN_US:
        if longest is None:
            longest = conn.execute(
                select(tables.c.max_span_us).where(tables.c.id == table_id)
            ).scalar_one()
        if longest < MAX_SPAN_US:  # else some segment may be longer: no bound
            conds.append(segments.c.start_us >= span.start - longest)
    return conds


def live_rows(conn: Connection, table_id: int, span: Interval) -> list[Any]:
    """Rows of the segments not removed that overlap ``span``."""
    return list(
        conn.execute(
            select(segments).where(
                segments.c.removed_seq.is_(None), *overlapping(conn, table_id, span)
            )
        )
    )


def newest_location(conn: Connection, table_id: int) -> str | None:
    """The file of the table's newest live segment (None: it has none)."""
    return conn.execute(
        select(segments.c.location)
        .where(
            segments.c.table_id == table_id,
            segments.c.removed_seq.is_(None),
            segments.c.location.is_not(None),
        )
        .order_by(segments.c.added_seq.desc())
        .limit(1)
    ).scalar()


def live_spans(conn: Connection, table_id: int, span: Interval) -> list[Interval]:
    """The distinct intervals of the segments not removed that overlap ``span``
    (lineage-hidden ones too: a push that ends later shows them)."""
    stmt = (
        select(segments.c.start_us, segments.c.end_us)
        .where(segments.c.removed_seq.is_(None), *overlapping(conn, table_id, span))
        .distinct()
    )
    return [Interval.of(int(a), int(b)) for a, b in conn.execute(stmt)]


def live_segments(
    conn: Connection, table_id: int, table: str, span: Interval, hidden: Collection[str]
) -> list[Segment]:
    """The live segments overlapping ``span`` that lineage does not hide (locations
    as stored, relative)."""
    return [
        segment_of(r._mapping, table)
        for r in live_rows(conn, table_id, span)
        if r.segment_id not in hidden
    ]


def unknown_ids(db: Db, table_id: int, ids: list[str]) -> list[str]:
    """Those of ``ids`` the table has no segment row of (never had, or retention
    deleted it)."""
    known = {r.segment_id for r in db.read(lambda conn: rows_by_id(conn, table_id, ids))}
    return [i for i in ids if i not in known]


def rows_by_id(conn: Connection, table_id: int, ids: list[str]) -> list[Any]:
    """Rows of the named segments (removed or not)."""
    return [
        r
        for i in range(0, len(ids), _BATCH)
        for r in conn.execute(
            select(segments).where(
                segments.c.table_id == table_id, segments.c.segment_id.in_(ids[i : i + _BATCH])
            )
        )
    ]


def first_added(conn: Connection, table_id: int, locations: Collection[str]) -> dict[str, int]:
    """The seq at which each file was first published (a carried copy of a segment
    keeps its file: its first segment row's, while retention keeps that row)."""
    locs = sorted(set(locations))
    out: dict[str, int] = {}
    for i in range(0, len(locs), _BATCH):
        for loc, seq in conn.execute(
            select(segments.c.location, func.min(segments.c.added_seq))
            .where(segments.c.table_id == table_id, segments.c.location.in_(locs[i : i + _BATCH]))
            .group_by(segments.c.location)
        ):
            out[str(loc)] = int(seq)
    return out


def existing(conn: Connection, table_id: int, ids: list[str]) -> set[str]:
    """Which of ``ids`` name segments that exist (not removed)."""
    found: set[str] = set()
    for i in range(0, len(ids), _BATCH):
        found.update(
            r[0] for r in conn.execute(_EXISTING, {"tid": table_id, "ids": ids[i : i + _BATCH]})
        )
    return found


#: prebuilt (a compaction's publish runs them holding the catalog's write lock)
_EXISTING = select(segments.c.segment_id).where(
    segments.c.table_id == bindparam("tid"),
    segments.c.removed_seq.is_(None),
    segments.c.segment_id.in_(bindparam("ids", expanding=True)),
)
_MARK_REMOVED = (
    update(segments)
    .where(
        segments.c.table_id == bindparam("tid"),
        segments.c.segment_id.in_(bindparam("ids", expanding=True)),
    )
    .values(removed_seq=bindparam("seq"), removed_commit=bindparam("cid"))
)


def live_ids(conn: Connection, table_id: int) -> set[str]:
    """Ids of every segment not removed."""
    return {
        r[0]
        for r in conn.execute(
            select(segments.c.segment_id).where(
                segments.c.table_id == table_id, segments.c.removed_seq.is_(None)
            )
        )
    }


def _chunk_versions_stmt(hidden: Collection[str], bounded: bool) -> Select[Any]:
    live: ColumnElement[bool] = segments.c.removed_seq.is_(None)
    if hidden:
        live = and_(live, segments.c.segment_id.not_in(list(hidden)))
    # core partitions covered by live segments, through their root ranges (a minor
    # compaction's output stands for the core partitions it merged; live ranges of one
    # chunk and version never overlap)
    n, lo, hi = segments.c.num_core_partitions, segments.c.root_start, segments.c.root_end
    core = and_(live, lo < n)
    covered = case((hi < n, hi), else_=n) - lo
    first_gen = segments.c.partition_id < OVERWRITE_PARTITION_START
    floor = (  # ids of the chunk version's deleted rows
        select(retired.c.first)
        .where(
            retired.c.table_id == bindparam("tid"),
            retired.c.start_us == segments.c.start_us,
            retired.c.end_us == segments.c.end_us,
            retired.c.version == segments.c.version,
        )
        .scalar_subquery()
    )
    conds = [
        segments.c.table_id == bindparam("tid"),
        segments.c.start_us < bindparam("end"),
        segments.c.end_us > bindparam("start"),
    ]
    if bounded:
        conds.append(segments.c.start_us >= bindparam("floor"))
    return (
        select(
            segments.c.start_us,
            segments.c.end_us,
            segments.c.version,
            # the next appended id: above every first-generation id, and above the
            # root ranges of minor compactions' outputs (whose merged inputs
            # retention may have deleted: their ids must not be given out again)
            func.max(case((first_gen, segments.c.partition_id), else_=hi - 1)),
            func.sum(case((live, 1), else_=0)),
            func.max(case((live, segments.c.num_core_partitions), else_=0)),
            func.sum(case((core, covered), else_=0)),
            floor,
        )
        .where(*conds)
        .group_by(segments.c.start_us, segments.c.end_us, segments.c.version)
    )


def _probing_lineage(stmt: Select[Any]) -> Select[Any]:
    """``stmt``'s rows, each led by whether the table has lineage entries (one row of
    that flag and NULLs when ``stmt`` has none)."""
    flag = select(
        exists().where(lineage.c.table_id == bindparam("tid")).label("has_lineage")
    ).subquery()
    rows = stmt.subquery()
    return select(flag.c.has_lineage, *rows.c).select_from(flag.outerjoin(rows, true()))


@functools.cache
def _chunk_versions(bounded: bool, probe: bool) -> Select[Any]:
    """The statement of the common case (no lineage hides anything), built once, on
    first use (its construction is costly: not at import, which every CLI call pays).
    ``bounded``: bounded below; ``probe``: also says whether the table has lineage."""
    stmt = _chunk_versions_stmt((), bounded)
    return _probing_lineage(stmt) if probe else stmt


def chunk_versions(
    conn: Connection,
    table_id: int,
    table: str,
    span: Interval,
    hidden: Collection[str] | None,
    longest: int,
) -> tuple[list[Segment], dict[Target, int]] | None:
    """For each (chunk, version) overlapping ``span``, in one aggregate query: a
    stand-in segment when its live partitions (not hidden by lineage) are complete,
    and the first first-generation partition id no row of it ever took. ``longest``: the table's
    ``max_span_us``.

    ``hidden`` None: the caller has not read the table's lineage entries; the same
    query then checks there are none, and returns None when there are (read them,
    then call again).

    The stand-ins give the same visibility as the segments themselves (an appended
    partition never takes a core partition's id), at a cost independent of how many
    partitions a chunk holds.
    """
    bounded = span.start > MIN_US and longest < MAX_SPAN_US
    probe = hidden is None
    stmt = _chunk_versions_stmt(hidden, bounded) if hidden else _chunk_versions(bounded, probe)
    params = {"tid": table_id, "start": span.start, "end": span.end}
    if bounded:
        params["floor"] = span.start - longest
    reps: list[Segment] = []
    next_pid: dict[Target, int] = {}
    for row in conn.execute(stmt, params):
        values = tuple(row)
        if probe:
            if values[0]:
                return None
            values = values[1:]
            if values[0] is None:  # no chunk rows, only the flag
                continue
        s, e, v, top, n_live, n_core, core_present, gone = values
        iv = Interval.of(s, e)
        next_pid[(iv, v)] = max(int(top), -1 if gone is None else int(gone)) + 1
        if n_live and int(core_present or 0) >= int(n_core or 0):
            reps.append(Segment(table, iv, v, 0, 0, "", 0))
    return reps, next_pid


_Key = tuple[int, int, int]  # (start_us, end_us, version): one chunk version


def _partial_cores(conn: Connection, table_id: int, ids: Collection[str]) -> dict[_Key, list[str]]:
    """Each chunk version where one of the segments ``ids`` is a core partition but
    some of the version's live segments are not among ``ids``, with its live ids
    among ``ids``."""
    id_list = list(ids)
    mine: dict[_Key, list[str]] = {}  # chunk version -> its live ones among ids
    core: set[_Key] = set()  # ... holding a core partition among ids
    for i in range(0, len(id_list), _BATCH):
        for sid, a, b, v, p, n, gone in conn.execute(
            select(
                segments.c.segment_id,
                segments.c.start_us,
                segments.c.end_us,
                segments.c.version,
                segments.c.partition_id,
                segments.c.num_core_partitions,
                segments.c.removed_seq,
            ).where(
                segments.c.table_id == table_id,
                segments.c.segment_id.in_(id_list[i : i + _BATCH]),
            )
        ):
            key = (int(a), int(b), int(v))
            if gone is None:
                mine.setdefault(key, []).append(sid)
            if p < n:
                core.add(key)
    partial: dict[_Key, list[str]] = {}
    ordered = sorted({v for _, _, v in core})
    for i in range(0, len(ordered), _BATCH):  # live segments of those chunk versions
        for a, b, v, count in conn.execute(
            select(segments.c.start_us, segments.c.end_us, segments.c.version, func.count())
            .where(
                segments.c.table_id == table_id,
                segments.c.version.in_(ordered[i : i + _BATCH]),
                segments.c.removed_seq.is_(None),
            )
            .group_by(segments.c.start_us, segments.c.end_us, segments.c.version)
        ):
            key = (int(a), int(b), int(v))
            if key in core and int(count) > len(mine.get(key, ())):  # part stays visible
                partial[key] = mine.get(key, [])
    return partial


def decore_plan(conn: Connection, table_id: int, ids: Collection[str]) -> list[str]:
    """The ids among ``ids`` in chunk versions :func:`decore` of ``ids`` would change
    now (read ahead at a lineage entry's start; ``decore`` of them alone does the same)."""
    return [i for got in _partial_cores(conn, table_id, ids).values() for i in got]


def decore(conn: Connection, table_id: int, ids: Collection[str]) -> bool:
    """After the segments ``ids`` were removed (or hidden by a lineage entry's end):
    where one was a core partition of its chunk version and some of the version's live
    segments are not among ``ids``, the version's live segments drop their core count,
    so the rest stays visible. (A version's core partitions are published together, so
    the count only ever guarded against such removals; snapshots before the removal
    held every core partition and look the same.) Returns whether rows changed — then
    the table's segment manifests, which cache them, are dropped."""
    partial = _partial_cores(conn, table_id, ids)
    for key in partial:
        conn.execute(
            update(segments)
            .where(
                segments.c.table_id == table_id,
                segments.c.start_us == key[0],
                segments.c.end_us == key[1],
                segments.c.version == key[2],
                segments.c.removed_seq.is_(None),
            )
            .values(num_core_partitions=0)
        )
    if partial:
        drop_manifests(conn, table_id)
    return bool(partial)


def mark_removed(
    conn: Connection, table_id: int, ids: Collection[str], seq: int, commit_id: int
) -> None:
    """Record that a commit removed these segments at snapshot ``seq``."""
    id_list = list(ids)
    for i in range(0, len(id_list), _BATCH):
        batch = id_list[i : i + _BATCH]
        conn.execute(_MARK_REMOVED, {"tid": table_id, "ids": batch, "seq": seq, "cid": commit_id})


def delete_rows(conn: Connection, table_id: int, ids: Collection[str]) -> list[str]:
    """Delete segment rows; return the relative locations of their files that no other
    row names (a carried segment shares its file with the one it was copied from) —
    and of the table's segment manifests, which may name the rows and so go too."""
    if not ids:
        return []
    id_list = list(ids)
    files: list[str] = []
    for i in range(0, len(id_list), _BATCH):
        batch = id_list[i : i + _BATCH]
        cond = (segments.c.table_id == table_id, segments.c.segment_id.in_(batch))
        files += [r[0] for r in conn.execute(select(segments.c.location).where(*cond)) if r[0]]
        retire(conn, table_id, cond)
        conn.execute(delete(segments).where(*cond))
    same = and_(  # a chunk version none of whose rows is left takes no append again
        segments.c.table_id == table_id,
        segments.c.start_us == retired.c.start_us,
        segments.c.end_us == retired.c.end_us,
        segments.c.version == retired.c.version,
    )
    conn.execute(delete(retired).where(retired.c.table_id == table_id, ~exists().where(same)))
    shared: set[str] = set()
    for i in range(0, len(files), _BATCH):
        batch = files[i : i + _BATCH]
        shared |= {
            r[0]
            for r in conn.execute(
                select(segments.c.location).where(
                    segments.c.table_id == table_id, segments.c.location.in_(batch)
                )
            )
        }
    return drop_manifests(conn, table_id) + [f for f in files if f not in shared]


def purge_before(conn: Connection, table_id: int, seq: int) -> None:
    """Snapshots older than ``seq`` used deleted segments: no longer readable."""
    conn.execute(
        update(tables)
        .where(tables.c.id == table_id, tables.c.purged_seq < seq)
        .values(purged_seq=seq)
    )


def referenced_locations(conn: Connection, table_id: int) -> set[str]:
    """Relative locations of every file a segment row names."""
    return {
        r[0]
        for r in conn.execute(
            select(segments.c.location).where(
                segments.c.table_id == table_id, segments.c.location.is_not(None)
            )
        )
    }
