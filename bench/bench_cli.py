"""Command line: start-up of ``lamina --help``, ``lamina tables`` and ``lamina query``,
and a 5,000-row CSV ingest with the local engine, each a fresh process (wall time,
median of 5), next to ``python -c pass`` measured in the same run.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir  # noqa: E402

LAMINA = [sys.executable, "-m", "lamina.cli"]


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def write_csv(path: str, rows: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ts", "user", "amount"])
        for i in range(rows):
            w.writerow([f"2024-01-{1 + i % 28:02d}T{i % 24:02d}:00:00", f"u{i % 97}", i * 0.5])


def main(quick: bool = False) -> dict[str, Any]:
    """CLI start-up and a small local ingest, in fresh processes."""
    reps = 3 if quick else 5
    with scratch_dir("cli") as root:
        wh = os.path.join(root, "wh")
        env = {**os.environ, "LAMINA_WAREHOUSE": wh}
        # in the scratch folder: init writes ./.lamina.toml
        subprocess.run([*LAMINA, "init"], check=True, capture_output=True, env=env, cwd=root)
        data = os.path.join(root, "events.csv")
        write_csv(data, 5000)
        create = [*LAMINA, "ingest", "events", data, "--create", "--time-column", "ts"]
        subprocess.run(create, check=True, capture_output=True, env=env)
        times: dict[str, list[float]] = {
            k: [] for k in ("python", "help", "tables", "query", "ingest")
        }
        for _ in range(reps):
            times["python"].append(wall([sys.executable, "-c", "pass"], env))
            times["help"].append(wall([*LAMINA, "--help"], env))
            times["tables"].append(wall([*LAMINA, "tables"], env))
            times["query"].append(wall([*LAMINA, "query", "select count(*) from events"], env))
            ingest = [*LAMINA, "ingest", "events", data, "--engine", "local"]
            times["ingest"].append(wall(ingest, env))
    med = {k: median(v) for k, v in times.items()}
    figures = [
        figure("python -c pass", med["python"], "s", note="interpreter start, reference"),
        figure("lamina --help", med["help"], "s", "< 0.4"),
        figure("lamina tables", med["tables"], "s", "< 0.4"),
        figure("lamina query (count)", med["query"], "s", "< 0.4"),
        figure(
            "lamina ingest 5,000-row CSV (local)", med["ingest"], "s", "< 1", note="whole process"
        ),
    ]
    print_figures(f"CLI: fresh processes, median of {reps}", figures)
    return result("cli", {"repetitions": reps, "csv_rows": 5000}, figures, {"seconds": times})


if __name__ == "__main__":
    cli(main, "cli")
