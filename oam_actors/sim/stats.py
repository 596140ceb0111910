"""Pure statistics for simulation reports: percentiles, Jain's fairness index, outcome tallies."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

__all__ = ["LatencySummary", "Outcomes", "jain_index", "percentile", "summarize"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of already sorted values, nearest rank; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1.0 when every owner got the same, 1/n at worst."""
    xs = list(values)
    if not xs:
        return 1.0
    total = sum(xs)
    squares = sum(x * x for x in xs)
    return 1.0 if squares == 0 else total * total / (len(xs) * squares)


class LatencySummary(msgspec.Struct, frozen=True):
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
    """Tallies of request outcomes: ``ok`` or an error's ``data.code``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, outcome: str) -> None:
        self.counts[outcome] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items(), key=lambda item: (-item[1], item[0])))
