"""The ``conversation/*`` methods (PROTOCOL.md §10.9): conversations among NPCs.

Immediate: create, list, state, restore, cancel, delete. Queued on the conversation's ordered lane
at arrival: advance, run, say, join, leave. Params are checked here, before anything is created or
queued, so a bad request changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from ..bridge.registry import Call, Deferred, HandlerBridge
from ..bridge.params import Params, preview
from ..errors import invalid_params
from ..game import Persona
from ..game._text import situation_text
from ..game.conversation import (
    MAX_MEMBERS,
    MIN_MEMBERS,
    PLAYER,
    ConversationState,
    Member,
    TurnOrder,
    lines_from_wire,
    next_speaker,
)
from ..objects.conversation import (
    Advance,
    ConversationActor,
    ConversationCheckpoint,
    DescribeConversation,
    JoinConversation,
    LeaveConversation,
    PlayerSays,
)
from ..objects.npc import GetPersona
from ..runtime import ActorRef, ActorStopped, StoreRecord
from ._common import client_id, conversation_not_found, deadline_seconds
from ._state import CONVERSATION, NPC, ConversationRecipe, ConversationRecord, GameState

__all__ = ["CONVERSATION_METHODS", "MAX_LINE_BUDGET", "MAX_RUN_LINES", "revive_conversation"]

MAX_LINE_BUDGET = 10_000
MAX_RUN_LINES = 64
_CREATE_KEYS = ("conversation", "world", "members", "player", "audience", "location", "situation", "turnOrder",
                "sequence", "lineBudget")


async def conversation_create(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown(_CREATE_KEYS)
    conversation = game.claim_conversation_id(params)
    state = await _new_state(game, params)
    return await _spawn(game, conversation, state, warnings=warnings)


async def _new_state(game: GameState, params: Params) -> ConversationState:
    world = params.string("world", required=True)
    assert world is not None
    game.world_by_id(world)
    ids = _members(game, params, world)
    player = params.string("player")
    if player is not None and not player.strip():
        raise invalid_params("Parameter 'player' must be the player's name (not blank).")
    audience = _audience(game, params, world, ids)
    location = params.string("location")
    order = _turn_order(params)
    sequence = _sequence(params, ids, player, order)
    budget = params.integer("lineBudget", default=20, minimum=1, maximum=MAX_LINE_BUDGET)
    assert budget is not None
    names = [await _name_of(game, npc, f"members[{i}]") for i, npc in enumerate(ids)]
    return ConversationState(
        world=world, members=tuple(Member(npc, name) for npc, name in zip(ids, names, strict=True)),
        situation=situation_text(params.raw("situation")), player=player, audience=tuple(audience),
        location=location, order=order, sequence=tuple(sequence), line_budget=budget,
    )


def _members(game: GameState, params: Params, world: str) -> list[str]:
    members = params.array("members", required=True)
    assert members is not None
    if not MIN_MEMBERS <= len(members) <= MAX_MEMBERS:
        raise game.member_limit(len(members))
    return _npc_ids(game, members, "members", world)


def _npc_ids(game: GameState, values: list[Any], name: str, world: str, taken: list[str] | None = None) -> list[str]:
    ids: list[str] = []
    for index, value in enumerate(values):
        path = f"{name}[{index}]"
        if not isinstance(value, str):
            raise invalid_params(f"Parameter '{path}' must be an NPC id; got {preview(value)}.")
        if value in ids or (taken is not None and value in taken):
            raise invalid_params(f"Parameter '{path}': NPC '{value}' is named twice.")
        record = game.npcs.get(value)
        if record is None:
            raise invalid_params(f"Parameter '{path}': no NPC with id '{value}'.")
        if record.world != world:
            raise invalid_params(f"Parameter '{path}': NPC '{value}' is not on world '{world}'.")
        ids.append(value)
    return ids


def _audience(game: GameState, params: Params, world: str, members: list[str]) -> list[str]:
    audience = params.array("audience")
    return [] if audience is None else _npc_ids(game, audience, "audience", world, taken=members)


def _turn_order(params: Params) -> TurnOrder:
    raw = params.string("turnOrder", default=TurnOrder.ROUND_ROBIN.value)
    try:
        return TurnOrder(raw)
    except ValueError:
        choices = ", ".join(f"'{o.value}'" for o in TurnOrder)
        raise invalid_params(f"Parameter 'turnOrder' must be one of {choices}; got {preview(raw)}.") from None


def _sequence(params: Params, members: list[str], player: str | None, order: TurnOrder) -> list[str]:
    sequence = params.array("sequence")
    if order is not TurnOrder.SEQUENCE:
        if sequence:
            raise invalid_params("Parameter 'sequence' is only for turnOrder 'sequence'.")
        return []
    if not sequence:
        raise invalid_params("Parameter 'sequence' is required for turnOrder 'sequence' (member ids in speaking order).")
    allowed = [*members, PLAYER] if player is not None else members
    for index, speaker in enumerate(sequence):
        if speaker not in allowed:
            raise invalid_params(f"Parameter 'sequence[{index}]': {preview(speaker)} is not a member of the conversation.")
    return list(sequence)


async def _name_of(game: GameState, npc: str, path: str) -> str:
    _, ref = game.npc_by_id(npc)
    try:
        persona: Persona = await ref.ask_control(GetPersona())
    except ActorStopped:
        raise invalid_params(f"Parameter '{path}': NPC '{npc}' was deleted.") from None
    return persona.name.strip()


async def _spawn(game: GameState, conversation: str, state: ConversationState,
                 warnings: list[str] | None = None) -> Any:
    """Spawn and register the conversation; its answer is ``Bridge.created``'s (with a state
    store, once its first record is written)."""
    game.check_conversation_room()
    bridge = game.bridge
    addresses = {npc: bridge.address(NPC, npc) for npc in (*state.ids, *state.audience)}
    world = await game.world_document(state.world)
    actor = ConversationActor(state, bridge, addresses, world)
    ref = bridge.system.spawn(bridge.address(CONVERSATION, conversation), lambda: actor,
                              max_queue=bridge.config.max_queue)
    record = ConversationRecord(state.world, list(state.ids), list(state.audience))
    game.add_conversation(conversation, record)
    result = {"conversation": conversation, "members": state.ids, "next": next_speaker(state), "ended": False}
    if warnings is not None:
        result["warnings"] = warnings
    recipe = msgspec.json.encode(ConversationRecipe(record.created_at))
    return bridge.created(ref, actor, recipe, result, undo=functools.partial(game.drop_conversation, conversation))


def revive_conversation(game: GameState, bridge: HandlerBridge, record: StoreRecord) -> ConversationActor:
    """A stored conversation built again from its checkpoint (``GameState.prepare_conversation``
    has revived its world's document and its members)."""
    saved = msgspec.json.decode(record.state, type=ConversationCheckpoint)
    world = game.revived_document(saved.state.world)
    actor = ConversationActor(saved.state, bridge, saved.addresses, world)
    actor.restore(record.state)
    return actor


async def conversation_advance(game: GameState, call: Call) -> Any:
    return _advance(game, call, count=1)


async def conversation_run(game: GameState, call: Call) -> Any:
    count = call.params.integer("lines", required=True, minimum=1, maximum=MAX_RUN_LINES)
    assert count is not None
    return _advance(game, call, count=count)


def _advance(game: GameState, call: Call, *, count: int) -> Any:
    params = call.params
    conversation, record, ref = game.conversation(params)
    speaker = params.string("speaker")
    if speaker is not None and speaker not in record.members:
        raise invalid_params(f"Parameter 'speaker': '{speaker}' is not a member of conversation '{conversation}'.")
    message = Advance(
        request_id=call.id if call.id is not None else call.bridge.new_local_id(), count=count,
        stream=bool(params.boolean("stream", default=False)), outlet=call.bridge, speaker=speaker,
        budget=game.budget(deadline_seconds(params)), coalesce=bool(params.boolean("coalesce", default=True)),
    )
    return game.enqueue(record, ref, message)


async def conversation_say(game: GameState, call: Call) -> Any:
    params = call.params
    conversation, record, ref = game.conversation(params)
    line = params.string("line", required=True)
    assert line is not None
    if not line.strip():
        raise invalid_params("Parameter 'line' must not be blank.")
    addressee = params.string("to")
    if addressee is not None and addressee not in record.members:
        raise invalid_params(f"Parameter 'to': '{addressee}' is not a member of the conversation.")
    call.bridge.admit()
    return Deferred(_ask(ref, conversation, PlayerSays(line.strip(), addressee)))


async def conversation_join(game: GameState, call: Call) -> Any:
    params = call.params
    conversation, record, ref = game.conversation(params)
    npc = params.string("npc", required=True)
    assert npc is not None
    [npc] = _npc_ids(game, [npc], "npc", record.world, taken=record.members)
    if len(record.members) >= MAX_MEMBERS:
        raise game.member_limit(len(record.members) + 1)
    member = Member(npc, await _name_of(game, npc, "npc"))
    record.members.append(npc)
    game.enlist(conversation, [npc])
    if npc in record.audience:
        record.audience.remove(npc)
    return game.enqueue(record, ref, JoinConversation(member, game.bridge.address(NPC, npc)))


async def conversation_leave(game: GameState, call: Call) -> Any:
    params = call.params
    conversation, record, ref = game.conversation(params)
    npc = params.string("npc", required=True)
    assert npc is not None
    if npc not in record.members:
        raise invalid_params(f"Parameter 'npc': '{npc}' is not a member of conversation '{conversation}'.")
    record.members.remove(npc)
    game.delist(conversation, [npc])
    return game.enqueue(record, ref, LeaveConversation(npc))


async def conversation_state(game: GameState, call: Call) -> Any:
    conversation, _, ref = game.conversation(call.params)
    described = await _ask(ref, conversation, DescribeConversation())
    return {"conversation": conversation, "state": described}


async def _ask(ref: ActorRef, conversation: str, message: Any) -> Any:
    """A control message to the conversation; deleted meanwhile, it is not found."""
    try:
        return await ref.ask_control(message)
    except ActorStopped:
        raise conversation_not_found(conversation) from None


async def conversation_restore(game: GameState, call: Call) -> Any:
    """A conversation from ``conversation/state``'s ``state``: its members must exist on its world."""
    params = call.params
    raw = params.object("state", required=True)
    assert raw is not None
    # A whole conversation/state result has its state under "state".
    saved = raw["state"] if "members" not in raw and isinstance(raw.get("state"), dict) else raw
    wire = Params(saved, "state.")
    conversation = client_id(params, "conversation")
    if conversation is None:
        saved_id = raw.get("conversation")
        conversation = saved_id if isinstance(saved_id, str) else None
    conversation = game.claim_conversation_id(Params({"conversation": conversation}))
    world = wire.string("world", required=True)
    assert world is not None
    game.world_by_id(world)
    members_raw = wire.array("members", required=True)
    assert members_raw is not None
    ids = [m.get("npc") if isinstance(m, dict) else m for m in members_raw]
    if not MIN_MEMBERS <= len(ids) <= MAX_MEMBERS:
        raise game.member_limit(len(ids))
    ids = _npc_ids(game, ids, "state.members", world)
    audience = _npc_ids(game, wire.array("audience") or [], "state.audience", world, taken=ids)
    lines = lines_from_wire(wire.array("lines") or [], "state.lines")
    order = _turn_order(wire)
    members = [Member(npc, await _name_of(game, npc, f"state.members[{i}]")) for i, npc in enumerate(ids)]
    state = ConversationState(
        world=world, members=tuple(members),
        situation=wire.string("situation"), player=wire.string("player"), audience=tuple(audience),
        location=wire.string("location"), order=order,
        sequence=tuple(_sequence(wire, ids, wire.string("player"), order)),
        line_budget=wire.integer("lineBudget", default=20, minimum=1, maximum=MAX_LINE_BUDGET) or 20,
        lines=tuple(lines), position=wire.integer("position", default=len(lines), minimum=0) or 0,
    )
    return await _spawn(game, conversation, state)


async def conversation_cancel(game: GameState, call: Call) -> Any:
    conversation, record, _ = game.conversation(call.params)
    return {"conversation": conversation, "cancelled": game.cancel_pending(record)}


async def conversation_delete(game: GameState, call: Call) -> Any:
    conversation, record, ref = game.conversation(call.params)
    game.drop_conversation(conversation)
    await game.stop(record, ref)
    await game.bridge.delete_durable(ref.address)
    return {"conversation": conversation, "deleted": True}


async def conversation_list(game: GameState, call: Call) -> Any:
    entries = []
    async for conversation, record, described in game.described(
            CONVERSATION, game.conversations, game.prepare_conversation, DescribeConversation()):
        entries.append({
            "conversation": conversation, "world": record.world, "members": described["members"],
            "player": described["player"], "lineCount": len(described["lines"]), "ended": described["ended"],
            "busy": bool(record.pending), "pendingOperations": len(record.pending), "createdAt": record.created_at,
        })
    return {"conversations": entries}


CONVERSATION_METHODS = {
    "conversation/create": conversation_create,
    "conversation/advance": conversation_advance,
    "conversation/run": conversation_run,
    "conversation/say": conversation_say,
    "conversation/join": conversation_join,
    "conversation/leave": conversation_leave,
    "conversation/state": conversation_state,
    "conversation/restore": conversation_restore,
    "conversation/cancel": conversation_cancel,
    "conversation/delete": conversation_delete,
    "conversation/list": conversation_list,
}
