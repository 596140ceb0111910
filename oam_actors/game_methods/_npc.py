"""The ``npc/*`` methods (protocol-game §3).

Immediate: create, restore, cancel, delete, list, state with ``settle: false``. Queued on the
NPC's ordered lane at arrival: talk, update, reset, state. Concurrent: bark. Params are checked
in the handler, so a bad request never takes a queue slot.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import msgspec

from ..agent import ToolChoice
from ..agent.transcript import Entry
from ..agent.tools import too_many_tools_warning
from ..bridge.registry import Call, Deferred, HandlerBridge
from ..bridge.core import ModelSpec
from ..bridge.params import Params
from ..errors import invalid_params
from ..game import NPC, NPCMemory, NPCOptions, NPCSaveState, Persona
from ..objects import NPCActor
from ..objects.npc import (
    Bark, DescribeNPC, NPCCheckpoint, ResetNPC, SaveNPC, Talk, UpdateNPC, with_tool_timeout,
)
from ..runtime import StoreRecord
from ._common import deadline_seconds, tools_array, tools_param
from ._state import NPC as NPC_KIND
from ._state import WORLD as WORLD_KIND
from ._state import GameState, NPCRecipe

__all__ = ["NPC_METHODS", "revive_npc"]

_CREATE_KEYS = ("npc", "persona", "tools", "world", "memory", "options", "model")
_RESTORE_KEYS = ("state", "npc", "tools", "options", "world", "model")
_TALK_KEYS = ("npc", "line", "context", "stream", "toolChoice", "deadlineSeconds", "coalesce")
_UPDATE_KEYS = ("npc", "persona", "options", "memory", "tools")


class _UsualTalk(msgspec.Struct, forbid_unknown_fields=True):
    """An ``npc/talk`` as load tests and games send it, read in one call (``Params.fields``);
    a deadline, a tool choice or anything unusual takes the accessors' path."""

    npc: str
    line: str
    context: Any = None
    stream: bool = False
    coalesce: bool = True


async def npc_create(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown(_CREATE_KEYS)
    npc = game.claim_npc_id(params)
    persona = Persona.from_wire(params.raw("persona"), "persona")
    memory = NPCMemory.from_wire(params.raw("memory"), "memory")
    tools_raw = tools_array(params.raw("tools"), "tools")
    options = NPCOptions.from_wire(params.raw("options"), "options")
    world = params.string("world")
    return await _build(
        game, npc, persona.value, warnings=[*warnings, *persona.warnings, *options.warnings], memory=memory,
        history=[], tools_raw=tools_raw, tools_path="tools", options=options.value, world=world,
        model_spec=params.raw("model"),
    )


async def npc_restore(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown(_RESTORE_KEYS)
    raw = params.raw("state")
    if raw is None:
        raise invalid_params("Missing required parameter 'state'.")
    if not isinstance(raw, dict):
        raise invalid_params("'state' must be a save state object from npc/state.")
    # The whole npc/state result is accepted too: it has an object 'state' and no persona.
    saved_wire = raw["state"] if "persona" not in raw and isinstance(raw.get("state"), dict) else raw
    saved = NPCSaveState.from_wire(saved_wire, "state")
    npc = _restored_id(game, params, saved_wire)
    tools_raw, tools_path = _present_or_saved(params, saved_wire, "tools")
    options_raw, options_path = _present_or_saved(params, saved_wire, "options")
    options = NPCOptions.from_wire(options_raw, options_path)
    world, world_warning = _restored_world(game, params, saved_wire)
    return await _build(
        game, npc, saved.persona, warnings=[*warnings, *options.warnings, *world_warning], memory=saved.memory,
        history=saved.transcript.entries, tools_raw=tools_array(tools_raw, tools_path), tools_path=tools_path,
        options=options.value, world=world, model_spec=params.raw("model"),
    )


def _restored_id(game: GameState, params: Params, saved: dict[str, Any]) -> str:
    if params.raw("npc") is None and isinstance(saved.get("npc"), str):
        return game.claim_npc_id(Params({"npc": saved["npc"]}, "state."))
    return game.claim_npc_id(params)


def _present_or_saved(params: Params, saved: dict[str, Any], key: str) -> tuple[Any, str]:
    """A key present in the params wins, even as ``null``; otherwise the saved value."""
    if params.present(key):
        return params.raw(key), key
    return saved.get(key), f"state.{key}"


def _restored_world(game: GameState, params: Params, saved: dict[str, Any]) -> tuple[str | None, list[str]]:
    if params.present("world"):
        return params.string("world"), []
    world = saved.get("world")
    if not isinstance(world, str):
        return None, []
    if world not in game.worlds:
        return None, [
            f"The saved world '{world}' does not exist; the NPC was restored without a world. "
            "Pass 'world' to attach one."
        ]
    return world, []


async def _build(
    game: GameState,
    npc_id: str,
    persona: Persona,
    *,
    warnings: list[str],
    memory: NPCMemory,
    history: Sequence[Entry],
    tools_raw: list[Any],
    tools_path: str,
    options: NPCOptions,
    world: str | None,
    model_spec: Any,
) -> Any:
    """Create and register the NPC actor (its answer: ``Bridge.created``); the steps after the
    params of create and restore, in Android's order (model spec, tool definitions, world, the
    model itself and its availability, NPC checks, limit), so a malformed create is ``-32602``
    even without a system model. Nothing is created when one fails."""
    bridge = game.bridge
    spec = ModelSpec(bridge, model_spec)
    tools, tool_warnings = tools_param(tools_raw, tools_path)
    shared = await game.world_document(world) if world is not None else None
    model, model_name = await spec.build(), spec.name
    warnings = [*warnings, *tool_warnings]
    if model_name == "system":
        availability = await model.availability()
        if not availability.available:
            warnings.append(
                f"The system model is unavailable ({availability.reason or 'unknown'}); "
                "turns will fail with model_unavailable until it is ready."
            )
    options = with_tool_timeout(options, bridge.config.default_tool_timeout)
    npc = NPC(persona, model, tools=tools, world=shared, options=options, memory=memory, history=history, owner=npc_id)
    if (many := too_many_tools_warning(len(npc.tool_names))) is not None:
        warnings.append(many)
    game.check_npc_room()
    actor = NPCActor(
        npc, bridge, model_name=model_name, world=world, tools_wire=tools_raw,
        default_tool_timeout=bridge.config.default_tool_timeout,
    )
    ref = bridge.system.spawn(bridge.address(NPC_KIND, npc_id), lambda: actor, max_queue=bridge.config.max_queue)
    game.add_npc(npc_id, world)
    if world is not None:
        bridge.shares(ref.address, bridge.address(WORLD_KIND, world))
    recipe = msgspec.json.encode(NPCRecipe(model_spec, world, game.npcs[npc_id].created_at))
    return bridge.created(ref, actor, recipe, {"npc": npc_id, "tools": npc.tool_names, "warnings": warnings},
                          undo=functools.partial(game.npcs.pop, npc_id, None))


def revive_npc(game: GameState, bridge: HandlerBridge, record: StoreRecord) -> NPCActor:
    """A stored NPC built again: its model and world from the recipe, then its checkpoint."""
    recipe = msgspec.json.decode(record.recipe, type=NPCRecipe)
    spec = ModelSpec(bridge, recipe.model)
    model, model_name = spec.rebuild(), spec.name
    saved = msgspec.json.decode(record.state, type=NPCCheckpoint)
    persona = NPCSaveState.from_wire(saved.state, "checkpoint.state").persona
    shared = game.revived_document(recipe.world) if recipe.world is not None else None
    if shared is not None and recipe.world is not None:
        bridge.shares(bridge.address(NPC_KIND, record.id), bridge.address(WORLD_KIND, recipe.world))
    npc = NPC(persona, model, world=shared, owner=record.id)
    actor = NPCActor(npc, bridge, model_name=model_name, world=recipe.world, tools_wire=[],
                     default_tool_timeout=bridge.config.default_tool_timeout)
    actor.restore(record.state)
    return actor

async def npc_talk(game: GameState, call: Call) -> Any:
    params = call.params
    usual = params.fields(_UsualTalk)
    if usual is not None:
        record, ref = game.npc_by_id(usual.npc)
        message = Talk(
            request_id=_request_id(call), line=usual.line, context=usual.context, stream=usual.stream,
            tool_choice=None, warnings=[], outlet=call.bridge, budget=game.budget(None), coalesce=usual.coalesce,
        )
        return game.enqueue_talk(record, ref, message)
    _, record, ref = game.npc(params)
    line = params.string("line", required=True)
    assert line is not None
    warnings = params.unknown(_TALK_KEYS)
    stream = params.boolean("stream", default=False)
    choice_raw = params.raw("toolChoice")
    message = Talk(
        request_id=_request_id(call),
        line=line,
        context=params.raw("context"),
        stream=bool(stream),
        tool_choice=ToolChoice.parse(choice_raw, path="toolChoice") if choice_raw is not None else None,
        warnings=warnings,
        outlet=call.bridge,
        budget=game.budget(deadline_seconds(params)),
        coalesce=bool(params.boolean("coalesce", default=True)),
    )
    return game.enqueue_talk(record, ref, message)


def _request_id(call: Call) -> Any:
    return call.id if call.id is not None else call.bridge.new_local_id()


async def npc_bark(game: GameState, call: Call) -> Any:
    params = call.params
    _, _, ref = game.npc(params)
    coalesce = bool(params.boolean("coalesce", default=True))
    bark = Bark(params.raw("situation"), budget=game.budget(deadline_seconds(params)), coalesce=coalesce)
    call.bridge.admit()
    return Deferred(ref.ask_control(bark))


async def npc_state(game: GameState, call: Call) -> Any:
    params = call.params
    _, record, ref = game.npc(params)
    if params.boolean("settle", default=True):
        return game.enqueue(record, ref, SaveNPC())
    return await ref.ask_control(SaveNPC(settle=False))


async def npc_update(game: GameState, call: Call) -> Any:
    params = call.params
    _, record, ref = game.npc(params)
    warnings = params.unknown(_UPDATE_KEYS)
    patches = {key: _patch(params, key) for key in ("persona", "options", "memory")}
    tools = None
    if params.present("tools"):
        tools = tools_array(params.raw("tools"), "tools")  # "tools": null replaces them with none
        tools_param(tools, "tools")  # a bad definition fails now, before the update takes a slot
    return game.enqueue(record, ref, UpdateNPC(**patches, tools=tools, warnings=warnings))


def _patch(params: Params, key: str) -> dict[str, Any] | None:
    value = params.raw(key)
    if value is not None and not isinstance(value, dict):
        raise invalid_params(f"'{key}' must be an object.")
    return value


async def npc_reset(game: GameState, call: Call) -> Any:
    params = call.params
    _, record, ref = game.npc(params)
    clear = params.boolean("clearMemory", default=False)
    return game.enqueue(record, ref, ResetNPC(bool(clear)))


async def npc_cancel(game: GameState, call: Call) -> Any:
    npc, record, _ = game.npc(call.params)
    # Only the requests queued by the protocol count; the NPC's own background work goes on.
    return {"npc": npc, "cancelled": game.cancel_pending(record)}


async def npc_delete(game: GameState, call: Call) -> Any:
    npc, record, ref = game.npc(call.params)
    del game.npcs[npc]
    await game.stop(record, ref)
    await game.bridge.delete_durable(ref.address)
    game.forget_member(npc)
    return {"npc": npc, "deleted": True}


async def npc_list(game: GameState, call: Call) -> Any:
    entries = []
    async for _, record, entry in game.described(NPC_KIND, game.npcs, game.prepare_npc, DescribeNPC()):
        pending = len(record.pending)
        entries.append({**entry, "busy": pending > 0, "pendingOperations": pending, "createdAt": record.created_at})
    return {"npcs": entries}


NPC_METHODS = {
    "npc/create": npc_create,
    "npc/restore": npc_restore,
    "npc/talk": npc_talk,
    "npc/bark": npc_bark,
    "npc/state": npc_state,
    "npc/update": npc_update,
    "npc/reset": npc_reset,
    "npc/cancel": npc_cancel,
    "npc/delete": npc_delete,
    "npc/list": npc_list,
}
