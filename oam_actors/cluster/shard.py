"""``ShardHost``: the body of one shard Ray actor — a ``LocalSystem`` hosting many object actors.

The driver (``RaySystem``) talks to it with three calls, each safe to repeat:

- ``ping()`` → :class:`~oam_actors.cluster.wire.Hello`: the shard's *incarnation* (new after every
  restart of its process), pid and node.
- ``deliver(incarnation, batch, ops)`` applies a batch of ops in order and returns the shard's
  incarnation. A batch meant for another incarnation is refused untouched (the driver re-plans
  it), and a batch number already applied is ignored (a retried call).
- ``drain(incarnation, acked, wait)`` returns the items numbered after ``acked`` (waiting up to
  ``wait`` seconds for one) and forgets those up to ``acked``: a lost answer is fetched again.

Per-object order is the local mailbox's order: ``deliver`` never awaits while applying ops, so
Ray running async calls out of order cannot reorder them (the driver keeps one ``deliver`` in
flight). Everything an actor emits (outlet calls, its checkpoint, its reply) is appended to one
item list synchronously, in the order it happens. The Ray actor is made with ``ray.remote`` in
:mod:`oam_actors.cluster.system`; this class itself does not import Ray.
"""

from __future__ import annotations

import collections
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from ..runtime import ActorRef, ActorStopped, Address, LocalSystem, MailboxFull
from .outlet import ShardOutlet, provisional_ids
from .wire import (
    Ask,
    CancelAll,
    CancelOne,
    Control,
    Done,
    Drained,
    Failure,
    Hello,
    Op,
    Out,
    Saved,
    Spawn,
    Stop,
    Tell,
    dumps_value,
    loads_actor,
    loads_value,
)

__all__ = ["ShardHost"]

_log = logging.getLogger(__name__)


class ShardHost:
    """One shard; ``node_id`` names where it runs (Ray's node id, for placement checks)."""

    def __init__(self, index: int, node_id: Callable[[], str] = lambda: "") -> None:
        self.index = index
        self.incarnation = uuid.uuid4().hex[:12]
        self._node_id = node_id
        self._system: LocalSystem | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._started: anyio.Event | None = None
        self._applied = 0  # the last batch number applied
        self._items: collections.deque[tuple[int, Any]] = collections.deque()
        self._numbers = 0
        self._wakeup: anyio.Event | None = None
        self._asks: dict[int, Any] = {}  # seq -> the local Reply, until it resolves
        self._outlets: dict[int, ShardOutlet] = {}
        self._tool_ids = provisional_ids(self.incarnation)

    # --- the three calls ---------------------------------------------------------------------

    async def ping(self) -> Hello:
        return Hello(self.incarnation, os.getpid(), self._node_id())

    async def deliver(self, incarnation: str, batch: int, ops: list[Op]) -> str:
        if incarnation != self.incarnation or batch <= self._applied:
            return self.incarnation
        await self._ensure_started()
        self._applied = batch
        for op in ops:
            self._apply(op)
        return self.incarnation

    async def drain(self, incarnation: str, acked: int, wait: float) -> Drained:
        if incarnation != self.incarnation:
            return Drained(self.incarnation, acked, [])
        items = self._items
        while items and items[0][0] <= acked:
            items.popleft()
        if not items:
            self._wakeup = anyio.Event()
            with anyio.move_on_after(wait):
                await self._wakeup.wait()
        return Drained(self.incarnation, self._numbers, [item for _, item in items])

    # --- hosting -----------------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = anyio.Event()
            # The shard's root task: Ray owns the event loop, so nothing above us could host it;
            # it lives as long as the process.
            import asyncio

            asyncio.get_running_loop().create_task(self._host())
        await self._started.wait()

    async def _host(self) -> None:
        assert self._started is not None
        async with LocalSystem(checkpoint=self._saved) as system, anyio.create_task_group() as tasks:
            self._system, self._tasks = system, tasks
            self._started.set()
            await anyio.sleep_forever()

    def _emit(self, item: Any) -> None:
        self._numbers += 1
        self._items.append((self._numbers, item))
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def _saved(self, address: Address, state: bytes) -> None:
        self._emit(Saved(address, state))

    def _outlet(self, endpoint: int) -> ShardOutlet:
        outlet = self._outlets.get(endpoint)
        if outlet is None:
            outlet = self._outlets[endpoint] = ShardOutlet(lambda call: self._emit(Out(endpoint, call)), self._tool_ids)
        return outlet

    # --- ops ---------------------------------------------------------------------------------

    def _apply(self, op: Op) -> None:
        match op:
            case Ask(seq=seq, address=address, message=message):
                self._ask(seq, address, message)
            case Spawn():
                self._spawn(op)
            case Control(seq=seq, address=address, message=message):
                assert self._tasks is not None
                self._tasks.start_soon(self._control, seq, address, message)
            case Tell(address=address, message=message):
                self._tell(address, message)
            case CancelOne(seq=seq):
                reply = self._asks.get(seq)
                if reply is not None:
                    reply.cancel()
            case CancelAll(address=address):
                if (ref := self._lookup(address)) is not None:
                    ref.cancel_all()
            case Stop(seq=seq, address=address):
                assert self._tasks is not None
                self._tasks.start_soon(self._stop, seq, address)

    def _lookup(self, address: Address) -> ActorRef | None:
        assert self._system is not None
        return self._system.lookup(address)

    def _spawn(self, op: Spawn) -> None:
        assert self._system is not None
        try:
            actor = loads_actor(op.actor, self._outlet)
            if op.state is not None:
                actor.restore(op.state)
            # The driver counts its bound; one more here so the two views never disagree.
            self._system.spawn(op.address, lambda: actor, max_queue=op.max_queue + 1)
        except Exception as exc:  # noqa: BLE001 - its messages will answer ActorStopped
            _log.error("shard %d: cannot host %s", self.index, op.address, exc_info=exc)

    def _ask(self, seq: int, address: Address, message: bytes) -> None:
        ref = self._lookup(address)
        try:
            if ref is None:
                raise ActorStopped(address)
            reply = ref.ask_nowait(loads_value(message))
        except (ActorStopped, MailboxFull) as exc:
            self._emit(Done(seq, failure=Failure.of(exc)))
            return
        self._asks[seq] = reply
        reply.add_done_callback(lambda value, error: self._answered(seq, value, error))

    def _answered(self, seq: int, value: Any, error: BaseException | None) -> None:
        self._asks.pop(seq, None)
        self._emit(_done(seq, value, error))

    def _tell(self, address: Address, message: bytes) -> None:
        ref = self._lookup(address)
        if ref is None:
            _log.info("shard %d: told message for %s dropped (no such actor)", self.index, address)
            return
        try:
            ref.tell_nowait(loads_value(message))
        except (ActorStopped, MailboxFull) as exc:
            _log.info("shard %d: told message dropped: %s", self.index, exc)

    async def _control(self, seq: int, address: Address, message: bytes) -> None:
        ref = self._lookup(address)
        try:
            if ref is None:
                raise ActorStopped(address)
            value = await ref.ask_control(loads_value(message))
        except Exception as exc:  # noqa: BLE001 - the caller's error, sent back
            self._emit(Done(seq, failure=Failure.of(exc)))
        else:
            self._emit(_done(seq, value, None))

    async def _stop(self, seq: int, address: Address) -> None:
        assert self._system is not None
        try:
            stopped = await self._system.stop(address)
        except Exception as exc:  # noqa: BLE001 - on_stop's error, raised by the driver's stop
            self._emit(Done(seq, failure=Failure.of(exc)))
        else:
            self._emit(_done(seq, stopped, None))


def _done(seq: int, value: Any, error: BaseException | None) -> Done:
    if error is not None:
        return Done(seq, failure=Failure.of(error))
    try:
        return Done(seq, dumps_value(value))
    except TypeError as exc:
        return Done(seq, failure=Failure.of(exc))
