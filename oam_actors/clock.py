"""Time for library code: a :class:`Clock` is read and waited on; tests and simulations pass a
:class:`ManualClock` and move it themselves (like trio's ``MockClock``), so nothing sleeps for real
and no test depends on the machine's speed.

Used by the quota scheduler, the device pool, the agent's retry waits and requests' deadlines
(:class:`Budget`). :func:`wire_instant` is
the protocol's one spelling of a moment (``createdAt``, ``retryAfter``).
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import time
from typing import Protocol

import anyio
import anyio.lowlevel

__all__ = ["Budget", "Clock", "ManualClock", "MonotonicClock", "wire_instant"]


def wire_instant(moment: dt.datetime | None = None) -> str:
    """``moment`` (default: now) as the protocol writes instants: UTC, whole seconds, ``Z``
    (``2024-05-01T12:00:00Z``)."""
    if moment is None:
        return _now_instant()
    return moment.astimezone(dt.UTC).strftime(_INSTANT_FORMAT)


_INSTANT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_last_instant: tuple[int, str] = (-1, "")


def _now_instant() -> str:
    # Written once per second at most: a crowd stamps every NPC it creates (``createdAt``).
    global _last_instant
    second = int(time.time())
    if _last_instant[0] != second:
        _last_instant = (second, time.strftime(_INSTANT_FORMAT, time.gmtime(second)))
    return _last_instant[1]


class Clock(Protocol):
    """Where library code reads time and waits for it."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline``; always a checkpoint."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()`` and ``anyio.sleep``."""

    now = staticmethod(time.monotonic)  # the builtin itself: read on every request and turn

    async def sleep_until(self, deadline: float) -> None:
        await anyio.lowlevel.checkpoint()
        # The event loop may wake a timer a hair early; sleep again rather than return early.
        while (remaining := deadline - time.monotonic()) > 0:
            await anyio.sleep(remaining)


class ManualClock:
    """A clock that moves only when told to, for tests and simulations (like trio's MockClock).

    :meth:`advance` wakes every sleeper whose deadline has come; the woken tasks run at their
    next chance (``await anyio.wait_all_tasks_blocked()`` in a test lets them).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._serial = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        woken = anyio.Event()
        heapq.heappush(self._sleepers, (deadline, next(self._serial), woken))
        await woken.wait()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (not negative) and wake the sleepers now due."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            heapq.heappop(self._sleepers)[2].set()


class Budget:
    """A request's time, counted from its arrival on ``clock``: ``seconds`` is its deadline
    (``None``: the backend's queue time for its priority applies, also counted from arrival).

    It crosses a process boundary (pickled into a Ray shard) as relative seconds, the time
    spent so far, never as an instant: two processes' clocks do not agree. The receiving side
    re-anchors it on its own monotonic clock at receipt, so time in its mailbox counts too.
    """

    __slots__ = ("_arrived", "_clock", "seconds")

    def __init__(self, clock: Clock, seconds: float | None, *, spent: float = 0.0) -> None:
        self._clock = clock
        self.seconds = seconds
        self._arrived = clock.now() - spent

    def spent(self) -> float:
        """Seconds since the request arrived."""
        return max(0.0, self._clock.now() - self._arrived)

    def left(self) -> float | None:
        """What is left of the deadline (0 once it has passed; ``None``: no deadline of its own)."""
        return None if self.seconds is None else max(0.0, self.seconds - self.spent())

    def __reduce__(self) -> tuple[object, tuple[float | None, float]]:
        return _resumed_budget, (self.seconds, self.spent())

    def __repr__(self) -> str:
        return f"Budget(seconds={self.seconds!r}, spent={self.spent():.3f})"


def _resumed_budget(seconds: float | None, spent: float) -> Budget:
    return Budget(MonotonicClock(), seconds, spent=spent)
