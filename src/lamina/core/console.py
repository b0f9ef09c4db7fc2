"""What the web console shows, decided purely: a table's health mark, the buckets a
time range is cut into at a zoom, and each bucket's aggregate of the timeline's
(interval, version) groups — so a page of a 1M-segment table carries a few hundred
numbers, not its segments."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Group:
    """The segments of one (chunk interval, version), as the catalog aggregates them."""

    start: int
    end: int
    version: int
    segments: int
    core: int
    core_present: int
    live: int
    tombstones: int
    rows: int
    bytes: int
    small: int
    minor: int
    deletion_vectors: int

    @property
    def complete(self) -> bool:
        """Whether every core partition is there (a minor compaction's outputs count
        as complete: their roots are covered)."""
        return self.minor > 0 or self.core_present >= self.core

    @property
    def removed(self) -> bool:
        return self.live == 0


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


def group_states(groups: list[Group]) -> list[str]:
    """Each group's state: ``visible``, ``partial`` (a higher complete version covers
    part of it) or ``overshadowed`` (covered whole, or its segments all removed)."""
    order = sorted(range(len(groups)), key=lambda i: groups[i].start)
    starts = [groups[i].start for i in order]
    longest = max((g.end - g.start for g in groups), default=0)
    out = []
    for g in groups:
        if g.removed:
            out.append("overshadowed")
            continue
        lo = bisect.bisect_right(starts, g.start - longest)
        hi = bisect.bisect_left(starts, g.end)
        covers = sorted(
            (h.start, h.end)
            for h in (groups[order[k]] for k in range(max(lo - 1, 0), hi))
            if h.version > g.version
            and h.complete
            and not h.removed
            and h.start < g.end
            and h.end > g.start
        )
        if not covers:
            out.append("visible")
            continue
        reach = g.start
        for s, e in covers:
            if s > reach:
                break
            reach = max(reach, e)
        out.append("overshadowed" if reach >= g.end else "partial")
    return out


def aggregate(groups: list[Group], edges: list[int], locks: list[Interval]) -> list[Bucket]:
    """The buckets between ``edges``: each group counted in every bucket it overlaps,
    one cell per version (highest first; a version whose chunks differ in state there
    is ``partial``), and the locks overlapping each bucket."""
    buckets = [Bucket(a, b) for a, b in zip(edges, edges[1:], strict=False)]
    if not buckets:
        return []
    last_bucket = len(buckets) - 1
    cells: list[dict[int, VersionCell]] = [{} for _ in buckets]
    seen: list[set[tuple[int, int]]] = [set() for _ in buckets]
    states = group_states(groups)
    for g, state in zip(groups, states, strict=True):
        first = max(bisect.bisect_right(edges, g.start) - 1, 0)
        last = min(bisect.bisect_left(edges, g.end) - 1, last_bucket)
        tomb = g.tombstones == g.segments
        for i in range(first, last + 1):
            b = buckets[i]
            m = cells[i].get(g.version)
            if m is None:
                cells[i][g.version] = VersionCell(
                    g.version, state, g.segments, g.rows, g.minor, tomb
                )
            else:
                m.segments += g.segments
                m.rows += g.rows
                m.minor = max(m.minor, g.minor)
                m.tombstone = m.tombstone and tomb
                if m.state != state:
                    m.state = "partial"
            seen[i].add((g.start, g.end))
            b.segments += g.live
            b.small += g.small
            b.deletion_vectors += g.deletion_vectors
            if state != "overshadowed":
                b.rows += g.rows
                b.bytes += g.bytes
    for b, by_version, chunks in zip(buckets, cells, seen, strict=True):
        b.versions = [by_version[v] for v in sorted(by_version, reverse=True)]
        b.chunks = len(chunks)
        visible = [c.version for c in b.versions if c.state != "overshadowed"]
        b.visible_version = max(visible) if visible else None
        b.overshadowed_versions = sum(1 for c in b.versions if c.state == "overshadowed")
    for b, n in zip(buckets, lock_counts(edges, locks), strict=True):
        b.locks = n
    return buckets


def lock_counts(edges: list[int], locks: list[Interval]) -> list[int]:
    """How many of ``locks`` overlap each bucket between ``edges``."""
    counts = [0] * max(len(edges) - 1, 0)
    for lock in locks:
        first = max(bisect.bisect_right(edges, lock.start) - 1, 0)
        last = min(bisect.bisect_left(edges, lock.end) - 1, len(counts) - 1)
        for i in range(first, last + 1):
            counts[i] += 1
    return counts
