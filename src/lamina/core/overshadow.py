"""Atomic update groups inside one chunk: which of its segments show (pure, no I/O).

Druid's minor-version overwrite ("segment locking"): an overwrite at a chunk's own
version — a minor compaction — writes segments with a higher ``minor_version`` whose
``root_partition_range`` names the first-generation partitions they replace. Inside
one chunk:

* the segments with equal ``(root range, minor version)`` form an **atomic update
  group**; a group is **full** once its ``atomic_update_group_size`` segments are all
  there (a first-generation segment is a full group of one);
* group A **overshadows** group B when A's root range contains B's and A's minor
  version is higher.

Which groups are visible is a function of the segments present (not of the order
they came in):

1. a full group that no full group overshadows is **settled**;
2. a group that is not full and that no full group overshadows stands by — hiding
   nothing — while the settled groups it overshadows tile its root range exactly
   (everything it would replace is still there); otherwise it is a **candidate**;
3. the **visible** groups are the candidates no other candidate overshadows, and the
   settled groups no visible candidate overshadows;
4. every other group is **overshadowed** if a visible group overshadows it, else on
   **standby**.

So a group shows once it is complete and then hides what it replaces; removing one of
its segments falls back, atomically, to the full groups below it when they cover its
range, and only when they do not (data below is missing too) does the newest partial
group show — Druid's rule "if no group is fully available, the latest one is
visible". Chunk completeness (Druid's PartitionHolder): every visible group is full,
and their root ranges cover partitions ``0..core-1`` (``core > 0``) or are any
non-empty set (``core = 0``). An overshadowed group is replaced whether or not the
chunk is complete: the timeline reports it overshadowed either way, so a partial
group never hides present segments unaccounted for.

The state is kept per *span*: a maximal union of overlapping root ranges, the only
groups a change can affect. An add or a remove marks its span for recomputation,
done lazily on the next query, in ``O(k log k)`` for a span of ``k`` groups; a chunk
of first-generation segments is a row of one-group spans.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from sortedcontainers import SortedDict, SortedList

from lamina.core.segment import Segment
from lamina.errors import TimelineError

__all__ = ["OVERSHADOWED", "STANDBY", "VISIBLE", "AtomicGroups"]

VISIBLE = "visible"
STANDBY = "standby"
OVERSHADOWED = "overshadowed"


class _Group:
    """The present segments of one atomic update group."""

    __slots__ = ("start", "end", "minor", "size", "members", "state")

    def __init__(self, start: int, end: int, minor: int, size: int) -> None:
        self.start = start
        self.end = end
        self.minor = minor
        self.size = size
        self.members: dict[int, Segment] = {}
        self.state = STANDBY

    @property
    def full(self) -> bool:
        return len(self.members) == self.size


class _View:
    """The outcome for one span: its visible groups and the root partitions they cover."""

    __slots__ = ("visible", "covered", "unfull")

    def __init__(self, visible: list[_Group]) -> None:
        self.visible = visible
        self.unfull = sum(1 for g in visible if not g.full)
        covered: list[list[int]] = []
        for g in sorted(visible, key=lambda g: g.start):
            if covered and g.start <= covered[-1][1]:
                covered[-1][1] = max(covered[-1][1], g.end)
            else:
                covered.append([g.start, g.end])
        self.covered = [(a, b) for a, b in covered]

    def covered_below(self, core: int) -> int:
        return sum(min(b, core) - a for a, b in self.covered if a < core)


class AtomicGroups:
    """The groups of one chunk and their states, maintained incrementally."""

    __slots__ = (
        "_groups",
        "_keys",
        "_spans",
        "_views",
        "_dirty",
        "_unfull",
        "_core",
        "_covered",
        "_shown",
        "overwrites",
    )

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        self._groups: dict[tuple[int, int, int], _Group] = {}
        self._keys = SortedList()  # group keys (root start, root end, minor)
        self._spans = SortedDict()  # span start -> end: unions of overlapping root ranges
        self._views: dict[int, _View] = {}  # span start -> outcome (spans not dirty)
        self._dirty: set[int] = set()  # span starts to recompute
        self._unfull = 0  # views whose visible groups are not all full
        self._core = 0  # the core count _covered is measured against
        self._covered = 0  # root partitions below _core the visible groups cover
        self._shown: tuple[Segment, ...] | None = None  # visible segments, cached
        self.overwrites = 0  # segments that are not first-generation
        for seg in segments:
            self.put(seg)

    # -- changes ------------------------------------------------------------------

    def check(self, seg: Segment) -> None:
        """Raise TimelineError if ``seg`` cannot join its group (inconsistent group
        size, or the group already has all its segments)."""
        start, end = seg.root_range
        group = self._groups.get((start, end, seg.minor_version))
        if group is None or seg.partition_id in group.members:
            return
        if group.size != seg.atomic_update_group_size:
            raise TimelineError(
                f"segment {seg.id} has atomic_update_group_size "
                f"{seg.atomic_update_group_size}, but its group (root partitions "
                f"[{start}, {end}), minor version {seg.minor_version}) has {group.size}"
            )
        if group.full:
            raise TimelineError(
                f"segment {seg.id} would be segment {group.size + 1} of an atomic update "
                f"group of {group.size} (root partitions [{start}, {end}), minor version "
                f"{seg.minor_version})"
            )

    def put(self, seg: Segment) -> None:
        """Add ``seg`` (its partition id is new to the chunk; :meth:`check` passed)."""
        start, end = seg.root_range
        key = (start, end, seg.minor_version)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(start, end, seg.minor_version, 0)
            group.size = seg.atomic_update_group_size
            self._keys.add(key)
            self._join(start, end)
        else:
            self._touch(start)
        group.members[seg.partition_id] = seg
        if seg.minor_version:
            self.overwrites += 1
        self._shown = None

    def pop(self, seg: Segment) -> None:
        """Remove ``seg`` (present)."""
        start, end = seg.root_range
        key = (start, end, seg.minor_version)
        group = self._groups[key]
        del group.members[seg.partition_id]
        if seg.minor_version:
            self.overwrites -= 1
        self._shown = None
        span = self._span_of(start)
        self._forget(span)
        if group.members:
            self._dirty.add(span)
            return
        del self._groups[key]
        self._keys.remove(key)
        self._split(span)

    # -- queries ------------------------------------------------------------------

    def complete(self, core: int) -> bool:
        """Whether the chunk counts: every visible group full, and root partitions
        ``0..core-1`` covered (any visible group when ``core`` is 0)."""
        self._settle()
        if not self._groups or self._unfull:
            return False
        if core <= 0:
            return True
        if core != self._core:
            self._core = core
            self._covered = sum(v.covered_below(core) for v in self._views.values())
        return self._covered >= core

    def visible_segments(self) -> tuple[Segment, ...]:
        """The segments of the visible groups, by partition id."""
        if self._shown is None:
            self._settle()
            shown = [s for v in self._views.values() for g in v.visible for s in g.members.values()]
            shown.sort(key=lambda s: s.partition_id)
            self._shown = tuple(shown)
        return self._shown

    def overshadowed_segments(self) -> list[Segment]:
        """The segments of overshadowed groups, by partition id."""
        self._settle()
        out = [
            s for g in self._groups.values() if g.state == OVERSHADOWED for s in g.members.values()
        ]
        out.sort(key=lambda s: s.partition_id)
        return out

    def uncovered(self, core: int) -> list[int]:
        """Root partitions below ``core`` that no visible group covers."""
        self._settle()
        out: list[int] = []
        at = 0
        for a, b in sorted(c for v in self._views.values() for c in v.covered):
            out.extend(range(at, min(a, core)))
            at = max(at, b)
        out.extend(range(at, core))
        return out

    def partial_visible(self) -> list[tuple[int, int, int, int, int]]:
        """(root start, root end, minor version, segments present, group size) of each
        visible group that is not full (the chunk is incomplete while there are any)."""
        self._settle()
        return sorted(
            (g.start, g.end, g.minor, len(g.members), g.size)
            for v in self._views.values()
            for g in v.visible
            if not g.full
        )

    def state(self, seg: Segment) -> str | None:
        """``seg``'s state (visible, standby or overshadowed), None if absent."""
        start, end = seg.root_range
        group = self._groups.get((start, end, seg.minor_version))
        if group is None or group.members.get(seg.partition_id) != seg:
            return None
        self._settle()
        return group.state

    def hides(self, seg: Segment) -> bool:
        """Whether a visible group overshadows ``seg`` (present or not)."""
        self._settle()
        start, end = seg.root_range
        idx = self._spans.bisect_right(start) - 1
        if idx < 0:
            return False
        span, span_end = self._spans.peekitem(idx)
        if span_end <= start:
            return False
        return any(
            g.start <= start and end <= g.end and g.minor > seg.minor_version
            for g in self._views[span].visible
        )

    # -- spans ----------------------------------------------------------------------

    def _span_of(self, point: int) -> int:
        return self._spans.keys()[self._spans.bisect_right(point) - 1]

    def _join(self, start: int, end: int) -> None:
        """A new root range: merge the spans it overlaps into one, to recompute."""
        spans = self._spans
        idx = spans.bisect_right(start) - 1
        if idx < 0 or spans.peekitem(idx)[1] <= start:
            idx += 1
        merged = []
        keys = spans.keys()
        while idx < len(keys) and keys[idx] < end:
            merged.append(keys[idx])
            idx += 1
        lo, hi = start, end
        for s in merged:
            hi = max(hi, spans.pop(s))
            lo = min(lo, s)
            self._forget(s)
            self._dirty.discard(s)
        spans[lo] = hi
        self._dirty.add(lo)

    def _touch(self, point: int) -> None:
        span = self._span_of(point)
        self._forget(span)
        self._dirty.add(span)

    def _split(self, span: int) -> None:
        """A group left ``span``: what remains may fall apart into several spans."""
        end = self._spans.pop(span)
        self._dirty.discard(span)
        cur: list[int] | None = None
        for s, e, _ in self._keys.irange((span,), (end,), inclusive=(True, False)):
            if cur is not None and s < cur[1]:
                cur[1] = max(cur[1], e)
                continue
            if cur is not None:
                self._spans[cur[0]] = cur[1]
                self._dirty.add(cur[0])
            cur = [s, e]
        if cur is not None:
            self._spans[cur[0]] = cur[1]
            self._dirty.add(cur[0])

    def _forget(self, span: int) -> None:
        view = self._views.pop(span, None)
        if view is not None:
            self._unfull -= view.unfull > 0
            self._covered -= view.covered_below(self._core)

    def _settle(self) -> None:
        if not self._dirty:
            return
        for span in self._dirty:
            end = self._spans[span]
            groups = [
                self._groups[k] for k in self._keys.irange((span,), (end,), inclusive=(True, False))
            ]
            view = self._views[span] = _View(_decide(groups))
            self._unfull += view.unfull > 0
            self._covered += view.covered_below(self._core)
        self._dirty.clear()


def _decide(groups: list[_Group]) -> list[_Group]:
    """Set the state of each group of one span; return the visible ones."""
    full = [g for g in groups if g.full]
    by_full = _dominated(groups, full)
    settled = [g for g, d in zip(groups, by_full, strict=True) if g.full and not d]
    free = [g for g, d in zip(groups, by_full, strict=True) if not g.full and not d]
    candidates = [g for g in free if not _tiled(g, settled)] if free else []
    top = [g for g, d in zip(candidates, _dominated(candidates, candidates), strict=True) if not d]
    visible = top + [g for g, d in zip(settled, _dominated(settled, top), strict=True) if not d]
    for g, d in zip(groups, _dominated(groups, visible), strict=True):
        g.state = OVERSHADOWED if d else STANDBY
    for g in visible:
        g.state = VISIBLE
    return visible


def _tiled(group: _Group, settled: list[_Group]) -> bool:
    """Whether the settled groups ``group`` overshadows tile its root range exactly."""
    inner = sorted(
        (g.start, g.end)
        for g in settled
        if group.start <= g.start and g.end <= group.end and g.minor < group.minor
    )
    at = group.start
    for s, e in inner:
        if s != at:
            return False
        at = e
    return at == group.end


def _dominated(queries: list[_Group], doms: list[_Group]) -> list[bool]:
    """Per query: does some group of ``doms`` overshadow it (root range containing
    the query's, higher minor version)?"""
    if not doms or not queries:
        return [False] * len(queries)
    if len(queries) * len(doms) <= 256:
        return [
            any(d.start <= q.start and q.end <= d.end and d.minor > q.minor for d in doms)
            for q in queries
        ]
    # sweep by root start: insert the doms starting at or before the query, then ask
    # for the highest minor among those ending at or after it (a prefix-max Fenwick
    # tree over distinct ends, highest end first)
    ends = sorted({-d.end for d in doms})  # ascending negated = descending ends
    tree = [-1] * (len(ends) + 1)
    order = sorted(doms, key=lambda d: d.start)
    out = [False] * len(queries)
    i = 0
    for qi in sorted(range(len(queries)), key=lambda k: queries[k].start):
        q = queries[qi]
        while i < len(order) and order[i].start <= q.start:
            d = order[i]
            pos = bisect_left(ends, -d.end) + 1
            while pos < len(tree):
                if tree[pos] < d.minor:
                    tree[pos] = d.minor
                pos += pos & -pos
            i += 1
        pos = bisect_right(ends, -q.end)  # the doms ending at or after the query
        best = -1
        while pos > 0:
            if tree[pos] > best:
                best = tree[pos]
            pos -= pos & -pos
        out[qi] = best > q.minor
    return out
