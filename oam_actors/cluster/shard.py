"""``ShardHost``: the body of one shard Ray actor — a ``LocalSystem`` hosting many object actors.

Ray creates, places and restarts it; the one Ray call it serves is ``ping()``, which returns a
:class:`~oam_actors.cluster.wire.Hello`: its *incarnation* (new after every restart), pid, node,
and where its data path listens (host, port, token).

The data path is one connection from the driver, framed (:mod:`.frames`); the first frame
must be the token. The shard listens on TCP (for a driver on another node) and on a Unix socket in
a private directory (mode 0700) for a driver on its own node: on loopback a Unix socket skips the
TCP stack, so each crossing's writes and wake-ups cost less. Once the driver is connected the
socket and its directory are removed (nothing else may connect); a shard killed before its
driver came leaves its directory behind, and the next shard started on the node removes it. Driver → shard: batches of ops, applied in order without awaiting (in the read
callback), so per-object order is the local mailbox's order. Shard → driver: batches of items,
everything emitted by the time the event loop comes round in one frame, with only the latest
checkpoint of each actor in it.
Everything an actor emits (outlet calls, its checkpoint, its reply) is appended to one item list
synchronously, in the order it happens, so the driver sees an actor's events and checkpoint before
its reply. The connection keeps both directions in order; Ray calls would not (async actors run calls out of
order) and cost about a millisecond each.

Checkpoints that hold a stand-in (a world's subscribers) write it as the endpoint it stands for
(the shard is their ``runtime.EndpointReferences``), so a restarted shard relays to the same
driver endpoint.

Actors here reach actors on other shards through the driver: the shard's ``LocalSystem`` answers
``lookup`` for an address it does not host with a :class:`_RemoteRef`, whose messages leave as
``Forward`` items (outlets in them as their endpoints) and whose outcomes come back as ``Answer``
ops. A shared object whose owner is on another shard is a replica here (:mod:`.shared`).

When the connection ends, the shard has lost its driver: the driver restarts it (its actors come
back from their checkpoints), so this process serves no second connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hmac
import itertools
import logging
import os
import pickle
import secrets
import shutil
import socket
import tempfile
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from ..runtime import (
    Actor,
    ActorRef,
    ActorStatistics,
    ActorStopped,
    Address,
    HostFailed,
    LocalSystem,
    MailboxFull,
    Replication,
    Reply,
    current_flow,
    detached_copy,
    flow,
    replication_of,
    tune_gc_for_servers,
    use_endpoint_references,
)
from .endpoints import StandIns, provisional_ids
from .frames import CONNECTION_LOST, FrameProtocol
from .replies import SettledReply
from .wire import (
    ASK,
    CONTROL,
    TELL,
    Answer,
    Apply,
    Ask,
    CancelAll,
    CancelOne,
    Control,
    Done,
    Failure,
    Follow,
    Forward,
    ForwardCancel,
    Hello,
    Item,
    Op,
    Out,
    Push,
    Reference,
    Refollow,
    Replicate,
    Saved,
    SharedRef,
    Spawn,
    Stop,
    Tell,
    Unhosted,
    ValueWriter,
    decode_ops,
    dumps_value,
    encode_items,
    loads_actor,
    loads_value,
)

__all__ = ["Shard", "ShardHost"]

_log = logging.getLogger(__name__)

_WRITE_TRIES = 3
"""How often a write made through a replica is sent to its owner, its owner's process dying each time."""

_MAX_SOCKET_PATH = 100  # bytes; AF_UNIX allows 107 on Linux, fewer elsewhere
_DIRECTORY_PREFIX = "oam-shard-"  # then the shard's pid, "-", and mkdtemp's random part


class ShardHost:
    """The Ray actor body: one call, ``ping``. Ray wraps every method of an actor class (for
    tracing), so the shard's work lives in :class:`Shard`, a plain object, not here."""

    def __init__(
        self, index: int, where: Callable[[], tuple[str, str]] = lambda: ("", "127.0.0.1"), max_running: int | None = None
    ) -> None:
        self._shard = Shard(index, *where(), max_running=max_running)
        self._tuned = False

    async def ping(self) -> Hello:
        """Who this shard is now; starts it on the first call."""
        hello = await self._shard.hello()
        if not self._tuned:
            # This process is a server from now on: Ray's worker, every module and the shard's
            # system live as long as it does. Frozen, no full collection walks them again (one
            # of a driver's ~80,000 such objects took 47-290 ms here), and the young generation
            # is collected as seldom as in a CLI server (its actors make little cyclic garbage).
            tune_gc_for_servers()
            self._tuned = True
        return hello


class Shard:
    """One shard's state and data path; ``host`` is the address it listens on."""

    def __init__(self, index: int, node_id: str, host: str, *, max_running: int | None = None) -> None:
        self.index = index
        self._max_running = max_running
        self.incarnation = uuid.uuid4().hex[:12]
        self._token = secrets.token_bytes(16)
        self._node_id, self._host = node_id, host
        self._port = 0
        self._local: tuple[asyncio.AbstractServer, str] | None = None  # the Unix socket, its directory
        self._system: LocalSystem | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._started: anyio.Event | None = None
        self._root: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self._connected = False
        self._connection: FrameProtocol | None = None  # the driver's, while it lasts
        self._context = contextvars.copy_context()
        self._items: list[Item] = []
        self._saved_at: dict[Address, int] = {}  # where in _items each actor's checkpoint is
        self._flushing = False  # a flush is scheduled
        self._asks: dict[int, Any] = {}  # seq -> the local Reply, until it resolves
        self._stand_ins = StandIns(self._emit_out, provisional_ids(self.incarnation))
        self._stand_in = self._stand_ins.resolve
        # State shared by reference (.shared): live objects handed out, who holds whose, the
        # actors (to checkpoint an owner when a holder commits), and ops waiting for a holder.
        self._shares: dict[SharedRef, Any] = {}
        self._owners_of: dict[Address, list[Address]] = {}
        self._actors: weakref.WeakValueDictionary[Address, Actor] = weakref.WeakValueDictionary()
        self._arriving: dict[Address, list[Op]] = {}
        self._owner_states: dict[Address, bytes | None] = {}  # the last checkpoint queued of each owner
        # Other shards' actors: messages forwarded through the driver, waiting for their Answer
        # (and this shard's Follows); outlets in them travel as the endpoints they stand for.
        self._forward_seqs = itertools.count(1)
        self._forwards: dict[int, _Forwarded] = {}
        self._forward_values = ValueWriter(self._stand_ins.reference)
        # Replicas of objects shared by owners on other shards (in _shares too): how each is
        # replicated, follows under way, writes sent to the owner and not answered yet, and
        # which actors hold which (their replies wait for those writes).
        self._replicated: dict[SharedRef, Replication] = {}
        self._following: dict[SharedRef, asyncio.Task[Any]] = {}
        self._writes: dict[SharedRef, list[_Forwarded]] = {}
        self._remote_held: dict[Address, list[SharedRef]] = {}
        # As an owner's shard: what stops pushing each share's changes to each other shard.
        self._followers: dict[tuple[SharedRef, int], Callable[[], None]] = {}

    async def hello(self) -> Hello:
        await self._ensure_started()
        path = "" if self._local is None else os.path.join(self._local[1], "data")
        return Hello(self.incarnation, os.getpid(), self._node_id, self._host, self._port, self._token, path)

    # --- hosting -----------------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = anyio.Event()
            # The shard's root task: Ray owns this event loop and nothing above us could own
            # the task; it lives as long as the process.
            self._root = asyncio.get_running_loop().create_task(self._host_forever())
        await self._started.wait()

    async def _host_forever(self) -> None:
        assert self._started is not None
        use_endpoint_references(self._stand_ins)  # for this task's actors' checkpoints
        # Frames are applied in the read callback: in this context, so what they start (actors,
        # control calls) has the references too.
        self._context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        async with LocalSystem(checkpoint=self._saved, max_running=self._max_running, elsewhere=self._elsewhere
                               ) as system, anyio.create_task_group() as tasks:
            self._system, self._tasks = system, tasks
            server = await loop.create_server(self._new_connection, self._host, 0)
            async with server:
                self._port = server.sockets[0].getsockname()[1]
                self._local = await _listen_locally(self._new_connection)
                try:
                    self._started.set()
                    await anyio.sleep_forever()
                finally:
                    self._stop_listening_locally()

    def _stop_listening_locally(self) -> None:
        if self._local is not None:
            server, directory = self._local
            self._local = None
            server.close()
            shutil.rmtree(directory, ignore_errors=True)

    def _new_connection(self) -> FrameProtocol:
        connection = FrameProtocol(
            lambda payload: self._frame(connection, payload), first_limit=len(self._token), context=self._context
        )
        assert self._tasks is not None
        self._tasks.start_soon(self._watch, connection)
        return connection

    def _frame(self, connection: FrameProtocol, payload: memoryview) -> None:
        if self._connection is connection:
            for op in decode_ops(payload):
                self._apply_safely(op)
        elif self._connected or not hmac.compare_digest(payload, self._token):
            _log.warning("shard %d: refused a connection", self.index)
            connection.close()
        else:
            self._connected = True
            self._connection = connection
            self._stop_listening_locally()  # a shard serves one driver
            self._flush()  # what actors emitted before the driver came

    async def _watch(self, connection: FrameProtocol) -> None:
        try:
            await connection.closed()
        except CONNECTION_LOST:
            if self._connection is connection:
                _log.warning("shard %d: the driver went away", self.index)
                self._connection = None

    def _emit(self, item: Item) -> None:
        self._items.append(item)
        if self._connection is not None and not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if self._connection is None or not self._items:
            return
        self._connection.send(encode_items(self._take_batch()))

    def _take_batch(self) -> list[Item]:
        batch, self._items, self._saved_at = self._items, [], {}
        return batch

    def _saved(self, address: Address, state: bytes) -> None:
        self._save(address, state)
        if address in self._owner_states:
            self._owner_states[address] = state
        for owner in self._owners_of.get(address, ()):
            # It may have changed the owner's state through the shared object: keep that too,
            # unless the owner handed back the very bytes it last did (nothing changed).
            actor = self._actors.get(owner)
            if actor is None or (owner_state := actor.snapshot()) is None or owner_state is self._owner_states.get(owner):
                continue
            self._owner_states[owner] = owner_state
            self._save(owner, owner_state)

    def _save(self, address: Address, state: bytes) -> None:
        """Queue ``address``'s checkpoint in place of one still queued for it (a world is saved
        again with each NPC turn that touched it): the driver stores a batch's checkpoints before
        it dispatches any of its outcomes, so the earlier one would only be overwritten."""
        index = self._saved_at.get(address)
        if index is None:
            self._saved_at[address] = len(self._items)
            self._emit(Saved(address, state))
        else:
            self._items[index] = Saved(address, state)

    def _emit_out(self, endpoint: int, call: Any) -> None:
        self._emit(Out.of(endpoint, call))

    # --- ops ---------------------------------------------------------------------------------

    def _apply_safely(self, op: Op) -> None:
        try:
            self._apply(op)
        except Exception as exc:  # noqa: BLE001 - a bug fails its op, not the data path
            _log.error("shard %d: %r failed", self.index, op, exc_info=exc)
            if isinstance(op, Ask | Tell | Control | Stop):
                self._emit(Done(op.seq, failure=Failure.of(exc)))

    def _apply(self, op: Op) -> None:
        assert self._tasks is not None
        if self._arriving and (waiting := self._waiting_list(op)) is not None:
            waiting.append(op)  # its actor is still being hosted: keep its order
            return
        match op:
            case Ask(seq=seq, address=address, message=message, flow=key):
                with flow(key):  # the driver's connection, for the fair admission gate
                    self._ask(seq, address, message, self._answered)
            case Spawn():
                self._spawn(op)
            case Control(seq=seq, address=address, message=message):
                self._tasks.start_soon(self._control, seq, address, message)
            case Tell(seq=seq, address=address, message=message, flow=key):
                with flow(key):
                    self._ask(seq, address, message, self._told)
            case CancelOne(seq=seq):
                if (reply := self._asks.get(seq)) is not None:
                    reply.cancel()
            case CancelAll(address=address):
                if (ref := self._lookup(address)) is not None:
                    ref.cancel_all()
            case Stop(seq=seq, address=address):
                self._tasks.start_soon(self._stop, seq, address)
            case Answer():
                self._answer(op)
            case Replicate():
                self._tasks.start_soon(self._replicate, op)
            case Apply(share=share, change=change):
                if (replication := self._replicated.get(share)) is not None:
                    replication.apply(self._shares[share], pickle.loads(change))
            case Refollow(owners=owners):
                restarted = set(owners)
                for share in [share for share in self._replicated if share.owner in restarted]:
                    self._tasks.start_soon(self._refollow, share)

    def _lookup(self, address: Address) -> ActorRef | None:
        assert self._system is not None
        return self._system.hosted(address)

    def _waiting_list(self, op: Op) -> list[Op] | None:
        if isinstance(op, CancelOne):
            return next((ops for ops in self._arriving.values() if any(getattr(o, "seq", None) == op.seq for o in ops)),
                        None)
        address = getattr(op, "address", None)
        return None if address is None else self._arriving.get(address)

    # --- other shards --------------------------------------------------------------------------

    def _answer(self, answer: Answer) -> None:
        if (reply := self._forwards.pop(answer.seq, None)) is not None:
            if answer.failure is not None:
                reply.finish(None, answer.failure.to_exception())
            else:
                reply.finish(None if answer.value is None else loads_value(answer.value, self._stand_in), None)

    def _elsewhere(self, address: Address) -> ActorRef:
        return _RemoteRef(self, address)

    def _forward(self, address: Address, message: Any, kind: int) -> _Forwarded | None:
        """Send ``message`` to the actor at ``address`` on another shard; its reply (not a tell's)."""
        payload = self._forward_values.dumps(message)
        seq = next(self._forward_seqs)
        reply = None
        if kind != TELL:
            reply = self._forwards[seq] = _Forwarded(self, seq, address)
        self._emit(Forward(seq, address, payload, kind, current_flow()))
        return reply

    def _cancel_forwarded(self, seq: int) -> None:
        self._emit(ForwardCancel(seq))

    def _cancel_all_forwarded(self, address: Address) -> None:
        self._emit(ForwardCancel(0, address))

    def _pending_to(self, address: Address) -> int:
        return sum(reply.address == address for reply in self._forwards.values())

    async def _replica(self, share: SharedRef) -> Any:
        """This shard's replica of ``share``, whose owner is on another shard (one per shard,
        made on first use)."""
        if share in self._shares:
            return self._shares[share]
        following = self._following.get(share)
        if following is None:
            following = self._following[share] = asyncio.get_running_loop().create_task(self._follow(share))
            following.add_done_callback(lambda _: self._following.pop(share, None))
        return await asyncio.shield(following)

    async def _follow(self, share: SharedRef) -> Any:
        copy = await self._copy_of(share)
        replication = replication_of(copy)
        assert replication is not None  # the driver places no holder away from an owner it cannot replicate
        replica = self._shares[share] = replication.replica(copy, functools.partial(self._write, share))
        self._replicated[share] = replication
        return replica

    async def _copy_of(self, share: SharedRef) -> Any:
        """A detached copy of ``share`` from its owner's shard, which pushes its changes from now on."""
        seq = next(self._forward_seqs)
        reply = self._forwards[seq] = _Forwarded(self, seq, share.owner)
        self._emit(Follow(seq, share))
        return await reply.wait()

    async def _refollow(self, share: SharedRef) -> None:
        """The replica of ``share`` from its owner again (its shard restarted, or it refused a write)."""
        try:
            copy = await self._copy_of(share)
        except Exception as exc:  # noqa: BLE001 - its owner is gone: the replica stays as it was
            _log.warning("shard %d: the replica of %s is not followed again: %r", self.index, share.owner, exc)
            return
        self._replicated[share].reset(self._shares[share], copy)

    def _write(self, share: SharedRef, message: Any) -> None:
        """A write made through the replica of ``share``, sent to its owner; the replies of the
        actors holding it wait for the owner's answer (``written``)."""
        written = _Forwarded(self, 0, share.owner)
        self._writes.setdefault(share, []).append(written)
        self._send_write(share, message, written, _WRITE_TRIES)

    def _send_write(self, share: SharedRef, message: Any, written: _Forwarded, tries: int) -> None:
        reply = self._forward(share.owner, message, ASK)
        assert reply is not None
        reply.add_done_callback(lambda _, error: self._written(share, message, written, tries - 1, error))

    def _written(self, share: SharedRef, message: Any, written: _Forwarded, tries: int,
                 error: BaseException | None) -> None:
        if isinstance(error, HostFailed) and tries:
            # The owner's process died before it answered: sent again, to its next process (a
            # replicated object's writes may be made twice: the owner's checkpoint may hold it).
            self._send_write(share, message, written, tries)
            return
        self._writes[share].remove(written)
        written.finish(None, error)
        if error is not None and not isinstance(error, ActorStopped) and self._tasks is not None:
            _log.warning("shard %d: %s refused a write made through its replica: %r", self.index, share.owner, error)
            self._tasks.start_soon(self._refollow, share)

    def _after_writes(self, address: Address, then: Callable[[BaseException | None], None]) -> None:
        """``then(error)`` once the writes the actor at ``address`` may have made through its
        replicas are answered (``error``: the first that failed; none for an owner that is gone,
        whose holders keep its object as in one process)."""
        pending = [write for share in self._remote_held[address] for write in self._writes.get(share, ())]
        if not pending:
            then(None)
            return
        left, failed = [len(pending)], [None]

        def one(_: Any, error: BaseException | None) -> None:
            if not isinstance(error, ActorStopped):
                failed[0] = failed[0] or error
            left[0] -= 1
            if not left[0]:
                then(failed[0])

        for write in pending:
            write.add_done_callback(one)

    async def _replicate(self, op: Replicate) -> None:
        """Answer a replica's follow: a copy of the live object, then its changes, pushed in order."""
        try:
            obj = await self._shared(op.share)
            replication = replication_of(obj)
            assert replication is not None  # as in _follow
            copy = pickle.dumps(detached_copy(obj), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - its owner is gone: the follower hears why
            self._emit(Done(op.seq, failure=Failure.of(exc)))
            return
        key = (op.share, op.to)
        if (stop := self._followers.pop(key, None)) is not None:
            stop()
        self._followers[key] = replication.follow(obj, functools.partial(self._push, op.to, op.share))
        self._emit(Done(op.seq, copy))

    def _push(self, to: int, share: SharedRef, change: Any) -> None:
        self._emit(Push(to, share, pickle.dumps(change, protocol=pickle.HIGHEST_PROTOCOL)))

    def _spawn(self, op: Spawn) -> None:
        if not op.shares:
            self._install(op, {})
            return
        assert self._tasks is not None
        self._arriving[op.address] = []
        self._tasks.start_soon(self._spawn_sharing, op)

    async def _spawn_sharing(self, op: Spawn) -> None:
        remote = op.remote or [False] * len(op.shares)
        try:
            live = {share: await (self._replica(share) if away else self._shared(share))
                    for share, away in zip(op.shares, remote, strict=True)}
        except Exception as exc:  # noqa: BLE001 - its owner is gone: reported as not hosted
            self._unhosted(op.address, exc)
        else:
            self._install(op, live)
        for waiting in self._arriving.pop(op.address):
            self._apply_safely(waiting)

    async def _shared(self, share: SharedRef) -> Any:
        """The live object behind ``share``; after a restart, asked of its owner again."""
        if share not in self._shares:
            owner = self._lookup(share.owner)
            if owner is None:
                raise ActorStopped(share.owner)
            self._shares[share] = await owner.ask_control(loads_value(share.message, self._stand_in))
        return self._shares[share]

    def _install(self, op: Spawn, live: dict[SharedRef, Any]) -> None:
        assert self._system is not None
        try:
            actor = loads_actor(op.actor, lambda ref: live[ref] if isinstance(ref, SharedRef) else self._stand_in(ref))
            if op.state is not None:
                actor.restore(op.state)
            # The driver enforces the bound; one more here so the two views never disagree.
            self._system.spawn(op.address, lambda: actor, max_queue=op.max_queue + 1)
        except Exception as exc:  # noqa: BLE001 - reported; its messages will answer ActorStopped
            self._unhosted(op.address, exc)
            return
        self._actors[op.address] = actor
        remote = op.remote or [False] * len(op.shares)
        if held := [share for share, away in zip(op.shares, remote, strict=True) if away]:
            self._remote_held[op.address] = held
        if local := [share for share, away in zip(op.shares, remote, strict=True) if not away]:
            # Each owner once: an actor holding its owner's object in two places (an NPC's
            # world tools and its grounding) shares it twice, and each commit snapshots owners.
            owners = self._owners_of[op.address] = list(dict.fromkeys(share.owner for share in local))
            for owner in owners:
                self._owner_states.setdefault(owner, None)

    def _unhosted(self, address: Address, exc: Exception) -> None:
        _log.error("shard %d: cannot host %s", self.index, address, exc_info=exc)
        self._emit(Unhosted(address, Failure.of(exc)))

    def _ask(self, seq: int, address: Address, message: bytes, answered: Callable[[int, Any, BaseException | None], None]) -> None:
        """Queue an ask or a tell (told messages are asked here too: the driver counts them in
        the actor's mailbox until their ``Done``); ``answered`` emits that ``Done``."""
        ref = self._lookup(address)
        try:
            if ref is None:
                raise ActorStopped(address)
            reply = ref.ask_nowait(loads_value(message, self._stand_in))
        except (ActorStopped, MailboxFull) as exc:
            self._emit(Done(seq, failure=Failure.of(exc)))
            return
        self._asks[seq] = reply
        if address in self._remote_held:  # answered once what it wrote through a replica is
            reply.add_done_callback(lambda value, error: self._after_writes(
                address, lambda failed: answered(seq, value, error or failed)))
        else:
            reply.add_done_callback(lambda value, error: answered(seq, value, error))

    def _answered(self, seq: int, value: Any, error: BaseException | None) -> None:
        self._asks.pop(seq, None)
        self._emit(_done(seq, value, error))

    def _told(self, seq: int, value: Any, error: BaseException | None) -> None:
        self._asks.pop(seq, None)
        self._emit(_done(seq, None, error))  # nobody reads a told message's result

    async def _control(self, seq: int, address: Address, message: bytes) -> None:
        ref = self._lookup(address)
        try:
            if ref is None:
                raise ActorStopped(address)
            value = await ref.ask_control(loads_value(message, self._stand_in))
        except Exception as exc:  # noqa: BLE001 - the caller's error, sent back
            self._emit(Done(seq, failure=Failure.of(exc)))
        else:
            self._emit(_done(seq, value, None, self._sharing(SharedRef(address, message))))

    def _sharing(self, ref: SharedRef) -> Reference:
        """How a control reply sends a shared object: a detached copy tagged with ``ref``."""

        def reference(obj: Any) -> Any:
            copy = detached_copy(obj)
            if copy is None:
                return None
            self._shares[ref] = obj
            return ("shared", ref, pickle.dumps(copy, protocol=pickle.HIGHEST_PROTOCOL))

        return reference

    async def _stop(self, seq: int, address: Address) -> None:
        assert self._system is not None
        self._owners_of.pop(address, None)
        self._owner_states.pop(address, None)
        self._remote_held.pop(address, None)
        for share in [share for share in self._shares if share.owner == address and share not in self._replicated]:
            del self._shares[share]  # its holders keep the object; new ones will not find it
        for key in [key for key in self._followers if key[0].owner == address]:
            self._followers.pop(key)()  # other shards' replicas of it hear no more
        try:
            stopped = await self._system.stop(address)
        except Exception as exc:  # noqa: BLE001 - on_stop's error, raised by the driver's stop
            self._emit(Done(seq, failure=Failure.of(exc)))
        else:
            self._emit(_done(seq, stopped, None))


async def _listen_locally(factory: Callable[[], FrameProtocol]) -> tuple[asyncio.AbstractServer, str] | None:
    """A Unix socket server in a new private directory, or ``None`` where there cannot be one
    (the driver then connects over TCP). The directory is named after this process, so the next
    shard on this node can tell it is stale if this one dies before its driver comes."""
    sweep_stale_directories(tempfile.gettempdir())
    directory = tempfile.mkdtemp(prefix=f"{_DIRECTORY_PREFIX}{os.getpid()}-")  # mode 0700: this user only
    path = os.path.join(directory, "data")
    try:
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise OSError(f"socket path {path!r} too long")
        server = await asyncio.get_running_loop().create_unix_server(factory, path)
    except (OSError, NotImplementedError) as exc:
        _log.info("no Unix socket for the data path (%s); TCP only", exc)
        shutil.rmtree(directory, ignore_errors=True)
        return None
    return server, directory


def sweep_stale_directories(parent: str) -> list[str]:
    """Remove the socket directories in ``parent`` left by this user's shards that died before
    their driver connected: those whose process is gone and whose socket, if any, nobody
    listens on (a process of the same number in another pid namespace may still serve it).
    Returns the directories removed."""
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        pid_text, _, rest = entry.name.removeprefix(_DIRECTORY_PREFIX).partition("-")
        if not (entry.name.startswith(_DIRECTORY_PREFIX) and pid_text.isdigit() and rest):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _alive(int(pid_text)) or _listening(os.path.join(entry.path, "data")):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def _listening(path: str) -> bool:
    """Whether something accepts connections on the Unix socket ``path``."""
    if not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _done(seq: int, value: Any, error: BaseException | None, reference: Reference | None = None) -> Done:
    if error is not None:
        return Done(seq, failure=Failure.of(error))
    try:
        return Done(seq, dumps_value(value, reference))
    except TypeError as exc:
        return Done(seq, failure=Failure.of(exc))


class _Forwarded(SettledReply):
    """The reply of a message forwarded to another shard (or of a follow), settled by its ``Answer``."""

    __slots__ = ("_shard", "address", "seq")

    def __init__(self, shard: Shard, seq: int, address: Address) -> None:
        super().__init__()
        self._shard = shard
        self.seq = seq
        self.address = address

    def cancel(self) -> bool:
        if self._done:
            return False
        self._shard._cancel_forwarded(self.seq)
        return True


class _RemoteRef(ActorRef):
    """An actor on another shard, as actors here reach it (through the driver, in order)."""

    __slots__ = ("_shard",)

    def __init__(self, shard: Shard, address: Address) -> None:
        self.address = address
        self._shard = shard

    def ask_nowait(self, message: Any) -> Reply:
        reply = self._shard._forward(self.address, message, ASK)
        assert reply is not None
        return reply

    def tell_nowait(self, message: Any) -> None:
        self._shard._forward(self.address, message, TELL)

    async def ask_control(self, message: Any) -> Any:
        reply = self._shard._forward(self.address, message, CONTROL)
        assert reply is not None
        return await reply.wait()

    def cancel_all(self) -> int:
        self._shard._cancel_all_forwarded(self.address)
        return self._shard._pending_to(self.address)

    def statistics(self) -> ActorStatistics:
        sent = self._shard._pending_to(self.address)
        return ActorStatistics(queued=max(sent - 1, 0), running=min(sent, 1), processed=0, failed=0, cancelled=0,
                               max_queue=0)

    def __repr__(self) -> str:
        return f"<ActorRef {self.address} (another shard)>"
