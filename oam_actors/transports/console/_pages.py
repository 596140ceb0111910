"""The console's HTTP side, answered during the WebSocket server's opening handshake.

Contract
--------
Every path is under ``/console``; each answer closes its connection (``Connection: close``) and
is never cached. With tokens configured:

======================== ====== =====================================================================
path                     method answer
======================== ====== =====================================================================
``/console``             GET    signed in: the page (200); else the sign-in form (401), no data
``/console?token=T``     GET    ``T`` valid: 303 to ``/console`` with the sign-in cookie; else 401 form
``/console/login``       POST   ``Authorization: Bearer T`` valid: 204 with the cookie; else 401
``/console/logout``      POST   204, the cookie cleared
``/console/state``       GET    signed in: the view as JSON (what the stream starts with); else 401
``/console/live``        GET    signed in: the WebSocket handshake goes on (the stream); else 401
``/console/static/NAME`` GET    the page's script and style sheet (no data; no sign-in needed)
``/console/``            GET    303 to ``/console``
======================== ====== =====================================================================

"Signed in" is a valid sign-in cookie or bearer token (:mod:`._signin`). A POST or a stream
opened by a page of another origin is answered 403. Another method is 405, another path 404.
Without tokens every request is signed in and ``?token=`` is dropped by the same redirect.
"""

from __future__ import annotations

import email.utils
import http
from functools import cache
from importlib import resources
from urllib.parse import parse_qs, urlsplit

import msgspec
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from ..auth import Tenant, bearer_token
from ._feed import Console
from ._signin import cookie_header, same_origin

__all__ = ["CONSOLE_PATH", "LIVE_PATH", "console_response", "is_console_path"]

CONSOLE_PATH = "/console"
LIVE_PATH = "/console/live"

_STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
           "login.js": "text/javascript; charset=utf-8"}
_HTML = "text/html; charset=utf-8"
_PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_REFUSED = "A valid token is required: sign in at /console.\n"


def is_console_path(path: str) -> bool:
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


async def console_response(console: Console, request: Request) -> Response | None:
    """The answer to ``request`` (a path :func:`is_console_path` accepts); ``None`` to go on
    with the handshake of a signed-in ``/console/live``."""
    parts = urlsplit(request.path)
    path = parts.path  # exact: the handshake goes on only for LIVE_PATH, as the transport checks it
    if path.startswith(CONSOLE_PATH + "/static/"):
        return _static(request, path.removeprefix(CONSOLE_PATH + "/static/"))
    route = _ROUTES.get(path)
    if route is None:
        return _text(http.HTTPStatus.NOT_FOUND, "Not found.\n")
    method, answer = route
    if request.method != method:
        response = _text(http.HTTPStatus.METHOD_NOT_ALLOWED, f"Use {method}.\n")
        response.headers["Allow"] = method
        return response
    if method == "POST" or path == LIVE_PATH:
        if not same_origin(request.headers.get("Origin"), request.headers.get("Host")):
            return _text(http.HTTPStatus.FORBIDDEN, "Cross-origin requests are refused.\n")
    return await answer(console, request, parse_qs(parts.query))


async def _page(console: Console, request: Request, query: dict[str, list[str]]) -> Response:
    if "token" in query:
        tenant = console.sign_ins.token_tenant(query["token"][-1])
        if tenant is None:
            console.hub.refused("console", "auth")
            return _html(http.HTTPStatus.UNAUTHORIZED, "login.html")
        return _signed_in(console, tenant, http.HTTPStatus.SEE_OTHER, Location=CONSOLE_PATH)
    if _tenant(console, request) is None:
        return _html(http.HTTPStatus.UNAUTHORIZED, "login.html")
    return _html(http.HTTPStatus.OK, "console.html")


async def _login(console: Console, request: Request, query: dict[str, list[str]]) -> Response:
    tenant = console.sign_ins.token_tenant(bearer_token(request.headers.get("Authorization")))
    if tenant is None:
        return _unauthorized(console)
    return _signed_in(console, tenant, http.HTTPStatus.NO_CONTENT)


async def _logout(console: Console, request: Request, query: dict[str, list[str]]) -> Response:
    response = _empty(http.HTTPStatus.NO_CONTENT)
    response.headers["Set-Cookie"] = cookie_header("", 0)
    return response


async def _state(console: Console, request: Request, query: dict[str, list[str]]) -> Response:
    if _tenant(console, request) is None:
        return _unauthorized(console)
    return _respond(http.HTTPStatus.OK, msgspec.json.encode(await console.view()), "application/json")


async def _live(console: Console, request: Request, query: dict[str, list[str]]) -> Response | None:
    return _unauthorized(console) if _tenant(console, request) is None else None


async def _slash(console: Console, request: Request, query: dict[str, list[str]]) -> Response:
    response = _empty(http.HTTPStatus.SEE_OTHER)
    response.headers["Location"] = CONSOLE_PATH
    return response


_ROUTES = {
    CONSOLE_PATH: ("GET", _page),
    CONSOLE_PATH + "/": ("GET", _slash),
    CONSOLE_PATH + "/login": ("POST", _login),
    CONSOLE_PATH + "/logout": ("POST", _logout),
    CONSOLE_PATH + "/state": ("GET", _state),
    LIVE_PATH: ("GET", _live),
}


def _tenant(console: Console, request: Request) -> Tenant | None:
    return console.sign_ins.request_tenant(request.headers.get("Authorization"), request.headers.get("Cookie"))


def _signed_in(console: Console, tenant: Tenant, status: http.HTTPStatus, **headers: str) -> Response:
    """``status`` with the sign-in cookie (none when the console is open)."""
    response = _empty(status)
    if not console.sign_ins.open:
        response.headers["Set-Cookie"] = console.sign_ins.cookie(tenant)
    for name, value in headers.items():
        response.headers[name] = value
    return response


def _unauthorized(console: Console) -> Response:
    console.hub.refused("console", "auth")
    response = _text(http.HTTPStatus.UNAUTHORIZED, _REFUSED)
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _static(request: Request, name: str) -> Response:
    if name not in _STATIC:
        return _text(http.HTTPStatus.NOT_FOUND, "Not found.\n")
    if request.method != "GET":
        return _text(http.HTTPStatus.METHOD_NOT_ALLOWED, "Use GET.\n")
    return _respond(http.HTTPStatus.OK, _file(name), _STATIC[name])


def _html(status: http.HTTPStatus, name: str) -> Response:
    response = _respond(status, _file(name), _HTML)
    response.headers["Content-Security-Policy"] = _PAGE_POLICY
    return response


@cache
def _file(name: str) -> bytes:
    """A file of the package's ``static`` folder (package data: a non-editable install ships it)."""
    return (resources.files(__package__) / "static" / name).read_bytes()


def _text(status: http.HTTPStatus, text: str) -> Response:
    return _respond(status, text.encode(), "text/plain; charset=utf-8")


def _empty(status: http.HTTPStatus) -> Response:
    return _respond(status, b"", None)


def _respond(status: http.HTTPStatus, body: bytes, content_type: str | None) -> Response:
    headers = Headers([
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Connection", "close"),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
    ])
    if content_type is not None:
        headers["Content-Type"] = content_type
    return Response(status.value, status.phrase, headers, body)
