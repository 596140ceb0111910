"""The pool's status records and the pure functions that fill them: ``model/availability`` for
a whole pool, queue-wait percentiles. Records are camelCase on the wire (``msgspec.to_builtins``),
so they travel as they are in a protocol result or a Ray message."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence

import msgspec

from ...agent.model import Availability
from ..coalesce import CoalescingStatistics
from ._health import DeviceState

__all__ = ["DeviceStatistics", "PoolStatistics", "WaitSamples", "WaitSummary", "pool_availability", "summarize_waits"]

_STATUS_RANK = {"available": 0, "downloading": 1, "downloadable": 2, "unavailable": 3}


class WaitSummary(msgspec.Struct, frozen=True, rename="camel"):
    """Queue waits of admitted steps, in milliseconds (nearest-rank percentiles)."""

    count: int = 0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0


class DeviceStatistics(msgspec.Struct, frozen=True, rename="camel"):
    """One device: its state, its queue, and what it did since the pool started."""

    name: str
    url: str
    state: DeviceState
    reason: str | None  # why it is cooling or dead
    cooling_seconds: float | None  # left of the cool-down
    queued: int
    in_flight: int
    ok: int  # steps it completed
    busy: int  # quota refusals (BUSY 9, battery 27/28, background 30, HTTP 429/503)
    errors: int  # other failures it caused (transport, garbage, unknown ML Kit errors)
    rejected: int  # requests its model refused on their own account (safety, too large, …)
    utilisation: float  # time spent generating / time since the pool started
    requests_limit: int | None  # the scheduler's current (learned) requests per window
    context_size: int
    requests_in_window: int = 0  # requests its quota window holds now (used, of requests_limit)


class PoolStatistics(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """The whole pool (``model/status``); ``coalescing`` when the pool is served coalesced."""

    devices: tuple[DeviceStatistics, ...]
    ready: int
    cooling: int
    dead: int
    queued: int
    in_flight: int
    steps_ok: int
    steps_failed: int
    rerouted: int  # steps moved to another device after a failure
    quota_events_absorbed: int  # quota refusals the caller never saw (rerouted or waited out)
    quota_events_surfaced: int  # rate_limited errors the caller got (queue time used up)
    queue_wait: dict[str, WaitSummary]  # by priority name
    elapsed_seconds: float
    coalescing: CoalescingStatistics | None = None
    queued_by_priority: dict[str, int] = msgspec.field(default_factory=dict)  # steps waiting, by priority name
    # Seconds the devices spent generating, by priority name (summed over devices): what each
    # class of work cost the phones, whatever bound them (quota or decode time).
    generating_by_priority: dict[str, float] = msgspec.field(default_factory=dict)


def _percentile(ordered: Sequence[float], q: float) -> float:
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class WaitSamples:
    """The latest ``size`` queue waits, oldest overwritten first: 8 bytes a wait (a deque of
    floats took 32, which a server filled over its first turns and kept)."""

    __slots__ = ("_next", "_size", "_values")

    def __init__(self, size: int) -> None:
        self._values = array("d")
        self._size = size
        self._next = 0  # where the next wait goes once the samples are full

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[float]:
        return iter(self._values)

    def append(self, seconds: float) -> None:
        if len(self._values) < self._size:
            self._values.append(seconds)
            return
        self._values[self._next] = seconds
        self._next = (self._next + 1) % self._size


def summarize_waits(seconds: Iterable[float]) -> WaitSummary:
    ordered = sorted(seconds)
    if not ordered:
        return WaitSummary()
    ms = [round(s * 1000, 2) for s in ordered]
    return WaitSummary(len(ms), _percentile(ms, 50), _percentile(ms, 90), _percentile(ms, 99), ms[-1])


def pool_availability(devices: Sequence[tuple[DeviceState, Availability | None]]) -> Availability:
    """``model/availability`` of a pool from each device's state and last probed availability.

    Available when any device that is not dead is; ``contextSize`` and ``maxOutputTokens`` are
    the smallest among the devices that can serve (a step must fit on any of them); otherwise the
    most hopeful device (downloading before downloadable before unavailable) speaks for the pool.
    ``detail`` counts the devices by state.
    """
    serving = [a for s, a in devices if s is not DeviceState.DEAD and a is not None and a.available]
    known = [a for _, a in devices if a is not None]
    detail = _census(devices)
    if serving:
        limits = [a.maxOutputTokens for a in serving if a.maxOutputTokens is not None]
        return Availability(
            available=True,
            contextSize=min(a.contextSize for a in serving),
            variant=serving[0].variant,
            status="available",
            detail=detail,
            maxOutputTokens=min(limits) if limits else None,
        )
    best = min(known, key=lambda a: _STATUS_RANK.get(a.status or "unavailable", 3), default=None)
    if best is None or best.available:
        # Every device is unreachable, or dead although its model is there (it failed us).
        return Availability(available=False, reason="unknown", status="unavailable", detail=detail,
                            contextSize=min((a.contextSize for a in known), default=4000))
    return msgspec.structs.replace(best, detail=f"{detail}; {best.detail}" if best.detail else detail)


def _census(devices: Sequence[tuple[DeviceState, Availability | None]]) -> str:
    counts = {state: 0 for state in DeviceState}
    for state, _ in devices:
        counts[state] += 1
    return (f"{counts[DeviceState.READY]} of {len(devices)} devices ready, "
            f"{counts[DeviceState.COOLING]} cooling down, {counts[DeviceState.DEAD]} dead.")
