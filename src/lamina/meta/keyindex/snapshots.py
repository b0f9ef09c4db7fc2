"""Saving a table's key index as snapshots (so a new process starts from one), and
what ``lamina keys`` reports of it. The index itself, its catch-up and the resolution
of upserts are :mod:`lamina.meta.keyindex`, whose ``KeyIndexes`` starts the saves.

An upsert that makes a snapshot due copies the index and hands the copy to a
background thread, which writes the file and registers it: the upsert does not wait
for the write. One save per table runs at a time (a save due while the previous one
still runs waits for it); ``KeyIndexes.wait`` joins them (a catalog's ``close`` does,
and the interpreter waits for them at exit)."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import SQLAlchemyError

from lamina.core.model import TableRecord
from lamina.errors import LaminaError
from lamina.failpoints import failpoint
from lamina.io.keyindex import write_index
from lamina.io.warehouse import Warehouse
from lamina.meta import deletes
from lamina.meta.db import Db
from lamina.meta.keyindex.replay import KeyState, visible_files
from lamina.meta.schema import key_snapshots, segments
from lamina.meta.tables import now_us

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.keyindex import KeyIndex


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


def stats_of(conn: Connection, table: TableRecord, st: KeyState, seconds: float) -> KeyStats:
    """What ``lamina keys`` reports of the table's index ``st`` (as of its seq), which
    took ``seconds`` to bring up to date."""
    vectors = deletes.at(conn, table.id, st.seq, visible_files(conn, table, st.seq))
    return KeyStats(
        st.seq,
        len(st.index),
        st.index.nbytes,
        len(st.index.segments()),
        sum(len(v.hidden) for v in vectors.values()),
        sum(1 for v in vectors.values() if v.hidden),
        seconds,
    )


#: a process saves a table's key index after an upsert once it holds this many keys in
#: all, and either this many keys (and a quarter of them) more than the newest saved
#: snapshot, or the commits since that snapshot (which a new process replays) wrote this
#: many rows (and a quarter of the keys): a table of updates gets snapshots too
SAVE_EVERY = 100_000
#: snapshots kept per table (older ones are deleted when a new one is saved)
KEEP_SNAPSHOTS = 2


def due(db: Db, table: TableRecord, size: int, started: tuple[int, int] | None) -> bool:
    """Whether the table's index, of ``size`` keys, is due to be saved (see
    :data:`SAVE_EVERY`). ``started``: (seq, key count) of the newest save this process
    started, which may not be registered yet."""
    if size < SAVE_EVERY:
        return False
    every = max(SAVE_EVERY, size // 4)  # a snapshot's cost grows with the index

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
        if last is None or size - last[1] >= every:
            return True
        replayed = select(func.coalesce(func.sum(segments.c.row_count), 0)).where(
            segments.c.table_id == table.id, segments.c.added_seq > last[0]
        )  # the rows a new process reads to catch up
        return int(conn.execute(replayed).scalar_one()) >= every

    return db.read(is_due)


def copy_of(index: KeyIndex) -> pa.Table:
    """The index's entries as an Arrow table of their own (the index's arrays change in
    place with the upserts that follow, while the copy is written)."""

    view = index.to_arrow()  # over the index's arrays
    return pa.Table.from_arrays(
        [pa.array(np.array(c.to_numpy(zero_copy_only=False))) for c in view.columns],
        schema=view.schema,
    )


def stamp_of(table_id: int, seq: int) -> str:
    """What a key index snapshot file records as whose it is (checked when read)."""
    return f"table {table_id} seq {seq}"


def save(
    db: Db, table: TableRecord, wh: Warehouse, index: pa.Table, seq: int, files: str, keys: int
) -> None:
    """Write the snapshot ``index`` (:func:`copy_of` the index) of commit ``seq``, with
    ``files`` (JSON: the data file of each file code) and ``keys`` (its key count), and
    register it; delete the snapshots it makes too old. Failures are ignored (it runs
    in a background thread)."""
    rel = f"{table.name}/_keys/{seq:012d}-{uuid.uuid4().hex[:8]}.keys"
    try:
        wh.fs.create_dir(wh.path(f"{table.name}/_keys"), recursive=True)
        failpoint("keyindex.snapshot.before_write", seq=seq)  # in the background thread
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
