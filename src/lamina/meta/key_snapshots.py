"""Saving a table's key index as snapshots (so a new process starts from one), and
what ``lamina keys`` reports of it. The index itself, its catch-up and the resolution
of upserts are :mod:`lamina.meta.keys`."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError, OperationalError

from lamina.core.model import TableRecord
from lamina.core.upsert import UpsertSpec
from lamina.io.warehouse import Warehouse
from lamina.meta import deletes
from lamina.meta.keys import LOCK, held, state, visible_files
from lamina.meta.schema import key_snapshots, segments, tables


@dataclass(frozen=True)
class KeyStats:
    """What ``lamina keys`` reports of a table's key index, as of commit ``seq``."""

    seq: int
    keys: int  #: keys with a latest record (live tombstones included)
    index_bytes: int  #: memory the index holds
    files: int  #: data files the index points into
    hidden_rows: int  #: rows deletion vectors hide at ``seq``
    files_with_vectors: int
    seconds: float  #: to bring the index up to date in this call


def stats(db: Any, table: TableRecord, spec: UpsertSpec, wh: Warehouse) -> KeyStats:
    """The key index of the table's latest snapshot (built or caught up now)."""
    import time

    def read(conn: Connection) -> KeyStats:
        seq = int(
            conn.execute(select(tables.c.last_seq).where(tables.c.id == table.id)).scalar_one()
        )
        with LOCK:
            started = time.perf_counter()
            st = state(conn, str(db.engine.url), table, spec, wh, seq)
            took = time.perf_counter() - started
            vectors = deletes.at(conn, table.id, seq, visible_files(conn, table, seq))
            return KeyStats(
                seq,
                len(st.index),
                st.index.nbytes,
                len(st.index.segments()),
                sum(len(v.hidden) for v in vectors.values()),
                sum(1 for v in vectors.values() if v.hidden),
                took,
            )

    result: KeyStats = db.read(read)
    return result


#: a process saves a table's key index after an upsert once it holds this many keys in
#: all, and either this many keys (and a quarter of them) more than the newest saved
#: snapshot, or the commits since that snapshot (which a new process replays) wrote this
#: many rows (and a quarter of the keys): a table of updates gets snapshots too
SAVE_EVERY = 100_000
#: snapshots kept per table (older ones are deleted when a new one is saved)
KEEP_SNAPSHOTS = 2


def save_if_due(db: Any, table: TableRecord, wh: Warehouse) -> str | None:
    """Save this process's index of the table as a snapshot when it grew enough since
    the newest one; best effort (a failure only means a slower start elsewhere).
    Returns the snapshot's location when one was written."""
    import uuid

    from lamina.io.keyindex import write_index
    from lamina.meta.tables import now_us

    url = str(db.engine.url)
    with LOCK:
        st = held(url, table.id)
        if st is None or not wh.local:
            return None

        def newest(conn: Connection) -> Any:
            return conn.execute(
                select(key_snapshots.c.key_count, key_snapshots.c.seq)
                .where(key_snapshots.c.table_id == table.id)
                .order_by(key_snapshots.c.seq.desc())
                .limit(1)
            ).first()

        def replayed(conn: Connection) -> int:  # rows a new process reads to catch up
            stmt = select(func.coalesce(func.sum(segments.c.row_count), 0)).where(
                segments.c.table_id == table.id, segments.c.added_seq > last.seq
            )
            return int(conn.execute(stmt).scalar_one())

        last = db.read(newest)
        grown = len(st.index) - (0 if last is None else last.key_count)
        due = max(SAVE_EVERY, len(st.index) // 4)  # a snapshot's cost grows with the index
        if len(st.index) < SAVE_EVERY or (grown < due and db.read(replayed) < due):
            return None
        rel = f"{table.name}/_keys/{st.seq:012d}-{uuid.uuid4().hex[:8]}.keys"
        try:
            wh.fs.create_dir(wh.path(f"{table.name}/_keys"), recursive=True)
            write_index(st.index, wh.path(rel))
        except OSError:
            return None
        seq, files, keys = st.seq, json.dumps(st.locations), len(st.index)

    def register(conn: Connection) -> list[str]:
        conn.execute(
            key_snapshots.insert().values(
                table_id=table.id,
                seq=seq,
                location=rel,
                files=files,
                key_count=keys,
                created_at=now_us(),
            )
        )
        old = conn.execute(
            select(key_snapshots.c.seq, key_snapshots.c.location)
            .where(key_snapshots.c.table_id == table.id)
            .order_by(key_snapshots.c.seq.desc())
            .offset(KEEP_SNAPSHOTS)
        ).all()
        for r in old:
            conn.execute(
                key_snapshots.delete().where(
                    key_snapshots.c.table_id == table.id, key_snapshots.c.seq == r.seq
                )
            )
        return [r.location for r in old]

    try:
        stale = db.write(register)
    except (IntegrityError, OperationalError):  # another process saved this seq first...
        with contextlib.suppress(OSError):
            wh.fs.delete_file(wh.path(rel))
        return None
    for loc in stale:
        with contextlib.suppress(OSError):
            wh.fs.delete_file(wh.path(loc))
    return rel
