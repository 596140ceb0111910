"""The console's last minutes of traffic, from the server's own counters (pure logic, no I/O).

:class:`TrafficHistory` keeps the cumulative counters ``/metrics`` exposes (requests by method,
responses by code, turns by outcome) as sampled at each tick, for ``window`` seconds, plus two
gauges of the model (steps queued, steps in flight). It keeps no counts of its own: a
:class:`Point` is the difference between two consecutive samples, and :meth:`TrafficHistory.totals`
the difference between the newest sample and the oldest one in the window.
"""

from __future__ import annotations

from collections import deque

import msgspec

__all__ = ["Point", "Sample", "TrafficHistory", "Totals"]


class Sample(msgspec.Struct, frozen=True):
    """The counters at one instant (seconds on the console's clock)."""

    at: float
    requests: dict[str, float]  # by method
    responses: dict[str, float]  # by code: "ok" or an error's data.code
    turns: dict[str, float]  # by outcome
    queued: int | None = None  # model steps waiting, when the model reports it
    in_flight: int | None = None


class Point(msgspec.Struct, frozen=True, rename="camel"):
    """What happened between two samples: ``seconds`` long, ending at ``at``."""

    at: float
    seconds: float
    requests: int
    errors: int  # responses with an error
    turns_ok: int
    turns_failed: int
    queued: int | None
    in_flight: int | None


class Totals(msgspec.Struct, frozen=True, rename="camel"):
    """Counts over the window, by label, largest first."""

    seconds: float
    requests: dict[str, int]
    responses: dict[str, int]
    turns: dict[str, int]


class TrafficHistory:
    """Samples for the last ``window`` seconds (see the module docstring)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._samples: deque[Sample] = deque()

    def add(self, sample: Sample) -> Point | None:
        """Keep ``sample`` (later than the last one); the point it ends, ``None`` for the first."""
        previous = self._samples[-1] if self._samples else None
        self._samples.append(sample)
        # One sample older than the window stays: the first point of the window is measured from it.
        while len(self._samples) > 2 and self._samples[1].at <= sample.at - self.window:
            self._samples.popleft()
        return None if previous is None else _point(previous, sample)

    def points(self) -> list[Point]:
        """Every point of the window, oldest first."""
        samples = list(self._samples)
        return [_point(a, b) for a, b in zip(samples, samples[1:])]

    def totals(self) -> Totals:
        if not self._samples:
            return Totals(0.0, {}, {}, {})
        first, last = self._samples[0], self._samples[-1]
        return Totals(
            seconds=round(last.at - first.at, 3),
            requests=_difference(first.requests, last.requests),
            responses=_difference(first.responses, last.responses),
            turns=_difference(first.turns, last.turns),
        )


def _point(before: Sample, after: Sample) -> Point:
    responses = _difference(before.responses, after.responses)
    turns = _difference(before.turns, after.turns)
    return Point(
        at=round(after.at, 3),
        seconds=round(after.at - before.at, 3),
        requests=sum(_difference(before.requests, after.requests).values()),
        errors=sum(n for code, n in responses.items() if code != "ok"),
        turns_ok=turns.get("ok", 0),
        turns_failed=sum(n for outcome, n in turns.items() if outcome != "ok"),
        queued=after.queued,
        in_flight=after.in_flight,
    )


def _difference(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """What each counter gained, zeros left out, largest first."""
    gained = {label: int(value - before.get(label, 0)) for label, value in after.items()}
    return dict(sorted(((label, n) for label, n in gained.items() if n > 0), key=lambda item: (-item[1], item[0])))
