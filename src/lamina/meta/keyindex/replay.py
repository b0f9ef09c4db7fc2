"""Deriving an upsert table's key index from its files: built at a snapshot, or
brought from an older snapshot to a newer one by replaying the commits in between.

The index (:class:`lamina.core.keyindex.KeyIndex`) maps each key to its latest
record: a data file (by a code standing for its location), the row in it, its
comparison value and whether it is a tombstone. Every data file's latest records are
its rows that no deletion vector (:mod:`lamina.meta.deletes`) supersedes, so any
process can build the index. ``KeyIndexes`` (:mod:`lamina.meta.keyindex`) keeps one
per table and decides when to build, load or replay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap
from sqlalchemy import Connection, select

from lamina.core.comparison import cmp_dtype, cmp_values
from lamina.core.keyhash import key_hashes
from lamina.core.keyindex import KeyIndex
from lamina.core.model import CommitAction, CommitState, TableRecord
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.core.upsert import UpsertSpec
from lamina.core.upsert_spec import delete_flags
from lamina.errors import UpsertError
from lamina.io.warehouse import Warehouse
from lamina.meta import deletes
from lamina.meta.lineage_lists import hidden_at
from lamina.meta.schema import commits, segments
from lamina.meta.snapshots import COLUMNS, segments_of

__all__ = ["KeyState", "add_files", "catch_up", "rebuild", "visible_files"]


@dataclass
class KeyState:
    """One table's index as of commit ``seq``, and the files its codes stand for."""

    index: KeyIndex
    seq: int
    locations: list[str] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)

    def code(self, location: str) -> int:
        got = self.codes.get(location)
        if got is None:
            got = self.codes[location] = len(self.locations)
            self.locations.append(location)
        return got


def _columns(spec: UpsertSpec) -> list[str]:
    cols = [*spec.primary_key, spec.comparison_column]
    if spec.delete_column is not None:
        cols.append(spec.delete_column)
    return list(dict.fromkeys(cols))


def _latest_rows(
    wh: Warehouse,
    spec: UpsertSpec,
    schema: pa.Schema,
    location: str,
    superseded: BitMap,
    dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows of one data file that are their key's latest record: their key hashes,
    positions, comparison values and tombstone flags (None: no such row). Read as the
    table's ``schema`` types them, as the records were hashed and compared when they
    were upserted (Parquet has no unit of seconds; Spark writes microseconds)."""
    path = wh.path(location)
    data = pq.read_table(path, columns=_columns(spec), filesystem=wh.fs, schema=schema)
    keep = np.ones(data.num_rows, bool)
    if superseded:
        keep[deletes.positions(superseded)] = False
    rows = np.flatnonzero(keep)
    if not len(rows):
        return None
    data = data.take(pa.array(rows))
    tomb = np.zeros(len(rows), bool)
    if spec.delete_column is not None:
        tomb = delete_flags(data.column(spec.delete_column))
    cmp = cmp_values(data.column(spec.comparison_column), dtype)
    return key_hashes(data, spec.primary_key), rows.astype(np.uint32), cmp, tomb


def add_files(
    st: KeyState, wh: Warehouse, spec: UpsertSpec, schema: pa.Schema, files: dict[str, BitMap]
) -> None:
    """Put the latest records of the data files (location -> rows superseded there) in
    one step (one key has its latest record in one file at most); ``schema``: the
    table's."""
    order = sorted(files)

    def latest(loc: str) -> Any:
        return _latest_rows(wh, spec, schema, loc, files[loc], st.index.cmp_dtype)

    if len(order) > 1:  # reading and hashing release the GIL: files in parallel
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(order), os.cpu_count() or 1, 8)) as pool:
            found = list(pool.map(latest, order))
    else:
        found = [latest(loc) for loc in order]
    parts = [(st.code(loc), *got) for loc, got in zip(order, found, strict=True) if got is not None]
    if not parts:
        return
    codes = np.concatenate([np.full(len(p[1]), p[0], np.int32) for p in parts])
    try:
        st.index.put(
            np.concatenate([p[1] for p in parts]),
            codes,
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]),
            np.concatenate([p[4] for p in parts]),
        )
    except UpsertError as exc:
        raise UpsertError(
            f"the table's files hold two latest records of one key ({exc}): its deletion "
            "vectors are inconsistent — report this"
        ) from None


def _visible(conn: Connection, table: TableRecord, seq: int) -> list[Segment]:
    """The data segments visible at ``seq`` (lineage and timeline applied)."""

    rows = conn.execute(
        select(*COLUMNS).where(
            segments.c.table_id == table.id,
            segments.c.added_seq <= seq,
            segments.c.removed_seq.is_(None) | (segments.c.removed_seq > seq),
        )
    ).all()
    segs = segments_of("", table.name, rows, hidden_at(conn, table.id, seq))
    return [s for s in Timeline.build(segs).visible() if s.location is not None]


def rebuild(
    conn: Connection, table: TableRecord, spec: UpsertSpec, wh: Warehouse, seq: int
) -> KeyState:
    """The index of snapshot ``seq``, from its files and their deletion vectors."""
    dtype = cmp_dtype(table.schema.field(spec.comparison_column).type)
    st = KeyState(KeyIndex(dtype), seq)
    locations = [s.location.lstrip("/") for s in _visible(conn, table, seq) if s.location]
    _add_at(conn, st, table, spec, wh, locations, seq)
    return st


def _add_at(
    conn: Connection,
    st: KeyState,
    table: TableRecord,
    spec: UpsertSpec,
    wh: Warehouse,
    locations: list[str],
    seq: int,
) -> None:
    """Put the latest records of the files ``locations`` as of ``seq`` (their deletion
    vectors then applied) in the index."""
    vectors = deletes.at(conn, table.id, seq, locations)
    add_files(
        st,
        wh,
        spec,
        table.schema,
        {loc: v.superseded if (v := vectors.get(loc)) else BitMap() for loc in locations},
    )


def visible_files(conn: Connection, table: TableRecord, seq: int) -> set[str]:
    """The data files (locations) visible at ``seq``."""
    return {s.location.lstrip("/") for s in _visible(conn, table, seq) if s.location}


def catch_up(
    conn: Connection, st: KeyState, table: TableRecord, spec: UpsertSpec, wh: Warehouse, seq: int
) -> KeyState:
    """``st`` brought to ``seq`` by replaying the commits since, in order, as a rebuild
    would see them: the keys whose latest record was in files that stopped showing
    are forgotten, then the latest records of the files that started showing (their
    deletion vectors at the commit applied) replace their keys' entries.

    An upsert only adds files (its winners; the vectors it wrote supersede the records
    they replace). A run of upserts in a row is replayed in one step, with the vectors
    as of its last one: a record a later upsert of the run replaced is superseded by
    then, so the run's files hold one latest record per key at most, as each upsert's
    own files do. Any other commit (a compaction, an overwrite, a refresh, a deleted
    segment) is replayed by the difference of the files visible before and after it:
    a compaction's outputs hold every latest record of its inputs, an overwrite's files
    the records upserted against the rest; what it removed takes its keys' entries
    along. Files keep their location when a commit carries them, so they are neither.
    A copy-on-write upsert, which rewrote files as it superseded their records, is
    replayed as any other commit: its new files and the copies hold its keys' latest
    records, and the files it rewrote are gone."""
    since = (
        (commits.c.table_id == table.id)
        & (commits.c.state == CommitState.COMPLETED.value)
        & (commits.c.seq > st.seq)
        & (commits.c.seq <= seq)
    )
    done = conn.execute(
        select(commits.c.id, commits.c.seq, commits.c.action).where(since).order_by(commits.c.seq)
    ).all()
    upserts = select(commits.c.id).where(since, commits.c.action == CommitAction.UPSERT.value)
    rewrote = {  # copy-on-write upserts: they moved records too, replayed as a compaction
        int(c)
        for (c,) in conn.execute(
            select(segments.c.removed_commit)
            .where(segments.c.table_id == table.id, segments.c.removed_commit.in_(upserts))
            .distinct()
        )
    }
    files: dict[int, list[str]] = {}
    for cid, loc in conn.execute(
        select(segments.c.commit_id, segments.c.location).where(
            segments.c.table_id == table.id, segments.c.commit_id.in_(upserts)
        )
    ):
        if loc:
            files.setdefault(int(cid), []).append(loc)
    run: list[str] = []  # the files of the upserts since st.seq not replayed yet
    shown: set[str] | None = None  # the files visible at st.seq, once known
    for cid, cseq, action in done:
        if action == CommitAction.ALTER.value:  # a schema change moves no record
            continue
        if action == CommitAction.UPSERT.value and int(cid) not in rewrote:
            added = files.get(int(cid), [])
            run += added
            if shown is not None:
                shown |= set(added)
            last = int(cseq)
            continue
        if run:
            _add_at(conn, st, table, spec, wh, run, last)
            run = []
            st.seq = last
        before = visible_files(conn, table, st.seq) if shown is None else shown
        shown = visible_files(conn, table, int(cseq))
        gone, came = before - shown, sorted(shown - before)
        st.index.drop_segments([st.codes[loc] for loc in gone if loc in st.codes])
        _add_at(conn, st, table, spec, wh, came, int(cseq))
        st.seq = int(cseq)
    if run:
        _add_at(conn, st, table, spec, wh, run, last)
    st.seq = seq
    return st
