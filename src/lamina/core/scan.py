"""Read planning: snapshot -> timeline -> the files (and row ranges) a reader needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import Snapshot, TableRecord
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class ScanTask:
    """Read ``segment``; keep only rows inside ``keep`` unless it is None (whole file).

    ``span``: the visible piece of the timeline the task answers for (trimmed to the
    planned interval); lets :func:`prune_plan` narrow a plan without the catalog.
    """

    segment: Segment
    keep: Interval | None
    span: Interval | None = None


class TaskColumns(Protocol):
    """What a :class:`ScanPlan` asks of tasks held as columns rather than objects
    (implemented by :class:`lamina.core.columnar.ColumnarTasks`)."""

    def __len__(self) -> int: ...

    @property
    def row_count(self) -> int: ...

    def row_counts(self) -> dict[str, int]: ...

    @property
    def all_whole(self) -> bool: ...

    def paths(self, whole: bool) -> list[str]: ...

    def partial(self) -> list[tuple[str, Interval]]: ...

    def reads(self) -> list[tuple[str, Interval | None]]: ...

    def pruned(self, interval: Interval, timeless: bool) -> TaskColumns: ...

    def tasks(self, name: str) -> list[ScanTask]: ...


class ScanPlan:
    """Everything a reader of one snapshot needs; engines only execute it.

    Held either as task objects, or — for big snapshots — as columns (``columns``:
    a :class:`TaskColumns`, see :class:`lamina.core.columnar.ColumnarTasks`), with
    the task objects made only when someone asks for :attr:`tasks`.
    """

    __slots__ = ("table", "seq", "commit_id", "columns", "_tasks", "deletes")

    def __init__(
        self,
        table: TableRecord,
        seq: int,
        commit_id: int | None,
        tasks: list[ScanTask] | None = None,
        *,
        columns: TaskColumns | None = None,
        deletes: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.table = table
        self.seq = seq
        self.commit_id = commit_id
        self.columns = columns
        self._tasks = None if columns is not None else (tasks or [])
        #: upsert tables: per file path, the sorted positions of rows it hides (rows
        #: that are not their key's latest record at this snapshot)
        self.deletes: dict[str, np.ndarray] = deletes if deletes is not None else {}

    @property
    def tasks(self) -> list[ScanTask]:
        if self._tasks is None:
            assert self.columns is not None
            self._tasks = self.columns.tasks(self.table.name)
        return self._tasks

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScanPlan):
            return NotImplemented
        return (self.table, self.seq, self.commit_id, self.tasks) == (
            other.table,
            other.seq,
            other.commit_id,
            other.tasks,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ScanPlan({self.table.name!r}, seq={self.seq}, tasks={len(self)})"

    def __len__(self) -> int:
        return len(self.columns) if self.columns is not None else len(self.tasks)

    @property
    def whole_files(self) -> list[str]:
        if self.columns is not None:
            return self.columns.paths(whole=True)
        return [t.segment.location for t in self.tasks if t.keep is None]  # type: ignore[misc]

    @property
    def partial_files(self) -> list[tuple[str, Interval]]:
        if self.columns is not None:
            return self.columns.partial()
        return [(t.segment.location, t.keep) for t in self.tasks if t.keep is not None]  # type: ignore[misc]

    def reads(self) -> list[tuple[str, Interval | None]]:
        """(path, rows to keep — None: the whole file) of every task, in task order."""
        if self.columns is not None:
            return self.columns.reads()
        return [(t.segment.location, t.keep) for t in self.tasks]  # type: ignore[misc]

    @property
    def all_whole(self) -> bool:
        """True when every task reads its whole file (no row range to apply)."""
        if self.columns is not None:
            return self.columns.all_whole
        return all(t.keep is None for t in self.tasks)

    def row_counts(self) -> dict[str, int]:
        """Rows of each planned file, by path."""
        if self.columns is not None:
            return self.columns.row_counts()
        return {t.segment.location: t.segment.row_count for t in self.tasks}  # type: ignore[misc]

    @property
    def row_count(self) -> int:
        """Rows in the planned files (before row-range filters)."""
        if self.columns is not None:
            return self.columns.row_count
        return sum(t.segment.row_count for t in self.tasks)


def plan_scan(snapshot: Snapshot, interval: Interval | None = None) -> ScanPlan:
    """Visible data segments overlapping ``interval``, with the row ranges to keep."""
    timeline = Timeline.build(snapshot.segments)
    timeless = snapshot.table.time_column is None
    tasks = []
    for entry in timeline.lookup(interval or ETERNITY):
        for seg in entry.segments:
            if seg.location is not None:  # else a tombstone
                tasks.append(task_for(seg, entry.interval, timeless))
    return ScanPlan(snapshot.table, snapshot.seq, snapshot.commit_id, tasks)


def prune_plan(plan: ScanPlan, interval: Interval) -> ScanPlan:
    """``plan`` narrowed to ``interval``: equal to planning its snapshot with ``interval``
    when ``plan`` was planned without one (or with a wider one)."""
    if plan.columns is not None:
        narrowed = plan.columns.pruned(interval, plan.table.time_column is None)
        out = ScanPlan(plan.table, plan.seq, plan.commit_id, columns=narrowed)
    else:
        timeless = plan.table.time_column is None
        tasks = []
        for t in plan.tasks:
            span = t.span if t.span is not None else t.segment.interval
            piece = span.intersection(interval)
            if piece is not None:
                tasks.append(task_for(t.segment, piece, timeless))
        out = ScanPlan(plan.table, plan.seq, plan.commit_id, tasks)
    out.deletes = plan.deletes  # by file: those it no longer reads are never looked up
    return out


def task_for(seg: Segment, piece: Interval, timeless: bool) -> ScanTask:
    """Read ``seg`` for the visible ``piece``: whole when every row it holds is inside
    (or the table has no time column)."""
    inside = (
        seg.min_time is not None
        and seg.max_time is not None
        and piece.start <= seg.min_time
        and seg.max_time < piece.end
    )
    whole = piece == seg.interval or inside or timeless
    return ScanTask(seg, None if whole else piece, piece)
