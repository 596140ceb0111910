"""``LocalSystem``: every actor in this process, on one anyio task group.

Each actor gets one task (its actor task) in the system's task group; ordered messages never
get a task of their own, and control calls run on their caller's task. Nothing here outlives
the ``async with LocalSystem() as system:`` block.
"""

from __future__ import annotations

from typing import Any, final

import anyio
import anyio.abc

from oam_actors.runtime._actor import Actor
from oam_actors.runtime._address import Address
from oam_actors.runtime._admission import AdmissionGate, GateStatistics
from oam_actors.runtime._cell import ActorCell, Checkpoint
from oam_actors.runtime._ref import ActorRef, Reply
from oam_actors.runtime._statistics import ActorStatistics
from oam_actors.runtime._system import DEFAULT_MAX_QUEUE, ExcInfo, SystemBase

__all__ = ["LocalSystem"]


@final
class _LocalRef(ActorRef):
    """An ``ActorRef`` bound to one ``ActorCell`` of this process."""

    __slots__ = ("_cell",)

    def __init__(self, cell: ActorCell) -> None:
        self.address = cell.address
        self._cell = cell

    def ask_nowait(self, message: Any) -> Reply:
        return self._cell.enqueue(message, tell=False)

    def tell_nowait(self, message: Any) -> None:
        self._cell.enqueue(message, tell=True)

    async def ask_control(self, message: Any) -> Any:
        return await self._cell.control(message)

    def cancel_all(self) -> int:
        return self._cell.cancel_all()

    def statistics(self) -> ActorStatistics:
        return self._cell.mailbox.statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self.address} ({self._cell.state.value})>"


@final
class LocalSystem(SystemBase):
    """An ``ActorSystem`` in this process; ``max_queue`` is the default bound per actor.

    ``checkpoint``, when given, receives ``(address, actor.snapshot())`` after every committed
    ordered message, before its reply resolves (``Actor.snapshot``); without it nothing is
    snapshotted. ``max_running``, when given, is the admission gate's limit: at most that many
    handlers inside ``Actor.admission()`` at once, admitted flow by flow in turn, each flow's in
    arrival order (``None``: no gate; see ``AdmissionGate``).
    """

    def __init__(
        self,
        *,
        max_queue: int = DEFAULT_MAX_QUEUE,
        checkpoint: Checkpoint | None = None,
        max_running: int | None = None,
    ) -> None:
        super().__init__(max_queue=max_queue)
        self._checkpoint = checkpoint
        self._gate = None if max_running is None else AdmissionGate(max_running)
        self._refs: dict[Address, _LocalRef] = {}
        self._task_group: anyio.abc.TaskGroup | None = None

    async def _open(self) -> None:
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group

    async def _release(self, exc_info: ExcInfo) -> bool | None:
        assert self._task_group is not None
        return await self._task_group.__aexit__(*exc_info)

    def _host(self, address: Address, actor: Actor, max_queue: int) -> ActorRef:
        assert self._task_group is not None
        actor.address = address
        actor.system = self
        cell = ActorCell(actor, address, max_queue, self._forget, self._checkpoint, self._gate)
        ref = self._refs[address] = _LocalRef(cell)
        self._task_group.start_soon(cell.run, name=f"actor {address}")
        return ref

    def lookup(self, address: Address) -> ActorRef | None:
        return self._refs.get(address)

    def gate_statistics(self) -> GateStatistics | None:
        """The admission gate's counters (``None`` without a gate)."""
        return None if self._gate is None else self._gate.statistics()

    def addresses(self, kind: str | None = None) -> list[Address]:
        return [address for address in self._refs if kind is None or address.kind == kind]

    async def stop(self, address: Address) -> bool:
        ref = self._refs.get(address)
        if ref is None:
            return False
        await ref._cell.stop()
        return True

    def _forget(self, cell: ActorCell) -> None:
        ref = self._refs.get(cell.address)
        if ref is not None and ref._cell is cell:
            del self._refs[cell.address]
