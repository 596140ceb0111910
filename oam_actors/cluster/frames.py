"""Length-prefixed frames over one connection: the data path between driver and shard (a Unix
socket when both are on one node, TCP otherwise).

A frame is a 4-byte big-endian length and that many bytes (a batch of ops or items, encoded by
:mod:`.wire`). The first frame a driver sends is the shard's token (from ``ping`` over Ray's
authenticated channel); the shard decodes nothing before it has checked it.

:class:`FrameProtocol` is an asyncio protocol, not a stream read by a task: each whole frame
goes to its handler inside the event loop's read callback, and a frame is written at once (the
transport buffers it). A crossing costs no task switch of its own on either side; on this
machine each switch is ~10 µs of a round trip of a few hundred.
"""

from __future__ import annotations

import asyncio
import contextvars
import struct
from collections.abc import Callable

import anyio
import sniffio

__all__ = ["CONNECTION_LOST", "MAX_FRAME_BYTES", "FrameProtocol", "raw_frame"]

MAX_FRAME_BYTES = 1 << 30

CONNECTION_LOST = (
    OSError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)
"""What :meth:`FrameProtocol.closed` and connecting raise when the other end is gone."""
_HEADER = struct.Struct(">I")


def raw_frame(payload: bytes) -> bytes:
    """``payload`` as one frame."""
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(payload)) + payload


class FrameProtocol(asyncio.Protocol):
    """One connection's frames. ``on_frame(payload)`` is called for each frame received, in
    order, with a view of the bytes read (valid while they are: decode it, keep no part); it may raise, which ends the connection (a peer that breaks the framing or sends
    what does not decode is a broken connection, not our crash). ``first_limit`` bounds the
    first frame (the token, before the peer is trusted).

    ``on_frame`` runs in ``context`` (default: a copy of the creator's), marked as asyncio for
    sniffio (which anyio asks when it is installed): a read callback is no task, and what a
    frame sets off (anyio events, task groups) must find its library all the same."""

    def __init__(
        self,
        on_frame: Callable[[memoryview], None],
        *,
        first_limit: int = MAX_FRAME_BYTES,
        context: contextvars.Context | None = None,
    ) -> None:
        self._on_frame = on_frame
        self._context = contextvars.copy_context() if context is None else context
        self._context.run(sniffio.current_async_library_cvar.set, "asyncio")
        self._limit = first_limit
        self._buffer = bytearray()  # the start of a frame not yet whole
        self._wanted = _HEADER.size  # bytes the buffer needs before a frame can be whole
        self._transport: asyncio.Transport | None = None
        self._closed = asyncio.Event()
        self._why: Exception = anyio.EndOfStream()

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._wanted:
                return  # the frame under way is not whole yet
            data = bytes(buffer)
            buffer.clear()
        # Whole frames go to the handler as views of what was read: no copy of their bytes.
        view = memoryview(data)
        offset = 0
        try:
            while True:
                if len(data) - offset < _HEADER.size:
                    self._wanted = _HEADER.size
                    break
                (size,) = _HEADER.unpack_from(data, offset)
                if size > self._limit:
                    raise ValueError(f"frame of {size} bytes exceeds {self._limit}")
                end = offset + _HEADER.size + size
                if len(data) < end:
                    self._wanted = end - offset
                    break
                payload = view[offset + _HEADER.size:end]
                offset = end
                self._limit = MAX_FRAME_BYTES
                self._context.run(self._on_frame, payload)
        except Exception as exc:  # noqa: BLE001 - reported by closed(); the connection ends
            self._end(exc)
            return
        if offset < len(data):
            buffer += view[offset:]

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc)

    # --- use -------------------------------------------------------------------------------------

    def send(self, payload: bytes) -> None:
        """Write ``payload`` as one frame (dropped once the connection is closing: whoever waits
        on it hears of that from :meth:`closed`)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(raw_frame(payload))

    async def closed(self) -> None:
        """Wait until the connection ends, then raise why (one of :data:`CONNECTION_LOST`)."""
        try:
            await self._closed.wait()
        finally:
            self.close()
        raise self._why

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _end(self, exc: BaseException | None) -> None:
        if self._closed.is_set():
            return
        if isinstance(exc, OSError):
            self._why = exc
        elif exc is not None:
            self._why = anyio.BrokenResourceError(f"the connection broke: {exc!r}")
            self._why.__cause__ = exc
        self._closed.set()
        self.close()
