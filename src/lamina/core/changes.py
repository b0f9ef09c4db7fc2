"""Change data between two snapshots: which rows stopped or started being visible.

A snapshot's visible rows are pieces of segments: task ``(segment, span)`` of a plan
means "the rows of that segment's file whose time lies in ``span``". Between two
plans of the same interval, the rows that stopped being visible are, per segment,
its pieces before minus its pieces after, and the rows that became visible the
reverse. Pure: plans in, pieces out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from lamina.core.interval import Interval
from lamina.core.scan import ScanTask
from lamina.core.segment import Segment


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly the union (touching ones joined)."""
    out: list[list[int]] = []
    for iv in sorted(intervals, key=lambda i: (i.start, i.end)):
        if out and iv.start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], iv.end)
        else:
            out.append([iv.start, iv.end])
    return [Interval.of(a, b) for a, b in out]


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The parts of the union of ``a`` outside the union of ``b``, sorted, disjoint."""
    cut = merge(b)
    out: list[Interval] = []
    for piece in merge(a):
        start = piece.start
        for c in cut:
            if c.end <= start or c.start >= piece.end:
                continue
            if c.start > start:
                out.append(Interval.of(start, c.start))
            start = max(start, c.end)
            if start >= piece.end:
                break
        if start < piece.end:
            out.append(Interval.of(start, piece.end))
    return out


def _pieces(tasks: Iterable[ScanTask]) -> dict[str, tuple[Segment, list[Interval]]]:
    by: dict[str, tuple[Segment, list[Interval]]] = {}
    for t in tasks:
        assert t.segment.location is not None and t.span is not None
        seg, spans = by.setdefault(t.segment.location, (t.segment, []))
        spans.append(t.span)
    return by


def diff(
    before: Iterable[ScanTask], after: Iterable[ScanTask]
) -> tuple[list[tuple[Segment, Interval]], list[tuple[Segment, Interval]]]:
    """(deleted, inserted): the (segment, piece) pairs visible only before, and only
    after, in segment-location then time order."""
    was, now = _pieces(before), _pieces(after)
    gone: dict[str, list[Interval]] = defaultdict(list)
    new: dict[str, list[Interval]] = defaultdict(list)
    for loc, (_, spans) in was.items():
        gone[loc] = subtract(spans, now[loc][1] if loc in now else [])
    for loc, (_, spans) in now.items():
        new[loc] = subtract(spans, was[loc][1] if loc in was else [])
    deleted = [(was[loc][0], p) for loc in sorted(gone) for p in gone[loc]]
    inserted = [(now[loc][0], p) for loc in sorted(new) for p in new[loc]]
    return deleted, inserted
