"""``format("lamina")`` under faults and bad input: a task's Python worker killed (Spark
retries it), a driver killed before its commit, a streaming driver killed mid-batch,
the S3 server gone mid-write, two Spark applications writing one table, and input the
source refuses. Whatever happens, a write publishes all its rows once or nothing.

Faults inside Spark's Python workers (tasks, the driver's commit) are armed through
``LAMINA_FAILPOINTS`` (lamina/failpoints.py), which every process of a driver started
here inherits; each driver is a real Spark application in a subprocess (its own JVM).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.failpoints import ENV

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("v", pa.int64()),
    ]
)
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
T0_US = int(T0.timestamp()) * 1_000_000
HOUR_US = 3_600_000_000

#: A Spark application in a subprocess: it runs the steps of its JSON argument and
#: prints what they gave as JSON. ``DRIVER`` in its failpoints is its own pid.
DRIVER = r"""
import json, os, sys, time
from pathlib import Path

cfg = json.loads(sys.argv[1])
if cfg.get("failpoints"):
    os.environ["LAMINA_FAILPOINTS"] = cfg["failpoints"].replace("DRIVER", str(os.getpid()))
from pyspark.sql import functions as F
from lamina.engines.spark import get_spark

spark = get_spark(master=cfg.get("master", "local[2]"), app_name="lamina-reliability")
spark.sparkContext.setLogLevel("ERROR")
me = os.getpid()
children = Path(f"/proc/{me}/task/{me}/children")  # the JVM, for the test to wait on
if children.exists():
    Path(cfg["jvm"]).write_text(children.read_text())
out = []


def options(step):
    return {**cfg["options"], **({"table": step["table"]} if "table" in step else {})}


def start(step):
    return (
        spark.readStream.schema("k long, ts timestamp, v long")
        .option("maxFilesPerTrigger", 1)
        .parquet(step["src"])
        .writeStream.format("lamina")
        .options(**options(step))
        .option("checkpointLocation", step["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )


if cfg.get("together"):  # streams, all at once
    for q in [start(step) for step in cfg["steps"]]:
        q.awaitTermination()
        out.append("ok")
for step in [] if cfg.get("together") else cfg["steps"]:
    do = step["do"]
    if do == "write":
        lo, hi = step["keys"]
        df = spark.range(lo, hi, 1, step.get("parts", 4)).select(
            F.col("id").alias("k"),
            F.timestamp_micros(F.lit(cfg["t0"]) + F.col("id") % 48 * cfg["hour"]).alias("ts"),
            F.lit(step.get("v", 1)).cast("long").alias("v"),
        )
        try:
            df.write.format("lamina").options(**options(step)).mode("append").save()
            out.append("ok")
        except Exception as exc:
            if not step.get("may_fail"):
                raise
            out.append("failed: " + str(exc))
    elif do == "wait":
        Path(step["path"] + ".waiting").touch()
        while not Path(step["path"]).exists():
            time.sleep(0.05)
    elif do == "read":
        out.append(spark.read.format("lamina").options(**options(step)).load().count())
print(json.dumps(out))
spark.stop()
"""


def _wait(cond: Callable[[], Any], what: str, timeout_s: float = 240) -> Any:
    """Poll ``cond`` until it holds (a deadline, not a timed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return got


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_driver_left() -> Iterator[None]:
    """Kill the drivers a failed test left running (their JVMs end with them)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Driver:
    """A Spark application in a subprocess running ``steps`` (see :data:`DRIVER`)."""

    def __init__(self, tmp: Path, name: str, cfg: dict[str, Any]) -> None:
        script = tmp / "driver.py"
        if not script.exists():
            script.write_text(DRIVER)
        self.jvm_file = tmp / f"{name}.jvm"
        self.jvm_file.unlink(missing_ok=True)
        cfg = {**cfg, "jvm": str(self.jvm_file), "t0": T0_US, "hour": HOUR_US}
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", ENV)}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:  # no pipe to fill
            self.proc = subprocess.Popen(
                [sys.executable, str(script), json.dumps(cfg)],
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )
        _STARTED.append(self.proc)

    def reach(self, *marks: Path) -> None:
        """Wait until failpoints made ``marks`` (files); the driver must not end first."""
        _wait(lambda: all(m.exists() for m in marks) or self.proc.poll() is not None, "marks")
        if not all(m.exists() for m in marks):
            self.finish()
            raise AssertionError(f"the driver ended before it made {marks}")

    def kill(self, workers: list[int]) -> None:
        """SIGKILL the driver and ``workers`` (its Python workers a failpoint paused)."""
        for pid in [self.proc.pid, *workers]:
            os.kill(pid, signal.SIGKILL)
        self.finish(-signal.SIGKILL)

    def finish(self, code: int = 0) -> list[Any]:
        """Wait for the driver (and its JVM) to end with ``code``; its steps' results."""
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        out, err = self.out.read_text(), self.err.read_text()
        if self.jvm_file.exists():  # a killed driver's JVM ends once it sees so
            for pid in self.jvm_file.read_text().split():
                _wait(lambda p=int(pid): not _alive(p), "the driver's JVM to end", 60)
        assert self.proc.returncode == code, f"driver ended {self.proc.returncode}:\n{err[-4000:]}"
        return json.loads(out.strip().splitlines()[-1]) if code == 0 else []


def _run(tmp: Path, cfg: dict[str, Any], code: int = 0, name: str = "d") -> list[Any]:
    return Driver(tmp, name, cfg).finish(code)


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(catalog URL, warehouse) of a new lake (a SQLite catalog)."""
    url, wh = f"sqlite:///{tmp_path}/cat.db", str(tmp_path / "wh")
    lamina.connect(url, wh).close()
    yield url, wh


def _opts(lake: tuple[str, str], table: str) -> dict[str, str]:
    return {"table": table, "catalog": lake[0], "warehouse": lake[1]}


def _keys(t: lamina.Table) -> list[int]:
    return sorted(t.to_arrow(columns=["k"]).column("k").to_pylist())


def _files(root: Path) -> set[str]:
    """The files under ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _staged(wh: str, table: str) -> set[str]:
    """The table's staged files (Spark writes' directories ``data/w<id>``)."""
    data = Path(wh) / table / "data"
    return {f for f in _files(data) if f.startswith("w")} if data.exists() else set()


def test_spark_failpoints_armed_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LAMINA_FAILPOINTS``, what the tests below arm Spark's workers with: an entry
    acts when its conditions hold (values compared as text), and only then."""
    from lamina.failpoints import failpoint

    hit = tmp_path / "hit"
    monkeypatch.setenv(ENV, f"p@partition=0,attempt=1:touch={hit};q:nonsense")
    failpoint("p", partition=0, attempt=0)
    failpoint("p", partition=1, attempt=1)
    assert not hit.exists()
    failpoint("p", partition=0, attempt=1, table="t")
    assert hit.exists()
    with pytest.raises(ValueError, match="unknown action"):
        failpoint("q")
    monkeypatch.setenv(ENV, "no action")
    with pytest.raises(ValueError, match="NAME"):
        failpoint("p")


# -- 1, 2. a task's Python worker killed; the driver killed before its commit ---------


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[str, str], Path]:
    """One driver (up to 3 attempts a task) writes 48 rows into ``retried``, where the
    first attempt of task 0 kills its Python worker once it wrote its files, then into
    ``orphaned`` (which held one row), where it is killed as its commit starts: (the
    lake, the directory of the markers the failpoints touched)."""
    tmp = tmp_path_factory.mktemp("killed")
    url, wh = f"sqlite:///{tmp}/cat.db", str(tmp / "wh")
    with lamina.connect(url, wh) as cat:
        for name in ("retried", "orphaned"):
            t = cat.create_table(name, SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(pa.table({"k": [100], "ts": [T0], "v": [0]}, schema=SCHEMA))
    p0 = "datasource.write.flushed@table=retried,partition=0"
    points = [
        f"{p0},attempt=0:touch={tmp / 'killed'}",
        f"{p0},attempt=0:kill",  # the worker dies, its files written
        f"{p0},attempt=1:touch={tmp / 'retried'}",
        "staged.publish@table=orphaned:kill=DRIVER",  # every task is done
    ]
    cfg = {
        "master": "local[2,3]",
        "options": {"catalog": url, "warehouse": wh},
        "failpoints": ";".join(points),
        "steps": [
            {"do": "write", "table": "retried", "keys": [0, 48], "parts": 4},
            {"do": "write", "table": "orphaned", "keys": [0, 48], "parts": 4},
        ],
    }
    _run(tmp, cfg, code=-signal.SIGKILL)
    return (url, wh), tmp


def test_spark_task_killed_is_retried_and_published_once(
    killed: tuple[tuple[str, str], Path],
) -> None:
    lake, tmp = killed
    assert (tmp / "killed").exists() and (tmp / "retried").exists()
    with lamina.connect(*lake) as cat:
        t = cat.load_table("retried")
        assert _keys(t) == list(range(48))  # one copy of each row
        assert [c.action for c in t.history()] == ["APPEND"]
        # the killed attempt's files are gone, the commit's are named by it
        assert not any("/p00000-a0-" in f for f in _staged(lake[1], "retried"))
        assert cat.find_orphans(tables=["retried"]) == []


def test_spark_driver_killed_before_commit_publishes_nothing(
    killed: tuple[tuple[str, str], Path],
) -> None:
    lake, _ = killed
    with lamina.connect(*lake) as cat:
        t = cat.load_table("orphaned")
        assert _keys(t) == [100] and len(t.history()) == 1  # nothing published
        left = _staged(lake[1], "orphaned")
        assert left  # the tasks' files, which no commit names: orphans
        assert {f"orphaned/data/{f}" for f in left} <= set(cat.find_orphans(tables=["orphaned"]))
        assert cat.run_retention(tables=["orphaned"]).orphan_files == 0  # within the grace
        t.set_properties(orphan_grace_period="0s")
        assert cat.run_retention(tables=["orphaned"]).orphan_files == len(left)
        assert _staged(lake[1], "orphaned") == set()
        assert cat.find_orphans(tables=["orphaned"]) == []
        assert _keys(cat.load_table("orphaned")) == [100]  # readable, unchanged


# -- 3. a streaming driver killed mid-batch --------------------------------------------

BATCHES = 3
KEYS = 6


def _batch_rows(i: int, upsert: bool) -> pa.Table:
    """Batch ``i``: on an upsert table new versions of the same keys; else new keys."""
    ks = list(range(KEYS)) if upsert else list(range(i * KEYS, (i + 1) * KEYS))
    ts = [T0_US + i * HOUR_US] * KEYS
    return pa.table({"k": ks, "ts": ts, "v": [i] * KEYS}, schema=SCHEMA)


def _completed(t: lamina.Table) -> int:
    return sum(c.state == "COMPLETED" for c in t.history())


def test_spark_stream_killed_mid_batch_applies_each_row_once(
    lake: tuple[str, str], tmp_path: Path
) -> None:
    """Two streams in one driver, into an append table ``a`` and an upsert table
    ``u``: the driver is killed with one paused inside a batch's commit and the other
    paused after its batch was published (before Spark's commit log records it), then
    the other way round; a third run from the checkpoints finishes both."""
    with lamina.connect(*lake) as cat:
        cat.create_table("a", SCHEMA, time_column="ts", segment_granularity="DAY")
        cat.create_table("u", SCHEMA, time_column="ts", segment_granularity="DAY", primary_key="k")
    steps = []
    for name in ("a", "u"):
        src = tmp_path / f"in-{name}"
        src.mkdir()
        for i in range(BATCHES):  # the file source takes them in modification-time order
            pq.write_table(_batch_rows(i, name == "u"), src / f"{i}.parquet")
            os.utime(src / f"{i}.parquet", (1_700_000_000 + i, 1_700_000_000 + i))
        ckpt = str(tmp_path / f"ck-{name}")
        steps.append({"do": "stream", "table": name, "src": str(src), "checkpoint": ckpt})
    runs = [  # (where each stream pauses, then commits published after the kill)
        ({"a": "commit@table=a,batch=1", "u": "committed@table=u,batch=1"}, {"a": 1, "u": 2}),
        ({"a": "committed@table=a,batch=2", "u": "commit@table=u,batch=2"}, {"a": 3, "u": 2}),
    ]
    for points, published in runs:
        marks = {name: tmp_path / f"paused-{name}" for name in points}
        failpoints = ";".join(
            f"datasource.stream.{p}:pause={marks[name]}" for name, p in points.items()
        )
        cfg = {"options": {"catalog": lake[0], "warehouse": lake[1]}, "failpoints": failpoints}
        driver = Driver(tmp_path, "d", {**cfg, "steps": steps, "together": True})
        driver.reach(*marks.values())  # (a pause writes its pid whole: see failpoints)
        workers = [int(p.read_text()) for p in marks.values()]
        driver.kill(workers)
        for p in marks.values():
            p.unlink()
        with lamina.connect(*lake) as cat:
            assert {n: _completed(cat.load_table(n)) for n in published} == published
    cfg = {"options": {"catalog": lake[0], "warehouse": lake[1]}, "steps": steps}
    assert _run(tmp_path, {**cfg, "together": True}) == ["ok", "ok"]
    with lamina.connect(*lake) as cat:
        for name in ("a", "u"):
            t = cat.load_table(name)
            assert _completed(t) == BATCHES  # one commit per batch, none twice
            upsert = name == "u"
            every = t.to_arrow(all_versions=True) if upsert else t.to_arrow()
            want = pa.concat_tables(_batch_rows(i, upsert) for i in range(BATCHES))
            assert sorted(every.select(["k", "v"]).to_pylist(), key=str) == sorted(
                want.select(["k", "v"]).to_pylist(), key=str
            )  # each batch's rows once
            if upsert:
                latest = {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}
                assert latest == {k: BATCHES - 1 for k in range(KEYS)}


# -- 4. the S3 server gone mid-write ---------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_spark_write_fails_cleanly_while_s3_is_down(tmp_path: Path) -> None:
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")
    import pyarrow.fs as pafs

    creds = {"AWS_ACCESS_KEY_ID": "lamina", "AWS_SECRET_ACCESS_KEY": "lamina"}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)  # the drivers inherit them
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"127.0.0.1:{port}"
        pafs.S3FileSystem(
            endpoint_override=endpoint,
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        ).create_dir("lamina-test")
        uri = f"s3://lamina-test/wh?endpoint_override={endpoint}&scheme=http&region=us-east-1"
        lake = (f"sqlite:///{tmp_path}/cat.db", uri)
        with lamina.connect(*lake) as cat:
            cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        paused, back = tmp_path / "task", tmp_path / "back"
        cfg = {
            "options": _opts(lake, "ev"),
            "failpoints": f"datasource.write.begin@partition=1:pause={paused}",
            "steps": [
                {"do": "write", "keys": [0, 48], "parts": 2, "may_fail": True},
                {"do": "wait", "path": str(back)},
                {"do": "write", "keys": [48, 96], "parts": 1},
                {"do": "read"},
            ],
        }
        driver = Driver(tmp_path, "d", cfg)
        driver.reach(paused)
        server.stop()  # the task is about to write
        paused.unlink()
        driver.reach(tmp_path / "back.waiting")  # the write failed: the driver waits
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        back.touch()
        failed, second, count = driver.finish()
        assert failed.startswith("failed: ") and "WarehouseError" in failed
        assert "could not write its files" in failed  # the task's error, lamina's
        assert second == "ok" and count == 48
        with lamina.connect(*lake) as cat:
            t = cat.load_table("ev")
            assert _keys(t) == list(range(48, 96))  # the failed write published nothing
            assert [c.action for c in t.history()] == ["APPEND"]
            # what task 0 may have written before the server went: orphans (the abort
            # could not reach the store), which retention deletes
            t.set_properties(orphan_grace_period="0s")
            cat.run_retention()
            assert cat.find_orphans() == []
            assert _keys(cat.load_table("ev")) == list(range(48, 96))
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- 5. two Spark applications writing one table ---------------------------------------


def test_spark_two_applications_append_to_one_table(lake: tuple[str, str], tmp_path: Path) -> None:
    with lamina.connect(*lake) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    drivers, marks = [], []
    for i in range(2):
        mark = tmp_path / f"commit{i}"
        cfg = {
            "options": _opts(lake, "ev"),
            "failpoints": f"staged.publish:pause={mark}",
            "steps": [{"do": "write", "keys": [i * 48, (i + 1) * 48], "parts": 2, "v": i}],
        }
        drivers.append(Driver(tmp_path, f"d{i}", cfg))
        marks.append(mark)
    for d, m in zip(drivers, marks, strict=True):
        d.reach(m)
    for m in marks:  # both commit at once, into the same days
        m.unlink()
    assert [d.finish() for d in drivers] == [["ok"], ["ok"]]
    with lamina.connect(*lake) as cat:
        t = cat.load_table("ev")
        assert _keys(t) == list(range(96))
        assert [c.action for c in t.history()] == ["APPEND", "APPEND"]
        assert cat.find_orphans() == []


# -- 6. bad input ----------------------------------------------------------------------

ROW = "1L AS k, timestamp'2024-01-01 01:00:00Z' AS ts"
#: (case, what the read or write is given, the error's text in Spark's exception)
BAD = [
    ("missing column", {"sql": "1L AS k, 2L AS v"}, r"SchemaError: the DataFrame .*\['ts'\]"),
    ("mistyped column", {"sql": f"{ROW}, 'x' AS v"}, r"SchemaError: column types .*v: string"),
    (
        "null in a NOT NULL column",  # found by the task: the write is aborted
        {"sql": "CAST(NULL AS long) AS k, timestamp'2024-01-01 01:00:00Z' AS ts, 2L AS v"},
        r"SchemaError: .*\bk\b",
    ),
    ("asOf abc", {"read": {"asOf": "abc"}}, r"InvalidArgumentError: option asOf='abc'"),
    ("asOf 0", {"read": {"asOf": "0"}}, r"SnapshotNotFoundError: table .* has no version 0"),
    ("versionAsOf 999", {"read": {"versionAsOf": "999"}}, r"has no version 999"),
    ("versionAsOf a time", {"read": {"versionAsOf": "2024-01-01"}}, r"give a table version"),
    ("timestampAsOf 2001", {"read": {"timestampAsOf": "2001-01-01"}}, r"SnapshotTooOldError"),
    (
        "asOf and versionAsOf",
        {"read": {"asOf": "1", "versionAsOf": "1"}},
        r"options asOf and versionAsOf both name a snapshot",
    ),
    ("dropped table", {"read": {"table": "gone"}}, r"TableNotFoundError"),
    # Spark 4.3 takes only append and overwrite from a Python data source
    ("mode error", {"mode": "error"}, r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*ErrorIfExists"),
    ("mode ignore", {"mode": "ignore"}, r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*Ignore"),
    (
        "interval on append",
        {"options": {"interval": "2024-01-01/2024-01-02"}},
        r"InvalidArgumentError: option interval is for mode\('overwrite'\)",
    ),
]


@pytest.fixture(scope="module")
def bad_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A lake with table ``ev`` (one row) and a dropped table ``gone``."""
    tmp = tmp_path_factory.mktemp("bad")
    url, wh = f"sqlite:///{tmp}/cat.db", str(tmp / "wh")
    with lamina.connect(url, wh) as cat:
        t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(pa.table({"k": [100], "ts": [T0], "v": [0]}, schema=SCHEMA))
        cat.create_table("gone", SCHEMA, time_column="ts")
        cat.drop_table("gone")
    return url, wh


@pytest.mark.parametrize(("case", "given", "error"), BAD, ids=[c for c, _, _ in BAD])
def test_spark_source_refuses_bad_input_publishing_nothing(
    spark: Any, bad_lake: tuple[str, str], case: str, given: dict[str, Any], error: str
) -> None:
    o = {**_opts(bad_lake, "ev"), **given.get("options", {})}
    with pytest.raises(Exception, match=error):
        if "read" in given:
            spark.read.format("lamina").options(**{**o, **given["read"]}).load().collect()
        else:
            df = spark.sql(f"SELECT {given.get('sql', ROW + ', 2L AS v')}")
            df.write.format("lamina").options(**o).mode(given.get("mode", "append")).save()
    with lamina.connect(*bad_lake) as cat:
        t = cat.load_table("ev")
        assert _keys(t) == [100] and len(t.history()) == 1  # nothing published
    assert _staged(bad_lake[1], "ev") == set()  # an aborted write's files are gone
