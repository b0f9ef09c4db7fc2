"""A production-shaped Spark topology on one machine, for tests (needs root).

- the *host side* (this process's network namespace): the driver, a standalone Spark
  master and an S3 server (moto's), all bound to the host end of a veth pair
  (``10.77.N.1``); PostgreSQL stays where it is, on 127.0.0.1;
- *another host*: a network namespace of its own (``ip netns add``), reached through
  the veth pair (``10.77.N.2``; no default route, so it sees the host side's
  ``10.77.N.1`` and nothing else), where a Spark worker runs in a private mount
  namespace: tmpfs over ``/tmp`` (the driver's and the tests' temporary files) and
  over the driver's working directory, with only the kept paths (the lamina sources,
  the Python venv with pyspark) bound back read-only, and ``SPARK_WORKER_DIR`` on a
  tmpfs of its own.

:func:`topology` starts it all and tears it down (processes, veth, namespace; the
mounts die with the worker's mount namespace) even when the body fails;
:func:`unavailable` says why it cannot run here; :func:`reachable` tries a TCP
connection from inside the worker's namespace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: S3 credentials of the moto server (it takes any); the worker's environment has them
#: as a host of the cluster would (an instance profile, or its own environment).
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "lamina",
    "AWS_SECRET_ACCESS_KEY": "lamina",
    "AWS_EC2_METADATA_DISABLED": "true",
}
BUCKET = "lamina-topology"
VENV = Path(sys.prefix)  # the venv: python, pyspark, pyarrow, moto


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def unavailable() -> str | None:
    """None when this process can build the topology, else the reason."""
    if os.geteuid() != 0:
        return "needs root (ip netns, unshare, mount)"
    for tool in ("ip", "unshare", "mount", "java"):
        if shutil.which(tool) is None:
            return f"no {tool!r} binary on PATH"
    name = f"lamina-probe-{secrets.token_hex(3)}"
    got = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if got.returncode != 0:
        return f"cannot create a network namespace: {got.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@dataclass
class Topology:
    """What :func:`topology` started: addresses, URLs and where the logs are."""

    ns: str  # the worker's network namespace
    host_ip: str  # the host end of the veth pair: master, driver and S3 bind here
    worker_ip: str
    master_url: str  # spark://host_ip:port
    s3_endpoint: str  # host_ip:port
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def warehouse(self, prefix: str) -> str:
        """A warehouse URI under ``prefix`` of the bucket (lamina's form)."""
        return (
            f"s3://{BUCKET}/{prefix}?endpoint_override={self.s3_endpoint}"
            "&scheme=http&region=us-east-1"
        )

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of every process's log, for a failure's message."""
        out = []
        for p in sorted(self.logs.glob("*.log")):
            text = p.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {p.name}\n" + "\n".join(text))
        return "\n".join(out)


def reachable(ns: str, host: str, port: int) -> bool:
    """Whether a TCP connection from inside namespace ``ns`` to ``host:port`` opens."""
    code = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=3).close()\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    got = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code])
    return got.returncode == 0


def routes(ns: str) -> list[str]:
    """The IPv4 routes of namespace ``ns`` (``ip route`` lines)."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ip", "-4", "route"], capture_output=True, text=True
    )
    return out.stdout.splitlines()


def host_ipv4_addresses() -> list[str]:
    """Every IPv4 address of this (the host's) network namespace."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
    return [line.split()[3].split("/")[0] for line in out.stdout.splitlines()]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start listening on {host}:{port}")
        time.sleep(0.2)


def _subnet() -> int:
    """A third byte N of 10.77.N.0/24 that no address of the host uses."""
    used = {a for a in host_ipv4_addresses() if a.startswith("10.77.")}
    for _ in range(100):
        n = 64 + secrets.randbelow(190)
        if not any(a.startswith(f"10.77.{n}.") for a in used):
            return n
    raise RuntimeError("no free 10.77.N.0/24 subnet")


def _run(*cmd: str) -> None:
    subprocess.run(list(cmd), check=True, capture_output=True)


def _worker_script(hide: list[Path], keep: list[Path], command: list[str]) -> str:
    """The shell program that sets up the worker's private mounts, then execs it.

    tmpfs over /tmp first (the kept paths are staged in it, so they must not lie
    under /tmp), then over each hidden directory; the kept paths come back read-only
    at their own paths; SPARK_WORKER_DIR is a tmpfs of its own."""
    q = shlex.quote
    lines = ["set -e", "mount -t tmpfs -o mode=1777,size=4g lamina-tmp /tmp"]
    for i, path in enumerate(keep):
        stash = f"/tmp/.keep{i}"
        lines += [
            f"mkdir {stash}",
            f"mount --bind {q(str(path))} {stash}",
            f"mount -o remount,bind,ro {stash}",
        ]
    hidden: list[Path] = [Path("/tmp")]
    for path in sorted(set(hide)):
        if any(h == path or h in path.parents for h in hidden):
            continue  # hidden already
        hidden.append(path)
        lines.append(f"mount -t tmpfs -o size=16m lamina-hidden {q(str(path))}")
    for i, path in enumerate(keep):
        lines += [f"mkdir -p {q(str(path))}", f"mount --bind /tmp/.keep{i} {q(str(path))}"]
    lines += [
        "mkdir /tmp/worker",
        "mount -t tmpfs -o size=2g lamina-worker /tmp/worker",
        "exec " + " ".join(q(c) for c in command),
    ]
    return "\n".join(lines)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's group (it leads one), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group's stragglers (executors)


@contextlib.contextmanager
def topology(
    logs: Path, hide: list[Path], keep: list[Path], python_path: str, cores: int = 2
) -> Iterator[Topology]:
    """Start the namespace, veth pair, S3 server, master and namespaced worker (once
    it registered with the master); stop and remove them all on exit.

    ``hide``: directories the worker must not see (the driver's cwd; /tmp always);
    ``keep``: paths under them it must see, read-only (the lamina sources; the venv
    is always kept);
    ``python_path``: the worker's (so its executors') PYTHONPATH."""
    logs.mkdir(parents=True, exist_ok=True)
    tag = secrets.token_hex(3)
    n = _subnet()
    ns, veth_host, veth_ns = f"lamina-{tag}", f"lmh{tag}", f"lmn{tag}"
    host_ip, worker_ip = f"10.77.{n}.1", f"10.77.{n}.2"
    topo: Topology | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", veth_host, "type", "veth", "peer", "name", veth_ns)
        _run("ip", "link", "set", veth_ns, "netns", ns)
        _run("ip", "addr", "add", f"{host_ip}/24", "dev", veth_host)
        _run("ip", "link", "set", veth_host, "up")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{worker_ip}/24", "dev", veth_ns)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", veth_ns, "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {}),
        }
        s3_port = _free_port(host_ip)
        with open(logs / "s3.log", "wb") as log:
            procs["s3"] = subprocess.Popen(
                [str(VENV / "bin" / "moto_server"), "-H", host_ip, "-p", str(s3_port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**base_env, "HOME": str(logs)},
            )  # fmt: skip
        _wait_port(host_ip, s3_port, procs["s3"], "the S3 server")

        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=AWS_ENV["AWS_ACCESS_KEY_ID"], secret_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=f"{host_ip}:{s3_port}", scheme="http", region="us-east-1",
            allow_bucket_creation=True,
        )  # fmt: skip
        fs.create_dir(BUCKET)

        spark_class = str(spark_home() / "bin" / "spark-class")
        master_port = _free_port(host_ip)
        with open(logs / "master.log", "wb") as log:
            procs["master"] = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", host_ip,
                 "--port", str(master_port), "--webui-port", str(_free_port(host_ip))],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**base_env, "SPARK_LOCAL_IP": host_ip, "HOME": str(logs)},
            )  # fmt: skip
        _wait_port(host_ip, master_port, procs["master"], "the Spark master")
        master_url = f"spark://{host_ip}:{master_port}"

        worker_cmd = [
            spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
            "--host", worker_ip, "--cores", str(cores), "--memory", "2g",
            "--webui-port", "8081",
        ]  # fmt: skip
        worker_env = {
            **base_env,
            **AWS_ENV,
            "HOME": "/tmp",
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": worker_ip,
            "SPARK_WORKER_DIR": "/tmp/worker",
        }
        script = _worker_script(hide, [*keep, VENV], worker_cmd)
        (logs / "worker.sh").write_text(script + "\n")
        with open(logs / "worker.log", "wb") as log:
            procs["worker"] = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private",
                 "sh", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=worker_env,
            )  # fmt: skip
        topo = Topology(ns, host_ip, worker_ip, master_url, f"{host_ip}:{s3_port}", logs, procs)
        deadline = time.monotonic() + 120
        while "Successfully registered with master" not in (logs / "worker.log").read_text(
            errors="replace"
        ):
            if procs["worker"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the namespaced Spark worker did not register\n" + topo.log_tail()
                )
            time.sleep(0.5)
        yield topo
    finally:
        for name in ("worker", "master", "s3"):
            if name in procs:
                _stop(procs[name])
        subprocess.run(["ip", "link", "del", veth_host], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
