"""Agent step ⇄ provider request, pure: what a :class:`GenerationRequest` becomes on the wire, and
what text the agent reads back from a step's stream events.

Envelope mode (the default) sends no tools: every step is plain text in, streamed text out, as on
Nano. Native mode offers a decide step's tools through the provider's tool calling (a
``toolArguments`` step forces its one tool where the provider can) and turns the answer back into
the envelope text the loop already reads: a call becomes ``{"action": name, "arguments": {…}}``
(``toolArguments``: the arguments object); a text answer holding JSON passes through; plain prose
means the model chose to answer, ``{"action": "respond", "arguments": {}}``. Native steps are
read whole before anything is yielded, since a call may follow text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...agent.lenient_json import find_json
from ...agent.model import GenerationRequest, StepKind, Usage
from ...errors import AgentError, ErrorCode
from ..codecs import (
    BlockEvent,
    Message,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    Terminal,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDone,
    ToolDefinition,
    UsageEvent,
)
from ..codecs import Usage as ProviderUsage
from ._config import Provider, ProxyConfig

__all__ = ["StepReader", "is_native_step", "response_events", "to_provider_request"]

_DECIDING = (StepKind.DECIDE, StepKind.TOOL_ARGUMENTS)
_RESPOND_ENVELOPE = '{"action":"respond","arguments":{}}'
_encode = msgspec.json.Encoder()


def is_native_step(request: GenerationRequest, config: ProxyConfig) -> bool:
    """True when this step offers its tools through the provider's tool calling."""
    return config.native_tools and request.kind in _DECIDING and bool(request.tools)


def to_provider_request(request: GenerationRequest, config: ProxyConfig) -> Request:
    """The canonical provider request for one agent step."""
    messages = []
    if request.system.strip():
        messages.append(Message(role=Role.SYSTEM, content=[Text(request.system)]))
    # The codecs refuse empty text; a blank step prompt is still a turn.
    messages.append(Message(role=Role.USER, content=[Text(request.prompt if request.prompt.strip() else "…")]))
    native = is_native_step(request, config)
    tools = _offered_tools(request) if native else []
    settings = _settings(request, config)
    if native:
        settings.update(_tool_choice(request, config.provider))
    return Request(
        model=config.model,
        messages=messages,
        tools=tools,
        settings=settings,
        output_constraints=_constraints(request, config),
    )


def _offered_tools(request: GenerationRequest) -> list[ToolDefinition]:
    offered = [t for t in request.tools if request.tool_name is None or t.name == request.tool_name]
    return [ToolDefinition(name=t.name, description=t.description, input_schema=_schema(t.parameters)) for t in offered]


def _schema(parameters: Any) -> dict[str, Any]:
    return parameters if isinstance(parameters, dict) and parameters else {"type": "object", "properties": {}}


def _settings(request: GenerationRequest, config: ProxyConfig) -> dict[str, Any]:
    sampling = request.sampling
    temperature = request.temperature
    if sampling is not None and sampling.top_k == 1:
        temperature = 0.0  # greedy, the one top-k every provider can express
    max_tokens = min(request.max_output_tokens or config.max_output_tokens, config.max_output_tokens)
    provider = config.provider
    names = _SETTING_NAMES[provider]
    values: dict[str, Any] = {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "top_p": sampling.top_p if sampling else None,
        "top_k": sampling.top_k if sampling and sampling.top_k != 1 else None,
        "seed": sampling.seed if sampling else None,
    }
    return {names[key]: value for key, value in values.items() if value is not None and key in names}


# Per provider: our setting → the codec's option name (absent: the provider has no such knob).
_SETTING_NAMES: dict[Provider, dict[str, str]] = {
    Provider.OPENAI: {"temperature": "temperature", "max_tokens": "max_tokens", "top_p": "top_p", "seed": "seed"},
    Provider.ANTHROPIC: {"temperature": "temperature", "max_tokens": "max_tokens", "top_p": "top_p", "top_k": "top_k"},
    Provider.GEMINI: {
        "temperature": "temperature",
        "max_tokens": "max_output_tokens",
        "top_p": "top_p",
        "top_k": "top_k",
        "seed": "seed",
    },
}
_SETTING_NAMES[Provider.ANTIGRAVITY] = _SETTING_NAMES[Provider.GEMINI]  # the same GenerateContent body


def _tool_choice(request: GenerationRequest, provider: Provider) -> dict[str, Any]:
    """Force the tool of a ``toolArguments`` step; let a decide step choose. Gemini: no mapping."""
    forced = request.tool_name if request.kind is StepKind.TOOL_ARGUMENTS else None
    if provider is Provider.OPENAI:
        return {"tool_choice": {"type": "function", "function": {"name": forced}} if forced else "auto"}
    if provider is Provider.ANTHROPIC:
        return {"tool_choice": {"type": "tool", "name": forced} if forced else {"type": "auto"}}
    return {}


def _constraints(request: GenerationRequest, config: ProxyConfig) -> dict[str, Any]:
    if not (config.structured_output and request.kind is StepKind.STRUCTURED and isinstance(request.schema, dict)):
        return {}
    if config.provider is Provider.OPENAI:
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": request.schema}}}
    if config.provider in (Provider.GEMINI, Provider.ANTIGRAVITY):
        return {"response_mime_type": "application/json", "response_json_schema": request.schema}
    return {}  # Anthropic has no response format; the prompt asks for the JSON


class StepReader:
    """Folds one step's stream events into the text pieces the agent reads. Not thread-safe.

    :meth:`push` returns the pieces to yield now (nothing for a native step); :meth:`finish`
    returns the rest plus one :class:`~oam_actors.agent.Usage` when the provider reported tokens.
    Raises :class:`~oam_actors.errors.AgentError` for an answer blocked by safety or refused.
    """

    def __init__(self, request: GenerationRequest, *, native: bool) -> None:
        self._kind = request.kind
        self._buffering = native
        self._text: list[str] = []
        self._call: ToolCall | None = None
        self._usage: ProviderUsage | None = None

    def push(self, events: list[StreamEvent]) -> list[str]:
        pieces: list[str] = []
        for event in events:
            if isinstance(event, TextDelta):
                self._text.append(event.text)
                if not self._buffering:
                    pieces.append(event.text)
            elif isinstance(event, ToolCallDone):
                self._call = self._call or event.call  # one call per step, as the loop runs them
            elif isinstance(event, UsageEvent):
                self._usage = event.usage
            elif isinstance(event, Terminal):
                _check_stop(event.stop_reason)
        return pieces

    def finish(self, events: list[StreamEvent]) -> list[str | Usage]:
        pieces: list[str | Usage] = list(self.push(events))
        answer = self._answer()
        if answer:
            pieces.append(answer)
        usage = _agent_usage(self._usage)
        if usage is not None:
            pieces.append(usage)
        return pieces

    def _answer(self) -> str:
        """What a native step (or a stray call in a decide step) says, once all is read."""
        if self._kind not in _DECIDING:
            return ""
        text = "".join(self._text)
        if self._call is not None:
            return _render_call(self._call, self._kind)
        if not self._buffering:
            return ""
        if self._kind is StepKind.DECIDE and not isinstance(find_json(text), dict):
            return _RESPOND_ENVELOPE
        return text


def _render_call(call: ToolCall, kind: StepKind) -> str:
    arguments = call.arguments if isinstance(call.arguments, dict) else find_json(call.arguments) or {}
    if kind is StepKind.TOOL_ARGUMENTS:
        return _encode.encode(arguments).decode()
    return _encode.encode({"action": call.name, "arguments": arguments}).decode()


def _check_stop(stop: StopReason) -> None:
    if stop is StopReason.SAFETY:
        raise AgentError(ErrorCode.GUARDRAIL_VIOLATION, "The provider blocked the answer by its safety policy.")
    if stop is StopReason.REFUSAL:
        raise AgentError(ErrorCode.REFUSAL, "The model refused to answer.")


def _agent_usage(usage: ProviderUsage | None) -> Usage | None:
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    return Usage(
        input_tokens=usage.input_tokens or 0,
        cached_input_tokens=usage.cache_read_tokens or 0,
        output_tokens=usage.output_tokens or 0,
    )


def response_events(response: Response) -> list[StreamEvent]:
    """A whole response as the events a stream of it would have given."""
    events: list[StreamEvent] = []
    for index, block in enumerate(response.output):
        if isinstance(block, Text):
            events.append(TextDelta(index, block.text))
        elif isinstance(block, ToolCall):
            events.append(ToolCallDone(index, block))
        else:
            events.append(BlockEvent(index, block))
    if response.usage is not None:
        events.append(UsageEvent(response.usage))
    events.append(Terminal(response.stop_reason))
    return events
