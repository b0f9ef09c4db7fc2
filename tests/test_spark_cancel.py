"""A Spark write whose commit is lost (its lock revoked by a higher-priority request,
or the commit aborted by another writer) is cancelled within a heartbeat: its job
stops, the write raises lamina's error, nothing is published, no file is left."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import select, update

import lamina
from lamina.errors import CommitError, LockRevokedError
from lamina.meta.schema import commits

pytestmark = pytest.mark.spark

JAN = ("2024-01-01", "2024-02-01")
SLEEP_S = 1.0  # per partition of the slow write


def _frame(spark: Any, parts: int) -> Any:
    """``parts`` partitions of one row each, an hour apart from 2024-01-01."""
    from pyspark.sql import functions as F

    return spark.range(0, parts, 1, parts).select(
        F.timestamp_seconds(F.lit(1704067200) + F.col("id") * 3600).alias("ts"),
        F.col("id").alias("k"),
        F.lit(1.0).alias("v"),
    )


def _slow(batches: Iterator[Any]) -> Iterator[Any]:
    for b in batches:
        time.sleep(SLEEP_S)
        yield b


def _wait(cond: Any, what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return got


@pytest.mark.parametrize("cause", ["revoked", "aborted"])
def test_a_lost_commit_cancels_its_spark_write_within_a_heartbeat(
    spark: Any, catalog_url: str, tmp_path: Path, cause: str
) -> None:
    sc = spark.sparkContext
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, heartbeat_s=0.2)
    # the slow job needs at least 24 s whatever the cores: a partition per second each
    parts = 24 * sc.defaultParallelism
    base = _frame(spark, parts)
    t = cat.create_table("slow", base.schema, time_column="ts", segment_granularity="DAY")
    t.append(base.coalesce(1))
    before = sorted(s.id for s in t.segments())
    slow = base.mapInPandas(_slow, base.schema)
    jobs: list[int] = []
    running: list[float] = []
    failed: list[BaseException] = []

    def other_writer() -> None:
        try:
            lose_the_commit()
        except BaseException as exc:  # reported by the test, not lost in the thread
            failed.append(exc)
            raise

    def lose_the_commit() -> None:  # another process's writer, on its own connection
        jobs.extend(_wait(sc.statusTracker().getActiveJobsIds, "the slow job"))
        running.append(time.monotonic())
        with lamina.connect(catalog=catalog_url, warehouse=wh) as other:
            if cause == "revoked":
                with other.load_table("slow").transaction(
                    lock="EXCLUSIVE", interval=JAN, priority=75, wait_s=0
                ) as high:
                    ts = pa.array([dt.datetime(2024, 1, 3)], pa.timestamp("us", tz="UTC"))
                    high.append(pa.table({"ts": ts, "k": [-1], "v": [2.0]}))
            else:  # as its lazy cleanup does to a writer it takes for dead
                with other.engine.begin() as conn:
                    conn.execute(
                        update(commits)
                        .where(commits.c.state.in_(["REQUESTED", "INFLIGHT"]))
                        .values(state="ABORTED")
                    )

    thread = threading.Thread(target=other_writer)
    thread.start()
    error = LockRevokedError if cause == "revoked" else CommitError
    with pytest.raises(error, match="revoked" if cause == "revoked" else "aborted") as info:
        if cause == "revoked":
            with t.transaction(lock="REPLACE", interval=JAN, priority=25) as low:
                low.overwrite(slow)
        else:
            t.append(slow)
    raised = time.monotonic()
    thread.join()
    assert not failed
    if cause == "aborted":
        assert not isinstance(info.value, LockRevokedError)

    # the job was cancelled, not finished: the raise came before it could have ended
    # (it needs parts * SLEEP_S s on at most defaultParallelism cores)
    assert len(jobs) == 1
    # (the cancel reaches the job's status a moment after the raise on a busy machine)
    ended = _wait(lambda: sc.statusTracker().getJobInfo(jobs[0]).status != "RUNNING", "end", 10)
    assert ended and sc.statusTracker().getJobInfo(jobs[0]).status == "FAILED"
    assert raised - running[0] < parts * SLEEP_S / sc.defaultParallelism
    # the write's tag and interrupt setting are gone from this thread
    assert set(sc.getJobTags()) == set()
    assert sc.getLocalProperty("spark.job.interruptOnCancel") != "true"

    # nothing published, the commit's directory removed (once its tasks are gone)
    _wait(lambda: not sc.statusTracker().getActiveStageIds(), "the killed tasks", 30)
    added = 1 if cause == "revoked" else 0
    assert t.count() == parts + added
    assert [s.id for s in t.segments() if s.id in before] == before
    lost = [c for c in t.history() if c.state == "ABORTED"]
    assert len(lost) == 1
    assert not (Path(wh) / "slow" / "data" / f"c{lost[0].id:010d}").exists()
    with cat.engine.connect() as conn:
        assert conn.execute(
            select(commits.c.files_cleaned).where(commits.c.id == lost[0].id)
        ).scalar()

    # a following Spark write on this thread runs outside the cancelled tag
    t.append(_frame(spark, 3))
    assert t.count() == parts + added + 3
    assert cat.clean_failed_writes() == 0
    cat.close()
