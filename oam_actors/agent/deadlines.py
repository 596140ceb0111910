"""Deadlines of an agent's external tool waits, on one event-loop timer.

A turn waiting for a client's tool answer wakes at its deadline. A timer handle per wait costs
every tool round a push onto the loop's heap and, once cancelled, a pop (a Python-level
comparison per heap level each, more with more turns waiting). Waits with the same timeout end
in the order they began, so one first-in-first-out queue per timeout and one timer for the
earliest deadline do: a wait answered in time leaves its queue when it reaches the head (at the
next wait, or when the timer fires), and the timer stays armed across answered waits. Behind a
head that is still waiting (a client that never answers), answered waits would pile up until its
deadline, so a queue that has doubled since it was last compacted drops its answered waits: it
holds at most about twice the waits still pending, for an amortised constant cost per wait. The
waits of every agent on one loop share its deadlines (:func:`deadlines_for`): one timer, and
nothing per agent (a crowd has thousands).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

__all__ = ["Deadlines", "deadlines_for"]

# The loop runs a timer up to its clock's resolution early (asyncio's own tolerance).
_EARLY = time.get_clock_info("monotonic").resolution

_COMPACT_FROM = 32
"""A queue is never compacted below this length (a scan would cost more than it frees)."""


class _Queue:
    """The waits of one timeout, in deadline order, and the length at which to drop answered ones."""

    __slots__ = ("compact_at", "waits")

    def __init__(self) -> None:
        self.waits: deque[tuple[float, asyncio.Future[None]]] = deque()
        self.compact_at = _COMPACT_FROM

    def compact(self) -> None:
        self.waits = deque(wait for wait in self.waits if not wait[1].done())
        self.compact_at = max(_COMPACT_FROM, 2 * len(self.waits))


class Deadlines:
    """Resolves futures (with ``None``) at their timeouts, unless they are done by then."""

    __slots__ = ("_loop", "_queues", "_timer", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queues: dict[float, _Queue] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __len__(self) -> int:
        """Waits held: the pending ones, and answered ones not dropped yet (about as many at most)."""
        return sum(len(queue.waits) for queue in self._queues.values())

    def wake_after(self, future: asyncio.Future[None], timeout: float) -> None:
        """Resolve ``future`` ``timeout`` seconds from now if nothing else has by then."""
        deadline = self._loop.time() + timeout
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = _Queue()
        waits = queue.waits
        while waits and waits[0][1].done():
            waits.popleft()
        waits.append((deadline, future))
        if len(waits) > queue.compact_at:
            queue.compact()
        if deadline < self._timer_at:
            self._arm(deadline)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time() + _EARLY
        earliest = math.inf
        for timeout, queue in list(self._queues.items()):
            waits = queue.waits
            while waits and (waits[0][0] <= now or waits[0][1].done()):
                future = waits.popleft()[1]
                if not future.done():
                    future.set_result(None)
            if waits:
                earliest = min(earliest, waits[0][0])
            else:
                del self._queues[timeout]
        if earliest < math.inf:
            self._arm(earliest)


_current: Deadlines | None = None  # the last loop's: a process runs its agents on one loop


def deadlines_for(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """The deadlines of the waits on ``loop``. Another loop gets new ones (a wait keeps the
    deadlines it was given, which still wake it on its own loop)."""
    global _current
    current = _current
    if current is None or current.loop is not loop:
        current = _current = Deadlines(loop)
    return current
