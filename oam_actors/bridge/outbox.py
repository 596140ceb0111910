"""The single ordered writer of one connection (reference §1.5 item 6).

Contract
--------
Producers (handlers, turns, tool calls) call :meth:`Outbox.put_nowait` from the event-loop
thread; it never blocks and never refuses for being full: the bridge watches
:attr:`Outbox.pending_bytes` and decides (pause reading, close the connection). One task runs
:meth:`Outbox.run`, which writes messages one write at a time, in put order, through the
``write`` callable given at construction. When several messages are pending they go out in one
call, joined with ``b"\\n"``, up to about ``max_batch_bytes`` per call (so a slow reader's
progress shows write by write); ``write`` appends the final newline (the stdio writer does), so
every call carries whole lines.

Lifecycle:

- :meth:`aclose` stops accepting messages, lets ``run`` write everything already put, and waits
  for ``run`` to return. If ``run`` is not running, ``aclose`` returns at once and a later ``run``
  flushes and returns.
- If ``write`` fails with an I/O error (``OSError`` such as a broken pipe, or anyio's
  ``BrokenResourceError``/``ClosedResourceError``), the peer is gone: the outbox becomes broken,
  logs once, drops what was pending and silently drops every later message; ``run`` returns.
  Other exceptions from ``write`` are bugs and propagate out of ``run``.
- :meth:`abandon` is the owner's decision to give up on the peer (it does not read): the write in
  progress is cancelled, pending and later messages are dropped, nothing is logged, ``run`` and
  ``aclose`` return at once.
- Cancelling ``run`` mid-write may leave a partial line; the connection is going away then.

:meth:`put_nowait` raises ``anyio.ClosedResourceError`` after :meth:`aclose`.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import msgspec

__all__ = ["MESSAGE_OVERHEAD", "Outbox", "OutboxStatistics"]

_log = logging.getLogger(__name__)

_WRITE_FAILURES = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)

MESSAGE_OVERHEAD = 64
"""Bytes a pending message is counted beyond its length: the bytes object and its queue slot."""

MAX_BATCH_BYTES = 64 * 1024


class OutboxStatistics(msgspec.Struct, frozen=True):
    """``pending``: put, not yet written; ``written``: handed to ``write``; ``dropped``: lost after the
    writer broke or the outbox was abandoned; ``pending_bytes``: what the pending messages hold."""

    pending: int
    written: int
    dropped: int
    pending_bytes: int = 0


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # aclose called; run still flushing
    CLOSED = "closed"
    BROKEN = "broken"  # the writer failed, or the owner abandoned the peer; messages are dropped


class Outbox:
    """One ordered writer: messages are written one at a time, in put order, by one task."""

    def __init__(self, write: Callable[[bytes], Awaitable[None]], *, max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        if max_batch_bytes < 1:
            raise ValueError("max_batch_bytes must be at least 1")
        self._write = write
        self._max_batch_bytes = max_batch_bytes
        self._pending: deque[bytes] = deque()
        self._queued_bytes = 0
        self._writing_bytes = 0  # the batch being written still holds its memory
        self._state = _State.OPEN
        self._running = False
        # Events are created inside the event loop (anyio needs a running backend).
        self._wakeup: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._room: anyio.Event | None = None
        self._room_below = 0
        self._write_scope: anyio.CancelScope | None = None
        self._written = 0
        self._dropped = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes held by messages put and not yet written (the batch in the write included)."""
        return self._queued_bytes + self._writing_bytes

    def put_nowait(self, message: bytes) -> None:
        """Queue one message (one line, no newline). Never blocks.

        Raises ``anyio.ClosedResourceError`` after :meth:`aclose`. Once the writer has broken (or
        the outbox was abandoned), the message is dropped silently.
        """
        if self._state is _State.BROKEN:
            self._dropped += 1
            return
        if self._state is not _State.OPEN:
            raise anyio.ClosedResourceError
        self._pending.append(message)
        self._queued_bytes += len(message) + MESSAGE_OVERHEAD
        if self._wakeup is not None:
            self._wakeup.set()

    async def wait_below(self, limit: int) -> None:
        """Return once :attr:`pending_bytes` is below ``limit``, or the outbox no longer writes.
        One waiter at a time (the connection's reader)."""
        while self.pending_bytes >= limit and self._state is not _State.BROKEN and self._running:
            self._room = anyio.Event()
            self._room_below = limit
            await self._room.wait()

    async def run(self) -> None:
        """The writer loop; run it in the connection's task group. Returns once closed or broken."""
        if self._running:
            raise RuntimeError("Outbox.run is already running")
        self._running = True
        try:
            await self._write_until_done()
        finally:
            self._running = False
            if self._state is _State.CLOSING and not self._pending:
                self._state = _State.CLOSED
            if self._stopped is not None:
                self._stopped.set()
            self._wake_room()

    async def aclose(self) -> None:
        """Stop accepting messages, flush what was put, and wait for :meth:`run` to return."""
        if self._state is _State.OPEN:
            self._state = _State.CLOSING
        if not self._running:
            if not self._pending and self._state is _State.CLOSING:
                self._state = _State.CLOSED
            return
        if self._stopped is None:
            self._stopped = anyio.Event()
        if self._wakeup is not None:
            self._wakeup.set()
        await self._stopped.wait()

    def abandon(self) -> None:
        """Give up on the peer: cancel the write in progress, drop everything, accept nothing."""
        if self._state is _State.BROKEN:
            return
        self._drop_all()
        if self._write_scope is not None:
            self._write_scope.cancel()
        if self._wakeup is not None:
            self._wakeup.set()
        self._wake_room()

    def statistics(self) -> OutboxStatistics:
        """A snapshot of the counters."""
        return OutboxStatistics(
            pending=len(self._pending), written=self._written, dropped=self._dropped, pending_bytes=self.pending_bytes
        )

    async def _write_until_done(self) -> None:
        while self._state is not _State.BROKEN:
            if not self._pending:
                if self._state is not _State.OPEN:
                    return
                await self._wait_for_messages()
                continue
            batch = self._take_batch()
            try:
                with anyio.CancelScope() as self._write_scope:
                    await self._write(batch[0] if len(batch) == 1 else b"\n".join(batch))
            except _WRITE_FAILURES as exc:
                if self._state is _State.BROKEN:  # abandoned: the owner has said why
                    self._dropped += len(batch)
                else:
                    self._break(len(batch), exc)
                return
            finally:
                self._write_scope = None
                self._writing_bytes = 0
            if self._state is _State.BROKEN:  # abandoned during the write
                self._dropped += len(batch)
                return
            self._written += len(batch)
            self._wake_room()

    async def _wait_for_messages(self) -> None:
        self._wakeup = anyio.Event()
        await self._wakeup.wait()

    def _take_batch(self) -> list[bytes]:
        batch = [self._pending.popleft()]
        size = len(batch[0]) + MESSAGE_OVERHEAD
        while self._pending and size < self._max_batch_bytes:
            message = self._pending.popleft()
            batch.append(message)
            size += len(message) + MESSAGE_OVERHEAD
        self._queued_bytes -= size
        self._writing_bytes = size
        return batch

    def _wake_room(self) -> None:
        if self._room is not None and (
            self.pending_bytes < self._room_below or self._state is _State.BROKEN or not self._running
        ):
            self._room.set()
            self._room = None

    def _drop_all(self) -> None:
        self._state = _State.BROKEN
        self._dropped += len(self._pending)
        self._pending.clear()
        self._queued_bytes = 0

    def _break(self, lost: int, exc: BaseException) -> None:
        self._drop_all()
        self._dropped += lost
        _log.warning("outbox writer failed (%r); dropping further messages", exc)
