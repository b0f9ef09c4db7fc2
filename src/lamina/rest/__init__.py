"""A REST controller over a catalog: list tables, segments and lineage; drive segment
lineage (Pinot's ``startReplaceSegments`` / ``endReplaceSegments`` /
``revertReplaceSegments``) over HTTP.

A thin adapter: every handler calls one :class:`lamina.Table` method and maps lamina's
errors to status codes — unknown table or lineage entry 404, a lineage state conflict
409, any other refused input 400, malformed requests 422 — with ``{"detail": message}``.

Mutating calls (POST) need ``Authorization: Bearer <token>`` when a token is configured
(``create_app(token=...)``, else ``$LAMINA_API_TOKEN``): no credentials 401, a wrong
token 403. So do reads, or the console's sign-in cookie, unless the server opens them
explicitly (``open_reads``; :mod:`lamina.rest.auth`). Handlers are plain functions, so
FastAPI runs them on its thread pool; they share the catalog (its SQLAlchemy engine is
thread-safe).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse

import lamina
from lamina.core.lineage import LineageState
from lamina.errors import (
    CatalogUnavailableError,
    LaminaError,
    ServeError,
    TableNotFoundError,
)
from lamina.meta.tables import get_table
from lamina.operations.handle import TableHandle
from lamina.rest.auth import (
    AUTH_ERRORS,
    OPEN_READS_ENV,
    TOKEN_ENV,
    AuthenticatedRoute,
    check_token,
    documented_bearer,
    guard_reads,
    reads_opened,
)
from lamina.rest.console import api as console_api
from lamina.rest.console.pages import pages as console_pages
from lamina.rest.docs import docs_page
from lamina.rest.errors import message, status_of
from lamina.rest.models import (
    ChunkCompactionInfo,
    CompactRequest,
    CompactResult,
    EndReplaceRequest,
    ErrorResponse,
    HealthInfo,
    LineageEntryInfo,
    ReplaceResult,
    SegmentInfo,
    StartReplaceRequest,
    StartReplaceResponse,
    TableInfo,
    entry_info,
    segment_info,
)

__all__ = ["OPEN_READS_ENV", "TOKEN_ENV", "check_token", "create_app", "reads_opened", "serve"]

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

EntryId = Annotated[
    str,
    Query(
        alias="segmentLineageEntryId",
        min_length=1,
        max_length=128,
        description="Id returned by startReplaceSegments.",
    ),
]


# -- dependencies ----------------------------------------------------------------------------


def _catalog(request: Request) -> lamina.Catalog:
    cat: lamina.Catalog = request.app.state.catalog
    return cat


def _table(table: str, cat: Annotated[lamina.Catalog, Depends(_catalog)]) -> lamina.Table:
    """The table of the path; 404 for names no table can have (no traversal, no lookup)."""
    if not _TABLE_NAME.fullmatch(table):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no table by that name")
    return cat.load_table(table)  # TableNotFoundError -> 404


TableDep = Annotated[lamina.Table, Depends(_table)]

_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorResponse, "description": "Refused by lamina (bad input)."},
    404: {"model": ErrorResponse, "description": "Unknown table or lineage entry."},
    409: {"model": ErrorResponse, "description": "Not allowed in the entry's current state."},
}


# -- routes ----------------------------------------------------------------------------------

reads = APIRouter(tags=["tables"])
writes = APIRouter(
    tags=["segment lineage"],
    route_class=AuthenticatedRoute,
    dependencies=[Depends(documented_bearer)],
    responses={**_ERRORS, **AUTH_ERRORS},
)


@reads.get(
    "/health",
    response_model=HealthInfo,
    tags=["server"],
    responses={503: {"model": ErrorResponse, "description": "The catalog cannot be read."}},
)
def health(cat: Annotated[lamina.Catalog, Depends(_catalog)]) -> HealthInfo | JSONResponse:
    """The server is up and its catalog answers (a load balancer's or a probe's check)."""
    try:
        tables = len(cat.list_tables())
    except CatalogUnavailableError as exc:
        return _Json({"detail": str(exc)}, status_code=503)
    return HealthInfo(status="ok", version=lamina.__version__, tables=tables)


@reads.get("/tables", response_model=list[TableInfo])
def list_tables(cat: Annotated[lamina.Catalog, Depends(_catalog)]) -> list[TableInfo]:
    """Every table of the catalog."""
    out = []
    for name in cat.list_tables():
        try:
            t = cat.load_table(name)
        except TableNotFoundError:  # dropped meanwhile
            continue
        out.append(
            TableInfo(
                name=t.name,
                timeColumn=t.time_column,
                granularity=t.granularity.value,
                properties=t.properties,
            )
        )
    return out


@reads.get(
    "/tables/{table}/segments",
    response_model=list[SegmentInfo],
    responses={404: _ERRORS[404]},
)
def list_segments(
    t: TableDep,
    all_: Annotated[
        bool, Query(alias="all", description="Every published segment, not only visible ones.")
    ] = False,
) -> list[SegmentInfo]:
    """The visible data segments of the latest snapshot (``all=true``: every published
    one, tombstones and overshadowed versions included)."""
    added_in = {c.id: c.version for c in t.history()}
    return [segment_info(s, added_in) for s in t.segments(all=all_)]


@reads.get(
    "/tables/{table}/lineage",
    response_model=list[LineageEntryInfo],
    responses={404: _ERRORS[404]},
)
def list_lineage(t: TableDep) -> list[LineageEntryInfo]:
    """The table's segment lineage entries, oldest first."""
    return [entry_info(e) for e in t.lineage()]


@writes.post("/tables/{table}/startReplaceSegments", response_model=StartReplaceResponse)
def start_replace_segments(
    t: TableDep,
    body: StartReplaceRequest,
    force_cleanup: Annotated[
        bool,
        Query(
            alias="forceCleanup",
            description="Revert IN_PROGRESS entries on the same segments (and delete what "
            "they wrote) instead of refusing.",
        ),
    ] = False,
) -> StartReplaceResponse:
    """Open an IN_PROGRESS entry: ``segmentsTo`` will replace ``segmentsFrom``."""
    body.refuse_custom_map()
    entry_id = t.start_replace(
        body.segments_from or [], body.segments_to or [], force_cleanup=force_cleanup
    )
    return StartReplaceResponse(segmentLineageEntryId=entry_id)


def _result(t: lamina.Table, entry_id: str, expected: LineageState) -> ReplaceResult:
    """The entry's state after a successful call (retention may have removed it since)."""
    state = next((e.state for e in t.lineage() if e.id == entry_id), expected.value)
    return ReplaceResult(segmentLineageEntryId=entry_id, state=str(state))


@writes.post("/tables/{table}/endReplaceSegments", response_model=ReplaceResult)
def end_replace_segments(
    t: TableDep, entry_id: EntryId, body: EndReplaceRequest | None = None
) -> ReplaceResult:
    """Complete an entry: readers switch to its segmentsTo at once (idempotent). A body
    ``{"segmentsTo": [...]}`` names the segments of those given at start still awaited
    (Pinot's end with a subset)."""
    if body is not None:
        body.refuse_custom_map()
    t.end_replace(entry_id, None if body is None else body.segments_to)
    return _result(t, entry_id, LineageState.COMPLETED)


@writes.post("/tables/{table}/revertReplaceSegments", response_model=ReplaceResult)
def revert_replace_segments(
    t: TableDep,
    entry_id: EntryId,
    force_revert: Annotated[
        bool,
        Query(alias="forceRevert", description="Also revert an entry still IN_PROGRESS."),
    ] = False,
) -> ReplaceResult:
    """Undo an entry: readers see its segmentsFrom again (a COMPLETED entry must be the
    newest link of its chain; idempotent)."""
    t.revert_replace(entry_id, force=force_revert)
    return _result(t, entry_id, LineageState.REVERTED)


@reads.get(
    "/tables/{table}/compaction",
    response_model=list[ChunkCompactionInfo],
    responses={404: _ERRORS[404]},
)
def compaction_status(
    t: TableDep, cat: Annotated[lamina.Catalog, Depends(_catalog)]
) -> list[ChunkCompactionInfo]:
    """Each chunk's compaction status under the table's ``compaction.*`` policy, newest
    first, with the reason (what ``lamina compact --auto --dry-run`` lists)."""
    from lamina.operations.compaction.auto import auto_status  # loads numpy, pyarrow

    h = TableHandle(cat.context, get_table(cat.context.db, t.name))
    return [
        ChunkCompactionInfo(
            interval=str(st.chunk),
            status=st.status,
            action=st.action,
            segments=st.segments,
            small=st.small,
            reason=st.reason,
        )
        for st in auto_status(h)
    ]


@writes.post("/tables/{table}/compact", response_model=CompactResult, tags=["compaction"])
def compact(t: TableDep, body: CompactRequest) -> CompactResult:
    """Compact now: ``minor`` merges small segments beside running appends; ``major``
    rewrites chunks at a new version (re-partitioned, sorted) under a REPLACE lock."""
    before = len(t.segments())
    c = t.compact(
        interval=body.interval,
        mode=body.mode,
        target_rows_per_segment=body.target_rows_per_segment,
        segment_granularity=body.segment_granularity,
        sort_by=body.sort_by,
    )
    return CompactResult(
        commitId=None if c is None else c.id,
        tableVersion=None if c is None else c.version,
        segmentsBefore=before,
        segmentsAfter=len(t.segments()),
    )


# -- app ------------------------------------------------------------------------------------


class _Json(JSONResponse):
    """JSON with non-ASCII text escaped: a string that is not valid Unicode (a lone
    surrogate a Python caller stored in a property or a segment name) still renders."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


async def _lamina_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LaminaError)
    return _Json({"detail": message(request, exc)}, status_code=status_of(exc))


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each fault's place and kind, without echoing the input (a NaN, an
    out-of-range float or a lone surrogate in it would not render as JSON)."""
    assert isinstance(exc, RequestValidationError)
    faults = [
        {
            "type": e.get("type"),
            "loc": [p if isinstance(p, int) else str(p) for p in e.get("loc", ())],
            "msg": e.get("msg"),
            # the parser's reason ("Expecting property name ..."), as text
            **({"ctx": {k: str(v) for k, v in e["ctx"].items()}} if e.get("ctx") else {}),
        }
        for e in exc.errors()
    ]
    return _Json({"detail": faults}, status_code=422)


def create_app(
    catalog: lamina.Catalog, token: str | None = None, open_reads: bool | None = None
) -> FastAPI:
    """The REST app over ``catalog``. ``token`` (default ``$LAMINA_API_TOKEN``; empty:
    none) guards the POST calls, and the reads unless ``open_reads`` (default
    ``$LAMINA_OPEN_READS`` is ``1``/``true``). Raises ServeError (a blank token)."""
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    if token is not None and token.strip() != token:  # a secrets file's newline, say
        token = token.strip()
        if not token:
            raise ServeError(
                "the API token is blank (only whitespace); set a token, or leave it empty for none"
            )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(
            target=console_api.warm, args=(catalog, app.state.warmed), daemon=True
        ).start()
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="lamina",
        version=lamina.__version__,
        description="Tables, segments and segment lineage of a lamina catalog.",
        default_response_class=_Json,
        docs_url=None,  # FastAPI's pages load their scripts from a CDN: lamina's own below
        redoc_url=None,
    )

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi()))

    app.state.catalog = catalog
    app.state.warmed = threading.Event()  # set once the largest timelines are grouped
    app.state.token = token or None
    app.state.open_reads = reads_opened(open_reads)
    app.middleware("http")(guard_reads)
    app.add_exception_handler(LaminaError, _lamina_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.include_router(reads)
    app.include_router(writes)
    app.include_router(console_api.reads)
    app.include_router(console_api.actions)
    app.include_router(console_pages)
    return app


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    catalog: str | None = None,
    warehouse: str | None = None,
    token: str | None = None,
    log_level: str = "info",
    create: bool = True,
    on_listen: Callable[[str], None] | None = None,
    open_reads: bool | None = None,
) -> None:
    """Connect to the catalog and serve the REST API with uvicorn until interrupted.
    ``create``: as :func:`lamina.connect`'s; ``on_listen(url)``: called once the port is
    bound and the catalog open (e.g. to print the URL; port 0 picks a free one);
    ``token``, ``open_reads``: as :func:`create_app`'s.
    Raises ServeError when it cannot listen at ``host``:``port``, CatalogNotFoundError."""
    import uvicorn  # loads click, uvicorn

    sock = _listen(host, port)
    try:
        cat = lamina.connect(catalog=catalog, warehouse=warehouse, create=create)
        if on_listen is not None:
            bound_host, bound_port = sock.getsockname()[:2]
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            on_listen(f"http://{shown}:{bound_port}")
        try:
            config = uvicorn.Config(create_app(cat, token, open_reads), log_level=log_level)
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            cat.close()
    finally:
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (uvicorn's own failure to bind is a log line
    and exit status 3). Raises ServeError."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc}; check --host") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ServeError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port "
            "(or --host), or stop what listens there"
        ) from None
    return sock
