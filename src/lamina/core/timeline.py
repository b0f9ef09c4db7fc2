"""A versioned interval timeline: which segments are visible, which are overshadowed.

Pure, in-memory, no I/O. Semantics follow Druid's VersionedIntervalTimeline:

* segments of one ``(interval, version)`` form a *chunk*; a chunk counts only once it
  is complete (partitions ``0..n-1`` present for ``num_core_partitions = n``, any
  non-empty set for ``n = 0``);
* at every instant, the complete chunk with the highest version wins; what a higher
  version does not cover of a lower one stays visible (partial overlap);
* removing a segment falls back to whatever it hid;
* two chunks of one version with different but overlapping intervals are an error;
* inside a chunk, later-generation segments (minor versions, root partition ranges,
  atomic update groups: :mod:`lamina.core.overshadow`) replace the partitions they
  were made from; a chunk's visible segments are those of its visible groups, and its
  completeness counts root partitions covered by them.

Unlike Druid, nothing here scans the whole timeline: the visible pieces live in a
sorted map (lookup is a bisection), and overlap queries over all chunks go through an
index of interval starts bucketed by interval length, so an add or a remove touches
only the chunks overlapping the changed interval.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sortedcontainers import SortedDict, SortedList

from lamina.core.interval import MAX_US, MIN_US, Interval
from lamina.core.overshadow import AtomicGroups
from lamina.core.segment import Segment
from lamina.errors import TimelineError

__all__ = ["Timeline", "TimelineEntry"]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """A visible piece of the timeline: ``segments`` (one chunk) answer for ``interval``.

    ``interval`` is trimmed to the piece (and to the lookup interval); the segments'
    own interval, ``chunk_interval``, may be larger when a higher version hides part.
    """

    interval: Interval
    version: int
    segments: tuple[Segment, ...]
    chunk_interval: Interval

    @property
    def is_partial(self) -> bool:
        """True when only part of the segments' rows are visible through this entry."""
        return self.interval != self.chunk_interval


class _Chunk:
    """All partitions of one (interval, version).

    Only first-generation segments (the usual case): every partition is visible and
    the chunk is complete once partitions ``0..core-1`` are there. From the first
    later-generation segment on (minor version > 0), :class:`AtomicGroups` decides
    (``ow``); it is dropped again when the last such segment goes.
    """

    __slots__ = ("start", "end", "version", "partitions", "core", "core_present", "ow")

    def __init__(self, start: int, end: int, version: int) -> None:
        self.start = start
        self.end = end
        self.version = version
        self.partitions: dict[int, Segment] = {}
        self.core = 0
        self.core_present = 0
        self.ow: AtomicGroups | None = None

    @property
    def complete(self) -> bool:
        if self.ow is not None:
            return self.ow.complete(self.core)
        return bool(self.partitions) and self.core_present == self.core

    def _recount(self) -> None:
        self.core = max((s.num_core_partitions for s in self.partitions.values()), default=0)
        self.core_present = sum(1 for p in self.partitions if p < self.core)

    def put(self, seg: Segment) -> None:
        self.partitions[seg.partition_id] = seg
        if seg.num_core_partitions > self.core:
            self._recount()
        elif seg.partition_id < self.core:
            self.core_present += 1
        if self.ow is not None:
            self.ow.put(seg)
        elif seg.minor_version:  # a compaction's output: atomic update groups
            self.ow = AtomicGroups(self.partitions.values())

    def pop(self, partition_id: int) -> None:
        seg = self.partitions.pop(partition_id)
        if seg.num_core_partitions == self.core and self.core:
            self._recount()
        elif partition_id < self.core:
            self.core_present -= 1
        if self.ow is not None:
            self.ow.pop(seg)
            if not self.ow.overwrites:
                self.ow = None

    def segments(self) -> tuple[Segment, ...]:
        """The visible segments (every partition, without later generations)."""
        if self.ow is not None:
            return self.ow.visible_segments()
        return tuple(self.partitions[p] for p in sorted(self.partitions))

    def all_segments(self) -> list[Segment]:
        return [self.partitions[p] for p in sorted(self.partitions)]

    def hides(self, seg: Segment) -> bool:
        """Whether a visible group of this chunk overshadows ``seg`` (of this chunk's
        interval and version), complete or not."""
        return self.ow is not None and self.ow.hides(seg)

    def interval(self) -> Interval:
        return Interval.of(self.start, self.end)


class _IntervalIndex:
    """Distinct intervals, queryable by overlap without a full scan.

    Starts are kept in one sorted list per interval length; an interval of length L
    overlaps ``[qs, qe)`` iff its start lies in ``(qs - L, qe)``. Tables use few
    distinct lengths (an hour, a day, 28..31 days, ...), so a query is a handful of
    bisections plus the hits.
    """

    __slots__ = ("_by_length",)

    def __init__(self) -> None:
        self._by_length: dict[int, SortedList] = {}

    def add(self, start: int, end: int) -> None:
        starts = self._by_length.get(end - start)
        if starts is None:
            starts = self._by_length[end - start] = SortedList()
        starts.add(start)

    def discard(self, start: int, end: int) -> None:
        starts = self._by_length[end - start]
        starts.remove(start)
        if not starts:
            del self._by_length[end - start]

    def overlapping(self, qs: int, qe: int) -> Iterator[tuple[int, int]]:
        for length, starts in self._by_length.items():
            for s in starts.irange(qs - length, qe, inclusive=(False, False)):
                yield s, s + length


class Timeline:
    """Versioned, incrementally maintained timeline of segments (see module docs)."""

    def __init__(self) -> None:
        self._chunks: dict[tuple[int, int, int], _Chunk] = {}
        self._versions: dict[tuple[int, int], dict[int, _Chunk]] = {}
        self._index = _IntervalIndex()
        # visible pieces: start -> (end, chunk); non-overlapping, sorted
        self._visible = SortedDict()
        self._size = 0

    # -- building ---------------------------------------------------------------

    @classmethod
    def build(cls, segments: Iterable[Segment]) -> Timeline:
        """A timeline of many segments at once: one sweep instead of per-add updates."""
        tl = cls()
        lo, hi = MAX_US, MIN_US
        for seg in segments:
            if tl._insert(seg):
                lo, hi = min(lo, seg.interval.start), max(hi, seg.interval.end)
        if lo < hi:
            tl._recompute(lo, hi)
        return tl

    def add(self, segment: Segment) -> bool:
        """Add a segment; False if an identical one is already there."""
        key = (segment.interval.start, segment.interval.end, segment.version)
        chunk = self._chunks.get(key)
        was_complete = chunk is not None and chunk.complete
        if not self._insert(segment):
            return False
        chunk = self._chunks[key]
        # a new partition can complete the chunk, or raise num_core_partitions and so
        # make a complete chunk incomplete again: either way visibility changes
        if chunk.complete != was_complete:
            self._recompute(chunk.start, chunk.end)
        return True

    def remove(self, segment: Segment) -> bool:
        """Remove a segment; False if it is not in the timeline. Falls back to what it hid."""
        key = (segment.interval.start, segment.interval.end, segment.version)
        chunk = self._chunks.get(key)
        if chunk is None or chunk.partitions.get(segment.partition_id) != segment:
            return False
        was_complete = chunk.complete
        chunk.pop(segment.partition_id)
        self._size -= 1
        if not chunk.partitions:
            del self._chunks[key]
            versions = self._versions[(chunk.start, chunk.end)]
            del versions[chunk.version]
            if not versions:
                del self._versions[(chunk.start, chunk.end)]
                self._index.discard(chunk.start, chunk.end)
        # removing the partition that set num_core_partitions can complete the chunk
        if chunk.complete != was_complete:
            self._recompute(chunk.start, chunk.end)
        return True

    def _insert(self, seg: Segment) -> bool:
        iv = seg.interval
        key = (iv.start, iv.end, seg.version)
        chunk = self._chunks.get(key)
        if chunk is None:
            self._check_version_overlap(seg)
            chunk = self._chunks[key] = _Chunk(iv.start, iv.end, seg.version)
            versions = self._versions.get((iv.start, iv.end))
            if versions is None:
                versions = self._versions[(iv.start, iv.end)] = {}
                self._index.add(iv.start, iv.end)
            versions[seg.version] = chunk
        elif seg.partition_id in chunk.partitions:
            if chunk.partitions[seg.partition_id] == seg:
                return False
            raise TimelineError(
                f"segment {seg.id} of table {seg.table!r} clashes with one of table "
                f"{chunk.partitions[seg.partition_id].table!r}; a timeline holds one table"
            )
        elif chunk.ow is not None:
            chunk.ow.check(seg)
        self._size += 1
        chunk.put(seg)
        return True

    def _check_version_overlap(self, seg: Segment) -> None:
        iv = seg.interval
        for s, e in self._index.overlapping(iv.start, iv.end):
            if (s, e) != (iv.start, iv.end) and seg.version in self._versions[(s, e)]:
                raise TimelineError(
                    f"segment {seg.id} overlaps {Interval.of(s, e)} of the same version "
                    f"{seg.version}; segments of one version must share their interval "
                    "or not overlap"
                )

    # -- visibility maintenance ---------------------------------------------------

    def _best_complete(self, start: int, end: int) -> _Chunk | None:
        versions = self._versions[(start, end)]
        for v in sorted(versions, reverse=True):
            if versions[v].complete:
                return versions[v]
        return None

    def _recompute(self, rs: int, re: int) -> None:
        """Recompute the visible pieces inside ``[rs, re)`` from the chunks overlapping it."""
        cands = []
        for s, e in self._index.overlapping(rs, re):
            best = self._best_complete(s, e)
            if best is not None:
                cands.append((max(s, rs), min(e, re), best))
        cands.sort(key=lambda c: c[0])
        points = sorted({rs, re, *(c[0] for c in cands), *(c[1] for c in cands)})
        pieces: list[list] = []  # [start, end, chunk]
        heap: list[tuple[int, int, _Chunk]] = []
        i = 0
        for a, b in zip(points, points[1:], strict=False):
            while i < len(cands) and cands[i][0] <= a:
                c = cands[i]
                heapq.heappush(heap, (-c[2].version, c[1], c[2]))
                i += 1
            while heap and heap[0][1] <= a:
                heapq.heappop(heap)
            if heap:
                chunk = heap[0][2]
                if pieces and pieces[-1][1] == a and pieces[-1][2] is chunk:
                    pieces[-1][1] = b
                else:
                    pieces.append([a, b, chunk])
        self._replace_pieces(rs, re, pieces)

    def _replace_pieces(self, rs: int, re: int, pieces: list[list]) -> None:
        vis = self._visible
        keep = []
        for start in list(self._pieces_overlapping(rs, re)):
            end, chunk = vis.pop(start)
            if start < rs:
                keep.append([start, rs, chunk])
            if end > re:
                keep.append([re, end, chunk])
        for start, end, chunk in keep + pieces:
            vis[start] = (end, chunk)
        self._merge_at(rs)
        self._merge_at(re)

    def _merge_at(self, point: int) -> None:
        """Join the piece ending at ``point`` with the one starting there if same chunk."""
        vis = self._visible
        right = vis.get(point)
        if right is None:
            return
        idx = vis.bisect_left(point)
        if idx == 0:
            return
        lstart, (lend, lchunk) = vis.peekitem(idx - 1)
        if lend == point and lchunk is right[1]:
            del vis[point]
            vis[lstart] = (right[0], lchunk)

    def _pieces_overlapping(self, qs: int, qe: int) -> Iterator[int]:
        vis = self._visible
        idx = vis.bisect_right(qs) - 1
        if idx < 0 or vis.peekitem(idx)[1][0] <= qs:
            idx += 1
        keys = vis.keys()
        while idx < len(keys):
            start = keys[idx]
            if start >= qe:
                break
            yield start
            idx += 1

    # -- queries ------------------------------------------------------------------

    def lookup(self, interval: Interval) -> list[TimelineEntry]:
        """Visible entries overlapping ``interval``, trimmed to it, in time order."""
        out = []
        vis = self._visible
        for start in self._pieces_overlapping(interval.start, interval.end):
            end, chunk = vis[start]
            s, e = max(start, interval.start), min(end, interval.end)
            out.append(
                TimelineEntry(Interval.of(s, e), chunk.version, chunk.segments(), chunk.interval())
            )
        return out

    def entries(self) -> list[TimelineEntry]:
        """Every visible entry, in time order."""
        return self.lookup(Interval.of(MIN_US, MAX_US))

    def is_overshadowed(self, segment: Segment) -> bool:
        """True when a visible group of the segment's own chunk overshadows it (higher
        minor version, root range containing the segment's) — whether or not that
        chunk is complete: what a partial group hides is replaced, not missing — or
        when, all over the segment's interval, a higher complete version hides it."""
        iv = segment.interval
        own = self._chunks.get((iv.start, iv.end, segment.version))
        return (own is not None and own.hides(segment)) or self.is_covered_by_newer(segment)

    def is_covered_by_newer(self, segment: Segment) -> bool:
        """True when, all over the segment's interval, higher complete versions show."""
        iv = segment.interval
        cursor = iv.start
        vis = self._visible
        for start in self._pieces_overlapping(iv.start, iv.end):
            end, chunk = vis[start]
            if start > cursor or chunk.version <= segment.version:
                return False
            cursor = end
        return cursor >= iv.end

    def _hidden_by_higher(self, chunk: _Chunk) -> bool:
        """True when higher complete versions hide the chunk's whole interval."""
        cursor = chunk.start
        vis = self._visible
        for start in self._pieces_overlapping(chunk.start, chunk.end):
            end, other = vis[start]
            if start > cursor or other.version <= chunk.version:
                return False
            cursor = end
        return cursor >= chunk.end

    def overshadowed(self) -> list[Segment]:
        """Segments for which :meth:`is_overshadowed` holds: all of a chunk that higher
        versions hide everywhere, and the overshadowed groups of any other chunk
        (complete or not: a partial group that shows hides what it overshadows)."""
        out: list[Segment] = []
        for chunk in self._chunks.values():
            if self._hidden_by_higher(chunk):
                out.extend(chunk.all_segments())
            elif chunk.ow is not None:
                out.extend(chunk.ow.overshadowed_segments())
        return out

    def partition_state(self, segment: Segment) -> str | None:
        """The state of ``segment`` inside its chunk — ``"visible"``, ``"standby"``
        (its atomic update group still lacks segments while all it would replace is
        there: it hides nothing yet) or ``"overshadowed"`` (a visible group of a higher
        minor version replaces it) — or None if it is not in the timeline. Says
        nothing about other versions: see :meth:`is_overshadowed` for that."""
        iv = segment.interval
        chunk = self._chunks.get((iv.start, iv.end, segment.version))
        if chunk is None or chunk.partitions.get(segment.partition_id) != segment:
            return None
        return "visible" if chunk.ow is None else chunk.ow.state(segment)

    def visible(self) -> list[Segment]:
        """Segments visible somewhere in the timeline (each once, in time order)."""
        seen: set[int] = set()
        out: list[Segment] = []
        for _, chunk in self._visible.values():
            if id(chunk) not in seen:
                seen.add(id(chunk))
                out.extend(chunk.segments())
        return out

    def segments(self) -> list[Segment]:
        """Every segment in the timeline, visible or not."""
        return [s for c in self._chunks.values() for s in c.partitions.values()]

    def __len__(self) -> int:
        return self._size

    def __contains__(self, segment: object) -> bool:
        if not isinstance(segment, Segment):
            return False
        iv = segment.interval
        chunk = self._chunks.get((iv.start, iv.end, segment.version))
        return chunk is not None and chunk.partitions.get(segment.partition_id) == segment
