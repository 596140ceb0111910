"""Game bookkeeping: :class:`GameRegistry` (which NPCs, worlds and subscriptions a namespace has,
their id counters, limits and the NPC requests still in flight) and :class:`GameState` (one
bridge's view of it, with the work helpers the methods share).

The objects themselves are actors in the bridge's :class:`~oam_actors.runtime.ActorSystem`;
the registry is the index of them (creation order for the list methods, the counts the limits
need without scanning the system, the ordered-lane replies ``npc/cancel`` may cancel). Bridges
that share a namespace (``Bridge(shared=True)``) share one registry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..bridge.registry import Deferred
from ..bridge.params import Params
from ..clock import Budget, Clock, wire_instant
from ..errors import ErrorCode, ProtocolError
from ..game.conversation import MAX_MEMBERS, MIN_MEMBERS
from ..objects import RequestActor
from ..objects.world import WorldShare
from ..objects.conversation import ConversationCheckpoint, LeaveConversation
from ..objects.npc import YieldLine
from ..runtime import ActorRef, ActorStopped, MailboxFull, Reply
from ._common import (
    client_id,
    conversation_exists,
    conversation_not_found,
    limit_reached,
    npc_exists,
    npc_not_found,
    world_exists,
    world_not_found,
)

if TYPE_CHECKING:
    from ..bridge.registry import HandlerBridge
    from ..game import WorldState
    from ..game import ContentGenerator, DecisionEngine

__all__ = [
    "ConversationRecipe",
    "ConversationRecord",
    "GameLimits",
    "GameRegistry",
    "GameState",
    "NPCRecipe",
    "NPCRecord",
    "SubscriptionRecord",
    "WorldRecipe",
    "WorldRecord",
]

NPC = "npc"
WORLD = "world"
REQUEST = "request"
CONVERSATION = "conversation"


class GameLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Per-connection limits (protocol-game §1.3); each at least 1."""

    max_npcs: int = 128
    max_worlds: int = 64
    max_subscriptions: int = 256
    max_conversations: int = 64


@dataclasses.dataclass
class NPCRecord:
    world: str | None  # the id it was created with (kept after the world is deleted)
    created_at: str
    pending: set[Reply] = dataclasses.field(default_factory=set)  # ordered-lane requests not answered yet
    conversations: set[str] = dataclasses.field(default_factory=set)  # those it is a member of


@dataclasses.dataclass
class ConversationRecord:
    """A conversation's members and bystanders as the methods check them (the actor holds the
    rest); changed when a join, leave or member deletion is accepted."""

    world: str
    members: list[str]
    audience: list[str]
    created_at: str = dataclasses.field(default_factory=wire_instant)
    pending: set[Reply] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class WorldRecord:
    created_at: str


@dataclasses.dataclass(frozen=True)
class SubscriptionRecord:
    world: str
    path: str


class NPCRecipe(msgspec.Struct, frozen=True):
    """What a stored NPC is built again from, besides its checkpoint (``NPCCheckpoint``)."""

    model: Any = None  # the model spec as npc/create or npc/restore had it
    world: str | None = None
    created_at: str = ""


class WorldRecipe(msgspec.Struct, frozen=True):
    """What a stored world is built again from, besides its checkpoint (its document; its
    subscriptions deliver to connections and end with them)."""

    created_at: str = ""


class ConversationRecipe(msgspec.Struct, frozen=True):
    """What a stored conversation is built again from, besides its checkpoint
    (``ConversationCheckpoint``: its state and its members' addresses)."""

    created_at: str = ""


@dataclasses.dataclass
class GameRegistry:
    """The game objects of one namespace, in creation order, and the generated-id counters."""

    limits: GameLimits = dataclasses.field(default_factory=GameLimits)
    npcs: dict[str, NPCRecord] = dataclasses.field(default_factory=dict)
    worlds: dict[str, WorldRecord] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, SubscriptionRecord] = dataclasses.field(default_factory=dict)
    conversations: dict[str, ConversationRecord] = dataclasses.field(default_factory=dict)
    numbers: dict[str, int] = dataclasses.field(default_factory=lambda: {"npc": 0, "w": 0, "sub": 0, "conv": 0})
    # Each world's document as its actor handed it out, with the ref it was asked through.
    documents: dict[str, tuple[ActorRef, WorldState]] = dataclasses.field(default_factory=dict)

    def clear(self) -> None:
        """Forget every object (after shutdown has stopped them); counters keep counting."""
        self.npcs.clear()
        self.worlds.clear()
        self.subscriptions.clear()
        self.conversations.clear()
        self.documents.clear()


class GameState:
    """One bridge's view of its namespace's :class:`GameRegistry` (see the module docstring)."""

    def __init__(self, bridge: HandlerBridge, registry: GameRegistry, clock: Clock) -> None:
        self.bridge = bridge
        self.clock = clock
        self.registry = registry
        self.limits = registry.limits
        self.npcs = registry.npcs
        self.worlds = registry.worlds
        self.subscriptions = registry.subscriptions
        self.conversations = registry.conversations
        self._numbers = registry.numbers

    def budget(self, seconds: float | None) -> Budget:
        """A request arriving now with ``deadlineSeconds`` ``seconds`` (``None``: the server's)."""
        return Budget(self.clock, seconds)

    # --- ids ---------------------------------------------------------------------------------

    def claim_npc_id(self, params: Params) -> str:
        """The ``npc`` param (checked, not taken) or the next free ``npc<n>``."""
        npc = client_id(params, "npc")
        if npc is None:
            return self._generate("npc", self.npcs)
        if npc in self.npcs:
            raise npc_exists(npc)
        return npc

    def claim_world_id(self, params: Params) -> str:
        world = client_id(params, "world")
        if world is None:
            return self._generate("w", self.worlds)
        if world in self.worlds:
            raise world_exists(world)
        return world

    def claim_conversation_id(self, params: Params) -> str:
        conversation = client_id(params, "conversation")
        if conversation is None:
            return self._generate("conv", self.conversations)
        if conversation in self.conversations:
            raise conversation_exists(conversation)
        return conversation

    def new_subscription_id(self) -> str:
        return self._generate("sub", self.subscriptions)

    def _generate(self, prefix: str, taken: dict[str, Any]) -> str:
        # A number once handed out is never reused, even when the creation then fails.
        while True:
            self._numbers[prefix] += 1
            candidate = f"{prefix}{self._numbers[prefix]}"
            if candidate not in taken:
                return candidate

    # --- limits ------------------------------------------------------------------------------

    def check_npc_room(self) -> None:
        if len(self.npcs) >= self.limits.max_npcs:
            raise limit_reached(self.limits.max_npcs, "NPCs")

    def check_world_room(self) -> None:
        if len(self.worlds) >= self.limits.max_worlds:
            raise limit_reached(self.limits.max_worlds, "worlds")

    def check_subscription_room(self) -> None:
        if len(self.subscriptions) >= self.limits.max_subscriptions:
            raise limit_reached(self.limits.max_subscriptions, "world subscriptions")

    def check_conversation_room(self) -> None:
        if len(self.conversations) >= self.limits.max_conversations:
            raise limit_reached(self.limits.max_conversations, "conversations")

    def member_limit(self, count: int) -> ProtocolError:
        """``members`` outside 2…8 (``data.limit``: the most a conversation has)."""
        return ProtocolError(
            ErrorCode.INVALID_PARAMS,
            f"Parameter 'members' must name {MIN_MEMBERS} to {MAX_MEMBERS} NPCs; got {count}.", limit=MAX_MEMBERS,
        )

    # --- lookups -----------------------------------------------------------------------------

    def npc(self, params: Params) -> tuple[str, NPCRecord, ActorRef]:
        """The NPC named by the ``npc`` param; ``npc_not_found`` if there is none."""
        npc = params.string("npc", required=True)
        assert npc is not None
        return (npc, *self.npc_by_id(npc))

    def npc_by_id(self, npc: str) -> tuple[NPCRecord, ActorRef]:
        record = self.npcs.get(npc)
        ref = self.bridge.lookup(NPC, npc) if record is not None else None
        if record is None or ref is None:
            raise npc_not_found(npc)
        return record, ref

    def conversation(self, params: Params) -> tuple[str, ConversationRecord, ActorRef]:
        """The conversation named by the ``conversation`` param; ``conversation_not_found`` if none."""
        conversation = params.string("conversation", required=True)
        assert conversation is not None
        record = self.conversations.get(conversation)
        ref = self.bridge.lookup(CONVERSATION, conversation) if record else None
        if record is None or ref is None:
            raise conversation_not_found(conversation)
        return conversation, record, ref

    def world(self, params: Params) -> tuple[str, ActorRef]:
        """The world named by the ``world`` param; ``world_not_found`` if there is none."""
        world = params.string("world", required=True)
        assert world is not None
        return world, self.world_by_id(world)

    def world_by_id(self, world: str) -> ActorRef:
        ref = self.bridge.lookup(WORLD, world) if world in self.worlds else None
        if ref is None:
            raise world_not_found(world)
        return ref

    # --- durable objects (a state store) -------------------------------------------------------

    async def described(self, kind: str, records: Mapping[str, Any], prepare: Callable[[str], Awaitable[None]],
                        message: Any) -> AsyncIterator[tuple[str, Any, Any]]:
        """``(id, record, answer)`` for each of ``records`` still live (revived first with
        ``prepare``), ``answer`` being its reply to the control ``message``: what the list methods
        show. One deleted meanwhile is left out."""
        for object_id, record in list(records.items()):
            await prepare(object_id)
            ref = self.bridge.lookup(kind, object_id)
            if ref is None:
                continue
            try:
                answer = await ref.ask_control(message)
            except ActorStopped:
                continue
            yield object_id, record, answer

    async def prepare_npc(self, npc: Any) -> None:
        """Before a stored NPC on a world is revived (on its first use): ask its world for the
        document (reviving the world if need be), so the NPC shares it as at its creation, on
        every runtime. Nothing for an NPC in memory, without a world or without a store."""
        bridge = self.bridge
        record = self.npcs.get(npc) if isinstance(npc, str) else None
        if record is None or record.world is None or record.world not in self.worlds:
            return
        if bridge.system.lookup(bridge.address(NPC, npc)) is None:
            await self.world_document(record.world)

    def revived_document(self, world: str) -> WorldState | None:
        """The document of ``world`` for an NPC being revived on it (asked by ``prepare_npc``);
        ``None`` if the world is gone."""
        known = self.registry.documents.get(world) if world in self.worlds else None
        return None if known is None else known[1]

    async def prepare_conversation(self, conversation: Any) -> None:
        """Before a request to a conversation, with a state store: its world's document (whose
        ``location`` overhears it) and its members and bystanders that are stored but not in
        memory are revived, here on the front door, so the conversation (on any runtime) finds
        them. Nothing for an unknown conversation or without a store."""
        record = self.conversations.get(conversation) if isinstance(conversation, str) else None
        if record is None or self.bridge.durability is None:
            return
        bridge = self.bridge
        if record.world in self.worlds and bridge.system.lookup(bridge.address(CONVERSATION, conversation)) is None:
            await self.world_document(record.world)
        for npc in (*record.members, *record.audience):
            if bridge.system.lookup(bridge.address(NPC, npc)) is None:
                await self.prepare_npc(npc)
                with contextlib.suppress(ProtocolError):  # logged by lookup; the line fails member_gone
                    bridge.lookup(NPC, npc)

    def load_stored(self) -> None:
        """Index the tenant's stored NPCs, worlds and conversations (not built: each is revived
        on first use)."""
        bridge = self.bridge
        assert bridge.durability is not None
        for record in bridge.durability.store.records(bridge.tenant, kind=WORLD):
            if record.id not in self.worlds:
                self.worlds[record.id] = WorldRecord(msgspec.json.decode(record.recipe, type=WorldRecipe).created_at)
        for record in bridge.durability.store.records(bridge.tenant, kind=NPC):
            if record.id not in self.npcs:
                recipe = msgspec.json.decode(record.recipe, type=NPCRecipe)
                self.npcs[record.id] = NPCRecord(recipe.world, recipe.created_at)
        for record in bridge.durability.store.records(bridge.tenant, kind=CONVERSATION):
            if record.id not in self.conversations:
                created_at = msgspec.json.decode(record.recipe, type=ConversationRecipe).created_at
                state = msgspec.json.decode(record.state, type=ConversationCheckpoint).state
                self.add_conversation(record.id, ConversationRecord(
                    state.world, [npc for npc in state.ids if npc in self.npcs],
                    [npc for npc in state.audience if npc in self.npcs], created_at,
                ))

    async def world_document(self, world: str) -> WorldState:
        """The world's document, which NPCs on it read and write themselves (``WorldShare``).

        Asked of the world once per ref: ``LocalSystem`` keeps one ref per live actor (a world
        deleted and created again has a new one), so a crowd on one world asks once; a runtime
        that makes a new ref per lookup (``RaySystem``, whose answer is a copy) is asked each time.
        """
        ref = self.world_by_id(world)
        known = self.registry.documents.get(world)
        if known is not None and known[0] is ref:
            return known[1]
        document: WorldState = await ref.ask_control(WorldShare())
        self.registry.documents[world] = (ref, document)
        return document

    # --- records -----------------------------------------------------------------------------

    def add_npc(self, npc: str, world: str | None) -> None:
        self.npcs[npc] = NPCRecord(world, wire_instant())

    def add_world(self, world: str) -> None:
        self.worlds[world] = WorldRecord(wire_instant())

    def add_conversation(self, conversation: str, record: ConversationRecord) -> None:
        self.conversations[conversation] = record
        self.enlist(conversation, record.members)

    def drop_conversation(self, conversation: str) -> None:
        """Forget ``conversation`` in the index (deleted, or its creation failed to commit)."""
        record = self.conversations.pop(conversation, None)
        if record is not None:
            self.delist(conversation, record.members)

    def enlist(self, conversation: str, npcs: list[str]) -> None:
        for npc in npcs:
            self.npcs[npc].conversations.add(conversation)

    def delist(self, conversation: str, npcs: list[str]) -> None:
        for npc in npcs:
            if (record := self.npcs.get(npc)) is not None:
                record.conversations.discard(conversation)

    def conversations_of(self, npc: str) -> list[str]:
        """The conversations ``npc`` is a member or a bystander of."""
        return [c for c, record in self.conversations.items() if npc in record.members or npc in record.audience]

    def forget_member(self, npc: str) -> None:
        """A deleted NPC leaves every conversation it was in or overheard (on the conversation's
        lane, after the request in progress: a line asked of it meanwhile fails ``npc_not_found``)."""
        for conversation in self.conversations_of(npc):
            record = self.conversations[conversation]
            for names in (record.members, record.audience):
                if npc in names:
                    names.remove(npc)
            with contextlib.suppress(MailboxFull, ActorStopped, ProtocolError):
                ref = self.bridge.lookup(CONVERSATION, conversation)  # a stored one leaves too
                if ref is not None:
                    ref.tell_nowait(LeaveConversation(npc))

    def npcs_of(self, world: str) -> int:
        return sum(1 for record in self.npcs.values() if record.world == world)

    def subscriptions_of(self, world: str) -> list[str]:
        return [sub for sub, record in self.subscriptions.items() if record.world == world]

    # --- work --------------------------------------------------------------------------------

    def enqueue_talk(self, record: NPCRecord, ref: ActorRef, message: Any) -> Deferred:
        """:meth:`enqueue` a player's talk; an ambient conversation line the NPC is saying gives
        way to it (``YieldLine``), so the talk waits for no line. The bridge reads on meanwhile."""
        if not record.conversations:
            return self.enqueue(record, ref, message)
        self._numbers["talk"] = token = self._numbers.get("talk", 0) + 1
        deferred = self.enqueue(record, ref, msgspec.structs.replace(message, token=token))
        return Deferred(_after_yield(ref, deferred, token))

    def enqueue(self, record: NPCRecord | ConversationRecord, ref: ActorRef, message: Any) -> Deferred:
        """Take the NPC's queue slot now (arrival order); answer when the NPC has handled it.
        Raises ``busy`` beyond the connection's limits (``Bridge.admit``)."""
        self.bridge.admit()
        reply = ref.ask_nowait(message)
        record.pending.add(reply)
        return self.bridge.queued(reply, settled=functools.partial(record.pending.discard, reply))

    @staticmethod
    def cancel_pending(record: NPCRecord | ConversationRecord) -> int:
        """Cancel the object's requests queued by the protocol; how many this cancelled."""
        return sum(reply.cancel() for reply in list(record.pending))

    async def stop(self, record: NPCRecord | ConversationRecord, ref: ActorRef) -> None:
        """Cancel everything the object has queued or running, then stop its actor."""
        self.cancel_pending(record)
        ref.cancel_all()
        await self.bridge.system.stop(ref.address)

    def run_request(self, worker: DecisionEngine | ContentGenerator, message: Any) -> Deferred:
        """Run a one-off request on its own actor (the address its client tools answer to)."""
        self.bridge.admit()
        # Unique beyond this connection: bridges sharing a namespace share the address space.
        address = self.bridge.address(REQUEST, uuid.uuid4().hex)
        ref = self.bridge.system.spawn(address, lambda: RequestActor(worker), max_queue=1)
        return Deferred(self._finish_request(ref, ref.ask_nowait(message)))

    async def _finish_request(self, ref: ActorRef, reply: Reply) -> Any:
        try:
            return await self.bridge.queued(reply).awaitable
        finally:
            with anyio.CancelScope(shield=True):
                await self.bridge.system.stop(ref.address)


async def _after_yield(ref: ActorRef, talk: Deferred, token: int) -> Any:
    """Ambient lines give way until the talk ``token`` starts; once it is answered (or cancelled
    before it started) they wait as usual again."""
    try:
        with contextlib.suppress(ActorStopped):
            await ref.ask_control(YieldLine(token))
        return await talk.awaitable
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(ActorStopped):
            await ref.ask_control(YieldLine(token, done=True))
