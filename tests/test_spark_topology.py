"""The production deployment as a test: a driver with the catalog, executors on another
host that reach only the Spark master, the driver and the object store.

The topology (tests/topology.py, docs/deploy.md): PostgreSQL on 127.0.0.1 (the
catalog, reachable from the driver only); moto's S3 server, the Spark master and the
driver bound to the host end of a veth pair; one Spark worker in a network namespace of
its own, in a private mount namespace that hides /tmp and the driver's working
directory (only the lamina sources and the venv are visible, read-only). The test
first shows the worker's namespace cannot open a TCP connection to PostgreSQL on any
of the host's addresses, then runs a pipeline through Spark on that cluster and the
same pipeline locally (SQLite catalog, local warehouse, lamina's own writes), and
compares every answer:

1. a stream of the rows appended to a source table ``events`` on the S3 warehouse
   (``readStream.format("lamina")``, the insert-only form of its change feed) into
   an upsert table ``latest`` (``writeStream.format("lamina")`` with a checkpoint),
   run twice (``availableNow``) around a second append to ``events``. The source is
   a lamina table rather than a file source because its files must be readable by
   the executors: they read them from S3 with pyarrow (Spark has no S3A jars here),
   while a directory of the driver's is hidden from them;
2. one day of ``latest`` overwritten by a batch write (``mode("overwrite")``) of a
   DataFrame made on the driver (its rows go to the executors inside the tasks);
3. ``latest`` compacted from the driver (lamina's own engine);
4. read back with ``spark.read.format("lamina")`` (after every step) and ``cat.sql``.

The driver runs in a child Python process of the test's (``python -m
tests.test_spark_topology``), on the host side: a Python process holds one
SparkContext, and the suite's other Spark tests hold theirs in the test process.
Its executors also report what they see: the driver's temporary directory and
working directory hidden, their own address the namespace's, PostgreSQL refused.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from tests import topology

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PG_PORT = 5432
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("v", pa.int64()),
    ]
)
T0_US = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
HOUR = 3_600_000_000


def _rows(keys: list[int], v: int, shift: int = 0) -> pa.Table:
    """Key k at hour k of 2024-01-01 (plus ``shift`` µs): keys 0-23 on day 1, 24-47 on
    day 2, 48-71 on day 3."""
    ts = [T0_US + k * HOUR + shift for k in keys]
    return pa.table({"k": keys, "ts": ts, "v": [v] * len(keys)}, schema=SCHEMA)


B1 = _rows(list(range(60)), 1)
# later records of keys 30-89, and an out-of-order one of key 5 (older: never visible)
B2 = pa.concat_tables([_rows(list(range(30, 90)), 2, HOUR // 2), _rows([5], 99, -HOUR)])
OVERWRITE = _rows(list(range(24, 36)), 3, 3 * HOUR // 4)  # day 2 only: replaces day 2
SQL = {
    "per_day": "SELECT CAST(ts AS DATE) AS day, count(*) AS n, sum(v) AS s FROM latest "
    "GROUP BY 1 ORDER BY 1",
    "events": "SELECT count(*) AS n, sum(v) AS s, min(k) AS lo, max(k) AS hi FROM events",
    "joined": "SELECT count(*) AS n FROM events e JOIN latest l ON e.k = l.k AND e.ts = l.ts",
}


def _plain(value: Any) -> Any:
    """A JSON round trip: what the driver's process reports is compared as it arrives."""
    return json.loads(json.dumps(value, default=str))


def _sorted_rows(t: pa.Table) -> list[list[Any]]:
    """Rows of an Arrow table, timestamps as µs, in order."""
    cols = [
        t.column(n).cast(pa.int64()) if pa.types.is_timestamp(t.schema.field(n).type) else t[n]
        for n in t.column_names
    ]
    return sorted(_plain([list(r) for r in zip(*(c.to_pylist() for c in cols), strict=True)]))


def _create(cat: lamina.Catalog) -> tuple[lamina.Table, lamina.Table]:
    ev = cat.create_table("events", SCHEMA, time_column="ts", segment_granularity="DAY")
    latest = cat.create_table(
        "latest", SCHEMA, time_column="ts", segment_granularity="DAY", primary_key=["k"]
    )
    return ev, latest


def _lamina_answers(cat: lamina.Catalog) -> dict[str, Any]:
    """What lamina's own API says once the pipeline ran (the same on both runs)."""
    t = cat.load_table("latest")
    versions = t.to_arrow(all_versions=True)
    changes = t.read_changes(0).drop_columns(["_commit_id"])
    return {
        **{f"sql_{name}": _plain(cat.sql(q).to_pylist()) for name, q in SQL.items()},
        "history": [c.action for c in t.history()],
        "all_versions": _sorted_rows(versions),
        "changes": _sorted_rows(changes),
        "latest": _sorted_rows(t.to_arrow()),
    }


def local_run(where: Path) -> dict[str, Any]:
    """The pipeline without Spark: lamina's writes on a local warehouse and catalog."""
    with lamina.connect(f"sqlite:///{where}/catalog.db", str(where / "wh")) as cat:
        ev, latest = _create(cat)
        got: dict[str, Any] = {}
        ev.append(B1)
        latest.upsert(B1)  # the stream's first micro-batch: what events' commit added
        got["after_stream_1"] = _sorted_rows(latest.to_arrow())
        ev.append(B2)
        latest.upsert(B2)
        got["after_stream_2"] = _sorted_rows(latest.to_arrow())
        latest.overwrite(OVERWRITE)
        got["after_overwrite"] = _sorted_rows(latest.to_arrow())
        latest.compact()
        got["after_compact"] = _sorted_rows(latest.to_arrow())
        return {**got, **_lamina_answers(cat)}


def cluster_run(spec: dict[str, Any]) -> dict[str, Any]:
    """The pipeline through Spark on the topology (in the driver's process)."""
    import socket

    from pyspark.sql import SparkSession

    host = spec["host_ip"]
    spark = (
        SparkSession.builder.master(spec["master"])
        .appName("lamina-topology")
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", host)
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "1g")
        .config("spark.cores.max", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    hidden, cwd = spec["hidden"], os.getcwd()

    def look(_: Any) -> list[Any]:
        """What an executor sees: its address toward the driver, the driver's files,
        whether PostgreSQL answers on the driver's host, where lamina comes from."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            me = s.getsockname()[0]
        try:
            socket.create_connection((host, PG_PORT), timeout=3).close()
            pg = True
        except OSError:
            pg = False
        return [me, os.path.exists(hidden), sorted(os.listdir(cwd)), pg, lamina.__file__]

    views = spark.sparkContext.parallelize(range(2), 2).map(look).collect()
    opts = {"catalog": spec["catalog"], "warehouse": spec["warehouse"]}

    def read(table: str) -> list[list[Any]]:
        df = spark.read.format("lamina").options(table=table, **opts).load()
        return _sorted_rows(df.selectExpr("k", "unix_micros(ts) AS ts", "v").toArrow())

    def stream_once() -> None:
        q = (
            spark.readStream.format("lamina")
            .options(table="events", **opts)
            .load()
            .writeStream.format("lamina")
            .options(table="latest", **opts)
            .option("checkpointLocation", spec["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    got: dict[str, Any] = {"executor_views": views}
    with lamina.connect(spec["catalog"], spec["warehouse"]) as cat:
        ev, _ = _create(cat)
        ev.append(B1)
        stream_once()
        got["after_stream_1"] = read("latest")
        ev.append(B2)
        stream_once()
        got["after_stream_2"] = read("latest")
        df = spark.createDataFrame(OVERWRITE.to_pandas())
        df.write.format("lamina").options(table="latest", **opts).mode("overwrite").save()
        got["after_overwrite"] = read("latest")
        cat.load_table("latest").compact()
        got["after_compact"] = read("latest")
        got["events"] = read("events")
        got.update(_lamina_answers(cat))
    spark.stop()
    return _plain(got)


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[topology.Topology]:
    """The topology, up for this module (skipped where it cannot be built, except
    under CI=true, where that fails)."""
    reason = topology.unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Spark topology test {reason} (CI=true requires it)")
        pytest.skip(f"the Spark topology test {reason}")
    base = tmp_path_factory.mktemp("topology")
    with topology.topology(base / "logs", hide=[ROOT], keep=[SRC], python_path=str(SRC)) as t:
        yield t


def test_spark_worker_namespace_reaches_master_and_s3_but_not_the_catalog(
    topo: topology.Topology,
) -> None:
    master_port = int(topo.master_url.rsplit(":", 1)[1])
    s3_host, s3_port = topo.s3_endpoint.split(":")
    routes = topology.routes(topo.ns)  # the veth's subnet only: no way past the host end
    assert [r.split()[0] for r in routes] == [topo.host_ip.rsplit(".", 1)[0] + ".0/24"]
    assert topology.reachable(topo.ns, topo.host_ip, master_port)
    assert topology.reachable(topo.ns, s3_host, int(s3_port))
    addresses = topology.host_ipv4_addresses()
    assert topo.host_ip in addresses
    for address in addresses:  # PostgreSQL, on every address of the host: refused
        assert not topology.reachable(topo.ns, address, PG_PORT), address


def test_spark_pipeline_on_the_cluster_equals_the_local_run(
    topo: topology.Topology, pg_url: str, tmp_path: Path
) -> None:
    spec = {
        "master": topo.master_url,
        "host_ip": topo.host_ip,
        "catalog": pg_url,
        "warehouse": topo.warehouse(tmp_path.name),
        "checkpoint": str(tmp_path / "checkpoint"),
        "hidden": str(tmp_path),
        "out": str(tmp_path / "answers.json"),
    }
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "LANG": "C.UTF-8",
        "PYTHONPATH": f"{SRC}{os.pathsep}{ROOT}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": topo.host_ip,
        **topology.AWS_ENV,
        **{k: os.environ[k] for k in ("JAVA_HOME", "TZ") if k in os.environ},
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.test_spark_topology", json.dumps(spec)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        _, err = driver.communicate(timeout=600)  # a hang's bound, not a timing check
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # its JVM and Python workers too
    assert driver.returncode == 0, f"the driver failed:\n{err[-6000:]}\n{topo.log_tail()}"
    cluster = json.loads(Path(spec["out"]).read_text())
    local = local_run(tmp_path)

    views = cluster.pop("executor_views")
    here = str(SRC / "lamina" / "__init__.py")  # the sources on the worker's PYTHONPATH
    # the worker sees of the driver's cwd only what it runs: the sources (and the venv,
    # where it lies in the checkout)
    assert [v[2] for v in views] == [[n for n in [".venv", "src"] if n in v[2]] for v in views]
    assert all("src" in v[2] for v in views)
    assert [v[:2] + v[3:] for v in views] == [[topo.worker_ip, False, False, here]] * 2
    events = cluster.pop("events")
    assert events == _sorted_rows(pa.concat_tables([B1, B2]))
    assert cluster.keys() == local.keys()
    for name, want in local.items():
        assert cluster[name] == want, name
    assert local["history"][-1] == "COMPACT"


if __name__ == "__main__":  # the driver's process (see the module's docstring)
    given = json.loads(sys.argv[1])
    answers = cluster_run(given)
    Path(given["out"]).write_text(json.dumps(answers))
