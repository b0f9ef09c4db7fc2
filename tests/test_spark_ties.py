"""An upsert tie inside one chunk and one Spark partition goes to the later row, even
when the sort Spark runs for ``partitionBy`` spills (it is not stable then: a hunt saw
the 30th of 40 tied records win instead of the 40th). The driver runs in a JVM of its
own, whose sorter spills every two rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import lamina

DRIVER = r"""
import sys
from pyspark.sql import SparkSession

SparkSession.builder.master("local[2]").config(
    "spark.shuffle.spill.numElementsForceSpillThreshold", "2"
).config("spark.driver.host", "127.0.0.1").config(
    "spark.driver.bindAddress", "127.0.0.1"
).config("spark.ui.enabled", "false").getOrCreate()

import pyarrow as pa
import lamina
from lamina.engines.spark import get_spark

spark = get_spark(master="local[2]")
spark.sparkContext.setLogLevel("ERROR")
day = 86_400_000_000
ts, k, v = [], [], []
for i in range(40):  # key 1: 40 records of one time; rows of another day between them
    ts += [19723 * day, 19725 * day + i]
    k += [1, 100 + i]
    v += [i, -1]
schema = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), pa.field("k", pa.int64(), nullable=False),
     ("v", pa.int64())]
)
with lamina.connect(warehouse=sys.argv[1]) as cat:
    t = cat.create_table("u", schema, time_column="ts", primary_key="k")
    rows = pa.table({"ts": ts, "k": k, "v": v}, schema).to_pandas()
    t.upsert(spark.createDataFrame(rows).coalesce(1))
spark.stop()
"""


def test_a_tie_in_one_chunk_goes_to_the_later_row_when_spark_spills(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", "PYSPARK_SUBMIT_ARGS")}
    env["LAMINA_DRIVER_MEMORY"] = "1g"
    wh = str(tmp_path / "wh")
    proc = subprocess.run(
        [sys.executable, str(script), wh], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with lamina.connect(warehouse=wh) as cat:
        got = cat.load_table("u").to_arrow()
    assert got.num_rows == 41
    one = got.filter(pc.equal(got["k"], pa.scalar(1, pa.int64())))
    assert one.column("v").to_pylist() == [39]
