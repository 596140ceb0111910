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
  a rule of its :class:`~oam_actors.transports.hub.Watchdog` expires (idle, a line not completed,
  output not read) or its memory bound is passed (``Bridge.abort``). A client that goes away
  costs only its own work: its turns and tool calls are cancelled (``drain_on_eof=False``).
- The bridge's backpressure reaches the client: while the bridge does not ask for the next line,
  the socket is not read, so the client's writes stall in its own socket buffer. What is read and
  not yet handled (the partial line, the lines of the last chunk) is counted as buffered input.
- Closing is graceful: the server stops writing, then reads and discards what the client still
  sends (briefly) before closing, so a reset does not destroy the last lines it wrote. An aborted
  connection is closed at once (its unread output is dropped).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from functools import partial

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from ..bridge import jsonrpc
from .auth import ANONYMOUS, Tenant, check_auth_line
from .hub import Hub, limit_send_buffer, peer_name
from .stdio import LineSplitter, LineTooLong

__all__ = ["serve_tcp", "serve_tcp_connection"]

_log = logging.getLogger(__name__)

TRANSPORT = "tcp"
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 1 << 20
_READ_CHUNK = 64 * 1024
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


async def serve_tcp(listener: anyio.abc.Listener[anyio.abc.SocketStream], hub: Hub) -> None:
    """Serve every connection ``listener`` accepts, until cancelled."""
    await listener.serve(partial(serve_tcp_connection, hub=hub))


async def serve_tcp_connection(stream: anyio.abc.ByteStream, hub: Hub) -> None:
    """Serve one accepted connection to its end, then close it."""
    graceful = True
    try:
        if not hub.admit(TRANSPORT):
            await _send_line(stream, jsonrpc.encode_error(None, hub.full_error()))
            return
        try:
            graceful = await _serve_admitted(_Connection(stream, hub), hub)
        finally:
            hub.release(TRANSPORT)
    except _GONE:
        pass  # the client went away while we wrote to it
    except Exception:  # noqa: BLE001 -- one connection's failure must not end the server's others
        _log.exception("TCP connection failed")
    finally:
        with anyio.CancelScope(shield=True):
            if graceful:
                await _close_gracefully(stream)
            else:
                await stream.aclose()


async def _serve_admitted(connection: _Connection, hub: Hub) -> bool:
    """Authenticate, then serve; whether the connection may be closed gracefully (not aborted)."""
    tenant: Tenant | None = ANONYMOUS
    if hub.policy.tokens:
        tenant = None
        with anyio.move_on_after(hub.policy.auth_timeout):
            tenant = await _authenticate(connection, hub)
    if tenant is None:
        hub.refused(TRANSPORT, "auth")
        return True
    bridge = hub.open_bridge(connection.write, tenant, f"tcp {connection.peer}")
    await hub.serve(bridge, connection.watchdog, connection.lines(), connection.buffered)
    return bridge.aborted is None


async def _authenticate(connection: _Connection, hub: Hub) -> Tenant | None:
    while True:
        line = await connection.next_line()  # auth_timeout bounds the wait
        if line is None:
            return None
        outcome = check_auth_line(line, hub.policy.tokens)
        if outcome.reply is not None:
            await connection.write(outcome.reply)
        if not outcome.waiting:
            return outcome.tenant


class _Connection:
    """One socket: lines in, lines out, and what its watchdog needs to know."""

    def __init__(self, stream: anyio.abc.ByteStream, hub: Hub) -> None:
        self._stream = stream
        self._splitter = LineSplitter(hub.policy.max_line_bytes)
        self._chunk = min(_READ_CHUNK, hub.policy.max_line_bytes)  # what one read may add to the input held
        self._ready: deque[bytes | LineTooLong] = deque()
        self._ready_bytes = 0
        self._ended = False
        self.watchdog = hub.watchdog()
        self.peer = peer_name(stream.extra(SocketAttribute.remote_address, None))
        limit_send_buffer(stream.extra(SocketAttribute.raw_socket, None))

    async def write(self, data: bytes) -> None:
        with self.watchdog.writing():
            await self._stream.send(data + b"\n")

    def buffered(self) -> int:
        """Input read and not yet handed to the bridge."""
        return self._splitter.buffered + self._ready_bytes

    async def next_line(self) -> bytes | LineTooLong | None:
        """The next line; ``None`` at end of input."""
        while not self._ready:
            if self._ended:
                return None
            chunk = await self._receive()
            if chunk:
                lines = self._splitter.feed(chunk)
                self.watchdog.received(completed=bool(lines), partial=self._splitter.partial)
            else:
                self._ended = True
                lines = self._splitter.finish()
            self._ready.extend(lines)
            self._ready_bytes += sum(len(line) for line in lines if isinstance(line, bytes))
        line = self._ready.popleft()
        if isinstance(line, bytes):
            self._ready_bytes -= len(line)
        return line

    async def lines(self) -> AsyncIterator[bytes | LineTooLong]:
        while (line := await self.next_line()) is not None:
            yield line

    async def _receive(self) -> bytes:
        """A chunk, or ``b""`` once the peer closed or reset the connection."""
        try:
            return await self._stream.receive(self._chunk)
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
