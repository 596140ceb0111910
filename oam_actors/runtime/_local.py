"""``LocalSystem``: every actor in this process, each on a task of its own.

Each actor gets one task (its actor task); ordered messages never get a task of their own, and
control calls run on their caller's task. Nothing here outlives the
``async with LocalSystem() as system:`` block: leaving it stops every actor, then cancels and
awaits any actor task still running.

The actor tasks are the event loop's own tasks, each in a cancel scope of the system's, owned
and awaited by the system rather than by an anyio task group: a crowd spawns thousands of
actors, and an anyio task costs several times an asyncio one to start (and about a kilobyte more
to keep: its handle, its own cancel scope and an event). Cancelling goes through those scopes,
so shielded sections inside an actor are respected as in a task group. The actor task catches
its handlers' errors (``ActorCell``); an error escaping it is a bug of this runtime, logged at
once and raised when the block is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, final

import anyio

from oam_actors.runtime._actor import Actor
from oam_actors.runtime._address import Address
from oam_actors.runtime._admission import AdmissionGate, GateStatistics
from oam_actors.runtime._cell import ActorCell, Checkpoint, new_cancel_scope
from oam_actors.runtime._durable import Durability
from oam_actors.runtime._ref import ActorRef, Reply
from oam_actors.runtime._statistics import ActorStatistics
from oam_actors.runtime._system import DEFAULT_MAX_QUEUE, ExcInfo, SystemBase

__all__ = ["LocalSystem"]

_log = logging.getLogger("oam_actors.runtime")


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
    ordered message, before its reply resolves (``Actor.snapshot``; an awaitable it returns is
    awaited first); without it nothing is snapshotted. ``durability`` (a :class:`Durability`,
    entered and left with this system; its store stays open) makes the checkpoints of its
    durable objects go to its state store, each written before its reply resolves. ``max_running``, when given, is the admission gate's limit: at most that many
    handlers inside ``Actor.admission()`` at once, admitted flow by flow in turn, each flow's in
    arrival order, and at most ``OPEN_PER_SLOT`` times that many of one flow's started and
    unfinished, paused ones included (``None``: no gate; see ``AdmissionGate``).
    ``elsewhere(address)``, when given, is ``lookup``'s answer for an actor this system does not
    host (a runtime whose actors span processes: a ref that reaches it there); :meth:`hosted`
    answers for this system's own actors only.
    """

    def __init__(
        self,
        *,
        max_queue: int = DEFAULT_MAX_QUEUE,
        checkpoint: Checkpoint | None = None,
        max_running: int | None = None,
        durability: Durability | None = None,
        elsewhere: Callable[[Address], ActorRef | None] | None = None,
    ) -> None:
        super().__init__(max_queue=max_queue)
        self._elsewhere = elsewhere
        if checkpoint is not None and durability is not None:
            raise ValueError("give checkpoint or durability, not both")
        self.durability = durability
        self._checkpoint = self._checkpoint_durably if durability is not None else checkpoint
        self._gate = None if max_running is None else AdmissionGate(max_running)
        self._refs: dict[Address, _LocalRef] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[asyncio.Task[None], anyio.CancelScope] = {}
        self._crashes: list[BaseException] = []

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.durability is not None:
            await self.durability.__aenter__()

    async def _release(self, exc_info: ExcInfo) -> bool | None:
        # Every actor has been asked to stop (aclose); a task still running was cancelled
        # from outside meanwhile: cancel it too, and wait for its teardown to resolve its replies.
        if self._tasks:
            left = list(self._tasks.items())
            for _, scope in left:
                scope.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([task for task, _ in left])
        if self.durability is not None:  # after every actor stopped: their last commits are written
            await self.durability.__aexit__(*exc_info)
        if self._crashes:
            raise BaseExceptionGroup("actor tasks failed", self._crashes)
        return None

    def _host(self, address: Address, actor: Actor, max_queue: int) -> ActorRef:
        assert self._loop is not None
        actor.address = address
        actor.system = self
        cell = ActorCell(actor, address, max_queue, self._forget, self._checkpoint, self._gate)
        ref = self._refs[address] = _LocalRef(cell)
        scope = new_cancel_scope()
        task = self._loop.create_task(_run_in(scope, cell), name=f"actor {address}")
        self._tasks[task] = scope
        task.add_done_callback(self._task_done)
        return ref

    def _task_done(self, task: asyncio.Task[None]) -> None:
        del self._tasks[task]
        if task.cancelled():
            return
        if (error := task.exception()) is not None:
            _log.error("an actor task failed", exc_info=error)
            self._crashes.append(error)

    def lookup(self, address: Address) -> ActorRef | None:
        ref = self._refs.get(address)
        if ref is None and self._elsewhere is not None:
            return self._elsewhere(address)
        return ref

    def _hosts(self, address: Address) -> bool:
        return address in self._refs

    def hosted(self, address: Address) -> ActorRef | None:
        """The ref of the actor at ``address`` if this system hosts it."""
        return self._refs.get(address)

    def _checkpoint_durably(self, address: Address, state: bytes) -> Awaitable[None] | None:
        assert self.durability is not None
        return self.durability.checkpoint(address, state, self._snapshot_of)

    def _snapshot_of(self, address: Address) -> bytes | None:
        """The committed state of the live actor at ``address`` (an owner of shared state)."""
        ref = self._refs.get(address)
        return None if ref is None else ref._cell.actor.snapshot()

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
            if self.durability is not None:
                self.durability.forget(cell.address)


async def _run_in(scope: anyio.CancelScope, cell: ActorCell) -> None:
    with scope:
        await cell.run()
