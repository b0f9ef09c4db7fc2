"""Scan planning over columns: a big snapshot planned without one object per segment.

The input is one Arrow table of a snapshot's live segments (:data:`SEGMENT_SCHEMA`);
the output a :class:`~lamina.core.scan.ScanPlan` whose tasks are arrays over that
table (:class:`ColumnarTasks`), equal task for task to
:func:`~lamina.core.scan.plan_scan` over the same segments.

Visibility is decided with vectorized passes instead of a :class:`Timeline`: the
segments are sorted by ``(start, end, version, partition)``; chunks and their
completeness come from run boundaries; distinct intervals are grouped into clusters
of overlapping ones. A cluster of one interval (every chunk of a single-granularity
table) shows its highest complete version whole. Clusters where intervals of different
lengths overlap — a re-partitioned or partly overwritten stretch — and clusters holding
a later-generation segment (minor version, root partition range, atomic update group:
:mod:`lamina.core.overshadow`) go through the object :class:`Timeline`, only their own
segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import TableRecord
from lamina.core.scan import ScanPlan, ScanTask
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline

#: One row per published segment, as the catalog and segment manifests hold them.
#: A location (relative to the warehouse root) is split into its directory, shared by
#: a commit's files of one chunk and so dictionary-encoded, and its file name; a null
#: file is a tombstone. The last four columns are the overwrite fields of a segment
#: (:class:`~lamina.core.segment.Segment`): minor version, root partition range
#: ``[root_start, root_end)`` and atomic update group size; a first-generation segment
#: has 0, ``[partition_id, partition_id + 1)`` and 1.
SEGMENT_SCHEMA = pa.schema(
    [
        ("start_us", pa.int64()),
        ("end_us", pa.int64()),
        ("version", pa.int64()),
        ("partition_id", pa.int32()),
        ("num_core_partitions", pa.int32()),
        ("dir", pa.dictionary(pa.int32(), pa.string())),
        ("file", pa.string()),
        ("row_count", pa.int64()),
        ("size_bytes", pa.int64()),
        ("min_time", pa.int64()),
        ("max_time", pa.int64()),
        ("commit_id", pa.int64()),
        ("suffix", pa.string()),
        ("minor_version", pa.int32()),
        ("root_start", pa.int32()),
        ("root_end", pa.int32()),
        ("aug_size", pa.int32()),
    ]
)

#: The overwrite columns, which tables written before them lack.
OVERWRITE_COLUMNS = ("minor_version", "root_start", "root_end", "aug_size")


def segment_table(columns: dict[str, Sequence[Any]]) -> pa.Table:
    """An Arrow table of segments from columns of Python values; ``location`` (a
    relative path or None) is split into ``dir`` and ``file``; missing ones are null,
    but missing (or null) overwrite columns get the first-generation values."""
    cols = dict(columns)
    if "location" in cols:
        split = [
            (None, None) if loc is None else loc.rpartition("/")[::2]
            for loc in cols.pop("location")
        ]
        cols["dir"] = [d for d, _ in split]
        cols["file"] = [f for _, f in split]
    n = len(next(iter(cols.values()))) if cols else 0
    arrays = []
    for f in SEGMENT_SCHEMA:
        if f.name == "dir":
            arrays.append(pa.array(cols.get("dir", [None] * n), pa.string()).dictionary_encode())
        elif f.name in cols:
            arrays.append(pa.array(cols[f.name], f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return with_overwrite_columns(pa.Table.from_arrays(arrays, schema=SEGMENT_SCHEMA))


def with_overwrite_columns(segs: pa.Table) -> pa.Table:
    """``segs`` with the overwrite columns present and without nulls: missing (a table
    written before they existed) or null values become the first-generation ones."""
    if all(c in segs.column_names and segs[c].null_count == 0 for c in OVERWRITE_COLUMNS):
        return segs
    pid = segs["partition_id"].cast(pa.int32())
    defaults = {
        "minor_version": pa.repeat(pa.scalar(0, pa.int32()), segs.num_rows),
        "root_start": pid,
        "root_end": pc.add(pid, pa.scalar(1, pa.int32())),
        "aug_size": pa.repeat(pa.scalar(1, pa.int32()), segs.num_rows),
    }
    for name in OVERWRITE_COLUMNS:
        if name not in segs.column_names:
            segs = segs.append_column(pa.field(name, pa.int32()), defaults[name])
        elif segs[name].null_count:
            filled = pc.coalesce(segs[name].cast(pa.int32()), defaults[name])
            segs = segs.set_column(segs.column_names.index(name), name, filled)
    return segs


def overlapping(segs: pa.Table, interval: Interval) -> pa.Table:
    """The segments whose interval overlaps ``interval``."""
    if interval == ETERNITY:
        return segs
    mask = pc.and_(
        pc.less(segs["start_us"], interval.end), pc.greater(segs["end_us"], interval.start)
    )
    return segs.filter(mask)


@dataclass(frozen=True, eq=False)
class ColumnarTasks:
    """A plan's tasks as arrays over the snapshot's segment table (not copied):
    task ``i`` reads segment ``rows[i]`` for ``[span_start[i], span_end[i])``, whole
    or only the rows inside that span."""

    segs: pa.Table
    rows: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    whole: np.ndarray
    root: str

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def row_count(self) -> int:
        return int(_ints(self.segs, "row_count")[self.rows].sum())

    def row_counts(self) -> dict[str, int]:
        """Rows of each file read, by path."""
        counts = _ints(self.segs, "row_count")[self.rows].tolist()
        return dict(zip(self._paths(self.rows), counts, strict=True))

    @property
    def all_whole(self) -> bool:
        return bool(self.whole.all())

    def paths(self, whole: bool) -> list[str]:
        """Paths of the files read whole (or, ``whole=False``, in part)."""
        return self._paths(self.rows[self.whole == whole])

    def partial(self) -> list[tuple[str, Interval]]:
        """(path, rows to keep) of the files read in part."""
        part = ~self.whole
        spans = zip(self.span_start[part].tolist(), self.span_end[part].tolist(), strict=True)
        return [
            (path, Interval.of(a, b))
            for path, (a, b) in zip(self._paths(self.rows[part]), spans, strict=True)
        ]

    def reads(self) -> list[tuple[str, Interval | None]]:
        """(path, rows to keep or None for the whole file) of every task, in order."""
        keeps = zip(
            self.span_start.tolist(), self.span_end.tolist(), self.whole.tolist(), strict=True
        )
        return [
            (path, None if whole else Interval.of(a, b))
            for path, (a, b, whole) in zip(self._paths(self.rows), keeps, strict=True)
        ]

    def pruned(self, interval: Interval, timeless: bool) -> ColumnarTasks:
        """The tasks narrowed to ``interval`` (see :func:`lamina.core.scan.prune_plan`)."""
        s = np.maximum(self.span_start, interval.start)
        e = np.minimum(self.span_end, interval.end)
        keep = s < e
        rows, s, e = self.rows[keep], s[keep], e[keep]
        return ColumnarTasks(
            self.segs, rows, s, e, _whole(self.segs, rows, s, e, timeless), self.root
        )

    def tasks(self, name: str) -> list[ScanTask]:
        """The task objects (one Segment each)."""
        picked = self.segs.take(pa.array(self.rows, pa.int64()))
        intervals: dict[tuple[int, int], Interval] = {}
        out = []
        spans = zip(
            self.span_start.tolist(), self.span_end.tolist(), self.whole.tolist(), strict=True
        )
        paths = self._paths(self.rows)
        for r, path, (a, b, whole) in zip(picked.to_pylist(), paths, spans, strict=True):
            key = (r["start_us"], r["end_us"])
            chunk = intervals.get(key)
            if chunk is None:
                chunk = intervals[key] = Interval.of(*key)
            seg = Segment(
                name,
                chunk,
                r["version"],
                r["partition_id"],
                r["num_core_partitions"],
                path,
                r["row_count"],
                r["size_bytes"],
                r["min_time"],
                r["max_time"],
                r["commit_id"],
                r["suffix"] or "",
                **_overwrite_fields(r),
            )
            span = Interval.of(a, b)
            out.append(ScanTask(seg, None if whole else span, span))
        return out

    def _paths(self, rows: np.ndarray) -> list[str]:
        picked = self.segs.select(["dir", "file"]).take(pa.array(rows, pa.int64()))
        out: list[str] = []
        prefixes: dict[tuple[int, ...], list[str]] = {}  # per dictionary: "root/dir/"
        for dirs, files in zip(picked["dir"].chunks, picked["file"].chunks, strict=True):
            dictionary = dirs.dictionary  # chunks of one file share it: by buffer address
            key = (len(dictionary), *(b.address if b else 0 for b in dictionary.buffers()))
            if key not in prefixes:
                prefixes[key] = [
                    f"{self.root}/{d}/" if d else f"{self.root}/" for d in dictionary.to_pylist()
                ]
            prefix = prefixes[key]
            index = dirs.indices.to_numpy(zero_copy_only=False).tolist()
            out += [prefix[i] + f for i, f in zip(index, files.to_pylist(), strict=True)]
        return out


def plan_columns(
    table: TableRecord,
    seq: int,
    commit_id: int | None,
    segs: pa.Table,
    interval: Interval | None = None,
    root: str = "",
) -> ScanPlan:
    """Visible data segments of ``segs`` (one snapshot, lineage already applied)
    overlapping ``interval``, as a columnar plan. Raises TimelineError when two chunks
    of one version overlap with different intervals."""
    iv = interval or ETERNITY
    # chunked: combining would unify dictionaries
    segs = overlapping(with_overwrite_columns(segs), iv)
    n = segs.num_rows
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        tasks = ColumnarTasks(segs, empty, empty, empty, np.zeros(0, dtype=bool), root)
        return ScanPlan(table, seq, commit_id, columns=tasks)
    s = _ints(segs, "start_us")
    e = _ints(segs, "end_us")
    v = _ints(segs, "version")
    p = _ints(segs, "partition_id")
    core = _ints(segs, "num_core_partitions")
    if _is_sorted(s, e, v, p):  # a manifest, and appends after it, usually are
        order = np.arange(n, dtype=np.int64)
    else:
        order = np.lexsort((p, v, e, s))
        s, e, v, p, core = s[order], e[order], v[order], p[order], core[order]

    new_iv = _starts(s, e)  # first segment of each distinct interval
    iv_of = np.cumsum(new_iv) - 1
    first = np.flatnonzero(new_iv)
    iv_s, iv_e = s[first], e[first]
    # clusters of overlapping distinct intervals
    reach = np.maximum.accumulate(iv_e)
    new_cluster = np.ones(len(first), dtype=bool)
    new_cluster[1:] = iv_s[1:] >= reach[:-1]
    cluster_of = np.cumsum(new_cluster) - 1
    alone = (np.bincount(cluster_of) == 1)[cluster_of]  # per distinct interval
    later = _later_generation(segs, order, p)
    if later.any():  # clusters holding a later-generation segment need the timeline
        fancy = np.bincount(cluster_of[iv_of[later]], minlength=len(cluster_of)) > 0
        alone &= ~fancy[cluster_of]

    # chunks (interval, version) and their completeness
    new_chunk = _starts(s, e, v)
    chunk_of = np.cumsum(new_chunk) - 1
    chunk_first = np.flatnonzero(new_chunk)
    chunk_core = np.maximum.reduceat(core, chunk_first)
    present = np.add.reduceat((p < chunk_core[chunk_of]).astype(np.int64), chunk_first)
    complete = np.flatnonzero(present == chunk_core)
    # the winner of an interval: its last (highest version) complete chunk
    chunk_iv = iv_of[chunk_first]
    wins = np.zeros(len(chunk_first), dtype=bool)
    if len(complete):
        last = np.ones(len(complete), dtype=bool)
        last[:-1] = chunk_iv[complete[:-1]] != chunk_iv[complete[1:]]
        wins[complete[last]] = True

    has_file = segs["file"].is_valid().to_numpy(zero_copy_only=False)[order]
    simple = alone[iv_of]
    shown = wins[chunk_of] & simple & has_file
    rows = order[shown]
    span_s = np.maximum(s[shown], iv.start)
    span_e = np.minimum(e[shown], iv.end)
    if not simple.all():
        c_rows, c_s, c_e = _through_timeline(table.name, segs, order[~simple], iv)
        rows = np.concatenate([rows, c_rows])
        span_s = np.concatenate([span_s, c_s])
        span_e = np.concatenate([span_e, c_e])
        by = np.lexsort((_ints(segs, "partition_id")[rows], span_s))
        rows, span_s, span_e = rows[by], span_s[by], span_e[by]
    whole = _whole(segs, rows, span_s, span_e, table.time_column is None)
    if not later.any():  # all first generation: the plan keeps no overwrite columns
        segs = segs.drop_columns([c for c in OVERWRITE_COLUMNS if c in segs.column_names])
    tasks = ColumnarTasks(segs, rows, span_s, span_e, whole, root)
    return ScanPlan(table, seq, commit_id, columns=tasks)


def without(segs: pa.Table, identities: frozenset[tuple[int, int, int, int]]) -> pa.Table:
    """``segs`` minus the segments with these ``(start, end, version, partition)``."""
    if not identities or segs.num_rows == 0:
        return segs
    starts = pa.array(sorted({i[0] for i in identities}), pa.int64())
    maybe = np.flatnonzero(pc.is_in(segs["start_us"], value_set=starts).to_numpy(False))
    if len(maybe) == 0:
        return segs
    part = segs.take(pa.array(maybe, pa.int64()))
    keys = zip(
        *(part[c].to_pylist() for c in ("start_us", "end_us", "version", "partition_id")),
        strict=True,
    )
    drop = [int(maybe[i]) for i, key in enumerate(keys) if key in identities]
    if not drop:
        return segs
    keep = np.ones(segs.num_rows, dtype=bool)
    keep[drop] = False
    return segs.filter(pa.array(keep))


# -- helpers ----------------------------------------------------------------------


def _ints(table: pa.Table, column: str) -> np.ndarray:
    return table[column].to_numpy().astype(np.int64, copy=False)


def _starts(*keys: np.ndarray) -> np.ndarray:
    """True where a run of equal key tuples starts (keys sorted)."""
    out = np.ones(len(keys[0]), dtype=bool)
    if len(out) > 1:
        differ = np.zeros(len(out) - 1, dtype=bool)
        for k in keys:
            differ |= k[1:] != k[:-1]
        out[1:] = differ
    return out


def _later_generation(segs: pa.Table, order: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per sorted row: does the segment carry overwrite fields other than the
    first-generation ones?"""
    minor = _ints(segs, "minor_version")[order]
    size = _ints(segs, "aug_size")[order]
    rs = _ints(segs, "root_start")[order]
    re = _ints(segs, "root_end")[order]
    return (minor != 0) | (size != 1) | (rs != p) | (re != p + 1)


def _overwrite_fields(row: dict[str, Any]) -> dict[str, Any]:
    """Segment keyword arguments for a row's overwrite columns (none: first generation)."""
    if not row.get("minor_version"):  # first generation (or no such columns kept)
        return {}
    return {
        "minor_version": row["minor_version"],
        "root_partition_range": (row["root_start"], row["root_end"]),
        "atomic_update_group_size": row["aug_size"],
    }


def _is_sorted(*keys: np.ndarray) -> bool:
    """Whether rows are in ascending lexicographic order of ``keys``."""
    if len(keys[0]) < 2:
        return True
    greater = np.zeros(len(keys[0]) - 1, dtype=bool)  # decided: strictly greater
    equal = np.ones(len(keys[0]) - 1, dtype=bool)  # undecided: equal so far
    for k in keys:
        a, b = k[:-1], k[1:]
        greater |= equal & (b > a)
        equal &= b == a
    return bool((greater | equal).all())


def _whole(
    segs: pa.Table, rows: np.ndarray, s: np.ndarray, e: np.ndarray, timeless: bool
) -> np.ndarray:
    """Per task: is every row of its file inside its span (read it whole)?"""
    if timeless:
        return np.ones(len(rows), dtype=bool)
    known = (
        segs["min_time"].is_valid().to_numpy(zero_copy_only=False)
        & segs["max_time"].is_valid().to_numpy(zero_copy_only=False)
    )[rows]
    mn = segs["min_time"].fill_null(0).to_numpy()[rows]
    mx = segs["max_time"].fill_null(0).to_numpy()[rows]
    inside = known & (s <= mn) & (mx < e)
    same = (s == _ints(segs, "start_us")[rows]) & (e == _ints(segs, "end_us")[rows])
    return same | inside


def _through_timeline(
    name: str, segs: pa.Table, rows: np.ndarray, iv: Interval
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, span start, span end) of the visible segments among ``rows``, decided by
    the object timeline (clusters where intervals of different lengths overlap)."""
    part = segs.take(pa.array(rows, pa.int64()))
    by_identity: dict[tuple[int, int, int, int], int] = {}
    built = []
    cols = [
        part[c].to_pylist()
        for c in (
            "start_us",
            "end_us",
            "version",
            "partition_id",
            "num_core_partitions",
            *OVERWRITE_COLUMNS,
        )
    ]
    has_file = part["file"].is_valid().to_pylist()
    for i, (a, b, ver, pid, ncore, minor, rs, re, size) in enumerate(zip(*cols, strict=True)):
        by_identity[(a, b, ver, pid)] = int(rows[i])
        loc = "" if has_file[i] else None
        extra = (
            {}
            if minor == 0
            else {
                "minor_version": minor,
                "root_partition_range": (rs, re),
                "atomic_update_group_size": size,
            }
        )
        built.append(Segment(name, Interval.of(a, b), ver, pid, ncore, loc, **extra))
    out_r, out_s, out_e = [], [], []
    for entry in Timeline.build(built).lookup(iv):
        for seg in entry.segments:
            if seg.location is None:
                continue
            siv = seg.interval
            out_r.append(by_identity[(siv.start, siv.end, seg.version, seg.partition_id)])
            out_s.append(entry.interval.start)
            out_e.append(entry.interval.end)
    return (
        np.array(out_r, dtype=np.int64),
        np.array(out_s, dtype=np.int64),
        np.array(out_e, dtype=np.int64),
    )
