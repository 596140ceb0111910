"""``ShardLink``: the driver's end of one shard — ordered batches out, one ordered stream back.

Out: callers append ops synchronously (``send``), so the order of ``ask_nowait`` calls is the
order the shard applies them; everything queued by the time the event loop comes round (one
``call_soon``, no writer task) is shipped as one frame. Ops are planned when written: an actor
the shard's current incarnation does not host yet gets a ``Spawn`` (with its latest checkpoint)
right before its first op; after a restart the system hosts again every actor the shard held
(``restarted``), so that actors on one shard find each other there as before (a conversation its
members). Ops that cannot be
planned (the store failed) fail their callers; the link goes on.

Back: each item batch is handled in order as its frame arrives (in the read callback, no reader
task): checkpoints are written to the store first (one transaction per batch), then outlet calls,
outcomes and what goes on to another shard (``crossed``: forwarded messages, replicas' follows and
changes) are dispatched, so a response is only ever written, and a message only ever forwarded,
after the events and checkpoints before it.

Faults: when the connection ends, the shard (or the way to it) failed. The link finds the shard
again over Ray (``ping``), restarting it if its process still runs, so that nothing it received
can still happen; every op written to the old incarnation then fails with ``HostFailed`` (never
silence), and what is still queued goes to the new one. If Ray gives up on the shard (its node is
gone), the link starts a replacement; when replacements die too, everything fails.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

import anyio
import ray
import ray.exceptions

from ..runtime import Address, HostFailed
from .frames import CONNECTION_LOST, FrameProtocol
from .wire import (
    Ask,
    Control,
    Done,
    Follow,
    Forward,
    ForwardCancel,
    Hello,
    Item,
    Op,
    Out,
    Push,
    Replicate,
    Resolve,
    Saved,
    SharedRef,
    Spawn,
    Stop,
    Tell,
    Unhosted,
    decode_items,
    encode_ops,
    loads_value,
)

__all__ = ["Hosted", "LinkState", "ShardLink", "Waiter"]

_log = logging.getLogger(__name__)

_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0
_REPLACEMENTS = 3  # new shard actors tried in a row before a link gives up


class LinkState(enum.Enum):
    CONNECTING = "connecting"
    UP = "up"
    DEAD = "dead"


class Waiter(Protocol):
    """An outcome the driver waits for (an ask's reply, a control call, a stop)."""

    address: Address
    sent_to: str | None

    def settle(self, value: Any, error: BaseException | None) -> None: ...


class Hosted(Protocol):
    """What the link needs to know of a spawned actor (``owners``: actors on its shard whose state
    it holds by reference; ``shares``: all such references, ``remote`` telling those whose owner
    is on another shard)."""

    address: Address
    blob: bytes
    max_queue: int
    placed: str | None

    @property
    def owners(self) -> Sequence[Hosted]: ...

    @property
    def shares(self) -> list[SharedRef]: ...

    @property
    def remote(self) -> list[bool]: ...


class ShardLink:
    """One shard as the driver sees it. ``load_state``/``save_states`` are the store's
    ``get``/``put_many`` (``save_states`` returns the durable writes to wait for before the
    batch's outcomes are dispatched; ``not_durable`` hears of each object whose write failed); ``deliver_out`` hands an ``Out`` item to its endpoint; ``unhosted``
    hears of an actor the shard could not host; ``replacement(index)`` makes a new shard actor
    when Ray says this one is gone for good (its node died); ``resolve_reply`` turns a shared
    object's reference in a reply into the driver's copy; ``crossed(link, item)`` takes what the
    shard sends on to another shard. ``node_id`` is the driver's node: a
    shard on it is reached over its Unix socket, any other over TCP."""

    def __init__(
        self,
        index: int,
        handle: Any,
        *,
        load_state: Callable[[Address], bytes | None],
        save_states: Callable[[Iterable[tuple[Address, bytes]]], list[tuple[Address, Awaitable[None]]]],
        not_durable: Callable[[Address], None],
        deliver_out: Callable[[Out], None],
        unhosted: Callable[[Address, Exception], None],
        replacement: Callable[[int], Any],
        resolve_reply: Resolve,
        node_id: str | None = None,
        restarted: Callable[[ShardLink], None] | None = None,
        crossed: Callable[[ShardLink, Forward | ForwardCancel | Follow | Push], None] | None = None,
    ) -> None:
        self.index = index
        self._crossed = crossed
        self._restarted = restarted
        self.handle = handle
        self.hello: Hello | None = None
        self.state = LinkState.CONNECTING
        self.restarts = 0
        self.up = anyio.Event()  # set while connected
        self._load_state = load_state
        self._save_states = save_states
        self._not_durable = not_durable
        self._waiting: asyncio.Task[None] | None = None  # the batches waiting for durable writes, in order
        self._deliver_out = deliver_out
        self._unhosted = unhosted
        self._replacement = replacement
        self._resolve_reply = resolve_reply
        self._node_id = node_id
        self._outbound: list[tuple[Hosted | None, Op | None, Waiter | None]] = []
        self._waiters: dict[int, Waiter] = {}
        self._connection: FrameProtocol | None = None  # while up
        self._flushing = False  # a flush is scheduled

    @property
    def incarnation(self) -> str | None:
        return None if self.hello is None else self.hello.incarnation

    # --- sending (synchronous, in call order) --------------------------------------------------

    def send(self, hosted: Hosted | None, op: Op | None, waiter: Waiter | None = None) -> None:
        """Queue ``op`` (``None``: only make sure ``hosted`` is hosted); ``waiter`` gets its Done."""
        if self.state is LinkState.DEAD:
            if waiter is not None:
                waiter.settle(None, HostFailed(waiter.address))
            return
        if waiter is not None:
            self._waiters[_waited(op)] = waiter
        self._outbound.append((hosted, op, waiter))
        if self._connection is not None and not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    # --- the link's life -----------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, and after every failure find the shard again; returns once it is gone."""
        while True:
            hello = await self._reach_new()
            if hello is None:
                self._die()
                return
            self._adopt(hello)
            try:
                await self._serve(hello)
            except* CONNECTION_LOST as group:
                _log.warning("shard %d (incarnation %s) lost: %r", self.index, hello.incarnation, group.exceptions[0])
            self.state = LinkState.CONNECTING
            self.up = anyio.Event()

    async def _serve(self, hello: Hello) -> None:
        loop = asyncio.get_running_loop()

        def protocol() -> FrameProtocol:
            return FrameProtocol(lambda payload: self._dispatch(decode_items(payload)))

        if hello.path and hello.node_id == self._node_id:  # same node: the cheaper Unix socket
            _, connection = await loop.create_unix_connection(protocol, hello.path)
        else:
            _, connection = await loop.create_connection(protocol, hello.host, hello.port)
        try:
            connection.send(hello.token)
            self._connection = connection
            self.state = LinkState.UP
            self.up.set()
            self._flush()  # what was queued while connecting
            await connection.closed()  # raises when the connection ends
        finally:
            self._connection = None
            connection.close()

    def _flush(self) -> None:
        self._flushing = False
        if self._connection is None or not self._outbound:
            return
        batch, self._outbound = self._outbound, []
        try:
            payload = encode_ops(self._plan(batch))
        except Exception as exc:  # noqa: BLE001 - the store failed or our bug: these ops fail, the link stays
            _log.error("shard %d: operations not sent", self.index, exc_info=exc)
            for _, op, waiter in batch:
                if waiter is not None and self._waiters.pop(_waited(op), None) is waiter:
                    waiter.settle(None, exc)
            return
        self._connection.send(payload)

    def _plan(self, batch: list[tuple[Hosted | None, Op | None, Waiter | None]]) -> list[Op]:
        ops: list[Op] = []
        incarnation = self.incarnation
        for hosted, op, waiter in batch:
            if hosted is not None and hosted.placed != incarnation and _needs_actor(op):
                for owner in hosted.owners:  # what it shares must be there first
                    if owner.placed != incarnation:
                        ops.append(self._spawn(owner))
                        owner.placed = incarnation
                ops.append(self._spawn(hosted))
                hosted.placed = incarnation
            if op is not None:
                ops.append(op)
                if waiter is not None:
                    waiter.sent_to = incarnation
        return ops

    def _spawn(self, hosted: Hosted) -> Spawn:
        return Spawn(hosted.address, hosted.blob, hosted.max_queue, self._load_state(hosted.address), hosted.shares,
                     hosted.remote)

    # --- what comes back -----------------------------------------------------------------------

    def _dispatch(self, items: list[Item]) -> None:
        saved = [(item.address, item.state) for item in items if isinstance(item, Saved)]
        durable: list[tuple[Address, Awaitable[None]]] = []
        if saved:
            try:
                durable = self._save_states(saved)
            except Exception as exc:  # noqa: BLE001 - the turns stand; only their checkpoint is lost
                _log.error("shard %d: checkpoints not stored", self.index, exc_info=exc)
        if durable or (self._waiting is not None and not self._waiting.done()):
            # Outcomes wait for their batch's durable writes, and later batches behind them.
            self._waiting = asyncio.get_running_loop().create_task(self._dispatch_when_durable(self._waiting, durable, items))
            return
        self._dispatch_now(items, {})

    async def _dispatch_when_durable(self, before: asyncio.Task[None] | None,
                                     durable: list[tuple[Address, Awaitable[None]]], items: list[Item]) -> None:
        if before is not None:
            await before
        failed: dict[Address, Exception] = {}
        for address, pending in durable:
            try:
                await pending
            except Exception as exc:  # noqa: BLE001 - that object's outcomes in this batch fail with it
                failed[address] = exc
                self._not_durable(address)
        self._dispatch_now(items, failed)

    def _dispatch_now(self, items: list[Item], failed: dict[Address, Exception]) -> None:
        for item in items:
            if failed and isinstance(item, Done) and (waiter := self._waiters.get(item.seq)) is not None \
                    and waiter.address in failed:
                del self._waiters[item.seq]
                waiter.settle(None, failed[waiter.address])
                continue
            try:
                if isinstance(item, Done):
                    self._settle(item)
                elif isinstance(item, Out):
                    self._deliver_out(item)
                elif isinstance(item, Unhosted):
                    self._unhosted(item.address, item.failure.to_exception())
                elif self._crossed is not None:
                    self._crossed(self, item)
            except Exception as exc:  # noqa: BLE001 - one bad item must not stop the stream
                _log.error("shard %d: item not delivered: %r", self.index, item, exc_info=exc)

    def _settle(self, done: Done) -> None:
        waiter = self._waiters.pop(done.seq, None)
        if waiter is None:
            return
        if done.failure is not None:
            waiter.settle(None, done.failure.to_exception())
        else:
            waiter.settle(None if done.value is None else loads_value(done.value, self._resolve_reply), None)

    # --- faults --------------------------------------------------------------------------------

    async def _reach_new(self) -> Hello | None:
        """A shard incarnation this link has not served yet (restarting the old one if it still
        runs: it may hold ops whose outcome we are about to declare failed; replacing it if Ray
        gave up on it); ``None`` if replacements die too."""
        old = self.incarnation
        killed = False
        replaced = 0
        delay = _RETRY_FIRST
        while True:
            hello: Hello | None
            try:
                hello = await self.handle.ping.remote()
            except ray.exceptions.ActorDiedError as exc:
                if replaced == _REPLACEMENTS:
                    _log.error("shard %d is gone for good: %s", self.index, exc)
                    return None
                _log.warning("shard %d died for good (%s); starting a replacement", self.index, exc)
                self.handle = self._replacement(self.index)
                replaced += 1
                continue
            except ray.exceptions.RayError:
                hello = None  # restarting: ask again
            if hello is not None and hello.incarnation != old:
                return hello
            if hello is not None and not killed:
                ray.kill(self.handle, no_restart=False)
                killed = True
            await anyio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX)

    def _adopt(self, hello: Hello) -> None:
        old = self.incarnation
        self.hello = hello
        if old is None:
            return
        self.restarts += 1
        lost = [seq for seq, waiter in self._waiters.items() if waiter.sent_to == old]
        _log.warning("shard %d restarted (pid %d); %d operations in flight fail", self.index, hello.pid, len(lost))
        for seq in lost:
            waiter = self._waiters.pop(seq)
            waiter.settle(None, HostFailed(waiter.address))
        if self._restarted is not None:
            self._restarted(self)

    def _die(self) -> None:
        self.state = LinkState.DEAD
        self.up.set()  # nobody waits for a connection that will not come
        waiters, self._waiters = self._waiters, {}
        self._outbound = []
        for waiter in waiters.values():
            waiter.settle(None, HostFailed(waiter.address))

    def close(self) -> None:
        """The system is closing: nothing more will be answered."""
        self._die()


def _waited(op: Op | None) -> int:
    """The number the outcome of ``op`` is waited on by, or -1 (cancels, activations)."""
    return op.seq if isinstance(op, Ask | Tell | Control | Stop | Replicate) else -1


def _needs_actor(op: Op | None) -> bool:
    return op is None or isinstance(op, Ask | Tell | Control)
