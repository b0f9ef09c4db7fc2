"""Read planning: snapshot -> timeline -> the files (and row ranges) a reader needs."""

from __future__ import annotations

from dataclasses import dataclass

from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline


@dataclass(frozen=True, slots=True)
class ScanTask:
    """Read ``segment``; keep only rows inside ``keep`` unless it is None (whole file)."""

    segment: Segment
    keep: Interval | None


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
    query = interval or ETERNITY
    tasks = []
    for entry in timeline.lookup(query):
        keep = entry.interval
        for seg in entry.segments:
            if seg.location is None:  # tombstone
                continue
            inside = (
                seg.min_time is not None
                and seg.max_time is not None
                and keep.start <= seg.min_time
                and seg.max_time < keep.end
            )
            whole = keep == seg.interval or inside or snapshot.table.time_column is None
            tasks.append(ScanTask(seg, None if whole else keep))
    return ScanPlan(snapshot.table, snapshot.seq, snapshot.commit_id, tasks)
