"""lamina over Spark Connect: ``format("lamina")`` reads, writes and streams through a
Connect client, and lamina's own entry points (``t.append(df)``, ``t.to_spark``,
``t.foreach_batch``) with a Connect DataFrame or session (docs/spark.md). One Connect
server (pyspark's ``sbin/start-connect-server.sh``, local master) serves the module."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina import errors

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("v", pa.int64()),
    ]
)
T0_US = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
HOUR_US = 3_600_000_000
SRC = Path(lamina.__file__).resolve().parents[1]  # src/: lamina and pyspark_lamina


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true runs the Spark Connect tests)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_of(pid_dir: Path) -> int | None:
    files = list(pid_dir.glob("*.pid"))
    try:
        return int(files[0].read_text().strip()) if files else None
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def spark_connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:N`` of a Spark Connect server started for the module, whose
    Python workers import this lamina; stopped afterwards. Skips (fails under CI=true)
    without Java, the server script or the Connect client's packages."""
    try:
        import grpc  # noqa: F401  (the Connect client's packages: pyspark[connect])
        import pyspark
    except ImportError as exc:
        _unavailable(f"the Spark Connect client is not installed (pyspark[connect]): {exc}")
    home = Path(pyspark.__file__).resolve().parent
    start, stop = (
        home / "sbin" / "start-connect-server.sh",
        home / "sbin" / "stop-connect-server.sh",
    )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _unavailable("no Java: Spark Connect's server needs Java 17")
    if not start.exists():
        _unavailable(f"pyspark has no {start}")
    base = tmp_path_factory.mktemp("connect")
    port = _free_port()
    paths = [str(SRC), str(SRC.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_REMOTE")},
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(base / "log"),
        "SPARK_PID_DIR": str(base / "pid"),
        "SPARK_IDENT_STRING": f"lamina-test-{port}",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYTHONPATH": os.pathsep.join(paths),
    }
    confs = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
    }
    args = ["bash", str(start), "--master", "local[2]"]
    for k, v in confs.items():
        args += ["--conf", f"{k}={v}"]
    subprocess.run(args, env=env, check=True, capture_output=True, timeout=120)
    try:
        deadline = time.monotonic() + 180  # a JVM's start, on a loaded machine
        while not _answers(port):
            pid = _pid_of(base / "pid")
            logs = "\n".join(p.read_text()[-3000:] for p in (base / "log").glob("*.out"))
            if (pid is not None and not _alive(pid)) or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not start:\n{logs}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        pid = _pid_of(base / "pid")
        subprocess.run(["bash", str(stop)], env=env, capture_output=True, timeout=120)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def sc(spark_connect_url: str) -> Iterator[Any]:
    """A Spark Connect client session. Made by the Connect class itself: pyspark's
    ``SparkSession.builder.remote`` refuses a process with a classic session (the
    other Spark tests') and turns this whole process to Connect mode."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(spark_connect_url).getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> tuple[str, str]:
    """(catalog URL, warehouse) of a new lake."""
    url, wh = f"sqlite:///{tmp_path}/cat.db", str(tmp_path / "wh")
    lamina.connect(url, wh).close()
    return url, wh


def _rows(keys: range, v: int) -> pa.Table:
    ks = list(keys)
    ts = [T0_US + k * HOUR_US for k in ks]
    return pa.table({"k": ks, "ts": ts, "v": [v] * len(ks)}, schema=SCHEMA)


def _frame(sc: Any, keys: range, v: int) -> Any:
    return sc.createDataFrame(_rows(keys, v).to_pandas())


def _opts(lake: tuple[str, str], table: str) -> dict[str, str]:
    return {"table": table, "catalog": lake[0], "warehouse": lake[1]}


def _kv(df: Any) -> list[tuple[int, int]]:
    return sorted((r["k"], r["v"]) for r in df.collect())


def _table_kv(t: lamina.Table) -> list[tuple[int, int]]:
    got = t.to_arrow()
    return sorted(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True))


def test_spark_connect_reads_plain_and_upsert_tables(sc: Any, lake: tuple[str, str]) -> None:
    with lamina.connect(*lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(_rows(range(30), 1))
        u = cat.create_table("u", SCHEMA, time_column="ts", primary_key="k")
        u.upsert(_rows(range(10), 1))
        u.upsert(_rows(range(5, 15), 2))
        for name, want in (("ev", [(k, 1) for k in range(30)]), ("u", _table_kv(u))):
            df = sc.read.format("lamina").options(**_opts(lake, name)).load()
            assert _kv(df) == want
        assert _table_kv(u) == [(k, 1) for k in range(5)] + [(k, 2) for k in range(5, 15)]
        pinned = t.to_spark(sc)  # the snapshot planned now: a later append does not show
        t.append(_rows(range(30, 40), 2))
        assert _kv(pinned) == [(k, 1) for k in range(30)]
        assert len(t.to_spark(sc, interval="2024-01-02/2024-01-03").collect()) == 16
        assert _kv(u.to_spark(sc)) == _table_kv(u)
        with pytest.raises(errors.UnsupportedInputError, match=r'format\("lamina"\)'):
            u.to_spark(sc, all_versions=True)
        with pytest.raises(errors.UnsupportedInputError, match=r'format\("lamina"\)'):
            t.read_changes_spark(sc, 0)


def test_spark_connect_batch_writes_append_and_overwrite(sc: Any, lake: tuple[str, str]) -> None:
    with lamina.connect(*lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    write = _frame(sc, range(48), 1).repartition(3).write.format("lamina")
    write.options(**_opts(lake, "ev")).mode("append").save()
    over = _frame(sc, range(24, 30), 2).write.format("lamina").options(**_opts(lake, "ev"))
    over.mode("overwrite").save()
    with lamina.connect(*lake) as cat:
        t = cat.load_table("ev")
        assert [c.action for c in t.history()] == ["APPEND", "OVERWRITE"]
        assert _table_kv(t) == [(k, 1) for k in range(24)] + [(k, 2) for k in range(24, 30)]


def test_spark_connect_stream_write_commits_each_batch_once(
    sc: Any, lake: tuple[str, str], tmp_path: Path
) -> None:
    with lamina.connect(*lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    src = tmp_path / "src"
    src.mkdir()
    for name, keys, v in (("a", range(10), 1), ("b", range(10, 20), 2)):
        pq.write_table(_rows(keys, v), src / f"{name}.parquet")
        stream = sc.readStream.schema("k long, ts timestamp, v long").parquet(str(src))
        q = (
            stream.writeStream.format("lamina")
            .options(**_opts(lake, "ev"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
    with lamina.connect(*lake) as cat:
        t = cat.load_table("ev")
        assert _table_kv(t) == [(k, 1) for k in range(10)] + [(k, 2) for k in range(10, 20)]
        assert len(t.history()) == 2


def test_spark_connect_errors_carry_lamina_messages(sc: Any, lake: tuple[str, str]) -> None:
    with lamina.connect(*lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    with pytest.raises(Exception, match="unknown option.*colums"):
        sc.read.format("lamina").options(**_opts(lake, "ev"), colums="v").load().collect()
    with pytest.raises(Exception, match="no table named 'nope'"):
        sc.read.format("lamina").options(**_opts(lake, "nope")).load().collect()
    df = sc.createDataFrame([(1, 2)], "k long, w long")
    with pytest.raises(Exception, match="does not match table"):
        df.write.format("lamina").options(**_opts(lake, "ev")).mode("append").save()


def test_spark_connect_table_writes_go_through_the_source(sc: Any, lake: tuple[str, str]) -> None:
    with lamina.connect(*lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        first = t.append(_frame(sc, range(48), 1))
        assert first == t.history()[-1] and first.action == "APPEND"
        again = t.append(_frame(sc, range(48, 50), 9), txn=("loader", 1))
        assert t.append(_frame(sc, range(50, 60), 9), txn=("loader", 1)).already_applied
        assert again == t.history()[-1] and t.count() == 50
        over = t.overwrite(_frame(sc, range(24, 30), 2), interval="2024-01-02/2024-01-03")
        assert over.action == "OVERWRITE"
        assert _table_kv(t) == [(k, 1) for k in range(24)] + [(k, 2) for k in range(24, 30)] + [
            (k, 9) for k in range(48, 50)
        ]
        u = cat.create_table("u", SCHEMA, time_column="ts", primary_key="k")
        u.upsert(_frame(sc, range(10), 1))
        done = u.upsert(_frame(sc, range(5, 15), 2))
        assert done == u.history()[-1]
        assert _table_kv(u) == [(k, 1) for k in range(5)] + [(k, 2) for k in range(5, 15)]
        with pytest.raises(errors.UpsertError):
            t.upsert(_frame(sc, range(3), 1))
        with pytest.raises(errors.MetadataError, match=r'format\("lamina"\)'):
            t.append(_frame(sc, range(3), 1), metadata={"job": "x"})
        with pytest.raises(errors.UnsupportedInputError, match=r'format\("lamina"\)'):
            t.refresh(_frame(sc, range(3), 1))
        assert t.count() == 32


def test_spark_connect_foreach_batch_applies_each_batch_once(
    sc: Any, lake: tuple[str, str], tmp_path: Path
) -> None:
    """The function pickles to the Connect server, which runs it; a batch replayed
    after a restart (its checkpoint commit lost) is skipped by its txn."""
    with lamina.connect(*lake) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        write = t.foreach_batch("connect-stream")
    src, ck = tmp_path / "src", tmp_path / "ck"
    src.mkdir()
    pq.write_table(_rows(range(12), 1), src / "a.parquet")

    def run() -> None:
        stream = sc.readStream.schema("k long, ts timestamp, v long").parquet(str(src))
        q = (
            stream.writeStream.foreachBatch(write)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    run()
    for f in ("0", ".0.crc"):  # as if the server died before the checkpoint recorded it
        (ck / "commits" / f).unlink(missing_ok=True)
    run()
    with lamina.connect(*lake) as cat:
        t = cat.load_table("ev")
        assert _table_kv(t) == [(k, 1) for k in range(12)]
        assert len(t.history()) == 1
