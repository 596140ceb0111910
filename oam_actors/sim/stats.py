"""Pure statistics for simulation reports: percentiles, Jain's fairness index, outcome tallies."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

__all__ = ["CANCELLED", "FALLBACK", "OK", "LatencySummary", "Outcomes", "jain_index", "percentile", "summarize"]

OK = "ok"
FALLBACK = "fallback"
"""An NPC answered with one of its canned lines: the turn completed, without the model."""
CANCELLED = "cancelled"
"""The simulated player cancelled the turn in flight: asked for, so not a failure."""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of already sorted values, nearest rank; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1.0 when every owner got the same, 1/n at worst.

    None when it is undefined: no owners, or nobody got anything (0/0)."""
    xs = list(values)
    squares = sum(x * x for x in xs)
    if squares == 0:
        return None
    total = sum(xs)
    return total * total / (len(xs) * squares)


class LatencySummary(msgspec.Struct, frozen=True, rename="camel"):
    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


def summarize(seconds: Iterable[float]) -> LatencySummary:
    values = sorted(seconds)
    if not values:
        return LatencySummary(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    ms = [v * 1000 for v in values]
    return LatencySummary(
        count=len(ms),
        mean_ms=round(sum(ms) / len(ms), 2),
        p50_ms=round(percentile(ms, 50), 2),
        p90_ms=round(percentile(ms, 90), 2),
        p99_ms=round(percentile(ms, 99), 2),
        max_ms=round(ms[-1], 2),
    )


class Outcomes:
    """Tallies of turn outcomes: :data:`OK`, :data:`FALLBACK`, :data:`CANCELLED` or an error's
    ``data.code`` (a failure)."""

    def __init__(self, outcomes: Iterable[str] = ()) -> None:
        self.counts: Counter[str] = Counter(outcomes)

    def add(self, outcome: str) -> None:
        self.counts[outcome] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> int:
        return self.counts[OK]

    @property
    def fallback(self) -> int:
        return self.counts[FALLBACK]

    @property
    def cancelled(self) -> int:
        return self.counts[CANCELLED]

    def failures(self) -> dict[str, int]:
        """Failed turns by error code, most frequent first."""
        return _by_count({k: v for k, v in self.counts.items() if k not in (OK, FALLBACK, CANCELLED)})

    @property
    def failed(self) -> int:
        return sum(self.failures().values())

    def as_dict(self) -> dict[str, int]:
        return _by_count(self.counts)


def _by_count(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(((k, v) for k, v in counts.items() if v), key=lambda item: (-item[1], item[0])))
