"""Game bookkeeping: :class:`GameRegistry` (which NPCs, worlds and subscriptions a namespace has,
their id counters, limits and the NPC requests still in flight) and :class:`GameState` (one
bridge's view of it, with the work helpers the methods share).

The objects themselves are actors in the bridge's :class:`~oam_actors.runtime.ActorSystem`;
the registry is the index of them (creation order for the list methods, the counts the limits
need without scanning the system, the ordered-lane replies ``npc/cancel`` may cancel). Bridges
that share a namespace (``Bridge(shared=True)``) share one registry.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..bridge import Deferred
from ..bridge.params import Params
from ..clock import Budget, Clock, wire_instant
from ..objects import RequestActor
from ..objects.world import WorldShare
from ..runtime import ActorRef, Reply
from ._common import client_id, limit_reached, npc_exists, npc_not_found, world_exists, world_not_found

if TYPE_CHECKING:
    from ..bridge import Bridge
    from ..game import WorldState
    from ..game import ContentGenerator, DecisionEngine

__all__ = ["GameLimits", "GameRegistry", "GameState", "NPCRecipe", "NPCRecord", "SubscriptionRecord", "WorldRecipe", "WorldRecord"]

NPC = "npc"
WORLD = "world"
REQUEST = "request"


class GameLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Per-connection limits (protocol-game §1.3); each at least 1."""

    max_npcs: int = 128
    max_worlds: int = 64
    max_subscriptions: int = 256


@dataclasses.dataclass
class NPCRecord:
    world: str | None  # the id it was created with (kept after the world is deleted)
    created_at: str
    pending: set[Reply] = dataclasses.field(default_factory=set)  # ordered-lane requests not answered yet


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


@dataclasses.dataclass
class GameRegistry:
    """The game objects of one namespace, in creation order, and the generated-id counters."""

    limits: GameLimits = dataclasses.field(default_factory=GameLimits)
    npcs: dict[str, NPCRecord] = dataclasses.field(default_factory=dict)
    worlds: dict[str, WorldRecord] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, SubscriptionRecord] = dataclasses.field(default_factory=dict)
    numbers: dict[str, int] = dataclasses.field(default_factory=lambda: {"npc": 0, "w": 0, "sub": 0})
    # Each world's document as its actor handed it out, with the ref it was asked through.
    documents: dict[str, tuple[ActorRef, WorldState]] = dataclasses.field(default_factory=dict)

    def clear(self) -> None:
        """Forget every object (after shutdown has stopped them); counters keep counting."""
        self.npcs.clear()
        self.worlds.clear()
        self.subscriptions.clear()
        self.documents.clear()


class GameState:
    """One bridge's view of its namespace's :class:`GameRegistry` (see the module docstring)."""

    def __init__(self, bridge: Bridge, registry: GameRegistry, clock: Clock) -> None:
        self.bridge = bridge
        self.clock = clock
        self.registry = registry
        self.limits = registry.limits
        self.npcs = registry.npcs
        self.worlds = registry.worlds
        self.subscriptions = registry.subscriptions
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

    def load_stored(self) -> None:
        """Index the tenant's stored NPCs and worlds (not built: each is revived on first use)."""
        bridge = self.bridge
        assert bridge.durability is not None
        for record in bridge.durability.store.records(bridge.tenant, kind=WORLD):
            if record.id not in self.worlds:
                self.worlds[record.id] = WorldRecord(msgspec.json.decode(record.recipe, type=WorldRecipe).created_at)
        for record in bridge.durability.store.records(bridge.tenant, kind=NPC):
            if record.id not in self.npcs:
                recipe = msgspec.json.decode(record.recipe, type=NPCRecipe)
                self.npcs[record.id] = NPCRecord(recipe.world, recipe.created_at)

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

    def npcs_of(self, world: str) -> int:
        return sum(1 for record in self.npcs.values() if record.world == world)

    def subscriptions_of(self, world: str) -> list[str]:
        return [sub for sub, record in self.subscriptions.items() if record.world == world]

    # --- work --------------------------------------------------------------------------------

    def enqueue(self, record: NPCRecord, ref: ActorRef, message: Any) -> Deferred:
        """Take the NPC's queue slot now (arrival order); answer when the NPC has handled it.
        Raises ``busy`` beyond the connection's limits (``Bridge.admit``)."""
        self.bridge.admit()
        reply = ref.ask_nowait(message)
        record.pending.add(reply)
        return self.bridge.queued(reply, settled=functools.partial(record.pending.discard, reply))

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
