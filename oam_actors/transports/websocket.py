"""The WebSocket transport, plus ``GET /health`` and ``GET /metrics`` on the same HTTP port.

Contract
--------
- ``/ws`` is the WebSocket endpoint: one JSON-RPC message per text frame, both ways; one bridge per
  connection. A binary frame is answered ``-32600`` (``id: null``) and the connection carries on.
  A frame larger than ``max_line_bytes`` closes the connection (code 1009): WebSocket frames
  cannot be skipped unread as lines can.
- With tokens configured, the opening handshake must carry ``Authorization: Bearer <token>``;
  otherwise it is answered HTTP 401 and no connection opens. Beyond ``max_connections`` the
  connection opens, receives one ``-32010 busy`` message and is closed with code 1013.
- ``GET /health`` → 200 ``{"status":"ok","connections":n,"sessions":m}`` (no token needed, for
  probes). ``GET /metrics`` → 200 Prometheus text (with tokens configured, it needs a valid bearer
  token like ``/ws``). With a console, ``/console…`` is the console
  (:mod:`oam_actors.transports.console`; its stream is the WebSocket ``/console/live``). Any
  other path → 404.
- Ends, cancellation and the watchdog's rules as in the TCP transport (see
  ``oam_actors.transports.tcp``); on WebSocket the line rule covers the first message (partial
  frames are the library's). An aborted connection is closed with code 1008 and the reason.
- Backpressure: at most one received message waits unread (``max_queue=1``); while the bridge
  does not ask for the next one, the socket is not read. Outgoing frames wait in the outbox once
  the library's write buffer (32 KiB) is full.
- RFC 6455 by the ``websockets`` library: pings are answered, fragmented messages reassembled
  (within ``max_line_bytes``), invalid UTF-8 in a text message closes with 1007, the close
  handshake is completed (``close_timeout``: 2 s, then the socket is dropped).

Runs on the asyncio backend (the ``websockets`` library is asyncio-based); its connection tasks
belong to the server object, which :func:`websocket_server` closes on exit.
"""

from __future__ import annotations

import http
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from urllib.parse import urlsplit

import anyio
import msgspec
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from ..bridge import jsonrpc
from ..errors import ErrorCode, ProtocolError
from ..observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .auth import ANONYMOUS, Tenant, bearer_token
from .console import LIVE_PATH, Console, console_response, is_console_path
from .hub import Hub, Watchdog, limit_send_buffer, peer_name

__all__ = ["WS_PATH", "BinaryFrame", "websocket_server"]

TRANSPORT = "ws"
WS_PATH = "/ws"
_TRY_AGAIN_LATER = 1013
_POLICY_VIOLATION = 1008
_CLOSE_TIMEOUT = 2.0


class BinaryFrame(msgspec.Struct, frozen=True):
    """A binary frame stands in the input for what the bridge answers ``-32600``."""

    size: int

    def to_error(self) -> ProtocolError:
        return ProtocolError(
            ErrorCode.INVALID_MESSAGE, "Invalid message: binary frames are not supported; send JSON in text frames."
        )


@asynccontextmanager
async def websocket_server(
    hub: Hub, host: str | None, port: int, *, console: Console | None = None, bridges: bool = True
) -> AsyncIterator[Server]:
    """Listen on ``host``:``port`` (``None``: every interface) while inside the block; on exit
    close every connection (1001) and wait for their bridges to finish. With ``console``, serve
    it under ``/console`` too; ``bridges=False``: no ``/ws`` (a console port of its own)."""
    server = await serve(
        partial(_serve_connection, hub=hub, console=console),
        host,
        port,
        process_request=partial(_route, hub=hub, console=console, bridges=bridges),
        max_size=hub.policy.max_line_bytes,
        max_queue=1,
        close_timeout=_CLOSE_TIMEOUT,
    )
    try:
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            server.close()
            await server.wait_closed()


async def _route(
    connection: ServerConnection, request: Request, *, hub: Hub, console: Console | None, bridges: bool
) -> Response | None:
    """The HTTP side of the handshake: health, metrics, the console, authentication, 404."""
    path = urlsplit(request.path).path
    if path == "/health":
        return _json(connection, hub.health())
    if console is not None and is_console_path(path):
        return await console_response(console, request)
    if path not in ("/metrics", WS_PATH) or (path == WS_PATH and not bridges):
        return connection.respond(http.HTTPStatus.NOT_FOUND, "Not found.\n")
    if _tenant(request, hub) is None:
        hub.refused(TRANSPORT, "auth")
        response = connection.respond(http.HTTPStatus.UNAUTHORIZED, "A valid bearer token is required.\n")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    if path == "/metrics":
        return _typed(connection.respond(http.HTTPStatus.OK, await hub.scrape()), METRICS_CONTENT_TYPE)
    return None  # go on with the WebSocket handshake


def _tenant(request: Request, hub: Hub) -> Tenant | None:
    if not hub.policy.tokens:
        return ANONYMOUS
    return hub.policy.tokens.tenant(bearer_token(request.headers.get("Authorization")))


def _json(connection: ServerConnection, value: object) -> Response:
    return _typed(connection.respond(http.HTTPStatus.OK, msgspec.json.encode(value).decode()), "application/json")


def _typed(response: Response, content_type: str) -> Response:
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = content_type
    return response


async def _serve_connection(websocket: ServerConnection, *, hub: Hub, console: Console | None) -> None:
    assert websocket.request is not None
    if console is not None and urlsplit(websocket.request.path).path == LIVE_PATH:
        await _serve_viewer(websocket, console)  # _route let only a signed-in viewer this far
        return
    if not hub.admit(TRANSPORT):
        await _refuse(websocket, hub)
        return
    try:
        tenant = _tenant(websocket.request, hub)
        assert tenant is not None, "the handshake checked the token"
        limit_send_buffer(websocket.transport.get_extra_info("socket"))
        watchdog = hub.watchdog()
        bridge = hub.open_bridge(partial(_write, websocket, watchdog), tenant, f"ws {peer_name(websocket.remote_address)}")
        await hub.serve(bridge, watchdog, _frames(websocket, watchdog))
        if bridge.aborted is not None:
            await _close(websocket, _POLICY_VIOLATION, bridge.aborted)
    finally:
        hub.release(TRANSPORT)


async def _serve_viewer(websocket: ServerConnection, console: Console) -> None:
    """The console's live stream until the viewer or the server closes it."""
    async def send(text: str) -> None:
        await websocket.send(text, text=True)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_cancel_when_closed, websocket, tasks.cancel_scope)
            if not await console.serve_viewer(send):
                await _close(websocket, _TRY_AGAIN_LATER, "too many console viewers")
            tasks.cancel_scope.cancel()
    except ConnectionClosed:
        pass


async def _cancel_when_closed(websocket: ServerConnection, scope: anyio.CancelScope) -> None:
    await websocket.wait_closed()
    scope.cancel()


async def _refuse(websocket: ServerConnection, hub: Hub) -> None:
    try:
        await websocket.send(jsonrpc.encode_error(None, hub.full_error()), text=True)
        await websocket.close(_TRY_AGAIN_LATER, "too many connections")
    except ConnectionClosed:
        pass


async def _close(websocket: ServerConnection, code: int, reason: str) -> None:
    try:
        await websocket.close(code, _truncated(reason))
    except ConnectionClosed:
        pass


def _truncated(reason: str) -> str:
    """A close reason fits in 123 bytes of UTF-8 (RFC 6455 §5.5)."""
    encoded = reason.encode()
    return reason if len(encoded) <= 123 else encoded[:120].decode(errors="ignore") + "..."


async def _write(websocket: ServerConnection, watchdog: Watchdog, data: bytes) -> None:
    """The outbox hands several messages joined by newlines; each goes in its own frame."""
    try:
        with watchdog.writing():
            for message in data.split(b"\n"):
                await websocket.send(message, text=True)
    except ConnectionClosed as exc:
        raise anyio.BrokenResourceError from exc


async def _frames(websocket: ServerConnection, watchdog: Watchdog) -> AsyncIterator[str | BinaryFrame]:
    while (message := await _receive(websocket)) is not None:
        watchdog.received(completed=True, partial=False)
        yield message if isinstance(message, str) else BinaryFrame(len(message))


async def _receive(websocket: ServerConnection) -> str | bytes | None:
    """The next message; ``None`` once the connection is closing or closed."""
    try:
        return await websocket.recv()
    except ConnectionClosed:
        return None
