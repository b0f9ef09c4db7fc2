"""Row-level changes (issue 34 §2 "Benchmarks"): ``t.delete`` of 1% of 10M rows by a
predicate, ``t.update`` of 1%, and ``t.merge`` of 100k rows into 1M (half updates of
existing ids, half new ids: update all, insert all), each against deltalake
(``DeltaTable.delete`` / ``update`` / ``merge``) and DuckLake (``DELETE`` / ``UPDATE`` /
``MERGE INTO``) in one run. ``--quick``: the delete and update over 1M rows.

Rows: ``id`` (0..n-1, shuffled), ``ts`` over 30 days, ``name`` (100 values), ``qty``,
``price``. The predicate ``id % 100 = 7`` picks 1% of the rows, spread over every
file. lamina's table is a plain table of DAY segments in its default
``write.update.mode`` (merge-on-read: deletion vectors); copy-on-write is measured too,
for reference. Each system loads the same rows into a fresh table per sample (not
timed), then the operation is timed alone, in this process (DuckLake: in its own
interpreter, see bench_upsert.ducklake_python) after a warm-up of each system's
operations on a small table; samples rotate their order; the
figure is the median of each system's samples, and the ratio lamina / other of the
medians. Every result is checked (row counts, and a sum over the changed column);
timed assertions: none — a wrong result raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_upsert import ducklake_python  # noqa: E402

import lamina  # noqa: E402

DAY_US = 86_400_000_000
T0_US = 1_704_067_200_000_000  # 2024-01-01
PREDICATE = "id % 100 = 7"
GOALS = {"deltalake": "<= 0.5", "DuckLake": "<= 1.0"}


def rows(n: int, id0: int = 0, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n) + id0
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array(T0_US + rng.integers(0, 30 * DAY_US, n), pa.timestamp("us")),
            "name": pa.array([f"name{i % 100}" for i in range(n)]),
            "qty": pa.array(rng.integers(0, 1000, n), pa.int64()),
            "price": pa.array(rng.random(n) * 100, pa.float64()),
        }
    )


def merge_source(base: pa.Table, n: int) -> pa.Table:
    """``n`` rows: half updates of existing ids, half new ids."""
    old = base.slice(0, n // 2)
    old = old.set_column(4, "price", pc.add(old.column("price"), 1000.0))
    new = rows(n - n // 2, id0=base.num_rows * 10, seed=2)
    return pa.concat_tables([old, new])


# -- the operations, per system: (load, run) on a fresh directory -----------------------------


def lamina_op(op: str, base: pa.Table, src: pa.Table | None, root: str, mode: str) -> float:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    try:
        t = cat.create_table(
            "t", base.schema, time_column="ts", segment_granularity="DAY",
            properties={"write.update.mode": mode},
        )  # fmt: skip
        t.append(base)
        run: Callable[[], Any] = {
            "delete": lambda: t.delete(PREDICATE),
            "update": lambda: t.update(PREDICATE, set={"price": "price * 2"}),
            "merge": lambda: (
                t.merge(src, on="id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            ),
        }[op]
        secs, _ = timed(run)
        check(op, t.to_arrow(columns=["id", "price"]), base, src, "lamina")
        return secs
    finally:
        cat.close()


def delta_op(op: str, base: pa.Table, src: pa.Table | None, root: str) -> float:
    from deltalake import DeltaTable, write_deltalake

    path = os.path.join(root, "delta")
    write_deltalake(path, base)
    dt = DeltaTable(path)
    run: Callable[[], Any] = {
        "delete": lambda: dt.delete(PREDICATE),
        "update": lambda: dt.update(predicate=PREDICATE, updates={"price": "price * 2"}),
        "merge": lambda: (
            dt.merge(src, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
    }[op]
    secs, _ = timed(run)
    check(op, DeltaTable(path).to_pyarrow_table(columns=["id", "price"]), base, src, "deltalake")
    return secs


DUCKLAKE_SCRIPT = r"""
import glob, json, sys, time
import duckdb
con = duckdb.connect()
try:
    con.execute("LOAD ducklake")
except duckdb.Error:
    import duckdb_extension_ducklake as ext
    path = glob.glob(ext.__path__[0] + "/extensions/*/ducklake.duckdb_extension")[0]
    con.execute("LOAD '%s'" % path)
root, base, src, out, sql = sys.argv[1:6]
con.execute("ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/')" % (root, root))
con.execute("USE lake")
con.execute("CREATE TABLE t AS SELECT * FROM read_parquet('%s')" % base)
if src != "-":
    con.execute("CREATE TEMP TABLE s AS SELECT * FROM read_parquet('%s')" % src)
t0 = time.perf_counter()
con.execute(sql)
secs = time.perf_counter() - t0
con.execute("COPY (SELECT id, price FROM t) TO '%s' (FORMAT parquet)" % out)
print(json.dumps({"seconds": secs}))
"""

DUCKLAKE_SQL = {
    "delete": f"DELETE FROM t WHERE {PREDICATE}",
    "update": f"UPDATE t SET price = price * 2 WHERE {PREDICATE}",
    "merge": "MERGE INTO t USING s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE WHEN NOT MATCHED THEN INSERT",
}


def ducklake_op(python: str, op: str, base: pa.Table, src: pa.Table | None, root: str) -> float:
    paths = [os.path.join(root, f) for f in ("base.parquet", "src.parquet", "out.parquet")]
    pq.write_table(base, paths[0])
    if src is not None:
        pq.write_table(src, paths[1])
    lake = os.path.join(root, "lake")
    os.makedirs(lake)
    args = [lake, paths[0], paths[1] if src is not None else "-", paths[2], DUCKLAKE_SQL[op]]
    proc = subprocess.run(
        [python, "-c", DUCKLAKE_SCRIPT, *args], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"DuckLake {op} failed: {proc.stderr.strip()[-400:]}")
    check(op, pq.read_table(paths[2]), base, src, "DuckLake")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def check(op: str, got: pa.Table, base: pa.Table, src: pa.Table | None, who: str) -> None:
    """The table after ``op`` holds the rows it should (counts, and the price sum)."""
    ids = base.column("id").to_numpy()
    price = base.column("price").to_numpy()
    hit = ids % 100 == 7
    if op == "delete":
        want_n, want_sum = int((~hit).sum()), float(price[~hit].sum())
    elif op == "update":
        want_n, want_sum = len(ids), float(price.sum() + price[hit].sum())
    else:
        assert src is not None
        half = src.num_rows // 2
        want_n = len(ids) + src.num_rows - half
        want_sum = float(price.sum() + 1000.0 * half + pc.sum(src.slice(half)["price"]).as_py())
    n, total = got.num_rows, float(pc.sum(got.column("price")).as_py())
    if n != want_n or abs(total - want_sum) > 1e-6 * max(1.0, abs(want_sum)):
        raise AssertionError(f"{who} {op}: {n} rows, price sum {total}; want {want_n}, {want_sum}")


def warm_up() -> None:
    """Each system's operations once on a small table: imports, DuckDB's database and
    deltalake's runtime are there before the timed runs (a warm process)."""
    small = rows(1000)
    src = merge_source(small, 100)
    for op in ("delete", "update", "merge"):
        with scratch_dir("rowlevel-warm") as d:
            lamina_op(op, small, src if op == "merge" else None, d, "merge-on-read")
        with scratch_dir("rowlevel-warm") as d:
            delta_op(op, small, src if op == "merge" else None, d)


def main(quick: bool = False) -> dict[str, Any]:
    """Row-level delete, update and merge against deltalake and DuckLake."""
    n = 1_000_000 if quick else 10_000_000
    merge_n, merge_into = 100_000, 1_000_000
    reps = 1 if quick else 3
    python, dl_note = ducklake_python()
    print(f"  DuckLake: {dl_note if python else 'skipped: ' + dl_note}")
    warm_up()
    figures, details = [], {"rows": n, "merge": [merge_n, merge_into], "reps": reps}
    for op in ("delete", "update", "merge"):
        base = rows(merge_into if op == "merge" else n)
        src = merge_source(base, merge_n) if op == "merge" else None
        runners: dict[str, Callable[[str], float]] = {
            "lamina": lambda d, op=op, base=base, src=src: lamina_op(
                op, base, src, d, "merge-on-read"
            ),
            "lamina copy-on-write": lambda d, op=op, base=base, src=src: lamina_op(
                op, base, src, d, "copy-on-write"
            ),
            "deltalake": lambda d, op=op, base=base, src=src: delta_op(op, base, src, d),
        }
        if python is not None:
            runners["DuckLake"] = lambda d, op=op, base=base, src=src: ducklake_op(
                python, op, base, src, d
            )
        times: dict[str, list[float]] = {k: [] for k in runners}
        names = list(runners)
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                with scratch_dir("rowlevel") as d:
                    times[name].append(runners[name](d))
        med = {k: median(v) for k, v in times.items()}
        what = {
            "delete": f"delete 1% of {n:,} rows",
            "update": f"update 1% of {n:,} rows",
            "merge": f"merge {merge_n:,} rows into {merge_into:,}",
        }[op]
        for name, secs in med.items():
            figures.append(figure(f"{what}: {name}", secs, "s"))
        for other, goal in GOALS.items():
            if other in med:
                figures.append(
                    figure(f"{what}: lamina / {other}", med["lamina"] / med[other], "x", goal)
                )
        details[op] = times
    print_figures("row-level changes", figures)
    return result("rowlevel", {"quick": quick}, figures, details)


if __name__ == "__main__":
    cli(main, "rowlevel")
