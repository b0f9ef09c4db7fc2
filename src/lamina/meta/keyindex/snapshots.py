"""Saving a table's key index as snapshots (so a new process starts from one), and
what ``lamina keys`` reports of it. The index itself, its catch-up and the resolution
of upserts are :mod:`lamina.meta.keyindex`.

An upsert that makes a snapshot due copies the index and hands the copy to a
background thread, which writes the file and registers it: the upsert does not wait
for the write. One save per table runs at a time (a save due while the previous one
still runs waits for it); :func:`wait` joins them (a catalog's ``close`` does, and the
interpreter waits for them at exit)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import SQLAlchemyError

from lamina.core.model import TableRecord
from lamina.core.upsert import UpsertSpec
from lamina.errors import LaminaError
from lamina.io.warehouse import Warehouse
from lamina.meta import deletes
from lamina.meta.keyindex import LOCK, held, state
from lamina.meta.keyindex.replay import visible_files
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


#: (catalog url, table id) -> the thread saving the table's index now
_SAVING: dict[tuple[str, int], threading.Thread] = {}
#: (catalog url, table id) -> (seq, key count) of the newest save this process started
_STARTED: dict[tuple[str, int], tuple[int, int]] = {}


def _forget_threads() -> None:  # a forked child has not its parent's threads
    _SAVING.clear()
    _STARTED.clear()


os.register_at_fork(after_in_child=_forget_threads)


def wait(url: str | None = None) -> None:
    """Wait for the snapshot saves under way (of the catalog at ``url``, or all)."""
    for key, thread in list(_SAVING.items()):
        if url is None or key[0] == url:
            thread.join()


def save_if_due(db: Any, table: TableRecord, wh: Warehouse) -> bool:
    """Save this process's index of the table as a snapshot when it grew enough since
    the newest one, or the commits since wrote enough rows: the index is copied here and
    written and registered in a background thread; best effort (a failure only means a
    slower start elsewhere). Returns whether a save started."""
    import numpy as np
    import pyarrow as pa

    url = str(db.engine.url)
    key = (url, table.id)
    with LOCK:
        st = held(url, table.id)
        if st is None:
            return False

        started = _STARTED.get(key)
        size = len(st.index)
        due = max(SAVE_EVERY, size // 4)  # a snapshot's cost grows with the index

        def is_due(conn: Connection) -> bool:
            row = conn.execute(
                select(key_snapshots.c.seq, key_snapshots.c.key_count)
                .where(key_snapshots.c.table_id == table.id)
                .order_by(key_snapshots.c.seq.desc())
                .limit(1)
            ).first()
            last = (row.seq, row.key_count) if row is not None else None
            if started is not None and (last is None or started[0] > last[0]):
                last = started  # this process's save, not registered yet
            if last is None or size - last[1] >= due:
                return True
            replayed = select(func.coalesce(func.sum(segments.c.row_count), 0)).where(
                segments.c.table_id == table.id, segments.c.added_seq > last[0]
            )  # the rows a new process reads to catch up
            return int(conn.execute(replayed).scalar_one()) >= due

        if size < SAVE_EVERY or not db.read(is_due):
            return False
        view = st.index.to_arrow()  # over the index's arrays, which upserts change in place
        copy = pa.Table.from_arrays(
            [pa.array(np.array(c.to_numpy(zero_copy_only=False))) for c in view.columns],
            schema=view.schema,
        )
        seq, files, keys = st.seq, json.dumps(st.locations), len(st.index)
        running = _SAVING.get(key)
        if running is not None:  # one at a time, in order (rarely still running)
            running.join()
        thread = threading.Thread(
            target=_save, args=(db, table, wh, copy, seq, files, keys), name="lamina-key-save"
        )
        _SAVING[key], _STARTED[key] = thread, (seq, keys)
        thread.start()
        return True


def stamp_of(table_id: int, seq: int) -> str:
    """What a key index snapshot file records as whose it is (checked when read)."""
    return f"table {table_id} seq {seq}"


def _save(
    db: Any, table: TableRecord, wh: Warehouse, index: Any, seq: int, files: str, keys: int
) -> None:
    """Write the snapshot ``index`` (an Arrow table) of commit ``seq`` and register it;
    delete the snapshots it makes too old. Failures are ignored."""
    import uuid

    from lamina.io.keyindex import write_index
    from lamina.meta.tables import now_us

    rel = f"{table.name}/_keys/{seq:012d}-{uuid.uuid4().hex[:8]}.keys"
    try:
        wh.fs.create_dir(wh.path(f"{table.name}/_keys"), recursive=True)
        write_index(index, wh.path(rel), None if wh.local else wh.fs, stamp_of(table.id, seq))
    except (OSError, LaminaError):
        return

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
    except SQLAlchemyError:  # another process saved this seq first, or the catalog is gone
        with contextlib.suppress(OSError):
            wh.fs.delete_file(wh.path(rel))
        return
    for loc in stale:
        with contextlib.suppress(OSError):
            wh.fs.delete_file(wh.path(loc))
