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

A flow may have at most ``open_limit`` messages *open* at once: admitted and not yet finished,
paused ones included. A paused holder (waiting for its client's tool answer) takes a slot again
with its ticket, ahead of the flow's later tickets, but a new message of a flow at its limit waits
until one of the flow's open messages finishes. Why: without it a connection that pipelines a
burst of turns with client tools had every turn started and paused at its tool call before the
answers, which its client wrote behind the rest of the burst, could even be read: every turn then
finished at the end together, instead of the first ones first. Other flows are never held by it.

A flow's arrival order holds on the way to the gate too. A message queued for an idle actor is
*arriving* (:meth:`AdmissionGate.expect`) until its handler reaches :meth:`AdmissionGate.acquire`,
first waits, or the message resolves or is cancelled; a later ticket *of the same flow* is held
until no earlier one of its flow is arriving. Without that, whichever handler reached the gate
first got a free slot, and an earlier turn whose actor task had not yet run could be passed by
later ones of its connection. Other flows are never held by it (a flood of turns from one
connection must not slow another), and every path an arriving message can take ends its arrival,
so none can hold its own flow back for longer than its actor task takes to reach its handler.

A message can also take its place at the gate when it is queued, before its handler runs
(:meth:`AdmissionGate.reserve`, for an actor's ``admitted_first`` messages): its actor task is
woken only once it holds a slot, which its handler's admission then holds. A pipelined burst then
waits as records at the gate, not as handlers started and suspended there: reading and queueing a
turn costs less (no task switch, no handler frames, no event, less for the collector to walk), so
the burst is read, and its client's answers reach the server, sooner. A reservation given up
(the message cancelled or dropped) leaves no slot taken and nothing open.

Bookkeeping on anyio events: no tasks, and no yield when a slot is free; a waiter handed a slot
goes on through ``runtime.fair_pause`` as its flow's busy work.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType

import anyio
import msgspec

from oam_actors.runtime._fair import FairQueue
from oam_actors.runtime._yielding import fair_pause

__all__ = [
    "OPEN_PER_SLOT", "Admission", "AdmissionGate", "Arrival", "GateStatistics", "Reservation", "current_flow", "flow",
]

OPEN_PER_SLOT = 4
"""A flow's open messages (admitted and not finished, paused ones included) per slot of the gate."""

_FLOW: ContextVar[str] = ContextVar("oam_actors_flow", default="")


class flow:  # noqa: N801  (used as a function: ``with flow(key):``)
    """Messages queued inside the block (and by tasks started inside it) belong to flow ``key``.

    A class rather than a ``contextmanager`` generator: every inbound line enters one, and a
    generator-based manager costs several Python calls more per entry."""

    __slots__ = ("_key", "_token")

    def __init__(self, key: str) -> None:
        self._key = key

    def __enter__(self) -> None:
        self._token = _FLOW.set(self._key)

    def __exit__(self, *exc_info: object) -> None:
        _FLOW.reset(self._token)


current_flow: Callable[[], str] = _FLOW.get
"""The flow a message queued now belongs to (``""``: none set)."""


class GateStatistics(msgspec.Struct, frozen=True):
    """``running``: slots held; ``waiting``: messages waiting for one; ``admitted``: slots handed
    out so far (re-admissions after a pause included)."""

    limit: int
    running: int
    waiting: int
    admitted: int


class _Waiter:
    __slots__ = ("event", "gone", "granted", "held", "opening", "reserved", "wake")

    def __init__(self, held: bool, opening: bool, wake: Callable[[], None] | None = None) -> None:
        # A task waiting in ``acquire`` waits on an event; a reservation is called back instead.
        self.event: anyio.Event | None = None
        if wake is None:
            self.event = anyio.Event()
            wake = self.event.set
        self.wake = wake
        self.granted = False
        self.gone = False
        self.held = held  # behind an earlier ticket of its flow still arriving, or its flow at its open limit
        self.opening = opening  # a message's first admission (not a resume after a pause)
        self.reserved = False  # counted among its flow's open messages (queued or granted)


class _Arrivals:
    """One flow's tickets on their way to the gate, and its waiters held behind them.

    Tickets are expected in increasing order, so ``order`` is sorted; it keeps tickets that have
    arrived since (dropped once at its front), so the earliest one still arriving is found in
    amortised constant time."""

    __slots__ = ("held", "live", "order")

    def __init__(self) -> None:
        self.order: deque[int] = deque()
        self.live: set[int] = set()
        # A heap by ticket (a message waits at most once at a time: tickets differ, so waiters
        # are never compared).
        self.held: list[tuple[int, _Waiter]] = []

    def first(self) -> int | None:
        """The earliest ticket still arriving."""
        order, live = self.order, self.live
        while order and order[0] not in live:
            order.popleft()
        return order[0] if order else None


class Arrival:
    """A ticket on its way to the gate (:meth:`AdmissionGate.expect`): later tickets of its flow
    are held until it reaches :meth:`AdmissionGate.acquire` or is closed. Closing twice, or after
    it reached the gate, does nothing."""

    __slots__ = ("_flow", "_gate", "ticket")

    def __init__(self, gate: AdmissionGate, ticket: int, flow: str) -> None:
        self._gate = gate
        self._flow = flow
        self.ticket = ticket

    def close(self) -> None:
        self._gate._arrived(self.ticket, self._flow)


class AdmissionGate:
    """At most ``limit`` holders at once; waiting flows are admitted in turn, each flow's lowest
    ticket (earliest arrival) first, never past an earlier ticket of its flow still arriving, and
    a flow's new message only while fewer than ``open_limit`` of its messages are open."""

    def __init__(self, limit: int, open_limit: int | None = None) -> None:
        """``open_limit``: messages of one flow open at once (``None``: :data:`OPEN_PER_SLOT` per slot)."""
        if limit < 1:
            raise ValueError(f"the admission limit must be at least 1, got {limit}")
        self.limit = limit
        self.open_limit = OPEN_PER_SLOT * limit if open_limit is None else open_limit
        if self.open_limit < limit:
            raise ValueError(f"the open limit must be at least the admission limit {limit}, got {self.open_limit}")
        self._open: dict[str, int] = {}  # flows with messages open (admitted or queued for a slot, not finished)
        self._capped: dict[str, list[tuple[int, _Waiter]]] = {}  # new messages of flows at their open limit
        self._tickets = itertools.count()
        self._running = 0
        self._waiting: FairQueue[_Waiter] = FairQueue()
        self._queued = 0  # live waiters in ``_waiting``
        self._held = 0  # live waiters held behind an arrival
        self._arriving: dict[str, _Arrivals] = {}  # only flows with tickets arriving or waiters held
        self._admitted = 0

    def next_ticket(self) -> int:
        """The arrival ticket of a message queued now."""
        return next(self._tickets)

    def expect(self, ticket: int, flow: str = "") -> Arrival:
        """``ticket`` (the latest of ``flow`` so far) is on its way to :meth:`acquire`: no later
        ticket of ``flow`` is admitted before it gets there or the returned arrival is closed
        (its owner closes it on every path). Other flows are not held."""
        arrivals = self._arriving.get(flow)
        if arrivals is None:
            arrivals = self._arriving[flow] = _Arrivals()
        arrivals.order.append(ticket)
        arrivals.live.add(ticket)
        return Arrival(self, ticket, flow)

    async def acquire(self, ticket: int, flow: str = "", *, opening: bool = False) -> None:
        """Take a slot for ``flow``; waits while all are held, an earlier ticket of ``flow`` is
        still arriving, or (``opening``: a message's first admission, which counts among its
        flow's open messages until :meth:`finish`; :class:`Admission` does both) ``flow`` has
        ``open_limit`` messages open. Returns at once, without yielding, when one is free and
        none of these holds it (then nobody waits in the queue: a freed slot goes straight to a
        waiter). Cancellation while waiting leaves no slot taken and nothing open."""
        waiter = self._enter(ticket, flow, opening, None)
        if waiter is None:
            return
        try:
            assert waiter.event is not None
            await waiter.event.wait()
            # Handed a slot: start as the flow's busy work, fairly (a freed slot must not start
            # work past the event loop's fair yields).
            await fair_pause(flow)
        except BaseException:
            self._withdraw(waiter, flow)
            raise

    def reserve(self, ticket: int, flow: str, wake: Callable[[], None]) -> Reservation:
        """A message's first admission (``opening``) taken for it before its handler runs:
        ``ticket`` takes its place at the gate now, as in :meth:`acquire`, with no task waiting;
        ``wake`` is called once it holds a slot (not when it holds one at once), or when it gives
        its place up before (:meth:`Reservation.close`)."""
        return Reservation(self, ticket, flow, self._enter(ticket, flow, True, wake), wake)

    def _enter(self, ticket: int, flow: str, opening: bool, wake: Callable[[], None] | None) -> _Waiter | None:
        """Take a slot now (``None``) or queue a waiter for one (``wake``: called back when granted)."""
        arrivals = self._arriving.get(flow)
        behind = False
        if arrivals is not None:
            arrivals.live.discard(ticket)
            first = arrivals.first()
            behind = first is not None and first < ticket
        capped = opening and self._open.get(flow, 0) >= self.open_limit
        if not behind and not capped and self._running < self.limit and not self._queued:
            self._running += 1
            self._admitted += 1
            if opening:
                self._open[flow] = self._open.get(flow, 0) + 1
            if arrivals is not None:  # its arrival may free later tickets of its flow
                self._settle(flow, arrivals)
                self._dispatch()
            return None
        waiter = _Waiter(behind, opening, wake)
        if behind:
            assert arrivals is not None
            heapq.heappush(arrivals.held, (ticket, waiter))
            self._held += 1
        else:
            self._queue(flow, ticket, waiter)
            if arrivals is not None:
                self._settle(flow, arrivals)
            self._dispatch()
        return waiter

    def _withdraw(self, waiter: _Waiter, flow: str) -> None:
        """A waiter gives up (cancelled): no slot stays taken by it, nothing stays open."""
        if waiter.granted:
            self.release()  # handed over just as the waiter was cancelled: pass it on
        elif not waiter.gone:
            waiter.gone = True
            if waiter.held:
                self._held -= 1
            else:
                self._queued -= 1
        if waiter.reserved:
            self.finish(flow)

    def finish(self, flow: str = "") -> None:
        """One of ``flow``'s open messages (admitted with ``opening``) is over: a new one of the
        flow held at its open limit may queue for a slot."""
        left = self._open[flow] - 1
        if left:
            self._open[flow] = left
        else:
            del self._open[flow]
        capped = self._capped.get(flow)
        while capped and self._open.get(flow, 0) < self.open_limit:
            ticket, waiter = heapq.heappop(capped)
            if not waiter.gone:
                self._held -= 1
                self._queue(flow, ticket, waiter)
        if capped is not None and not capped:
            del self._capped[flow]
        self._dispatch()

    def _queue(self, flow: str, ticket: int, waiter: _Waiter) -> None:
        """Queue a waiter no arrival holds for a slot, or hold it while its flow is at its open limit."""
        if waiter.opening and not waiter.reserved:
            if self._open.get(flow, 0) >= self.open_limit:
                waiter.held = True
                self._held += 1
                heapq.heappush(self._capped.setdefault(flow, []), (ticket, waiter))
                return
            waiter.reserved = True
            self._open[flow] = self._open.get(flow, 0) + 1
        waiter.held = False
        self._waiting.push(flow, ticket, waiter)
        self._queued += 1

    def release(self) -> None:
        """Give a slot back; the flow whose turn it is gets it for its earliest waiter."""
        self._running -= 1
        self._dispatch()

    def statistics(self) -> GateStatistics:
        return GateStatistics(self.limit, self._running, self._queued + self._held, self._admitted)

    def _arrived(self, ticket: int, flow: str) -> None:
        arrivals = self._arriving.get(flow)
        if arrivals is not None and ticket in arrivals.live:
            arrivals.live.remove(ticket)
            self._settle(flow, arrivals)
            self._dispatch()

    def _settle(self, flow: str, arrivals: _Arrivals) -> None:
        """Queue the flow's held waiters that no earlier arrival holds any more; forget the flow
        once nothing of it is arriving or held."""
        first = arrivals.first()
        held = arrivals.held
        while held and (first is None or held[0][0] < first):
            ticket, waiter = heapq.heappop(held)
            if not waiter.gone:
                self._held -= 1
                self._queue(flow, ticket, waiter)
        if first is None and not held:
            del self._arriving[flow]

    def _dispatch(self) -> None:
        """Hand the free slots to the queued waiters whose turn it is."""
        while self._running < self.limit and self._waiting:
            waiter = self._waiting.pop()
            if not waiter.gone:
                self._queued -= 1
                waiter.granted = True
                self._running += 1
                self._admitted += 1
                waiter.wake()


class Reservation:
    """A message's place at the gate taken before its handler runs (:meth:`AdmissionGate.reserve`):
    a queued message is then a plain record, with no task waiting for it. ``ready`` once it holds
    a slot; :meth:`claim` hands the held slot to the handler; :meth:`close` gives up an unclaimed
    one (cancelled, dropped, or a handler that never asked), whatever its state; twice does nothing."""

    __slots__ = ("_flow", "_gate", "_ticket", "_waiter", "_wake", "claimed")

    def __init__(self, gate: AdmissionGate, ticket: int, flow: str, waiter: _Waiter | None,
                 wake: Callable[[], None]) -> None:
        self._gate = gate
        self._ticket = ticket
        self._flow = flow
        self._waiter = waiter  # ``None``: it took a slot at once
        self._wake = wake
        self.claimed = False

    @property
    def ready(self) -> bool:
        """It holds a slot (and counts among its flow's open messages)."""
        waiter = self._waiter
        return waiter is None or waiter.granted

    def claim(self) -> Admission:
        """The handler's admission, holding the reserved slot; the caller waits for ``ready``."""
        self.claimed = True
        return Admission(self._gate, self._ticket, self._flow, held=True)

    def close(self) -> None:
        if self.claimed:
            return
        self.claimed = True
        gate, waiter = self._gate, self._waiter
        if waiter is None:
            gate.release()
            gate.finish(self._flow)
        else:
            granted = waiter.granted
            gate._withdraw(waiter, self._flow)  # noqa: SLF001 - the gate's own record
            if not granted:
                self._wake()  # whoever waited for it to be ready looks again


class Admission:
    """One ordered message's place at a gate (``gate=None``: no gate, every call is free).

    ``async with admission:`` holds a slot for the block; :meth:`pause` gives it back while the
    message waits on something outside; :meth:`resume` waits for one again with the same ticket.
    Leaving the block gives back the slot if it is held.
    """

    __slots__ = ("_flow", "_gate", "_held", "_opened", "_ticket")

    def __init__(self, gate: AdmissionGate | None, ticket: int, flow: str = "", *, held: bool = False) -> None:
        """``held``: its first admission is taken already (a :class:`Reservation`'s)."""
        self._gate = gate
        self._ticket = ticket
        self._flow = flow
        self._held = held
        self._opened = held  # admitted once: open at the gate until the block is left

    @property
    def held(self) -> bool:
        return self._held

    async def resume(self) -> None:
        """Hold a slot (a no-op if held already)."""
        if self._gate is not None and not self._held:
            await self._gate.acquire(self._ticket, self._flow, opening=not self._opened)
            self._held = self._opened = True

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
        if self._opened:
            self._opened = False
            assert self._gate is not None
            self._gate.finish(self._flow)
