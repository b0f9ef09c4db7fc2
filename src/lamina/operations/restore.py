"""``t.restore``: one commit that makes a table show again what an earlier version
showed (Delta's RESTORE, Iceberg's rollback), its history kept: every version stays
readable, the restore is a version of its own, and the change feed reports what it
changed. The commit brings that version's segments back as new segment rows on the
same files (:class:`lamina.core.plans.RestorePlan`); only a file whose rows deletion
vectors hid since (a row-level delete, update or merge) is copied, with exactly the rows
that version showed, so that a restore takes a delete back. An upsert table's restore
writes that version's records again (:func:`_rewritten`)."""

from __future__ import annotations

from typing import Any

from lamina.core.interval import ETERNITY, Interval
from lamina.core.lineage import LineageState
from lamina.core.model import AsOf, Commit, CommitAction, NewSegment
from lamina.core.plans import RestorePlan
from lamina.errors import LineageError, RestoreError, SnapshotTooOldError
from lamina.operations.handle import TableHandle
from lamina.write import WriteTransaction


def restore(h: TableHandle, target: AsOf, metadata: dict[str, Any]) -> Commit:
    """Make the table equal to version ``target`` (a version, a Commit or a time) in
    one RESTORE commit. Raises InvalidArgumentError (a wrong type), SnapshotNotFoundError
    (no such version), SnapshotTooOldError (before the first commit, or retention
    deleted its files: names the oldest restorable version), RestoreError, LineageError
    (a push in progress),
    CommitConflictError (a commit completed meanwhile)."""
    if target is None:
        raise RestoreError("restore needs the version (or time) to go back to, e.g. t.restore(3)")
    try:
        version = h.snapshot(target).seq
    except SnapshotTooOldError as exc:
        raise SnapshotTooOldError(
            f"cannot restore: {exc}".replace("the earliest available", "the oldest restorable"),
            exc.earliest_version,
            exc.earliest_time,
        ) from None
    busy = [e.id for e in h.lineage() if e.state == LineageState.IN_PROGRESS]
    if busy:
        raise LineageError(
            f"a push is in progress on {h.name!r} (lineage entry {busy[0]}): end or revert "
            "it first (t.end_replace / t.revert_replace); nothing changed"
        )
    meta = {**metadata, "restored_version": version}
    if h.is_upsert:
        return _rewritten(h, version, meta)
    with WriteTransaction(h.ctx, h.record, CommitAction.RESTORE, meta, inflight=True) as txn:
        copies = _undeleted(h, version, txn.dir)
        return txn.publish(RestorePlan(version=version, copies=copies))


def _rewritten(h: TableHandle, version: int, meta: dict[str, Any]) -> Commit:
    """An upsert table's restore: its key index only moves forward, so old segment rows
    cannot come back; instead the records version ``version`` showed (each key's latest
    then) are written again and replace every chunk, as an overwrite of all time does,
    in one RESTORE commit — later upserts compare with them as they did then. (Keys
    deleted by then have no record: a live tombstone is not brought back.)"""
    from lamina.operations.upsert import overwrite  # the write path: pyarrow, numpy

    records = h.rows(version)
    return overwrite(h, records, _span(h, version), meta, None, action=CommitAction.RESTORE)


def _span(h: TableHandle, version: int) -> Interval:
    """All the chunks the table shows now or showed at ``version``, aligned to its
    granularity (all time without a time column)."""
    if h.time_column is None:
        return ETERNITY
    shown = [t.segment.interval for v in (None, version) for t in h.scan(v).tasks]
    if not shown:
        return ETERNITY
    g = h.granularity
    lo, hi = min(iv.start for iv in shown), max(iv.end for iv in shown)
    end = g.floor(hi - 1)
    return Interval.of(g.floor(lo), g.next_start(end))


def _undeleted(h: TableHandle, version: int, commit_rel: str) -> tuple[tuple[str, NewSegment], ...]:
    """The files version ``version`` showed whose rows deletion vectors hid since, each
    copied under ``commit_rel`` with exactly the rows that version showed: by location."""
    import numpy as np  # loads numpy, pyarrow
    import pyarrow as pa  # loads numpy, pyarrow
    import pyarrow.parquet as pq  # loads numpy, pyarrow
    from pyroaring import BitMap  # loads pyroaring

    from lamina.io.writer import dictionary_columns  # loads numpy, pyarrow
    from lamina.meta import deletes  # loads numpy, pyroaring
    from lamina.meta.snapshots import shown_at  # loads numpy, pyarrow

    tid, wh = h.record.id, h.ctx.warehouse

    def read(conn: Any) -> tuple[list[Any], dict[str, list[tuple[int, BitMap]]]]:
        shown = [s for s in shown_at(conn, tid, h.name, version) if s.location is not None]
        return shown, deletes.history(conn, tid, [s.location or "" for s in shown])

    shown, history = h.ctx.db.read(read)
    out: list[tuple[str, NewSegment]] = []
    for i, seg in enumerate(shown):
        vectors = history.get(seg.location or "", [])
        if all(seq <= version for seq, _ in vectors):
            continue  # nothing hidden since: the file itself shows it again
        hidden = BitMap()
        for seq, rows in vectors:
            if seq <= version:
                hidden |= rows
        data = pq.read_table(wh.path(seg.location or ""), filesystem=wh.fs)
        keep = np.ones(data.num_rows, dtype=bool)
        keep[deletes.positions(hidden)] = False
        data = data.filter(pa.array(keep))
        rel = f"{commit_rel}/restored-{i:05d}.parquet"
        path = wh.path(rel)
        wh.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        pq.write_table(data, path, filesystem=wh.fs, use_dictionary=dictionary_columns(data.schema))
        copy = NewSegment(
            seg.interval, rel, data.num_rows, wh.size(path), seg.min_time, seg.max_time
        )
        out.append((seg.location or "", copy))
    return tuple(out)
