"""``decision/decide``, ``decision/decideMany`` and ``content/generate`` (protocol-game §4).

Concurrent one-off requests: every param is checked in the handler (a batch fails as a whole
on any bad element, before any model call), then the request runs on its own
:class:`~oam_actors.objects.RequestActor`, whose client tools are forwarded as ``tool/call``.
"""

from __future__ import annotations

from typing import Any

from ..agent import Schema, ToolChoice, ToolChoiceKind
from ..agent.tools import compact_json
from ..bridge.registry import Call
from ..bridge.core import resolve_model
from ..bridge.params import Params, preview
from ..clock import Budget
from ..errors import invalid_params
from ..game import ContentGenerator, DecisionEngine, DecisionRequest, Persona, check_request, parse_decision_options
from ..objects.npc import GetPersona
from ..objects.request import Decide, DecideMany, Generate
from ._common import deadline_seconds, timeout_seconds, tools_param
from ._state import GameState

__all__ = ["REQUEST_METHODS"]

_DECISION_KEYS = ("situation", "options", "actor", "context", "tools", "toolChoice", "fallbackOptionID",
                  "deadlineSeconds", "coalesce")
_ENGINE_KEYS = ("instructions", "temperature", "maxToolRounds", "toolTimeoutSeconds", "model")
_CONTENT_KEYS = ("prompt", "schema", "instructions", "context", "tools", "toolTimeoutSeconds", "temperature", "model")
_AUTO = ToolChoice(ToolChoiceKind.AUTO)


async def decision_decide(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown((*_DECISION_KEYS, *_ENGINE_KEYS))
    request, request_warnings = await _decision(game, params, game.budget(deadline_seconds(params)))
    engine = await _engine(game, params)
    message = Decide(
        request_id=_request_id(call), request=request, outlet=call.bridge, warnings=[*warnings, *request_warnings]
    )
    return game.run_request(engine, message)


async def decision_decide_many(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown(("requests", "maxConcurrency", "deadlineSeconds", "coalesce", *_ENGINE_KEYS))
    shared_deadline = deadline_seconds(params)
    elements = params.raw("requests")
    if not isinstance(elements, list) or not elements:
        raise invalid_params("'requests' must be a non-empty array of decisions.")
    requests = []
    shared_coalesce = bool(params.boolean("coalesce", default=True))
    for index, element in enumerate(elements):
        if not isinstance(element, dict):
            raise invalid_params(f"'requests[{index}]' must be an object.")
        element_params = Params(element, f"requests[{index}].")
        warnings += element_params.unknown(_DECISION_KEYS)
        element_deadline = deadline_seconds(element_params)
        request, request_warnings = await _decision(
            game, element_params, game.budget(shared_deadline if element_deadline is None else element_deadline),
            coalesce=shared_coalesce)
        warnings += [f"requests[{index}]: {warning}" for warning in request_warnings]
        requests.append(request)
    concurrency = params.integer("maxConcurrency", minimum=1, default=2)
    assert concurrency is not None
    engine = await _engine(game, params)
    message = DecideMany(
        request_id=_request_id(call), requests=requests, max_concurrency=concurrency, outlet=call.bridge,
        warnings=warnings,
    )
    return game.run_request(engine, message)


async def content_generate(game: GameState, call: Call) -> Any:
    params = call.params
    warnings = params.unknown(_CONTENT_KEYS)
    prompt = params.string("prompt", required=True)
    assert prompt is not None
    raw_schema = params.raw("schema")
    if raw_schema is None:
        raise invalid_params("Missing required parameter 'schema'.")
    schema = Schema.compile(raw_schema, path="schema")
    tools, tool_warnings = tools_param(params.raw("tools"), "tools")
    generator = ContentGenerator(
        (await resolve_model(game.bridge, params.raw("model")))[0],
        temperature=params.number("temperature", minimum=0),
        tool_timeout=_tool_timeout(game, params),
    )
    message = Generate(
        request_id=_request_id(call),
        prompt=prompt,
        schema=schema,
        outlet=call.bridge,
        instructions=params.string("instructions"),
        context=params.raw("context"),
        tools=tools,
        warnings=[*warnings, *tool_warnings],
    )
    return game.run_request(generator, message)


async def _decision(
    game: GameState, params: Params, budget: Budget, *, coalesce: bool = True
) -> tuple[DecisionRequest, list[str]]:
    """One decision's params (at ``params``' prefix) as a checked request, plus its warnings;
    ``budget`` is its ``deadlineSeconds`` (a batch's own, or the element's) from arrival, ``coalesce``
    the default of its ``"coalesce"`` (a batch's top-level one)."""
    situation = params.raw("situation")
    if situation is None:
        raise invalid_params(f"Missing required parameter '{params.path('situation')}'.")
    if params.raw("options") is None:
        raise invalid_params(f"Missing required parameter '{params.path('options')}'.")
    options = parse_decision_options(params.raw("options"), params.path("options"))
    actor, warnings = await _actor(game, params)
    raw_actor = params.raw("actor")
    tools, tool_warnings = tools_param(params.raw("tools"), params.path("tools"))
    choice = params.raw("toolChoice")
    fallback = params.string("fallbackOptionID")
    request = DecisionRequest(
        situation=situation if isinstance(situation, str) else compact_json(situation),
        options=options,
        actor=actor,
        context=params.raw("context"),
        tools=tools,
        tool_choice=_AUTO if choice is None else ToolChoice.parse(choice, path=params.path("toolChoice")),
        fallback_option_id=fallback,
        budget=budget,
        coalesce=bool(params.boolean("coalesce", default=coalesce)),
        # An NPC named by id spends its own share of quota, as its barks and talks do.
        owner=raw_actor if isinstance(raw_actor, str) else None,
    )
    check_request(request)
    return request, [*warnings, *tool_warnings]


async def _actor(game: GameState, params: Params) -> tuple[Persona | None, list[str]]:
    """An actor object is a persona; a string names an NPC whose current persona is used."""
    raw = params.raw("actor")
    if raw is None:
        return None, []
    if isinstance(raw, str):
        _, ref = game.npc_by_id(raw)
        persona: Persona = await ref.ask_control(GetPersona())
        return persona, []
    if not isinstance(raw, dict):
        raise invalid_params(
            f"Parameter '{params.path('actor')}' must be a persona object or an NPC id; got {preview(raw)}."
        )
    decoded = Persona.from_wire(raw, params.path("actor"))
    return decoded.value, list(decoded.warnings)


async def _engine(game: GameState, params: Params) -> DecisionEngine:
    """The shared engine settings of a decision request (top level of a batch)."""
    rounds = params.integer("maxToolRounds", minimum=0, default=2)
    assert rounds is not None
    return DecisionEngine(
        (await resolve_model(game.bridge, params.raw("model")))[0],
        instructions=params.string("instructions"),
        temperature=params.number("temperature", minimum=0),
        max_tool_rounds=rounds,
        tool_timeout=_tool_timeout(game, params),
    )


def _tool_timeout(game: GameState, params: Params) -> float:
    timeout = timeout_seconds(params, "toolTimeoutSeconds")
    return game.bridge.config.default_tool_timeout if timeout is None else timeout


def _request_id(call: Call) -> Any:
    return call.id if call.id is not None else call.bridge.new_local_id()


REQUEST_METHODS = {
    "decision/decide": decision_decide,
    "decision/decideMany": decision_decide_many,
    "content/generate": content_generate,
}
