"""The single ordered writer of one connection (reference §1.5 item 6).

Contract
--------
Producers (handlers, turns, tool calls) call :meth:`Outbox.put_nowait` from the event-loop
thread; it never blocks. One task runs :meth:`Outbox.run`, which writes messages one write at a
time, in put order, through the ``write`` callable given at construction. When several messages are
pending they go out in one call, joined with ``b"\\n"``; ``write`` appends the final newline (the
stdio writer does), so every call carries whole lines.

Lifecycle:

- :meth:`aclose` stops accepting messages, lets ``run`` write everything already put, and waits
  for ``run`` to return. If ``run`` is not running, ``aclose`` returns at once and a later ``run``
  flushes and returns.
- If ``write`` fails with an I/O error (``OSError`` such as a broken pipe, or anyio's
  ``BrokenResourceError``/``ClosedResourceError``), the peer is gone: the outbox becomes broken,
  logs once, drops what was pending and silently drops every later message; ``run`` returns.
  Other exceptions from ``write`` are bugs and propagate out of ``run``.
- Cancelling ``run`` mid-write may leave a partial line; the connection is going away then.

:meth:`put_nowait` raises ``anyio.ClosedResourceError`` after :meth:`aclose` and
``anyio.WouldBlock`` when ``max_pending`` messages are already waiting (the peer is not reading:
the owner should drop the connection rather than grow memory).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import msgspec

__all__ = ["Outbox", "OutboxStatistics"]

_log = logging.getLogger(__name__)

_WRITE_FAILURES = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)


class OutboxStatistics(msgspec.Struct, frozen=True):
    """``pending``: put, not yet written; ``written``: handed to ``write``; ``dropped``: lost after the
    writer broke."""

    pending: int
    written: int
    dropped: int


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # aclose called; run still flushing
    CLOSED = "closed"
    BROKEN = "broken"  # the writer failed; messages are dropped


class Outbox:
    """One ordered writer: messages are written one at a time, in put order, by one task."""

    def __init__(self, write: Callable[[bytes], Awaitable[None]], *, max_pending: int = 65536) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._write = write
        self._max_pending = max_pending
        self._pending: deque[bytes] = deque()
        self._state = _State.OPEN
        self._running = False
        # Events are created inside the event loop (anyio needs a running backend).
        self._wakeup: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._written = 0
        self._dropped = 0

    def put_nowait(self, message: bytes) -> None:
        """Queue one message (one line, no newline). Never blocks.

        Raises ``anyio.ClosedResourceError`` after :meth:`aclose`, ``anyio.WouldBlock`` when full.
        Once the writer has broken, the message is dropped silently.
        """
        if self._state is _State.BROKEN:
            self._dropped += 1
            return
        if self._state is not _State.OPEN:
            raise anyio.ClosedResourceError
        if len(self._pending) >= self._max_pending:
            raise anyio.WouldBlock
        self._pending.append(message)
        if self._wakeup is not None:
            self._wakeup.set()

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

    def statistics(self) -> OutboxStatistics:
        """A snapshot of the counters."""
        return OutboxStatistics(pending=len(self._pending), written=self._written, dropped=self._dropped)

    async def _write_until_done(self) -> None:
        while True:
            if not self._pending:
                if self._state is not _State.OPEN:
                    return
                await self._wait_for_messages()
                continue
            batch = self._take_all()
            try:
                await self._write(batch[0] if len(batch) == 1 else b"\n".join(batch))
            except _WRITE_FAILURES as exc:
                self._break(len(batch), exc)
                return
            self._written += len(batch)

    async def _wait_for_messages(self) -> None:
        self._wakeup = anyio.Event()
        await self._wakeup.wait()

    def _take_all(self) -> list[bytes]:
        batch = list(self._pending)
        self._pending.clear()
        return batch

    def _break(self, lost: int, exc: BaseException) -> None:
        self._state = _State.BROKEN
        self._dropped += lost + len(self._pending)
        self._pending.clear()
        _log.warning("outbox writer failed (%r); dropping further messages", exc)
