"""Spark engine: native Parquet writes by chunk, snapshot reads, failures leave no trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lamina
from lamina import errors
from tests.helpers import SCHEMA, events

pytestmark = pytest.mark.spark


def _frame(spark: Any, rows: int, days: int, start_epoch: int = 1704067200) -> Any:
    from pyspark.sql import functions as F

    step = days * 86400 // rows
    return spark.range(0, rows).select(
        F.timestamp_seconds(F.lit(start_epoch) + F.col("id") * step).alias("ts"),
        (F.col("id") % 7).alias("k"),
        F.rand(1).alias("v"),
    )


def test_spark_write_read_roundtrip(spark: Any, cat: lamina.Catalog) -> None:
    df = _frame(spark, 2000, 4)
    t = cat.create_table(
        "ev", schema=df.schema, time_column="ts", properties={"target_rows_per_segment": 200}
    )
    c = t.append(df)
    segs = t.segments()
    assert t.count() == 2000
    # 500 rows a day, at most 200 rows a file: at least 3 segments per day
    assert len(segs) >= 12 and max(s.row_count for s in segs) <= 200
    assert {s.num_core_partitions for s in segs} == {0}
    assert all(s.interval.contains_instant(s.min_time) for s in segs)  # type: ignore[arg-type]
    assert all(s.interval.contains_instant(s.max_time) for s in segs)  # type: ignore[arg-type]
    sdf = t.to_spark(spark)
    assert sdf.count() == 2000 and sdf.columns == ["ts", "k", "v"]
    # overwrite one day from Spark; Spark and Arrow both see the new snapshot
    day2 = df.where("ts >= '2024-01-02' and ts < '2024-01-03'")
    expected = 2000 - day2.count() + 10
    c2 = t.overwrite(day2.limit(10))
    assert t.to_spark(spark).count() == expected == t.count()
    assert t.to_spark(spark, as_of=c.version).count() == 2000
    assert c2.id > c.id
    day = t.to_spark(spark, interval="2024-01-02/2024-01-03").collect()
    assert len(day) == 10


def test_spark_and_local_writes_mix(spark: Any, cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=2, per_day=10))
    sdf = t.to_spark(spark)
    t.append(sdf)  # Spark writes what it read: NTZ timestamps, same columns
    assert t.count() == 40
    assert sorted(r.k for r in t.to_spark(spark).collect()) == sorted(t.to_pandas()["k"])


def test_failing_spark_job_leaves_table_unchanged(spark: Any, cat: lamina.Catalog) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    df = _frame(spark, 500, 2)
    t = cat.create_table("ev", schema=df.schema, time_column="ts")
    t.append(df)
    before = (t.count(), sorted(s.id for s in t.segments()))

    @F.udf(LongType())
    def explode(k: int) -> int:
        if k == 5:
            raise ValueError("bad row")
        return k

    with pytest.raises(Exception, match="bad row"):
        t.append(df.withColumn("k", explode("k")))
    assert (t.count(), sorted(s.id for s in t.segments())) == before
    aborted = [c for c in t.history() if c.state == "ABORTED"]
    assert len(aborted) == 1
    assert not (Path(cat.warehouse.root) / "ev" / "data" / f"c{aborted[0].id:010d}").exists()


def test_spark_bad_input(spark: Any, cat: lamina.Catalog) -> None:
    from pyspark.sql import functions as F

    df = _frame(spark, 100, 1)
    t = cat.create_table("ev", schema=df.schema, time_column="ts")
    t.append(df)
    before = t.count()
    with pytest.raises(errors.SchemaError, match="missing columns \\['ts'\\]"):
        t.append(df.drop("ts"))
    with pytest.raises(errors.TimeColumnError, match="null"):
        t.append(df.withColumn("ts", F.when(F.col("k") == 3, None).otherwise(F.col("ts"))))
    with pytest.raises(errors.DataOutsideIntervalError):
        t.overwrite(df, interval="2024-01-05/2024-01-06")
    assert t.count() == before
    assert not any(
        p.suffix == ".parquet"
        for c in t.history()
        if c.state == "ABORTED"
        for p in (Path(cat.warehouse.root) / "ev" / "data" / f"c{c.id:010d}").rglob("*")
    )


def test_create_table_from_spark_schema_no_time_column(
    spark: Any, local_cat: lamina.Catalog
) -> None:
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    t = local_cat.create_table("dim", schema=df.schema)
    t.append(df)
    t.append(df)
    assert t.count() == 4
    t.overwrite(df.limit(1))
    assert t.to_spark(spark).count() == 1


@pytest.mark.parametrize("granularity", ["HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"])
def test_spark_chunks_match_local_whatever_the_session_zone(
    spark: Any, local_cat: lamina.Catalog, granularity: str
) -> None:
    """Spark and the local writer put every row in the same UTC chunk."""
    import datetime as dt

    import pyarrow as pa

    times = [
        dt.datetime(2024, 3, 31, 23, 30),
        dt.datetime(2024, 4, 1, 0, 30),
        dt.datetime(2023, 12, 31, 23, 59),
        dt.datetime(2024, 1, 1, 4, 0),
    ]
    for tz in (None, "UTC"):
        arrow = pa.table({"ts": pa.array(times, pa.timestamp("us", tz=tz)), "x": [1, 2, 3, 4]})
        name = f"t_{granularity.lower()}_{'ltz' if tz else 'ntz'}"
        local = local_cat.create_table(
            name + "_l", schema=arrow.schema, time_column="ts", segment_granularity=granularity
        )
        local.append(arrow)
        remote = local_cat.create_table(
            name + "_s", schema=arrow.schema, time_column="ts", segment_granularity=granularity
        )
        old = spark.conf.get("spark.sql.session.timeZone")
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        try:
            remote.append(local.to_spark(spark))
        finally:
            spark.conf.set("spark.sql.session.timeZone", old)

        def chunks(t: lamina.Table) -> list[tuple[str, int]]:
            return sorted((str(s.interval), s.row_count) for s in t.segments())

        assert chunks(remote) == chunks(local)
        assert sorted(remote.to_arrow()["x"].to_pylist()) == [1, 2, 3, 4]


def test_read_changes_in_spark_equals_the_local_feed(spark: Any, cat: lamina.Catalog) -> None:
    t = cat.create_table("feed", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=3, per_day=4))
    c = t.overwrite(events(days=1, per_day=2, seed=3, start="2024-01-02"))
    t.append(events(days=1, per_day=1, seed=4))
    local = t.read_changes(c.seq - 1)
    df = t.read_changes_spark(spark, c.seq - 1)
    assert df.columns == [*SCHEMA.names, "_change", "_commit_id", "_commit_seq"]
    got = sorted((r["_change"], r["_commit_seq"], r["k"], r["v"]) for r in df.collect())
    want = sorted(
        zip(
            local["_change"].to_pylist(),
            local["_commit_seq"].to_pylist(),
            local["k"].to_pylist(),
            local["v"].to_pylist(),
            strict=True,
        )
    )
    assert got == want and len(got) == 4 + 2 + 1
    assert t.read_changes_spark(spark, t.history()[-1].seq).count() == 0


def test_structured_streaming_restart_applies_no_batch_twice(
    spark: Any, cat: lamina.Catalog, tmp_path: Path
) -> None:
    """A query killed after writing a batch but before its checkpoint recorded it
    replays the batch on restart: foreach_batch's txn skips it."""
    import pyarrow.parquet as pq

    t = cat.create_table("stream", SCHEMA, time_column="ts")
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    pq.write_table(events(days=1, per_day=4), src / "a.parquet")
    from lamina.engines.spark_schema import arrow_to_spark_schema

    write, delivered = t.foreach_batch("it"), []

    def batch(df: Any, batch_id: int) -> None:
        delivered.append(batch_id)
        write(df, batch_id)

    def run() -> None:
        stream = spark.readStream.schema(arrow_to_spark_schema(SCHEMA)).parquet(str(src))
        query = (
            stream.writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    run()
    assert t.count() == 4
    for f in ("0", ".0.crc"):  # as if the driver died before the checkpoint
        (ckpt / "commits" / f).unlink(missing_ok=True)
    run()
    assert delivered == [0, 0], "Spark replayed the batch"
    assert t.count() == 4 and len(t.history()) == 1
    pq.write_table(events(days=1, per_day=3, seed=1), src / "b.parquet")
    run()
    assert t.count() == 7


_SPARK_APPENDER = """
import sys
import lamina
from lamina.engines.spark import get_spark
from lamina.engines.spark_schema import arrow_to_spark_schema
from tests.helpers import SCHEMA, events

catalog, wh, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = get_spark(master="local[1]", app_name=f"appender-{seed}")
spark.sparkContext.setLogLevel("ERROR")
cat = lamina.connect(catalog=catalog, warehouse=wh)
rows = events(days=2, per_day=50, seed=seed).to_pandas()
df = spark.createDataFrame(rows, schema=arrow_to_spark_schema(SCHEMA))
print("ok", cat.load_table("apps").append(df).id)
"""


def test_two_spark_applications_append_at_once(catalog_url: str, tmp_path: Path) -> None:
    """Two Spark applications (separate processes and JVMs) append to one table at
    the same time: both publish."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("apps", SCHEMA, time_column="ts")
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPARK_APPENDER, catalog_url, wh, str(seed)],
            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for seed in (1, 2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "ok" in out, err[-2000:]
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("apps")
        assert t.count() == 200
        assert [c.state for c in t.history()] == ["COMPLETED", "COMPLETED"]


def test_a_spark_overwrite_keeps_a_local_append_made_meanwhile(
    spark: Any, cat: lamina.Catalog
) -> None:
    t = cat.create_table("mix", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=2, per_day=10, value=1.0))
    tx = t.transaction()
    from lamina.engines.spark_schema import arrow_to_spark_schema

    rows = events(days=1, per_day=3, value=2.0).to_pandas()
    tx.overwrite(spark.createDataFrame(rows, schema=arrow_to_spark_schema(SCHEMA)))
    t.append(events(days=1, per_day=4, value=4.0, seed=4))  # local, while Spark's runs
    tx.commit()
    got = t.to_arrow(columns=["v"]).column("v").to_pylist()
    assert sorted(set(got)) == [1.0, 2.0, 4.0]
    assert (got.count(1.0), got.count(2.0), got.count(4.0)) == (10, 3, 4)


def test_spark_runs_on_the_configured_cluster(spark: Any) -> None:
    """Under ``make test`` the Spark tests run on a standalone cluster: executors
    live in other JVMs than the driver."""
    import os

    master = os.environ.get("SPARK_MASTER", "")
    if not master.startswith("spark://"):
        pytest.skip("SPARK_MASTER is not a standalone cluster (make test starts one)")
    assert spark.sparkContext.master == master
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    assert status.size() >= 2, "no executor besides the driver"
    pids = spark.sparkContext.parallelize(range(4), 2).map(lambda _: os.getpid()).distinct()
    assert os.getpid() not in pids.collect()


def test_minor_compaction_with_spark(
    spark: Any, cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose input exceeds $LAMINA_LOCAL_MAX_BYTES is rewritten by Spark (here:
    every run, the limit being 1 byte): the same rows, one atomic update group at a
    higher minor version, and appends into the chunk keep their ids."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for seed in range(4):
        t.append(events(days=2, per_day=30, seed=seed))
    key = ["ts", "k", "v", "s"]
    before = t.to_arrow().sort_by([(c, "ascending") for c in key])
    monkeypatch.setenv("LAMINA_LOCAL_MAX_BYTES", "1")
    c = t.compact(target_rows_per_segment=200)  # 4 x 30 rows a day: one run a day
    assert c is not None and len(c.removed) == 8
    after = t.to_arrow().sort_by([(c, "ascending") for c in key])
    assert after.equals(before)
    segs = t.segments()
    assert {s.minor_version for s in segs} == {1} and {s.root_range for s in segs} == {(0, 4)}
    assert len(segs) == 2 and {s.atomic_update_group_size for s in segs} == {1}
    assert all(s.location and "/run-" in s.location for s in segs)  # written by Spark
    with pytest.raises(errors.CompactionError, match="engine"):
        t.compact(engine="gpu")
    t.append(events(days=1, per_day=3, seed=9))
    assert t.count() == 243


def test_spark_reads_an_upsert_tables_latest_records(spark: Any, cat: lamina.Catalog) -> None:
    """Deletion vectors apply through ``_metadata.row_index`` (issue 9 §3)."""
    from tests.test_upsert import SCHEMA as USCHEMA
    from tests.test_upsert import rows

    t = cat.create_table("u", USCHEMA, time_column="ts", primary_key="key", delete_column="deleted")
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1), ("c", 1, 1)))
    t.upsert(rows(("a", 2, 2), ("c", 3, 0, True), ("b", 0, 7)))  # b's is out of order

    def pairs(rows_: list[Any]) -> list[tuple[str, int]]:
        return sorted((r["key"], r["value"]) for r in rows_)

    assert pairs(t.to_spark(spark).collect()) == [("a", 2), ("b", 1)]
    assert pairs(t.to_spark(spark, as_of=c1.version).collect()) == [("a", 1), ("b", 1), ("c", 1)]
    assert pairs(t.to_spark(spark).collect()) == pairs(t.to_arrow().to_pylist())


def test_an_upsert_tables_change_feed_in_spark_equals_the_local_feed(
    spark: Any, cat: lamina.Catalog
) -> None:
    """Updates are delete + insert pairs, records superseded in their own input or
    out of order never show, deletes and removed segments show as 'delete'; a column
    subset and an empty range too."""
    from tests.test_upsert import SCHEMA as USCHEMA
    from tests.test_upsert import rows

    t = cat.create_table("u", USCHEMA, time_column="ts", primary_key="key", delete_column="deleted")
    c1 = t.upsert(rows(("a", 1, 1), ("b", 1, 1), ("c", 24 * 60, 1)))
    t.upsert(rows(("a", 2, 2), ("a", 3, 3), ("b", 0, 7)))  # a twice; b's is out of order
    t.upsert(rows(("c", 24 * 60 + 1, 0, True), ("d", 5, 4)))  # c deleted
    t.overwrite(rows(("b", 9, 9)), interval=("2024-01-01", "2024-01-02"))  # a and d go

    def feed(tbl: Any) -> list[tuple[Any, ...]]:
        cols = ["_change", "_commit_seq", "key", "value"]
        return sorted(tuple(r[c] for c in cols) for r in tbl)

    local = t.read_changes(c1.seq - 1)
    df = t.read_changes_spark(spark, c1.seq - 1)
    assert df.columns == [*USCHEMA.names, "_change", "_commit_id", "_commit_seq"]
    assert feed(df.collect()) == feed(local.to_pylist())
    assert ("insert", c1.seq + 1, "a", 3) in feed(local.to_pylist())
    assert not any(k == "a" and v == 2 for _, _, k, v in feed(local.to_pylist()))
    sub = t.read_changes_spark(spark, c1.seq, columns=["key", "value"])
    assert sub.columns == ["key", "value", "_change", "_commit_id", "_commit_seq"]
    assert feed(sub.collect()) == feed(t.read_changes(c1.seq, columns=["key", "value"]).to_pylist())
    assert t.read_changes_spark(spark, t.history()[-1].seq).count() == 0


def test_spark_upserts_and_a_restarted_stream_applies_no_batch_twice(
    spark: Any, cat: lamina.Catalog, tmp_path: Path
) -> None:
    """A Spark DataFrame upserts (its records read back, resolved at publish); a
    streaming query into an upsert table replays a batch after a crash: skipped."""
    import pyarrow.parquet as pq

    from lamina.engines.spark_schema import arrow_to_spark_schema
    from tests.test_upsert import SCHEMA as USCHEMA
    from tests.test_upsert import latest, rows

    t = cat.create_table("u", USCHEMA, time_column="ts", primary_key="key", delete_column="deleted")
    df = spark.createDataFrame(rows(("a", 1, 1), ("b", 1, 1), ("a", 0, 5)).to_pandas(),
                               schema=arrow_to_spark_schema(USCHEMA))  # fmt: skip
    t.upsert(df)
    assert latest(t) == {"a": 1, "b": 1}
    v = cat.create_table("v", USCHEMA, time_column="ts", primary_key="key")
    v.upsert(rows(("a", 1, 1), ("b", 1, 1)))
    with v.transaction() as tx:  # a Spark DataFrame and Arrow records: one upsert
        tx.upsert(spark.createDataFrame(rows(("a", 1, 7), ("d", 1, 1)).to_pandas(),
                                        schema=arrow_to_spark_schema(USCHEMA)))  # fmt: skip
        tx.upsert(rows(("d", 1, 8), ("b", 0, 9)))  # d: a tie, the later operation wins
    assert latest(v) == {"a": 7, "b": 1, "d": 8}
    v.upsert(rows(("d", 0, 0), ("e", 0, 0)))  # the index holds the transaction's d
    assert latest(v) == {"a": 7, "b": 1, "d": 8, "e": 0}
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    pq.write_table(rows(("a", 2, 2), ("c", 2, 3), ("b", 3, 0, True)), src / "1.parquet")
    write, delivered = t.foreach_batch("updates"), []

    def batch(frame: Any, batch_id: int) -> None:
        delivered.append(batch_id)
        write(frame, batch_id)

    def run() -> None:
        stream = spark.readStream.schema(arrow_to_spark_schema(USCHEMA)).parquet(str(src))
        query = (
            stream.writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    run()
    assert latest(t) == {"a": 2, "c": 3}
    for f in ("0", ".0.crc"):  # as if the driver died before the checkpoint
        (ckpt / "commits" / f).unlink(missing_ok=True)
    run()
    assert delivered == [0, 0] and len(t.history()) == 2  # the replay wrote nothing
    pq.write_table(rows(("c", 1, 9), ("d", 4, 4)), src / "2.parquet")  # c's is older
    run()
    assert latest(t) == {"a": 2, "c": 3, "d": 4}


def test_spark_upserts_as_the_local_path_does(spark: Any, cat: lamina.Catalog) -> None:
    """What a Spark-path hunt found: ties inside one DataFrame went to whichever file
    the directory listing gave first (now: by Spark partition, as the DataFrame's order
    is); a null in a NOT NULL column was published; an empty micro-batch failed (and
    with it every restart of a stream); an overwrite from Spark failed on pyspark's
    Arrow stream; a zoned time in the last µs of a day far from 1970 went to the next day."""
    import datetime as dt

    import pyarrow as pa

    schema = pa.schema(
        [pa.field("k", pa.int64(), False), pa.field("ts", pa.timestamp("us", "UTC")),
         pa.field("c", pa.int64()), pa.field("p", pa.int64()), pa.field("req", pa.int64(), False)]
    )  # fmt: skip
    t = cat.create_table("u", schema, time_column="ts", primary_key="k", comparison_column="c")
    day = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = [(1, day, 5, p, 0) for p in range(8)]  # one key, one comparison value
    df = spark.createDataFrame(rows, "k long, ts timestamp, c long, p long, req long")
    df = df.repartitionByRange(8, "p")  # partition i holds p = i: the DataFrame's order
    assert [r.p for r in df.collect()] == list(range(8))
    t.upsert(df)
    assert t.to_arrow()["p"].to_pylist() == [7]  # a tie: the last row wins
    history = t.history()
    bad = spark.createDataFrame(
        [(2, day, 1, 0, None)], "k long, ts timestamp, c long, p long, req long"
    )
    with pytest.raises(errors.SchemaError, match="'req' is NOT NULL"):
        t.upsert(bad)
    assert [c.id for c in t.history() if c.state == "COMPLETED"] == [history[-1].id]
    t.upsert(df.limit(0))  # an empty micro-batch: a commit with no records
    assert t.count() == 1
    t.overwrite(spark.createDataFrame([(3, day, 1, 9, 0)], df.schema))  # the day goes
    assert t.to_arrow()["k"].to_pylist() == [3]
    far = dt.datetime(2300, 1, 1, 23, 59, 59, 999999, tzinfo=dt.UTC)
    t.upsert(spark.createDataFrame([(4, far, 1, 0, 0)], df.schema))
    (seg,) = [s for s in t.segments() if str(s.interval).startswith("2300")]
    assert str(seg.interval) == "2300-01-01T00:00:00Z/2300-01-02T00:00:00Z"


def test_spark_values_a_cast_would_change_are_refused_as_pyarrow_refuses_them(
    spark: Any, cat: lamina.Catalog
) -> None:
    """Spark rounds a decimal and drops int64 digits in a float silently; the write job
    checks each value, so a Spark write refuses what a pyarrow write refuses."""
    import decimal

    import pyarrow as pa
    from pyspark.sql import types as T

    schema = pa.schema(
        [("d", pa.decimal128(5, 1)), ("f", pa.float64()), ("i", pa.int32()), ("g", pa.float32())]
    )
    t = cat.create_table("t", schema)
    spark_schema = T.StructType(
        [
            T.StructField("d", T.DecimalType(10, 3)),
            T.StructField("f", T.LongType()),
            T.StructField("i", T.LongType()),
            T.StructField("g", T.IntegerType()),
        ]
    )
    fits = [(decimal.Decimal("12.300"), 2**53, 2**31 - 1, -(2**24)), (None, None, None, None)]
    t.append(spark.createDataFrame(fits, spark_schema))
    stored = t.to_arrow()
    ok = (decimal.Decimal("1.2"), 1, 1, 1)
    bad = {
        "d": decimal.Decimal("1.25"),  # rounds
        "d ": decimal.Decimal("123456.5"),  # too many digits
        "f": 2**53 + 1,
        "i": 2**31,
        "g": 2**24 + 1,
    }
    for col, value in bad.items():
        row = tuple(value if n == col.strip() else v for n, v in zip(schema.names, ok, strict=True))
        with pytest.raises(errors.SchemaError, match=f"column '{col.strip()}': .* without loss"):
            t.append(spark.createDataFrame([row], spark_schema))
        # and the pyarrow path refuses the same value
        with pytest.raises(errors.SchemaError):
            t.append(pa.table({n: [v] for n, v in zip(schema.names, row, strict=True)}))
    assert t.to_arrow().equals(stored)
    assert [c.state for c in t.history()].count("COMPLETED") == 1


def test_spark_refuses_floats_out_of_range_and_sub_unit_times(
    spark: Any, cat: lamina.Catalog
) -> None:
    """A double beyond float32's range became inf, and a sub-millisecond time went into
    a timestamp[ms] column, published, after which no pyarrow read of the table worked
    (a Spark hunt); the pyarrow path refuses both."""
    import datetime as dt

    import pyarrow as pa

    schema = pa.schema(
        [("ts", pa.timestamp("us")), ("g", pa.float32()), ("ms", pa.timestamp("ms"))]
    )
    t = cat.create_table("t", schema, time_column="ts")
    at = dt.datetime(2024, 1, 1, 12)
    ddl = "ts timestamp_ntz, g double, ms timestamp_ntz"
    t.append(spark.createDataFrame([(at, 1.5, at + dt.timedelta(milliseconds=7))], ddl))
    stored = t.to_arrow()
    bad = [
        ("g", (at, 3.4e39, at)),
        ("g", (at, 1e-50, at)),
        ("ms", (at, 1.0, at + dt.timedelta(microseconds=123))),
    ]
    for col, row in bad:
        with pytest.raises(errors.SchemaError, match=f"column '{col}': .* without loss"):
            t.append(spark.createDataFrame([row], ddl))
    assert t.to_arrow().equals(stored)
    assert [c.state for c in t.history()].count("COMPLETED") == 1


def test_spark_checks_members_of_lists_maps_and_structs_as_pyarrow_does(
    spark: Any, cat: lamina.Catalog
) -> None:
    """Spark rounded a decimal inside a list or struct, and a sub-millisecond time in a
    list<timestamp[ms]> published a table no pyarrow read could open (a Spark hunt):
    members are checked as top-level values are; values that fit still go in."""
    import datetime as dt
    import decimal

    import pyarrow as pa

    schema = pa.schema(
        [
            ("l", pa.list_(pa.decimal128(10, 2))),
            ("s", pa.struct([("a", pa.decimal128(10, 2))])),
            ("m", pa.map_(pa.string(), pa.int32())),
            ("t", pa.list_(pa.timestamp("ms"))),
        ]
    )
    t = cat.create_table("t", schema)
    ddl = (
        "l array<decimal(10,4)>, s struct<a: decimal(10,4)>, m map<string,bigint>, "
        "t array<timestamp_ntz>"
    )
    at = dt.datetime(2024, 1, 1, 12)
    d = decimal.Decimal
    ok = ([d("1.2300"), None], {"a": d("2.5000")}, {"x": 7}, [at, None])
    t.append(spark.createDataFrame([ok, (None, None, None, None)], ddl))
    stored = t.to_arrow()
    assert stored.column("l").to_pylist()[0] == [d("1.23"), None]
    assert stored.column("t").to_pylist()[0] == [at, None]
    bad = {
        "l": [d("1.2350")],
        "s": {"a": d("1.2350")},
        "m": {"x": 2**40},
        "t": [at + dt.timedelta(microseconds=1)],
    }
    for col, value in bad.items():
        row = tuple(value if n == col else v for n, v in zip(schema.names, ok, strict=True))
        with pytest.raises(errors.SchemaError, match=f"column '{col}': .* without loss"):
            t.append(spark.createDataFrame([row], ddl))
    assert t.to_arrow().equals(stored)
    assert [c.state for c in t.history()].count("COMPLETED") == 1


def test_spark_reads_apply_deletion_vectors_under_any_warehouse_path(
    spark: Any, tmp_path: Path
) -> None:
    """Spark percent-encodes _metadata.file_path: under a warehouse with a space or a
    '#' in its path the deletion vectors matched no file, so to_spark showed superseded
    records and all_versions nothing (a Spark hunt)."""
    import datetime as dt

    import pyarrow as pa

    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("ts", pa.timestamp("us")), ("v", pa.int64())]
    )
    at = dt.datetime(2024, 1, 1)
    for name in ("my wh", "a#b+c%d"):
        with lamina.connect(warehouse=str(tmp_path / name)) as cat:
            u = cat.create_table("u", schema, time_column="ts", primary_key=["k"])
            u.upsert(pa.Table.from_pylist([{"k": k, "ts": at, "v": 1} for k in range(5)], schema))
            later = at + dt.timedelta(hours=1)
            u.upsert(
                pa.Table.from_pylist([{"k": k, "ts": later, "v": 2} for k in range(3)], schema)
            )
            got = sorted((r.k, r.v) for r in u.to_spark(spark).collect())
            assert got == sorted((r["k"], r["v"]) for r in u.to_arrow().to_pylist())
            assert u.to_spark(spark, all_versions=True).count() == 8
            assert u.read_changes_spark(spark, 0).count() == u.read_changes(0).num_rows == 11


def test_spark_writes_and_reads_columns_named_with_backticks(
    spark: Any, cat: lamina.Catalog
) -> None:
    """A backtick in a column name failed every Spark write and an upsert table's
    to_spark with AnalysisException (a Spark hunt): Spark names are quoted with the
    backtick doubled."""
    import datetime as dt

    import pyarrow as pa

    schema = pa.schema(
        [
            pa.field("k`ey", pa.int64(), nullable=False),
            ("t`s", pa.timestamp("us")),
            ("v", pa.int64()),
        ]
    )
    u = cat.create_table("u", schema, time_column="t`s", primary_key=["k`ey"])
    at = dt.datetime(2024, 1, 1)
    ddl = "`k``ey` long, `t``s` timestamp_ntz, v long"
    u.upsert(spark.createDataFrame([(1, at, 1), (2, at, 1)], ddl))
    u.upsert(spark.createDataFrame([(1, at + dt.timedelta(hours=1), 2)], ddl))
    got = sorted((r[0], r[2]) for r in u.to_spark(spark).collect())
    assert got == [(1, 2), (2, 1)] == sorted((r["k`ey"], r["v"]) for r in u.to_arrow().to_pylist())


def test_rows_spark_wrote_keep_their_order_past_a_thousand_files() -> None:
    """A task's files in one chunk are numbered c000, c001, ... c999, c1000: sorted as
    text, c1000 came before c999 and a tie went to the wrong record (a Spark hunt)."""
    from lamina.core.interval import Interval
    from lamina.core.model import NewSegment
    from lamina.engines.spark import _task_order

    day = Interval.parse("2024-01-01/2024-01-02")

    def seg(task: int, n: int) -> NewSegment:
        name = f"part-{task:05d}-3f2a.c{n:03d}.zstd.parquet"
        return NewSegment(day, f"t/data/c1/{name}", 1, 1, None, None)

    files = {seg(1, 1000): (1, 1000), seg(0, 5): (0, 5), seg(1, 999): (1, 999), seg(1, 2): (1, 2)}
    in_order = [files[s] for s in sorted(files, key=_task_order)]
    assert in_order == [(0, 5), (1, 2), (1, 999), (1, 1000)]


def test_spark_appends_and_upserts_into_a_day_a_compaction_split(
    spark: Any, cat: lamina.Catalog
) -> None:
    """Druid's allocation from Spark: rows of an hour a compaction made an HOUR chunk
    join it, rows of a free hour get their own HOUR chunk (written again by Spark,
    chunk by hour, after the first publish found the day split)."""
    import datetime as dt

    import pyarrow as pa

    from lamina.core.interval import Interval

    def hour(h: int) -> dt.datetime:
        return dt.datetime(2024, 1, 1) + dt.timedelta(hours=h)

    def chunk(a: int, b: int) -> Interval:
        return Interval.coerce((hour(a), hour(b)))

    schema = pa.schema(
        [pa.field("k", pa.int64(), False), ("ts", pa.timestamp("us")), ("v", pa.float64())]
    )
    for name, keyed in (("plain", None), ("keyed", "k")):
        t = cat.create_table(name, schema, time_column="ts", primary_key=keyed)
        t.append(pa.table({"k": [0, 1], "ts": [hour(1), hour(5)], "v": [1.0, 2.0]}, schema=schema))
        t.compact(mode="major", segment_granularity="HOUR")
        df = spark.createDataFrame(
            [(2, hour(1), 3.0), (3, hour(3), 4.0), (0, hour(30), 5.0)],
            "k long, ts timestamp_ntz, v double",
        )
        t.append(df)
        got = sorted({s.interval for s in t.segments()})
        assert got == [chunk(1, 2), chunk(3, 4), chunk(5, 6), chunk(24, 48)], name
        values = sorted(t.to_arrow().column("v").to_pylist())
        assert values == ([2.0, 3.0, 4.0, 5.0] if keyed else [1.0, 2.0, 3.0, 4.0, 5.0]), name


def test_spark_upserts_into_millisecond_columns_compare_and_hash_as_local_ones(
    spark: Any, cat: lamina.Catalog
) -> None:
    """What a type hunt found: Spark writes microseconds into a ``timestamp[ms]``
    column; its records, read back to resolve the upsert, compared 1000x newer than a
    local record (a later local one never showed) and hashed a key as another."""
    import datetime as dt

    import pyarrow as pa

    schema = pa.schema(
        [pa.field("k", pa.timestamp("ms"), False), ("ts", pa.timestamp("ms")), ("v", pa.int64())]
    )
    t = cat.create_table("ms", schema, time_column="ts", primary_key="k")
    key = dt.datetime(2024, 5, 5)

    def at(second: int) -> dt.datetime:
        return dt.datetime(2024, 1, 1, 0, 0, second)

    t.upsert(pa.table({"k": [key], "ts": [at(10)], "v": [1]}, schema=schema))
    df = spark.createDataFrame([(key, at(20), 2)], "k timestamp_ntz, ts timestamp_ntz, v long")
    t.upsert(df)
    assert t.to_arrow().to_pylist() == [{"k": key, "ts": at(20), "v": 2}]
    t.upsert(pa.table({"k": [key], "ts": [at(30)], "v": [3]}, schema=schema))
    assert t.to_arrow().to_pylist() == [{"k": key, "ts": at(30), "v": 3}]
