"""``Mailbox``: the bounded ordered lane of one local actor, with its counters.

Any task may ``put_nowait``; only the actor task calls ``get`` and settles envelopes. Closing
rejects new messages but keeps the queued ones, so the actor task can resolve them in order.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import anyio

from oam_actors.runtime._address import Address
from oam_actors.runtime._envelope import Envelope
from oam_actors.runtime._errors import ActorStopped, MailboxFull
from oam_actors.runtime._statistics import ActorStatistics
from oam_actors.runtime._yielding import FairYield, fair_yield

__all__ = ["Mailbox"]


class Mailbox:
    """A deque of envelopes bounded by ``max_queue``, plus the one running envelope."""

    __slots__ = (
        "_began", "_cancelled", "_closed", "_failed", "_fair", "_processed", "_queue", "_wakeup", "address", "max_queue", "running",
    )

    def __init__(self, address: Address, max_queue: int) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be at least 1, got {max_queue}")
        self.address = address
        self.max_queue = max_queue
        self.running: Envelope | None = None
        self._queue: collections.deque[Envelope] = collections.deque()
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self._processed = 0
        self._failed = 0
        self._cancelled = 0
        self._fair: FairYield | None = None  # the actor task's loop's, found on first use
        self._began = -1  # the fair yields' round the last message began in

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def idle(self) -> bool:
        """Nothing running or queued."""
        return self.running is None and not self._queue

    def put_nowait(self, envelope: Envelope, *, wake: bool = True) -> None:
        """Append ``envelope``; ``ActorStopped`` once closed, ``MailboxFull`` at the bound.
        ``wake=False``: the actor task is not woken for it (it is to wait at the gate first: the
        gate calls :meth:`wake` when it may start)."""
        if self._closed:
            raise ActorStopped(self.address)
        if len(self._queue) >= self.max_queue:
            raise MailboxFull(self.address, self.max_queue)
        self._queue.append(envelope)
        if wake:
            self.wake()

    async def get(self) -> Envelope | None:
        """The next envelope, waiting for one; ``None`` once closed and empty. Yields unless the
        actor task has been through the event loop since the last message began (``go_on``)."""
        fair = self._fair
        if fair is None:
            fair = self._fair = fair_yield()
        began = self._began
        while True:
            # A message waiting for its reserved slot is not taken before it holds one (closing
            # takes it: it is dropped).
            while not self._queue or (self._queue[0].waiting and not self._closed):
                if self._closed:
                    return None
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
                began = -1  # this task has just been woken: it let the others run
            # Each message starts as its flow's busy work (``fair_pause``), whether it was waiting
            # or just arrived: a busy actor cannot starve the others, nor a busy flow
            # (connection) the other flows. A task back from the loop since the last message
            # began (its handler waited) has let the others run: it yields only if it must
            # wait for its turn.
            flow = self._queue[0].flow
            if not fair.go_on(flow, began):
                await fair.pause(flow)
            if self._queue:
                self._began = fair.mark()
                return self._queue.popleft()
            began = fair.mark()

    def close(self) -> None:
        """Reject further messages and wake the actor task to drain what is queued."""
        self._closed = True
        self.wake()

    def pending(self) -> Iterator[Envelope]:
        """The running envelope (if any) then the queued ones, in order."""
        if self.running is not None:
            yield self.running
        yield from tuple(self._queue)

    def take_all(self) -> list[Envelope]:
        """Remove and return the running and queued envelopes (for teardown)."""
        taken = list(self.pending())
        self._queue.clear()
        self.running = None
        return taken

    def start(self, envelope: Envelope, scope: anyio.CancelScope) -> None:
        """``envelope`` begins running under ``scope``."""
        self.running = envelope
        envelope.begin(scope)

    def succeed(self, envelope: Envelope, value: Any) -> None:
        self._settle(envelope, value, None)
        self._processed += 1

    def fail(self, envelope: Envelope, error: Exception) -> None:
        self._settle(envelope, None, error)
        self._failed += 1

    def drop(self, envelope: Envelope, error: Exception) -> None:
        """Resolve as cancelled or stopped (it did not run, or was cut short)."""
        self._settle(envelope, None, error)
        self._cancelled += 1

    def statistics(self) -> ActorStatistics:
        return ActorStatistics(
            queued=len(self._queue),
            running=0 if self.running is None else 1,
            processed=self._processed,
            failed=self._failed,
            cancelled=self._cancelled,
            max_queue=self.max_queue,
        )

    def _settle(self, envelope: Envelope, value: Any, error: Exception | None) -> None:
        if self.running is envelope:
            self.running = None
        envelope.resolve(value, error)

    def wake(self) -> None:
        """Wake the actor task if it waits for a message (any task may call it)."""
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None
