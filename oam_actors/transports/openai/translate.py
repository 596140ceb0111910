"""A Chat Completions request as one agent turn (pure, no I/O).

- ``system`` and ``developer`` messages, wherever they stand, become the instructions (in order,
  blank-line separated).
- ``user`` messages are prompts, ``assistant`` messages replies; an assistant message's
  ``tool_calls`` with the ``tool`` messages answering them are tool uses (text beside
  ``tool_calls`` is not kept). Every tool call needs its tool message, and every tool message a
  call before it.
- The turn: after a ``user`` message, that message is the prompt; after ``tool`` messages, the
  last user message is the prompt and the tool uses after it are the turn's rounds so far
  (:meth:`Agent.respond`'s ``tool_uses``); after anything else, the turn has no new prompt.
- ``tools`` are client tools; the front door returns a call instead of waiting for it.

Every refusal is an :class:`~.errors.HttpError` 400 naming the field (``param``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ...agent import (
    AgentOptions,
    PromptEntry,
    ResponseEntry,
    RetryPolicy,
    Sampling,
    Schema,
    TextOutput,
    ToolCall,
    ToolChoice,
    ToolChoiceKind,
    ToolDefinition,
    ToolUseEntry,
    parse_tool_definitions,
)
from ...agent.transcript import Entry
from ...errors import OamError
from ...models.scheduler import Priority
from .errors import from_oam, param_of, request_error
from .wire import (
    REQUEST_DECODER,
    AssistantMessage,
    ChatRequest,
    Content,
    DeveloperMessage,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "PRIORITY_HEADER",
    "QUEUE_TIMEOUT_HEADER",
    "TIMEOUT_HEADER",
    "Hints",
    "Plan",
    "Conversation",
    "decode_request",
    "hints_from_headers",
    "plan_turn",
    "read_messages",
]

PRIORITY_HEADER: Final = "x-oam-priority"
QUEUE_TIMEOUT_HEADER: Final = "x-oam-queue-timeout"
TIMEOUT_HEADER: Final = "x-oam-timeout"
MAX_STOP_SEQUENCES: Final = 4
# Rate limits are the client's to retry (it has Retry-After); other transient failures the agent
# still retries per step.
_FRONT_DOOR_RETRY: Final = RetryPolicy(max_retry_after=0.0)


@dataclass(frozen=True)
class Hints:
    """What the ``x-oam-*`` headers ask for: a scheduling class, the longest wait in the quota
    queue, the longest the whole request may take (seconds; ``None``: the server's defaults)."""

    priority: Priority = Priority.DIALOGUE
    queue_seconds: float | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Conversation:
    """The messages as the agent sees them."""

    instructions: str | None
    history: list[Entry]
    prompt: str
    tool_uses: list[ToolUseEntry]


@dataclass(frozen=True)
class Plan:
    """Everything needed to run the request as one turn."""

    model: str
    conversation: Conversation
    tools: list[ToolDefinition]
    schema: Schema | None
    options: AgentOptions
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    script: Any = None
    user: str | None = None
    timeout: float | None = None


def decode_request(body: bytes) -> ChatRequest:
    """The request body, or a 400 naming the bad field."""
    try:
        return REQUEST_DECODER.decode(body)
    except msgspec.ValidationError as exc:
        raise request_error(f"Invalid request: {exc}.", param=param_of(exc)) from exc
    except msgspec.DecodeError as exc:
        raise request_error(
            "We could not parse the JSON body of your request: it must be one JSON object "
            f"({exc})."
        ) from exc


def hints_from_headers(header: Callable[[str], str | None]) -> Hints:
    """The ``x-oam-*`` headers (``header(name)`` gives a value or ``None``)."""
    priority = Priority.DIALOGUE
    if (raw := header(PRIORITY_HEADER)) is not None:
        try:
            priority = Priority[raw.strip().upper()]
        except KeyError:
            names = ", ".join(p.name.lower() for p in Priority)
            raise request_error(f"Header {PRIORITY_HEADER} must be one of {names}; got {raw!r}.") from None
    return Hints(priority, _seconds(header, QUEUE_TIMEOUT_HEADER), _seconds(header, TIMEOUT_HEADER))


def _seconds(header: Callable[[str], str | None], name: str) -> float | None:
    raw = header(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise request_error(f"Header {name} must be a positive number of seconds; got {raw!r}.")
    return value


def plan_turn(request: ChatRequest, hints: Hints) -> Plan:
    """The turn a request asks for, or a 400 naming the field it cannot honour."""
    _refuse_unsupported(request)
    conversation = read_messages(request.messages)
    tools = _tools(request)
    schema = _schema(request)
    stop = _stop(request.stop)
    options = AgentOptions(
        tool_choice=_tool_choice(request, tools),
        temperature=request.temperature,
        max_response_tokens=request.max_completion_tokens or request.max_tokens,
        sampling=Sampling(top_p=request.top_p, seed=request.seed)
        if request.top_p is not None or request.seed is not None else None,
        priority=hints.priority.name.lower(),
        queue_seconds=hints.queue_seconds,
        retry=_FRONT_DOOR_RETRY,
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return Plan(request.model, conversation, tools, schema, options, stop, bool(request.stream), include_usage,
                request.script, request.user, hints.timeout)


def _refuse_unsupported(request: ChatRequest) -> None:
    if request.n is not None and request.n > 1:
        raise request_error("n > 1 is not supported: ask for one choice per request.", param="n")
    if request.logprobs or request.top_logprobs is not None:
        param = "logprobs" if request.logprobs else "top_logprobs"
        raise request_error("Log probabilities are not supported by this server.", param=param)
    if request.audio is not None or (request.modalities and set(request.modalities) != {"text"}):
        raise request_error("Only text output is supported.", param="audio" if request.audio is not None else "modalities")
    for name in ("functions", "function_call"):
        if getattr(request, name) is not None:
            raise request_error(f"'{name}' is deprecated and not supported: use 'tools' and 'tool_choice'.", param=name)
    if request.stream_options is not None and not request.stream:
        raise request_error("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                            param="stream_options")


# --- messages ---------------------------------------------------------------------------------


def read_messages(messages: Sequence[Any]) -> Conversation:
    """The messages as instructions, history, this turn's prompt and its tool uses so far."""
    if not messages:
        raise request_error("'messages' must contain at least one message.", param="messages")
    instructions: list[str] = []
    entries: list[Entry] = []
    waiting: dict[str, tuple[int, ToolCall]] = {}  # tool_call_id → (message index, call)
    for index, message in enumerate(messages):
        path = f"messages[{index}]"
        if not isinstance(message, ToolMessage):
            _all_answered(waiting)
        match message:
            case SystemMessage() | DeveloperMessage():
                if text := _text(message.content, f"{path}.content").strip():
                    instructions.append(text)
            case UserMessage():
                entries.append(PromptEntry(_text(message.content, f"{path}.content")))
            case AssistantMessage(tool_calls=calls) if calls:
                for number, call in enumerate(calls):
                    arguments = _arguments(call.function.arguments, f"{path}.tool_calls[{number}].function.arguments")
                    waiting[call.id] = (index, ToolCall(call.id, call.function.name, arguments))
            case AssistantMessage():
                entries.append(ResponseEntry(_text(message.content, f"{path}.content")))
            case ToolMessage():
                found = waiting.pop(message.tool_call_id, None)
                if found is None:
                    raise request_error(
                        f"No assistant tool call with id {message.tool_call_id!r} precedes this tool message.",
                        param=f"{path}.tool_call_id",
                    )
                entries.append(ToolUseEntry(found[1], TextOutput(_text(message.content, f"{path}.content"))))
    _all_answered(waiting)
    return _split_turn("\n\n".join(instructions) or None, entries, messages[-1])


def _all_answered(waiting: dict[str, tuple[int, ToolCall]]) -> None:
    if waiting:
        call_id, (index, _) = next(iter(waiting.items()))
        raise request_error(
            f"An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'; {call_id!r} has none.",
            param=f"messages[{index}].tool_calls",
        )


def _split_turn(instructions: str | None, entries: list[Entry], last: Any) -> Conversation:
    if isinstance(last, UserMessage):
        prompt = entries[-1]
        assert isinstance(prompt, PromptEntry)
        return Conversation(instructions, entries[:-1], prompt.text, [])
    if not isinstance(last, ToolMessage):
        return Conversation(instructions, entries, "", [])
    start = next((i for i in range(len(entries) - 1, -1, -1) if isinstance(entries[i], PromptEntry)), None)
    tail = entries if start is None else entries[start + 1:]
    uses = [entry for entry in tail if isinstance(entry, ToolUseEntry)]
    if start is None:
        return Conversation(instructions, [e for e in entries if not isinstance(e, ToolUseEntry)], "", uses)
    prompt = entries[start]
    assert isinstance(prompt, PromptEntry)
    return Conversation(instructions, entries[:start], prompt.text, uses)


def _text(content: Content, path: str) -> str:
    """A message's text: a string, or its text parts joined by newlines (refusals skipped)."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for number, part in enumerate(content):
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif not isinstance(part, RefusalPart):
            kind = type(part).__struct_config__.tag
            raise request_error(f"Content parts of type {kind!r} are not supported; send text.",
                                param=f"{path}[{number}].type")
    return "\n".join(texts)


def _arguments(text: str, path: str) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(text) if text.strip() else {}
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise request_error("Tool call arguments must be a JSON object.", param=path)
    return value


# --- tools, formats, sampling -------------------------------------------------------------------


def _tools(request: ChatRequest) -> list[ToolDefinition]:
    if not request.tools:
        return []
    wire = [{"name": t.function.name, "description": t.function.description, "parameters": t.function.parameters}
            for t in request.tools]
    try:
        tools, _ = parse_tool_definitions(wire, path="tools")
    except OamError as exc:
        raise from_oam(exc, param="tools") from exc
    return tools


def _tool_choice(request: ChatRequest, tools: list[ToolDefinition]) -> ToolChoice:
    choice = request.tool_choice
    if choice is None:
        return ToolChoice(ToolChoiceKind.AUTO if tools else ToolChoiceKind.NONE)
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in {t.name for t in tools}:
            raise request_error(f"tool_choice names {choice.function.name!r}, which is not among the tools.",
                                param="tool_choice")
        return ToolChoice(ToolChoiceKind.TOOL, choice.function.name)
    if choice == "required" and not tools:
        raise request_error("tool_choice 'required' needs at least one tool in 'tools'.", param="tool_choice")
    return ToolChoice(ToolChoiceKind(choice))


def _schema(request: ChatRequest) -> Schema | None:
    response_format = request.response_format
    try:
        if isinstance(response_format, JsonSchemaFormat):
            raw = response_format.json_schema.schema
            return Schema.compile({"type": "object"} if raw is None else raw, path="response_format.json_schema.schema")
        if isinstance(response_format, JsonObjectFormat):
            return Schema.compile({"type": "object"}, path="response_format")
    except OamError as exc:
        raise from_oam(exc, param="response_format") from exc
    return None


def _stop(stop: str | list[str] | None) -> tuple[str, ...]:
    sequences = [stop] if isinstance(stop, str) else list(stop or [])
    if len(sequences) > MAX_STOP_SEQUENCES:
        raise request_error(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences.", param="stop")
    if any(not sequence for sequence in sequences):
        raise request_error("'stop' sequences must not be empty.", param="stop")
    return tuple(sequences)
