"""The REST API's token. When the server has one (``$LAMINA_API_TOKEN``):

- POST calls (actions) need ``Authorization: Bearer <token>``: a header, never a
  cookie, so a page of another site cannot send it and no action can be forged;
- reads (GET) need the same header, or the console's sign-in cookie, which holds a
  digest of the token that grants reads only (``SameSite=Strict``, ``HttpOnly``) —
  unless the server is started with reads open (``open_reads``, ``--open-reads``,
  ``$LAMINA_OPEN_READS=1``): an explicit setting, never the default.

``/health`` and the console's static assets and sign-in page are always open."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import HTTPException, Request, Response, Security, status
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lamina.rest.models import ErrorResponse

TOKEN_ENV = "LAMINA_API_TOKEN"
OPEN_READS_ENV = "LAMINA_OPEN_READS"
#: The console's sign-in cookie (reads only).
READ_COOKIE = "lamina_reads"
SIGN_IN = "/console/login"
_ALWAYS_OPEN = ("/health", SIGN_IN, "/console/static/")
#: Paths a browser navigates to: sent to the sign-in page rather than refused.
_PAGES = ("/console/", "/docs")

AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorResponse, "description": "No Bearer token."},
    403: {"model": ErrorResponse, "description": "Wrong token."},
}

_bearer = HTTPBearer(
    auto_error=False,
    description=f"Required on POST calls when the server has a token (${TOKEN_ENV}).",
)


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
    )


def check_token(expected: str | None, authorization: str | None) -> None:
    """Raise 401 without Bearer credentials, 403 with the wrong ones (no-op without a
    configured token). Constant-time comparison of the raw bytes."""
    if not expected:
        return
    if not authorization:
        raise _unauthorized("this call needs an Authorization: Bearer <token> header")
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        raise _unauthorized("the Authorization header must be 'Bearer <token>'")
    # Starlette decodes header bytes as latin-1: re-encode to compare what was sent
    try:
        given = credentials.encode("latin-1")
    except UnicodeEncodeError:
        given = credentials.encode("utf-8")
    if not hmac.compare_digest(given, expected.encode("utf-8")):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the token is not valid")


def check_same_site(request: Request) -> None:
    """Raise 403 for a request a browser made from another site's page (its ``Origin``
    is not this server, or ``Sec-Fetch-Site`` says cross-site): with no token set, an
    action would otherwise be one form post away from any page the user opens.
    Clients outside a browser send neither header."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if site == "cross-site" or (origin is not None and origin != _own_origin(request)):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "cross-site request refused: call the API from the console's own pages, or "
            "from a client outside a browser",
        )


def _own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


class AuthenticatedRoute(APIRoute):
    """Checks the site and the token before FastAPI reads the body, so an
    unauthenticated caller gets 401/403, never a validation error about a request it
    may not make."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            check_same_site(request)
            check_token(request.app.state.token, request.headers.get("authorization"))
            return await handler(request)

        return checked


def documented_bearer(
    _: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> None:
    """Only puts the Bearer scheme in the OpenAPI document; AuthenticatedRoute checks."""


def reads_opened(explicit: bool | None = None) -> bool:
    """Whether reads are open without the token: ``explicit`` when given, else
    ``$LAMINA_OPEN_READS`` is ``1``, ``true`` or ``yes``."""
    if explicit is not None:
        return explicit
    return os.environ.get(OPEN_READS_ENV, "").strip().lower() in ("1", "true", "yes")


def read_pass(token: str) -> str:
    """What the sign-in cookie holds: a digest of ``token`` that opens reads only (the
    token itself never leaves the tab that typed it)."""
    return hmac.new(token.encode("utf-8"), b"lamina: reads", hashlib.sha256).hexdigest()


def may_read(request: Request, token: str) -> bool:
    """Whether ``request`` carries the token (header; a wrong one raises 401/403) or
    a valid sign-in cookie."""
    if request.headers.get("authorization"):
        check_token(token, request.headers.get("authorization"))
        return True
    cookie = request.cookies.get(READ_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), read_pass(token).encode())


def safe_next(target: str | None) -> str:
    """A place on this server to go back to after signing in (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def guard_reads(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Middleware: with a token and reads not opened, a GET without the token or the
    sign-in cookie gets 401 (API calls) or a redirect to the sign-in page (pages)."""
    token = request.app.state.token
    path = request.url.path
    if (
        not token
        or request.app.state.open_reads
        or request.method not in ("GET", "HEAD")
        or path.startswith(_ALWAYS_OPEN)
    ):
        return await call_next(request)
    try:
        if may_read(request, token):
            return await call_next(request)
    except HTTPException as exc:
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)
    if path == "/" or path.startswith(_PAGES):
        back = path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{SIGN_IN}?next={quote(back, safe='')}", status.HTTP_303_SEE_OTHER)
    return JSONResponse(
        {
            "detail": "reads need the API token on this server: send 'Authorization: "
            f"Bearer <token>', or sign in at {SIGN_IN}; to open reads, start it with "
            f"--open-reads (${OPEN_READS_ENV}=1)"
        },
        status.HTTP_401_UNAUTHORIZED,
        headers={"WWW-Authenticate": "Bearer"},
    )
