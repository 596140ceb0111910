"""OpenAI Chat Completions codec (also OpenAI-compatible servers, MiniMax reasoning details).

Encoding: ``POST {path}`` (default ``/v1/chat/completions``) with ``model``, ``messages``,
``stream``, ``tools``; settings and output constraints are merged verbatim at the top level
(``temperature``, ``max_tokens``, ``tool_choice``, ``response_format``, …) and may not override
``model``, ``messages``, ``tools``, ``stream`` or ``reasoning_split``. The extension
``minimax::reasoning_split`` becomes ``reasoning_split``. Reasoning blocks become the message's
``reasoning_content``; ``minimax_reasoning_details`` states (after the replay check) its
``reasoning_details`` list.

Decoding: one choice only; text, ``reasoning_content``, ``reasoning_details`` (opaque state),
tool calls, in that order; ``finish_reason`` ``stop``/``tool_calls``/``length``/``content_filter``.
Streaming assembles tool calls by ``index`` (id, name and arguments may each arrive in pieces),
completes on the first ``finish_reason`` or on ``[DONE]``, and accepts usage-only chunks after it.

Decisions on Backplane's gaps (reference §12):

- a message whose content is exactly one text part is sent as a plain string (compatible servers
  often reject part arrays); any other content is a part array;
- a tool result with ``status: error`` is sent as ``"Error: " + text`` (the wire has no flag);
- a refusal (body or delta) is not representable: :func:`~._errors.lossy` with code ``refusal``;
- empty text and reasoning are skipped when decoding; empty tool arguments mean ``{}``;
- decoded tool calls carry parsed arguments in both paths, and a ``stop`` finish with tool calls
  is reported as ``tool_use``;
- ``stream_options.include_usage`` is added to streaming requests unless ``include_usage=False``
  (for servers that reject it) or the settings set ``stream_options`` themselves;
- a repeated id or name fragment equal to what is already held is not appended again (some
  compatible servers resend them on every chunk); choices with an empty delta after the terminal
  are ignored;
- a list ``reasoning_details`` payload is spliced on replay, not nested (fixes §12.15).
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import ErrorCode
from ._base import EncodedRequest, ErrorDetails, ProviderCodec, provider_code
from ._canonical import (
    Affinity,
    ContentBlock,
    Image,
    Message,
    ProviderState,
    ProviderStateEvent,
    Reasoning,
    ReasoningDelta,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    Terminal,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolDefinition,
    ToolStatus,
    Usage,
    UsageEvent,
)
from ._errors import CodecError, incomplete_stream, lossy, malformed, unsupported
from ._replay import check_replay
from ._sse import SseParser
from ._stream import StreamDecoder
from ._wire import (
    arguments_object,
    as_list,
    as_object,
    count,
    encode_json,
    merge_options,
    opt_str,
    tool_aware,
)

__all__ = ["OpenAICodec", "OpenAIStreamDecoder"]

_RESERVED = frozenset({"model", "messages", "tools", "stream", "reasoning_split"})
_FINISH = {
    "stop": StopReason.STOP,
    "tool_calls": StopReason.TOOL_USE,
    "length": StopReason.MAX_OUTPUT_TOKENS,
    "content_filter": StopReason.SAFETY,
}
_MINIMAX = "minimax_reasoning_details"
_TOOL_ERROR_PREFIX = "Error: "
_CONTEXT_HINT = re.compile(r"context[ _](length|window)", re.IGNORECASE)
_DELTA_CONTENT = ("content", "reasoning_content", "refusal", "reasoning_details", "tool_calls")


class OpenAICodec(ProviderCodec):
    name = "openai"
    title = "OpenAI"

    def __init__(self, *, path: str = "/v1/chat/completions", include_usage: bool = True, **common: Any) -> None:
        super().__init__(**common)
        self.path = path
        self.include_usage = include_usage

    def _encode(self, request: Request, stream: bool) -> EncodedRequest:
        wire_ids: dict[str, str] = {}
        messages = [self._message(m, request.model, wire_ids) for m in request.messages]
        body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": stream}
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        if stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        merge_options(body, request, _RESERVED)
        split = request.extensions.get("minimax::reasoning_split")
        if split is not None:
            body["reasoning_split"] = split
        return EncodedRequest(self.path, self._headers(stream), encode_json(body))

    def _message(self, message: Message, model: str, wire_ids: dict[str, str]) -> dict[str, Any]:
        if message.role == Role.TOOL:
            return _tool_result(message, wire_ids)
        parts: list[dict[str, Any]] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        details: list[Any] = []
        for block in message.content:
            if isinstance(block, Text):
                parts.append({"type": "text", "text": block.text})
            elif isinstance(block, Image):
                parts.append(
                    {"type": "image_url", "image_url": {"url": f"data:{block.media_type};base64,{block.data}"}}
                )
            elif isinstance(block, Reasoning):
                reasoning.append(block.text)
            elif isinstance(block, ToolCall):
                calls.append(_call(block, wire_ids))
            else:
                check_replay(block, protocol=self.name, kind=_MINIMAX, destination=self.affinity, model=model)
                details.extend(block.payload if isinstance(block.payload, list) else [block.payload])
        wire: dict[str, Any] = {"role": str(message.role), "content": _content(parts)}
        if reasoning:
            wire["reasoning_content"] = "".join(reasoning)
        if details:
            wire["reasoning_details"] = details
        if calls:
            wire["tool_calls"] = calls
        return wire

    def _decode(self, obj: dict[str, Any], origin: Affinity) -> Response:
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise malformed("choices must be a list")
        if len(choices) > 1:
            raise _several_choices()
        if not choices:
            raise malformed("OpenAI response has no completion reason")
        choice = as_object(choices[0], "choices[0]")
        message = as_object(choice.get("message") or {}, "choices[0].message")
        output = _message_blocks(message, origin)
        finish = choice.get("finish_reason")
        if finish is None:
            raise malformed("OpenAI response has no completion reason")
        stop = tool_aware(_finish_reason(finish), any(isinstance(b, ToolCall) for b in output))
        usage = _usage(obj["usage"]) if obj.get("usage") is not None else None
        return Response(output=output, stop_reason=stop, usage=usage, model=opt_str(obj.get("model"), "model"))

    def _error_details(self, obj: dict[str, Any]) -> ErrorDetails:
        error = obj.get("error")
        if not isinstance(error, dict):
            return ErrorDetails()
        code = provider_code(error.get("code")) or provider_code(error.get("type"))
        message = error.get("message")
        hint = isinstance(message, str) and _CONTEXT_HINT.search(message) is not None
        return ErrorDetails(provider_code=code, context_exceeded=hint)

    def _new_decoder(self, origin: Affinity, sse: SseParser) -> OpenAIStreamDecoder:
        return OpenAIStreamDecoder(self, origin=origin, sse=sse)


class _ToolBuffer:
    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class OpenAIStreamDecoder(StreamDecoder):
    """Chat Completions chunks to canonical events (see the module docstring)."""

    def __init__(self, codec: OpenAICodec, *, origin: Affinity, sse: SseParser) -> None:
        super().__init__(origin=origin, sse=sse)
        self._codec = codec
        self._calls: dict[int, _ToolBuffer] = {}
        self._terminal = False
        self._done = False

    def _on_object(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        if "error" in obj:
            raise self._codec.in_band_error(obj, streaming=True)
        self.model = opt_str(obj.get("model"), "model") or self.model
        choices = as_list(obj.get("choices") or [], "choices")
        if len(choices) > 1:
            raise _several_choices()
        for choice in choices:
            self._on_choice(as_object(choice, "choices[0]"), events)
        if obj.get("usage") is not None:
            events.append(UsageEvent(_usage(obj["usage"])))

    def _on_done(self, events: list[StreamEvent]) -> None:
        if not self._terminal:
            self._complete(StopReason.STOP, events)
        self._done = True

    def _on_finish(self, cancelled: bool, events: list[StreamEvent]) -> None:
        if not (self._terminal or self._done):
            raise incomplete_stream(cancelled=cancelled)

    def _on_choice(self, choice: dict[str, Any], events: list[StreamEvent]) -> None:
        delta = as_object(choice.get("delta") or {}, "delta")
        if self._terminal:
            if any(delta.get(key) for key in _DELTA_CONTENT):
                raise lossy("OpenAI stream sent content after terminal state")
            return
        index = choice.get("index", 0)
        if not isinstance(index, int):
            raise malformed("choices[0].index must be an integer")
        content = opt_str(delta.get("content"), "delta.content")
        if content:
            events.append(TextDelta(index, content))
        reasoning = opt_str(delta.get("reasoning_content"), "delta.reasoning_content")
        if reasoning:
            events.append(ReasoningDelta(index, reasoning))
        if delta.get("refusal") is not None:
            raise _refusal()
        details = delta.get("reasoning_details")
        if details is not None:
            events.append(ProviderStateEvent(index, _details_state(details, self._origin)))
        for position, fragment in enumerate(as_list(delta.get("tool_calls") or [], "delta.tool_calls")):
            self._on_tool_fragment(position, as_object(fragment, "delta.tool_calls[]"), events)
        if choice.get("finish_reason") is not None:
            self._complete(_finish_reason(choice["finish_reason"]), events)

    def _on_tool_fragment(self, position: int, fragment: dict[str, Any], events: list[StreamEvent]) -> None:
        index = fragment.get("index", position)
        if not isinstance(index, int):
            raise malformed("delta.tool_calls[].index must be an integer")
        buffer = self._calls.setdefault(index, _ToolBuffer())
        function = as_object(fragment.get("function") or {}, "delta.tool_calls[].function")
        buffer.id = _append(buffer.id, opt_str(fragment.get("id"), "delta.tool_calls[].id"))
        buffer.name = _append(buffer.name, opt_str(function.get("name"), "delta.tool_calls[].function.name"))
        arguments = opt_str(function.get("arguments"), "delta.tool_calls[].function.arguments") or ""
        buffer.arguments.append(arguments)
        events.append(ToolCallDelta(index, buffer.id, buffer.name, arguments, native_id=buffer.id or None))

    def _complete(self, stop: StopReason, events: list[StreamEvent]) -> None:
        for index in sorted(self._calls):
            buffer = self._calls[index]
            if not buffer.id or not buffer.name:
                raise malformed(f"tool_calls[{index}] has no id or name")
            arguments = arguments_object("".join(buffer.arguments) or "{}", f"tool_calls[{index}]")
            call = ToolCall(buffer.id, buffer.name, arguments, native_id=buffer.id)
            events.append(ToolCallDone(index, call))
        events.append(Terminal(tool_aware(stop, bool(self._calls))))
        self._terminal = True


def _append(held: str, fragment: str | None) -> str:
    if not fragment or fragment == held:
        return held
    return held + fragment


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts or None


def _tool_result(message: Message, wire_ids: dict[str, str]) -> dict[str, Any]:
    texts: list[str] = []
    for block in message.content:
        if not isinstance(block, Text):
            raise unsupported("OpenAI tool results carry text only", {"field": "tool.content", "reason": "text_only"})
        texts.append(block.text)
    text = "\n".join(texts)
    if message.status == ToolStatus.ERROR:
        text = _TOOL_ERROR_PREFIX + text
    call_id = message.tool_call_id or ""
    return {"role": "tool", "tool_call_id": wire_ids.get(call_id, call_id), "content": text}


def _call(call: ToolCall, wire_ids: dict[str, str]) -> dict[str, Any]:
    wire_id = call.native_id or call.id
    wire_ids[call.id] = wire_id
    arguments = call.arguments if isinstance(call.arguments, str) else encode_json(call.arguments).decode()
    return {"id": wire_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    function = {
        "name": tool.name,
        "description": tool.description or "",
        "parameters": tool.input_schema or {"type": "object"},
    }
    return {"type": "function", "function": function}


def _message_blocks(message: dict[str, Any], origin: Affinity) -> list[ContentBlock]:
    if message.get("refusal") is not None:
        raise _refusal()
    output: list[ContentBlock] = [Text(t) for t in _texts(message.get("content")) if t]
    reasoning = opt_str(message.get("reasoning_content"), "message.reasoning_content")
    if reasoning:
        output.append(Reasoning(reasoning))
    if message.get("reasoning_details") is not None:
        output.append(_details_state(message["reasoning_details"], origin))
    for index, call in enumerate(as_list(message.get("tool_calls") or [], "message.tool_calls")):
        output.append(_decoded_call(as_object(call, f"tool_calls[{index}]"), index))
    return output


def _texts(content: Any) -> list[str]:
    if content is None or isinstance(content, str):
        return [content] if content else []
    parts = as_list(content, "message.content")
    if not all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        raise lossy("Unsupported OpenAI response content", {"field": "message.content", "reason": "non_text_part"})
    return [opt_str(p.get("text"), "message.content[].text") or "" for p in parts]


def _decoded_call(call: dict[str, Any], index: int) -> ToolCall:
    function = as_object(call.get("function") or {}, f"tool_calls[{index}].function")
    call_id = opt_str(call.get("id"), f"tool_calls[{index}].id")
    name = opt_str(function.get("name"), f"tool_calls[{index}].function.name")
    if not call_id or not name:
        raise malformed(f"tool_calls[{index}] has no id or name")
    text = opt_str(function.get("arguments"), f"tool_calls[{index}].function.arguments") or "{}"
    return ToolCall(call_id, name, arguments_object(text, f"tool_calls[{index}]"), native_id=call_id)


def _details_state(details: Any, origin: Affinity) -> ProviderState:
    if not isinstance(details, dict | list):
        raise malformed("reasoning_details must be an object or a list")
    return ProviderState(_MINIMAX, details, origin)


def _finish_reason(value: Any) -> StopReason:
    if not isinstance(value, str):
        raise malformed("finish_reason must be a string")
    if value not in _FINISH:
        raise lossy("Unsupported OpenAI finish reason", {"field": "finish_reason", "reason": value[:64]})
    return _FINISH[value]


def _usage(value: Any) -> Usage:
    usage = as_object(value, "usage")
    prompt = as_object(usage.get("prompt_tokens_details") or {}, "usage.prompt_tokens_details")
    completion = as_object(usage.get("completion_tokens_details") or {}, "usage.completion_tokens_details")
    return Usage(
        source="openai",
        input_tokens=count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        output_tokens=count(usage.get("completion_tokens"), "usage.completion_tokens"),
        cache_read_tokens=count(prompt.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens"),
        reasoning_tokens=count(completion.get("reasoning_tokens"), "usage.completion_tokens_details.reasoning_tokens"),
        total_tokens=count(usage.get("total_tokens"), "usage.total_tokens"),
    )


def _several_choices() -> CodecError:
    return lossy("OpenAI returned several choices", {"field": "choices", "reason": "multiple"})


def _refusal() -> CodecError:
    return lossy(
        "OpenAI refusal cannot be represented", {"field": "refusal", "reason": "refusal"}, error_code=ErrorCode.REFUSAL
    )
