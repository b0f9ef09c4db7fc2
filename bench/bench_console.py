"""The web console at scale: the tables page with 1,000 tables and the timeline of a
table with 1,000,000 segments — server time per page and bytes sent.

The big table's catalog rows are made directly, as bench_planning.py makes them
(100k hourly chunks x 10 partitions; no files: the pages never open them). The 1,000
tables are created through lamina, each with one segment row. Pages are fetched
in-process through Starlette's test client (the server's time: routing, catalog
queries, aggregation, rendering), median of the runs after a first view. The server
groups the timelines of its largest tables when it starts, in the background (timed
apart), and keeps them and every table's totals caught up with each commit's changes.
Then, as updates stream in: one append, one view of the whole timeline, five times.
Last, each page in chromium (when there is one): until interactive, and loaded.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Any

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_planning import HOUR_US, START_US, TABLE, populate  # noqa: E402

import lamina  # noqa: E402
from lamina.core.interval import format_us  # noqa: E402
from lamina.meta.tables import get_table  # noqa: E402
from lamina.rest import create_app  # noqa: E402

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient


def fetch(client: Any, url: str, runs: int) -> tuple[float, int]:
    """Median seconds and the bytes of the response body."""
    times = []
    size = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        r = client.get(url)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        size = len(r.content)
    return median(times), size


CHROMIUM = os.environ.get("LAMINA_CHROMIUM", "/usr/bin/chromium")


def browser_timings(app: Any, pages: dict[str, str], runs: int) -> dict[str, tuple[float, float]]:
    """Per page, in Debian's chromium (Playwright drives it; nothing is downloaded)
    against the app served by uvicorn: median seconds from the navigation's start
    until the page is interactive (DOMContentLoaded ended: its deferred script ran)
    and until it loaded. Empty when chromium or Playwright is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {}
    if not os.path.exists(CHROMIUM):
        return {}
    import socket
    import threading

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    out: dict[str, tuple[float, float]] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1366, "height": 800})
            for label, url in pages.items():
                ready, loaded = [], []
                for _ in range(runs + 1):  # the first: a cold cache of the browser's
                    page.goto(base + url, wait_until="load")
                    nav = page.evaluate(
                        "JSON.stringify(performance.getEntriesByType('navigation')[0])"
                    )
                    got = json.loads(nav)
                    ready.append(got["domContentLoadedEventEnd"] / 1000)
                    loaded.append(got["loadEventEnd"] / 1000)
                out[label] = (median(ready[1:]), median(loaded[1:]))
            browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    return out


def main(quick: bool = False) -> dict[str, Any]:
    """Console pages: tables page (1,000 tables), timeline (1M segments)."""
    n_tables = 200 if quick else 1000
    chunks = 10_000 if quick else 100_000
    parts = 10
    runs = 5
    schema = pa.schema([("ts", pa.timestamp("us")), ("v", pa.int64())])
    with scratch_dir("console") as root:
        cat = lamina.connect(warehouse=os.path.join(root, "wh"))
        cat.create_table(TABLE, schema, time_column="ts", segment_granularity="HOUR")
        insert_s, inserted = timed(lambda: populate(cat, chunks, parts))
        one = pa.table({"ts": pa.array([0], pa.timestamp("us")), "v": [1]})
        make_s, _ = timed(
            lambda: [
                cat.create_table(f"t{i:04d}", schema, "ts", "DAY").append(one)
                for i in range(n_tables - 1)
            ]
        )
        print(f"  {inserted:,} segment rows in {insert_s:.1f}s; {n_tables} tables in {make_s:.1f}s")
        week = f"{format_us(START_US)}/{format_us(START_US + 7 * 24 * HOUR_US)}"
        hour = f"{format_us(START_US)}/{format_us(START_US + HOUR_US)}"
        pages = {
            "tables page (50 of N, sorted by rows)": "/?sortBy=rows&order=desc",
            "GET /tableSummaries?limit=500": "/tableSummaries?limit=500",
            "timeline page, whole table": f"/console/tables/{TABLE}/timeline",
            "GET /tables/big/timeline (whole table)": f"/tables/{TABLE}/timeline",
            "timeline page, one week by the hour": (
                f"/console/tables/{TABLE}/timeline?interval={week}"
            ),
            "timeline page + one hour's segments": (
                f"/console/tables/{TABLE}/timeline?interval={week}&chunk={hour}"
            ),
        }
        measured: dict[str, tuple[float, int]] = {}
        first: dict[str, float] = {}
        streaming: list[float] = []
        big = cat.load_table(TABLE)
        # its rows name no files (see above): appends skip the check that they exist
        cat.context.checked.add(get_table(cat.context.db, TABLE).id)
        started = time.perf_counter()
        with TestClient(create_app(cat, token="")) as client:
            client.app.state.warmed.wait()  # type: ignore[attr-defined]
            warm_s = time.perf_counter() - started
            client.get("/openapi.json")  # imports, routes
            for label, url in pages.items():
                first[label], _ = timed(lambda url=url: client.get(url))  # reads every row
                measured[label] = fetch(client, url, runs)
            whole = pages["timeline page, whole table"]
            for i in range(runs):  # a commit between views: the page catches up
                at = START_US + (chunks + i) * HOUR_US
                big.append(pa.table({"ts": pa.array([at], pa.timestamp("us")), "v": [i]}))
                streaming.append(fetch(client, whole, 1)[0])
        shown = {k: v for k, v in pages.items() if "page" in k}
        in_browser = browser_timings(create_app(cat, token=""), shown, runs)
        cat.close()
    figures = []
    for label, (secs, size) in measured.items():
        target = "< 0.2" if "page" in label else None
        figures.append(figure(label, secs, "s", target, note=f"{size:,} bytes sent"))
        figures.append(figure(f"  bytes sent: {label}", size, "B"))
        figures.append(figure(f"  first view after the start: {label}", first[label], "s"))
    figures.append(
        figure(
            "server start: the largest timelines grouped in the background",
            warm_s,
            "s",
            note="before it, a first view waits for the grouping",
        )
    )
    for label, (interactive, loaded) in in_browser.items():
        figures.append(figure(f"in chromium, interactive: {label}", interactive, "s", "< 1"))
        figures.append(figure(f"  in chromium, loaded: {label}", loaded, "s"))
    if not in_browser:
        print("  (no chromium or Playwright: the in-browser times are not measured)")
    figures.append(
        figure(
            "timeline page, whole table, one commit after the last view",
            median(streaming),
            "s",
            "< 0.2",
            note="catches up with the commit's changes",
        )
    )
    print_figures(f"Console: {n_tables:,} tables, {inserted:,} segments", figures)
    return result(
        "console",
        {"tables": n_tables, "segments": inserted, "runs": runs},
        figures,
        {
            "insert_s": insert_s,
            "tables_s": make_s,
            "pages": measured,
            "first": first,
            "streaming": streaming,
            "browser": in_browser,
            "warm_s": warm_s,
        },
    )


if __name__ == "__main__":
    cli(main, "console")
