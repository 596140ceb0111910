"""The ``world/*`` methods (protocol-game §5): all immediate and atomic, answered in arrival order.

Each handler awaits its world actor before the bridge reads the next line, so world requests
apply in arrival order, and the ``world/changed`` notifications a change causes are written
before its response. Unknown params are ignored silently (as the reference bridges do).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from ..bridge.registry import Call, HandlerBridge
from ..bridge.params import Params
from ..errors import invalid_params
from ..game import WorldPath, WorldState, WorldStateError
from ..objects import WorldActor
from ..objects.world import (
    WorldDescribe,
    WorldEndSubscriptions,
    WorldGet,
    WorldMerge,
    WorldRemove,
    WorldSet,
    WorldSnapshot,
    WorldSubscribe,
    WorldUnsubscribe,
)
from ._common import subscription_not_found
from ..runtime import StoreRecord
from ._state import WORLD, GameState, SubscriptionRecord, WorldRecipe

__all__ = ["WORLD_METHODS", "revive_world"]


async def world_create(game: GameState, call: Call) -> Any:
    params = call.params
    world = game.claim_world_id(params)
    state = params.raw("state")
    if state is not None and not isinstance(state, dict):
        raise invalid_params("'state' must be a JSON object (the world root).")
    game.check_world_room()
    bridge = game.bridge
    document = WorldState(state)
    actor = WorldActor(document)
    ref = bridge.system.spawn(bridge.address(WORLD, world), lambda: actor, max_queue=bridge.config.max_queue)
    game.add_world(world)
    recipe = msgspec.json.encode(WorldRecipe(game.worlds[world].created_at))
    return bridge.created(ref, actor, recipe, {"world": world, "version": document.version},
                          undo=functools.partial(game.worlds.pop, world, None))


def revive_world(game: GameState, bridge: HandlerBridge, record: StoreRecord) -> WorldActor:
    """A stored world built again from its checkpoint (NPCs ask it for the document they share)."""
    actor = WorldActor(WorldState(None))
    actor.restore(record.state)
    return actor


async def world_get(game: GameState, call: Call) -> Any:
    _, ref = game.world(call.params)
    return await ref.ask(WorldGet(_path(call.params)))


async def world_set(game: GameState, call: Call) -> Any:
    params = call.params
    _, ref = game.world(params)
    path = _path(params)
    if not params.present("value"):
        raise invalid_params("Missing required parameter 'value' (use world/remove to delete).")
    return await ref.ask(WorldSet(path, params.raw("value")))


async def world_merge(game: GameState, call: Call) -> Any:
    params = call.params
    _, ref = game.world(params)
    path = _path(params)
    if not params.present("patch"):
        raise invalid_params("Missing required parameter 'patch'.")
    return await ref.ask(WorldMerge(path, params.raw("patch")))


async def world_remove(game: GameState, call: Call) -> Any:
    params = call.params
    _, ref = game.world(params)
    path = params.string("path", required=True)
    assert path is not None
    return await ref.ask(WorldRemove(path))


async def world_snapshot(game: GameState, call: Call) -> Any:
    _, ref = game.world(call.params)
    return await ref.ask(WorldSnapshot())


async def world_delete(game: GameState, call: Call) -> Any:
    world, ref = game.world(call.params)
    ended = await ref.ask(WorldEndSubscriptions())
    for subscription in game.subscriptions_of(world):
        del game.subscriptions[subscription]
    del game.worlds[world]
    game.registry.documents.pop(world, None)
    # NPCs created with the world keep its document; only the id stops working.
    await game.bridge.system.stop(ref.address)
    await game.bridge.delete_durable(ref.address)
    return {"world": world, "deleted": True, "endedSubscriptions": ended}


async def world_list(game: GameState, call: Call) -> Any:
    entries = []
    for world, record in list(game.worlds.items()):
        ref = game.bridge.lookup(WORLD, world)
        if ref is None:
            continue
        described = await ref.ask(WorldDescribe())
        subscriptions = [
            {"subscription": sub, "world": world, "path": game.subscriptions[sub].path}
            for sub in game.subscriptions_of(world)
        ]
        entries.append({
            "world": world,
            "version": described["version"],
            "npcs": game.npcs_of(world),
            "subscriptions": subscriptions,
            "createdAt": record.created_at,
        })
    return {"worlds": entries}


async def world_subscribe(game: GameState, call: Call) -> Any:
    params = call.params
    world, ref = game.world(params)
    path = _path(params)
    try:
        WorldPath.parse(path)
    except WorldStateError as error:
        raise error.to_protocol(world, path) from None
    game.check_subscription_room()
    subscription = game.new_subscription_id()
    result = await ref.ask(WorldSubscribe(subscription, path, call.bridge))
    game.subscriptions[subscription] = SubscriptionRecord(world, path)
    return result


async def world_unsubscribe(game: GameState, call: Call) -> Any:
    subscription = call.params.string("subscription", required=True)
    assert subscription is not None
    record = game.subscriptions.get(subscription)
    if record is None:
        raise subscription_not_found(subscription)
    await game.world_by_id(record.world).ask(WorldUnsubscribe(subscription))
    del game.subscriptions[subscription]
    return {"subscription": subscription, "world": record.world, "path": record.path, "unsubscribed": True}


def _path(params: Params) -> str:
    path = params.string("path", default="")
    assert path is not None
    return path


WORLD_METHODS = {
    "world/create": world_create,
    "world/get": world_get,
    "world/set": world_set,
    "world/merge": world_merge,
    "world/remove": world_remove,
    "world/snapshot": world_snapshot,
    "world/delete": world_delete,
    "world/list": world_list,
    "world/subscribe": world_subscribe,
    "world/unsubscribe": world_unsubscribe,
}
