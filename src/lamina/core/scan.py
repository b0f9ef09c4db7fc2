"""Read planning: snapshot -> timeline -> the files (and row ranges) a reader needs."""

from __future__ import annotations

from dataclasses import dataclass

from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline


@dataclass(frozen=True, slots=True)
class ScanTask:
    """Read ``segment``; keep only rows inside ``keep`` unless it is None (whole file).

    ``span``: the visible piece of the timeline the task answers for (trimmed to the
    planned interval); lets :func:`prune_plan` narrow a plan without the catalog.
    """

    segment: Segment
    keep: Interval | None
    span: Interval | None = None


@dataclass(frozen=True)
class ScanPlan:
    """Everything a reader of one snapshot needs; engines only execute it."""

    table: TableRecord
    seq: int
    commit_id: int | None
    tasks: list[ScanTask]

    @property
    def whole_files(self) -> list[str]:
        return [t.segment.location for t in self.tasks if t.keep is None]  # type: ignore[misc]

    @property
    def partial_files(self) -> list[tuple[str, Interval]]:
        return [(t.segment.location, t.keep) for t in self.tasks if t.keep is not None]  # type: ignore[misc]

    @property
    def row_count(self) -> int:
        """Rows in the planned files (before row-range filters)."""
        return sum(t.segment.row_count for t in self.tasks)


def plan_scan(snapshot: Snapshot, interval: Interval | None = None) -> ScanPlan:
    """Visible data segments overlapping ``interval``, with the row ranges to keep."""
    timeline = Timeline.build(snapshot.segments)
    timeless = snapshot.table.time_column is None
    tasks = []
    for entry in timeline.lookup(interval or ETERNITY):
        for seg in entry.segments:
            if seg.location is not None:  # else a tombstone
                tasks.append(_task(seg, entry.interval, timeless))
    return ScanPlan(snapshot.table, snapshot.seq, snapshot.commit_id, tasks)


def prune_plan(plan: ScanPlan, interval: Interval) -> ScanPlan:
    """``plan`` narrowed to ``interval``: equal to planning its snapshot with ``interval``
    when ``plan`` was planned without one (or with a wider one)."""
    timeless = plan.table.time_column is None
    tasks = []
    for t in plan.tasks:
        span = t.span if t.span is not None else t.segment.interval
        piece = span.intersection(interval)
        if piece is not None:
            tasks.append(_task(t.segment, piece, timeless))
    return ScanPlan(plan.table, plan.seq, plan.commit_id, tasks)


def _task(seg: Segment, piece: Interval, timeless: bool) -> ScanTask:
    """Read ``seg`` for the visible ``piece``: whole when every row it holds is inside."""
    inside = (
        seg.min_time is not None
        and seg.max_time is not None
        and piece.start <= seg.min_time
        and seg.max_time < piece.end
    )
    whole = piece == seg.interval or inside or timeless
    return ScanTask(seg, None if whole else piece, piece)
