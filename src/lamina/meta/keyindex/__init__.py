"""The key indexes of upsert tables in this process, and the resolution of an upsert
at publish.

The index (:class:`lamina.core.keyindex.KeyIndex`) maps each key to its latest
record; :mod:`lamina.meta.keyindex.replay` derives it from the table's files and deletion
vectors, :mod:`lamina.meta.keyindex.snapshots` saves it. :class:`KeyIndexes` keeps one
per table of a catalog, and brings it up to date inside the publishing transaction
(which holds the table lock) by replaying the commits published since (its own among
them); a new process starts from the newest saved snapshot of the index, or builds it
from the table's files. An upsert of a Spark DataFrame starts reading that snapshot in
the background (:meth:`KeyIndexes.prefetch`) while Spark writes its data files, and
its publish takes what was read.

A catalog creates its :class:`KeyIndexes` when it connects: numpy, pyarrow, pyroaring
and this package's other modules (which import them) are imported where used.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from lamina.errors import CommitConflictError, KeyIndexFileError
from lamina.meta.schema import key_snapshots, tables

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyroaring import BitMap

    from lamina.core.keyindex import Lookup
    from lamina.core.model import TableRecord
    from lamina.core.upsert import UpsertBatch, UpsertSpec
    from lamina.io.warehouse import Warehouse
    from lamina.meta.db import Db
    from lamina.meta.keyindex.replay import KeyState
    from lamina.meta.keyindex.snapshots import KeyStats

__all__ = ["KeyIndexes", "Outcome"]


class KeyIndexes:
    """The key indexes of one catalog's upsert tables in this process, by table id,
    and the background work on them: snapshot reads under way (:meth:`prefetch`) and
    snapshot saves (:meth:`save_if_due`, :meth:`wait`).

    A :class:`lamina.context.CatalogContext` holds one, which its table handles and
    writes share. Another catalog object (of the same database or not) holds its own,
    as another process does: each index is caught up from the catalog inside the
    publishing transaction. One user of the indexes at a time (a KeyIndex is not
    thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        #: table id -> its index
        self._states: dict[int, KeyState] = {}
        #: table id -> (a saved snapshot's location, its reading under way)
        self._loading: dict[int, tuple[str, Future[KeyState]]] = {}
        #: table id -> the thread saving the table's index now
        self._saving: dict[int, threading.Thread] = {}
        #: table id -> (seq, key count) of the newest save started here
        self._started: dict[int, tuple[int, int]] = {}
        self._pid = os.getpid()

    def _forked(self) -> None:
        """In a forked child: forget the snapshot reads and saves under way (its
        parent's threads, which the child has not)."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._loading.clear()
                    self._saving.clear()
                    self._started.clear()
                    self._pid = os.getpid()

    def held(self, table_id: int) -> KeyState | None:
        """The table's index, if one is held."""
        return self._states.get(table_id)

    def forget(self, table_id: int) -> None:
        """Drop the table's index (a publish that changed it failed, or the table was
        dropped): built again when next needed."""
        self._forked()
        with self._lock:
            self._states.pop(table_id, None)
            self._loading.pop(table_id, None)

    def clear(self) -> None:
        """Drop every table's index, as a new process starts."""
        self._forked()
        with self._lock:
            self._states.clear()
            self._loading.clear()

    def prefetch(self, conn: Connection, table: TableRecord, wh: Warehouse) -> None:
        """Start reading the table's newest saved index snapshot in a background thread
        if no index of the table is held yet: the upsert about to write then publishes
        with it (:meth:`state` takes it) without waiting for the whole read."""
        self._forked()
        key = table.id
        if key in self._states or key in self._loading:
            return
        row = _snapshot_row(conn, table, None)
        if row is None:
            return
        with self._lock:
            if key in self._states or key in self._loading:
                return
            done: Future[KeyState] = Future()

            def work() -> None:
                try:
                    st = _load(wh, row, table)
                    st.index.prepare()
                    done.set_result(st)
                except BaseException as e:  # the publish that takes it raises it or rebuilds
                    done.set_exception(e)

            self._loading[key] = (row.location, done)
            threading.Thread(target=work, name="lamina-key-index", daemon=True).start()

    def _saved(
        self, conn: Connection, table: TableRecord, wh: Warehouse, seq: int
    ) -> KeyState | None:
        """The newest saved snapshot of the index at or before ``seq`` (None: none
        usable); the one :meth:`prefetch` read if it is that one."""

        loading = self._loading.pop(table.id, None)
        row = _snapshot_row(conn, table, seq)
        if row is None:
            return None
        try:
            if loading is not None and loading[0] == row.location:
                return loading[1].result()
            return _load(wh, row, table)
        except (KeyIndexFileError, OSError):  # lost or damaged: rebuilt from the data
            return None

    def state(
        self, conn: Connection, table: TableRecord, spec: UpsertSpec, wh: Warehouse, seq: int
    ) -> KeyState:
        """The table's index as of ``seq`` (the latest commit), kept for the next call:
        the one held, else the newest saved snapshot caught up, else built from the
        table's files. An index older than the table's retention point is not caught up
        (retention deleted the rows its replay reads): it is built again."""
        from lamina.meta.keyindex import replay  # numpy, pyarrow, pyroaring

        self._forked()
        with self._lock:
            st = self._states.get(table.id)
            if st is None or st.seq > seq:  # none yet, or ahead of this catalog's history
                st = self._saved(conn, table, wh, seq)
            if st is not None and st.seq < seq and st.seq < _purged(conn, table):
                st = None
            if st is None or st.seq > seq:
                st = replay.rebuild(conn, table, spec, wh, seq)
            elif st.seq != seq:
                st = replay.catch_up(conn, st, table, spec, wh, seq)
            self._states[table.id] = st
            return st

    def read_current(
        self,
        conn: Connection,
        table: TableRecord,
        wh: Warehouse,
        batch: UpsertBatch,
        gone: set[str] | None = None,
        read_at: int | None = None,
    ) -> tuple[pa.Table, tuple[tuple[str, int] | None, ...]]:
        """A partial upsert's view before it writes: the current records of its keys,
        values included, and where each winner key's record was (file, row; None: no
        record), for :meth:`resolve` to check nothing changed them before publish.
        Records in files ``gone`` (those an overwrite removes) count as absent.
        ``read_at``: the seq the caller read its records at; raises a retryable
        CommitConflictError if the table has moved past it."""
        stmt = select(tables.c.last_seq).where(tables.c.id == table.id)
        seq = int(conn.execute(stmt).scalar_one())
        if read_at is not None and seq != read_at:
            raise CommitConflictError(
                f"table {table.name!r} changed after its records were read (seq "
                f"{read_at} -> {seq}); read them again",
                retryable=True,
            )
        with self._lock:
            st = self.state(conn, table, batch.spec, wh, seq)
            current, found = _current(st, batch, wh, values=True, gone=gone)
            return current, _where(st, found)

    def superseded_by(
        self, conn: Connection, table: TableRecord, wh: Warehouse, batch: UpsertBatch
    ) -> dict[str, np.ndarray]:
        """The stored records an upsert would supersede if it published now: per file
        (catalog location), their rows. A record superseded once stays superseded
        (comparison values only grow, and a removed newer record brings no older one
        back), so each of these rows is hidden when the upsert publishes, by it or by
        a commit published meanwhile (what a copy-on-write upsert rewrites its files
        without). Raises UpsertError."""
        import numpy as np  # loads numpy

        from lamina.core.upsert import ROW, SEGMENT, resolve_against  # loads pyarrow

        stmt = select(tables.c.last_seq).where(tables.c.id == table.id)
        seq = int(conn.execute(stmt).scalar_one())
        with self._lock:
            st = self.state(conn, table, batch.spec, wh, seq)
            batch = _widened(batch, table)
            current, found = _current(st, batch, wh, values=False)
            match = np.full(len(batch.resolved.winners), -1, np.int64)
            match[found.found] = np.arange(int(found.found.sum()))
            spec = replace(batch.spec, partial=None)  # who wins does not depend on merging
            out = resolve_against(current, batch.resolved, spec, match=match)
            codes = np.asarray(out.invalidated.column(SEGMENT).to_numpy(), np.int64)
            rows = np.asarray(out.invalidated.column(ROW).to_numpy(), np.int64)
            return {st.locations[int(c)]: np.sort(rows[codes == c]) for c in np.unique(codes)}

    def resolve(
        self,
        conn: Connection,
        table: TableRecord,
        wh: Warehouse,
        batch: UpsertBatch,
        locations: list[str],
        seq: int,
        gone: set[str] | None = None,
        moved: list[tuple[str, str, np.ndarray]] | None = None,
    ) -> Outcome:
        """Resolve an upsert written to ``locations`` (its files, in order) against the
        index as of ``seq`` (the table's latest commit); update the index to include it.
        ``gone``: files the same commit removes (an overwrite of an upsert table): the
        records there no longer count, and the keys whose entries point there afterwards
        are forgotten. ``moved``: files the same commit rewrites (a copy-on-write
        upsert), as (old location, new location, per old row its new row or -1): the
        entries still pointing there afterwards move. If the commit fails,
        :meth:`forget` the table's index. Raises UpsertError, CommitConflictError
        (partial upserts)."""
        with self._lock:
            st = self.state(conn, table, batch.spec, wh, seq)
            out = _resolve(st, table, wh, batch, locations, seq, gone)
            st.index.relocate_all(
                [
                    (st.codes[old], st.code(new), rmap)
                    for old, new, rmap in moved or ()
                    if old in st.codes
                ]
            )
            return out

    def save_if_due(self, db: Db, table: TableRecord, wh: Warehouse) -> bool:
        """Save the table's index as a snapshot when it grew enough since the newest
        one, or the commits since wrote enough rows: the index is copied here and
        written and registered in a background thread; best effort (a failure only
        means a slower start elsewhere). Returns whether a save started."""
        from lamina.meta.keyindex import snapshots  # numpy, pyarrow

        self._forked()
        key = table.id
        with self._lock:
            st = self._states.get(key)
            if st is None or not snapshots.due(db, table, len(st.index), self._started.get(key)):
                return False
            copy = snapshots.copy_of(st.index)
            seq, files, keys = st.seq, json.dumps(st.locations), len(st.index)
            running = self._saving.get(key)
            if running is not None:  # one at a time, in order (rarely still running)
                running.join()
            thread = threading.Thread(
                target=snapshots.save,
                args=(db, table, wh, copy, seq, files, keys),
                name="lamina-key-save",
            )
            self._saving[key], self._started[key] = thread, (seq, keys)
            thread.start()
            return True

    def wait(self) -> None:
        """Wait for the snapshot saves under way."""
        self._forked()
        for thread in list(self._saving.values()):
            thread.join()

    def stats(self, db: Db, table: TableRecord, spec: UpsertSpec, wh: Warehouse) -> KeyStats:
        """What ``lamina keys`` reports: the table's index as of its latest snapshot
        (built or caught up now)."""

        from lamina.meta.keyindex import snapshots  # numpy, pyarrow, pyroaring

        def read(conn: Connection) -> KeyStats:
            stmt = select(tables.c.last_seq).where(tables.c.id == table.id)
            seq = int(conn.execute(stmt).scalar_one())
            with self._lock:
                started = time.perf_counter()
                st = self.state(conn, table, spec, wh, seq)
                took = time.perf_counter() - started
                return snapshots.stats_of(conn, table, st, took)

        return db.read(read)


def _purged(conn: Connection, table: TableRecord) -> int:
    """The seq before which retention deleted the table's history."""
    stmt = select(tables.c.purged_seq).where(tables.c.id == table.id)
    return int(conn.execute(stmt).scalar_one())


def _snapshot_row(conn: Connection, table: TableRecord, seq: int | None) -> Any:
    """The newest saved snapshot of the index (at or before ``seq``), or None."""
    stmt = select(key_snapshots).where(key_snapshots.c.table_id == table.id)
    if seq is not None:
        stmt = stmt.where(key_snapshots.c.seq <= seq)
    return conn.execute(stmt.order_by(key_snapshots.c.seq.desc()).limit(1)).first()


def _load(wh: Warehouse, row: Any, table: TableRecord) -> KeyState:
    """The snapshot catalog row ``row`` names, read (it must be that snapshot, with the
    table's comparison type). Raises KeyIndexFileError, OSError."""
    from lamina.core.comparison import cmp_dtype  # loads numpy, pyarrow
    from lamina.core.upsert_spec import UpsertSpec  # loads numpy, pyarrow
    from lamina.io.keyindex import read_index  # loads numpy, pyarrow
    from lamina.meta.keyindex.replay import (
        KeyState,  # loads numpy, pyarrow, pyroaring, sortedcontainers
    )
    from lamina.meta.keyindex.snapshots import (
        stamp_of,  # loads numpy, pyarrow, pyroaring, sortedcontainers
    )

    spec = UpsertSpec.from_properties(table.properties, table.schema, table.time_column)
    assert spec is not None, "an upsert table's"
    dtype = cmp_dtype(table.schema.field(spec.comparison_column).type)
    stamp = stamp_of(table.id, int(row.seq))
    index = read_index(wh.path(row.location), 65_536, None if wh.local else wh.fs, stamp, dtype)
    files = json.loads(row.files)
    return KeyState(index, int(row.seq), files, {loc: i for i, loc in enumerate(files)})


@dataclass
class Outcome:
    """What an upsert's publish records: deletion vectors per file location."""

    hidden: dict[str, BitMap]
    tombstones: dict[str, BitMap]


def _current(
    st: KeyState,
    batch: UpsertBatch,
    wh: Warehouse,
    values: bool,
    gone: set[str] | None = None,
) -> tuple[pa.Table, Lookup]:
    """The current latest record of each key the batch resolves to (its winners' keys),
    as :func:`lamina.core.upsert.resolve_against` takes it; with the stored values of
    the other columns when ``values`` (partial upserts merge with them). Records in
    files ``gone`` count as absent."""
    import numpy as np  # loads numpy
    import pyarrow as pa  # loads numpy, pyarrow

    from lamina.core.comparison import cmp_arrow  # loads numpy, pyarrow
    from lamina.core.upsert import DELETED, ROW, SEGMENT  # loads numpy, pyarrow

    spec, res = batch.spec, batch.resolved
    data = res.batch
    winners = res.winners
    found = st.index.lookup(batch.keys[winners])
    if gone:
        gone_codes = [i for i, loc in enumerate(st.locations) if loc in gone]
        dead = found.found & np.isin(found.segment, np.array(gone_codes, np.int32))
        found = replace(found, found=found.found & ~dead)
    at = winners[found.found]
    cmp_type = data.schema.field(spec.comparison_column).type
    cols: dict[str, Any] = {
        **{k: data.column(k).take(pa.array(at)) for k in spec.primary_key},
        spec.comparison_column: cmp_arrow(found.cmp[found.found], cmp_type),
        SEGMENT: pa.array(found.segment[found.found], pa.int32()),
        ROW: pa.array(found.row[found.found].astype(np.int64)),
        DELETED: pa.array(found.tomb[found.found]),
    }
    if values:
        names = [c for c in data.column_names if spec.strategy(c) is not None]
        cols.update(_stored(st, wh, found, names, data.schema))
    return pa.table(cols), found


def _stored(
    st: KeyState, wh: Warehouse, found: Lookup, names: list[str], schema: pa.Schema
) -> dict[str, pa.Array]:
    """The stored values of columns ``names`` of the records ``found`` points at."""
    import numpy as np  # loads numpy
    import pyarrow as pa  # loads numpy, pyarrow
    import pyarrow.dataset as ds  # loads numpy, pandas, pyarrow

    seg, row = found.segment[found.found], found.row[found.found].astype(np.int64)
    pieces: list[tuple[np.ndarray, pa.Table]] = []
    for code in np.unique(seg):
        where = np.flatnonzero(seg == code)
        path = wh.path(st.locations[int(code)])
        file = ds.dataset(path, format="parquet", filesystem=wh.fs)
        have = [c for c in names if c in file.schema.names]  # else added since: null
        data = file.to_table(columns=have).take(pa.array(row[where]))
        pieces.append((where, data))
    arrays = {}
    order = np.concatenate([w for w, _ in pieces]) if pieces else np.zeros(0, np.int64)
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.arange(len(order))  # back to the order of ``found``
    for c in names:
        t = schema.field(c).type
        parts = [
            d.column(c).combine_chunks().cast(t) if c in d.column_names else pa.nulls(len(w), t)
            for w, d in pieces
        ]
        merged = pa.concat_arrays(parts) if parts else pa.array([], t)
        arrays[c] = merged.take(pa.array(inverse))
    return arrays


def _group(into: dict[str, BitMap], names: list[str], which: np.ndarray, rows: np.ndarray) -> None:
    """Add ``rows`` to the bitmaps of ``into`` by file: row i is in file
    ``names[which[i]]``."""
    import numpy as np  # loads numpy
    from pyroaring import BitMap  # loads pyroaring

    for value in np.unique(which):
        bm = into.setdefault(names[int(value)], BitMap())
        bm |= BitMap(rows[which == value].astype(np.uint32))


def _where(st: KeyState, found: Lookup) -> tuple[tuple[str, int] | None, ...]:
    return tuple(
        (st.locations[int(c)], int(r)) if f else None
        for f, c, r in zip(found.found, found.segment, found.row, strict=True)
    )


def _widened(batch: UpsertBatch, table: TableRecord) -> UpsertBatch:
    """``batch`` with its comparison column of the table's type: a handle loaded before
    the column was widened (t.widen_column) wrote the narrower type, which the stored
    comparison values may no longer fit."""
    col = batch.spec.comparison_column
    data = batch.resolved.batch
    want = table.schema.field(col).type
    if data.schema.field(col).type == want:
        return batch
    i = data.schema.get_field_index(col)
    data = data.set_column(i, data.schema.field(i).with_type(want), data.column(i).cast(want))
    return replace(batch, resolved=replace(batch.resolved, batch=data))


def _resolve(
    st: KeyState,
    table: TableRecord,
    wh: Warehouse,
    batch: UpsertBatch,
    locations: list[str],
    seq: int,
    gone: set[str] | None,
) -> Outcome:
    """:meth:`KeyIndexes.resolve` against ``st``, the index as of ``seq``."""
    import numpy as np  # loads numpy
    import pyarrow as pa  # loads numpy, pyarrow

    from lamina.core.comparison import cmp_values  # loads numpy, pyarrow
    from lamina.core.upsert import (  # loads numpy, pyarrow
        ROW,
        SEGMENT,
        resolve_against,
        resolve_rewrite,
    )

    spec = batch.spec
    batch = _widened(batch, table)
    res = batch.resolved
    data = res.batch
    if batch.rewrite:  # a major compaction: a copy shows while what it copies would
        found = st.index.lookup(batch.keys[res.winners])
        codes = [st.codes[loc] for loc in gone or () if loc in st.codes]
        still = found.found & np.isin(found.segment, np.array(codes, np.int32))
        out = resolve_rewrite(res, still)
    else:
        current, found = _current(st, batch, wh, values=False, gone=gone or set())
        if batch.expect is not None:  # a partial upsert merged with what it read before
            changed = [i for i, w in enumerate(_where(st, found)) if w != batch.expect[i]]
            if changed:
                raise CommitConflictError(
                    f"{len(changed)} key(s) of this partial upsert got a newer record "
                    "or had theirs moved since it read their values (another upsert, an "
                    "overwrite or a compaction published meanwhile); nothing was "
                    "published — it is safe to retry",
                    retryable=True,
                )
            spec = replace(spec, partial=None)  # its records are merged already
        match = np.full(len(res.winners), -1, np.int64)  # current's rows: found keys
        match[found.found] = np.arange(int(found.found.sum()))
        out = resolve_against(current, res, spec, match=match)
    file_of, pos_of = batch.positions()
    hidden: dict[str, BitMap] = {}
    tombstones: dict[str, BitMap] = {}
    replaced = out.invalidated
    old_code = np.asarray(replaced.column(SEGMENT).to_numpy(), np.int64)
    old_row = np.asarray(replaced.column(ROW).to_numpy(), np.int64)
    _group(hidden, st.locations, old_code, old_row)
    mine = np.flatnonzero(~out.queryable)  # own rows: superseded, or tombstones
    _group(hidden, locations, file_of[mine], pos_of[mine])
    tomb = np.flatnonzero(out.valid & ~out.queryable)
    _group(tombstones, locations, file_of[tomb], pos_of[tomb])
    valid = np.flatnonzero(out.valid)
    if len(valid):
        per_file = np.array([st.code(loc) for loc in locations], np.int32)
        codes = per_file[file_of[valid]]
        asked = np.full(len(res.deleted), -1, np.int64)  # row -> its place in found
        asked[res.winners] = np.arange(len(res.winners))
        st.index.put(
            batch.keys[valid],
            codes,
            pos_of[valid].astype(np.uint32),
            cmp_values(
                data.column(spec.comparison_column).take(pa.array(valid)), st.index.cmp_dtype
            ),
            res.deleted[valid],
            at=found.take(asked[valid]),  # valid rows are winners: found has them
        )
    if gone:  # keys whose latest record went with the files and came back in none
        st.index.drop_segments([st.codes[loc] for loc in gone if loc in st.codes])
    st.seq = seq + 1  # this commit's (seqs have no holes); if it fails, forget() drops st
    return Outcome(hidden, tombstones)
