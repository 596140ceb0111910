"""``AdmissionGate``: a bounded number of ordered messages running at once, admitted fairly.

A system with a gate stamps every ordered message with an arrival ticket and its *flow* when it
is queued. The flow is whoever queued it: the key set with :func:`flow` around the queueing code
(a bridge sets its connection's), ``""`` when none is set. A handler that asks for admission
(``Actor.admission``) holds one of ``limit`` slots while it runs; a slot that frees goes to the
flows waiting for one in turn (round robin, a flow that has just started waiting first:
:class:`~oam_actors.runtime._fair.FairQueue`), and within a flow to the message that arrived
first. Under overload a flow's work that came first
then finishes first, instead of every message advancing a step at a time together and all of
them finishing at the end; and a flow that queues a few messages is admitted after at most one
message of each other waiting flow, not behind their whole backlog. A holder can give its slot
up while it waits for something outside this process (``Admission.pause``) and take one again
with its ticket (``Admission.resume``), so waiting on a slow peer does not keep anyone else out.

Bookkeeping on anyio events: no tasks, and no yield when a slot is free; a waiter handed a slot
goes on through ``runtime.fair_pause`` as its flow's busy work.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType

import anyio
import msgspec

from oam_actors.runtime._fair import FairQueue
from oam_actors.runtime._yielding import fair_pause

__all__ = ["Admission", "AdmissionGate", "GateStatistics", "current_flow", "flow"]

_FLOW: ContextVar[str] = ContextVar("oam_actors_flow", default="")


@contextmanager
def flow(key: str) -> Iterator[None]:
    """Messages queued inside the block (and by tasks started inside it) belong to flow ``key``."""
    token = _FLOW.set(key)
    try:
        yield
    finally:
        _FLOW.reset(token)


def current_flow() -> str:
    """The flow a message queued now belongs to (``""``: none set)."""
    return _FLOW.get()


class GateStatistics(msgspec.Struct, frozen=True):
    """``running``: slots held; ``waiting``: messages waiting for one; ``admitted``: slots handed
    out so far (re-admissions after a pause included)."""

    limit: int
    running: int
    waiting: int
    admitted: int


class _Waiter:
    __slots__ = ("event", "gone", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False
        self.gone = False


class AdmissionGate:
    """At most ``limit`` holders at once; waiting flows are admitted in turn, each flow's lowest
    ticket (earliest arrival) first."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the admission limit must be at least 1, got {limit}")
        self.limit = limit
        self._tickets = itertools.count()
        self._running = 0
        self._waiting: FairQueue[_Waiter] = FairQueue()
        self._live_waiters = 0
        self._admitted = 0

    def next_ticket(self) -> int:
        """The arrival ticket of a message queued now."""
        return next(self._tickets)

    async def acquire(self, ticket: int, flow: str = "") -> None:
        """Take a slot for ``flow``; waits while all are held. Returns at once, without yielding,
        when one is free (then nobody waits: a freed slot goes straight to a waiter).
        Cancellation while waiting leaves no slot taken."""
        if self._running < self.limit and not self._live_waiters:
            self._running += 1
            self._admitted += 1
            return
        waiter = _Waiter()
        self._waiting.push(flow, ticket, waiter)
        self._live_waiters += 1
        try:
            await waiter.event.wait()
            # Handed a slot: start as the flow's busy work, fairly (a freed slot must not start
            # work past the event loop's fair yields).
            await fair_pause(flow)
        except BaseException:
            if waiter.granted:
                self.release()  # handed over just as the waiter was cancelled: pass it on
            else:
                waiter.gone = True
                self._live_waiters -= 1
            raise

    def release(self) -> None:
        """Give a slot back; the flow whose turn it is gets it for its earliest waiter."""
        while self._waiting:
            waiter = self._waiting.pop()
            if not waiter.gone:
                self._live_waiters -= 1
                waiter.granted = True
                self._admitted += 1
                waiter.event.set()
                return
        self._running -= 1

    def statistics(self) -> GateStatistics:
        return GateStatistics(self.limit, self._running, self._live_waiters, self._admitted)


class Admission:
    """One ordered message's place at a gate (``gate=None``: no gate, every call is free).

    ``async with admission:`` holds a slot for the block; :meth:`pause` gives it back while the
    message waits on something outside; :meth:`resume` waits for one again with the same ticket.
    Leaving the block gives back the slot if it is held.
    """

    __slots__ = ("_flow", "_gate", "_held", "_ticket")

    def __init__(self, gate: AdmissionGate | None, ticket: int, flow: str = "") -> None:
        self._gate = gate
        self._ticket = ticket
        self._flow = flow
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    async def resume(self) -> None:
        """Hold a slot (a no-op if held already)."""
        if self._gate is not None and not self._held:
            await self._gate.acquire(self._ticket, self._flow)
            self._held = True

    def pause(self) -> None:
        """Give the slot back while waiting (a no-op if not held)."""
        if self._gate is not None and self._held:
            self._held = False
            self._gate.release()

    async def __aenter__(self) -> Admission:
        await self.resume()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.pause()
