"""Fair yields: where busy work yields to let others run, flows take turns at the event loop.

Why: asyncio runs every ready task once per round of its loop, so a round lasts as long as all
the busy tasks' steps together, and a task woken by I/O (a connection's next line) waits a whole
round. Eight connections keeping 160 sessions busy make a round tens of milliseconds long, and
each connection gets a share of the loop per *task* it keeps busy, not per connection.

A task that yields only to let others run (a mailbox before each message, a bridge between two
batches of lines, a turn handed a freed admission slot, a scripted model between the pieces it
streams) calls :func:`fair_pause` with its flow (``runtime.flow``: the connection). It is a plain
checkpoint while the round before was one flow's alone (nobody to be fair to: a single busy
connection runs as fast as without any of this), or while few such yields have come this round
(:data:`PER_ROUND`). Otherwise the task waits, in a :class:`~oam_actors.runtime._fair.FairQueue` by
flow, and each round lets :data:`PER_ROUND` waiters go on, flows in turn (:data:`SOLO_PER_ROUND`
when they are all one flow's). A round then holds a bounded amount of busy work however many tasks
are busy, a flow back from idle goes next, and every busy flow gets the same share.

One :class:`FairYield` per event loop (the loop is what is shared): :func:`fair_yield`, or
:func:`fair_pause` for one yield. Its rounds are marked by a callback the loop runs once per round
while anyone yields (no task of its own); asyncio only.

Busy work that has just been through the event loop (a mailbox whose last message's handler
waited for something) has let the others run already: :meth:`FairYield.go_on` lets it go on
without another trip through the loop while its yield would be a plain checkpoint anyway (no
waiters, the round not throttled or its yields not spent). The rounds tell: one that passed
since the work last began means its task was suspended in between (its callback was queued
before the task could be woken, and the loop runs its ready callbacks in order).
"""

from __future__ import annotations

import asyncio
import weakref

import anyio

from oam_actors.runtime._fair import FairQueue

__all__ = ["PER_ROUND", "SOLO_PER_ROUND", "FairYield", "fair_pause", "fair_yield"]

PER_ROUND = 1
"""Busy yields that go on per round of the event loop before the rest wait their turn."""

SOLO_PER_ROUND = 8
"""The same while the waiting work is all one flow's: nobody to be fair to but the loop's other
tasks (I/O), so fewer, fuller rounds (each costs a poll of the sockets)."""


class _Waiter:
    __slots__ = ("event", "gone")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.gone = False


class FairYield:
    """The fair yields of one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_round: int = PER_ROUND) -> None:
        if per_round < 1:
            raise ValueError(f"per_round must be at least 1, got {per_round}")
        self.per_round = per_round
        self._loop = loop
        self._left = per_round
        self._waiting: FairQueue[_Waiter] = FairQueue()
        self._serial = 0
        self._tick_pending = False
        self._round_flow: str | None = None  # the first flow that yielded this round
        self._mixed = False  # another flow yielded this round too
        self._throttled = False  # the last round was mixed: this one's yields are counted
        self.round = 0  # rounds marked so far; see ``go_on``

    @property
    def contended(self) -> bool:
        """Busy work waits for its turn now."""
        return len(self._waiting) > 0

    def mark(self) -> int:
        """The round now, its end marked: whoever sees a later round has been suspended since."""
        self._start_round()
        return self.round

    def go_on(self, flow: str, began: int) -> bool:
        """Whether ``flow``'s busy work, which last began in round ``began`` (from :meth:`mark`),
        may go on without yielding: a round has passed since (its task has been through the loop
        meanwhile) and a yield now would be a plain checkpoint. Counts as one of this round's
        yields when it may."""
        return self._free(flow, began != self.round)

    async def pause(self, flow: str) -> None:
        """Let other tasks run; while the round's yields are spent, wait for ``flow``'s turn."""
        if self._free(flow):
            await asyncio.sleep(0)  # anyio's checkpoint on asyncio, without its backend lookup
            return
        waiter = _Waiter()
        self._serial += 1
        self._waiting.push(flow, self._serial, waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            waiter.gone = True  # cancelled while waiting: its turn goes to the next one
            raise

    def _free(self, flow: str, wanted: bool = True) -> bool:
        """Note ``flow``'s yield in this round; whether it may be a plain checkpoint (nobody waits
        for a turn, and the round is not throttled or has yields left), spending one if so."""
        self._start_round()
        if self._round_flow is None:
            self._round_flow = flow
        elif flow != self._round_flow:
            self._mixed = True
        if wanted and not self._waiting and (self._left > 0 or not self._throttled):
            self._left -= 1
            return True
        return False

    def _start_round(self) -> None:
        if not self._tick_pending:
            self._tick_pending = True
            self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        """A new round: its yields, first to the waiters, flows in turn."""
        self._tick_pending = False
        self.round += 1
        # One flow alone has nobody to be fair to: rounds where only one flow yields are free.
        self._throttled = self._mixed or bool(self._waiting)
        self._round_flow, self._mixed = None, False
        self._left = SOLO_PER_ROUND if self._waiting.flows() == 1 else self.per_round
        while self._waiting and self._left > 0:
            waiter = self._waiting.pop()
            if not waiter.gone:
                waiter.event.set()
                self._left -= 1
        if self._waiting:
            self._start_round()


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FairYield] = weakref.WeakKeyDictionary()


def fair_yield() -> FairYield:
    """The running event loop's fair yields (made on first use)."""
    loop = asyncio.get_running_loop()
    fair = _BY_LOOP.get(loop)
    if fair is None:
        fair = _BY_LOOP[loop] = FairYield(loop)
    return fair


async def fair_pause(flow: str) -> None:
    """Yield to other tasks as ``flow``'s busy work, fairly (see the module docstring)."""
    await fair_yield().pause(flow)
