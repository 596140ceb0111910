"""The TCP transport: JSON lines both ways, one bridge per connection.

Contract
--------
- Framing and the line limit are stdio's (:class:`~oam_actors.transports.stdio.LineSplitter`):
  one JSON object per ``\\n``-terminated line, a trailing ``\\r`` stripped, an oversize line
  answered ``-32600`` and skipped.
- A connection beyond the hub's ``max_connections`` gets one error line (``-32010 busy``,
  ``data.limit``) and is closed. With tokens configured the first line must be ``auth``
  (:func:`~oam_actors.transports.auth.check_auth_line`), within ``auth_timeout`` seconds.
- The connection ends at end of input (or a reset), after ``shutdown`` has been answered, or when
  it has been idle ``idle_timeout`` seconds. A client that goes away costs only its own work: its
  turns and tool calls are cancelled (``drain_on_eof=False``).
- Closing is graceful: the server stops writing, then reads and discards what the client still
  sends (briefly) before closing, so a reset does not destroy the last lines it wrote.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from functools import partial

import anyio
import anyio.abc

from ..bridge import jsonrpc
from .auth import ANONYMOUS, Tenant, check_auth_line
from .hub import Activity, Hub, receive_or_idle
from .stdio import LineSplitter, LineTooLong

__all__ = ["serve_tcp", "serve_tcp_connection"]

_log = logging.getLogger(__name__)

TRANSPORT = "tcp"
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 1 << 20
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


async def serve_tcp(listener: anyio.abc.Listener[anyio.abc.SocketStream], hub: Hub) -> None:
    """Serve every connection ``listener`` accepts, until cancelled."""
    await listener.serve(partial(serve_tcp_connection, hub=hub))


async def serve_tcp_connection(stream: anyio.abc.ByteStream, hub: Hub) -> None:
    """Serve one accepted connection to its end, then close it."""
    try:
        if not hub.admit(TRANSPORT):
            await _send_line(stream, jsonrpc.encode_error(None, hub.full_error()))
            return
        try:
            await _serve_admitted(_Connection(stream, hub.policy.max_line_bytes), hub)
        finally:
            hub.release(TRANSPORT)
    except _GONE:
        pass  # the client went away while we wrote to it
    except Exception:  # noqa: BLE001 -- one connection's failure must not end the server's others
        _log.exception("TCP connection failed")
    finally:
        with anyio.CancelScope(shield=True):
            await _close_gracefully(stream)


async def _serve_admitted(connection: _Connection, hub: Hub) -> None:
    tenant: Tenant | None = ANONYMOUS
    if hub.policy.tokens:
        tenant = None
        with anyio.move_on_after(hub.policy.auth_timeout):
            tenant = await _authenticate(connection, hub)
    if tenant is None:
        hub.refused(TRANSPORT, "auth")
        return
    bridge = hub.open_bridge(connection.write, tenant)
    lines = connection.lines(hub.policy.idle_timeout, lambda: bridge.in_flight > 0)
    await bridge.serve(lines, drain_on_eof=False)


async def _authenticate(connection: _Connection, hub: Hub) -> Tenant | None:
    while True:
        line = await connection.next_line(None, lambda: False)  # auth_timeout bounds the wait
        if line is None:
            return None
        outcome = check_auth_line(line, hub.policy.tokens)
        if outcome.reply is not None:
            await connection.write(outcome.reply)
        if not outcome.waiting:
            return outcome.tenant


class _Connection:
    """One socket: lines in (with the idle rule), lines out."""

    def __init__(self, stream: anyio.abc.ByteStream, max_line_bytes: int) -> None:
        self._stream = stream
        self._splitter = LineSplitter(max_line_bytes)
        self._ready: deque[bytes | LineTooLong] = deque()
        self._ended = False
        self.activity = Activity()

    async def write(self, data: bytes) -> None:
        await self._stream.send(data + b"\n")
        self.activity.touch()

    async def next_line(self, idle_timeout: float | None, busy: Callable[[], bool]) -> bytes | LineTooLong | None:
        """The next line; ``None`` at end of input or when idle."""
        while not self._ready:
            if self._ended:
                return None
            chunk = await receive_or_idle(self._receive, self.activity, idle_timeout, busy)
            if chunk is None:  # idle: a partial line is dropped with the connection
                return None
            if chunk:
                self._ready.extend(self._splitter.feed(chunk))
            else:
                self._ended = True
                self._ready.extend(self._splitter.finish())
        return self._ready.popleft()

    async def lines(self, idle_timeout: float | None, busy: Callable[[], bool]) -> AsyncIterator[bytes | LineTooLong]:
        while (line := await self.next_line(idle_timeout, busy)) is not None:
            yield line

    async def _receive(self) -> bytes:
        """A chunk, or ``b""`` once the peer closed or reset the connection."""
        try:
            return await self._stream.receive()
        except _GONE:
            return b""


async def _send_line(stream: anyio.abc.ByteStream, line: bytes) -> None:
    try:
        await stream.send(line + b"\n")
    except _GONE:
        pass


async def _close_gracefully(stream: anyio.abc.ByteStream) -> None:
    """Half-close, drain briefly, close: unread input at close would make the kernel send a reset,
    which can destroy the last lines still on their way to the client."""
    try:
        await stream.send_eof()
        with anyio.move_on_after(_LINGER_SECONDS):
            drained = 0
            while drained < _LINGER_BYTES:
                drained += len(await stream.receive())
    except _GONE:
        pass
    await stream.aclose()
