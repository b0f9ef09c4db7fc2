"""What the web console shows, decided purely: a table's health mark, the buckets a
time range is cut into at a zoom, and each bucket's aggregate of the timeline's
(interval, version) groups — so a page of a 1M-segment table carries a few hundred
numbers, not its segments."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lamina.core.interval import Granularity, Interval
from lamina.core.model import WRITER_GONE

#: Most buckets a timeline view is cut into (the finest zoom that stays under it wins).
MAX_BUCKETS = 180
#: Zoom levels, finest first.
ZOOMS = (
    Granularity.HOUR,
    Granularity.DAY,
    Granularity.WEEK,
    Granularity.MONTH,
    Granularity.QUARTER,
    Granularity.YEAR,
)
SMALL_SHARE_WARN = 0.5  # of the segments, with at least SMALL_MIN_SEGMENTS of them
SMALL_MIN_SEGMENTS = 10
SUPERSEDED_WARN = 0.2  # of an upsert table's rows
STALE_WRITER_S = 600.0


@dataclass(frozen=True)
class TableStats:
    """One table's row of the tables page."""

    name: str
    upsert: bool
    segments: int
    rows: int
    bytes: int
    small: int
    superseded_rows: int
    last_commit_age_s: float | None
    open_writers: int = 0
    oldest_writer_age_s: float | None = None

    @property
    def small_share(self) -> float:
        return self.small / self.segments if self.segments else 0.0

    @property
    def superseded_share(self) -> float | None:
        """Superseded rows over stored rows (None: not an upsert table)."""
        if not self.upsert:
            return None
        return self.superseded_rows / self.rows if self.rows else 0.0


def health(st: TableStats) -> tuple[str, str]:
    """``(mark, reason)``: ``ok``, ``warn`` or ``empty``, the reason written out."""
    problems = []
    if st.segments >= SMALL_MIN_SEGMENTS and st.small_share > SMALL_SHARE_WARN:
        problems.append(
            f"{st.small_share:.0%} of {st.segments} segments are small: compact "
            "(POST /tables/{name}/compact, or lamina compact)".replace("{name}", st.name)
        )
    sup = st.superseded_share
    if sup is not None and sup > SUPERSEDED_WARN:
        problems.append(f"{sup:.0%} of stored rows are superseded: a major compaction drops them")
    if st.oldest_writer_age_s is not None and st.oldest_writer_age_s > STALE_WRITER_S:
        problems.append(
            f"a writer has held an open commit for {st.oldest_writer_age_s:.0f} s "
            "(see the Locks page)"
        )
    if problems:
        return "warn", "; ".join(problems)
    if st.segments == 0:
        return "empty", "no data segments yet"
    return "ok", f"{st.segments} segments, {st.small} small"


def abort_kind(reason: str) -> str:
    """What ended an aborted commit, from its recorded reason: ``conflict`` (another
    commit changed what it read or wrote), ``lock revoked`` (a higher-priority task
    took its lock), ``writer gone``, or ``failed`` (any other error)."""
    if reason.startswith("CommitConflictError"):
        return "conflict"
    if reason.startswith("LockRevokedError"):
        return "lock revoked"
    if reason == WRITER_GONE:
        return "writer gone"
    return "failed"


def zoom_for(
    span: Interval, finest: Granularity = Granularity.HOUR, max_buckets: int = MAX_BUCKETS
) -> Granularity:
    """The finest zoom, ``finest`` or coarser, that cuts ``span`` into at most
    ``max_buckets`` buckets."""
    width = span.end - span.start
    start = ZOOMS.index(finest) if finest in ZOOMS else 0
    for g in ZOOMS[start:]:
        approx = g.fixed_width or {
            Granularity.MONTH: 28 * 86_400_000_000,
            Granularity.QUARTER: 90 * 86_400_000_000,
        }.get(g, 365 * 86_400_000_000)
        if width <= approx * max_buckets:
            return g
    return Granularity.YEAR


def bucket_edges(span: Interval, zoom: Granularity, max_buckets: int = MAX_BUCKETS) -> list[int]:
    """Bucket boundaries covering ``span`` at ``zoom`` (calendar-aligned), at most
    ``max_buckets`` buckets (a coarser zoom should have been asked for beyond)."""
    edges = [zoom.floor(span.start)]
    while edges[-1] < span.end and len(edges) <= max_buckets:
        edges.append(zoom.next_start(edges[-1]))
    return edges


#: The columns of :class:`Groups`, in the order the catalog query returns them.
GROUP_COLUMNS = (
    "start",
    "end",
    "version",
    "segments",
    "core",
    "core_present",
    "live",
    "tombstones",
    "rows",
    "bytes",
    "small",
    "minor",
    "deletion_vectors",
)


@dataclass(frozen=True)
class Groups:
    """The segments of a table grouped by (chunk interval, version), as the catalog
    aggregates them: one int64 array per column of :data:`GROUP_COLUMNS`, one entry
    per group (``core``: core partitions the version needs; ``core_present``: those
    published; ``live``: segments not removed; ``small``: data segments under the
    small threshold; ``minor``: the highest minor version)."""

    columns: dict[str, np.ndarray]

    @classmethod
    def of(cls, rows: Iterable[Sequence[int | None]]) -> Groups:
        """From rows of :data:`GROUP_COLUMNS` values (None counts as 0)."""
        rows = list(rows)
        try:  # the catalog's sums are never NULL where a group has rows
            data = np.array(rows, np.int64)
        except TypeError:
            data = np.array([[int(v or 0) for v in r] for r in rows], np.int64)
        data = data.reshape(-1, len(GROUP_COLUMNS))
        return cls({c: data[:, i].copy() for i, c in enumerate(GROUP_COLUMNS)})

    @classmethod
    def concat(cls, parts: Sequence[Groups]) -> Groups:
        return cls({c: np.concatenate([p.columns[c] for p in parts]) for c in GROUP_COLUMNS})

    def __len__(self) -> int:
        return len(self.columns["start"])

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def take(self, which: np.ndarray) -> Groups:
        return Groups({c: v[which] for c, v in self.columns.items()})

    @property
    def complete(self) -> np.ndarray:
        """Whether every core partition is there (a minor compaction's outputs count
        as complete: their roots are covered)."""
        return (self["minor"] > 0) | (self["core_present"] >= self["core"])

    @property
    def removed(self) -> np.ndarray:
        return self["live"] == 0


VISIBLE, PARTIAL, OVERSHADOWED = 0, 1, 2
STATE_NAMES = ("visible", "partial", "overshadowed")


def group_states(groups: Groups) -> np.ndarray:
    """Each group's state (:data:`VISIBLE`, :data:`PARTIAL`: a higher complete version
    covers part of it, :data:`OVERSHADOWED`: covered whole, or its segments all
    removed). Chunks whose interval overlaps no other interval (the usual timeline)
    are decided at once, by the highest complete live version at the same interval;
    the others by sweeping their covers."""
    n = len(groups)
    out = np.full(n, VISIBLE, np.int8)
    if not n:
        return out
    start, end, version = groups["start"], groups["end"], groups["version"]
    removed = groups.removed
    cover = groups.complete & ~removed
    # intervals, and whether each overlaps another, different one
    iv, at = _distinct(start, end)
    reach = np.maximum.accumulate(iv[:, 1])
    before = np.zeros(len(iv), bool)
    before[1:] = iv[1:, 0] < reach[:-1]  # an earlier interval reaches past its start
    after = np.zeros(len(iv), bool)
    after[:-1] = iv[1:, 0] < iv[:-1, 1]  # the next interval starts before it ends
    irregular = (before | after)[at]
    # regular intervals: covered whole by a higher complete version there, or not at all
    top = np.full(len(iv), np.iinfo(np.int64).min)
    np.maximum.at(top, at[cover], version[cover])
    out[top[at] > version] = OVERSHADOWED
    if irregular.any():
        which = np.flatnonzero(irregular)
        out[which] = _swept(groups.take(which), cover[which])
    out[removed] = OVERSHADOWED
    return out


def _swept(groups: Groups, cover: np.ndarray) -> np.ndarray:
    """:func:`group_states` for groups whose intervals overlap others: each group's
    higher complete versions overlapping it, swept for how far they reach."""
    start, end, version = groups["start"], groups["end"], groups["version"]
    order = np.argsort(start, kind="stable")
    starts = start[order]
    longest = int((end - start).max()) if len(start) else 0
    out = np.full(len(start), VISIBLE, np.int8)
    for i in range(len(start)):
        lo = bisect.bisect_right(starts, int(start[i]) - longest)
        hi = bisect.bisect_left(starts, int(end[i]))
        near = order[max(lo - 1, 0) : hi]
        near = near[
            cover[near]
            & (version[near] > version[i])
            & (start[near] < end[i])
            & (end[near] > start[i])
        ]
        if not len(near):
            continue
        reach = int(start[i])
        for s, e in sorted(zip(start[near].tolist(), end[near].tolist(), strict=True)):
            if s > reach:
                break
            reach = max(reach, e)
        out[i] = OVERSHADOWED if reach >= end[i] else PARTIAL
    return out


@dataclass
class VersionCell:
    version: int
    state: str  # visible | partial | overshadowed
    segments: int
    rows: int
    minor: int
    tombstone: bool


@dataclass
class Bucket:
    start: int
    end: int
    chunks: int = 0
    visible_version: int | None = None
    overshadowed_versions: int = 0
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    small: int = 0
    locks: int = 0
    deletion_vectors: int = 0
    versions: list[VersionCell] = field(default_factory=list)


def aggregate(groups: Groups, edges: list[int], locks: list[Interval]) -> list[Bucket]:
    """The buckets between ``edges``: each group counted in every bucket it overlaps,
    one cell per version (highest first; a version whose chunks differ in state there
    is ``partial``), and the locks overlapping each bucket. Vectorized: a page of a
    table with a million segments aggregates its groups in milliseconds."""
    buckets = [Bucket(a, b) for a, b in zip(edges, edges[1:], strict=False)]
    if not buckets:
        return []
    nb = len(buckets)
    states = group_states(groups)
    grid = np.asarray(edges, np.int64)
    first = np.clip(np.searchsorted(grid, groups["start"], "right") - 1, 0, nb - 1)
    last = np.clip(np.searchsorted(grid, groups["end"], "left") - 1, 0, nb - 1)
    inside = (groups["end"] > grid[0]) & (groups["start"] < grid[-1]) & (last >= first)
    idx = np.flatnonzero(inside)
    span = (last - first + 1)[idx]
    g = np.repeat(idx, span)  # a group once per bucket it overlaps
    b = np.repeat(first[idx], span) + _ramp(span)
    col = {c: groups[c][g] for c in GROUP_COLUMNS}
    st = states[g]
    shown = st != OVERSHADOWED
    seg = np.bincount(b, col["live"], nb)
    small = np.bincount(b, col["small"], nb)
    dv = np.bincount(b, col["deletion_vectors"], nb)
    rows = np.bincount(b, np.where(shown, col["rows"], 0), nb)
    size = np.bincount(b, np.where(shown, col["bytes"], 0), nb)
    chunks = np.zeros(nb, np.int64)
    if len(b):
        by = np.lexsort((col["end"], col["start"], b))
        sb, ss, se = b[by], col["start"][by], col["end"][by]
        new_chunk = np.r_[True, (sb[1:] != sb[:-1]) | (ss[1:] != ss[:-1]) | (se[1:] != se[:-1])]
        chunks = np.bincount(sb[new_chunk], minlength=nb)
    # one cell per (bucket, version)
    order = np.lexsort((-col["version"], b))
    cb, cv = b[order], col["version"][order]
    if len(cb):
        new_cell = np.r_[True, (cb[1:] != cb[:-1]) | (cv[1:] != cv[:-1])]
        starts = np.flatnonzero(new_cell)
        o = order
        c_seg = np.add.reduceat(col["segments"][o], starts)
        c_rows = np.add.reduceat(col["rows"][o], starts)
        c_minor = np.maximum.reduceat(col["minor"][o], starts)
        tomb = (col["tombstones"][o] == col["segments"][o]).astype(np.int64)
        c_tomb = np.minimum.reduceat(tomb, starts)
        c_lo = np.minimum.reduceat(st[o], starts)
        c_hi = np.maximum.reduceat(st[o], starts)
        for k, at in enumerate(starts.tolist()):
            state = STATE_NAMES[int(c_lo[k])] if c_lo[k] == c_hi[k] else "partial"
            buckets[int(cb[at])].versions.append(
                VersionCell(
                    int(cv[at]),
                    state,
                    int(c_seg[k]),
                    int(c_rows[k]),
                    int(c_minor[k]),
                    bool(c_tomb[k]),
                )
            )
    for i, bk in enumerate(buckets):
        bk.segments, bk.small, bk.deletion_vectors = int(seg[i]), int(small[i]), int(dv[i])
        bk.rows, bk.bytes, bk.chunks = int(rows[i]), int(size[i]), int(chunks[i])
        visible = [c.version for c in bk.versions if c.state != "overshadowed"]
        bk.visible_version = max(visible) if visible else None
        bk.overshadowed_versions = sum(1 for c in bk.versions if c.state == "overshadowed")
    for bk, n in zip(buckets, overlap_counts(edges, locks), strict=True):
        bk.locks = n
    return buckets


def _distinct(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (start, end) pairs, sorted (an array of shape (k, 2)), and the
    index of each pair among them."""
    order = np.lexsort((end, start))
    s, e = start[order], end[order]
    new = np.r_[True, (s[1:] != s[:-1]) | (e[1:] != e[:-1])] if len(s) else np.zeros(0, bool)
    rank = np.cumsum(new) - 1
    at = np.empty(len(s), np.int64)
    at[order] = rank
    return np.stack([s[new], e[new]], axis=1), at


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., c - 1 for each count c, concatenated."""
    if not len(counts):
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.arange(ends[-1]) - np.repeat(ends - counts, counts)


def overlap_counts(edges: list[int], intervals: list[Interval]) -> list[int]:
    """How many of ``intervals`` (locks, chunks) overlap each bucket between ``edges``."""
    starts = np.fromiter((iv.start for iv in intervals), np.int64, len(intervals))
    ends = np.fromiter((iv.end for iv in intervals), np.int64, len(intervals))
    return overlaps(edges, starts, ends)


def overlaps(edges: list[int], starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """:func:`overlap_counts` of the intervals ``[starts[i], ends[i])``, vectorized (a
    survey of 100,000 chunks counts in a millisecond)."""
    n = max(len(edges) - 1, 0)
    if not n or not len(starts):
        return [0] * n
    grid = np.asarray(edges, np.int64)
    first = np.maximum(np.searchsorted(grid, starts, "right") - 1, 0)
    last = np.minimum(np.searchsorted(grid, ends, "left") - 1, n - 1)
    ok = last >= first
    diff = np.zeros(n + 1, np.int64)
    np.add.at(diff, first[ok], 1)
    np.add.at(diff, last[ok] + 1, -1)
    return [int(c) for c in np.cumsum(diff[:n])]
