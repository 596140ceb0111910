"""The game extension of the bridge: ``npc/*``, ``world/*``, ``decision/*``, ``content/generate``
and ``conversation/*`` (conversations among NPCs, an oam-actors extension: PROTOCOL.md §10.9).

Contract
--------
- :class:`GameExtension` implements :class:`~oam_actors.bridge.Extension`. One instance serves
  one bridge (one connection): ``install`` registers the 23 methods of protocol-game §2, the
  ``conversation/*`` methods and the notifications ``npc/event``, ``world/changed`` and
  ``conversation/event`` (so ``initialize`` lists them); ``aclose``
  (run by the bridge's ``shutdown`` or close, after it has cancelled and stopped the
  connection's objects) forgets every NPC, world and subscription — unless the bridge shares its
  namespace: connections that share one pass the same :class:`GameRegistry`.
- NPCs and worlds are actors of the bridge's system, addressed ``npc:<id>`` and ``world:<id>``
  in the bridge's namespace. Limits (NPCs, worlds, subscriptions; each at least 1) hold per
  connection and answer ``-32055 limit_reached``.
- Ordering (§7): immediate methods answer in arrival order; ``npc/talk``, ``npc/update``,
  ``npc/reset`` and settled ``npc/state`` take the NPC's queue slot at arrival; barks,
  decisions and content run concurrently. Every event, ``world/changed``, ``tool/call`` and
  ``tool/cancel`` a request causes is written before its response.
- Cancellation: ``npc/cancel`` and ``npc/delete`` cancel the NPC's uncommitted requests
  (``-32009``); ``shutdown`` cancels everything.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..clock import Clock, MonotonicClock
from ._conversation import CONVERSATION_METHODS, revive_conversation
from ._npc import NPC_METHODS, revive_npc
from ._requests import REQUEST_METHODS
from ._state import CONVERSATION as CONVERSATION_KIND
from ._state import NPC as NPC_KIND
from ._state import WORLD as WORLD_KIND
from ._state import GameLimits, GameRegistry, GameState
from ._world import WORLD_METHODS, revive_world

if TYPE_CHECKING:
    from ..bridge.registry import Call, HandlerBridge

__all__ = ["GAME_METHODS", "GAME_NOTIFICATIONS", "GameExtension", "GameLimits", "GameRegistry"]

GAME_METHODS = {**NPC_METHODS, **REQUEST_METHODS, **WORLD_METHODS, **CONVERSATION_METHODS}
GAME_NOTIFICATIONS = ("npc/event", "world/changed", "conversation/event")


class GameExtension:
    """The game methods for one bridge; limits are coerced to at least 1. Bridges that share a
    namespace pass the same ``registry`` (its limits then apply instead of the ``max_*``), or
    the same ``registries`` (one registry per shared namespace, made by the first of them). With
    a state store, the tenant's stored NPCs, worlds and conversations are indexed at ``install`` and each is
    revived on first use.
    ``clock`` times requests' deadlines from their arrival (default: the monotonic clock)."""

    def __init__(
        self,
        *,
        max_npcs: int = 128,
        max_worlds: int = 64,
        max_subscriptions: int = 256,
        max_conversations: int = 64,
        registry: GameRegistry | None = None,
        registries: dict[str, GameRegistry] | None = None,
        clock: Clock | None = None,
    ) -> None:
        if registry is None:
            limits = GameLimits(
                max_npcs=max(1, max_npcs), max_worlds=max(1, max_worlds), max_subscriptions=max(1, max_subscriptions),
                max_conversations=max(1, max_conversations),
            )
            registry = GameRegistry(limits)
        self.registry = registry
        self._registries = registries
        self.limits = registry.limits
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._state: GameState | None = None

    @property
    def state(self) -> GameState | None:
        """The connection's game index once installed."""
        return self._state

    def install(self, bridge: HandlerBridge) -> None:
        """Register the methods on ``bridge``; raises ``RuntimeError`` when already installed."""
        if self._state is not None:
            raise RuntimeError("a GameExtension serves one bridge; create one per connection")
        if bridge.shared and self._registries is not None:
            self.registry = self._registries.setdefault(bridge.namespace, self.registry)
        state = self._state = GameState(bridge, self.registry, self.clock)
        durable = bridge.durability is not None
        for name, handler in GAME_METHODS.items():
            # With a store an NPC may have to be revived: its world's document comes first.
            wrap = _reviving if durable and name != "npc/list" else functools.partial
            bridge.registry.register(name, wrap(handler, state))
        if durable:
            state.load_stored()
            bridge.revivers[NPC_KIND] = functools.partial(revive_npc, state)
            bridge.revivers[WORLD_KIND] = functools.partial(revive_world, state)
            bridge.revivers[CONVERSATION_KIND] = functools.partial(revive_conversation, state)
        for notification in GAME_NOTIFICATIONS:
            bridge.registry.add_notification(notification)

    async def aclose(self) -> None:
        # A sharing bridge leaves the namespace's objects (and so their index) to the others.
        if self._state is not None and not self._state.bridge.shared:
            self.registry.clear()


def _reviving(handler: Callable[[GameState, Call], Awaitable[Any]], state: GameState) -> Callable[[Call], Awaitable[Any]]:
    """``handler`` for ``state``, first preparing the revival of the NPC its params name."""

    async def handle(call: Call) -> Any:
        await state.prepare_npc(call.params.raw("npc"))
        await state.prepare_conversation(call.params.raw("conversation"))
        return await handler(state, call)

    return handle
