"""Deletion vectors of upsert tables: which rows of a data file readers stop seeing,
from which commit seq on.

One row per (file, seq): the roaring bitmap of the rows the commit of that seq hid,
and, among them, the tombstones that are their key's latest record (hidden from
readers, still deciding later comparisons of the key index). A snapshot of seq ``s``
hides the union of a file's bitmaps with seq <= ``s``; its key index counts a row as
its key's latest unless some bitmap <= ``s`` holds it as a plain (non-tombstone) row.
Data files are never rewritten; vectors live in the catalog, committed with the
commit that makes them (Delta's inline deletion vectors, DuckLake's inlined deletes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap
from sqlalchemy import Connection, delete, insert, select

from lamina.core.model import RowMap, TableRecord
from lamina.errors import SnapshotNotFoundError
from lamina.meta.schema import commits, deletes, tables

_BATCH = 500


@dataclass
class Vector:
    """A file's deletion vector at one snapshot: rows hidden, and rows that stopped
    being their key's latest record (``superseded``: hidden, not a live tombstone)."""

    hidden: BitMap
    superseded: BitMap


def _bitmap(raw: bytes | None) -> BitMap:
    return BitMap.deserialize(raw) if raw else BitMap()


def add(
    conn: Connection,
    table_id: int,
    seq: int,
    commit_id: int,
    hidden: Mapping[str, BitMap],
    tombstones: Mapping[str, BitMap],
) -> None:
    """Record the rows of each file (by location) hidden from ``seq`` on, and which of
    them are tombstones still their key's latest."""
    rows = [
        {
            "table_id": table_id,
            "location": loc,
            "seq": seq,
            "commit_id": commit_id,
            "rows": bm.serialize(),
            "tombstones": tombstones[loc].serialize() if tombstones.get(loc) else None,
            "cardinality": len(bm),
        }
        for loc, bm in hidden.items()
        if bm
    ]
    if rows:
        conn.execute(insert(deletes), rows)


def at(
    conn: Connection, table_id: int, seq: int, locations: Iterable[str] | None = None
) -> dict[str, Vector]:
    """The vectors of the table's files (or of ``locations``) as of snapshot ``seq``."""
    stmt = select(deletes.c.location, deletes.c.rows, deletes.c.tombstones).where(
        deletes.c.table_id == table_id, deletes.c.seq <= seq
    )
    found: list[tuple[str, bytes, bytes | None]] = []
    if locations is None:
        found = [tuple(r) for r in conn.execute(stmt.order_by(deletes.c.seq))]
    else:
        locs = sorted(set(locations))
        for i in range(0, len(locs), _BATCH):
            part = stmt.where(deletes.c.location.in_(locs[i : i + _BATCH]))
            found += [tuple(r) for r in conn.execute(part.order_by(deletes.c.seq))]
    out: dict[str, Vector] = {}
    _fold(out, found)
    return out


def _fold(into: dict[str, Vector], rows: Iterable[tuple[str, bytes, bytes | None]]) -> None:
    """Add vector rows (location, rows hidden, tombstones among them) to the vectors of
    their files in ``into``. A vector found there is replaced by a new one, not changed
    (it may be a :class:`Known`'s); the new one then takes the file's later rows."""
    made: set[str] = set()
    for loc, raw, tomb in rows:
        bm = _bitmap(raw)
        gone = bm - _bitmap(tomb)
        v = into.get(loc)
        if v is not None and loc in made:
            v.hidden |= bm
            v.superseded |= gone
            continue
        into[loc] = Vector(bm, gone) if v is None else Vector(v.hidden | bm, v.superseded | gone)
        made.add(loc)


def positions(bm: BitMap) -> np.ndarray:
    """The rows of a bitmap as an int64 array (without a Python int per row)."""
    return np.frombuffer(bm.to_array(), np.uint32).astype(np.int64)


@dataclass(frozen=True)
class Known:
    """The vectors of a table's files as a reader found them at snapshot ``seq``, kept
    between reads: a read of a later snapshot fetches only the vector rows committed
    since. Sound because a commit stores its vectors under its own seq in the
    transaction that publishes it, so none of seq <= ``seq`` can appear later, and file
    locations are never reused. ``covered``: the files whose vectors it holds (those
    with none included); the vectors are never changed in place."""

    seq: int
    covered: frozenset[str]
    vectors: Mapping[str, Vector]


def of_snapshot(
    conn: Connection,
    table: TableRecord,
    seq: int,
    locations: Iterable[str],
    known: MutableMapping[int, Known] | None = None,
) -> dict[str, Vector]:
    """:func:`at` for a read that planned snapshot ``seq`` in an earlier catalog read.
    ``known``: per table, the vectors a read found before (:class:`Known`); starts from
    them when they are of an older or the same snapshot, and keeps what it found.
    Raises SnapshotNotFoundError when retention committed in between (it deleted rows
    of the snapshot, vectors among them: the read would show a mix)."""
    locs = frozenset(locations)
    before = None if known is None else known.get(table.id)
    if before is None or seq < before.seq:  # none kept, or an older snapshot: all rows
        found = at(conn, table.id, seq, locs)
    else:
        found = _since(conn, table.id, before, seq, locs)
    still_readable(conn, table, seq)
    if known is not None and (before is None or seq >= before.seq):
        known[table.id] = Known(seq, locs, found)
    return found


def _since(
    conn: Connection, table_id: int, before: Known, seq: int, locs: frozenset[str]
) -> dict[str, Vector]:
    """The vectors of ``locs`` at ``seq`` from those ``before`` holds: the rows
    committed after its snapshot are added; files it does not cover are read whole."""
    found = {loc: v for loc, v in before.vectors.items() if loc in locs}
    if seq > before.seq:
        stmt = select(deletes.c.location, deletes.c.rows, deletes.c.tombstones).where(
            deletes.c.table_id == table_id, deletes.c.seq > before.seq, deletes.c.seq <= seq
        )
        kept = before.covered & locs
        _fold(found, (tuple(r) for r in conn.execute(stmt) if r[0] in kept))
    new = locs - before.covered
    if new:
        found.update(at(conn, table_id, seq, new))
    return found


def still_readable(conn: Connection, table: TableRecord, seq: int) -> None:
    """Raise SnapshotNotFoundError if retention purged snapshot ``seq`` (called after
    reading its vectors: retention that committed before or during that read shows)."""
    purged = conn.execute(select(tables.c.purged_seq).where(tables.c.id == table.id))
    if seq < int(purged.scalar_one()):
        raise SnapshotNotFoundError(
            f"version {seq} of {table.name!r} is no longer readable: retention deleted "
            "segments it used while it was being read; read a newer version (see "
            "t.history())"
        )


def latest(
    conn: Connection, table_id: int, locations: Iterable[str] | None = None
) -> dict[str, Vector]:
    """The vectors of the table's files (or of ``locations``) as of its latest commit."""
    seq = conn.execute(select(tables.c.last_seq).where(tables.c.id == table_id)).scalar_one()
    return at(conn, table_id, int(seq), locations)


def oldest_superseding(conn: Connection, table_id: int, locations: Iterable[str]) -> dict[str, int]:
    """Per file of ``locations`` with superseded rows (tombstones still their key's
    latest do not count), when the commit of its oldest vector superseding one
    completed (µs): how long readers of the file have filtered out superseded rows."""
    locs = sorted(set(locations))
    out: dict[str, int] = {}
    for i in range(0, len(locs), _BATCH):
        stmt = (
            select(deletes.c.location, deletes.c.rows, deletes.c.tombstones, commits.c.completed_at)
            .join(commits, commits.c.id == deletes.c.commit_id)
            .where(deletes.c.table_id == table_id, deletes.c.location.in_(locs[i : i + _BATCH]))
            .order_by(deletes.c.seq)
        )
        for loc, raw, tomb, done in conn.execute(stmt):
            if loc in out or done is None:
                continue
            if tomb is None or _bitmap(raw) - _bitmap(tomb):
                out[loc] = int(done)
    return out


def carry(
    conn: Connection,
    table_id: int,
    seq: int,
    commit_id: int,
    outputs: Iterable[tuple[str, RowMap]],
) -> None:
    """A compaction rewrote rows of files into ``outputs`` (location, where each row
    came from): record, from ``seq`` on, the rows of each output whose source rows
    are hidden now (upserts may have hidden more while it ran)."""
    outputs = list(outputs)
    now = latest(conn, table_id, {src for _, m in outputs for src in m.sources})
    hidden: dict[str, BitMap] = {}
    tombstones: dict[str, BitMap] = {}
    for loc, m in outputs:
        hid = np.zeros(len(m.row), bool)
        live = np.zeros(len(m.row), bool)  # hidden tombstones, still their key's latest
        for i, src in enumerate(m.sources):
            v = now.get(src)
            if v is None or not v.hidden:
                continue
            at_src = np.flatnonzero(m.source == i)
            rows = m.row[at_src]
            h = np.isin(rows, positions(v.hidden))
            sup = np.isin(rows, positions(v.superseded))
            hid[at_src[h]] = True
            live[at_src[h & ~sup]] = True
        if hid.any():
            hidden[loc] = BitMap(np.flatnonzero(hid).tolist())
            tombstones[loc] = BitMap(np.flatnonzero(live).tolist())
    add(conn, table_id, seq, commit_id, hidden, tombstones)


def history(
    conn: Connection, table_id: int, locations: Iterable[str]
) -> dict[str, list[tuple[int, BitMap]]]:
    """Every (seq, rows hidden from then) of the files, oldest first."""
    locs = sorted(set(locations))
    out: dict[str, list[tuple[int, BitMap]]] = {}
    for i in range(0, len(locs), _BATCH):
        stmt = (
            select(deletes.c.location, deletes.c.seq, deletes.c.rows)
            .where(deletes.c.table_id == table_id, deletes.c.location.in_(locs[i : i + _BATCH]))
            .order_by(deletes.c.seq)
        )
        for loc, seq, raw in conn.execute(stmt):
            out.setdefault(loc, []).append((int(seq), _bitmap(raw)))
    return out


def drop(conn: Connection, table_id: int, locations: Iterable[str]) -> None:
    """Forget the vectors of files that are gone (retention deleted them)."""
    locs = sorted(set(locations))
    for i in range(0, len(locs), _BATCH):
        conn.execute(
            delete(deletes).where(
                deletes.c.table_id == table_id, deletes.c.location.in_(locs[i : i + _BATCH])
            )
        )
