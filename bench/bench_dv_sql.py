"""The SQL path of merge-on-read tables (issue 33 §1): how ``cat.sql`` hides the rows
deletion vectors hide, against an append table holding exactly the visible rows.

Three layouts of an upsert table (bench_upsert.py's rows and queries), each hiding 10%
of its stored rows: **spread**, one upsert updating rows of all 30 daily files (every
file has a vector); **few files**, one upsert updating rows of 4 of the 30 files only
(each hides most of its rows); **micro-batches**, the table streamed in 10k-row upserts
of which 10% update earlier keys (100 files at 1M rows, each with a vector). At 1M
stored rows (``--quick``) and 5M.

For each, on one DuckDB connection, views of the same plan:

- *old*: the representation before this bench (every file in one scan, left-joined to
  a table of bitmaps on ``file_index``, ``get_bit`` at ``file_row_number``);
- *new*: ``view_sql`` as lamina uses it (files without a vector scanned apart with no
  filter; a file hiding at most ``FEW_DELETES`` of its rows by an anti join on its
  hidden positions, more by the bitmap, inner-joined);
- *positions* and *bitmap*: ``view_sql`` with every vectored file forced to one kind;
- *append*: the append table of the visible rows (one ``t.append``), and for the
  micro-batches also one written in the same micro-batches (the same small files less
  the hidden rows: DuckDB's own cost of many small files, which compaction, not the
  SQL path, removes).

Then ``cat.sql`` on the upsert and append tables (the user's path, as bench_upsert's
query-overhead figure). Interleaved runs, medians; every answer compared with the
append table's. Last, the crossover of the two representations: positions / bitmap
with 0.1%, 1% and 5% of each file of the spread layout hidden (synthetic vectors).
Timed assertions: none; a wrong answer raises.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_upsert import (  # noqa: E402
    DAY_US,
    DAYS,
    MINUTE_US,
    QUERIES,
    SCHEMA,
    START_US,
    base_and_batch,
    drop_indexes,
    records,
    same_answer,
)

import lamina  # noqa: E402
from lamina.core.scan import ScanPlan  # noqa: E402
from lamina.engines.duckdb_views import FEW_DELETES, _files, _mask_table, view_sql  # noqa: E402
from lamina.read import plan  # noqa: E402

BATCH = 10_000  # rows of a micro-batch
LAYOUTS = {
    "spread": "one upsert over all 30 files",
    "few files": "one upsert over 4 of 30 files",
    "micro-batches": "10k-row upserts, 10% updates",
}
SHARES = (0.001, 0.01, 0.05)  # hidden share of each file, for the crossover
VIEWS = {  # the views of the upsert table timed against the append table's, and labels
    "old": "old SQL",
    "new": "new SQL",
    "positions": "positions only",
    "bitmap": "bitmaps only",
}


def spread(rows: int) -> list[pa.Table]:
    """A base of 90% of ``rows`` over 30 days, then a batch updating 10% of its ids."""
    base, batch = base_and_batch(rows - rows // 10, rows // 10, 0, seed=3)
    return [base, batch]


def few_files(rows: int) -> list[pa.Table]:
    """A base of 90% of ``rows``, then a batch updating 10% of them, all from 4 days."""
    hidden = rows // 10
    rng = np.random.default_rng(5)
    base = records(np.arange(rows - hidden), START_US, DAYS * DAY_US, 5)
    day = (base.column("ts").cast(pa.int64()).to_numpy() - START_US) // DAY_US
    pool = np.flatnonzero(np.isin(day, [3, 11, 19, 27]))
    ids = rng.permutation(rng.choice(pool, hidden, replace=False))
    return [base, records(ids, START_US + DAYS * DAY_US, DAY_US, 6)]


def micro_batches(rows: int) -> list[pa.Table]:
    """``rows`` / BATCH batches 10 minutes apart; 10% of each after the first updates
    earlier keys."""
    rng = np.random.default_rng(7)
    out, next_id = [], 0
    for b in range(rows // BATCH):
        n_upd = BATCH // 10 if next_id else 0
        old = rng.choice(next_id, n_upd, replace=False) if n_upd else np.zeros(0, np.int64)
        ids = np.concatenate([old, np.arange(next_id, next_id + BATCH - n_upd)])
        next_id += BATCH - n_upd
        out.append(records(rng.permutation(ids), START_US + b * 10 * MINUTE_US,
                           10 * MINUTE_US, 7 + b))  # fmt: skip
    return out


MAKERS: dict[str, Callable[[int], list[pa.Table]]] = {
    "spread": spread,
    "few files": few_files,
    "micro-batches": micro_batches,
}


def visible_parts(batches: list[pa.Table]) -> list[pa.Table]:
    """Each batch's rows still visible once all are upserted (every later record of a
    key is newer: the last batch holding a key holds its latest record)."""
    last: dict[int, int] = {}
    for i, b in enumerate(batches):
        last.update(dict.fromkeys(b.column("id").to_pylist(), i))
    out = []
    for i, b in enumerate(batches):
        ids = b.column("id").to_numpy()
        keep = np.fromiter((last[x] == i for x in ids.tolist()), bool, len(ids))
        out.append(b.filter(pa.array(keep)))
    return out


def old_view_sql(con: duckdb.DuckDBPyConnection, p: ScanPlan) -> str:
    """The relation as lamina wrote it before: one scan of every file, left-joined to
    the bitmaps of the files that hide rows."""
    assert p.all_whole
    paths = [path for path, _ in p.reads()]
    masked = [(i, path) for i, path in enumerate(paths) if path in p.deletes]
    mask = _mask_table(con, "old", p, masked)
    return (
        f"SELECT p.* FROM read_parquet({_files(paths)}, hive_partitioning=false) AS p "
        f"LEFT JOIN {mask} AS m ON p.file_index = m.file "
        "WHERE m.keep IS NULL OR get_bit(m.keep, p.file_row_number::INTEGER) = 1"
    )


def kinds_of(p: ScanPlan, few: float = FEW_DELETES) -> dict[str, int]:
    """How many files ``view_sql`` reads each way."""
    counts = p.row_counts()
    out = {"no vector": 0, "positions": 0, "bitmap": 0, "all hidden": 0}
    for path, n in counts.items():
        hidden = len(p.deletes.get(path, ()))
        kind = ("no vector" if not hidden else "all hidden" if hidden == n
                else "positions" if hidden <= few * n else "bitmap")  # fmt: skip
        out[kind] += 1
    return out


class Times:
    """Wall and CPU seconds (this process's, DuckDB's threads included) of calls."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def ms(self) -> str:
        return f"{1000 * median(self.wall):.1f} ms"


def interleaved(runs: int, calls: dict[str, Callable[[], Any]]) -> dict[str, Times]:
    """Times of each call, ``runs`` rounds, each round every call in rotating order."""
    names = list(calls)
    times = {n: Times() for n in names}
    for i in range(runs):
        for n in names[i % len(names) :] + names[: i % len(names)]:
            c0 = time.process_time()
            times[n].wall.append(timed(calls[n])[0])
            times[n].cpu.append(time.process_time() - c0)
    return times


def paired(num: list[float], den: list[float]) -> float:
    """The median over rounds of one round's ratio: a round's calls ran back to back, so
    a busy moment of the machine (shared with other work) slows both alike."""
    return median([a / b for a, b in zip(num, den, strict=True)])


def overhead(
    metric: str, num: Times, den: Times, target: str | None = None, note: str = ""
) -> dict[str, Any]:
    """A figure: ``num`` / ``den`` in wall time, the CPU time's ratio in the note."""
    cpu = paired(num.cpu, den.cpu)
    text = f"{num.ms()} vs {den.ms()}; CPU {cpu:.2f}x" + (f"; {note}" if note else "")
    return figure(metric, paired(num.wall, den.wall), "x", target, note=text)


def layout_at(layout: str, stored: int, runs: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    batches = MAKERS[layout](stored)
    micro = layout == "micro-batches"
    tag = f"{layout}, {stored // 1_000_000}M"
    with scratch_dir("dv-sql") as root, lamina.connect(warehouse=root) as cat:
        u = cat.create_table("u", SCHEMA, time_column="ts", primary_key=["id"],
                             segment_granularity="DAY")  # fmt: skip
        for b in batches:
            u.upsert(b)
        latest = u.to_arrow()
        a = cat.create_table("a", SCHEMA, time_column="ts", segment_granularity="DAY")
        a.append(latest)
        if micro:  # the same micro-batches, less the rows hidden at the end
            s = cat.create_table("s", SCHEMA, time_column="ts", segment_granularity="DAY")
            for part in visible_parts(batches):
                s.append(part)
        plans = {n: plan(cat.context, n) for n in ("u", "a", "s" if micro else "a")}
        pu = plans["u"]
        details: dict[str, Any] = {
            "stored rows": pu.row_count,
            "visible rows": latest.num_rows,
            "files": len(pu.row_counts()),
            "files by kind": kinds_of(pu),
        }
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        views = {
            "old": old_view_sql(con, pu),
            "new": view_sql(con, "u", pu),
            "positions": view_sql(con, "u", pu, few=1.0),
            "bitmap": view_sql(con, "u", pu, few=0.0),
            "append": view_sql(con, "a", plans["a"]),
        }
        if micro:
            views["same files"] = view_sql(con, "s", plans["s"])
        for v, sql in views.items():
            con.execute(f'CREATE VIEW "{v}" AS {sql}')
        figs: list[dict[str, Any]] = []
        for q, sql in QUERIES.items():
            want = cat.sql(sql.format(t="a"))
            same_answer(cat.sql(sql.format(t="u")), want, f"{tag} {q}: cat.sql")
            calls: dict[str, Callable[[], Any]] = {
                "cat.sql upsert": functools.partial(cat.sql, sql.format(t="u")),
                "cat.sql append": functools.partial(cat.sql, sql.format(t="a")),
            }
            for v in views:
                text = sql.format(t=f'"{v}"')
                same_answer(con.sql(text).to_arrow_table(), want, f"{tag} {q}: {v}")
                calls[v] = functools.partial(lambda c, t: c.sql(t).to_arrow_table(), con, text)
            t = interleaved(runs, calls)
            details[q] = {n: {"wall_ms": 1000 * median(x.wall), "cpu_ms": 1000 * median(x.cpu)}
                          for n, x in t.items()}  # fmt: skip
            figs.append(
                overhead(
                    f"cat.sql {q}, {tag}: upsert / append",
                    t["cat.sql upsert"],
                    t["cat.sql append"],
                    "<= 1.5",
                    f"median of {runs} rounds",
                )  # fmt: skip
            )
            for v, label in VIEWS.items():
                figs.append(overhead(f"  {label} / append, one connection", t[v], t["append"]))
            if micro:
                figs.append(
                    overhead(
                        "  new SQL / append in the same micro-batches",
                        t["new"],
                        t["same files"],
                        note="the small files' own cost is DuckDB's",
                    )  # fmt: skip
                )
        con.close()
        if layout == "spread":
            figs += crossover(pu, runs, tag, details)
    drop_indexes(cat)
    kinds = details["files by kind"]
    print(f"  {tag}: {details['files']} files ({kinds}), {details['stored rows']:,} stored rows")
    return figs, details


def crossover(pu: ScanPlan, runs: int, tag: str, details: dict[str, Any]) -> list[dict[str, Any]]:
    """Positions / bitmap with SHARES of each vectored file hidden (synthetic vectors
    on the layout's files): where the anti join stops paying."""
    rng = np.random.default_rng(11)
    counts = pu.row_counts()
    figs = []
    for share in SHARES:
        p = ScanPlan(pu.table, pu.seq, pu.commit_id, pu.tasks)
        p.deletes = {
            f: np.sort(rng.choice(counts[f], max(1, int(counts[f] * share)), replace=False))
            for f in pu.deletes
        }
        con = duckdb.connect()
        for v, few in (("positions", 1.0), ("bitmap", 0.0)):
            con.execute(f'CREATE VIEW "{v}" AS {view_sql(con, "u", p, few=few)}')
        for q, sql in QUERIES.items():
            t = interleaved(runs, {
                v: functools.partial(lambda c, s: c.sql(s).to_arrow_table(), con,
                                     sql.format(t=f'"{v}"'))
                for v in ("positions", "bitmap")
            })  # fmt: skip
            details.setdefault("crossover", {})[f"{share:.1%} {q}"] = {
                v: {"wall_ms": 1000 * median(x.wall), "cpu_ms": 1000 * median(x.cpu)}
                for v, x in t.items()
            }
            figs.append(
                overhead(
                    f"  {share:.1%} of each file hidden, {q}: positions / bitmap",
                    t["positions"],
                    t["bitmap"],
                    note=f"{tag} files",
                )  # fmt: skip
            )
        con.close()
    return figs


def main(quick: bool = False) -> dict[str, Any]:
    """Merge-on-read SQL: the representation of hidden rows, against an append table."""
    sizes = (1_000_000,) if quick else (1_000_000, 5_000_000)
    runs = 9 if quick else 15
    figures: list[dict[str, Any]] = []
    details: dict[str, Any] = {"duckdb": duckdb.__version__, "few_deletes": FEW_DELETES}
    for stored in sizes:
        for layout in LAYOUTS:
            print(f"{layout}, {stored:,} stored rows ...", flush=True)
            figs, det = layout_at(layout, stored, runs)
            figures += figs
            details[f"{layout}, {stored:,}"] = det
    print_figures("Merge-on-read SQL (issue 33 §1)", figures)
    params = {"sizes": list(sizes), "runs": runs, "layouts": LAYOUTS, "hidden": 0.1}
    return result("dv_sql", params, figures, details)


if __name__ == "__main__":
    cli(main, "dv_sql")
