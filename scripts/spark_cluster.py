"""Start or stop a Spark standalone cluster (one master, one worker) on this machine,
from pyspark's own ``bin/spark-class``, for the test suite.

``python scripts/spark_cluster.py start STATE_DIR`` prints the master URL (also
written to ``STATE_DIR/master``) once the worker has registered;
``python scripts/spark_cluster.py stop STATE_DIR`` kills both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def start(state: Path) -> str:
    state.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_WORKER_DIR": str(state / "work"), "SPARK_LOCAL_IP": "127.0.0.1"}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    with open(state / "master.log", "w") as log:  # the child keeps its own descriptor
        master = subprocess.Popen(
            [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(_free_port())],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    (state / "pids").write_text(f"{master.pid}\n")
    with open(state / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [_spark_class(), "org.apache.spark.deploy.worker.Worker", url, "--cores", "2",
             "--memory", "2g", "--webui-port", str(_free_port())],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    (state / "pids").write_text(f"{master.pid}\n{worker.pid}\n")
    deadline = time.monotonic() + 120
    while "Successfully registered with master" not in (state / "worker.log").read_text():
        if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
            stop(state)
            raise SystemExit(f"the Spark cluster did not start; see {state}/*.log")
        time.sleep(0.5)
    (state / "master").write_text(url)
    return url


def stop(state: Path) -> None:
    pids = state / "pids"
    if not pids.exists():
        return
    for pid in pids.read_text().split():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGTERM)
    pids.unlink()


if __name__ == "__main__":
    action, where = sys.argv[1], Path(sys.argv[2])
    if action == "start":
        print(start(where))
    else:
        stop(where)
