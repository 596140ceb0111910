"""Anthropic Messages codec.

Encoding: ``POST {path}`` (default ``/v1/messages``) with header ``anthropic-version``. System and
developer messages (wherever they appear) become the ``system`` block list; assistant messages stay
``assistant``; every other role is ``user``; tool messages become ``tool_result`` blocks
(``is_error`` from the status) in a user message, and consecutive tool results share one message.
Settings and output constraints are merged verbatim at the top level (``max_tokens``,
``temperature``, ``tool_choice``, ``thinking``, …) and may not override ``model``, ``messages``,
``system``, ``tools`` or ``stream``. ``anthropic_signed_thinking`` states replay (after the origin
check) as ``thinking`` blocks with their signature.

Decoding: ``text``, ``thinking`` (signed: opaque state; unsigned: reasoning) and ``tool_use``
blocks; ``stop_reason`` ``tool_use``/``max_tokens``/``refusal``, anything else is ``stop``.
Streaming is a per-event-type state machine over content-block indices; the terminal comes at
``message_stop``; an in-stream ``error`` event is a :class:`~._errors.ProviderError`.

Decisions on Backplane's gaps (reference §12):

- ``max_tokens`` (required by the API) defaults to ``default_max_tokens`` when the settings lack
  it; pass ``default_max_tokens=None`` to send none;
- unsigned reasoning cannot be replayed (the API rejects unsigned thinking): it is
  :func:`~._errors.unsupported`, except directly before the signed state that carries the same
  thinking (what a streamed response assembles to), where the state alone is sent;
- unknown block types (``redacted_thinking``, ``server_tool_use``, …) are :func:`~._errors.lossy`
  in both paths, and the initial text of a streamed text block is emitted, not dropped;
- usage snapshots from ``message_start`` and ``message_delta`` are merged field by field, so each
  usage event is the running total;
- an in-stream error has no HTTP status (Backplane invents 500); ``overloaded_error`` maps to
  ``busy``;
- a ``stop`` with tool calls is reported as ``tool_use``; ``[DONE]`` (some proxies add it) is
  ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

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
    ToolCallStart,
    ToolDefinition,
    ToolStatus,
    Usage,
    UsageEvent,
)
from ._errors import incomplete_stream, invalid_request, lossy, malformed, unsupported
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

__all__ = ["AnthropicCodec", "AnthropicStreamDecoder"]

_RESERVED = frozenset({"model", "messages", "system", "tools", "stream"})
_SIGNED = "anthropic_signed_thinking"
_STOP = {
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_OUTPUT_TOKENS,
    "refusal": StopReason.REFUSAL,
}
_CONTEXT_HINT = re.compile(r"prompt is too long|exceeds? (the )?context|context window", re.IGNORECASE)


class AnthropicCodec(ProviderCodec):
    name = "anthropic"
    title = "Anthropic"

    def __init__(
        self,
        *,
        path: str = "/v1/messages",
        version: str = "2023-06-01",
        default_max_tokens: int | None = 4096,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.path = path
        self.version = version
        self.default_max_tokens = default_max_tokens

    def _encode(self, request: Request, stream: bool) -> EncodedRequest:
        system: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        wire_ids: dict[str, str] = {}
        for message in request.messages:
            if message.role in (Role.SYSTEM, Role.DEVELOPER):
                system.extend(self._blocks(message.content, request.model, wire_ids, "system"))
            elif message.role == Role.TOOL:
                _add_tool_result(messages, self._tool_result(message, request.model, wire_ids))
            else:
                role = "assistant" if message.role == Role.ASSISTANT else "user"
                messages.append({"role": role, "content": self._blocks(message.content, request.model, wire_ids, role)})
        body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": stream}
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        if self.default_max_tokens is not None:
            body["max_tokens"] = self.default_max_tokens
        merge_options(body, request, _RESERVED)
        headers = self._headers(stream) | {"anthropic-version": self.version}
        return EncodedRequest(self.path, headers, encode_json(body))

    def _blocks(
        self, blocks: list[ContentBlock], model: str, wire_ids: dict[str, str], where: str
    ) -> list[dict[str, Any]]:
        wire: list[dict[str, Any]] = []
        for index, block in enumerate(blocks):
            if isinstance(block, Text):
                wire.append({"type": "text", "text": block.text})
            elif isinstance(block, Image):
                source = {"type": "base64", "media_type": block.media_type, "data": block.data}
                wire.append({"type": "image", "source": source})
            elif isinstance(block, Reasoning):
                if not _signed_next(blocks, index):
                    raise unsupported(
                        "Anthropic cannot replay unsigned reasoning",
                        {"field": f"{where}.reasoning", "reason": "unsigned"},
                    )
            elif isinstance(block, ToolCall):
                wire.append(_tool_use(block, wire_ids))
            else:
                check_replay(block, protocol=self.name, kind=_SIGNED, destination=self.affinity, model=model)
                wire.append(_thinking(block))
        return wire

    def _tool_result(self, message: Message, model: str, wire_ids: dict[str, str]) -> dict[str, Any]:
        if any(not isinstance(b, Text | Image) for b in message.content):
            raise unsupported(
                "Anthropic tool results carry text and images only",
                {"field": "tool.content", "reason": "text_or_image_only"},
            )
        call_id = message.tool_call_id or ""
        return {
            "type": "tool_result",
            "tool_use_id": wire_ids.get(call_id, call_id),
            "is_error": message.status == ToolStatus.ERROR,
            "content": self._blocks(message.content, model, wire_ids, "tool"),
        }

    def _decode(self, obj: dict[str, Any], origin: Affinity) -> Response:
        output: list[ContentBlock] = []
        for index, block in enumerate(as_list(obj.get("content"), "content")):
            decoded = _decoded_block(as_object(block, f"content[{index}]"), origin)
            if decoded is not None:
                output.append(decoded)
        reason = obj.get("stop_reason")
        if not isinstance(reason, str):
            raise malformed("Anthropic response has no completion reason")
        stop = tool_aware(_STOP.get(reason, StopReason.STOP), any(isinstance(b, ToolCall) for b in output))
        usage = _usage(obj["usage"]) if obj.get("usage") is not None else None
        return Response(output=output, stop_reason=stop, usage=usage, model=opt_str(obj.get("model"), "model"))

    def _error_details(self, obj: dict[str, Any]) -> ErrorDetails:
        error = obj.get("error")
        if not isinstance(error, dict):
            return ErrorDetails()
        message = error.get("message")
        hint = isinstance(message, str) and _CONTEXT_HINT.search(message) is not None
        return ErrorDetails(provider_code=provider_code(error.get("type")), context_exceeded=hint)

    def _new_decoder(self, origin: Affinity, sse: SseParser) -> AnthropicStreamDecoder:
        return AnthropicStreamDecoder(self, origin=origin, sse=sse)


class _Block:
    """One streamed content block being assembled."""

    def __init__(
        self, kind: str, *, call_id: str = "", name: str = "", initial_input: dict[str, Any] | None = None
    ) -> None:
        self.kind = kind
        self.call_id = call_id
        self.name = name
        self.initial_input = initial_input
        self.json: list[str] = []
        self.thinking: list[str] = []
        self.signature: list[str] = []
        self.open = True


class AnthropicStreamDecoder(StreamDecoder):
    """Messages stream events to canonical events (see the module docstring)."""

    def __init__(self, codec: AnthropicCodec, *, origin: Affinity, sse: SseParser) -> None:
        super().__init__(origin=origin, sse=sse)
        self._codec = codec
        self._blocks: dict[int, _Block] = {}
        self._terminal = False
        self._stop: StopReason | None = None
        self._usage: Usage | None = None
        self._handlers: dict[str, Callable[[dict[str, Any], list[StreamEvent]], None]] = {
            "message_start": self._message_start,
            "content_block_start": self._block_start,
            "content_block_delta": self._block_delta,
            "content_block_stop": self._block_stop,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
        }

    def _on_object(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        kind = obj.get("type")
        if kind == "ping":
            return
        if kind == "error":
            raise self._codec.in_band_error(obj, streaming=True)
        if self._terminal:
            self._after_terminal(kind, obj, events)
            return
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise lossy("Unsupported Anthropic stream event", {"field": "type", "reason": str(kind)[:64]})
        handler(obj, events)

    def _on_done(self, events: list[StreamEvent]) -> None:
        return None

    def _on_finish(self, cancelled: bool, events: list[StreamEvent]) -> None:
        if not self._terminal:
            raise incomplete_stream(cancelled=cancelled)

    def _after_terminal(self, kind: Any, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        if kind == "message_delta":
            self._message_delta(obj, events)
        elif kind != "message_stop":
            raise lossy("Anthropic stream sent content after terminal state")

    def _message_start(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        message = as_object(obj.get("message") or {}, "message")
        self.model = opt_str(message.get("model"), "message.model") or self.model
        if message.get("usage") is not None:
            self._add_usage(message["usage"], events)

    def _block_start(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        index = _index(obj)
        if index in self._blocks:
            raise malformed(f"content block {index} started twice")
        block = as_object(obj.get("content_block"), "content_block")
        kind = block.get("type")
        if kind == "tool_use":
            self._blocks[index] = started = _tool_block(block)
            events.append(ToolCallStart(index, started.call_id, started.name, native_id=started.call_id))
        elif kind == "text":
            self._blocks[index] = _Block("text")
            self._text(index, opt_str(block.get("text"), "content_block.text"), events)
        elif kind == "thinking":
            self._blocks[index] = _Block("thinking")
            self._thinking(index, opt_str(block.get("thinking"), "content_block.thinking"), events)
            self._blocks[index].signature.append(opt_str(block.get("signature"), "content_block.signature") or "")
        else:
            raise lossy("Unsupported Anthropic response content", {"field": "content_block", "reason": str(kind)[:64]})

    def _block_delta(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        index = _index(obj)
        block = self._open_block(index)
        delta = as_object(obj.get("delta"), "delta")
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            self._text(index, opt_str(delta.get("text"), "delta.text"), events)
        elif kind == "thinking_delta" and block.kind == "thinking":
            self._thinking(index, opt_str(delta.get("thinking"), "delta.thinking"), events)
        elif kind == "signature_delta" and block.kind == "thinking":
            block.signature.append(opt_str(delta.get("signature"), "delta.signature") or "")
        elif kind == "input_json_delta" and block.kind == "tool_use":
            fragment = opt_str(delta.get("partial_json"), "delta.partial_json") or ""
            block.json.append(fragment)
            events.append(ToolCallDelta(index, block.call_id, block.name, fragment, native_id=block.call_id))
        else:
            raise lossy("Unsupported Anthropic stream delta", {"field": "delta", "reason": str(kind)[:64]})

    def _block_stop(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        index = _index(obj)
        block = self._open_block(index)
        block.open = False
        if block.kind == "tool_use":
            text = "".join(block.json)
            arguments = arguments_object(text, f"content block {index}") if text else block.initial_input or {}
            call = ToolCall(block.call_id, block.name, arguments, native_id=block.call_id)
            events.append(ToolCallDone(index, call))
        elif block.kind == "thinking" and "".join(block.signature):
            payload = {"thinking": "".join(block.thinking), "signature": "".join(block.signature)}
            events.append(ProviderStateEvent(index, ProviderState(_SIGNED, payload, self._origin)))

    def _message_delta(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        delta = as_object(obj.get("delta") or {}, "delta")
        reason = opt_str(delta.get("stop_reason"), "delta.stop_reason")
        if reason is not None:
            self._stop = _STOP.get(reason, StopReason.STOP)
        if obj.get("usage") is not None:
            self._add_usage(obj["usage"], events)

    def _message_stop(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        if any(b.open and b.kind == "tool_use" for b in self._blocks.values()):
            raise malformed("Anthropic stream ended before content_block_stop")
        has_calls = any(b.kind == "tool_use" for b in self._blocks.values())
        events.append(Terminal(tool_aware(self._stop or StopReason.STOP, has_calls)))
        self._terminal = True

    def _text(self, index: int, text: str | None, events: list[StreamEvent]) -> None:
        if text:
            events.append(TextDelta(index, text))

    def _thinking(self, index: int, text: str | None, events: list[StreamEvent]) -> None:
        if text:
            self._blocks[index].thinking.append(text)
            events.append(ReasoningDelta(index, text))

    def _open_block(self, index: int) -> _Block:
        block = self._blocks.get(index)
        if block is None or not block.open:
            raise malformed(f"content block {index} is not open")
        return block

    def _add_usage(self, value: Any, events: list[StreamEvent]) -> None:
        usage = _usage(value)
        self._usage = self._usage.merged(usage) if self._usage else usage
        events.append(UsageEvent(self._usage))


def _add_tool_result(messages: list[dict[str, Any]], result: dict[str, Any]) -> None:
    last = messages[-1] if messages else None
    if last and last["role"] == "user" and all(b["type"] == "tool_result" for b in last["content"]):
        last["content"].append(result)
    else:
        messages.append({"role": "user", "content": [result]})


def _signed_next(blocks: list[ContentBlock], index: int) -> bool:
    """The reasoning at ``index`` is the visible copy of the signed state right after it."""
    after = blocks[index + 1] if index + 1 < len(blocks) else None
    current = blocks[index]
    return (
        isinstance(after, ProviderState)
        and after.kind == _SIGNED
        and isinstance(after.payload, dict)
        and isinstance(current, Reasoning)
        and after.payload.get("thinking") == current.text
    )


def _tool_use(call: ToolCall, wire_ids: dict[str, str]) -> dict[str, Any]:
    wire_id = call.native_id or call.id
    wire_ids[call.id] = wire_id
    arguments = arguments_object(call.arguments, f"tool call {call.id}", invalid_request)
    return {"type": "tool_use", "id": wire_id, "name": call.name, "input": arguments}


def _thinking(state: ProviderState) -> dict[str, Any]:
    payload = state.payload
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("thinking"), str)
        and isinstance(payload.get("signature"), str)
    ):
        raise unsupported(
            "Signed thinking requires its thinking and signature", {"field": "provider_state", "reason": "payload"}
        )
    return {"type": "thinking", "thinking": payload["thinking"], "signature": payload["signature"]}


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description or "",
        "input_schema": tool.input_schema or {"type": "object"},
    }


def _decoded_block(block: dict[str, Any], origin: Affinity) -> ContentBlock | None:
    kind = block.get("type")
    if kind == "text":
        text = opt_str(block.get("text"), "content[].text")
        return Text(text) if text else None
    if kind == "thinking":
        thinking = opt_str(block.get("thinking"), "content[].thinking") or ""
        signature = opt_str(block.get("signature"), "content[].signature")
        if signature:
            return ProviderState(_SIGNED, {"thinking": thinking, "signature": signature}, origin)
        return Reasoning(thinking) if thinking else None
    if kind == "tool_use":
        call = _tool_block(block)
        return ToolCall(call.call_id, call.name, call.initial_input or {}, native_id=call.call_id)
    raise lossy("Unsupported Anthropic response content", {"field": "content", "reason": str(kind)[:64]})


def _tool_block(block: dict[str, Any]) -> _Block:
    call_id = opt_str(block.get("id"), "tool_use.id")
    name = opt_str(block.get("name"), "tool_use.name")
    if not call_id or not name:
        raise malformed("tool_use block has no id or name")
    initial = as_object(block.get("input") or {}, "tool_use.input")
    return _Block("tool_use", call_id=call_id, name=name, initial_input=initial)


def _index(obj: dict[str, Any]) -> int:
    index = obj.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise malformed("content block index must be an integer")
    return index


def _usage(value: Any) -> Usage:
    usage = as_object(value, "usage")
    return Usage(
        source="anthropic",
        input_tokens=count(usage.get("input_tokens"), "usage.input_tokens"),
        output_tokens=count(usage.get("output_tokens"), "usage.output_tokens"),
        cache_read_tokens=count(usage.get("cache_read_input_tokens"), "usage.cache_read_input_tokens"),
        cache_write_tokens=count(usage.get("cache_creation_input_tokens"), "usage.cache_creation_input_tokens"),
    )
