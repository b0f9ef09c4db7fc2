"""``lamina serve``: it prints its URL, answers ``GET /health`` (in the OpenAPI
document), and serves its API docs page without anything from another site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import pytest

import lamina
from lamina.rest import create_app
from lamina.rest.docs import docs_page
from tests.helpers import signed_in

with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    cat = lamina.connect(warehouse=str(tmp_path / "wh"))
    cat.create_table("events", lamina_schema(), "ts", "DAY")
    with TestClient(create_app(cat, token="t"), cookies=signed_in("t")) as c:
        yield c
    cat.close()


def lamina_schema():  # type: ignore[no-untyped-def]
    from lamina.core.schema_text import parse_schema

    return parse_schema("ts:timestamp[us, tz=UTC],k:int64")


def test_health_is_documented_and_answers(client: TestClient) -> None:
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "version": lamina.__version__, "tables": 1}
    doc = client.get("/openapi.json").json()
    op = doc["paths"]["/health"]["get"]
    assert "security" not in op and "503" in op["responses"]
    assert "HealthInfo" in doc["components"]["schemas"]


def test_docs_page_loads_nothing_from_elsewhere(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert re.search(r"https?://", page) is None  # no CDN script, style sheet or font
    assert "<script" not in page
    for path in ("/health", "/tables/{table}/startReplaceSegments", "StartReplaceRequest"):
        assert path in page
    assert "(needs the bearer token)" in page
    assert client.get("/redoc").status_code == 404  # FastAPI's CDN page is gone too


def test_docs_page_escapes_the_document() -> None:
    spec = {
        "info": {"title": "<b>x</b>", "version": "1", "description": "a & b"},
        "paths": {
            "/t/{x}": {
                "get": {
                    "summary": "<script>alert(1)</script>",
                    "parameters": [{"name": '"q"', "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "<i>ok</i>"}},
                }
            }
        },
        "components": {"schemas": {"S<1>": {"properties": {"a<": {"type": "integer"}}}}},
    }
    page = docs_page(spec)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "a &amp; b" in page
    assert "&quot;q&quot;" in page and "S&lt;1&gt;" in page and "a&lt;" in page


def test_serve_prints_its_url(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    lamina.connect(warehouse=wh).close()
    src = str(Path(lamina.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lamina.cli", "--warehouse", wh, "serve", "--port", "0",
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"serving (http://127\.0\.0\.1:\d+)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = m.group(1)
        assert f"{url}/docs" in line and f"{url}/health" in line
        r = httpx.get(f"{url}/health", timeout=30)
        assert r.status_code == 200 and r.json()["tables"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_refuses_a_mistyped_warehouse(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lamina.cli import app

    result = CliRunner().invoke(app, ["--warehouse", str(tmp_path / "typo"), "serve"])
    assert result.exit_code == 1 and "lamina init --warehouse" in result.stderr
    assert not (tmp_path / "typo").exists()
