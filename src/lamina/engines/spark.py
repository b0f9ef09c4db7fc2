"""Spark: the pipeline engine. Writes with Spark's native Parquet writer, reads exactly
a snapshot's visible files with the native Parquet reader.

A write partitions rows by time chunk (``partitionBy`` on a computed chunk column,
``maxRecordsPerFile`` = the table's target rows per segment) into the commit's own
directory, then reads the Parquet footers and publishes every file in one commit. A
failing job aborts the commit and removes its directory: the table is unchanged.
The write's jobs carry a job tag of their own: once a heartbeat finds the commit
aborted or its lock revoked, the heartbeat thread cancels them (tasks interrupted)
and the write raises lamina's error instead of running to the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lamina.core.columns import required_columns
from lamina.core.interval import ETERNITY, US_PER_HOUR, Granularity, Interval, to_us
from lamina.core.model import NewSegment, TableRecord
from lamina.core.properties import SCHEMA_CHANGED_SEQ
from lamina.core.upsert_spec import ties_stay_in_chunk
from lamina.engines.spark_casts import conform, lossy_cast_error
from lamina.engines.spark_schema import arrow_to_spark_schema, ref
from lamina.errors import SchemaError, TimeColumnError, UnsupportedInputError
from lamina.io.arrow import is_spark_connect
from lamina.io.warehouse import Warehouse
from lamina.io.writer import Guard, guard_of, merge_small

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


CHUNK_COLUMN = "__lamina_chunk"


def get_spark(master: str | None = None, app_name: str = "lamina") -> SparkSession:
    """The running Spark session, left as it is, if there is one (lamina passes what its
    writes need with each write, and never changes a session it did not create); else a
    new one set up for lamina: local[*] unless ``master`` or $SPARK_MASTER, UTC, filters
    pushed to Python data sources (``format("lamina")`` prunes time chunks by them),
    logs quiet unless ``$LAMINA_SPARK_LOGS=full`` (see :func:`quiet_logs`)."""
    from pyspark import SparkContext  # loads pyspark
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession()  # this thread's
    if running is None and SparkContext._active_spark_context is not None:
        running = SparkSession.builder.getOrCreate()  # the default one: no options, unchanged
    if running is not None:
        return running
    master = master or os.environ.get("SPARK_MASTER", "local[*]")
    # Python workers must run the driver's interpreter (same packages, same versions)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.shuffle.partitions", os.environ.get("LAMINA_SHUFFLE_PARTITIONS", "8"))
        .config("spark.driver.memory", os.environ.get("LAMINA_DRIVER_MEMORY", "4g"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        # format("lamina") prunes chunks by the filters on the time column Spark pushes
        .config("spark.sql.python.filterPushdown.enabled", "true")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    spark = builder.getOrCreate()
    quiet_logs(spark)
    return spark


def streaming_query_id(df: DataFrame) -> str | None:
    """The id of the streaming query whose micro-batch ``df`` is, inside its
    ``foreachBatch`` function: kept in the query's checkpoint (the same after a
    restart from it; a new checkpoint is a new query). None outside one, or where
    Spark does not say (Spark Connect)."""
    spark = getattr(df, "sparkSession", None)  # None: not a Spark DataFrame
    if spark is None:
        return None
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
    got = sc.getLocalProperty("sql.streaming.queryId")  # set by the query's thread
    return str(got) if got else None


#: ``full``: the Spark sessions lamina creates keep Spark's own logging (WARN, every
#: failed task's stack trace); by default they log errors only, and no task failures
LOGS_ENV = "LAMINA_SPARK_LOGS"

#: the loggers that print a failed task's stack trace on the executors and the driver
#: (a lossy cast lamina reports as a SchemaError comes with ~180 lines of them)
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.scheduler.TaskSchedulerImpl",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.util.Utils",
    "org.apache.spark.storage.ShuffleBlockFetcherIterator",  # the other tasks, cancelled
)


def quiet_logs(spark: SparkSession) -> None:
    """Spark's logs at ERROR, and failed tasks not logged at all (lamina reports the
    cause of a failed write itself), unless ``$LAMINA_SPARK_LOGS`` is ``full``.
    Called for the sessions lamina creates only; for a session of yours, call it
    yourself (it changes the whole application's log levels)."""
    if os.environ.get(LOGS_ENV, "").strip().lower() == "full":
        return
    spark.sparkContext.setLogLevel("ERROR")
    task_failure_logs(spark, "OFF")


def task_failure_logs(spark: SparkSession, level: str) -> None:
    """Set the level (log4j's: OFF, ERROR, WARN...) of the loggers that print failed
    tasks' stack traces in this JVM (the driver, and the executors of local mode)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    to = jvm.org.apache.logging.log4j.Level.toLevel(level.upper())
    for name in _TASK_FAILURE_LOGGERS:
        configurator.setLevel(name, to)


#: Parquet timestamps as INT64 microseconds (with min/max statistics, readable by
#: pyarrow and DuckDB), asked for by each write: Spark takes a SQL conf as a write
#: option, so the session's own conf (INT96 by default) is left alone
MICROS_PARQUET = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


@contextlib.contextmanager
def _cancelled_when_lost(spark: SparkSession, g: Guard | None, name: str) -> Iterator[None]:
    """Run the block's Spark jobs (started from this thread) under a job tag of their
    own, which the heartbeat thread cancels, interrupting the tasks, once the commit is
    lost; the block then raises the commit's error (CommitError, LockRevokedError), not
    Spark's. The thread's tags and interrupt setting are restored afterwards.
    Spark Connect sessions are not cancelled (they fail at the check or publish)."""
    if g is None or is_spark_connect(spark):
        yield
        return
    sc = spark.sparkContext
    tag = f"lamina:{name}:{uuid.uuid4().hex[:8]}"  # no commas
    interrupt = sc.getLocalProperty("spark.job.interruptOnCancel") == "true"
    sc.addJobTag(tag)  # thread-local (pinned threads): only this write's jobs
    sc.setInterruptOnCancel(True)
    g.on_lost(lambda: sc.cancelJobsWithTag(tag))
    try:
        g.check()  # lost already: start nothing
        try:
            yield
        except Exception:
            g.check()  # cancelled: say why
            raise
        g.check()  # lost after the job's end: publishing would fail anyway
    finally:
        g.on_lost(None)
        sc.removeJobTag(tag)
        sc.setInterruptOnCancel(interrupt)


_ORDER_COLUMN = "__lamina_order"


def _refined_expr(
    chunk: Any, hour: Any, refine: Mapping[Interval, Callable[[int], Interval]]
) -> Any:
    """The chunk column (a string) with the rows of the chunks ``refine`` names sent
    to the chunk it gives their hour: ``start_end`` in µs (runs of hours that go to
    the same chunk are one condition each)."""
    from pyspark.sql import functions as F  # loads pyspark

    out = chunk.cast("string")
    for c, chunk_of in sorted(refine.items()):
        hours = range(c.start, c.end, US_PER_HOUR)
        runs: list[tuple[int, int, Interval]] = []
        for h in hours:
            target = chunk_of(h)
            if runs and runs[-1][2] == target and runs[-1][1] == h:
                runs[-1] = (runs[-1][0], h + US_PER_HOUR, target)
            else:
                runs.append((h, h + US_PER_HOUR, target))
        for lo, hi, target in runs:
            hit = (hour >= F.lit(lo)) & (hour < F.lit(hi))
            out = F.when(hit, F.lit(f"{target.start}_{target.end}")).otherwise(out)
    return out


def _chunk_expr(column: str, field_type: pa.DataType, granularity: Granularity) -> Any:
    """Spark expression: start (µs, UTC) of each row's chunk.

    Built only from time-zone-independent functions, so the session time zone (and
    how the user's own expressions use it) is left alone: zoned timestamps go through
    ``unix_micros``, naive ones and dates through their own calendar fields.
    """
    from pyspark.sql import functions as F  # loads pyspark

    day_us, hour_us = 86_400_000_000, 3_600_000_000
    c = F.col(ref(column))
    if pa.types.is_date(field_type):
        date, hour = c, F.lit(0)
    elif field_type.tz is None:
        date, hour = F.to_date(c), F.hour(c)  # wall-clock fields of a TIMESTAMP_NTZ
    else:
        # in whole numbers: a double loses the last µs of a day far from 1970
        us = f"unix_micros({ref(column)})"
        days = F.expr(f"div({us} - pmod({us}, {day_us}L), {day_us}L)")
        date = F.date_from_unix_date(days.cast("int"))
        hour = F.expr(f"div(pmod({us}, {day_us}L), {hour_us}L)")
    if granularity is Granularity.HOUR:
        return F.unix_date(date).cast("long") * day_us + hour.cast("long") * hour_us
    unit = {
        Granularity.DAY: None,
        Granularity.WEEK: "week",
        Granularity.MONTH: "month",
        Granularity.QUARTER: "quarter",
        Granularity.YEAR: "year",
    }[granularity]
    start = date if unit is None else F.trunc(date, unit)
    return F.unix_date(start).cast("long") * day_us


def spark_producer(
    rec: TableRecord,
    wh: Warehouse,
    target_rows: int,
    df: DataFrame,
    refine: Mapping[Interval, Callable[[int], Interval]] | None = None,
) -> Callable[[str], list[NewSegment]]:
    """Check ``df`` against the table now; return the step that writes it into a
    commit's directory (relative to the warehouse). ``refine``: for the chunks it
    names, the chunk each hour's rows go to instead (see
    :func:`lamina.operations.steps.refinement`). Raises UnsupportedInputError for a
    Spark Connect DataFrame (its writes go through ``format("lamina")``)."""
    if is_spark_connect(df):
        raise UnsupportedInputError(
            "this write cannot take a Spark Connect DataFrame (lamina's own Spark writes "
            "need the driver's filesystem): t.append, t.upsert and t.overwrite take one "
            '(through format("lamina")), or write it with df.write.format("lamina"); for '
            "a refresh, a transaction or a push, use a classic Spark session or pass "
            "df.toArrow()"
        )
    spark = df.sparkSession
    data = conform(df, rec.schema, required_columns(rec), rec.time_column)
    partitioned = rec.time_column is not None
    if partitioned:
        assert rec.time_column is not None
        t = rec.schema.field(rec.time_column).type
        expr = _chunk_expr(rec.time_column, t, rec.granularity)
        if refine:
            expr = _refined_expr(expr, _chunk_expr(rec.time_column, t, Granularity.HOUR), refine)
        data = data.withColumn(CHUNK_COLUMN, expr)
        if rec.is_upsert:  # a tie goes to the later row: keep
            from pyspark.sql import functions as F  # the partition's order in each chunk

            data = (  # (the sort partitionBy needs is not stable once it spills)
                data.withColumn(_ORDER_COLUMN, F.monotonically_increasing_id())
                .sortWithinPartitions(CHUNK_COLUMN, _ORDER_COLUMN)
                .drop(_ORDER_COLUMN)
            )

    def produce(commit_rel: str) -> list[NewSegment]:
        writer = data.write.mode("errorifexists").option("maxRecordsPerFile", target_rows)
        if partitioned:
            writer = writer.partitionBy(CHUNK_COLUMN)
        path = wh.path(commit_rel)
        with _cancelled_when_lost(spark, guard_of(path), commit_rel):
            try:
                writer.options(**MICROS_PARQUET).parquet(wh.uri(path))
            except Exception as exc:
                lossy = lossy_cast_error(exc)
                if lossy is None:
                    raise
                raise lossy from None
        files = _collect_files(wh, commit_rel, rec.granularity, rec.time_column, rec.schema)
        if ties_stay_in_chunk(rec.properties, rec.schema, rec.time_column):
            files = merge_small(wh, files, target_rows, commit_rel)  # a task's file per chunk
        return files

    return produce


def spark_rewrite(
    spark: SparkSession,
    rec: TableRecord,
    wh: Warehouse,
    paths: Sequence[str],
    outputs: int,
    commit_rel: str,
) -> list[tuple[str, int, int, int | None, int | None]]:
    """Read segment files (full paths) and write their rows again as about
    ``outputs`` files under ``commit_rel``: (location, rows, bytes, min and max time)
    of each file written (a compaction's outputs for one chunk)."""
    read = spark.read
    if SCHEMA_CHANGED_SEQ in rec.properties:  # files may lack columns added since: nulls
        read = read.schema(arrow_to_spark_schema(rec.schema))
    df = read.parquet(*(wh.uri(p) for p in paths))
    data = conform(df, rec.schema).repartition(max(1, outputs))
    path = wh.path(commit_rel)
    with _cancelled_when_lost(spark, guard_of(path), commit_rel):
        data.write.options(**MICROS_PARQUET).mode("errorifexists").parquet(wh.uri(path))
    out = []
    for info in wh.list_files(path):
        name = info.base_name
        if not name.endswith(".parquet") or name.startswith((".", "_")):
            wh.fs.delete_file(info.path)
            continue
        meta = pq.read_metadata(info.path, filesystem=wh.fs)
        if meta.num_rows == 0:
            wh.fs.delete_file(info.path)
            continue
        lo, hi = _time_stats(meta, rec.time_column)
        rel = info.path[len(wh.root) + 1 :]
        out.append((rel, meta.num_rows, int(info.size or 0), lo, hi))
    return sorted(out)


def _collect_files(
    wh: Warehouse,
    commit_rel: str,
    granularity: Granularity,
    time_column: str | None,
    schema: pa.Schema | None = None,
) -> list[NewSegment]:
    """Describe what Spark wrote (chunk from the directory, stats from the footers), in
    the order of its rows (:func:`_task_order`). Raises SchemaError for a null in a NOT
    NULL column of ``schema``, TimeColumnError for a null time."""
    base = wh.path(commit_rel)
    out = []
    for info in wh.list_files(base):
        name = info.base_name
        if not name.endswith(".parquet") or name.startswith((".", "_")):
            wh.fs.delete_file(info.path)  # _SUCCESS, .crc: the commit dir holds segments only
            continue
        rel = info.path[len(wh.root) + 1 :]
        if granularity is Granularity.ALL:
            chunk = ETERNITY
        else:
            key = next((p for p in rel.split("/") if p.startswith(CHUNK_COLUMN + "=")), None)
            value = key.split("=", 1)[1] if key else ""
            bounds = value.split("_")  # start, or start_end (a refined chunk)
            if not all(b.lstrip("-").isdigit() for b in bounds) or len(bounds) > 2:
                raise TimeColumnError(
                    f"time column {time_column!r} has null values; every row needs a time — "
                    "fill or drop those rows"
                )
            start = int(bounds[0])
            end = int(bounds[1]) if len(bounds) == 2 else granularity.next_start(start)
            chunk = Interval.of(start, end)
        meta = pq.read_metadata(info.path, filesystem=wh.fs)
        lo, hi = _time_stats(meta, time_column)
        out.append(NewSegment(chunk, rel, meta.num_rows, int(info.size or 0), lo, hi))
        _check_not_null(meta, schema)
    return sorted(out, key=_task_order)


def _task_order(seg: NewSegment) -> tuple[int, int, int, str]:
    """The order of the rows Spark wrote: by task (its input partition: ``part-N``),
    then time chunk, then file (a task's files in one chunk are numbered in order,
    ``.c999`` before ``.c1000``)."""
    name = seg.location.rsplit("/", 1)[-1]
    task, file = re.search(r"part-(\d+)", name), re.search(r"\.c(\d+)\.", name)
    return (
        int(task.group(1)) if task else -1,
        seg.chunk.start,
        int(file.group(1)) if file else -1,
        seg.location,
    )


def _check_not_null(meta: pq.FileMetaData, schema: pa.Schema | None) -> None:
    """SchemaError when a NOT NULL column of ``schema`` holds nulls in the file Spark
    wrote (its footer counts them; Spark's own schema is nullable throughout)."""
    if schema is None:
        return
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    for f in schema:
        if f.nullable or f.name not in names:
            continue
        i = names.index(f.name)
        nulls = 0
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(i).statistics
            if stats is not None and stats.has_null_count:  # else it cannot tell
                nulls += stats.null_count
        if nulls:
            raise SchemaError(
                f"column {f.name!r} is NOT NULL in the table, but {nulls} row(s) of the data "
                "hold null there: fill or drop them"
            )


def _time_stats(meta: pq.FileMetaData, column: str | None) -> tuple[int | None, int | None]:
    if column is None or meta.num_row_groups == 0:
        return None, None
    idx = meta.schema.names.index(column) if column in meta.schema.names else -1
    if idx < 0:
        return None, None
    lo: int | None = None
    hi: int | None = None
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(idx).statistics
        if stats is None or not stats.has_min_max:
            return None, None
        a, b = to_us(stats.min), to_us(stats.max)
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    return lo, hi
