"""Progress bars of the writing commands: rows and bytes read by the local engine, or
Spark's tasks (polled from its status tracker)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class LocalProgress:
    """Rows read so far and bytes of the input files read through."""

    def __init__(self, console: Console, total_bytes: int | None) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("· {task.fields[rows]:,} rows"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._task = self.progress.add_task("reading", total=total_bytes or None, rows=0)

    def phase(self, text: str) -> None:
        self.progress.update(self._task, description=text)

    def update(self, rows: int, nbytes: int) -> None:
        """Called by the reader after each batch."""
        self.progress.update(self._task, completed=nbytes, rows=rows)

    def __enter__(self) -> LocalProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


class SparkProgress:
    """A progress bar of Spark's tasks, fed by a thread polling the status tracker."""

    def __init__(self, spark: SparkSession, console: Console, interval_s: float = 0.2) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stages: dict[int, tuple[int, int]] = {}  # id -> (completed, total) tasks
        self._done: set[int] = set()
        self._phase = "starting"
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._task: TaskID = self.progress.add_task("starting", total=None)
        self._thread = threading.Thread(target=self._run, name="lamina-progress", daemon=True)

    def phase(self, text: str) -> None:
        with self._lock:
            self._phase = text
            self._refresh()

    def poll(self) -> None:
        """Read the status of every stage seen so far; update the bar."""
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        active = self._tracker.getActiveStageIds()
        for sid in active:
            self._stages.setdefault(sid, (0, 0))
        for sid in list(self._stages):
            if sid in self._done:
                continue
            info = self._tracker.getStageInfo(sid)
            if info is None:
                self._done.add(sid)
                continue
            self._stages[sid] = (info.numCompletedTasks, info.numTasks)
            if sid not in active and info.numActiveTasks == 0:
                self._done.add(sid)
        self._refresh(active)

    def _refresh(self, active: Sequence[int] = ()) -> None:
        completed = sum(c for c, _ in self._stages.values())
        total = sum(n for _, n in self._stages.values())
        stage = f" · stage {', '.join(map(str, active))}" if active else ""
        self.progress.update(
            self._task,
            description=f"{self._phase}{stage}",
            completed=completed,
            total=total or None,
        )

    @property
    def tasks(self) -> int:
        return sum(c for c, _ in self._stages.values())

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.poll()
            except Exception:  # the JVM went away, py4j hiccup: stop reporting, not the job
                return

    def __enter__(self) -> SparkProgress:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self.poll()  # count the tasks that finished since the last poll
        self.progress.stop()
