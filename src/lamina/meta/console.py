"""The catalog reads behind the web console: per-table statistics, a table's timeline
grouped by (chunk interval, version) in SQL, its commits with what each added and
removed, its locks with their holders' heartbeats, its open writers. Each is one read
transaction; what the numbers mean is :mod:`lamina.core.console`'s."""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Connection, and_, case, func, literal, select, tuple_

from lamina.core.console import Groups, TableStats
from lamina.core.interval import Interval
from lamina.meta.db import Db
from lamina.meta.lineage_lists import hidden_at
from lamina.meta.schema import app_txns, commits, deletes, locks, segments, tables
from lamina.meta.segments import overlapping
from lamina.meta.tables import now_us, read_table

OPEN_STATES = ("REQUESTED", "INFLIGHT")
_HIDDEN_MAX = 20_000  # lineage-hidden ids a timeline query leaves out (beyond: shown)


#: Per table id: segments, rows, bytes, small segments (published, not removed).
Totals = dict[int, tuple[int, int, int, int]]


class TotalsCache:
    """Every table's published data segments not removed: count, rows, bytes, and the
    small ones (``small_rows(properties)``: the row count under which a segment of a
    table with those properties is small), kept current table by table: a table whose
    last seq moved gets the difference its commits made since (the data segments they
    added that are still live, less those live then that they removed: two indexed
    reads), not a regrouping of its rows. A table whose small-segment threshold changed,
    or that is new, is totalled anew."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # by catalog (an entry goes with its Db): table id -> (seq, threshold, totals)
        self._kept: weakref.WeakKeyDictionary[
            Db, dict[int, tuple[int, int, tuple[int, int, int, int]]]
        ] = weakref.WeakKeyDictionary()

    def totals(self, db: Db, small_rows: Callable[[Mapping[str, str]], int]) -> Totals:
        with self._lock:
            kept = self._kept.get(db)
            if kept is None:
                kept = self._kept[db] = {}
            return db.read(lambda conn: _caught_up_totals(conn, kept, small_rows))


def _caught_up_totals(
    conn: Connection,
    kept: dict[int, tuple[int, int, tuple[int, int, int, int]]],
    small_rows: Callable[[Mapping[str, str]], int],
) -> Totals:
    """``kept`` (table id: (seq, threshold, totals)) brought up to date in place."""
    s = segments.c
    data = s.location.is_not(None)
    now = {
        int(tid): (int(seq or 0), small_rows(json.loads(raw or "{}")))
        for tid, seq, raw in conn.execute(
            select(tables.c.id, tables.c.last_seq, tables.c.properties)
        )
    }
    for tid in set(kept) - set(now):  # dropped
        del kept[tid]
    anew = [tid for tid, (_, limit) in now.items() if tid not in kept or kept[tid][1] != limit]
    if anew:
        by_limit: dict[int, list[int]] = {}
        for tid in anew:
            by_limit.setdefault(now[tid][1], []).append(tid)
        for limit, ids in by_limit.items():
            got = dict.fromkeys(ids, (0, 0, 0, 0))
            for r in conn.execute(
                _live_sums(limit)
                .where(s.table_id.in_(ids), s.removed_seq.is_(None), data)
                .group_by(s.table_id)
            ):
                got[int(r[0])] = (int(r[1]), int(r[2]), int(r[3]), int(r[4] or 0))
            for tid in ids:
                kept[tid] = (now[tid][0], limit, got[tid])
    for tid, (seq, limit) in now.items():
        was, _, totals = kept[tid]
        if seq == was:
            continue
        mine = s.table_id == tid
        added = conn.execute(
            _live_sums(limit)
            .where(mine, data, s.added_seq > was, s.removed_seq.is_(None))
            .group_by(s.table_id)
        ).first()
        removed = conn.execute(
            _live_sums(limit)
            .where(mine, data, s.removed_seq > was, s.added_seq <= was)
            .group_by(s.table_id)
        ).first()
        plus = (0, 0, 0, 0) if added is None else tuple(int(v or 0) for v in added[1:])
        minus = (0, 0, 0, 0) if removed is None else tuple(int(v or 0) for v in removed[1:])
        n, rows, size, small = (a + b - c for a, b, c in zip(totals, plus, minus, strict=True))
        kept[tid] = (seq, limit, (n, rows, size, small))
    return {tid: t for tid, (_, _, t) in kept.items()}


def _live_sums(limit: int) -> Any:
    """Per table: segments, rows, bytes, and those under ``limit`` rows."""
    s = segments.c
    return select(
        s.table_id,
        func.count(),
        func.coalesce(func.sum(s.row_count), 0),
        func.coalesce(func.sum(s.size_bytes), 0),
        func.sum(case((s.row_count < limit, 1), else_=0)),
    )


def table_stats(db: Db, totals: Totals) -> list[TableStats]:
    """Every table's statistics (by name), with its ``totals`` (:class:`TotalsCache`)
    and, read now, its last commit, open writers and superseded rows."""

    def txn(conn: Connection) -> list[TableStats]:
        now = now_us()
        defs = conn.execute(select(tables.c.id, tables.c.name, tables.c.properties)).all()
        if not defs:
            return []
        props = {r.id: json.loads(r.properties or "{}") for r in defs}
        live = and_(segments.c.removed_seq.is_(None), segments.c.location.is_not(None))
        last = dict(
            conn.execute(
                select(commits.c.table_id, func.max(commits.c.completed_at))
                .where(commits.c.state == "COMPLETED")
                .group_by(commits.c.table_id)
            ).all()
        )
        writers = {
            r.table_id: r
            for r in conn.execute(
                select(commits.c.table_id, func.count().label("n"), func.min(commits.c.started_at))
                .where(commits.c.state.in_(OPEN_STATES))
                .group_by(commits.c.table_id)
            )
        }
        superseded = dict(
            conn.execute(
                select(deletes.c.table_id, func.sum(deletes.c.cardinality))
                .where(
                    deletes.c.location.in_(
                        select(segments.c.location).where(
                            live, segments.c.table_id == deletes.c.table_id
                        )
                    )
                )
                .group_by(deletes.c.table_id)
            ).all()
        )
        out = []
        for r in defs:
            n, rows, size, small = totals.get(r.id, (0, 0, 0, 0))
            w = writers.get(r.id)
            done = last.get(r.id)
            out.append(
                TableStats(
                    name=r.name,
                    upsert="upsert.primary_key" in props[r.id],
                    segments=n,
                    rows=rows,
                    bytes=size,
                    small=small,
                    superseded_rows=int(superseded.get(r.id) or 0),
                    last_commit_age_s=None if done is None else (now - int(done)) / 1e6,
                    open_writers=int(w.n) if w else 0,
                    oldest_writer_age_s=None if w is None else (now - int(w[2])) / 1e6,
                )
            )
        return out

    return db.read(txn)


def _grouped(
    conn: Connection, table_id: int, where: list[ColumnElement[bool]], small: int
) -> tuple[Groups, frozenset[str]]:
    """The table's segments matching ``where``, one group per (chunk interval,
    version), and the segment ids its lineage hides (counted as removed: readers do
    not see them)."""
    s = segments.c
    hidden = frozenset(hidden_at(conn, table_id))
    live: ColumnElement[bool] = s.removed_seq.is_(None)
    if hidden:
        live = and_(live, s.segment_id.not_in(sorted(hidden)[:_HIDDEN_MAX]))
    any_dv = conn.execute(
        select(deletes.c.location).where(deletes.c.table_id == table_id).limit(1)
    ).first()
    if any_dv is None:  # most tables: no per-row lookup
        dv: Any = literal(0)
    else:
        with_dv = s.location.in_(select(deletes.c.location).where(deletes.c.table_id == table_id))
        dv = func.sum(case((with_dv, 1), else_=0))
    rows = conn.execute(
        select(
            s.start_us,
            s.end_us,
            s.version,
            func.count(),
            func.max(s.num_core_partitions),
            func.sum(case((s.partition_id < s.num_core_partitions, 1), else_=0)),
            func.sum(case((live, 1), else_=0)),
            func.sum(case((s.location.is_(None), 1), else_=0)),
            func.coalesce(func.sum(s.row_count), 0),
            func.coalesce(func.sum(s.size_bytes), 0),
            func.sum(case((and_(s.row_count < small, s.location.is_not(None)), 1), else_=0)),
            func.max(s.minor_version),
            dv,
        )
        .where(*where)
        .group_by(s.start_us, s.end_us, s.version)
    ).all()
    return Groups.of(rows), hidden


def timeline_groups(db: Db, name: str, span: Interval, small: int) -> Groups:
    """The published segments of table ``name`` overlapping ``span`` (removed ones
    too: they are the history; those lineage hides count as removed), one group per
    (chunk interval, version). Raises TableNotFoundError."""

    def txn(conn: Connection) -> Groups:
        rec = read_table(conn, name)
        return _grouped(conn, rec.id, overlapping(conn, rec.id, span), small)[0]

    return db.read(txn)


@dataclass
class _Kept:
    table_id: int
    seq: int
    small: int
    hidden: frozenset[str]
    groups: Groups
    made: float


class TimelineCache:
    """Per table, its timeline groups over its whole range, kept current from what
    each commit changed rather than grouped again: grouping reads every segment row
    (seconds at a million), catching up reads the (chunk interval, version) keys
    commits touched since — segments added or removed, files given deletion vectors,
    segments lineage hid or showed again — and groups those keys alone. Retention
    deletes removed segments' rows without a commit, so a kept table is grouped anew
    every :attr:`REBUILD_S` seconds."""

    REBUILD_S = 600.0
    #: more touched keys than this: group the whole table again
    MOST_KEYS = 5_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # by catalog (an entry goes with its Db), then table name
        self._kept: weakref.WeakKeyDictionary[Db, dict[str, _Kept]] = weakref.WeakKeyDictionary()

    def holds(self, db: Db, name: str) -> bool:
        with self._lock:
            return name in self._kept.get(db, {})

    def groups(self, db: Db, name: str, small: int) -> Groups:
        """The table's groups now (see :func:`timeline_groups`), over its whole range.
        Raises TableNotFoundError."""
        with self._lock:  # one catch-up at a time: the next request finds it done
            tables = self._kept.setdefault(db, {})
            old = tables.get(name)
            if (
                old is not None
                and old.small == small
                and time.monotonic() - old.made < self.REBUILD_S
            ):
                kept = db.read(lambda conn: self._caught_up(conn, name, old))
            else:
                kept = db.read(lambda conn: self._built(conn, name, small))
            tables[name] = kept
            if len(tables) > 64:
                del tables[next(iter(tables))]
            return kept.groups

    def _built(self, conn: Connection, name: str, small: int) -> _Kept:
        rec = read_table(conn, name)
        seq = _last_seq(conn, rec.id)
        groups, hidden = _grouped(conn, rec.id, [segments.c.table_id == rec.id], small)
        return _Kept(rec.id, seq, small, hidden, groups, time.monotonic())

    def _caught_up(self, conn: Connection, name: str, kept: _Kept) -> _Kept:
        rec = read_table(conn, name)
        seq = _last_seq(conn, rec.id)
        if rec.id != kept.table_id:  # dropped and created again
            return self._built(conn, name, kept.small)
        hidden = frozenset(hidden_at(conn, rec.id))
        if seq == kept.seq and hidden == kept.hidden:
            return kept
        keys = _touched(conn, rec.id, kept.seq, hidden ^ kept.hidden)
        if len(keys) > self.MOST_KEYS:
            return self._built(conn, name, kept.small)
        s = segments.c
        parts = [kept.groups.take(~_among(kept.groups, keys))]
        ordered = sorted(keys)
        for i in range(0, len(ordered), _BATCH):
            where = [
                s.table_id == rec.id,
                tuple_(s.start_us, s.end_us, s.version).in_(ordered[i : i + _BATCH]),
            ]
            parts.append(_grouped(conn, rec.id, where, kept.small)[0])
        return _Kept(rec.id, seq, kept.small, hidden, Groups.concat(parts), kept.made)


_BATCH = 500


def _last_seq(conn: Connection, table_id: int) -> int:
    return int(conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar() or 0)


def _touched(
    conn: Connection, table_id: int, since: int, flipped: Collection[str]
) -> set[tuple[int, int, int]]:
    """The (start, end, version) keys of the segments commits after ``since`` added or
    removed, of those whose files got deletion vectors, and of ``flipped`` (segments
    lineage hid or showed again)."""
    s = segments.c
    key = select(s.start_us, s.end_us, s.version).distinct()
    mine = s.table_id == table_id
    queries = [key.where(mine, s.added_seq > since), key.where(mine, s.removed_seq > since)]
    files = sorted(
        {
            r[0]
            for r in conn.execute(
                select(deletes.c.location).where(
                    deletes.c.table_id == table_id, deletes.c.seq > since
                )
            )
        }
    )
    queries += [
        key.where(mine, s.location.in_(files[i : i + _BATCH])) for i in range(0, len(files), _BATCH)
    ]
    ids = sorted(flipped)
    queries += [
        key.where(mine, s.segment_id.in_(ids[i : i + _BATCH])) for i in range(0, len(ids), _BATCH)
    ]
    return {(int(a), int(b), int(v)) for q in queries for a, b, v in conn.execute(q)}


def _among(groups: Groups, keys: Collection[tuple[int, int, int]]) -> np.ndarray:
    """Which of ``groups`` have one of ``keys``."""
    hit = np.zeros(len(groups), bool)
    if not keys or not len(groups):
        return hit
    start, end, version = groups["start"], groups["end"], groups["version"]
    by_start: dict[int, list[tuple[int, int]]] = {}
    for a, b, v in keys:
        by_start.setdefault(a, []).append((b, v))
    near = np.flatnonzero(np.isin(start, np.fromiter(by_start, np.int64)))
    for i in near.tolist():
        if (int(end[i]), int(version[i])) in by_start[int(start[i])]:
            hit[i] = True
    return hit


def lock_intervals(db: Db, name: str, span: Interval) -> list[Interval]:
    """The intervals of the table's held or waiting locks overlapping ``span``.
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> list[Interval]:
        rec = read_table(conn, name)
        held = conn.execute(
            select(locks.c.start_us, locks.c.end_us).where(
                locks.c.table_id == rec.id,
                locks.c.state.in_(("GRANTED", "WAITING")),
                locks.c.start_us < span.end,
                locks.c.end_us > span.start,
            )
        ).all()
        return [Interval.of(int(a), int(b)) for a, b in held]

    return db.read(txn)


@dataclass(frozen=True)
class CommitRow:
    id: int
    action: str
    state: str
    seq: int | None
    txn: str | None
    writer: str
    started_us: int
    completed_us: int | None
    segments_added: int
    segments_removed: int
    rows_added: int
    rows_removed: int
    reason: str | None = None  #: why it was aborted


def commit_rows(db: Db, name: str, limit: int, before: int | None) -> tuple[int, list[CommitRow]]:
    """The table's commit count, and up to ``limit`` of its commits, newest first (only
    ids below ``before`` when given), with the segments and rows each added and
    removed. Raises TableNotFoundError."""

    def txn(conn: Connection) -> tuple[int, list[CommitRow]]:
        rec = read_table(conn, name)
        total = conn.execute(
            select(func.count()).select_from(commits).where(commits.c.table_id == rec.id)
        ).scalar_one()
        which = commits.c.table_id == rec.id
        if before is not None:
            which &= commits.c.id < before
        rows = conn.execute(
            select(commits).where(which).order_by(commits.c.id.desc()).limit(limit)
        ).all()
        ids = [r.id for r in rows]
        added = _sums(conn, rec.id, segments.c.commit_id, ids)
        removed = _sums(conn, rec.id, segments.c.removed_commit, ids)
        versions = dict(
            conn.execute(
                select(app_txns.c.commit_id, app_txns.c.version).where(
                    app_txns.c.table_id == rec.id, app_txns.c.commit_id.in_(ids)
                )
            ).all()
        )
        out = []
        for r in rows:
            app = json.loads(r.footprint or "{}").get("app_id")
            if app is not None and r.id in versions:
                app = f"{app}:{versions[r.id]}"
            out.append(
                CommitRow(
                    id=int(r.id),
                    action=r.action,
                    state=r.state,
                    seq=None if r.seq is None else int(r.seq),
                    txn=None if app is None else str(app),
                    writer=r.owner,
                    started_us=int(r.started_at),
                    completed_us=None if r.completed_at is None else int(r.completed_at),
                    segments_added=added.get(r.id, (0, 0))[0],
                    segments_removed=removed.get(r.id, (0, 0))[0],
                    rows_added=added.get(r.id, (0, 0))[1],
                    rows_removed=removed.get(r.id, (0, 0))[1],
                    reason=r.reason,
                )
            )
        return int(total), out

    return db.read(txn)


def _sums(
    conn: Connection, table_id: int, by: Any, ids: Collection[int]
) -> dict[int, tuple[int, int]]:
    """Segments and rows per commit id in ``by`` (added, or removed)."""
    if not ids:
        return {}
    return {
        int(cid): (int(n), int(rows or 0))
        for cid, n, rows in conn.execute(
            select(by, func.count(), func.sum(segments.c.row_count))
            .where(segments.c.table_id == table_id, by.in_(list(ids)))
            .group_by(by)
        )
    }


@dataclass(frozen=True)
class LockRow:
    id: int
    type: str
    interval: Interval
    priority: int
    state: str
    commit_id: int
    holder: str
    action: str | None
    heartbeat_age_s: float | None
    segments: int


@dataclass(frozen=True)
class WriterRow:
    commit_id: int
    action: str
    state: str
    owner: str
    age_s: float
    heartbeat_age_s: float


@dataclass(frozen=True)
class AbortRow:
    commit_id: int
    action: str
    owner: str
    ended_us: int
    reason: str


def lock_rows(
    db: Db, name: str, recent: int = 20
) -> tuple[list[LockRow], list[WriterRow], list[AbortRow]]:
    """The table's task locks (with their holder commit's writer and heartbeat age),
    its open commits (writers in flight), and its ``recent`` latest aborted commits
    with their reasons (conflicts, revoked locks, writers gone). Raises
    TableNotFoundError."""

    def txn(conn: Connection) -> tuple[list[LockRow], list[WriterRow], list[AbortRow]]:
        rec = read_table(conn, name)
        now = now_us()
        held = conn.execute(
            select(
                locks,
                commits.c.owner,
                commits.c.action.label("holder_action"),
                commits.c.heartbeat_at,
            )
            .join(commits, commits.c.id == locks.c.commit_id, isouter=True)
            .where(locks.c.table_id == rec.id)
            .order_by(locks.c.id)
        ).all()
        lock_out = [
            LockRow(
                id=int(r.id),
                type=r.type,
                interval=Interval.of(int(r.start_us), int(r.end_us)),
                priority=int(r.priority),
                state=r.state,
                commit_id=int(r.commit_id),
                holder=r.owner or "",
                action=r.holder_action,
                heartbeat_age_s=None if r.heartbeat_at is None else (now - r.heartbeat_at) / 1e6,
                segments=len(json.loads(r.segment_ids)) if r.segment_ids else 0,
            )
            for r in held
        ]
        open_ = conn.execute(
            select(commits)
            .where(commits.c.table_id == rec.id, commits.c.state.in_(OPEN_STATES))
            .order_by(commits.c.id)
        ).all()
        writers = [
            WriterRow(
                commit_id=int(r.id),
                action=r.action,
                state=r.state,
                owner=r.owner,
                age_s=(now - int(r.started_at)) / 1e6,
                heartbeat_age_s=(now - int(r.heartbeat_at)) / 1e6,
            )
            for r in open_
        ]
        aborted = conn.execute(
            select(commits)
            .where(commits.c.table_id == rec.id, commits.c.state == "ABORTED")
            .order_by(commits.c.id.desc())
            .limit(recent)
        ).all()
        aborts = [
            AbortRow(
                commit_id=int(r.id),
                action=r.action,
                owner=r.owner,
                ended_us=int(r.completed_at or r.heartbeat_at),
                reason=r.reason or "not recorded (aborted before lamina kept reasons)",
            )
            for r in aborted
        ]
        return lock_out, writers, aborts

    return db.read(txn)


def superseded_rows(db: Db, name: str, locations: Collection[str]) -> dict[str, int]:
    """Rows deletion vectors hide, by data file (relative location), of those given.
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> dict[str, int]:
        rec = read_table(conn, name)
        if not locations:
            return {}
        return {
            str(loc): int(n or 0)
            for loc, n in conn.execute(
                select(deletes.c.location, func.sum(deletes.c.cardinality))
                .where(
                    deletes.c.table_id == rec.id,
                    deletes.c.location.in_(list(locations)),
                )
                .group_by(deletes.c.location)
            )
        }

    return db.read(txn)


def table_seq(db: Db, name: str) -> int:
    """The table's last seq (what changes with every commit). Raises
    TableNotFoundError."""

    def txn(conn: Connection) -> int:
        seq = conn.execute(select(tables.c.last_seq).where(tables.c.name == name)).scalar()
        if seq is None:
            read_table(conn, name)  # raises TableNotFoundError
        return int(seq or 0)

    return db.read(txn)


def superseded_by_chunk(
    db: Db, name: str, limit: int
) -> tuple[int, list[tuple[Interval, int, int]]]:
    """The table's chunks (time intervals of its visible data segments): how many,
    and up to ``limit`` of them, the most superseded first, each with its stored rows
    and the rows deletion vectors hide there. Raises TableNotFoundError."""

    def txn(conn: Connection) -> tuple[int, list[tuple[Interval, int, int]]]:
        rec = read_table(conn, name)
        s = segments.c
        hidden = (
            select(deletes.c.location, func.sum(deletes.c.cardinality).label("n"))
            .where(deletes.c.table_id == rec.id)
            .group_by(deletes.c.location)
            .subquery()
        )
        rows = func.coalesce(func.sum(s.row_count), 0)
        gone = func.coalesce(func.sum(hidden.c.n), 0)
        per_chunk = (
            select(s.start_us, s.end_us, rows.label("rows"), gone.label("hidden"))
            .select_from(segments.outerjoin(hidden, hidden.c.location == s.location))
            .where(s.table_id == rec.id, s.removed_seq.is_(None), s.location.is_not(None))
            .group_by(s.start_us, s.end_us)
        ).subquery()
        total = conn.execute(select(func.count()).select_from(per_chunk)).scalar_one()
        share = case((per_chunk.c.rows > 0, per_chunk.c.hidden * 1.0 / per_chunk.c.rows), else_=0)
        got = conn.execute(
            select(per_chunk).order_by(share.desc(), per_chunk.c.start_us).limit(limit)
        ).all()
        out = [(Interval.of(int(r[0]), int(r[1])), int(r[2]), int(r[3])) for r in got]
        return int(total), out

    return db.read(txn)


def table_names(db: Db, ids: list[int]) -> list[str]:
    """The names of the tables ``ids``, in that order (dropped ones left out)."""

    def txn(conn: Connection) -> list[str]:
        got = dict(
            conn.execute(select(tables.c.id, tables.c.name).where(tables.c.id.in_(ids))).all()
        )
        return [got[i] for i in ids if i in got]

    return db.read(txn) if ids else []
