"""The REST controller (lamina.rest) against real catalogs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import lamina
from lamina import errors
from lamina.rest import create_app
from tests.helpers import SCHEMA, events, signed_in

with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def table(cat: lamina.Catalog) -> lamina.Table:
    """3 days x 100 rows, one segment a day, on a consistent_push table."""
    t = cat.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)
    with t.push() as p:  # entry 1: from [] to the three day segments
        p.append(events(days=3, per_day=100))
    return t


@pytest.fixture
def client(cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("LAMINA_API_TOKEN", raising=False)
    with TestClient(create_app(cat, token=TOKEN), cookies=signed_in(TOKEN)) as c:
        yield c


def state(t: lamina.Table) -> tuple[Any, ...]:
    """What a refused call must leave unchanged."""
    return (
        t.lineage(),
        [s.id for s in t.segments(all=True)],
        [s.id for s in t.segments()],
        [c.id for c in t.history()],
    )


def start(client: TestClient, table: str, body: Any, **params: Any) -> httpx.Response:
    return client.post(
        f"/tables/{table}/startReplaceSegments", json=body, params=params, headers=AUTH
    )


def end(client: TestClient, table: str, entry: str) -> httpx.Response:
    return client.post(
        f"/tables/{table}/endReplaceSegments",
        params={"segmentLineageEntryId": entry},
        headers=AUTH,
    )


def revert(client: TestClient, table: str, entry: str, force: bool = False) -> httpx.Response:
    return client.post(
        f"/tables/{table}/revertReplaceSegments",
        params={"segmentLineageEntryId": entry, "forceRevert": str(force).lower()},
        headers=AUTH,
    )


# -- reads -----------------------------------------------------------------------------------


def test_list_tables_segments_lineage(
    cat: lamina.Catalog, table: lamina.Table, client: TestClient
) -> None:
    cat.create_table("other", SCHEMA, "ts", "MONTH", properties={"owner": "ops"})
    r = client.get("/tables")
    assert r.status_code == 200
    assert r.json() == [
        {
            "name": "ev",
            "timeColumn": "ts",
            "granularity": "DAY",
            "properties": {"consistent_push": "true", "ingestion_type": "APPEND"},
        },
        {
            "name": "other",
            "timeColumn": "ts",
            "granularity": "MONTH",
            "properties": {"consistent_push": "false", "ingestion_type": "APPEND", "owner": "ops"},
        },
    ]

    segs = client.get("/tables/ev/segments").json()
    assert [s["id"] for s in segs] == [s.id for s in table.segments()]
    first = segs[0]
    assert first["interval"] == "2024-01-01T00:00:00Z/2024-01-02T00:00:00Z"
    assert first["rows"] == 100 and first["bytes"] > 0 and first["version"] >= 1
    assert first["partition"] == 0 and first["tombstone"] is False
    assert isinstance(first["commitId"], int)
    made = {c.id: c.version for c in table.history()}
    assert first["addedInVersion"] == made[first["commitId"]] == 2  # the push's append
    assert client.get("/tables/other/segments").json() == []

    # a refresh of day 2 hides its first segment: visible list changes, all=true keeps it
    table.refresh(events(days=1, per_day=10, start="2024-01-03"), "2024-01-03/2024-01-04")
    visible = client.get("/tables/ev/segments").json()
    every = client.get("/tables/ev/segments", params={"all": "true"}).json()
    assert [s["id"] for s in visible] == [s.id for s in table.segments()]
    assert [s["id"] for s in every] == [s.id for s in table.segments(all=True)]
    assert sum(s["rows"] for s in visible) == table.count() == 210
    assert set(s["id"] for s in segs) <= set(s["id"] for s in every)

    lineage = client.get("/tables/ev/lineage").json()
    assert [e["id"] for e in lineage] == [e.id for e in table.lineage()]
    assert len(lineage) == 2
    push, refresh = lineage
    assert push["segmentsFrom"] == [] and push["segmentsTo"] == [s["id"] for s in segs]
    assert refresh["segmentsFrom"] == [segs[2]["id"]] and refresh["state"] == "COMPLETED"
    assert refresh["segmentsTo"] == [s["id"] for s in visible][2:]
    assert set(push) == {"id", "segmentsFrom", "segmentsTo", "state", "timestamp"}
    assert client.get("/tables/other/lineage").json() == []


def test_openapi_documents_the_api(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for p in (
        "/tables",
        "/tables/{table}/segments",
        "/tables/{table}/lineage",
        "/tables/{table}/startReplaceSegments",
        "/tables/{table}/endReplaceSegments",
        "/tables/{table}/revertReplaceSegments",
    ):
        assert p in paths
    start_op = paths["/tables/{table}/startReplaceSegments"]["post"]
    assert start_op["security"] == [{"HTTPBearer": []}]
    assert {p["name"] for p in start_op["parameters"]} == {"table", "forceCleanup"}
    assert "StartReplaceRequest" in doc["components"]["schemas"]
    assert "security" not in paths["/tables"]["get"]


# -- the lineage protocol over HTTP ------------------------------------------------------------


def test_start_end_revert_cycle(table: lamina.Table, client: TestClient) -> None:
    day0 = table.segments()[0].id
    r = start(client, "ev", {"segmentsFrom": [day0], "segmentsTo": []})
    assert r.status_code == 200, r.text
    entry = r.json()["segmentLineageEntryId"]
    assert table.lineage()[-1].id == entry and table.lineage()[-1].state == "IN_PROGRESS"
    assert table.count() == 300  # readers see segmentsFrom while IN_PROGRESS

    r = end(client, "ev", entry)
    assert r.status_code == 200, r.text
    assert r.json() == {"segmentLineageEntryId": entry, "state": "COMPLETED"}
    assert table.count() == 200 and day0 not in [s.id for s in table.segments()]
    assert end(client, "ev", entry).json()["state"] == "COMPLETED"  # idempotent

    r = revert(client, "ev", entry)
    assert r.status_code == 200, r.text
    assert r.json() == {"segmentLineageEntryId": entry, "state": "REVERTED"}
    assert table.count() == 300 and day0 in [s.id for s in table.segments()]
    assert revert(client, "ev", entry).json()["state"] == "REVERTED"  # idempotent
    lineage = client.get("/tables/ev/lineage").json()
    assert lineage[-1]["id"] == entry and lineage[-1]["state"] == "REVERTED"


def test_end_with_a_subset_of_the_named_segments(table: lamina.Table, client: TestClient) -> None:
    """Pinot's endReplaceSegments body: the named segmentsTo still awaited."""
    r = start(client, "ev", {"segmentsFrom": [], "segmentsTo": ["ev_s5", "ev_s6"]})
    entry = r.json()["segmentLineageEntryId"]
    assert end(client, "ev", entry).status_code == 409  # never written
    r = client.post(
        "/tables/ev/endReplaceSegments",
        params={"segmentLineageEntryId": entry},
        json={"segmentsTo": []},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"segmentLineageEntryId": entry, "state": "COMPLETED"}


def test_rollback_a_refresh_and_force_revert(table: lamina.Table, client: TestClient) -> None:
    table.refresh(events(days=3, per_day=7, seed=1))
    assert table.count() == 21
    pushed = table.lineage()[-1]
    assert revert(client, "ev", pushed.id).status_code == 200
    assert table.count() == 300

    # an IN_PROGRESS entry needs forceRevert; forceCleanup reverts conflicting ones
    live = [s.id for s in table.segments()]
    first = start(client, "ev", {"segmentsFrom": live[:1]}).json()["segmentLineageEntryId"]
    before = state(table)
    r = revert(client, "ev", first)
    assert r.status_code == 409 and "IN_PROGRESS" in r.json()["detail"]
    assert "call with ?forceRevert=true" in r.json()["detail"]  # the REST words, not Python's
    assert state(table) == before
    r = start(client, "ev", {"segmentsFrom": live[:2]})
    assert r.status_code == 409 and "IN_PROGRESS" in r.json()["detail"]
    assert "call with ?forceCleanup=true" in r.json()["detail"]
    assert state(table) == before
    r = start(client, "ev", {"segmentsFrom": ["nope"]})  # refused whatever the state: 400
    assert r.status_code == 400, r.json()
    assert "segmentsFrom must all be live; unknown or removed: ['nope']" in r.json()["detail"]
    assert "GET /tables/ev/segments" in r.json()["detail"]
    r = start(client, "ev", {"segmentsFrom": live[:2]}, forceCleanup="true")
    assert r.status_code == 200
    second = r.json()["segmentLineageEntryId"]
    states = {e.id: e.state for e in table.lineage()}
    assert states[first] == "REVERTED" and states[second] == "IN_PROGRESS"
    assert revert(client, "ev", second, force=True).json()["state"] == "REVERTED"
    assert table.count() == 300


def test_concurrent_requests_share_the_catalog(table: lamina.Table, client: TestClient) -> None:
    """Sync handlers run on the thread pool: parallel writes and reads on one catalog."""

    def work(i: int) -> tuple[int, int]:
        if i % 2:
            return start(client, "ev", {}).status_code, 0
        r = client.get("/tables/ev/segments")
        return r.status_code, len(r.json())

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(16)))
    assert all(code == 200 for code, _ in results), results
    assert all(n == 3 for i, (_, n) in enumerate(results) if i % 2 == 0)
    assert sum(e.state == "IN_PROGRESS" for e in table.lineage()) == 8


# -- refused calls leave the catalog as it was ---------------------------------------------------


def test_unknown_table_and_entry_are_404(
    table: lamina.Table, client: TestClient, cat: lamina.Catalog
) -> None:
    before = state(table)
    for path in ("/tables/nope/segments", "/tables/nope/lineage"):
        r = client.get(path)
        assert r.status_code == 404 and "no table named 'nope'" in r.json()["detail"]
    assert start(client, "nope", {}).status_code == 404
    assert end(client, "nope", "x").status_code == 404
    for call in (end, revert):
        r = call(client, "ev", "0123456789abcdef")
        assert r.status_code == 404
        assert "no lineage entry '0123456789abcdef' in table ev" in r.json()["detail"]
    # an entry of another table is not found through this one
    other = cat.create_table("other", SCHEMA, "ts")
    entry = other.start_replace([], [])
    assert end(client, "ev", entry).status_code == 404
    assert other.lineage()[0].state == "IN_PROGRESS"
    assert state(table) == before


def test_protocol_violations_are_refused(table: lamina.Table, client: TestClient) -> None:
    live = [s.id for s in table.segments()]
    entry = start(client, "ev", {"segmentsFrom": live[:1]}).json()["segmentLineageEntryId"]
    assert revert(client, "ev", entry, force=True).status_code == 200

    before = state(table)
    r = end(client, "ev", entry)  # ending a reverted entry
    assert r.status_code == 409 and "reverted" in r.json()["detail"]
    assert state(table) == before

    for body, words in (
        ({"segmentsFrom": ["ev_no_such_segment"]}, "unknown or removed"),
        ({"segmentsFrom": [live[0], live[0]]}, "twice"),
        ({"segmentsFrom": [live[0]], "segmentsTo": [live[0]]}, "both"),
        ({"segmentsTo": [live[1]]}, "already taken"),
        ({"segmentsFrom": ["../../etc/passwd"]}, "unknown or removed"),
    ):
        r = start(client, "ev", body)
        assert 400 <= r.status_code < 500 and words in r.json()["detail"], (body, r.text)
        assert state(table) == before

    # a segment hidden by a COMPLETED entry is not live
    table.refresh(events(days=3, per_day=5, seed=2))
    pushed = table.lineage()[-1]
    before = state(table)
    r = start(client, "ev", {"segmentsFrom": [pushed.segments_from[0]]})
    assert r.status_code == 409 and "must all be live" in r.json()["detail"]
    assert state(table) == before

    # the first push's segments were replaced by the refresh: it is not the newest link
    first_push = table.lineage()[0]
    assert first_push.state == "COMPLETED" and not first_push.segments_from
    r = revert(client, "ev", first_push.id)
    assert r.status_code == 409 and "revert those first" in r.json()["detail"]
    assert state(table) == before
    assert table.count() == 15


def test_bad_requests_are_422(table: lamina.Table, client: TestClient) -> None:
    before = state(table)
    url = "/tables/ev/startReplaceSegments"
    json_headers = {**AUTH, "Content-Type": "application/json"}
    for content in (b"{", b"[]", b'{"segmentsFrom": "x"}', b'{"segmentsFrom": [1, 2]}', b"null"):
        r = client.post(url, content=content, headers=json_headers)
        assert r.status_code == 422, (content, r.text)
    r = client.post(url, json={"segmentFrom": []}, headers=AUTH)  # typo: unknown field
    assert r.status_code == 422
    r = client.post(url, json={"segmentsFrom": [""]}, headers=AUTH)
    assert r.status_code == 422
    r = client.post(url, json={}, params={"forceCleanup": "maybe"}, headers=AUTH)
    assert r.status_code == 422
    r = client.post(url, headers=AUTH)  # no body at all
    assert r.status_code == 422
    for call in ("endReplaceSegments", "revertReplaceSegments"):
        r = client.post(f"/tables/ev/{call}", headers=AUTH)  # no entry id
        assert r.status_code == 422
    r = client.get("/tables/ev/segments", params={"all": "perhaps"})
    assert r.status_code == 422
    assert state(table) == before


TRAVERSALS = [
    "/tables/..%2F..%2Fetc/segments",
    "/tables/..%2F..%2Fetc%2Fpasswd/lineage",
    "/tables/%2e%2e/segments",
    "/tables/..%5C..%5Cwindows/segments",
    "/tables/ev%00/segments",
    "/tables/ev%0A/segments",
    "/tables/ev.parquet/lineage",
    "/tables/%2Fetc%2Fpasswd/segments",
    "/tables/" + "a" * 129 + "/segments",
    "/tables/1ev/segments",
]


def test_path_traversal_is_404(table: lamina.Table, client: TestClient) -> None:
    before = state(table)
    for path in TRAVERSALS:
        r = client.get(path)
        assert r.status_code == 404, (path, r.text)
        post = path.rsplit("/", 1)[0] + "/startReplaceSegments"
        r = client.post(post, json={}, headers=AUTH)
        assert r.status_code == 404, (post, r.text)
    assert state(table) == before


# -- authentication --------------------------------------------------------------------------


def test_posts_need_the_token(table: lamina.Table, client: TestClient) -> None:
    before = state(table)
    url = "/tables/ev/startReplaceSegments"
    r = client.post(url, json={})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = client.post(url, content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 401  # authentication comes before reading the body
    for header in ("Basic czNjcmV0", "Bearer", "Bearer ", TOKEN):
        assert client.post(url, json={}, headers={"Authorization": header}).status_code == 401
    for header in ("Bearer wrong", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer é"):
        r = client.post(url, json={}, headers={"Authorization": header.encode("utf-8")})
        assert r.status_code == 403, header
    r = client.post(
        "/tables/ev/revertReplaceSegments",
        params={"segmentLineageEntryId": table.lineage()[0].id},
        headers={"Authorization": "Bearer wrong"},
    )
    assert r.status_code == 403
    assert client.post("/tables/nope/endReplaceSegments").status_code == 401
    assert state(table) == before

    assert client.get("/tables/ev/segments").status_code == 200  # reads are open
    r = client.post(url, json={}, headers={"Authorization": f"bearer  {TOKEN}"})
    assert r.status_code == 200
    assert table.lineage()[-1].id == r.json()["segmentLineageEntryId"]


def test_token_from_environment(
    cat: lamina.Catalog, table: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMINA_API_TOKEN", "from-env")
    c = TestClient(create_app(cat))
    assert c.post("/tables/ev/startReplaceSegments", json={}).status_code == 401
    r = c.post(
        "/tables/ev/startReplaceSegments",
        json={},
        headers={"Authorization": "Bearer from-env"},
    )
    assert r.status_code == 200

    monkeypatch.delenv("LAMINA_API_TOKEN")
    open_app = TestClient(create_app(cat))  # no token configured: POSTs are open
    assert open_app.post("/tables/ev/startReplaceSegments", json={}).status_code == 200


# -- a real server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_lamina_serve_subprocess(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(warehouse=wh) as cat:
        cat.create_table("ev", SCHEMA, "ts").append(events(days=2, per_day=10))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMINA_")}
    env["LAMINA_API_TOKEN"] = TOKEN
    cmd = [sys.executable, "-m", "lamina.cli", "--warehouse", wh, "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--log-level", "warning"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "lamina serve did not answer within 20 s"
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=5) as http:
            assert http.get("/tables").status_code == 401  # a token closes reads too
            r = http.get("/tables", headers=AUTH)
            assert [t["name"] for t in r.json()] == ["ev"]
            assert len(http.get("/tables/ev/segments", headers=AUTH).json()) == 2
            assert http.post("/tables/ev/startReplaceSegments", json={}).status_code == 401
            r = http.post(
                "/tables/ev/startReplaceSegments", json={"segmentsFrom": []}, headers=AUTH
            )
            assert r.status_code == 200
        with lamina.connect(warehouse=wh) as cat:
            assert [e.id for e in cat.load_table("ev").lineage()] == [
                r.json()["segmentLineageEntryId"]
            ]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_compaction_status_and_trigger(cat: lamina.Catalog, client: TestClient) -> None:
    t = cat.create_table("small", SCHEMA, "ts", "DAY")
    for seed in range(3):
        t.append(events(days=2, per_day=5, seed=seed))
    got = client.get("/tables/small/compaction").json()
    assert [(c["status"], c["action"], c["segments"]) for c in got] == [("PENDING", "minor", 3)] * 2
    assert "small segments" in got[0]["reason"]
    assert client.post("/tables/small/compact", json={}).status_code == 401  # a write: token
    r = client.post("/tables/small/compact", json={"mode": "minor"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["segmentsBefore"] == 6
    assert r.json()["segmentsAfter"] == 2 and r.json()["commitId"] is not None
    assert r.json()["tableVersion"] == 4 == t.history()[-1].version  # three appends before
    done = client.get("/tables/small/compaction").json()
    assert {c["status"] for c in done} == {"COMPLETE"}
    before = state(t)
    bad = client.post(
        "/tables/small/compact", json={"mode": "major", "sortBy": ["zz"]}, headers=AUTH
    )
    assert bad.status_code == 400 and "zz" in bad.json()["detail"]
    assert "sort_by" not in bad.json()["detail"]  # the request's words
    weekly = {"mode": "major", "segmentGranularity": "WEEKLY"}
    bad = client.post("/tables/small/compact", json=weekly, headers=AUTH)
    assert bad.status_code == 400 and bad.json()["detail"].startswith("segmentGranularity:")
    assert (
        client.post("/tables/small/compact", json={"mode": "odd"}, headers=AUTH).status_code == 400
    )
    minor = client.post("/tables/small/compact", json={"sortBy": ["k"]}, headers=AUTH)
    assert minor.status_code == 400
    assert minor.json()["detail"].startswith("segmentGranularity, sortBy and rollup")
    assert minor.json()["detail"].endswith('use "mode": "major"')
    assert state(t) == before
    assert t.count() == 30


def test_a_request_wrong_whatever_the_state_is_400(table: lamina.Table, client: TestClient) -> None:
    """The module's contract: a lineage state conflict is 409, other refused input 400
    (a REST audit found every lineage refusal answered 409). A segmentsTo name of the
    form lamina gives its own segments is refused: a later append could take it."""
    live = sorted(s.id for s in table.segments())
    own = "ev_20240101T000000Z_20240102T000000Z_v1_p7"
    for body, why in (
        ({"segmentsFrom": [live[0], live[0]], "segmentsTo": []}, "twice"),
        ({"segmentsFrom": [live[0]], "segmentsTo": [live[0]]}, "in both"),
        ({"segmentsFrom": [], "segmentsTo": [own]}, "form of the ids lamina gives"),
    ):
        r = start(client, "ev", body)
        assert r.status_code == 400 and why in r.json()["detail"], r.json()
        assert "write under the entry" not in r.json()["detail"]  # REST has no such write
    r = start(client, "ev", {"segmentsFrom": [], "segmentsTo": ["ev_s5"]})
    entry = r.json()["segmentLineageEntryId"]
    r = client.post(
        "/tables/ev/endReplaceSegments",
        params={"segmentLineageEntryId": entry},
        json={"segmentsTo": ["ev_s7"]},
        headers=AUTH,
    )
    assert r.status_code == 400 and "subset" in r.json()["detail"], r.json()


def test_bodies_that_cannot_echo_get_422_not_500(table: lamina.Table, client: TestClient) -> None:
    """A REST audit: FastAPI's 422 echoes the input, and a NaN, an out-of-range float
    or a lone surrogate in it failed to render (500). Nothing changes."""
    before = table.lineage()
    raw = {
        "startReplaceSegments": [
            b"1e999",
            b'{"segmentsFrom": NaN}',
            b'{"segmentsFrom": ["x\\ud800"], "segmentsTo": 1e999}',
        ],
        "compact": [b'{"targetRowsPerSegment": 1e999}', b'{"mode": Infinity}'],
    }
    for route, bodies in raw.items():
        for body in bodies:
            r = client.post(
                f"/tables/ev/{route}",
                content=body,
                headers={**AUTH, "content-type": "application/json"},
            )
            assert r.status_code == 422, (body, r.status_code, r.text)
            assert r.json()["detail"][0]["loc"], r.json()
    r = client.post(
        "/tables/ev/startReplaceSegments",
        content=b'{"segmentsTo": ["x\\ud800"]}',
        headers={**AUTH, "content-type": "application/json"},
    )
    fault = r.json()["detail"][0]
    assert r.status_code == 422 and fault["type"] == "string_unicode"
    assert fault["loc"] == ["body", "segmentsTo", 0]  # an index stays a number
    r = client.post(
        "/tables/ev/startReplaceSegments",
        content=b"{bad",
        headers={**AUTH, "content-type": "application/json"},
    )
    assert r.status_code == 422
    assert "Expecting property name" in r.json()["detail"][0]["ctx"]["error"]
    assert table.lineage() == before


def test_text_no_response_could_carry_is_refused(
    cat: lamina.Catalog, table: lamina.Table, client: TestClient
) -> None:
    """A lone surrogate stored through the Python API (a property, a segments_to name)
    made GET /tables or GET .../lineage answer 500 for everyone (REST audit): it is
    refused where it comes in, and the server's JSON escapes what an older version
    stored."""
    before = (table.lineage(), table.properties)
    with pytest.raises(errors.PropertyError, match="not valid Unicode"):
        table.set_properties(owner="ops\udc80")
    with pytest.raises(errors.PropertyError, match="not valid Unicode"):
        table.set_properties(**{"own\udc80er": "ops"})
    with pytest.raises(errors.LineageRequestError, match="not valid Unicode"):
        table.start_replace([], ["seg\udc80"])
    assert (table.lineage(), table.properties) == before
    # what an older version let in still shows: the server's JSON escapes it
    from sqlalchemy import update

    from lamina.meta.schema import tables

    props = json.dumps({**table.properties, "owner": "ops\udc80"})
    with cat.context.db.engine.begin() as conn:
        conn.execute(update(tables).where(tables.c.name == "ev").values(properties=props))
    r = client.get("/tables")
    assert r.status_code == 200, r.text
    assert [t["properties"]["owner"] for t in r.json() if t["name"] == "ev"] == ["ops\udc80"]


def test_pinot_clients_custom_map_and_null_lists(table: lamina.Table, client: TestClient) -> None:
    """Pinot's request classes serialize ``customMap`` (null unless set) and take null
    lists as empty: such bodies are taken; a custom map with entries is refused (lamina
    keeps none), not dropped silently."""
    live = sorted(s.id for s in table.segments())
    r = start(client, "ev", {"segmentsFrom": [live[0]], "segmentsTo": None, "customMap": None})
    assert r.status_code == 200, r.text
    entry = r.json()["segmentLineageEntryId"]
    assert table.lineage()[-1].segments_from == (live[0],)
    r = client.post(
        "/tables/ev/endReplaceSegments",
        params={"segmentLineageEntryId": entry},
        json={"segmentsTo": None, "customMap": {}},
        headers=AUTH,
    )
    assert r.status_code == 200 and r.json()["state"] == "COMPLETED", r.text
    before = table.lineage()
    r = start(client, "ev", {"segmentsFrom": [live[1]], "customMap": {"k": "v"}})
    assert r.status_code == 400 and "customMap" in r.json()["detail"], r.text
    assert table.lineage() == before


def test_a_configured_token_is_taken_without_surrounding_whitespace(
    cat: lamina.Catalog, table: lamina.Table
) -> None:
    """A token read from a secrets file keeps its newline: every call got 403 (REST
    audit). It is stripped; a token of whitespace only is refused."""
    with TestClient(create_app(cat, token=TOKEN + "\n")) as c:
        r = c.post(
            "/tables/ev/revertReplaceSegments",
            params={"segmentLineageEntryId": "nope"},
            headers=AUTH,
        )
        assert r.status_code == 404, r.text  # past the token check
    with pytest.raises(errors.ServeError, match="blank"):
        create_app(cat, token="  \n")
