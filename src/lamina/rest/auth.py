"""The REST API's token: POST calls need ``Authorization: Bearer <token>`` when the
server has one (``$LAMINA_API_TOKEN``). A header, never a cookie: a page of another
site cannot send it, so no action can be forged across sites."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import HTTPException, Request, Response, Security, status
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lamina.rest.models import ErrorResponse

TOKEN_ENV = "LAMINA_API_TOKEN"

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
