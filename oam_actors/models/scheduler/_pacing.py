"""Even pacing of a rate, and the rate a provider's rate-limit headers report: pure arithmetic.

A rate of ``limit`` per ``window`` seconds is spent evenly: admissions sit on a grid of
``window / limit × (1 + margin)`` seconds, so any window of the provider's length holds at most
``limit`` of them, wherever its edges fall (a provider counting per fixed 10-second window
never sees an eleventh request of ten). The grid keeps its phase while admissions come a little
late (a scheduler waking up late costs no throughput) and restarts from ``now`` after an idle
spell (no burst to catch up).

:class:`ReportedRate` learns a provider's limit and window from its headers: the limit as
reported (``x-ratelimit-limit-requests``, ``anthropic-ratelimit-requests-limit``), the window as
the longest reset seen (a fixed window's reset counts down from its length, a bucket's reset
is the time to refill from empty: either way the longest one is the window).
"""

from __future__ import annotations

import math

import msgspec

__all__ = ["PACING_MARGIN", "Grid", "PaceState", "ReportedRate", "pace_interval"]

PACING_MARGIN = 0.02
"""How much slower than the stated or reported rate a paced backend is fed: room for a late
clock, network jitter and a window edge, at 2 % of throughput."""


def pace_interval(limit: int, window: float, margin: float = PACING_MARGIN) -> float:
    """Seconds between paced admissions for ``limit`` per ``window`` seconds."""
    return window / limit * (1.0 + margin)


class PaceState(msgspec.Struct, frozen=True, array_like=True):
    """A grid as a checkpoint: its interval and slack, and when its next slot opens, in seconds
    from the moment it was taken (negative: already open)."""

    interval: float
    slack: float
    next_in: float


class Grid:
    """Admissions ``interval`` seconds apart (for tokens: seconds per token, times the tokens).

    ``interval == 0`` paces nothing. An admission up to ``slack`` seconds after its slot keeps
    the grid's phase; a later one starts the grid afresh at its own time. ``slack`` must stay
    below ``margin × window`` of the pace so that a window still holds at most its limit.
    """

    __slots__ = ("interval", "next_at", "slack")

    def __init__(self) -> None:
        self.interval = 0.0
        self.slack = 0.0
        self.next_at = -math.inf

    def set_pace(self, interval: float, window: float, margin: float, *, last: float = -math.inf) -> None:
        """Pace at ``interval``, a rate of some limit per ``window`` with ``margin``; a tighter
        pace holds from the ``last`` admission on (it applies to what was admitted already)."""
        if interval > self.interval:
            self.next_at = max(self.next_at, last + interval)
        self.interval = interval
        self.slack = min(interval / 4.0, margin * window / 2.0)

    def free_at(self) -> float:
        """When the next admission may start."""
        return self.next_at if self.interval > 0 else -math.inf

    def take(self, now: float, cost: float = 1.0) -> None:
        """An admission at ``now`` costing ``cost`` intervals (one request, or its tokens)."""
        if self.interval <= 0:
            return
        base = self.next_at if now - self.next_at <= self.slack else now
        self.next_at = base + cost * self.interval

    def state(self, now: float) -> PaceState:
        return PaceState(self.interval, self.slack, self.next_at - now if math.isfinite(self.next_at) else -1.0)

    def restore(self, state: PaceState, now: float) -> None:
        self.interval, self.slack = state.interval, state.slack
        self.next_at = now + state.next_in


class ReportedRate(msgspec.Struct, kw_only=True):
    """One dimension (requests or tokens) of a provider's quota as its headers report it."""

    limit: int | None = None
    window: float = 0.0

    @property
    def known(self) -> bool:
        return self.limit is not None and self.window > 0

    def observe(self, limit: int | None, reset: float | None) -> bool:
        """Learn from one response; ``True`` when the rate changed."""
        before = (self.limit, self.window)
        if limit is not None and limit > 0:
            self.limit = limit
        if reset is not None and reset > self.window:
            self.window = reset
        return (self.limit, self.window) != before

    def interval(self, margin: float = PACING_MARGIN) -> float:
        """Seconds per unit (request or token) at the reported rate; 0 while unknown."""
        if self.limit is None or self.window <= 0:
            return 0.0
        return pace_interval(self.limit, self.window, margin)
