"""What a timeline shows, chunk by chunk (pure): each (interval, version) group of
segments, whether readers see it, and compact names for chunks and partition sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lamina.core.interval import ETERNITY, Granularity, Interval, from_us
from lamina.core.overshadow import AtomicGroups
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline


@dataclass
class Chunk:
    """All segments of one (interval, version) in an all-published timeline."""

    interval: Interval
    version: int
    segments: list[Segment]

    @property
    def tombstone(self) -> bool:
        return all(s.location is None for s in self.segments)

    @property
    def rows(self) -> int:
        """Rows the version holds: those of its segments that no later generation of
        the same version replaced (a minor compaction's inputs are not counted twice)."""
        if all(s.is_first_generation for s in self.segments):
            return sum(s.row_count for s in self.segments)
        return sum(s.row_count for s in AtomicGroups(self.segments).visible_segments())

    @property
    def missing(self) -> list[int]:
        """Core partitions neither present nor replaced by a visible group of a later
        generation (the chunk is incomplete while any are missing)."""
        core = max(s.num_core_partitions for s in self.segments)
        if all(s.is_first_generation for s in self.segments):
            have = {s.partition_id for s in self.segments}
            return [p for p in range(core) if p not in have]
        return AtomicGroups(self.segments).uncovered(core)

    @property
    def partial_groups(self) -> list[tuple[int, int, int, int, int]]:
        """Visible atomic update groups still missing segments (see
        :meth:`AtomicGroups.partial_visible`); they keep the chunk incomplete."""
        if all(s.is_first_generation for s in self.segments):
            return []
        return AtomicGroups(self.segments).partial_visible()


@dataclass(frozen=True)
class ChunkStatus:
    kind: str  # visible | partial | overshadowed | incomplete | hidden
    detail: str


def partitions_label(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``p0..p2,p5``."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(f"p{a}" if a == b else f"p{a}..p{b}" for a, b in runs)


def chunk_status(tl: Timeline, chunk: Chunk) -> ChunkStatus:
    """Whether readers of ``tl`` see ``chunk``, and if not (or not all of it), why."""
    entries = tl.lookup(chunk.interval)
    own = [e for e in entries if e.version == chunk.version]
    above = sorted({e.version for e in entries if e.version > chunk.version}, reverse=True)
    by = ", ".join(f"v{v}" for v in above)
    missing = chunk.missing
    if missing:
        extra = f"; overshadowed by {by}" if tl.is_covered_by_newer(chunk.segments[0]) else ""
        return ChunkStatus("incomplete", f"incomplete: missing {partitions_label(missing)}{extra}")
    partial = chunk.partial_groups
    if partial:
        extra = f"; overshadowed by {by}" if tl.is_covered_by_newer(chunk.segments[0]) else ""
        groups = ", ".join(
            f"roots {partitions_label(range(a, b))} minor {m} has {k} of {n} segments"
            for a, b, m, k, n in partial
        )
        return ChunkStatus("incomplete", f"incomplete: {groups}{extra}")
    if own and sum(e.interval.end - e.interval.start for e in own) == (
        chunk.interval.end - chunk.interval.start
    ):
        return ChunkStatus("visible", "visible")
    if own:
        return ChunkStatus("partial", f"partly visible, partly overshadowed by {by}")
    if tl.is_covered_by_newer(chunk.segments[0]):
        return ChunkStatus("overshadowed", f"overshadowed by {by}")
    return ChunkStatus("hidden", "not visible")


def chunks(tl: Timeline) -> dict[Interval, list[Chunk]]:
    """Chunk interval -> its versions, highest first; intervals in time order."""
    grouped: dict[tuple[Interval, int], list[Segment]] = {}
    for seg in tl.segments():
        grouped.setdefault((seg.interval, seg.version), []).append(seg)
    out: dict[Interval, list[Chunk]] = {}
    for (iv, version), segs in sorted(grouped.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        segs.sort(key=lambda s: s.partition_id)
        out.setdefault(iv, []).append(Chunk(iv, version, segs))
    return out


def chunk_label(iv: Interval, granularity: Granularity) -> str:
    """Compact name of a chunk (``2024-01-05``, ``2024-W01``, ``2024-Q1``...), else the
    interval itself."""
    if iv == ETERNITY:
        return "all time"
    try:
        aligned = granularity is not Granularity.ALL and granularity.chunk(iv.start) == iv
    except (OverflowError, ValueError):
        aligned = False
    if not aligned:
        return str(iv)
    d = from_us(iv.start)
    labels = {
        Granularity.HOUR: f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}h",
        Granularity.DAY: f"{d.year:04d}-{d.month:02d}-{d.day:02d}",
        Granularity.WEEK: "{:04d}-W{:02d}".format(*d.isocalendar()[:2]),
        Granularity.MONTH: f"{d.year:04d}-{d.month:02d}",
        Granularity.QUARTER: f"{d.year:04d}-Q{(d.month - 1) // 3 + 1}",
        Granularity.YEAR: f"{d.year:04d}",
    }
    return labels[granularity]
