"""The seventeen core methods of bridge protocol v1.0.

Immediate methods answer from the handler. Turn-affecting methods (respond, reset, compact,
setInstructions, setContextNote, setTools) validate in the handler, queue a message on the
session's ordered lane, and answer when it has been handled (a :class:`Deferred`).
Handlers use the bridge only as a :class:`~oam_actors.bridge.registry.HandlerBridge`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..agent import (
    Agent,
    AgentOptions,
    LanguageModel,
    RetryPolicy,
    Sampling,
    Schema,
    ToolChoice,
    ToolChoiceKind,
    ToolDefinition,
    Transcript,
    TurnOverrides,
    parse_tool_definitions,
)
from ..agent.tools import check_timeout, too_many_tools_warning
from ..errors import AgentError, ErrorCode, ProtocolError, invalid_params
from ..models import ScriptedModel
from ..objects import (
    Compact,
    Describe,
    GetTranscript,
    Reset,
    Respond,
    SessionActor,
    SetContextNote,
    SetInstructions,
    SetTools,
)
from ..runtime import ActorExists, ActorRef, ActorStopped, StoreRecord
from .params import Params, is_object_id, preview
from .registry import Call, HandlerBridge

__all__ = ["CORE_METHODS", "ModelSpec", "install_core", "parse_options", "parse_tools", "resolve_model"]

SESSION = "session"
PROTOCOL_VERSION = "1.0"
_CREATE_KEYS = ("session", "instructions", "tools", "options", "history", "model")
_TURN_KEYS = frozenset(("toolChoice", "maxToolRounds", "maxToolCalls", "enabledTools"))
_RESPOND_KEYS = frozenset(("session", "prompt", "schema", "stream", *_TURN_KEYS))
_OPTION_KEYS = (
    "toolChoice", "maxToolRounds", "maxToolCalls", "enabledTools", "temperature", "maxResponseTokens",
    "sampling", "toolTimeoutSeconds", "trimHistory", "reservedResponseTokens", "maxAttempts",
    "userLabel", "assistantLabel",
)
_NO_SYSTEM_MODEL = {
    "available": False,
    "reason": "unknown",
    "contextSize": 4000,
    "supportedLanguages": [],
    "status": "unavailable",
    "detail": "No system model is configured; start the server with --model, or create sessions "
    'with "model": "scripted".',
}


# --- parsing helpers shared by create / respond / setTools -------------------------------------


def parse_tools(value: Any, *, path: str, default_timeout: float) -> tuple[list[ToolDefinition], list[str]]:
    """Tool definitions plus their warnings (and the >5 tools warning)."""
    tools, warnings = parse_tool_definitions(value, path=path)
    tools = [t if t.timeout is not None else _with_timeout(t, default_timeout) for t in tools]
    if (many := too_many_tools_warning(len(tools))) is not None:
        warnings.append(many)
    return tools, warnings


def _with_timeout(tool: ToolDefinition, timeout: float) -> ToolDefinition:
    return ToolDefinition(tool.name, tool.description, tool.schema, timeout, tool.handler)


def parse_options(options: Params | None, *, default_tool_timeout: float) -> tuple[AgentOptions, list[str]]:
    """``session/create``'s ``options`` → the agent policy plus warnings."""
    if options is None:
        return AgentOptions(tool_timeout=default_tool_timeout), []
    warnings = options.unknown(_OPTION_KEYS)
    fields: dict[str, Any] = {"tool_timeout": default_tool_timeout}
    fields.update(_turn_fields(options))
    if (value := options.number("temperature", minimum=0)) is not None:
        fields["temperature"] = value
    if (value := options.integer("maxResponseTokens", minimum=1)) is not None:
        fields["max_response_tokens"] = value
    if options.raw("sampling") is not None:
        fields["sampling"], sampling_warnings = _sampling(options.raw("sampling"))
        warnings += sampling_warnings
    if (value := check_timeout(options.raw("toolTimeoutSeconds"), "options.toolTimeoutSeconds")) is not None:
        fields["tool_timeout"] = value
    if (value := options.boolean("trimHistory")) is not None:
        fields["trim_history"] = value
    if (value := options.integer("reservedResponseTokens", minimum=0)) is not None:
        fields["reserved_response_tokens"] = value
    if (value := options.integer("maxAttempts", minimum=1)) is not None:
        fields["retry"] = RetryPolicy(max_attempts=value)
    for key, field in (("userLabel", "user_label"), ("assistantLabel", "assistant_label")):
        label = options.string(key)
        if label is not None:
            if not label.strip():
                raise invalid_params(f"Parameter 'options.{key}' must not be blank.")
            fields[field] = label.strip()
    return AgentOptions(**fields), warnings


def _turn_fields(params: Params) -> dict[str, Any]:
    """The policy fields a session and a single turn share."""
    fields: dict[str, Any] = {}
    if not params.sent_any(_TURN_KEYS):
        return fields
    if (raw := params.raw("toolChoice")) is not None:
        fields["tool_choice"] = ToolChoice.parse(raw, path=params.path("toolChoice"))
    if (value := params.integer("maxToolRounds", minimum=0)) is not None:
        fields["max_tool_rounds"] = value
    if (value := params.integer("maxToolCalls", minimum=0)) is not None:
        fields["max_tool_calls"] = value
    if (names := params.array("enabledTools")) is not None:
        if not all(isinstance(n, str) for n in names):
            raise invalid_params(f"Parameter '{params.path('enabledTools')}' must be an array of strings.")
        fields["enabled_tools"] = frozenset(names)
    return fields


def _sampling(value: Any) -> tuple[Sampling, list[str]]:
    if value == "greedy":
        return Sampling(top_k=1), []
    if not isinstance(value, dict):
        raise invalid_params(f"Parameter 'options.sampling' must be \"greedy\" or an object; got {preview(value)}.")
    sampling = Params(value, "options.sampling.")
    seed = sampling.integer("seed", minimum=0)
    top_k = sampling.integer("topK", minimum=1)
    top_p = sampling.number("topP", minimum=0, maximum=1)
    if top_k is None and top_p is None:
        raise invalid_params("Parameter 'options.sampling' must have \"topK\" or \"topP\".")
    warnings = []
    if top_p is not None and top_k is None:
        warnings.append("options.sampling.topP is not supported by on-device models and is ignored (seed still applies).")
    return Sampling(top_k=top_k, top_p=top_p, seed=seed), warnings


def _session_id(bridge: HandlerBridge, params: Params) -> str:
    raw = params.raw("session")
    if raw is None:
        return bridge.new_session_id()
    if not isinstance(raw, str):
        raise invalid_params(f"Parameter 'session' must be a string; got {preview(raw)}.")
    if not is_object_id(raw):
        raise invalid_params("Parameter 'session' must be 1-128 characters without control or format characters.")
    return raw


def _session_ref(bridge: HandlerBridge, params: Params) -> tuple[str, Any]:
    session = params.string("session", required=True)
    assert session is not None
    ref = bridge.lookup(SESSION, session)
    if ref is None:
        raise ProtocolError(ErrorCode.SESSION_NOT_FOUND, f"Session '{session}' not found.", session=session)
    return session, ref


class ModelSpec:
    """A checked ``model`` param whose model is not built yet (Android's ``modelSpec``): create
    methods check their other params first and build the model last, so a malformed create is
    ``-32602`` even where the model it names could not be built (no system model, say)."""

    __slots__ = ("_bridge", "_model", "_value", "name")

    def __init__(self, bridge: HandlerBridge, value: Any) -> None:
        self._bridge, self._value = bridge, value
        self._model: LanguageModel | None = None
        self.name = _model_name(bridge, value)
        if self.name == "scripted":  # the script's steps are params: checked now
            self._model = ScriptedModel.from_wire(value, path="model", record_requests=False)

    async def build(self) -> LanguageModel:
        """The model of a create: the type's check first (a refused address, §7 Backends), then
        :meth:`rebuild`."""
        if (check := self._bridge.config.model_checks.get(self.name)) is not None:
            await check(self._value, "model")
        return self.rebuild()

    def rebuild(self) -> LanguageModel:
        """The model without the type's check (an object revived from the state store was
        checked when it was created); ``model_unavailable`` without a system model,
        ``invalid_params`` for a custom type's bad fields."""
        if self._model is not None:
            return self._model
        if self.name == "system":
            if self._bridge.system_model is None:
                raise AgentError(
                    ErrorCode.MODEL_UNAVAILABLE,
                    'No system model is configured; start the server with --model, or use "model": "scripted".',
                )
            return self._bridge.system_model()
        return self._bridge.config.model_types[self.name](self._value, "model")


def _model_name(bridge: HandlerBridge, value: Any) -> str:
    """The ``session/list`` name of the model ``value`` names: ``system``, ``scripted`` or the
    custom type; ``invalid_params`` when it names none."""
    if value is None or value == "system" or (isinstance(value, dict) and value.get("type") == "system"):
        return "system"
    if not isinstance(value, str | dict):
        raise invalid_params(f"Parameter 'model' must be a string or an object; got {preview(value)}.")
    kind = value if isinstance(value, str) else value.get("type")
    if kind == "scripted":
        if not bridge.config.scripted_models:
            raise invalid_params("Scripted models are disabled on this server.")
        return "scripted"
    if isinstance(value, dict) and isinstance(kind, str) and kind in bridge.config.model_types:
        return kind
    raise invalid_params(f"Unknown model type {preview(kind)}.")


async def resolve_model(bridge: HandlerBridge, value: Any) -> tuple[LanguageModel, str]:
    """The model a ``model`` param names (the system model when absent) and its list name
    (``system``, ``scripted`` or the custom type). Extensions (NPCs, decisions, content) accept
    the same model specs as ``session/create`` and fail the same way."""
    spec = ModelSpec(bridge, value)
    return await spec.build(), spec.name


# --- methods -----------------------------------------------------------------------------------


async def initialize(call: Call) -> Any:
    bridge = call.bridge
    version = call.params.string("protocolVersion")
    if version is not None and version.split(".", 1)[0] != "1":
        raise invalid_params(f"Unsupported protocolVersion {preview(version)}; this bridge speaks 1.x.")
    client = call.params.object("client")
    if client is not None:
        bridge.client_info = client
    model = await _availability(bridge)
    # ``models`` is exactly what the reference bridges list; every type ``model`` may name here
    # (proxies, phones, registered types) is the extension ``modelTypes`` (§3, §9).
    models = ["system", "scripted"] if bridge.config.scripted_models else ["system"]
    model_types = [*models, *(k for k in bridge.config.model_types if k not in models)]
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "server": {"name": bridge.config.server_name, "version": bridge.config.server_version},
        "capabilities": {
            "methods": bridge.registry.names(),
            "notifications": list(bridge.registry.notifications),
            "clientRequests": ["tool/call"],
            "streaming": True,
            "clientTools": True,
            "structuredOutput": True,
            "models": models,
            "modelTypes": model_types,
            "maxSessions": bridge.config.max_sessions,
            "batch": False,
        },
        "model": model,
    }


async def ping(call: Call) -> Any:
    return {}


async def _availability(bridge: HandlerBridge) -> dict[str, Any]:
    if bridge.system_model is None:
        return dict(_NO_SYSTEM_MODEL)
    return (await bridge.system_model().availability()).to_wire()


async def model_availability(call: Call) -> Any:
    return await _availability(call.bridge)


async def session_create(call: Call) -> Any:
    bridge, params = call.bridge, call.params
    # Android's order (SessionMethods.create): id, options, history, instructions, tools, the
    # forced tool, and only then the model, so a malformed create is -32602 with or without one.
    warnings = params.unknown(_CREATE_KEYS)
    session = _session_id(bridge, params)
    _check_free(bridge, session)
    options, option_warnings = parse_options(
        params.nested("options"), default_tool_timeout=bridge.config.default_tool_timeout
    )
    transcript = _history(params)
    instructions = _instructions(params, transcript)
    tools, tool_warnings = _create_tools(params, transcript, options.tool_timeout)
    _check_forced_tool(options, tools)
    spec = ModelSpec(bridge, params.raw("model"))
    model, model_name = await spec.build(), spec.name
    warnings += [*option_warnings, *tool_warnings]
    if model_name == "system":
        warnings += await _availability_warnings(model)
    agent = Agent(
        model,
        instructions=instructions,
        context_note=transcript.contextNote if transcript else None,
        tools=tools,
        options=options,
        history=transcript.entries if transcript else (),
        owner=session,
    )
    actor = SessionActor(agent, bridge, model_name=model_name)
    ref = _insert_session(bridge, session, actor)
    recipe = _SessionRecipe(params.raw("model"), params.raw("options"))
    return bridge.created(ref, actor, msgspec.json.encode(recipe), {"session": session, "warnings": warnings})


class _SessionRecipe(msgspec.Struct, frozen=True):
    """What a stored session is built again from, besides its checkpoint (``SessionState``)."""

    model: Any = None  # the model spec as session/create had it
    options: Any = None  # session/create's options


def revive_session(bridge: HandlerBridge, record: StoreRecord) -> SessionActor:
    """A stored session built again: its model and options from the recipe, then its checkpoint."""
    recipe = msgspec.json.decode(record.recipe, type=_SessionRecipe)
    spec = ModelSpec(bridge, recipe.model)
    model, model_name = spec.rebuild(), spec.name
    options_raw = recipe.options
    options, _ = parse_options(
        Params(options_raw, "options.") if isinstance(options_raw, dict) else None,
        default_tool_timeout=bridge.config.default_tool_timeout,
    )
    actor = SessionActor(Agent(model, options=options, owner=record.id), bridge, model_name=model_name)
    actor.restore(record.state)
    return actor


def _check_free(bridge: HandlerBridge, session: str) -> None:
    if bridge.lookup(SESSION, session) is not None:
        raise _session_exists(session)


def _session_exists(session: str) -> ProtocolError:
    return ProtocolError(ErrorCode.SESSION_EXISTS, f"Session '{session}' already exists.", session=session)


def _history(params: Params) -> Transcript | None:
    history = params.raw("history")
    return Transcript.from_wire(history, path="history") if history is not None else None


def _instructions(params: Params, transcript: Transcript | None) -> str | None:
    """A present ``instructions`` key wins (even ``null``); otherwise the restored ones."""
    if params.present("instructions") or transcript is None:
        return params.string("instructions")
    return transcript.instructions


def _create_tools(
    params: Params, transcript: Transcript | None, default_timeout: float
) -> tuple[list[ToolDefinition], list[str]]:
    """A present ``tools`` key wins (even ``[]``); restored tools come without warnings."""
    if params.present("tools") or transcript is None:
        return parse_tools(params.array("tools") or [], path="tools", default_timeout=default_timeout)
    tools, _ = parse_tools(transcript.tools, path="history.tools", default_timeout=default_timeout)
    return tools, []


def _check_forced_tool(options: AgentOptions, tools: list[ToolDefinition]) -> None:
    choice = options.tool_choice
    if choice.kind is ToolChoiceKind.TOOL and choice.tool not in {t.name for t in tools}:
        raise invalid_params(f"Parameter 'options.toolChoice' names '{choice.tool}', which is not among the tools.")


async def _availability_warnings(model: LanguageModel) -> list[str]:
    availability = await model.availability()
    if availability.available:
        return []
    return [f"The system model is not available ({availability.reason or 'unknown'}); turns will fail until it is."]


def _insert_session(bridge: HandlerBridge, session: str, actor: SessionActor) -> ActorRef:
    """Check the limit and spawn, with no await in between: connections sharing objects run on
    one event loop, so of two creates of one id that both passed :func:`_check_free` before an
    await, exactly one spawns and the other gets ``session_exists``."""
    if bridge.session_count() >= bridge.config.max_sessions:
        raise ProtocolError(
            ErrorCode.SESSION_LIMIT,
            f"Too many sessions (limit {bridge.config.max_sessions}); delete one first.",
            limit=bridge.config.max_sessions,
        )
    try:
        return bridge.system.spawn(bridge.address(SESSION, session), lambda: actor, max_queue=bridge.config.max_queue)
    except ActorExists as exc:
        raise _session_exists(session) from exc


async def session_respond(call: Call) -> Any:
    bridge, params = call.bridge, call.params
    _, ref = _session_ref(bridge, params)
    prompt = params.string("prompt", required=True)
    assert prompt is not None
    warnings = params.unknown(_RESPOND_KEYS)
    schema = None
    if (raw_schema := params.raw("schema")) is not None:
        schema = Schema.compile(raw_schema, path="schema")
        warnings += list(schema.warnings)
    stream = params.boolean("stream", default=False)
    fields = _turn_fields(params)
    overrides = TurnOverrides(**fields) if fields else None
    message = Respond(
        request_id=call.id if call.id is not None else bridge.new_local_id(),
        prompt=prompt,
        schema=schema,
        stream=bool(stream),
        overrides=overrides,
        warnings=warnings,
    )
    return bridge.enqueue(ref, message)


async def session_cancel(call: Call) -> Any:
    session, ref = _session_ref(call.bridge, call.params)
    return {"session": session, "cancelled": ref.cancel_all()}


async def session_delete(call: Call) -> Any:
    bridge = call.bridge
    session, ref = _session_ref(bridge, call.params)
    ref.cancel_all()
    await bridge.system.stop(ref.address)
    await bridge.delete_durable(ref.address)
    return {"session": session, "deleted": True}


async def session_list(call: Call) -> Any:
    bridge = call.bridge
    sessions = []
    for stored in bridge.stored_ids(SESSION):  # stored and not in memory: revived to describe them
        bridge.lookup(SESSION, stored)
    for address in bridge.system.addresses(SESSION):
        ref = bridge.system.lookup(address) if bridge.owns(address) else None
        if ref is not None:
            try:
                sessions.append(await ref.ask_control(Describe()))
            except ActorStopped:  # deleted meanwhile; any other failure is a bug and fails the list
                continue
    return {"sessions": sessions}


async def session_transcript(call: Call) -> Any:
    _, ref = _session_ref(call.bridge, call.params)
    return await ref.ask_control(GetTranscript())


def _queued(make: Any) -> Any:
    async def handler(call: Call) -> Any:
        _, ref = _session_ref(call.bridge, call.params)
        return call.bridge.enqueue(ref, make(call))

    return handler


def _set_tools(call: Call) -> SetTools:
    raw = call.params.array("tools", required=True)
    tools, warnings = parse_tools(raw, path="tools", default_timeout=call.bridge.config.default_tool_timeout)
    return SetTools(tools, warnings)


def _compact(call: Call) -> Compact:
    keep = call.params.integer("keepRecentTurns", minimum=0, default=2)
    assert keep is not None
    return Compact(keep, call.params.string("summaryInstructions"))


async def schema_validate(call: Call) -> Any:
    raw = call.params.raw("schema")
    if raw is None:
        raise invalid_params("Missing required parameter 'schema'.")
    call.params.string("name")
    schema = Schema.compile(raw, path="schema")
    return {"warnings": list(schema.warnings), "generationSchema": schema.generation_schema, "rendered": schema.render_lines()}


async def tools_validate(call: Call) -> Any:
    raw = call.params.array("tools", required=True)
    tools, warnings = parse_tool_definitions(raw, path="tools")
    schema_warnings = {f"{t.name}: {w}" for t in tools for w in t.schema.warnings}
    return {
        "tools": [
            {
                "name": t.name,
                "warnings": list(t.schema.warnings),
                "generationSchema": t.schema.generation_schema,
                "rendered": t.schema.render_compact(),
            }
            for t in tools
        ],
        "warnings": [w for w in warnings if w not in schema_warnings],
    }


async def shutdown(call: Call) -> Any:
    await call.bridge.shutdown()
    call.bridge.closed.set()
    return {}


CORE_METHODS = {
    "initialize": initialize,
    "ping": ping,
    "model/availability": model_availability,
    "session/create": session_create,
    "session/respond": session_respond,
    "session/cancel": session_cancel,
    "session/reset": _queued(lambda call: Reset()),
    "session/delete": session_delete,
    "session/list": session_list,
    "session/transcript": session_transcript,
    "session/setInstructions": _queued(lambda call: SetInstructions(call.params.string("instructions"))),
    "session/setContextNote": _queued(lambda call: SetContextNote(call.params.string("note"))),
    "session/setTools": _queued(_set_tools),
    "session/compact": _queued(_compact),
    "schema/validate": schema_validate,
    "tools/validate": tools_validate,
    "shutdown": shutdown,
}


def install_core(bridge: HandlerBridge) -> None:
    for name, handler in CORE_METHODS.items():
        bridge.registry.register(name, handler)
    bridge.revivers[SESSION] = revive_session
    bridge.registry.add_notification("session/event")
    bridge.registry.add_notification("tool/cancel")

