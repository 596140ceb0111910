"""``FairQueue``: items waiting per *flow*, served round robin across flows.

A flow is whoever the waiting work is for (a connection). Each flow keeps its own items, lowest
key first (the key is an arrival ticket: within a flow, the earliest arrival goes first).
:meth:`FairQueue.pop` takes one item from the flow whose turn it is, then that flow goes to the
back of the rotation; a flow that starts waiting joins at the back. So with ``n`` flows waiting
an item waits for at most ``n - 1`` items of other flows per item ahead of it in its own flow,
however many the others have queued: one flow's backlog cannot hold another's work back.

Pure bookkeeping (no I/O, no tasks, no clock); the admission gate uses it for its waiters.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Per-flow heaps of ``(key, item)`` and the round-robin rotation of the flows with items."""

    __slots__ = ("_flows", "_rotation", "_size", "_serial")

    def __init__(self) -> None:
        self._flows: dict[Hashable, list[tuple[int, int, T]]] = {}
        self._rotation: deque[Hashable] = deque()
        self._size = 0
        self._serial = 0  # ties between equal keys go by push order; items are never compared

    def __len__(self) -> int:
        return self._size

    def push(self, flow: Hashable, key: int, item: T) -> None:
        """Queue ``item`` for ``flow``; within the flow, lower ``key`` first."""
        heap = self._flows.get(flow)
        if heap is None:
            heap = self._flows[flow] = []
            self._rotation.append(flow)
        self._serial += 1
        heapq.heappush(heap, (key, self._serial, item))
        self._size += 1

    def pop(self) -> T:
        """The next item: the lowest-key item of the flow whose turn it is. ``IndexError`` when empty."""
        if not self._rotation:
            raise IndexError("pop from an empty FairQueue")
        flow = self._rotation.popleft()
        heap = self._flows[flow]
        _, _, item = heapq.heappop(heap)
        if heap:
            self._rotation.append(flow)
        else:
            del self._flows[flow]
        self._size -= 1
        return item

    def flows(self) -> int:
        """How many flows have items waiting."""
        return len(self._rotation)
