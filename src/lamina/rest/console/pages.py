"""The web console's pages: server-rendered HTML (Jinja2, every value escaped) over the
same functions the console's REST calls serve, with a little JavaScript for the
actions (POSTs carrying the API token in a header: no cookie, so no other site can
make them) and the SQL box. Every asset is served from the package: no CDN."""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

import lamina
from lamina.core import console as rules
from lamina.core.autocompact import policy_of
from lamina.core.interval import Interval, format_us
from lamina.engines.duckdb_views import quote
from lamina.errors import LaminaError
from lamina.meta import console as queries
from lamina.meta.tables import get_table
from lamina.operations.compaction.auto import auto_status
from lamina.operations.handle import DEFAULT_TARGET_ROWS
from lamina.rest.auth import READ_COOKIE, SIGN_IN, check_same_site, read_pass, safe_next
from lamina.rest.console import api
from lamina.rest.console.models import SortKey, TimelineInfo, Zoom

_HERE = resources.files("lamina.rest.console")
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_STATIC = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
#: No inline script or style, nothing from elsewhere, never framed.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

pages = APIRouter(include_in_schema=False)
CatalogDep = Annotated[lamina.Catalog, Depends(api.catalog_of)]


def _render(request: Request, template: str, **ctx: Any) -> HTMLResponse:
    upsert = False
    if ctx.get("table"):  # a table's pages: a Key index tab for an upsert table
        cat: lamina.Catalog = request.app.state.catalog
        upsert = "upsert.primary_key" in get_table(cat.context.db, ctx["table"]).properties
    html = _ENV.get_template(template).render(
        needs_token=bool(request.app.state.token),
        fmt_bytes=fmt_bytes,
        fmt_age=fmt_age,
        upsert=upsert,
        **ctx,
    )
    return HTMLResponse(html, headers=_HEADERS)


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def fmt_age(s: float | None) -> str:
    if s is None:
        return "never"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


@pages.get("/console/static/{name}")
def static(name: str) -> Response:
    kind = _STATIC.get(name)
    if kind is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such asset")
    body = (_HERE / "static" / name).read_bytes()
    return Response(body, media_type=kind, headers={"X-Content-Type-Options": "nosniff"})


@pages.get("/", response_class=HTMLResponse)
def tables_page(
    request: Request,
    cat: CatalogDep,
    sort_by: Annotated[SortKey, Query(alias="sortBy")] = "name",
    order: Literal["asc", "desc"] = "asc",
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> HTMLResponse:
    page = api.table_summaries(cat, sort_by, order, offset, limit)
    call = "GET /tableSummaries?" + urlencode(
        {"sortBy": sort_by, "order": order, "offset": offset, "limit": limit}
    )

    def sort_link(key: str) -> str:
        flip = "desc" if key == sort_by and order == "asc" else "asc"
        return "?" + urlencode({"sortBy": key, "order": flip, "limit": limit})

    def page_link(at: int) -> str:
        return "?" + urlencode({"sortBy": sort_by, "order": order, "offset": at, "limit": limit})

    return _render(
        request,
        "tables.html",
        title="Tables",
        page=page,
        call=call,
        sort_link=sort_link,
        page_link=page_link,
        table=None,
    )


def _handle(cat: lamina.Catalog, table: str) -> Any:
    return api.handle_of(cat, table)


@pages.get("/console/tables/{table}/timeline", response_class=HTMLResponse)
def timeline_page(
    request: Request,
    table: str,
    cat: CatalogDep,
    interval: api.IntervalQ = None,
    zoom: Zoom | None = None,
    chunk: Annotated[str | None, Query(max_length=128)] = None,
    history: bool = False,
) -> HTMLResponse:
    h = _handle(cat, table)
    tl = api.timeline(cat, h.name, interval, zoom)
    params = {k: v for k, v in (("interval", interval), ("zoom", zoom)) if v}
    call = f"GET /tables/{h.name}/timeline" + ("?" + urlencode(params) if params else "")
    segs = None
    seg_call = ""
    if chunk:
        segs = api.chunk_segments(cat, h.name, chunk, history, 1000)
        q = {"interval": chunk, **({"history": "true"} if history else {})}
        seg_call = f"GET /tables/{h.name}/chunkSegments?" + urlencode(q)
    return _render(
        request,
        "timeline.html",
        title=f"Timeline of {h.name}",
        table=h.name,
        tl=tl,
        svg=_svg(tl, h.name, history),
        nav=_zoom_links(tl),
        zooms=[g.value for g in rules.ZOOMS],
        interval=interval or tl.interval,
        call=call,
        chunk=chunk,
        history=history,
        segs=segs,
        seg_call=seg_call,
        columns=[(f.name, str(f.type)) for f in h.schema],
        properties=sorted(h.properties.items()),
        latest=queries.table_seq(cat.context.db, h.name),
    )


def _zoom_links(tl: TimelineInfo) -> dict[str, str]:
    """Links to the ranges around the one shown: zoom in (the middle half), out
    (twice as wide), and pan by half a range."""
    if not tl.interval:
        return {}
    iv = Interval.parse(tl.interval)
    w = iv.end - iv.start
    mid = iv.start + w // 2

    def link(a: int, b: int) -> str:
        try:
            return "?" + urlencode({"interval": f"{format_us(a)}/{format_us(b)}"})
        except (LaminaError, OverflowError, ValueError):
            return ""

    out = {
        "in": link(mid - w // 4, mid + w // 4) if w > 2 * 3_600_000_000 else "",
        "out": link(iv.start - w // 2, iv.end + w // 2),
        "earlier": link(iv.start - w // 2, iv.end - w // 2),
        "later": link(iv.start + w // 2, iv.end + w // 2),
    }
    return {k: v for k, v in out.items() if v}


_ROW_H = 18
_MAX_ROWS = 8


def _svg(tl: TimelineInfo, table: str, history: bool) -> dict[str, Any]:
    """The picture's shapes: per bucket one column of cells, the highest version on
    top, visible solid, overshadowed ghosted; marks for small segments, locks and
    deletion vectors. Values only: the template escapes and draws them."""
    n = max(len(tl.buckets), 1)
    width = 1000
    bw = width / n
    rows = min(max((len(b.versions) for b in tl.buckets), default=1), _MAX_ROWS)
    top = 16
    cols = []
    for i, b in enumerate(tl.buckets):
        x = i * bw
        cells = []
        for r, c in enumerate(b.versions[:_MAX_ROWS]):
            label = f"v{c.version}" + (f".{c.minor_version}" if c.minor_version else "")
            cells.append(
                {
                    "x": x + 1,
                    "y": top + r * _ROW_H,
                    "w": max(bw - 2, 1),
                    "h": _ROW_H - 3,
                    "cls": c.state
                    + (" minor" if c.minor_version else "")
                    + (" tomb" if c.tombstone else ""),
                    "label": label if bw >= 34 else "",
                }
            )
        title = (
            f"{b.start} to {b.end}: {b.chunks} chunks, {b.segments} segments, {b.rows} rows; "
            + "; ".join(
                f"v{c.version}{'.' + str(c.minor_version) if c.minor_version else ''} {c.state} "
                f"({c.segments} segments, {c.rows} rows)"
                for c in b.versions
            )
            + (f"; {b.small_segments} small segments" if b.small_segments else "")
            + (f"; {b.locks} locks" if b.locks else "")
            + (f"; {b.deletion_vectors} files with deletion vectors" if b.deletion_vectors else "")
            + (
                f"; compaction pending for {b.pending_compaction} chunks"
                if b.pending_compaction
                else ""
            )
        )
        q = {"chunk": f"{b.start}/{b.end}", "interval": tl.interval, "zoom": tl.zoom}
        if history:
            q["history"] = "true"
        cols.append(
            {
                "x": x,
                "w": bw,
                "cells": cells,
                "more": len(b.versions) > _MAX_ROWS,
                "small": b.small_segments > 0,
                "lock": b.locks > 0,
                "dv": b.deletion_vectors > 0,
                "pending": bool(b.pending_compaction),
                "title": title,
                "href": "?" + urlencode(q),
                "empty": not b.versions,
            }
        )
    height = top + rows * _ROW_H + 22
    ticks = []
    step = max(n // 8, 1)
    for i in range(0, len(tl.buckets), step):
        ticks.append({"x": i * bw + 2, "label": tl.buckets[i].start[:16].replace("T", " ")})
    return {"width": width, "height": height, "cols": cols, "ticks": ticks, "top": top}


@pages.get("/console/tables/{table}/commits", response_class=HTMLResponse)
def commits_page(
    request: Request,
    table: str,
    cat: CatalogDep,
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> HTMLResponse:
    h = _handle(cat, table)
    page = api.commits(cat, h.name, 50, before)
    call = f"GET /tables/{h.name}/commits?limit=50" + (f"&before={before}" if before else "")
    older = page.items[-1].id if len(page.items) == 50 else None
    return _render(
        request,
        "commits.html",
        title=f"Commits of {h.name}",
        table=h.name,
        page=page,
        call=call,
        older=older,
        latest=queries.table_seq(cat.context.db, h.name),
        quoted=quote(h.name),
    )


@pages.get("/console/tables/{table}/changes", response_class=HTMLResponse)
def changes_page(
    request: Request,
    table: str,
    cat: CatalogDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    until: Annotated[int | None, Query(ge=0, le=2**62)] = None,
) -> HTMLResponse:
    h = _handle(cat, table)
    feed = api.changes(cat, h.name, after, until, 1000)
    q = {"afterVersion": after, **({"untilVersion": until} if until is not None else {})}
    return _render(
        request,
        "changes.html",
        title=f"Changes of {h.name}",
        table=h.name,
        feed=feed,
        call=f"GET /tables/{h.name}/changes?" + urlencode(q),
    )


@pages.get("/console/tables/{table}/keys", response_class=HTMLResponse)
def keys_page(request: Request, table: str, cat: CatalogDep) -> HTMLResponse:
    h = _handle(cat, table)
    return _render(
        request,
        "keys.html",
        title=f"Key index of {h.name}",
        table=h.name,
        info=api.key_index(cat, h.name, 100),
        call=f"GET /tables/{h.name}/keyIndex?limit=100",
    )


@pages.get("/console/tables/{table}/lineage", response_class=HTMLResponse)
def lineage_page(request: Request, table: str, cat: CatalogDep) -> HTMLResponse:
    h = _handle(cat, table)
    entries = list(reversed(h.lineage()))
    return _render(
        request,
        "lineage.html",
        title=f"Lineage of {h.name}",
        table=h.name,
        entries=entries,
        consistent=h.consistent_push,
        call=f"GET /tables/{h.name}/lineage",
    )


@pages.get("/console/tables/{table}/locks", response_class=HTMLResponse)
def locks_page(request: Request, table: str, cat: CatalogDep) -> HTMLResponse:
    h = _handle(cat, table)
    return _render(
        request,
        "locks.html",
        title=f"Locks of {h.name}",
        table=h.name,
        info=api.locks(cat, h.name),
        call=f"GET /tables/{h.name}/locks",
    )


@pages.get("/console/tables/{table}/compaction", response_class=HTMLResponse)
def compaction_page(request: Request, table: str, cat: CatalogDep) -> HTMLResponse:
    h = _handle(cat, table)
    target = int(h.properties.get("target_rows_per_segment", DEFAULT_TARGET_ROWS))
    policy = policy_of(h.properties, target)
    chunks = auto_status(h)
    return _render(
        request,
        "compaction.html",
        title=f"Compaction of {h.name}",
        table=h.name,
        policy={
            "target rows per segment": policy.target_rows,
            "small segment rows": policy.small,
            "max segments per chunk": policy.max_segments or "none",
            "segment granularity": policy.segment_granularity or "the table's",
            "sort by": ", ".join(policy.sort_by) or "none",
        },
        properties=sorted((k, v) for k, v in h.properties.items() if k.startswith("compaction.")),
        chunks=chunks,
        call=f"GET /tables/{h.name}/compaction",
    )


@pages.get("/console/sql", response_class=HTMLResponse)
def sql_page(
    request: Request, cat: CatalogDep, q: Annotated[str, Query(max_length=100_000)] = ""
) -> HTMLResponse:
    return _render(
        request,
        "sql.html",
        title="SQL",
        table=None,
        query=q,
        tables=cat.list_tables(),
        call="POST /sql",
    )


@pages.get(SIGN_IN, response_class=HTMLResponse)
def sign_in_page(
    request: Request, next: Annotated[str, Query(max_length=2000)] = "/"
) -> HTMLResponse:
    return _render(
        request, "login.html", title="Sign in", table=None, target=safe_next(next), failed=False
    )


@pages.post(SIGN_IN, response_class=HTMLResponse)
async def sign_in(request: Request) -> Response:
    """The sign-in form: the right token sets the reads cookie (a digest of the token,
    ``HttpOnly``, ``SameSite=Strict``) and goes back where the user was headed; a wrong
    one shows the form again (403)."""
    check_same_site(request)
    form = parse_qs((await request.body())[:10_000].decode("utf-8", "replace"))
    given = (form.get("token") or [""])[0].strip()
    target = safe_next((form.get("next") or ["/"])[0])
    token: str | None = request.app.state.token
    if token and not hmac.compare_digest(given.encode(), token.encode()):
        page = _render(
            request, "login.html", title="Sign in", table=None, target=target, failed=True
        )
        page.status_code = status.HTTP_403_FORBIDDEN
        return page
    done = RedirectResponse(target, status.HTTP_303_SEE_OTHER)
    if token:
        done.set_cookie(
            READ_COOKIE,
            read_pass(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
    return done
