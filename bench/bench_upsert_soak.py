"""An upsert soak (issue 33 §1 "A soak"): streaming upserts into a merge-on-read table
with compaction running, queried every few seconds; the query overhead over the soak
and whether the queries slow ingestion.

The stream: batches of 10k-50k rows (uniform), 30% of each (after the first) updates of
earlier keys drawn uniformly over all keys so far, the rest new keys; rows as
bench_upsert.py's, each batch stamped in the 10 minutes after the previous one (so
every update wins). It is *offered* at 50,000 rows/s: batch i is due once the rows
before it are due at that rate; a writer behind schedule upserts at once (the backlog
is reported). The table: ``id`` primary key, DAY segments, ``write.update.mode``
merge-on-read (the default), ``compaction.inline = true`` with the default thresholds
(10% superseded): the writer runs, after each upsert, the minor compaction of the
segments past the threshold (Hudi's inline compaction; the services daemon's
``compact_auto`` would run the same compactions in another process).

Two runs of the same stream for the same time (10 minutes; ``--quick``: 60 s), each
on a fresh table: first without queries, then with a query thread. The query thread,
on its own catalog connection, every 2.5 s (or as soon as its previous round is done),
alternately runs bench_upsert's group-by and filtered count through ``cat.sql`` on the
upsert table (timed), notes the snapshot it read (the commit of the plan its view was
built on), then builds the baseline of that snapshot: ``t.to_arrow(as_of=commit)``
appended in one go to a scratch append table (DAY segments, dropped and made again
under the same name each round, so the query text and the cold view match the upsert
table's: the upsert table's view is rebuilt for nearly every query too, as commits
arrive between rounds), and times the same query there through ``cat.sql``. The
answers must be equal. This is the fairer baseline: both sides pay lamina's planning
and view construction, and both run while the writer goes on (DuckDB over bare
Parquet files would leave lamina's per-query costs in the overhead). The baseline's
build (reading and writing every visible row) is the bench's own load; it runs
concurrently with the writer, so the ingestion figure with queries is pessimistic:
its share of the run's wall time is reported.

Figures: median and p95 over the soak of each query's time / its baseline's time;
rows/s achieved with and without queries and their ratio; the writer's busy share.
At the end of each run every visible record is checked (count, and ``v`` of every key
against the last value written). Timed assertions: none; a wrong result raises.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_upsert import (  # noqa: E402
    MINUTE_US,
    QUERIES,
    SCHEMA,
    START_US,
    drop_indexes,
    records,
    same_answer,
)

import lamina  # noqa: E402

RATE = 50_000  # rows/s offered
SIZES = (10_000, 50_000)  # batch rows, uniform
UPDATES = 0.3
EVERY_S = 2.5  # query period
PAIRS = 3  # timed runs per round of each table (the upsert table's at newer snapshots)
PROPERTIES = {"write.update.mode": "merge-on-read", "compaction.inline": "true"}


class Stream:
    """The batches, made as they are due (about a millisecond each), and the last
    ``v`` written per key."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.next_id = 0
        self.batches = 0
        self.v = np.zeros(1 << 20)

    def next(self) -> pa.Table:
        n = int(self.rng.integers(SIZES[0], SIZES[1] + 1))
        old = np.zeros(0, np.int64)
        if self.next_id:
            old = np.unique(self.rng.integers(0, self.next_id, int(n * UPDATES)))
        new = np.arange(self.next_id, self.next_id + n - len(old))
        self.next_id += len(new)
        ids = self.rng.permutation(np.concatenate([old, new]))
        start = START_US + self.batches * 10 * MINUTE_US
        batch = records(ids, start, 10 * MINUTE_US, int(self.rng.integers(1 << 31)))
        self.batches += 1
        while len(self.v) < self.next_id:
            self.v = np.concatenate([self.v, np.zeros(len(self.v))])
        self.v[ids] = batch.column("v").to_numpy()
        return batch


def writer(t: lamina.Table, stream: Stream, duration: float, out: dict[str, Any]) -> None:
    """Upsert the stream as it is offered, for ``duration`` seconds."""
    times, rows, lags = [], 0, []
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter() - t0
        due = rows / RATE
        if now >= duration:
            break
        if due > now:
            time.sleep(min(due - now, duration - now))
            continue
        lags.append(now - due)
        batch = stream.next()
        secs, _ = timed(lambda b=batch: t.upsert(b))  # type: ignore[misc]
        times.append(secs)
        rows += batch.num_rows
    out.update(
        wall_s=time.perf_counter() - t0,
        rows=rows,
        upsert_s=times,
        lag_s=lags,
    )


def querier(wh: str, stop: threading.Event, out: list[dict[str, Any]]) -> None:
    """Every EVERY_S: a timed query on the upsert table, its baseline built and timed."""
    names = list(QUERIES)
    with lamina.connect(warehouse=wh) as cat:
        u = cat.load_table("u")
        engine = cat.sql_engine()
        i = 0
        while not stop.is_set():
            slot = time.perf_counter()
            q = names[i % len(names)]
            sql = QUERIES[q]
            engine._cache.pop("u", None)  # every timed query plans its snapshot anew
            secs_u, got = timed(lambda s=sql: cat.sql(s.format(t="u")))  # type: ignore[misc]
            p = engine._cache["u"][1]  # the plan the query's view was built on
            b0 = time.perf_counter()
            rows = u.to_arrow(as_of=p.seq)
            if "b" in cat.list_tables():
                cat.drop_table("b")
            b = cat.create_table("b", SCHEMA, time_column="ts", segment_granularity="DAY")
            b.append(rows)
            build_s = time.perf_counter() - b0
            ups, base = [secs_u], list[float]()
            for r in range(PAIRS):
                for name in ("b", "u") if r else ("b",):
                    engine._cache.pop(name, None)
                    secs, res = timed(lambda s=sql, n=name: cat.sql(s.format(t=n)))  # type: ignore[misc]
                    (base if name == "b" else ups).append(secs)
                    if name == "b" and r == 0:
                        same_answer(got, res, f"soak query {i} ({q}) at commit {p.commit_id}")
            counts = p.row_counts()
            out.append({
                "at_s": slot, "query": q, "upsert_s": ups, "baseline_s": base,
                "build_s": build_s, "visible": rows.num_rows, "stored": sum(counts.values()),
                "files": len(counts), "vectors": len(p.deletes), "commit": p.commit_id,
            })  # fmt: skip
            i += 1
            stop.wait(max(0.0, slot + EVERY_S - time.perf_counter()))


def soak(duration: float, queries: bool, seed: int) -> dict[str, Any]:
    """One run: a fresh table, the stream for ``duration`` s, with or without queries."""
    stream = Stream(seed)
    w: dict[str, Any] = {}
    q: list[dict[str, Any]] = []
    with scratch_dir("upsert-soak") as root:
        with lamina.connect(warehouse=root) as cat:
            t = cat.create_table(
                "u", SCHEMA, time_column="ts", primary_key=["id"],
                segment_granularity="DAY", properties=PROPERTIES,
            )  # fmt: skip
            t.upsert(stream.next())  # the table exists for the querier's first look
            stop = threading.Event()
            th = threading.Thread(target=querier, args=(root, stop, q), daemon=True)
            if queries:
                th.start()
            writer(t, stream, duration, w)
            stop.set()
            if queries:
                th.join()
            got = t.to_arrow()
            if got.num_rows != stream.next_id:
                raise AssertionError(f"soak: {got.num_rows:,} visible, {stream.next_id:,} keys")
            ids = got.column("id").to_numpy()
            if not np.array_equal(got.column("v").to_numpy(), stream.v[ids]):
                raise AssertionError("soak: a key's visible v is not its last written")
            history = t.history()
            w["commits"] = len(history)
            w["compactions"] = sum(1 for c in history if "COMPACT" in str(c.action))
            w["segments_end"] = len(t.segments())
            w["stored_end"] = t.to_arrow(all_versions=True, columns=["id"]).num_rows
            w["visible_end"] = got.num_rows
        drop_indexes(cat)
    w["queries"] = q
    return w


def main(quick: bool = False) -> dict[str, Any]:
    """Upsert soak: query overhead and ingestion under streaming upserts."""
    duration = 60.0 if quick else 600.0
    runs = {}
    for name, with_q in (("no queries", False), ("queries", True)):
        print(f"{name}: {duration:.0f} s at {RATE:,} rows/s offered ...", flush=True)
        runs[name] = soak(duration, with_q, seed=17)
        r = runs[name]
        print(
            f"  {r['rows'] / r['wall_s']:,.0f} rows/s, {len(r['queries'])} query rounds, "
            f"{r['compactions']} compactions, {r['segments_end']} segments",
            flush=True,
        )
    figs = []
    q = runs["queries"]["queries"]
    for name in (*QUERIES, "all"):
        mine = [x for x in q if name in ("all", x["query"])]
        if not mine:
            continue
        xs = [median(x["upsert_s"]) / median(x["baseline_s"]) for x in mine]
        ms = [1000 * median(x["upsert_s"]) for x in mine]
        figs += [
            figure(f"soak, {name}: median query overhead", median(xs), "x",
                   "<= 1.2" if name == "all" else None,
                   note=f"{len(xs)} rounds; upsert table {median(ms):.0f} ms median, "
                   f"max {max(ms):.0f} ms"),
            figure(f"soak, {name}: p95 query overhead", float(np.quantile(xs, 0.95)), "x",
                   "<= 1.5" if name == "all" else None, note=f"max {max(xs):.2f}x"),
        ]  # fmt: skip
    rate = {n: r["rows"] / r["wall_s"] for n, r in runs.items()}
    for n, r in runs.items():
        lag = r["lag_s"]
        figs.append(
            figure(
                f"soak, rows/s achieved, {n}",
                rate[n],
                "rows/s",
                ">= 50000",
                note=f"{r['rows']:,} rows in {r['wall_s']:.0f} s, {len(r['upsert_s'])} upserts "
                f"(median {1000 * median(r['upsert_s']):.0f} ms, p95 "
                f"{1000 * float(np.quantile(r['upsert_s'], 0.95)):.0f} ms); writer busy "
                f"{sum(r['upsert_s']) / r['wall_s']:.0%}; lag behind the offer max "
                f"{max(lag):.1f} s; {r['compactions']} inline compactions; end: "
                f"{r['visible_end']:,} visible of {r['stored_end']:,} stored rows, "
                f"{r['segments_end']} segments",
            )
        )
    build = sum(x["build_s"] for x in q)
    figs.append(
        figure(
            "soak: rows/s with queries / without",
            rate["queries"] / rate["no queries"],
            "x",
            ">= 0.9",
            note=f"with queries the baselines' builds (to_arrow + append of every visible "
            f"row) took {build:.0f} s of the {runs['queries']['wall_s']:.0f} s run",
        )
    )
    print_figures("Upsert soak (issue 33 §1)", figs)
    params = {
        "duration_s": duration, "rate_offered": RATE, "batch_rows": SIZES,
        "updates": UPDATES, "query_every_s": EVERY_S, "properties": PROPERTIES,
    }  # fmt: skip
    details = {n: {k: v for k, v in r.items()} for n, r in runs.items()}
    return result("upsert_soak", params, figs, details)


if __name__ == "__main__":
    cli(main, "upsert_soak")
