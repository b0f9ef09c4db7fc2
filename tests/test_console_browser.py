"""The web console in a real browser: Debian's chromium driven by Playwright (never a
browser Playwright downloads). One server and one browser page for the module; every
page is screenshotted (into a temporary folder, or docs/console/ — committed, shown in
the README — when ``LAMINA_CONSOLE_SCREENSHOTS=1``, so that a test run leaves the
checkout clean).

Skipped, with the reason, when chromium or Playwright is missing; under CI=true that
fails instead (.ci/run installs chromium)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.rest import create_app
from tests.helpers import SCHEMA, events

CHROMIUM = os.environ.get("LAMINA_CHROMIUM", "/usr/bin/chromium")
DOCS_SHOTS = Path(__file__).resolve().parent.parent / "docs" / "console"
SHOTS = (
    DOCS_SHOTS
    if os.environ.get("LAMINA_CONSOLE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "lamina-console-shots"
)
TOKEN = "browser-token"


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright; never playwright install)"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lamina.Catalog]:
    """ev: a consistent-push day table, day 2 refreshed (its old version overshadowed);
    small: eight small appends into one day (compaction pending); odd: names and
    values holding markup."""
    c = lamina.connect(warehouse=str(tmp_path_factory.mktemp("console") / "wh"))
    ev = c.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)
    with ev.push() as p:
        p.append(events(days=3, per_day=50))
    ev.refresh(events(days=1, per_day=7, start="2024-01-02", seed=3), "2024-01-02/2024-01-03")
    small = c.create_table("small", SCHEMA, "ts", "DAY")
    for i in range(8):
        small.append(events(days=1, per_day=4, start="2024-02-01", seed=i))
    keyed = pa.schema([("ts", pa.timestamp("us")), pa.field("key", pa.string(), False)])
    up = c.create_table("up", keyed, "ts", "DAY", primary_key="key")
    ts = pa.array([0, 1, 2], pa.timestamp("us"))
    up.upsert(pa.table([ts, pa.array(["a", "b", "c"])], schema=keyed))
    up.upsert(pa.table([ts.slice(0, 1), pa.array(["a"])], schema=keyed))
    odd_schema = pa.schema([("ts", pa.timestamp("us")), ("<b>\"q'", pa.string())])
    odd = c.create_table("odd", odd_schema, "ts", "DAY", properties={"note": MARKUP})
    odd.append(
        pa.table({"ts": pa.array([0], pa.timestamp("us")), "<b>\"q'": [MARKUP]}, schema=odd_schema)
    )
    yield c
    c.close()


MARKUP = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">\''


@pytest.fixture(scope="module")
def server(cat: lamina.Catalog) -> Iterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(create_app(cat, token=TOKEN), log_level="warning", lifespan="off")
    )
    th = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not srv.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(10)
    sock.close()


class Browser:
    """One chromium page; the console messages and page errors it saw."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error",) else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def go(self, path: str) -> Any:
        self.errors.clear()
        r = self.page.goto(self.base + path)
        assert r is not None and r.status == 200, path
        return self.page

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def pwned(self) -> Any:
        return self.page.evaluate("window.pwned")


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[Browser]:
    why = _unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true runs the browser tests)")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = b.new_page(viewport={"width": 1366, "height": 800})
        page.set_default_timeout(15_000)
        yield sign_in(Browser(page, server))
        b.close()


def sign_in(b: Browser) -> Browser:
    """The server keeps reads behind its token: the first page sends the browser to
    the sign-in form, whose token sets the reads cookie and stays in the tab."""
    page = b.go("/console/tables/ev/timeline")
    assert "/console/login?next=" in page.url
    page.fill("#login-token", "not-it")
    page.click("#login-form button[type=submit]")
    assert "not this server's token" in page.inner_text("#login-error")
    assert b.errors == [
        "Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    b.errors.clear()
    page.fill("#login-token", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(b.base + "/console/tables/ev/timeline")
    assert page.evaluate("sessionStorage.getItem('lamina-console-token')") == TOKEN
    assert not b.errors, b.errors
    return b


def set_token(b: Browser) -> None:
    b.page.fill("#token", TOKEN)


PAGES = [
    ("tables", "/"),
    ("timeline", "/console/tables/ev/timeline"),
    ("commits", "/console/tables/ev/commits"),
    ("lineage", "/console/tables/ev/lineage"),
    ("locks", "/console/tables/ev/locks"),
    ("compaction", "/console/tables/small/compaction"),
    ("changes", "/console/tables/ev/changes?after=1&until=2"),
    ("keys", "/console/tables/up/keys"),
    ("sql", "/console/sql"),
]


def test_each_page_loads_without_console_errors(browser: Browser) -> None:
    for name, path in PAGES:
        page = browser.go(path)
        assert page.locator("h1").count() == 1
        assert "Shows" in page.inner_text("main") or "Runs" in page.inner_text("main")
        assert browser.errors == [], (path, browser.errors)
        browser.shot(name)
    browser.page.set_viewport_size({"width": 2200, "height": 900})  # a wide monitor
    browser.go("/console/tables/ev/timeline")
    browser.shot("timeline-wide")
    browser.page.set_viewport_size({"width": 1366, "height": 800})


def test_timeline_shows_the_overwritten_day_overshadowed(browser: Browser) -> None:
    page = browser.go("/console/tables/ev/timeline")
    day2 = page.locator('#timeline a.bucket[aria-label^="2024-01-02"]')
    assert day2.locator("rect.cell.overshadowed").count() == 1
    assert day2.locator("rect.cell.visible").count() == 1
    day1 = page.locator('#timeline a.bucket[aria-label^="2024-01-01"]')
    assert day1.locator("rect.cell.overshadowed").count() == 0
    with page.expect_navigation():  # from the keyboard: the chunk's segments
        day2.press("Enter")
    assert [r.inner_text() for r in page.locator("#segments tbody td:last-child").all()] == [
        "visible"
    ]
    page.check('input[name="history"]')
    with page.expect_navigation():
        page.click('button[type="submit"]')
    states = [r.inner_text() for r in page.locator("#segments tbody td:last-child").all()]
    assert states[0] == "visible" and len(states) == 2 and states[1] != "visible"
    browser.shot("timeline-chunk")
    assert browser.errors == []


def test_a_commit_opens_the_table_as_of_it_and_its_changes(
    browser: Browser, cat: lamina.Catalog
) -> None:
    page = browser.go("/console/tables/ev/commits")
    with page.expect_navigation():  # the refresh of day 2
        page.click('#commits tr:has-text("REFRESH") a:has-text("Changes")')
    assert page.inner_text("#feed-counts") == "7 inserted, 50 deleted"
    page = browser.go("/console/tables/ev/commits")
    with page.expect_navigation():  # the end of the push: version 3, before the refresh
        page.click('#commits tr:has-text("END_REPLACE") a:has-text("Query")')
    query = page.input_value("#query")
    assert query == 'SELECT * FROM "ev" AT (VERSION => 3) LIMIT 100'
    set_token(browser)
    run_sql(browser, query.replace("*", "count(*) AS n").replace(" LIMIT 100", ""))
    assert page.inner_text("#result tbody") == "150"
    assert cat.sql("SELECT count(*) AS n FROM ev").column("n")[0].as_py() == 107
    assert browser.errors == []


def test_revert_from_the_lineage_page_changes_what_sql_returns(
    browser: Browser, cat: lamina.Catalog
) -> None:
    before = cat.sql("SELECT count(*) AS n FROM ev").column("n")[0].as_py()
    assert before == 107  # days 1 and 3 of the push, day 2 refreshed
    page = browser.go("/console/tables/ev/lineage")
    set_token(browser)
    page.locator("button.revert").first.click()  # the newest entry: the refresh
    dialog = page.locator("dialog#confirm")
    dialog.wait_for(state="visible")
    assert "50 rows" in dialog.inner_text() and "7 rows" in dialog.inner_text()
    browser.shot("lineage-revert")
    with page.expect_navigation():
        page.click("#confirm-ok")
    assert cat.sql("SELECT count(*) AS n FROM ev").column("n")[0].as_py() == 150
    assert "REVERTED" in page.inner_text("#lineage tbody tr:first-child")
    assert browser.errors == []


def test_an_action_without_the_token_is_refused(browser: Browser, cat: lamina.Catalog) -> None:
    page = browser.go("/console/tables/small/compaction")
    page.fill("#token", "")
    page.locator("#chunks button.compact").first.click()
    page.wait_for_selector("#status.error")
    assert "API token" in page.inner_text("#status")
    assert len(cat.load_table("small").segments()) == 8  # nothing compacted


def test_compact_now_turns_the_chunk_compacted(browser: Browser, cat: lamina.Catalog) -> None:
    timeline = browser.go("/console/tables/small/timeline")
    assert timeline.locator("#timeline text.mk.pending").count() == 1  # the day of 8 appends
    page = browser.go("/console/tables/small/compaction")
    row = page.locator('#chunks tr[data-chunk^="2024-02-01"]')
    assert row.locator("td.status").inner_text() == "PENDING"
    set_token(browser)
    with page.expect_navigation():
        row.locator("button.compact").click()
    row = page.locator('#chunks tr[data-chunk^="2024-02-01"]')
    assert row.locator("td.status").inner_text() == "COMPLETE"
    assert len(cat.load_table("small").segments()) == 1
    browser.shot("compaction-done")
    timeline = browser.go("/console/tables/small/timeline")
    assert timeline.locator("#timeline text.mk.pending").count() == 0
    assert browser.errors == []


def run_sql(b: Browser, query: str) -> Any:
    page = b.page
    page.fill("#query", query)
    page.fill("#timeout", "2")
    page.click("#run")
    # (no wait_for_function: the pages' CSP forbids evaluating strings)
    page.locator("#sql-meta:has-text(' rows'), #sql-error:not([hidden])").first.wait_for()
    return page


def test_sql_view_returns_what_cat_sql_returns(browser: Browser, cat: lamina.Catalog) -> None:
    browser.go("/console/sql")
    set_token(browser)
    q = "SELECT k, s FROM ev ORDER BY k LIMIT 20"
    page = run_sql(browser, q)
    cells = [
        [c.inner_text() for c in r.locator("td").all()]
        for r in page.locator("#result tbody tr").all()
    ]
    assert cells == [[str(r["k"]), r["s"]] for r in cat.sql(q).to_pylist()]
    browser.shot("sql")
    assert browser.errors == []


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT * FROM read_text('/etc/passwd')", "read_text() is refused"),
        ("COPY (SELECT 1) TO '/tmp/lamina-console-out.csv'", "COPY statements are refused"),
        ("ATTACH '/tmp/lamina-console.db'", "ATTACH statements are refused"),
        ("SELECT count(*) FROM range(10000000000) a, range(10000) b", "time limit"),
    ],
)
def test_sql_view_refuses_all_but_reading_tables(browser: Browser, query: str, says: str) -> None:
    if not browser.page.url.endswith("/console/sql"):
        browser.go("/console/sql")
        set_token(browser)
    page = run_sql(browser, query)
    assert says in page.inner_text("#sql-error")
    assert not os.path.exists("/tmp/lamina-console-out.csv")
    ok = run_sql(browser, "SELECT count(*) AS n FROM small")  # still serving
    assert ok.inner_text("#result tbody") == "32"


def test_names_and_values_holding_markup_show_as_text(browser: Browser) -> None:
    page = browser.go("/console/tables/odd/timeline")
    page.click("summary:has-text('Schema and properties')")
    assert MARKUP in page.inner_text("#properties")
    assert "<b>\"q'" in page.inner_text("#schema")
    browser.go("/console/sql")
    set_token(browser)
    page = run_sql(browser, 'SELECT "<b>""q\'" AS v FROM odd')
    assert page.inner_text("#result tbody") == MARKUP
    assert browser.pwned() is None and browser.errors == []
