"""A Structured Streaming driver killed with SIGKILL mid-batch, restarted from its
checkpoint: every micro-batch is applied to the upsert table exactly once.

Each run starts a real driver process (its own JVM, local mode) that streams Parquet
files, one per micro-batch, into an upsert table through ``t.foreach_batch``. The first
run kills itself with SIGKILL at one point of batch 1: with its files written but not
published, inside the publishing catalog transaction, or after lamina published but
before Spark recorded the batch in its checkpoint. The second run restarts from the
checkpoint (Spark replays batch 1) and finishes. A partial-upsert table with an
INCREMENT column would count a replayed batch twice; a plain upsert table would store
its records twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina

pytest.importorskip("pyspark")

SCHEMA = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("n", pa.int64()),
    ]
)
KEYS = ["a", "b", "c"]
BATCHES = 4

DRIVER = r"""
import os, signal, sys
import lamina
import lamina.meta.publish as publishing
from lamina.engines.spark import get_spark
from lamina.engines.spark_schema import arrow_to_spark_schema

wh, src, ckpt, kill = sys.argv[1:5]
spark = get_spark(master="local[2]", app_name="lamina-kill-test")
spark.sparkContext.setLogLevel("ERROR")
t = lamina.connect(warehouse=wh).load_table("t")
current = [-1]


def die(point):
    if kill == point and current[0] == 1:
        os.kill(os.getpid(), signal.SIGKILL)


publish, inner = publishing.publish, publishing._publish


def publish_hook(*args, **kwargs):
    die("written")  # the batch's files are written, nothing is published
    return publish(*args, **kwargs)


def inner_hook(*args, **kwargs):
    out = inner(*args, **kwargs)
    die("in_txn")  # inside the publishing transaction, before it commits
    return out


publishing.publish, publishing._publish = publish_hook, inner_hook
write = t.foreach_batch("kill-test")


def batch(frame, batch_id):
    current[0] = batch_id
    write(frame, batch_id)
    die("published")  # lamina published; Spark's checkpoint has not recorded it


stream = (
    spark.readStream.schema(arrow_to_spark_schema(t.schema))
    .option("maxFilesPerTrigger", 1)
    .parquet(src)
)
query = (
    stream.writeStream.foreachBatch(batch)
    .option("checkpointLocation", ckpt)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(600)
spark.stop()
"""


def _batch(i: int) -> pa.Table:
    return pa.table(
        {
            "k": KEYS,
            "ts": pa.array([1_700_000_000_000_000 + i * 1_000_000] * len(KEYS), pa.timestamp("us")),
            "n": [i + 1] * len(KEYS),
        },
        schema=SCHEMA,
    )


def _drive(tmp_path: Path, kill: str) -> int:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", "PYSPARK_SUBMIT_ARGS")}
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            str(tmp_path / "wh"),
            str(tmp_path / "in"),
            str(tmp_path / "ckpt"),
            kill,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.returncode


def _completed(t: lamina.Table) -> int:
    """Published commits (a killed write leaves an INFLIGHT one, cleaned up lazily)."""
    return sum(c.state == "COMPLETED" for c in t.history())


@pytest.mark.parametrize(
    ("partial", "kill"),
    [(True, "in_txn"), (True, "published"), (False, "written")],
)
def test_a_killed_streaming_driver_applies_every_batch_once(
    tmp_path: Path, partial: bool, kill: str
) -> None:
    cat = lamina.connect(warehouse=str(tmp_path / "wh"))
    t = cat.create_table(
        "t",
        SCHEMA,
        time_column="ts",
        primary_key="k",
        partial_upsert={"n": "INCREMENT"} if partial else None,
    )
    (tmp_path / "in").mkdir()
    for i in range(BATCHES):  # Spark takes files in modification-time order
        pq.write_table(_batch(i), tmp_path / "in" / f"{i}.parquet")
        os.utime(tmp_path / "in" / f"{i}.parquet", (1_700_000_000 + i, 1_700_000_000 + i))
    assert _drive(tmp_path, kill) == -signal.SIGKILL  # it died in batch 1
    published = _completed(t)
    assert published == (2 if kill == "published" else 1)  # batch 1 only in that case
    assert _drive(tmp_path, "none") == 0  # restarted from the checkpoint: it finishes
    t = cat.load_table("t")
    got = {r["k"]: r["n"] for r in t.to_arrow().to_pylist()}
    # INCREMENT: every batch's 1, 2, 3, 4 once (10); plain: the last batch's 4
    assert got == {k: (10 if partial else BATCHES) for k in KEYS}
    assert _completed(t) == BATCHES  # one upsert commit per batch, none twice
    if not partial:  # each batch's records stored once
        assert t.to_arrow(all_versions=True).num_rows == BATCHES * len(KEYS)
    cat.close()
