"""``ShardLink``: the driver's end of one shard — ordered batches out, one ordered stream back.

Out: callers append ops synchronously (``send``), so the order of ``ask_nowait`` calls is the
order the shard applies them. One flusher task ships everything queued in one ``deliver`` call,
one call in flight at a time (Ray may run an async actor's calls out of order). Ops are planned
at flush time: an actor not yet hosted by the shard's current incarnation gets a ``Spawn`` (with
its latest checkpoint) just before its first op, so actors come back lazily after a restart.

Back: one drainer task long-polls ``drain`` and handles the items in order: checkpoints are
written to the store first (one transaction per batch), then outlet calls and outcomes are
dispatched, so a response is only ever written after its events and its checkpoint.

Faults: a failed call or a new incarnation starts one recovery: ping until the shard answers;
if it restarted, every op delivered to the old incarnation fails with ``HostFailed`` (never
silence) and queued ops go to the new one; if it is gone for good, everything fails.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
import ray
import ray.exceptions

from ..runtime import Address, HostFailed
from .wire import Ask, Control, Done, Drained, Hello, Op, Out, Saved, Spawn, Stop, Tell, loads_value

__all__ = ["DRAIN_WAIT_SECONDS", "Hosted", "LinkState", "ShardLink", "Waiter"]

_log = logging.getLogger(__name__)

DRAIN_WAIT_SECONDS = 5.0
"""How long one ``drain`` call waits for an item; bounds each call, not any latency."""

_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0


class LinkState(enum.Enum):
    UP = "up"
    RECOVERING = "recovering"
    DEAD = "dead"


class Waiter(Protocol):
    """An outcome the driver waits for (an ask's reply, a control call, a stop)."""

    address: Address
    sent_to: str | None

    def settle(self, value: Any, error: BaseException | None) -> None: ...


class Hosted(Protocol):
    """What the link needs to know of a spawned actor."""

    address: Address
    blob: bytes
    max_queue: int
    placed: str | None


class ShardLink:
    """One shard as the driver sees it. ``load_state`` and ``save_states`` are the store's
    ``get``/``put_many``; ``deliver_out`` hands an ``Out`` item to its endpoint."""

    def __init__(
        self,
        index: int,
        handle: Any,
        hello: Hello,
        *,
        load_state: Callable[[Address], bytes | None],
        save_states: Callable[[Iterable[tuple[Address, bytes]]], None],
        deliver_out: Callable[[Out], None],
    ) -> None:
        self.index = index
        self.handle = handle
        self.hello = hello
        self.state = LinkState.UP
        self.restarts = 0
        self._load_state = load_state
        self._save_states = save_states
        self._deliver_out = deliver_out
        self._outbound: list[tuple[Hosted | None, Op | None]] = []
        self._waiters: dict[int, Waiter] = {}
        self._wakeup = anyio.Event()
        self._up = anyio.Event()
        self._up.set()
        self._batch = 0
        self._acked = 0

    @property
    def incarnation(self) -> str:
        return self.hello.incarnation

    # --- sending (synchronous, in call order) --------------------------------------------------

    def send(self, hosted: Hosted | None, op: Op | None, waiter: Waiter | None = None) -> None:
        """Queue ``op`` (``None``: only make sure ``hosted`` is hosted); ``waiter`` gets its Done."""
        if waiter is not None:
            self._waiters[_waited(op)] = waiter
        self._outbound.append((hosted, op))
        self._wakeup.set()

    # --- the two tasks -----------------------------------------------------------------------

    async def flush_forever(self) -> None:
        while True:
            if not self._outbound:
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
            await self._up.wait()
            if self.state is LinkState.DEAD:
                self._fail_outbound()
                continue
            batch, self._outbound = self._outbound, []
            await self._deliver(batch)

    async def drain_forever(self) -> None:
        while self.state is not LinkState.DEAD:
            await self._up.wait()
            asked = self.incarnation
            try:
                drained: Drained = await self.handle.drain.remote(asked, self._acked, DRAIN_WAIT_SECONDS)
            except ray.exceptions.RayError as exc:
                await self._recover(asked, exc)
                continue
            if drained.incarnation != asked:
                await self._recover(asked, None)
            elif asked == self.incarnation:
                self._dispatch(drained.items)
                self._acked = drained.last

    # --- delivery ------------------------------------------------------------------------------

    async def _deliver(self, batch: list[tuple[Hosted | None, Op | None]]) -> None:
        asked = self.incarnation
        ops = self._plan(batch)
        self._batch += 1
        while True:
            try:
                answer = await self.handle.deliver.remote(asked, self._batch, ops)
            except ray.exceptions.RayError as exc:
                await self._recover(asked, exc)
                if self.incarnation == asked and self.state is LinkState.UP:
                    continue  # the same shard, briefly unreachable: repeat (it skips a batch it applied)
                return  # lost with the old incarnation: recovery failed its waiters
            if answer == asked:
                return
            # Refused untouched by a new incarnation: plan it again after recovery, except ops
            # whose outcome a recovery already settled (HostFailed) - they must not run late.
            kept = [(hosted, op) for hosted, op in batch if _waited(op) < 0 or _waited(op) in self._waiters]
            self._unplan(kept, asked)
            await self._recover(asked, None)
            self._outbound[:0] = kept
            return

    def _plan(self, batch: list[tuple[Hosted | None, Op | None]]) -> list[Op]:
        ops: list[Op] = []
        incarnation = self.incarnation
        for hosted, op in batch:
            if hosted is not None and hosted.placed != incarnation and _needs_actor(op):
                ops.append(Spawn(hosted.address, hosted.blob, hosted.max_queue, self._load_state(hosted.address)))
                hosted.placed = incarnation
            if op is not None:
                ops.append(op)
                if (waiter := self._waiters.get(_waited(op))) is not None:
                    waiter.sent_to = incarnation
        return ops

    def _unplan(self, batch: list[tuple[Hosted | None, Op | None]], incarnation: str) -> None:
        for hosted, op in batch:
            if hosted is not None and hosted.placed == incarnation:
                hosted.placed = None
            if (waiter := self._waiters.get(_waited(op))) is not None:
                waiter.sent_to = None

    def _fail_outbound(self) -> None:
        batch, self._outbound = self._outbound, []
        for _, op in batch:
            if (waiter := self._waiters.pop(_waited(op), None)) is not None:
                waiter.settle(None, HostFailed(waiter.address))

    # --- what comes back -----------------------------------------------------------------------

    def _dispatch(self, items: list[Any]) -> None:
        saved = [(item.address, item.state) for item in items if isinstance(item, Saved)]
        if saved:
            try:
                self._save_states(saved)
            except Exception as exc:  # noqa: BLE001 - the turns stand; only their checkpoint is lost
                _log.error("shard %d: checkpoints not stored", self.index, exc_info=exc)
        for item in items:
            try:
                if isinstance(item, Done):
                    self._settle(item)
                elif isinstance(item, Out):
                    self._deliver_out(item)
            except Exception as exc:  # noqa: BLE001 - one bad item must not stop the stream
                _log.error("shard %d: item not delivered: %r", self.index, item, exc_info=exc)

    def _settle(self, done: Done) -> None:
        waiter = self._waiters.pop(done.seq, None)
        if waiter is None:
            return
        if done.failure is not None:
            waiter.settle(None, done.failure.to_exception())
        else:
            waiter.settle(None if done.value is None else loads_value(done.value), None)

    # --- faults --------------------------------------------------------------------------------

    async def _recover(self, asked: str, cause: BaseException | None) -> None:
        if self.incarnation != asked or self.state is LinkState.DEAD:
            return  # someone already dealt with that incarnation
        if self.state is LinkState.RECOVERING:
            await self._up.wait()
            return
        self.state = LinkState.RECOVERING
        self._up = anyio.Event()
        _log.warning("shard %d (incarnation %s) failed: %s", self.index, asked, cause or "restarted")
        hello = await self._reach()
        if hello is None:
            self._die()
        elif hello.incarnation != asked:
            self._restarted(hello)
        if self.state is LinkState.RECOVERING:
            self.state = LinkState.UP
        self._up.set()

    async def _reach(self) -> Hello | None:
        delay = _RETRY_FIRST
        while True:
            try:
                return await self.handle.ping.remote()
            except ray.exceptions.ActorDiedError as exc:
                _log.error("shard %d is gone for good: %s", self.index, exc)
                return None
            except ray.exceptions.RayError:
                await anyio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)

    def _restarted(self, hello: Hello) -> None:
        old = self.incarnation
        self.hello = hello
        self.restarts += 1
        self._batch = self._acked = 0
        lost = [seq for seq, waiter in self._waiters.items() if waiter.sent_to == old]
        _log.warning("shard %d restarted (pid %d); failing %d operations in flight", self.index, hello.pid, len(lost))
        for seq in lost:
            waiter = self._waiters.pop(seq)
            waiter.settle(None, HostFailed(waiter.address))

    def _die(self) -> None:
        self.state = LinkState.DEAD
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.settle(None, HostFailed(waiter.address))

    def fail_all(self) -> None:
        """The system is closing: nothing more will be answered."""
        self._die()


def _waited(op: Op | None) -> int:
    """The number of the outcome ``op`` is waited on by, or -1 (tells, cancels, activations)."""
    return op.seq if isinstance(op, Ask | Control | Stop) else -1


def _needs_actor(op: Op | None) -> bool:
    return op is None or isinstance(op, Ask | Tell | Control)
