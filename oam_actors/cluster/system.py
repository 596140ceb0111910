"""``RaySystem``: the ``ActorSystem`` whose actors live in shard Ray actors.

Placement: ``shards`` Ray actors (each a ``LocalSystem``, see :mod:`.shard`) host every actor;
an address goes to shard ``crc32(str(address)) % shards``. Shards belong to this system (their
owner is this driver process: they end with it) and go round robin over the cluster's nodes.
Data flows over one connection per shard (:mod:`.link`; a Unix socket when the shard is on this
node, TCP otherwise); Ray places, restarts and finds them.

The ``ActorSystem`` contract holds with these differences, all because the actor is elsewhere:

- ``spawn`` runs ``factory()`` here and ships the actor pickled (cloudpickle); ``TypeError``
  if its state does not pickle. An endpoint it holds (what its layer declared with
  ``register_endpoint``: a connection's outlet) stays here: the shard gets a stand-in that
  relays, in order (:mod:`.endpoints`). State it shares with another actor (declared with
  ``register_shared``: a world's document, :mod:`.shared`) is the owner's live object when the
  two share a shard, else a replica kept in step with it (the actor is placed by its own
  address all the same). A
  backend it holds that its layer declared hosted (``register_hosted``: a proxy backend a session
  named) travels as the :class:`~.models.RemoteModel` of its named model actor, one per
  backend for the whole cluster, started on first use (:mod:`.models`).
  Messages and replies are pickled too (``ask_nowait`` raises ``TypeError`` for one that is not).
- ``cancel_all`` and ``Reply.cancel`` decide *which* messages are cancelled in the shard, in
  order with everything sent before; the count (the bool) they return is this side's view: a
  message committing at that very moment is counted although it will deliver its result.
- ``statistics`` counts this side's view (sent and not answered = queued + running). Told
  messages count until the shard has handled them, as asks do: a tell past ``max_queue`` raises
  ``MailboxFull`` here, and one accepted here is handled unless its actor stops or its shard dies
  (a told message that fails, lost with its shard too, is logged here).
- An actor in a shard reaches an actor on another shard through this driver: its shard's
  ``lookup`` answers a ref whose messages, cancels and outcomes the driver forwards in order
  (what a shard sends before an item reaches the other shard before it). Its outcomes are those
  of a ref here (``HostFailed`` when the other shard dies), except that a message cancelled
  because its actor is being stopped answers ``ActorStopped``: the asker cannot look the actor
  up to tell. Such a ref's ``statistics`` count only what its shard sent and has not heard back.
- A shard whose process dies is restarted by Ray (on another node if its node is gone).
  Messages, control calls and stops it had received resolve with ``HostFailed``; what was still
  queued here goes to the new process. An actor is re-created there when next used: from the
  pickled original, then ``restore`` of its last checkpoint. Checkpoints (``Actor.snapshot``
  after each committed message) are written to ``store`` here before the message's reply
  resolves, so no answered commit is ever lost.

Use it inside ``async with RaySystem(...) as system`` on the asyncio backend (Ray's futures
are asyncio futures). It connects with ``ray.init(address)`` unless Ray is already initialised,
and shuts Ray down on exit only if it started it.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import logging
import os
import shutil
import tempfile
import zlib
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, final

import anyio
import anyio.abc
import msgspec
import ray
import ray.util
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..runtime import (
    DEFAULT_MAX_QUEUE,
    Actor,
    ActorRef,
    ActorStatistics,
    ActorStopped,
    Address,
    Durability,
    HostFailed,
    MailboxFull,
    MessageCancelled,
    ExcInfo,
    Reply,
    SystemBase,
    current_flow,
    replication_of,
)
from .endpoints import Endpoints
from .link import ShardLink
from .models import hosted_reduce
from .replies import SettledReply
from .shard import ShardHost
from .shared import SharedCopies
from .store import MemoryStore, StateStore
from .wire import (
    CONTROL,
    TELL,
    Answer,
    Apply,
    Ask,
    CancelAll,
    CancelOne,
    Control,
    Failure,
    Follow,
    Forward,
    ForwardCancel,
    Hello,
    Push,
    Refollow,
    Replicate,
    SharedRef,
    Stop,
    Tell,
    ValueWriter,
    dumps_actor,
    loads_value,
)

__all__ = [
    "LOCAL_RAY_OPTIONS",
    "RaySystem",
    "ShardInfo",
    "init_private_ray",
    "private_ray",
    "remove_orphaned_folders",
    "shard_of",
    "shutdown_private_ray",
]

_log = logging.getLogger(__name__)

LOCAL_RAY_OPTIONS: Mapping[str, Any] = {
    "num_cpus": 2,
    "include_dashboard": False,
    "object_store_memory": 200 * 1024 * 1024,
    # Shards are servers: at Ray's default worker niceness (15) any other load starves them.
    # On clusters, start the nodes with RAY_worker_niceness=0 (cluster/start.sh does).
    "_system_config": {"worker_niceness": 0},
}
"""``ray.init`` options when this system starts a Ray instance of its own (no ``address``)."""

_FOLDER_PREFIX = "oamray-"
_OWNER_FILE = "owner.pid"  # the process a private instance's folder belongs to


def init_private_ray(options: Mapping[str, Any] = LOCAL_RAY_OPTIONS) -> str:
    """Start a private local Ray instance (``ray.init(address="local", **options)``, workers'
    output kept from this process's stdout) whose session files go to a folder of its own, not
    ``/tmp/ray``; returns that folder, for :func:`shutdown_private_ray`."""
    # Short and under /tmp: Ray's socket paths must fit in a sun_path.
    remove_orphaned_folders("/tmp")
    folder = tempfile.mkdtemp(prefix=_FOLDER_PREFIX, dir="/tmp")
    Path(folder, _OWNER_FILE).write_text(str(os.getpid()))
    # A copy: ray.init writes into ``_system_config`` (the object spilling folder, inside this
    # instance's session), and the next instance must not spill into a removed one.
    ray.init(address="local", log_to_driver=False, _temp_dir=folder, **copy.deepcopy(dict(options)))
    return folder


def remove_orphaned_folders(root: str) -> list[str]:
    """Remove the folders of private instances whose owner process is gone (killed before it
    could remove its own, e.g. by SIGKILL); returns them. A folder without an owner file (not
    ours, or still being made) and one whose owner is alive are left alone."""
    removed = []
    for folder in sorted(Path(root).glob(f"{_FOLDER_PREFIX}*")):
        try:
            owner = int(folder.joinpath(_OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
        except PermissionError:  # alive, another user's
            continue
    return removed


def shutdown_private_ray(folder: str) -> None:
    """Shut down what :func:`init_private_ray` started and remove its folder: a private
    instance leaves no ``session_*`` folders behind."""
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_ray(options: Mapping[str, Any] = LOCAL_RAY_OPTIONS) -> Iterator[None]:
    """A private local Ray instance for the block (:func:`init_private_ray`), shut down and its
    files removed after it."""
    folder = init_private_ray(options)
    try:
        yield
    finally:
        shutdown_private_ray(folder)

_SHARD_OPTIONS: Mapping[str, Any] = {
    "max_restarts": -1,  # a dead shard process is always replaced
    "max_task_retries": 0,  # a ping that died with it fails: the link asks again
    "num_cpus": 0,
}


def shard_of(address: Address, shards: int) -> int:
    """The shard hosting ``address``: stable across processes (unlike ``hash``)."""
    return zlib.crc32(str(address).encode()) % shards


def _where() -> tuple[str, str]:
    """Run in a shard: its node id and the address its data path listens on."""
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


_ShardActor = ray.remote(ShardHost)


def _use_token_if_available() -> None:
    """Token authentication when this machine has a Ray token and ``RAY_AUTH_MODE`` is unset.

    Ray turns it on so only for ``address="auto"`` (it reads ``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``); with an explicit ``HOST:PORT`` it would
    try without a token and fail for 20 s on a cluster started with token auth
    (``cluster/start.sh``). We do what it does for ``auto`` rather than run ``start.sh local``
    unauthenticated: loopback is shared by every user of the machine. ``RAY_AUTH_MODE`` set by
    the user is respected: a cluster started with ``RAY_AUTH_MODE=disabled`` needs it here too
    (as with ``auto``), since a driver in token mode refuses the cluster's unauthenticated calls."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication: nothing to turn on
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


class _Entry:
    """One spawned actor as this side knows it."""

    __slots__ = ("address", "blob", "cancelled", "failed", "link", "max_queue", "outstanding", "owners", "placed",
                 "processed", "remote", "shares", "stopping")

    def __init__(
        self, address: Address, blob: bytes, max_queue: int, link: ShardLink, shares: list[tuple[_Entry, SharedRef]]
    ) -> None:
        self.address = address
        self.blob = blob
        self.max_queue = max_queue
        self.link = link
        self.owners = [owner for owner, _ in shares if owner.link is link]  # hosted before it, on its shard
        self.shares = [ref for _, ref in shares]
        self.remote = [owner.link is not link for owner, _ in shares]  # those it holds a replica of
        self.placed: str | None = None  # the shard incarnation hosting it, once sent there
        self.outstanding: dict[int, _RayReply] = {}
        self.stopping = False
        self.processed = self.failed = self.cancelled = 0


class _Outcome:
    """A control call's or a stop's outcome."""

    __slots__ = ("_error", "_event", "_value", "address", "sent_to")

    def __init__(self, address: Address) -> None:
        self.address = address
        self.sent_to: str | None = None
        self._event = anyio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def settle(self, value: Any, error: BaseException | None) -> None:
        self._value, self._error = value, error
        self._event.set()

    async def wait(self) -> Any:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value


@final
class _RayReply(SettledReply):
    """An ask's reply, or a told message's (``told``: nobody holds it; its failure is logged)."""

    __slots__ = ("_cancelling", "_entry", "address", "sent_to", "seq", "told")

    def __init__(self, seq: int, entry: _Entry, *, told: bool = False) -> None:
        super().__init__()
        self.seq = seq
        self.told = told
        self.address = entry.address
        self.sent_to: str | None = None
        self._entry = entry
        self._cancelling = False

    def cancel(self) -> bool:
        if not self.claim_cancel():
            return False
        self._entry.link.send(None, CancelOne(self.seq))
        return True

    def claim_cancel(self) -> bool:
        """Count this message as cancelled by the caller now; ``False`` if done or claimed."""
        if self._done or self._cancelling:
            return False
        self._cancelling = True
        return True

    def settle(self, value: Any, error: BaseException | None) -> None:
        entry = self._entry
        entry.outstanding.pop(self.seq, None)
        if error is None:
            entry.processed += 1
        elif isinstance(error, MessageCancelled | ActorStopped):
            entry.cancelled += 1
        else:
            entry.failed += 1
            if self.told:  # as LocalSystem logs it, here where the message was sent
                _log.error("%s: a told message failed", self.address, exc_info=error)
        self.finish(value, error)


@final
class _RayRef(ActorRef):
    __slots__ = ("_entry", "_system")

    def __init__(self, system: RaySystem, entry: _Entry) -> None:
        self.address = entry.address
        self._system = system
        self._entry = entry

    def ask_nowait(self, message: Any) -> Reply:
        entry, reply, payload = self._accept(message, told=False)
        entry.link.send(entry, Ask(reply.seq, self.address, payload, current_flow()), reply)
        return reply

    def tell_nowait(self, message: Any) -> None:
        # Counted in the mailbox as an ask is until the shard answers it: past the bound the
        # sender hears MailboxFull, and the shard never meets a full mailbox with it.
        entry, reply, payload = self._accept(message, told=True)
        entry.link.send(entry, Tell(reply.seq, self.address, payload, current_flow()), reply)

    def _accept(self, message: Any, *, told: bool) -> tuple[_Entry, _RayReply, bytes]:
        entry = self._live_entry()
        if len(entry.outstanding) > entry.max_queue:
            raise MailboxFull(self.address, entry.max_queue)
        payload = self._payload(message)
        reply = _RayReply(self._system._next_seq(), entry, told=told)
        entry.outstanding[reply.seq] = reply
        return entry, reply, payload

    async def ask_control(self, message: Any) -> Any:
        entry = self._live_entry()
        outcome = _Outcome(self.address)
        entry.link.send(entry, Control(self._system._next_seq(), self.address, self._payload(message)), outcome)
        return await outcome.wait()

    def cancel_all(self) -> int:
        entry = self._entry
        claimed = sum(reply.claim_cancel() for reply in list(entry.outstanding.values()))
        entry.link.send(None, CancelAll(self.address))
        return claimed

    def statistics(self) -> ActorStatistics:
        entry = self._entry
        sent = len(entry.outstanding)
        return ActorStatistics(
            queued=max(sent - 1, 0),
            running=min(sent, 1),
            processed=entry.processed,
            failed=entry.failed,
            cancelled=entry.cancelled,
            max_queue=entry.max_queue,
        )

    def _payload(self, message: Any) -> bytes:
        return self._system._values.dumps(message)

    def _live_entry(self) -> _Entry:
        entry = self._entry
        if entry.stopping or self._system._entries.get(self.address) is not entry:
            raise ActorStopped(self.address)
        return entry

    def __repr__(self) -> str:
        return f"<ActorRef {self.address} (shard {self._entry.link.index})>"


@final
class _Answer:
    """The outcome of a shard's ``Forward`` (or ``Follow``), sent back to it as an ``Answer``
    unless it restarted meanwhile (the asker is gone with it)."""

    __slots__ = ("address", "incarnation", "origin", "sent_to", "seq", "values")

    def __init__(self, origin: ShardLink, seq: int, address: Address, values: ValueWriter) -> None:
        self.origin = origin
        self.incarnation = origin.incarnation
        self.seq = seq
        self.address = address
        self.values = values
        self.sent_to: str | None = None

    def settle(self, value: Any, error: BaseException | None) -> None:
        if self.origin.incarnation != self.incarnation:
            return
        if error is None:
            try:
                answer = Answer(self.seq, self.values.dumps(value))
            except TypeError as exc:
                answer = Answer(self.seq, failure=Failure.of(exc))
        else:
            answer = Answer(self.seq, failure=Failure.of(error))
        self.origin.send(None, answer)


class ShardInfo(msgspec.Struct, frozen=True):
    """One shard now: its incarnation (new after each restart), process, node and address, and
    how many restarts this system has handled."""

    index: int
    incarnation: str
    pid: int
    node_id: str
    host: str
    restarts: int


@final
class RaySystem(SystemBase):
    """See the module docstring.

    ``address``: ``None`` starts a private local Ray instance (``ray_options``, by default
    :data:`LOCAL_RAY_OPTIONS`); ``"auto"`` or ``"HOST:PORT"`` joins a running cluster. ``store``
    keeps checkpoints (default: a :class:`MemoryStore`, emptied on exit; a store given
    here stays open for its owner). ``shard_options`` are extra Ray actor options for the shards
    (``num_cpus``, custom resources, a ``scheduling_strategy`` replacing the round robin).
    ``max_running`` is each shard's admission limit (``LocalSystem(max_running=…)``: a shard is
    one process, and its gate admits the messages it was sent flow by flow in turn, each flow's in
    the order they arrived; every ask and tell carries the caller's ``runtime.flow``).
    """

    def __init__(
        self,
        *,
        shards: int = 2,
        address: str | None = None,
        store: StateStore | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        ray_options: Mapping[str, Any] | None = None,
        shard_options: Mapping[str, Any] | None = None,
        max_running: int | None = None,
        durability: Durability | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        if max_running is not None and max_running < 1:
            raise ValueError(f"max_running must be at least 1, got {max_running}")
        super().__init__(max_queue=max_queue)
        self.shards = shards
        self.max_running = max_running
        self.address = address
        self.durability = durability
        self.store: StateStore = store if store is not None else MemoryStore()
        self._owns_store = store is None
        self._ray_options = dict(LOCAL_RAY_OPTIONS if ray_options is None else ray_options)
        self._private_folder: str | None = None  # the files of the Ray instance this system started
        self._shard_options = {**_SHARD_OPTIONS, **(shard_options or {})}
        self._entries: dict[Address, _Entry] = {}
        self._links: list[ShardLink] = []
        self._endpoints = Endpoints()
        self._values = ValueWriter(self._endpoints.reference)  # messages: their outlets by reference
        self._copies = SharedCopies()
        # (shard, its incarnation, its seq) -> the ask it forwarded (a restarted shard counts anew)
        self._forwards: dict[tuple[int, str | None, int], _RayReply] = {}
        self._seqs = itertools.count(1)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._started_ray = False

    # --- lifecycle -----------------------------------------------------------------------------

    async def _open(self) -> None:
        if self.durability is not None:
            await self.durability.__aenter__()
        self._connect()
        placements = self._placements()
        node_id = ray.get_runtime_context().get_node_id()
        self._links = [
            ShardLink(
                index,
                _ShardActor.options(**placements[index], **self._shard_options).remote(index, _where, self.max_running),
                load_state=self._load_state,
                save_states=self._save_states,
                not_durable=self._not_durable,
                deliver_out=self._endpoints.deliver,
                unhosted=self._unhosted,
                replacement=self._replacement,
                resolve_reply=self._resolve_reply,
                node_id=node_id,
                restarted=self._host_again,
                crossed=self._crossed,
            )
            for index in range(self.shards)
        ]
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        for link in self._links:
            task_group.start_soon(link.run, name=f"shard {link.index} link")
        for link in self._links:
            await link.up.wait()
        # Ray's driver state (its modules, workers' handles, the links) lives as long as this
        # system: moved out of the collector's way, full collections no longer walk it (one took
        # ~47 ms in a benchmark's driver). The thresholds stay the program's choice (the CLI
        # tunes them: runtime.tune_gc_for_servers; shards tune themselves).
        gc.collect()
        gc.freeze()

    async def _close_on_exit(self) -> None:
        with anyio.CancelScope(shield=True):  # the shards' actors stop, whatever cancels us
            await self.aclose()

    async def _release(self, exc_info: ExcInfo) -> bool | None:
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()
            await self._task_group.__aexit__(None, None, None)
        self._disconnect()
        if self.durability is not None:
            await self.durability.__aexit__(*exc_info)
        return None

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        if self.address is None:  # never a cluster found lying around
            self._private_folder = init_private_ray(self._ray_options)
        else:
            _use_token_if_available()
            # Workers' prints must never reach this process's stdout (it may carry the protocol).
            ray.init(address=self.address, log_to_driver=False)
        self._started_ray = True

    def _placements(self) -> list[dict[str, Any]]:
        """Shard ``i`` pinned to the ``i``-th alive node, round robin (Ray's SPREAD is only a
        hint, and a soft affinity gives way too easily). A pinned shard whose node is gone is
        re-created unpinned (``_replacement``)."""
        if "scheduling_strategy" in self._shard_options:
            return [{} for _ in range(self.shards)]
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        return [
            {"scheduling_strategy": NodeAffinitySchedulingStrategy(nodes[index % len(nodes)], soft=False)}
            for index in range(self.shards)
        ]

    def _replacement(self, index: int) -> Any:
        return _ShardActor.options(**self._shard_options).remote(index, _where, self.max_running)

    def _disconnect(self) -> None:
        """End the shards, close the store if it is ours, shut Ray down if we started it."""
        for link in self._links:
            link.close()
            ray.kill(link.handle, no_restart=True)
        if self._owns_store:
            self.store.close()
        if self._private_folder is not None:
            shutdown_private_ray(self._private_folder)
        elif self._started_ray:
            ray.shutdown()

    # --- ActorSystem ---------------------------------------------------------------------------

    def _host(self, address: Address, actor: Actor, max_queue: int) -> ActorRef:
        shares: list[tuple[_Entry, SharedRef]] = []
        link = self._links[shard_of(address, self.shards)]
        blob = dumps_actor(actor, lambda obj: self._actor_reference(obj, shares, link), hosted_reduce)
        entry = self._entries[address] = _Entry(address, blob, max_queue, link, shares)
        entry.link.send(entry, None)  # host it now (on_start runs), not at its first message
        return _RayRef(self, entry)

    def lookup(self, address: Address) -> ActorRef | None:
        entry = self._entries.get(address)
        return None if entry is None else _RayRef(self, entry)

    def addresses(self, kind: str | None = None) -> list[Address]:
        return [address for address in self._entries if kind is None or address.kind == kind]

    async def stop(self, address: Address) -> bool:
        entry = self._entries.get(address)
        if entry is None:
            return False
        await self._stop(entry)
        return True

    # --- more ----------------------------------------------------------------------------------

    async def shard_info(self) -> list[ShardInfo]:
        """Ask every shard who and where it is now; for operators and tests."""
        info = []
        for link in self._links:
            hello: Hello = await link.handle.ping.remote()
            info.append(ShardInfo(link.index, hello.incarnation, hello.pid, hello.node_id, hello.host, link.restarts))
        return info

    def shard_restarts(self) -> list[int]:
        """How many restarts of each shard this side has handled."""
        return [link.restarts for link in self._links]

    # --- internals -----------------------------------------------------------------------------

    def _next_seq(self) -> int:
        return next(self._seqs)

    async def _stop(self, entry: _Entry) -> None:
        entry.stopping = True
        outcome = _Outcome(entry.address)
        entry.link.send(entry, Stop(self._next_seq(), entry.address), outcome)
        try:
            await outcome.wait()
        except HostFailed:
            pass  # it went down with its shard: stopped all the same
        finally:
            if self._entries.get(entry.address) is entry:
                del self._entries[entry.address]
                self.store.delete(str(entry.address))
                if self.durability is not None:  # stopped, not deleted: its record stays
                    self.durability.forget(entry.address)

    def _host_again(self, link: ShardLink) -> None:
        """A shard restarted: every actor it held comes back now, from its checkpoint, in the
        order they were spawned (what one shares is there before it), not at its next message:
        the actors on it ask each other (a conversation its members) without the driver. The
        replicas other shards hold of what they share follow them again."""
        owners = []
        for entry in list(self._entries.values()):
            if entry.link is link and not entry.stopping:
                link.send(entry, None)
                owners.append(entry.address)
        for other in self._links:
            if other is not link:
                other.send(None, Refollow(owners))

    def _crossed(self, origin: ShardLink, item: Forward | ForwardCancel | Follow | Push) -> None:
        """What a shard sends to another: forwarded in the order it came (see the module docstring)."""
        match item:
            case Forward():
                self._forward(origin, item)
            case ForwardCancel(seq=seq, address=None):
                if (reply := self._forwards.get((origin.index, origin.incarnation, seq))) is not None:
                    reply.cancel()
            case ForwardCancel(address=address):
                if (entry := self._entries.get(address)) is not None:
                    _RayRef(self, entry).cancel_all()
            case Follow(seq=seq, share=share):
                answer = _Answer(origin, seq, share.owner, self._values)
                owner = self._entries.get(share.owner)
                if owner is None or owner.stopping:
                    answer.settle(None, ActorStopped(share.owner))
                else:
                    owner.link.send(None, Replicate(self._next_seq(), share, origin.index), answer)
            case Push(to=to, share=share, change=change):
                self._links[to].send(None, Apply(share, change))

    def _forward(self, origin: ShardLink, item: Forward) -> None:
        answer = None if item.kind == TELL else _Answer(origin, item.seq, item.address, self._values)
        entry = self._entries.get(item.address)
        if entry is None or entry.stopping:
            if answer is not None:
                answer.settle(None, ActorStopped(item.address))
            return
        if item.kind == CONTROL:
            entry.link.send(entry, Control(self._next_seq(), item.address, item.message), answer)
            return
        if len(entry.outstanding) > entry.max_queue:
            if answer is not None:
                answer.settle(None, MailboxFull(item.address, entry.max_queue))
            return
        reply = _RayReply(self._next_seq(), entry, told=answer is None)
        entry.outstanding[reply.seq] = reply
        if answer is None:
            entry.link.send(entry, Tell(reply.seq, item.address, item.message, item.flow), reply)
            return
        key = (origin.index, origin.incarnation, item.seq)
        self._forwards[key] = reply

        def settled(value: Any, error: BaseException | None) -> None:
            self._forwards.pop(key, None)
            if isinstance(error, MessageCancelled) and (entry.stopping or self._entries.get(entry.address) is not entry):
                # Cancelled because its actor is being stopped (deleted): the asker, which cannot
                # see here that the actor is gone, hears that it stopped.
                error = ActorStopped(entry.address)
            answer.settle(value, error)

        reply.add_done_callback(settled)
        entry.link.send(entry, Ask(reply.seq, item.address, item.message, item.flow), reply)

    def _actor_reference(self, obj: Any, shares: list[tuple[_Entry, SharedRef]], link: ShardLink) -> Any:
        endpoint = self._endpoints.reference(obj)
        if endpoint is not None:
            return endpoint
        ref = self._copies.reference(obj)
        owner = None if ref is None else self._entries.get(ref.owner)
        if ref is None or owner is None or owner.stopping:
            return None  # not shared, or its owner is gone: it travels as the copy it is
        if owner.link is not link and replication_of(obj) is None:
            raise TypeError(f"a {type(obj).__name__} shared by {owner.address}, on another shard, has no "
                            "replication (runtime.register_shared)")
        shares.append((owner, ref))
        return ref

    def _resolve_reply(self, reference: Any) -> Any:
        _, ref, payload = reference  # ("shared", SharedRef, a detached copy) from a shard
        return self._copies.remember(loads_value(payload), ref)

    def _unhosted(self, address: Address, error: Exception) -> None:
        # As when on_start fails locally: the address is free again; its messages were refused.
        _log.error("%s could not be hosted by its shard; it is gone: %s", address, error)
        entry = self._entries.pop(address, None)
        if entry is not None:
            entry.stopping = True

    def _load_state(self, address: Address) -> bytes | None:
        durability = self.durability
        if durability is not None and durability.is_durable(address):
            return durability.state_to_restore(address)
        return self.store.get(str(address))

    def _save_states(self, states: Iterable[tuple[Address, bytes]]) -> list[tuple[Address, Awaitable[None]]]:
        """Store a batch's checkpoints: the durable objects' writes to wait for (the rest are
        stored by now)."""
        durability = self.durability
        if durability is None:
            self.store.put_many((str(address), state) for address, state in states)
            return []
        waits, plain = [], []
        for address, state in states:
            pending = durability.checkpoint(address, state)  # the shard checkpoints owners itself
            if pending is None:
                plain.append((str(address), state))
            else:
                waits.append((address, pending))
        if plain:
            self.store.put_many(plain)
        return waits

    def _not_durable(self, address: Address) -> None:
        """``address``'s checkpoint failed: stop it, so its next use revives its durable state."""
        entry = self._entries.get(address)
        if entry is not None and not entry.stopping and self._task_group is not None:
            self._task_group.start_soon(self._stop, entry)
