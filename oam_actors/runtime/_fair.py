"""``FairQueue``: items waiting per *flow*, flows served in turn, a flow back from idle first.

A flow is whoever the waiting work is for (a connection). Each flow keeps its own items, lowest
key first (the key is an arrival ticket: within a flow, the earliest arrival goes first). Flows
take turns by *tags* (start-time fair queueing): :meth:`FairQueue.pop` serves the flow with the
lowest tag, and each item served moves that flow's tag on by one. So flows that keep items
waiting are served round robin, one item each per round, however many items each holds. A flow
that starts waiting gets the tag of the round being served (or, if it was served later than that,
the tag its last item left it at), and among equal tags one that has just started waiting goes
first: a flow back from idle is served next, and one that comes and goes still gets one item per
round, like the others.

So a flow with one item waiting (a well-behaved connection) waits for no other flow's backlog,
and a flow with many waits at most one item of each other waiting flow per item of its own.

Pure bookkeeping (no I/O, no tasks, no clock); the admission gate and the fair yields use it.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")

_REMEMBERED = 64
"""Flows gone idle whose tags are kept beyond twice the waiting ones (tags behind the round being
served are forgotten then: coming back, such a flow gets that round's tag anyway)."""

_STARTING, _WAITING = 0, 1  # among equal tags, flows that have just started waiting go first


class FairQueue(Generic[T]):
    """Per-flow heaps of ``(key, item)`` and a heap of the waiting flows by tag."""

    __slots__ = ("_clock", "_flows", "_left_at", "_order", "_serial", "_size")

    def __init__(self) -> None:
        self._flows: dict[Hashable, list[tuple[int, int, T]]] = {}
        self._order: list[tuple[int, int, int, Hashable]] = []  # (tag, rank, serial, flow) per waiting flow
        self._left_at: dict[Hashable, int] = {}  # an idle flow's tag when its last item left
        self._clock = 0  # the tag last served
        self._size = 0
        self._serial = 0  # ties go by push order; items are never compared

    def __len__(self) -> int:
        return self._size

    def flows(self) -> int:
        """How many flows have items waiting."""
        return len(self._flows)

    def push(self, flow: Hashable, key: int, item: T) -> None:
        """Queue ``item`` for ``flow``; within the flow, lower ``key`` first."""
        self._serial += 1
        heap = self._flows.get(flow)
        if heap is None:
            heap = self._flows[flow] = []
            tag = max(self._left_at.pop(flow, self._clock), self._clock)
            heapq.heappush(self._order, (tag, _STARTING, self._serial, flow))
        heapq.heappush(heap, (key, self._serial, item))
        self._size += 1

    def pop(self) -> T:
        """The next item: the lowest-key item of the flow with the lowest tag. ``IndexError`` when empty."""
        if not self._order:
            raise IndexError("pop from an empty FairQueue")
        tag, _, _, flow = heapq.heappop(self._order)
        heap = self._flows[flow]
        _, _, item = heapq.heappop(heap)
        self._clock = tag
        self._size -= 1
        self._serial += 1
        if heap:
            heapq.heappush(self._order, (tag + 1, _WAITING, self._serial, flow))
        else:
            del self._flows[flow]
            self._left_at[flow] = tag + 1
            if len(self._left_at) > _REMEMBERED + 2 * len(self._flows):
                self._forget()
        return item

    def _forget(self) -> None:
        """Drop idle flows' tags that coming back could not use (not past the round being served)."""
        self._left_at = {flow: tag for flow, tag in self._left_at.items() if tag > self._clock}
