"""lamina as a Spark data source: ``format("lamina")`` batch reads and writes, streams,
Spark SQL, on plain, upsert and consistent-push tables (docs/spark.md)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("v", pa.int64()),
    ]
)
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
HOUR_US = 3_600_000_000
T0_US = int(T0.timestamp()) * 1_000_000


def _rows(keys: range, v: int) -> pa.Table:
    ks = list(keys)
    return pa.table(
        {"k": ks, "ts": [T0_US + k * HOUR_US for k in ks], "v": [v] * len(ks)}, schema=SCHEMA
    )


@pytest.fixture
def lake(tmp_path: Path) -> tuple[str, str]:
    """(catalog URL, warehouse) of a new lake."""
    wh = tmp_path / "wh"
    cat = lamina.connect(f"sqlite:///{tmp_path}/cat.db", str(wh))
    cat.close()
    return f"sqlite:///{tmp_path}/cat.db", str(wh)


def _opts(lake: tuple[str, str], table: str) -> dict[str, str]:
    return {"table": table, "catalog": lake[0], "warehouse": lake[1]}


def _connect(lake: tuple[str, str]) -> lamina.Catalog:
    return lamina.connect(lake[0], lake[1])


def _read(spark: Any, lake: tuple[str, str], table: str, **extra: str) -> list[tuple[int, int]]:
    df = spark.read.format("lamina").options(**_opts(lake, table), **extra).load()
    return sorted((r["k"], r["v"]) for r in df.collect())


def test_spark_source_is_found_by_name_once_installed(spark: Any, lake: tuple[str, str]) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(30), 1))
    assert _read(spark, lake, "ev") == [(k, 1) for k in range(30)]


def test_spark_source_batch_write_is_one_commit(spark: Any, lake: tuple[str, str]) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        df = spark.createDataFrame(_rows(range(48), 7).to_pandas()).repartition(4)
        df.write.format("lamina").options(**_opts(lake, "ev")).mode("append").save()
        t = cat.load_table("ev")
        assert [c.action for c in t.history()] == ["APPEND"]
        got = t.to_arrow()
        assert sorted(got.column("k").to_pylist()) == list(range(48))
        chunks = {s.interval for s in t.snapshot().segments}
        assert len(chunks) == 2  # two days


def test_spark_source_overwrite_replaces_the_chunks_touched(
    spark: Any, lake: tuple[str, str]
) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(48), 1))
        df = spark.createDataFrame(_rows(range(24, 30), 2).to_pandas())
        df.write.format("lamina").options(**_opts(lake, "ev")).mode("overwrite").save()
    assert _read(spark, lake, "ev") == [(k, 1) for k in range(24)] + [(k, 2) for k in range(24, 30)]


def test_spark_source_upsert_table_shows_latest_records(spark: Any, lake: tuple[str, str]) -> None:
    with _connect(lake) as cat:
        cat.create_table(
            "u", SCHEMA, time_column="ts", segment_granularity="DAY", primary_key=["k"]
        )
        for v in (1, 2):
            df = spark.createDataFrame(_rows(range(10 * v), v).to_pandas())
            df.write.format("lamina").options(**_opts(lake, "u")).mode("append").save()
        assert cat.load_table("u").count() == 20
    assert _read(spark, lake, "u") == [(k, 2) for k in range(20)]


def test_spark_source_reads_as_of_columns_and_interval(spark: Any, lake: tuple[str, str]) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        first = t.append(_rows(range(24), 1))
        t.append(_rows(range(24, 48), 2))
    assert len(_read(spark, lake, "ev", asOf=str(first.version))) == 24
    assert len(_read(spark, lake, "ev", versionAsOf=str(first.version))) == 24
    assert first.completed_at is not None
    when = first.completed_at.isoformat()
    assert len(_read(spark, lake, "ev", timestampAsOf=when)) == 24
    assert len(_read(spark, lake, "ev", asOf=when)) == 24
    day2 = _read(spark, lake, "ev", interval="2024-01-02/2024-01-03")
    assert day2 == [(k, 2) for k in range(24, 48)]
    df = spark.read.format("lamina").options(**_opts(lake, "ev"), columns="v").load()
    assert df.columns == ["v"]
    assert df.count() == 48


def test_spark_source_time_filter_prunes_chunks(spark: Any, lake: tuple[str, str]) -> None:
    """A filter on the time column that Spark pushes prunes the chunks read: with the
    first day's file gone from disk, a read of the third day still works (its file is
    the only one opened), and a read of everything fails on the missing file."""
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(24 * 5), 1))
        (first,) = [s for s in t.segments() if s.interval.start == T0_US]
        Path(first.location).unlink()
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"  # get_spark's

    def day3() -> list[int]:
        df = spark.read.format("lamina").options(**_opts(lake, "ev")).load()
        day = df.where("ts >= timestamp'2024-01-03 00:00:00+00:00'").where(
            "ts < timestamp'2024-01-04 00:00:00+00:00'"
        )
        return sorted(r["k"] for r in day.collect())

    assert day3() == list(range(48, 72))
    df = spark.read.format("lamina").options(**_opts(lake, "ev")).load()
    never = df.where(
        "ts >= timestamp'2024-01-05 00:00:00Z' and ts < timestamp'2024-01-02 00:00:00Z'"
    )
    assert never.collect() == []  # filters no time can pass: no file opened
    with pytest.raises(Exception, match="no longer exists"):
        spark.read.format("lamina").options(**_opts(lake, "ev")).load().collect()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:  # pushdown off: the reader takes no filters and opens every file
        with pytest.raises(Exception, match="no longer exists"):
            day3()
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_spark_source_stream_write_commits_each_batch_once(
    spark: Any, lake: tuple[str, str], tmp_path: Path
) -> None:
    with _connect(lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    src = tmp_path / "src"
    src.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(_rows(range(10), 1), src / "a.parquet")
    stream = spark.readStream.schema("k long, ts timestamp, v long").parquet(str(src))

    def run() -> None:  # the query, (re)started from its checkpoint
        writer = stream.writeStream.format("lamina").options(**_opts(lake, "ev"))
        writer = writer.option("checkpointLocation", str(tmp_path / "ck"))
        writer.trigger(availableNow=True).start().awaitTermination()

    run()
    pq.write_table(_rows(range(10, 20), 2), src / "b.parquet")
    run()
    with _connect(lake) as cat:
        t = cat.load_table("ev")
        assert sorted(t.to_arrow().column("k").to_pylist()) == list(range(20))
        assert len(t.history()) == 2
        # each micro-batch's files were staged in a directory of its own
        staged = {s.location.split("/data/w", 1)[1].split("/")[1] for s in t.segments()}
        assert staged == {"b0", "b1"}


def test_spark_source_stream_reads_the_change_feed(
    spark: Any, lake: tuple[str, str], tmp_path: Path
) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(5), 1))
        t.overwrite(_rows(range(3), 2))
    stream = (
        spark.readStream.format("lamina").options(**_opts(lake, "ev"), readChangeFeed="true").load()
    )
    q = (
        stream.writeStream.format("memory")
        .queryName("feed")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    got = spark.sql("select k, v, _change, _commit_seq from feed").collect()
    with _connect(lake) as cat:
        want = cat.load_table("ev").read_changes(0)
    assert sorted(tuple(r) for r in got) == sorted(
        zip(
            want.column("k").to_pylist(),
            want.column("v").to_pylist(),
            want.column("_change").to_pylist(),
            want.column("_commit_seq").to_pylist(),
            strict=True,
        )
    )


def test_spark_source_sql_view_select_insert_overwrite(spark: Any, lake: tuple[str, str]) -> None:
    with _connect(lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    view = (
        f"CREATE OR REPLACE TEMPORARY VIEW ev_sql USING lamina OPTIONS (table 'ev', "
        f"catalog '{lake[0]}', warehouse '{lake[1]}')"
    )
    spark.sql(view)
    try:
        spark.sql(
            "INSERT INTO ev_sql VALUES (1, timestamp'2024-01-01 01:00:00+00:00', 5), "
            "(2, timestamp'2024-01-02 02:00:00+00:00', 6)"
        )
        assert sorted(tuple(r) for r in spark.sql("select k, v from ev_sql").collect()) == [
            (1, 5),
            (2, 6),
        ]
        spark.sql("INSERT OVERWRITE ev_sql VALUES (3, timestamp'2024-01-02 03:00:00+00:00', 7)")
        spark.sql(view)  # a view's first query pins its snapshot, as a DataFrame does
        assert sorted(tuple(r) for r in spark.sql("select k, v from ev_sql").collect()) == [
            (1, 5),
            (3, 7),
        ]
    finally:
        spark.sql("DROP VIEW IF EXISTS ev_sql")


def test_spark_source_sql_catalog_table_takes_options_per_statement(
    spark: Any, lake: tuple[str, str]
) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(3), 1))
    spark.sql(
        f"CREATE TABLE ev_tbl USING lamina OPTIONS (table 'ev', catalog '{lake[0]}', "
        f"warehouse '{lake[1]}')"
    )
    with_ = f"WITH ('table' = 'ev', 'catalog' = '{lake[0]}', 'warehouse' = '{lake[1]}')"
    try:
        with pytest.raises(Exception, match="CREATE TEMPORARY VIEW"):
            spark.sql("SELECT * FROM ev_tbl").collect()
        spark.sql(f"INSERT INTO ev_tbl {with_} VALUES (9, timestamp'2024-01-01 09:00:00Z', 9)")
        got = spark.sql(f"SELECT k, v FROM ev_tbl {with_}").collect()
        assert sorted(tuple(r) for r in got) == [(0, 1), (1, 1), (2, 1), (9, 9)]
    finally:
        spark.sql("DROP TABLE IF EXISTS ev_tbl")


def test_spark_source_refuses_bad_options_with_lamina_errors(
    spark: Any, lake: tuple[str, str]
) -> None:
    with _connect(lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("lamina").options(**_opts(lake, "ev"), colums="v").load()
    with pytest.raises(Exception, match="no table named|not found|TableNotFound"):
        spark.read.format("lamina").options(**_opts(lake, "nope")).load()
    df = spark.createDataFrame([(1, 2)], "k long, w long")
    with pytest.raises(Exception, match="does not match table"):
        df.write.format("lamina").options(**_opts(lake, "ev")).mode("append").save()


@pytest.fixture(scope="module")
def s3_lake_server() -> Any:
    """host:port of an S3 server (moto's) holding the bucket ``lamina-spark``."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")
    import pyarrow.fs as pafs

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fs = pafs.S3FileSystem(
        access_key="lamina",
        secret_key="lamina",
        endpoint_override=f"{host}:{port}",
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    fs.create_dir("lamina-spark")
    yield f"{host}:{port}"
    server.stop()


@pytest.fixture
def s3_lake(s3_lake_server: str, tmp_path: Path) -> tuple[str, str]:
    """(catalog URL, warehouse URI on S3) of a new lake. The credentials ride in the
    URI: the Spark session's Python workers were started before this server was."""
    uri = (
        f"s3://lamina:lamina@lamina-spark/{tmp_path.name}?endpoint_override={s3_lake_server}"
        "&scheme=http&region=us-east-1"
    )
    cat = lamina.connect(f"sqlite:///{tmp_path}/cat.db", uri)
    cat.close()
    return f"sqlite:///{tmp_path}/cat.db", uri


def test_spark_source_writes_and_reads_an_s3_warehouse(
    spark: Any, s3_lake: tuple[str, str]
) -> None:
    with _connect(s3_lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        u = cat.create_table(
            "u", SCHEMA, time_column="ts", segment_granularity="DAY", primary_key=["k"]
        )
        df = spark.createDataFrame(_rows(range(48), 3).to_pandas()).repartition(3)
        df.write.format("lamina").options(**_opts(s3_lake, "ev")).mode("append").save()
        for v in (1, 2):
            df = spark.createDataFrame(_rows(range(10 * v), v).to_pandas())
            df.write.format("lamina").options(**_opts(s3_lake, "u")).mode("append").save()
        assert sorted(t.to_arrow().column("k").to_pylist()) == list(range(48))
        # t.to_spark reaches an object store through the data source
        assert sorted(r["k"] for r in t.to_spark(spark).collect()) == list(range(48))
        latest = sorted((r["k"], r["v"]) for r in u.to_spark(spark).collect())
        assert latest == [(k, 2) for k in range(20)]
        assert cat.find_orphans() == []


def test_spark_to_spark_of_an_upsert_table_applies_vectors_in_tasks(
    spark: Any, lake: tuple[str, str]
) -> None:
    """t.to_spark of an upsert table reads through the data source: its plan carries
    each file's deletion vector to the task reading it (no driver-built DataFrame of
    row positions), and gives the rows t.to_arrow gives, at any commit."""
    with _connect(lake) as cat:
        u = cat.create_table(
            "u", SCHEMA, time_column="ts", segment_granularity="DAY", primary_key=["k"]
        )
        first = u.upsert(_rows(range(100), 1))
        u.upsert(_rows(range(0, 100, 3), 2))
        for as_of in (None, first.version):
            want = sorted(u.to_arrow(as_of=as_of).select(["k", "v"]).to_pylist(), key=str)
            got = [r.asDict() for r in u.to_spark(spark, as_of=as_of).select("k", "v").collect()]
            assert sorted(got, key=str) == want
        plan = u.to_spark(spark)._jdf.queryExecution().optimizedPlan().toString()
        assert "lamina" in plan.lower()
        # every record of the first upsert's files superseded: the read skips them
        gone = [s for s in u.segments() if s.commit_id == first.id]
        u.upsert(_rows(range(100), 3))
        for s in gone:
            Path(s.location).unlink()
        got = sorted((r["k"], r["v"]) for r in u.to_spark(spark).collect())
        assert got == [(k, 3) for k in range(100)]


def test_spark_source_overwrite_of_an_interval(spark: Any, lake: tuple[str, str]) -> None:
    """``interval`` replaces the whole interval, days the data does not touch included;
    rows outside it are refused and nothing is published."""
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(72), 1))  # three days
        df = spark.createDataFrame(_rows(range(2), 2).to_pandas())  # day 1 only
        w = df.write.format("lamina").options(**_opts(lake, "ev")).mode("overwrite")
        w.option("interval", "2024-01-01/2024-01-03").save()
        assert sorted(_read(spark, lake, "ev")) == [(0, 2), (1, 2)] + [
            (k, 1) for k in range(48, 72)
        ]
        before = len(t.history())
        bad = spark.createDataFrame(_rows(range(70, 72), 3).to_pandas())  # day 3
        with pytest.raises(Exception, match="outside the overwrite interval"):
            bad.write.format("lamina").options(**_opts(lake, "ev")).mode("overwrite").option(
                "interval", "2024-01-01/2024-01-02"
            ).save()
        assert len(t.history()) == before
        assert cat.find_orphans() == []  # the refused write's staged files are gone


def test_spark_source_write_to_a_refresh_table_is_one_consistent_push(
    spark: Any, lake: tuple[str, str]
) -> None:
    """On a consistent-push REFRESH table a write replaces the live segments through
    one lineage entry, which t.revert_replace rolls back."""
    with _connect(lake) as cat:
        t = cat.create_table(
            "r",
            SCHEMA,
            time_column="ts",
            segment_granularity="DAY",
            ingestion_type="REFRESH",
            consistent_push=True,
        )
        t.append(_rows(range(48), 1))
        df = spark.createDataFrame(_rows(range(10), 2).to_pandas())
        df.write.format("lamina").options(**_opts(lake, "r")).mode("append").save()
        assert _read(spark, lake, "r") == [(k, 2) for k in range(10)]
        entries = t.lineage()
        last = entries[-1]
        assert last.state == "COMPLETED" and last.segments_from
        t.revert_replace(last.id)
        assert sorted(t.to_arrow().column("k").to_pylist()) == list(range(48))


def test_spark_source_change_feed_limits_commits_per_trigger(
    spark: Any, lake: tuple[str, str], tmp_path: Path
) -> None:
    with _connect(lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        for i in range(4):
            t.append(_rows(range(i * 5, i * 5 + 5), i))
    stream = (
        spark.readStream.format("lamina")
        .options(**_opts(lake, "ev"), readChangeFeed="true", maxCommitsPerTrigger="1")
        .load()
    )
    q = (
        stream.writeStream.format("memory")
        .queryName("feed_limited")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    seqs = [r[0] for r in spark.sql("select distinct _commit_seq from feed_limited").collect()]
    assert sorted(seqs) == [1, 2, 3, 4]
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [5, 5, 5, 5]  # one commit per micro-batch
