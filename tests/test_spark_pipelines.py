"""What a Spark pipeline meets: its own session left as it was, stream identity tied
to the checkpoint, skipped exactly-once writes made visible, Spark types and inputs
lamina cannot take refused with typed errors, and quiet logs on expected failures."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina import errors
from tests.helpers import SCHEMA, events

TZ, SHUFFLE, TS_TYPE = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.parquet.outputTimestampType",
)


@pytest.fixture
def user_session(spark: Any) -> Iterator[Any]:
    """The shared session set up as a user's own: Los Angeles time, 3 shuffle
    partitions, Spark's default INT96 Parquet timestamps (restored afterwards)."""
    saved = {k: spark.conf.get(k) for k in (TZ, SHUFFLE, TS_TYPE)}
    spark.conf.set(TZ, "America/Los_Angeles")
    spark.conf.set(SHUFFLE, "3")
    spark.conf.set(TS_TYPE, "INT96")
    try:
        yield spark
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)


def _frame(spark: Any, rows: int) -> Any:
    return spark.sql(
        f"select timestamp_seconds(1704067200 + id * 60) as ts, id % 7 as k, "
        f"cast(id as double) as v from range({rows})"
    )


def test_spark_user_session_settings_survive_append_compact_and_read(
    user_session: Any, cat: lamina.Catalog
) -> None:
    from lamina.engines.spark import get_spark

    spark = user_session
    epoch = "select cast(timestamp'2024-01-01 00:00:00' as long) as s"
    before = spark.sql(epoch).first().s
    assert before == 1704096000  # midnight in Los Angeles
    df = _frame(spark, 600)
    t = cat.create_table("ev", schema=df.schema, time_column="ts")
    t.append(df)
    t.append(df)
    c = t.compact(engine="spark")
    assert c is not None and c.action == "COMPACT"
    assert t.to_spark(spark).count() == 1200 == t.count()
    assert get_spark() is spark  # the running session, not a new one set up for lamina
    assert spark.conf.get(TZ) == "America/Los_Angeles"
    assert spark.conf.get(SHUFFLE) == "3"
    assert spark.conf.get(TS_TYPE) == "INT96"
    assert spark.sql(epoch).first().s == before
    # the files are INT64 microseconds anyway (asked for per write): their footers
    # give every segment its time range
    segs = t.segments()
    assert segs and all(s.min_time is not None and s.max_time is not None for s in segs)
    assert t.to_arrow().schema.field("ts").type == pa.timestamp("us", tz="UTC")


def _stream(spark: Any, src: Path, ckpt: Path, fn: Any) -> Any:
    from lamina.engines.spark_schema import arrow_to_spark_schema

    stream = spark.readStream.schema(arrow_to_spark_schema(SCHEMA)).parquet(str(src))
    query = (
        stream.writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return query


def test_spark_stream_restarted_from_its_checkpoint_replays_nothing_twice(
    spark: Any, cat: lamina.Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = cat.create_table("s", SCHEMA, time_column="ts")
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    pq.write_table(events(days=1, per_day=5), src / "a.parquet")
    write = t.foreach_batch("app1")
    first = _stream(spark, src, ckpt, write)
    assert t.count() == 5
    for f in ("0", ".0.crc"):  # the driver died before the checkpoint recorded batch 0
        (ckpt / "commits" / f).unlink(missing_ok=True)
    with caplog.at_level(logging.WARNING, logger="lamina"):
        again = _stream(spark, src, ckpt, write)
    assert again.id == first.id and again.runId != first.runId  # the same query, restarted
    assert t.count() == 5 and len(t.history()) == 1  # batch 0 replayed, skipped
    assert any("skipped" in r.getMessage() for r in caplog.records)
    pq.write_table(events(days=1, per_day=3, seed=1), src / "b.parquet")
    _stream(spark, src, ckpt, write)
    assert t.count() == 8


def test_spark_stream_new_checkpoint_under_old_app_id_refused_not_dropped(
    spark: Any, cat: lamina.Catalog, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    t = cat.create_table("s", SCHEMA, time_column="ts")
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(events(days=1, per_day=5), src / "a.parquet")
    _stream(spark, src, tmp_path / "ckpt1", t.foreach_batch("app1"))
    assert t.count() == 5
    pq.write_table(events(days=1, per_day=3, seed=1), src / "b.parquet")
    # a new checkpoint, the same app id: its batch 0 would be "applied already"
    with pytest.raises(StreamingQueryException, match="StreamCheckpointError"):
        _stream(spark, src, tmp_path / "ckpt2", t.foreach_batch("app1"))
    assert t.count() == 5
    # the fix the error names: an app id of its own (this new query reads every file)
    _stream(spark, src, tmp_path / "ckpt3", t.foreach_batch("app2"))
    assert t.count() == 13


def test_already_applied_write_is_flagged_and_logged(
    cat: lamina.Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    first = t.append(events(days=1, per_day=4), txn=("loader", 1))
    assert not first.already_applied
    with caplog.at_level(logging.WARNING, logger="lamina"):
        again = t.append(events(days=1, per_day=9, seed=2), txn=("loader", 1))
        over = t.overwrite(events(days=1, per_day=9, seed=2), txn=("loader", 0))
        with t.transaction(txn=("loader", 1)) as tx:
            tx.append(events(days=1, per_day=9, seed=2))
    assert again.already_applied and again.id == first.id and again == first
    assert over.already_applied and tx.commit_result is not None
    assert tx.commit_result.already_applied
    assert t.count() == 4
    warnings = [r for r in caplog.records if r.name == "lamina" and r.levelno == logging.WARNING]
    assert len(warnings) == 3 and "'loader'" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("sql", "column", "what"),
    [
        ("parse_json('{\"a\": 1}')", "x", "variant"),
        ("named_struct('a', parse_json('1'))", "x.a", "variant"),
        ("interval '1-2' year to month", "x", "year-month interval"),
        ("array(interval '3' month)", "x[]", "year-month interval"),
        ("make_interval(1, 2, 0, 3)", "x", "calendar interval"),
    ],
)
def test_spark_types_lamina_cannot_store_refused(
    spark: Any, cat: lamina.Catalog, sql: str, column: str, what: str
) -> None:
    df = spark.sql(f"select timestamp'2024-01-01 00:00:00' as ts, {sql} as x")
    with pytest.raises(
        errors.UnsupportedTypeError, match=re.escape(f"column '{column}' is a {what}")
    ):
        cat.create_table("bad", schema=df.schema, time_column="ts")
    assert "bad" not in cat.list_tables()
    ok = cat.create_table("ok", pa.schema([("ts", pa.timestamp("us")), ("x", pa.string())]))
    with pytest.raises(errors.UnsupportedTypeError, match=what):
        ok.append(df)  # on its way in, too
    assert ok.count() == 0


def test_spark_pandas_on_spark_frame_refused_with_hint(spark: Any, cat: lamina.Catalog) -> None:
    df = _frame(spark, 10)
    t = cat.create_table("ev", schema=df.schema, time_column="ts")
    with pytest.raises(errors.UnsupportedInputError, match=r"to_spark\(\)"):
        t.append(df.pandas_api())
    assert t.count() == 0


def test_spark_streaming_frame_refused_by_batch_writes(spark: Any, cat: lamina.Catalog) -> None:
    from lamina.engines.spark_schema import spark_to_arrow_schema

    stream = spark.readStream.format("rate").load().selectExpr("timestamp as ts", "value as k")
    schema = spark_to_arrow_schema(stream.schema)
    schema = schema.set(1, schema.field("k").with_nullable(False))
    t = cat.create_table("ev", schema, time_column="ts")
    u = cat.create_table("up", schema, time_column="ts", primary_key="k")
    for write in (t.append, t.overwrite, u.upsert):
        with pytest.raises(errors.UnsupportedInputError, match=r"foreach_batch.*format\(\"lamina"):
            write(stream)
    assert t.count() == 0 == u.count()


@pytest.mark.skipif(os.environ.get("LAMINA_SPARK_LOGS") == "full", reason="full logs asked for")
def test_spark_lossy_cast_fails_quietly(
    spark: Any, cat: lamina.Catalog, capfd: pytest.CaptureFixture[str]
) -> None:
    """The session lamina created logs no task failure: the SchemaError says it all."""
    t = cat.create_table("ev", pa.schema([("ts", pa.timestamp("us", "UTC")), ("v", pa.int32())]))
    df = spark.sql(
        "select timestamp_seconds(1704067200 + id) as ts, id * 100000000 as v from range(100)"
    ).repartition(4)
    capfd.readouterr()
    with pytest.raises(errors.SchemaError, match="does not fit int32"):
        t.append(df)
    err = capfd.readouterr().err
    assert "Exception in task" not in err and "Aborting task" not in err, err[:2000]
    assert t.count() == 0
