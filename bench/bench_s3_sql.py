"""``cat.sql`` on an S3 warehouse vs the same query on a local one.

1M rows over 10 DAY segments (ts, g int64, v float64), written by lamina's local
writer to a local warehouse and to an S3 one (moto's S3 server, run as a separate
process on this machine: an S3 implementation in Python, so its own speed is in the
figures). Query: a group-by over the whole table. Also ``t.to_arrow`` of the same
columns (pyarrow's own S3 reads, in C++ threads) as the transport's floor.
Informational: no targets (the S3 side measures moto as much as lamina).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir  # noqa: E402

import lamina  # noqa: E402

QUERY = "SELECT g, count(*) AS n, sum(v) AS s FROM e GROUP BY g ORDER BY g"
T0 = 1_699_920_000_000_000


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    """A moto S3 server process and its host:port, with a bucket ``bench``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fs = pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    for _ in range(200):
        try:
            fs.create_dir("bench")
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def main(quick: bool = False) -> dict[str, Any]:
    """cat.sql on S3 (moto) vs a local warehouse."""
    rows, runs = (100_000, 3) if quick else (1_000_000, 9)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rng = np.random.default_rng(0)
    data = pa.table(
        {
            "ts": pa.array(
                T0 + np.sort(rng.integers(0, 10 * 86_400_000_000, rows)), pa.timestamp("us")
            ),
            "g": pa.array(rng.integers(0, 100, rows)),
            "v": pa.array(rng.random(rows)),
        }
    )
    proc, endpoint = _moto()
    times: dict[str, dict[str, list[float]]] = {}
    try:
        with scratch_dir("lamina-bench-s3-") as tmp:
            s3 = f"s3://bench/p?endpoint_override={endpoint}&scheme=http&region=us-east-1"
            for kind, wh in (("local", f"{tmp}/wh"), ("s3", s3)):
                with lamina.connect(catalog=f"sqlite:///{tmp}/{kind}.db", warehouse=wh) as cat:
                    t = cat.create_table("e", data.schema, "ts", "DAY")
                    t.append(data)
                    first = time.perf_counter()
                    cat.sql(QUERY)
                    got = {"first": [time.perf_counter() - first], "sql": [], "to_arrow": []}
                    for _ in range(runs):
                        t0 = time.perf_counter()
                        assert sum(cat.sql(QUERY)["n"].to_pylist()) == rows
                        got["sql"].append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        t.to_arrow(columns=["g", "v"])
                        got["to_arrow"].append(time.perf_counter() - t0)
                    times[kind] = got
    finally:
        proc.terminate()
        proc.wait()
    note = f"median of {runs}"
    figures = [
        figure("cat.sql group-by, local", 1000 * median(times["local"]["sql"]), "ms", note=note),
        figure("cat.sql group-by, S3 (moto)", 1000 * median(times["s3"]["sql"]), "ms", note=note),
        figure("cat.sql group-by, S3 first query", 1000 * times["s3"]["first"][0], "ms"),
        figure(
            "to_arrow(g, v), S3 (moto): the transport",
            1000 * median(times["s3"]["to_arrow"]),
            "ms",
            note=note,
        ),
        figure(
            "cat.sql: S3 / local", median(times["s3"]["sql"]) / median(times["local"]["sql"]), "x"
        ),
    ]
    print_figures(f"cat.sql on S3: {rows:,} rows, 10 DAY segments", figures)
    return result("s3_sql", {"rows": rows, "runs": runs, "query": QUERY}, figures, times)


if __name__ == "__main__":
    cli(main, "s3_sql")
