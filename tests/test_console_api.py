"""The console's REST calls (lamina.rest.console.api): table summaries, the aggregated
timeline, a chunk's segments, commits, locks and writers, a revert's preview, and the
read-only SQL box with its refusals."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina.core.interval import Interval
from lamina.rest import create_app
from tests.helpers import SCHEMA, events, signed_in

with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient

TOKEN = "console-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    with TestClient(create_app(cat, token=TOKEN), cookies=signed_in(TOKEN)) as c:
        yield c


@pytest.fixture
def local_client(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    with TestClient(create_app(local_cat, token=TOKEN), cookies=signed_in(TOKEN)) as c:
        yield c


def upserts(keys: list[str], day: str = "2024-01-01") -> pa.Table:
    ts = pa.array([f"{day}T0{i % 10}:00:00" for i in range(len(keys))]).cast(pa.timestamp("us"))
    key = pa.array(keys, pa.string())
    schema = pa.schema(
        [("ts", ts.type), pa.field("key", pa.string(), nullable=False), ("v", pa.int64())]
    )
    return pa.table([ts, key, pa.array(range(len(keys)), pa.int64())], schema=schema)


def test_table_summaries_sort_paginate_and_mark_health(
    cat: lamina.Catalog, client: TestClient
) -> None:
    big = cat.create_table("big", SCHEMA, "ts", "DAY")
    for i in range(11):  # 11 small segments of one day: more than half are small
        big.append(events(days=1, per_day=3, seed=i))
    cat.create_table("empty", SCHEMA, "ts", "DAY")
    up = cat.create_table(
        "up",
        pa.schema(
            [
                ("ts", pa.timestamp("us")),
                pa.field("key", pa.string(), nullable=False),
                ("v", pa.int64()),
            ]
        ),
        time_column="ts",
        primary_key="key",
    )
    up.upsert(upserts(["a", "b", "c", "d"]))
    up.upsert(upserts(["a", "b", "c"]))  # 3 of the first 4 rows superseded

    page = client.get("/tableSummaries").json()
    assert page["total"] == 3 and [t["name"] for t in page["items"]] == ["big", "empty", "up"]
    by = {t["name"]: t for t in page["items"]}
    assert by["big"]["rows"] == 33 and by["big"]["segments"] == 11
    assert by["big"]["smallShare"] == 1.0 and by["big"]["health"] == "warn"
    assert "11 segments are small" in by["big"]["reason"]
    assert by["big"]["supersededShare"] is None  # not an upsert table
    assert by["empty"]["health"] == "empty" and by["empty"]["lastCommitAgeS"] is None
    assert by["up"]["supersededShare"] == pytest.approx(3 / 7)
    assert by["up"]["health"] == "warn" and "superseded" in by["up"]["reason"]
    assert by["big"]["lastCommitAgeS"] >= 0

    rows_desc = client.get("/tableSummaries", params={"sortBy": "rows", "order": "desc"}).json()
    assert [t["name"] for t in rows_desc["items"]] == ["big", "up", "empty"]
    second = client.get("/tableSummaries", params={"sortBy": "rows", "offset": 1, "limit": 1})
    assert second.json()["total"] == 3
    assert [t["name"] for t in second.json()["items"]] == ["up"]
    for bad in ({"sortBy": "size"}, {"order": "up"}, {"limit": 0}, {"offset": -1}):
        assert client.get("/tableSummaries", params=bad).status_code == 422


def test_timeline_shows_an_overwritten_day_as_overshadowed(
    cat: lamina.Catalog, client: TestClient
) -> None:
    t = cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=3, per_day=10))
    before = client.get("/tables/ev/timeline").json()  # remembered until the next commit
    assert all(len(b["versions"]) == 1 for b in before["buckets"])
    t.overwrite(events(days=1, per_day=4, start="2024-01-02"), "2024-01-02/2024-01-03")

    tl = client.get("/tables/ev/timeline").json()
    assert tl["zoom"] == "DAY"  # never finer than the table's chunks by default
    assert tl["interval"] == "2024-01-01T00:00:00Z/2024-01-04T00:00:00Z"
    days = {b["start"][:10]: b for b in tl["buckets"]}
    assert list(days) == ["2024-01-01", "2024-01-02", "2024-01-03"]
    day2 = days["2024-01-02"]
    assert [(c["version"], c["state"]) for c in day2["versions"]] == [
        (2, "visible"),
        (1, "overshadowed"),
    ]
    assert day2["visibleVersion"] == 2 and day2["overshadowedVersions"] == 1
    assert day2["rows"] == 4 and day2["chunks"] == 1
    assert days["2024-01-01"]["overshadowedVersions"] == 0
    assert sum(b["rows"] for b in tl["buckets"]) == t.count() == 24


def test_timeline_buckets_follow_the_range(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "HOUR")
    t.append(events(days=2, per_day=48))
    year = local_client.get("/tables/ev/timeline", params={"interval": "2024-01-01/2025-01-01"})
    assert year.json()["zoom"] == "WEEK" and len(year.json()["buckets"]) <= 180
    week = [b for b in year.json()["buckets"] if b["segments"]]
    assert len(week) == 1 and week[0]["chunks"] == len(t.segments())  # hours in one week
    hours = local_client.get(
        "/tables/ev/timeline", params={"interval": "2024-01-01T00:00:00/2024-01-01T06:00:00"}
    ).json()
    assert hours["zoom"] == "HOUR" and len(hours["buckets"]) == 6
    assert all(b["chunks"] <= 1 for b in hours["buckets"])
    six = Interval.parse("2024-01-01T00:00:00/2024-01-01T06:00:00")
    in_six = [s for s in t.segments() if s.interval.start < six.end]
    assert sum(b["chunks"] for b in hours["buckets"]) == len(in_six) > 0
    months = local_client.get(
        "/tables/ev/timeline", params={"interval": "2024-01-01/2025-01-01", "zoom": "MONTH"}
    ).json()
    assert len(months["buckets"]) == 12 and months["buckets"][0]["rows"] == 96

    too_fine = local_client.get(
        "/tables/ev/timeline", params={"interval": "2024-01-01/2025-01-01", "zoom": "HOUR"}
    )
    assert too_fine.status_code == 400 and "zoom=WEEK" in too_fine.json()["detail"]
    bad = local_client.get("/tables/ev/timeline", params={"interval": "yesterday/today"})
    assert bad.status_code == 400
    assert local_client.get("/tables/nope/timeline").status_code == 404
    empty = local_cat.create_table("empty", SCHEMA, "ts", "DAY")
    assert local_client.get(f"/tables/{empty.name}/timeline").json()["buckets"] == []


def test_timeline_marks_the_chunks_compaction_is_pending_for(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    for i in range(4):  # four small appends into one day: a minor compaction is due
        t.append(events(days=1, per_day=2, seed=i))
    t.append(events(days=1, per_day=2, start="2024-01-03"))  # one segment: nothing due
    week = {"interval": "2024-01-01/2024-01-05", "zoom": "DAY"}
    days = local_client.get("/tables/ev/timeline", params=week).json()["buckets"]
    assert [b["pendingCompaction"] for b in days] == [1, 0, 0, 0]
    page = local_client.get("/console/tables/ev/timeline", params=week).text
    assert page.count('class="mk pending"') == 2  # the legend's and day 1's
    t.compact(mode="minor")
    days = local_client.get("/tables/ev/timeline", params=week).json()["buckets"]
    assert [b["pendingCompaction"] for b in days] == [0, 0, 0, 0]


def test_a_large_table_is_surveyed_for_compaction_in_the_background(
    local_cat: lamina.Catalog, local_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over PENDING_MAX_SEGMENTS segments, a view does not wait for the policy's survey:
    it starts one in a worker process and shows the last one, saying which version it
    is of."""
    from lamina.rest.console import api

    monkeypatch.setattr(api, "PENDING_MAX_SEGMENTS", 2)
    monkeypatch.setattr(api, "SURVEY_EVERY_S", 0.0)
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    for i in range(4):
        t.append(events(days=1, per_day=2, seed=i))
    week = {"interval": "2024-01-01/2024-01-03", "zoom": "DAY"}

    def surveyed(version: int) -> list[int | None]:
        for _ in range(1200):  # the survey runs in a worker process (it starts slowly)
            got = local_client.get("/tables/ev/timeline", params=week).json()
            if got["pendingAsOfVersion"] == version:
                return [b["pendingCompaction"] for b in got["buckets"]]
            assert got["pendingAsOfVersion"] in (None, version - 1)
            time.sleep(0.05)
        raise AssertionError(f"no survey of version {version}")

    assert surveyed(4) == [1, 0]
    t.compact(mode="minor")
    assert surveyed(5) == [0, 0]


def test_chunk_segments_hide_history_unless_asked(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    first = t.append(events(days=1, per_day=10))
    second = t.overwrite(events(days=1, per_day=5), "2024-01-01/2024-01-02")
    day = {"interval": "2024-01-01/2024-01-02"}
    shown = local_client.get("/tables/ev/chunkSegments", params=day).json()
    assert [(s["version"], s["rows"], s["state"]) for s in shown] == [(2, 5, "visible")]
    assert shown[0]["commitId"] == second.id and shown[0]["minorVersion"] == 0
    assert shown[0]["supersededShare"] == 0.0
    every = local_client.get("/tables/ev/chunkSegments", params={**day, "history": "true"})
    states = [(s["version"], s["state"], s["commitId"]) for s in every.json()]
    assert states == [(2, "visible", second.id), (1, "removed", first.id)]
    missing = local_client.get("/tables/ev/chunkSegments")
    assert missing.status_code == 422


def test_a_push_in_progress_is_not_shown_visible(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)
    day = {"interval": "2024-01-01/2024-01-02"}
    with t.push() as p:
        p.append(events(days=1, per_day=5))
        (bucket,) = local_client.get("/tables/ev/timeline", params=day).json()["buckets"]
        assert bucket["visibleVersion"] is None and bucket["segments"] == 0
        assert [c["state"] for c in bucket["versions"]] == ["overshadowed"]
        shown = local_client.get("/tables/ev/chunkSegments", params=day).json()
        assert shown == []
        every = local_client.get("/tables/ev/chunkSegments", params={**day, "history": "true"})
        assert [s["state"] for s in every.json()] == ["lineage"]
    (bucket,) = local_client.get("/tables/ev/timeline", params=day).json()["buckets"]
    assert bucket["visibleVersion"] == 1 and bucket["rows"] == 5


def test_commits_list_what_each_did(local_cat: lamina.Catalog, local_client: TestClient) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=2, per_day=10), txn=("loader", 7))
    t.overwrite(events(days=1, per_day=3), "2024-01-01/2024-01-02")
    page = local_client.get("/tables/ev/commits").json()
    assert page["total"] == 2
    newest, oldest = page["items"]
    assert newest["action"] == "OVERWRITE" and newest["state"] == "COMPLETED"
    assert (newest["segmentsAdded"], newest["segmentsRemoved"]) == (1, 1)
    assert (newest["rowsAdded"], newest["rowsRemoved"]) == (3, 10)
    assert oldest["action"] == "APPEND" and oldest["rowsAdded"] == 20
    assert oldest["txn"] == "loader:7" and newest["txn"] is None
    assert oldest["durationMs"] >= 0 and oldest["writer"]
    older = local_client.get("/tables/ev/commits", params={"before": newest["id"], "limit": 5})
    assert [c["id"] for c in older.json()["items"]] == [oldest["id"]]
    assert local_client.get("/tables/ev/commits", params={"limit": 0}).status_code == 422


def test_a_commit_links_to_the_table_as_of_it_and_to_its_changes(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    """The commits page's "Query" opens the SQL view reading the table at that
    version (an AT clause, which the query box evaluates in its sandbox too), and
    "Changes" the change feed between two versions, as ``t.read_changes`` gives it."""
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=2, per_day=10))
    t.overwrite(events(days=1, per_day=3), "2024-01-01/2024-01-02")
    page = local_client.get("/tables/ev/commits").json()
    assert [c["version"] for c in page["items"]] == [2, 1]
    html = local_client.get("/console/tables/ev/commits").text
    at_one = "/console/sql?q=SELECT+%2A+FROM+%22ev%22+AT+%28VERSION+%3D%3E+1%29+LIMIT+100"
    assert f'href="{at_one}"' in html
    assert 'href="/console/tables/ev/changes?after=1&amp;until=2"' in html
    sql = local_client.get(at_one).text
    assert "SELECT * FROM &#34;ev&#34; AT (VERSION =&gt; 1) LIMIT 100</textarea>" in sql
    q = 'SELECT count(*) AS n FROM "ev" AT (VERSION => 1)'
    r = local_client.post("/sql", json={"query": q}, headers=AUTH)
    assert r.json()["rows"] == [[20]] == [[local_cat.sql(q).column("n")[0].as_py()]]
    # the feed of version 2: the day it replaced (10 rows out, 3 in)
    feed = local_client.get("/tables/ev/changes", params={"afterVersion": 1}).json()
    want = t.read_changes(1, 2)
    assert (feed["afterVersion"], feed["untilVersion"]) == (1, 2)
    assert (feed["inserts"], feed["deletes"]) == (3, 10) and len(feed["rows"]) == want.num_rows
    names = [c["name"] for c in feed["columns"]]
    assert names == want.column_names
    got = sorted((r[names.index("_change")], r[names.index("k")]) for r in feed["rows"])
    pairs = zip(want.column("_change").to_pylist(), want.column("k").to_pylist(), strict=True)
    assert got == sorted(pairs)
    capped = local_client.get("/tables/ev/changes", params={"afterVersion": 0, "limit": 5})
    assert capped.json()["truncated"] is True and len(capped.json()["rows"]) == 5
    shown = local_client.get("/console/tables/ev/changes?after=1&until=2").text
    assert "3 inserted, 10 deleted" in shown
    bad = local_client.get("/tables/ev/changes", params={"afterVersion": 9})
    assert bad.status_code == 400 and "versions run from 0" in bad.json()["detail"]


def test_key_index_page_reports_the_index_and_the_most_superseded_chunks(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    up = local_cat.create_table(
        "up", upserts(["a"]).schema, time_column="ts", primary_key="key", segment_granularity="DAY"
    )
    up.upsert(upserts(["a", "b", "c", "d"]))
    up.upsert(upserts(["a", "b", "c"]))  # 3 of day 1's first 4 rows superseded
    up.upsert(upserts(["x", "y"], day="2024-01-02"))
    info = local_client.get("/tables/up/keyIndex").json()
    assert info["primaryKey"] == ["key"] and info["keys"] == 6 and info["version"] == 3
    assert info["hiddenRows"] == 3 and info["filesWithVectors"] == 1
    assert info["chunks"] == 2
    first, second = info["mostSuperseded"]
    assert first["interval"].startswith("2024-01-01") and (first["rows"], first["superseded"]) == (
        7,
        3,
    )
    assert first["share"] == pytest.approx(3 / 7) and second["superseded"] == 0
    assert local_client.get("/tables/up/keyIndex", params={"limit": 1}).json()["chunks"] == 2
    page = local_client.get("/console/tables/up/keys").text
    assert "42.9%" in page and 'href="/console/tables/up/keys"' in page  # the tab is shown
    plain = local_cat.create_table("plain", SCHEMA, "ts", "DAY")
    plain.append(events(days=1, per_day=2))
    r = local_client.get("/tables/plain/keyIndex")
    assert r.status_code == 400 and "no primary key" in r.json()["detail"]
    assert "/console/tables/plain/keys" not in local_client.get("/console/tables/plain/locks").text


def test_locks_and_writers_in_flight(cat: lamina.Catalog, client: TestClient) -> None:
    t = cat.create_table("ev", SCHEMA, "ts", "DAY")
    assert client.get("/tables/ev/locks").json() == {"locks": [], "writers": [], "recentAborts": []}
    with t.transaction(lock="REPLACE", interval="2024-01-01/2024-01-03") as tx:
        tx.append(events(days=1, per_day=2))
        now = client.get("/tables/ev/locks").json()
        tl = client.get("/tables/ev/timeline", params={"interval": "2024-01-01/2024-01-04"})
    (lock,) = now["locks"]
    assert lock["type"] == "REPLACE" and lock["state"] == "GRANTED"
    assert lock["interval"] == "2024-01-01T00:00:00Z/2024-01-03T00:00:00Z"
    assert lock["heartbeatAgeS"] >= 0 and lock["holder"]
    (writer,) = now["writers"]
    assert writer["commitId"] == lock["commitId"] and writer["state"] == "INFLIGHT"
    assert [b["locks"] for b in tl.json()["buckets"]] == [1, 1, 0]
    assert client.get("/tables/ev/locks").json() == {"locks": [], "writers": [], "recentAborts": []}


def test_locks_page_shows_recent_conflicts_and_revocations_with_their_reasons(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=3, per_day=5))
    a, b = t.transaction(), t.transaction()
    a.overwrite(events(days=1, per_day=2, start="2024-01-02", seed=1))
    b.overwrite(events(days=1, per_day=3, start="2024-01-02", seed=2))
    a.commit()
    with pytest.raises(lamina.errors.CommitConflictError):
        b.commit()
    jan = ("2024-01-01", "2024-02-01")
    low = t.transaction(lock="REPLACE", interval=jan, priority=25)
    low.overwrite(events(days=1, per_day=2, start="2024-01-03", seed=3))
    with t.transaction(lock="REPLACE", interval=jan, priority=75, wait_s=0) as high:
        high.overwrite(events(days=1, per_day=2, start="2024-01-01", seed=4))
    with pytest.raises(lamina.errors.LockRevokedError):
        low.commit()
    dropped = t.transaction()
    dropped.append(events(days=1, per_day=1, seed=5))
    dropped.abort()
    info = local_client.get("/tables/ev/locks").json()
    kinds = [(x["commitId"], x["kind"]) for x in info["recentAborts"]]
    assert [k for _, k in kinds] == ["failed", "lock revoked", "conflict"]
    newest, revoked, conflict = info["recentAborts"]
    assert conflict["reason"].startswith("CommitConflictError: ") and "commit" in conflict["reason"]
    assert (
        revoked["reason"].startswith("LockRevokedError: ")
        and "higher-priority" in revoked["reason"]
    )
    assert newest["reason"] == "TransactionError: aborted by its caller"
    commits = {c["id"]: c for c in local_client.get("/tables/ev/commits").json()["items"]}
    assert commits[conflict["commitId"]]["reason"] == conflict["reason"]
    assert commits[kinds[0][0]]["state"] == "ABORTED"
    page = local_client.get("/console/tables/ev/locks").text
    assert "Recent conflicts, lock revocations and aborts" in page and "lock revoked" in page


def test_revert_preview_says_what_readers_will_see(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)
    with t.push() as p:
        p.append(events(days=1, per_day=10))
    t.refresh(events(days=1, per_day=4), "2024-01-01/2024-01-02")  # a push replacing the day
    entry = t.lineage()[-1]
    r = local_client.get("/tables/ev/revertPreview", params={"segmentLineageEntryId": entry.id})
    body = r.json()
    assert body["state"] == "COMPLETED"
    assert (body["rowsNow"], body["rowsAfter"]) == (4, 10)
    assert body["segmentsShown"] == list(entry.segments_from)
    assert "10 rows" in body["summary"]
    unknown = local_client.get("/tables/ev/revertPreview", params={"segmentLineageEntryId": "x"})
    assert unknown.status_code == 404


def test_sql_reads_what_cat_sql_reads(local_cat: lamina.Catalog, local_client: TestClient) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=2, per_day=5))
    q = "SELECT k, s, ts FROM ev ORDER BY k"
    r = local_client.post("/sql", json={"query": q}, headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    want = local_cat.sql(q).to_pylist()
    assert [c["name"] for c in body["columns"]] == ["k", "s", "ts"]
    assert [row[:2] for row in body["rows"]] == [[w["k"], w["s"]] for w in want]
    assert body["rows"][0][2] == want[0]["ts"].isoformat() and body["truncated"] is False
    capped = local_client.post("/sql", json={"query": q, "maxRows": 3}, headers=AUTH).json()
    assert len(capped["rows"]) == 3 and capped["truncated"] is True
    assert local_client.post("/sql", json={"query": q}).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert local_client.post("/sql", json={"query": q}, headers=wrong).status_code == 403


@pytest.fixture(scope="module")
def sql_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One catalog with a 3-row table for the refusals (they change nothing)."""
    wh = tmp_path_factory.mktemp("sqlbox")
    c = lamina.connect(warehouse=str(wh / "wh"))
    c.create_table("ev", SCHEMA, "ts", "DAY").append(events(days=1, per_day=3))
    with TestClient(create_app(c, token=TOKEN), cookies=signed_in(TOKEN)) as client:
        yield client
    c.close()


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT * FROM read_text('/etc/passwd')", "read_text() is refused"),
        ("SELECT * FROM read_csv('{csv}')", "read_csv() is refused"),
        ("SELECT * FROM '{csv}'", "secret.csv' is refused"),
        ("SELECT * FROM information_schema.tables", "is refused"),
        ("COPY (SELECT 1) TO '{out}'", "COPY statements are refused"),
        ("ATTACH '{out}' AS other", "ATTACH statements are refused"),
        ("INSTALL httpfs", "are refused"),
        ("LOAD httpfs", "are refused"),
        ("SET threads = 1", "SET statements are refused"),
        ("PRAGMA version", "are refused"),
        ("SELECT 1; SELECT 2", "one statement only"),
        ("SELECT count(*) FROM range(10000000000) a, range(10000) b", "time limit of 1 s"),
        # an AT clause's value is evaluated in the sandbox too
        (
            "SELECT * FROM ev AT (VERSION => (SELECT count(*) FROM read_text('/etc/passwd')))",
            "read_text() is refused",
        ),
        (
            "SELECT * FROM ev AT (VERSION => (SELECT count(*) FROM range(10000000000000)))",
            "Interrupted",
        ),
    ],
)
def test_sql_refuses_all_but_reading_lamina_tables(
    sql_client: TestClient, tmp_path: Path, query: str, says: str
) -> None:
    csv = tmp_path / "secret.csv"
    csv.write_text("a\n1\n")
    out = tmp_path / "out.db"
    text = query.format(csv=csv, out=out)
    r = sql_client.post("/sql", json={"query": text, "timeoutS": 1}, headers=AUTH)
    assert r.status_code == 400, r.text
    assert says in r.json()["detail"]
    assert not out.exists()
    ok = sql_client.post("/sql", json={"query": "SELECT count(*) FROM ev"}, headers=AUTH)
    assert ok.json()["rows"] == [[3]]  # the server keeps serving


def test_openapi_documents_the_console_calls(local_client: TestClient) -> None:
    spec = local_client.get("/openapi.json").json()
    for path in (
        "/tableSummaries",
        "/tables/{table}/timeline",
        "/tables/{table}/chunkSegments",
        "/tables/{table}/commits",
        "/tables/{table}/locks",
        "/tables/{table}/revertPreview",
    ):
        ok = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        assert "$ref" in ok["schema"] or "items" in ok["schema"]
    sql = spec["paths"]["/sql"]["post"]
    assert sql["security"] == [{"HTTPBearer": []}]
    assert {"401", "403", "400"} <= set(sql["responses"])


MARKUP = "<script>window.pwned=1</script><img src=x onerror=\"alert('x')\">'"


def test_pages_show_names_and_values_as_text(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), (MARKUP, pa.string())])
    local_cat.create_table("odd", schema, "ts", "DAY", properties={"note": MARKUP})
    for path in ("/", "/console/tables/odd/timeline", "/console/tables/odd/compaction"):
        r = local_client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "<script>window" not in r.text and "<img src=x" not in r.text
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    page = local_client.get("/console/tables/odd/timeline").text
    assert page.count("&lt;script&gt;window.pwned=1&lt;/script&gt;") == 2  # column, property
    assert "&#39;" in page and "&#34;alert" in page  # quotes escaped too
    assert local_client.get("/console/tables/nope/timeline").status_code == 404


def test_actions_cannot_be_forged_from_another_site(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    for i in range(3):
        t.append(events(days=1, per_day=2, seed=i))
    # what a page of another site can send: a form post, cookies, no Authorization header
    local_client.cookies.set("session", "whatever")
    forged = local_client.post(
        "/tables/ev/compact",
        content='{"mode": "minor"}',
        headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
    )
    assert forged.status_code == 403 and "cross-site" in forged.json()["detail"]
    # even with the token (a script of another site cannot read it, but say it could)
    forged = local_client.post(
        "/sql",
        json={"query": "SELECT 1"},
        headers={**AUTH, "Sec-Fetch-Site": "cross-site"},
    )
    assert forged.status_code == 403
    no_token = local_client.post("/tables/ev/compact", json={"mode": "minor"})
    assert no_token.status_code == 401
    assert len(t.segments()) == 3  # nothing compacted
    same_site = local_client.post(
        "/tables/ev/compact",
        json={"mode": "minor"},
        headers={**AUTH, "Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    )
    assert same_site.status_code == 200 and len(t.segments()) == 1


def test_without_a_token_actions_still_refuse_other_sites(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)
    with t.push() as p:
        p.append(events(days=1, per_day=2))
    entry = t.lineage()[-1].id
    with TestClient(create_app(local_cat, token="")) as c:
        url = f"/tables/ev/revertReplaceSegments?segmentLineageEntryId={entry}"
        forged = c.post(url, headers={"Origin": "https://evil.example"})
        assert forged.status_code == 403 and t.lineage()[-1].state == "COMPLETED"
        assert c.post(url).json()["state"] == "REVERTED"  # a client outside a browser


def test_with_a_token_reads_are_closed_unless_opened_explicitly(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    monkeypatch.delenv("LAMINA_OPEN_READS", raising=False)
    local_cat.create_table("ev", SCHEMA, "ts", "DAY").append(events(days=1, per_day=2))
    with TestClient(create_app(local_cat, token=TOKEN)) as c:
        for url in ("/tables", "/tables/ev/timeline", "/tableSummaries", "/openapi.json"):
            r = c.get(url)
            assert r.status_code == 401, url
            assert "--open-reads" in r.json()["detail"] and "/console/login" in r.json()["detail"]
        page = c.get("/console/tables/ev/timeline?zoom=DAY", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == (
            "/console/login?next=%2Fconsole%2Ftables%2Fev%2Ftimeline%3Fzoom%3DDAY"
        )
        assert c.get("/", follow_redirects=False).headers["location"] == "/console/login?next=%2F"
        # always open: the probe, the sign-in page and the console's own assets
        assert c.get("/health").status_code == 200
        assert c.get("/console/login").status_code == 200
        assert c.get("/console/static/console.js").status_code == 200
        # the token as a header opens reads; a wrong one is refused as on POSTs
        assert c.get("/tables", headers=AUTH).status_code == 200
        assert c.get("/tables", headers={"Authorization": "Bearer nope"}).status_code == 403
        c.cookies.set("lamina_reads", "forged")
        assert c.get("/tables").status_code == 401
    with TestClient(create_app(local_cat, token=TOKEN, open_reads=True)) as c:
        assert c.get("/tables").status_code == 200 and c.get("/").status_code == 200
        assert c.post("/tables/ev/compact", json={"mode": "minor"}).status_code == 401
    monkeypatch.setenv("LAMINA_OPEN_READS", "1")
    with TestClient(create_app(local_cat, token=TOKEN)) as c:
        assert c.get("/tables").status_code == 200
    monkeypatch.delenv("LAMINA_OPEN_READS")
    with TestClient(create_app(local_cat, token="")) as c:  # no token: nothing to close
        assert c.get("/tables").status_code == 200


def test_signing_in_opens_reads_and_nothing_else(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    monkeypatch.delenv("LAMINA_OPEN_READS", raising=False)
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    for i in range(2):
        t.append(events(days=1, per_day=2, seed=i))
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    with TestClient(create_app(local_cat, token=TOKEN)) as c:
        wrong = c.post("/console/login", content="token=nope&next=%2Ftables", headers=form)
        assert wrong.status_code == 403 and "not this server" in wrong.text
        assert "lamina_reads" not in c.cookies
        forged = c.post(
            "/console/login",
            content=f"token={TOKEN}",
            headers={**form, "Origin": "https://evil.example"},
        )
        assert forged.status_code == 403 and "lamina_reads" not in c.cookies
        # somewhere else to go afterwards is never another site
        away = c.post(
            "/console/login",
            content=f"token={TOKEN}&next=%2F%2Fevil.example%2F",
            headers=form,
            follow_redirects=False,
        )
        assert away.headers["location"] == "/"
        ok = c.post(
            "/console/login",
            content=f"token={TOKEN}&next=%2Fconsole%2Ftables%2Fev%2Fcommits",
            headers=form,
            follow_redirects=False,
        )
        assert ok.status_code == 303
        assert ok.headers["location"] == "/console/tables/ev/commits"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert TOKEN not in ok.headers["set-cookie"]  # a digest, not the token
        assert c.get("/tables").status_code == 200
        assert c.get("/console/tables/ev/commits").status_code == 200
        # the cookie opens reads only: an action still needs the header
        assert c.post("/tables/ev/compact", json={"mode": "minor"}).status_code == 401
        assert len(t.segments()) == 2


def test_the_spec_is_as_strict_as_the_server(
    local_cat: lamina.Catalog, local_client: TestClient
) -> None:
    """The three places schemathesis found the spec looser than the server."""
    spec = local_client.get("/openapi.json").json()["components"]["schemas"]
    custom = spec["StartReplaceRequest"]["properties"]["customMap"]
    assert custom["maxProperties"] == 0  # null passes: it constrains objects only
    sort_by = spec["CompactRequest"]["properties"]["sortBy"]["anyOf"][0]
    assert sort_by["items"]["minLength"] == 1
    t = local_cat.create_table("ev", SCHEMA, "ts", "DAY")
    for i in range(2):
        t.append(events(days=1, per_day=2, seed=i))
    empty = local_client.post("/tables/ev/compact", json={"sortBy": [""]}, headers=AUTH)
    assert empty.status_code == 422
    fraction = {"targetRowsPerSegment": 2.5}
    assert local_client.post("/tables/ev/compact", json=fraction, headers=AUTH).status_code == 422
    whole = local_client.post(
        "/tables/ev/compact", json={"targetRowsPerSegment": 100.0}, headers=AUTH
    )
    assert whole.status_code == 200 and len(t.segments()) == 1
