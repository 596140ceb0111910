"""Google Gemini GenerateContent codec.

Encoding: ``POST /{api_version}/models/{model}:generateContent`` (streaming:
``:streamGenerateContent?alt=sse``); the body never holds ``model`` or ``stream``. System and
developer messages become ``systemInstruction``; assistant is ``model``, every other role
``user``; reasoning is a ``thought`` text part; a tool message becomes a ``functionResponse``
named after the matching earlier call (its response: the ``google::function_response``
extension object, else ``{"result": text}`` or ``{"error": text}``), and consecutive
function-response contents merge into one. ``generationConfig`` comes from an allow-list of
snake_case keys (settings: ``temperature``, ``top_p``, ``top_k``, ``max_output_tokens``,
``stop_sequences``, ``presence_penalty``, ``frequency_penalty``, ``seed``; output constraints:
``candidate_count`` (must be 1), ``response_mime_type``, ``response_schema``,
``response_json_schema``, ``response_modalities`` (must be ``["TEXT"]``)); any other key is
:func:`~._errors.unsupported` with ``compatibility.field`` naming it.

Thought signatures: a signed part decodes to its block followed by a ``google_thought_signature``
state holding the exact part and its position; decoding one needs complete Google affinity. On
replay the state must directly follow the block that produced it, at the same position
(candidate 0), and that block must encode to the stored part minus its signature; the stored part
is then sent verbatim. Anything else is unsupported, so signatures can never move.

Positions (Backplane counts raw parts; this codec counts encoded parts): consecutive unsigned
text parts of one kind form one block and one position, a signed part always starts and ends its
own block, and empty unsigned text parts are skipped. Streamed text then assembles to exactly the
blocks whose re-encoding reproduces the positions, so a signed call after streamed text replays.
Event ``index`` is this position (not the candidate index), and a call without an id gets
``google-<candidate>-<position>`` in both paths (Backplane uses two schemes).

Other decisions: ``STOP`` with function calls is reported as ``tool_use``; ``SPII`` and
``IMAGE_SAFETY`` are ``safety`` too; an unknown ``finishReason`` is
:func:`~._errors.lossy` (compatibility ``{"field":"finishReason","reason":<value>}``);
``provider_code`` is ``error.status`` (else the numeric ``code``); a ``RetryInfo.retryDelay`` in
``error.details`` gives ``retry_after``. There is no mapping for ``toolConfig``,
``safetySettings`` or ``thinkingConfig``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from ...errors import ErrorCode
from ._base import EncodedRequest, ErrorDetails, ProviderCodec, provider_code
from ._canonical import (
    Affinity,
    BlockEvent,
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
    ToolCallDone,
    ToolCallStart,
    ToolStatus,
    Usage,
    UsageEvent,
)
from ._errors import CodecError, incomplete_stream, invalid_request, lossy, malformed, unsupported
from ._ratelimit import MAX_RETRY_AFTER, parse_duration
from ._replay import check_replay, require_google_affinity
from ._sse import SseParser
from ._stream import StreamDecoder, assemble
from ._wire import arguments_object, as_list, as_object, count, encode_json, opt_str, tool_aware

__all__ = ["GoogleCodec", "GoogleStreamDecoder"]

_SIGNATURE = "google_thought_signature"
_FINISH = {
    "STOP": StopReason.STOP,
    "MAX_TOKENS": StopReason.MAX_OUTPUT_TOKENS,
    "SAFETY": StopReason.SAFETY,
    "RECITATION": StopReason.SAFETY,
    "BLOCKLIST": StopReason.SAFETY,
    "PROHIBITED_CONTENT": StopReason.SAFETY,
    "SPII": StopReason.SAFETY,
    "IMAGE_SAFETY": StopReason.SAFETY,
}
_SETTINGS = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "max_output_tokens": "maxOutputTokens",
    "stop_sequences": "stopSequences",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "seed": "seed",
}
_CONSTRAINTS = {
    "candidate_count": "candidateCount",
    "response_mime_type": "responseMimeType",
    "response_schema": "responseSchema",
    "response_json_schema": "responseJsonSchema",
    "response_modalities": "responseModalities",
}
# Output constraints the canonical model can only carry with one value.
_ONLY = {
    "candidate_count": (1, "canonical_subset_requires_one"),
    "response_modalities": (["TEXT"], "canonical_subset_requires_text"),
}
_CONTEXT_HINT = re.compile(r"token.*(exceed|limit|too long)", re.IGNORECASE)
_RETRY_INFO = "google.rpc.RetryInfo"


class GoogleCodec(ProviderCodec):
    name = "google"
    title = "Google"

    def __init__(self, *, api_version: str = "v1beta", **common: Any) -> None:
        super().__init__(**common)
        self.api_version = api_version

    def _encode(self, request: Request, stream: bool) -> EncodedRequest:
        system: list[dict[str, Any]] = []
        contents: list[dict[str, Any]] = []
        calls: dict[str, ToolCall] = {}
        for message in request.messages:
            if message.role in (Role.SYSTEM, Role.DEVELOPER):
                system.extend(self._parts(message.content, request.model, calls))
            elif message.role == Role.TOOL:
                _add_function_response(contents, _function_response(message, calls))
            else:
                role = "model" if message.role == Role.ASSISTANT else "user"
                contents.append({"role": role, "parts": self._parts(message.content, request.model, calls)})
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": system}
        if request.tools:
            declarations = [
                {"name": t.name, "description": t.description or "", "parameters": t.input_schema or {"type": "object"}}
                for t in request.tools
            ]
            body["tools"] = [{"functionDeclarations": declarations}]
        config = _generation_config(request)
        if config:
            body["generationConfig"] = config
        return EncodedRequest(self._path(request.model, stream), self._headers(stream), encode_json(body))

    def _path(self, model: str, stream: bool) -> str:
        operation = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/{self.api_version}/models/{quote(model, safe='')}:{operation}"

    def _parts(self, blocks: list[ContentBlock], model: str, calls: dict[str, ToolCall]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        after_part = False  # a signature may only follow the block that produced its part
        for block in blocks:
            if isinstance(block, ProviderState):
                check_replay(block, protocol=self.name, kind=_SIGNATURE, destination=self.affinity, model=model)
                _apply_signature(parts, block.payload, after_part)
                after_part = False
            else:
                parts.append(_part(block, calls))
                after_part = True
        return parts

    def _decode(self, obj: dict[str, Any], origin: Affinity) -> Response:
        candidates = _candidates(obj, required=True)
        if not candidates:
            raise malformed("Google response has no completion reason")
        candidate = candidates[0]
        walker = _PartWalker(_candidate_index(candidate), origin)
        events: list[StreamEvent] = []
        for part in _parts_of(candidate):
            walker.walk(part, events)
        finish = candidate.get("finishReason")
        if not isinstance(finish, str):
            raise malformed("Google response has no completion reason")
        stop = tool_aware(_finish_reason(finish), walker.has_calls)
        usage = _usage(obj["usageMetadata"]) if obj.get("usageMetadata") is not None else None
        output = assemble(events).output
        return Response(
            output=output, stop_reason=stop, usage=usage, model=opt_str(obj.get("modelVersion"), "modelVersion")
        )

    def _error_details(self, obj: dict[str, Any]) -> ErrorDetails:
        error = obj.get("error")
        if not isinstance(error, dict):
            return ErrorDetails()
        code = provider_code(error.get("status")) or provider_code(error.get("code"))
        message = error.get("message")
        hint = code == "INVALID_ARGUMENT" and isinstance(message, str) and _CONTEXT_HINT.search(message) is not None
        return ErrorDetails(provider_code=code, context_exceeded=hint, retry_after=_retry_delay(error.get("details")))

    def _new_decoder(self, origin: Affinity, sse: SseParser) -> GoogleStreamDecoder:
        return GoogleStreamDecoder(self, origin=origin, sse=sse)


class _PartWalker:
    """Turns one candidate's parts, in order and across frames, into events with positions."""

    def __init__(self, candidate: int, origin: Affinity) -> None:
        self._candidate = candidate
        self._origin = origin
        self._position = -1
        self._run: str | None = None  # kind of the open unsigned text run
        self.has_calls = False

    def walk(self, value: Any, events: list[StreamEvent]) -> None:
        part = as_object(value, "parts[]")
        signature = opt_str(part.get("thoughtSignature"), "parts[].thoughtSignature")
        if signature is not None:
            require_google_affinity(self._origin, decoding=True)
        if "text" in part:
            self._text(part, signature is not None, events)
        elif "inlineData" in part:
            self._inline(part, events)
        elif "functionCall" in part:
            self._call(part, events)
        else:
            kinds = ",".join(k for k in part if k != "thoughtSignature")[:64]
            raise lossy("Unsupported Google response part", {"field": "parts[]", "reason": kinds})
        if signature is not None:
            payload = {"part": part, "position": {"candidate": self._candidate, "part": self._position}}
            events.append(ProviderStateEvent(self._position, ProviderState(_SIGNATURE, payload, self._origin)))

    def _text(self, part: dict[str, Any], signed: bool, events: list[StreamEvent]) -> None:
        text = opt_str(part["text"], "parts[].text") or ""
        kind = "thought" if part.get("thought") is True else "text"
        if not text and not signed:
            return
        if signed or self._run != kind:
            self._position += 1
        self._run = None if signed else kind
        events.append(ReasoningDelta(self._position, text) if kind == "thought" else TextDelta(self._position, text))

    def _inline(self, part: dict[str, Any], events: list[StreamEvent]) -> None:
        inline = as_object(part["inlineData"], "parts[].inlineData")
        media_type = opt_str(inline.get("mimeType"), "inlineData.mimeType")
        data = opt_str(inline.get("data"), "inlineData.data")
        if not media_type or data is None:
            raise malformed("inlineData needs mimeType and data")
        self._next_block()
        events.append(BlockEvent(self._position, Image(media_type, data)))

    def _call(self, part: dict[str, Any], events: list[StreamEvent]) -> None:
        function = as_object(part["functionCall"], "parts[].functionCall")
        name = opt_str(function.get("name"), "functionCall.name")
        if not name:
            raise malformed("functionCall has no name")
        arguments = as_object(function.get("args") or {}, "functionCall.args")
        native_id = opt_str(function.get("id"), "functionCall.id") or None
        self._next_block()
        call_id = native_id or f"google-{self._candidate}-{self._position}"
        events.append(ToolCallStart(self._position, call_id, name, native_id=native_id))
        events.append(ToolCallDone(self._position, ToolCall(call_id, name, arguments, native_id=native_id)))
        self.has_calls = True

    def _next_block(self) -> None:
        self._position += 1
        self._run = None


class GoogleStreamDecoder(StreamDecoder):
    """``streamGenerateContent?alt=sse`` frames to canonical events (see the module docstring).

    Gemini has no protocol end event: a known ``finishReason`` marks the content finished and the
    terminal is emitted by a clean :meth:`finish`; a cancelled finish always fails.
    """

    def __init__(self, codec: GoogleCodec, *, origin: Affinity, sse: SseParser) -> None:
        super().__init__(origin=origin, sse=sse)
        self._codec = codec
        self._walkers: dict[int, _PartWalker] = {}
        self._finished: StopReason | None = None
        self._unknown_finish: str | None = None
        self._usage: Usage | None = None

    def _on_object(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        if "error" in obj:
            raise self._codec.in_band_error(obj, streaming=True)
        self.model = opt_str(obj.get("modelVersion"), "modelVersion") or self.model
        for candidate in _candidates(obj, required=False):
            self._on_candidate(candidate, events)
        if obj.get("usageMetadata") is not None:
            usage = _usage(obj["usageMetadata"])
            if usage != self._usage:
                self._usage = usage
                events.append(UsageEvent(usage))

    def _on_done(self, events: list[StreamEvent]) -> None:
        return None  # tolerated; Gemini does not send it and it proves nothing

    def _on_finish(self, cancelled: bool, events: list[StreamEvent]) -> None:
        if cancelled:
            raise incomplete_stream(cancelled=True)
        if self._unknown_finish is not None:
            raise _unknown_finish(self._unknown_finish)
        if self._finished is None:
            raise incomplete_stream(cancelled=False)
        has_calls = any(w.has_calls for w in self._walkers.values())
        events.append(Terminal(tool_aware(self._finished, has_calls)))

    def _on_candidate(self, candidate: dict[str, Any], events: list[StreamEvent]) -> None:
        index = _candidate_index(candidate)
        parts = _parts_of(candidate)
        if parts and (self._finished is not None or self._unknown_finish is not None):
            raise lossy("Google stream emitted content after finish reason")
        walker = self._walkers.setdefault(index, _PartWalker(index, self._origin))
        for part in parts:
            walker.walk(part, events)
        finish = opt_str(candidate.get("finishReason"), "finishReason")
        if finish in _FINISH:
            self._finished = _FINISH[finish]
        elif finish is not None:
            self._unknown_finish = finish


def _part(block: ContentBlock, calls: dict[str, ToolCall]) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"text": block.text}
    if isinstance(block, Reasoning):
        return {"text": block.text, "thought": True}
    if isinstance(block, Image):
        return {"inlineData": {"mimeType": block.media_type, "data": block.data}}
    assert isinstance(block, ToolCall)
    calls[block.id] = block
    call: dict[str, Any] = {
        "name": block.name,
        "args": arguments_object(block.arguments, f"tool call {block.id}", invalid_request),
    }
    if block.native_id:
        call["id"] = block.native_id
    return {"functionCall": call}


def _apply_signature(parts: list[dict[str, Any]], payload: Any, after_part: bool) -> None:
    """Swap the part just encoded for the exact signed original, if it is that part."""
    signed, candidate, position = _signed_payload(payload)
    if not after_part or candidate != 0 or position != len(parts) - 1:
        raise _moved()
    unsigned = {key: value for key, value in signed.items() if key != "thoughtSignature"}
    if parts[-1] != unsigned:
        raise _moved()
    parts[-1] = signed


def _signed_payload(payload: Any) -> tuple[dict[str, Any], Any, Any]:
    part = payload.get("part") if isinstance(payload, dict) else None
    position = payload.get("position") if isinstance(payload, dict) else None
    if (
        not isinstance(part, dict)
        or not isinstance(part.get("thoughtSignature"), str)
        or not isinstance(position, dict)
    ):
        raise unsupported(
            "Google thought signature state requires an exact signed part and position",
            {"field": "provider_state", "reason": "legacy_payload"},
        )
    return part, position.get("candidate"), position.get("part")


def _moved() -> CodecError:
    return unsupported(
        "Google thought signature moved from its original part/position",
        {"field": "provider_state", "reason": "moved"},
    )


def _function_response(message: Message, calls: dict[str, ToolCall]) -> dict[str, Any]:
    call = calls.get(message.tool_call_id or "")
    if call is None:
        raise invalid_request("tool result has no matching tool call")
    if any(not isinstance(b, Text) for b in message.content):
        raise unsupported("Google function responses carry text only", {"field": "tool.content", "reason": "text_only"})
    response = message.extensions.get("google::function_response")
    if response is None:
        key = "error" if message.status == ToolStatus.ERROR else "result"
        response = {key: "\n".join(b.text for b in message.content if isinstance(b, Text))}
    elif not isinstance(response, dict):
        raise invalid_request("google::function_response must be an object")
    function_response: dict[str, Any] = {"name": call.name, "response": response}
    if call.native_id:
        function_response["id"] = call.native_id
    return {"functionResponse": function_response}


def _add_function_response(contents: list[dict[str, Any]], part: dict[str, Any]) -> None:
    last = contents[-1] if contents else None
    if last and last["role"] == "user" and all("functionResponse" in p for p in last["parts"]):
        last["parts"].append(part)
    else:
        contents.append({"role": "user", "parts": [part]})


def _generation_config(request: Request) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for source, table in (("settings", _SETTINGS), ("output_constraints", _CONSTRAINTS)):
        for key, value in getattr(request, source).items():
            if key not in table:
                raise unsupported(
                    f"No Google mapping for {source}.{key}",
                    {"field": f"{source}.{key}", "reason": "unsupported_google_mapping"},
                )
            if key in _ONLY and value != _ONLY[key][0]:
                raise unsupported(
                    f"Google {key} must be {_ONLY[key][0]!r}", {"field": f"{source}.{key}", "reason": _ONLY[key][1]}
                )
            config[table[key]] = value
    return config


def _candidates(obj: dict[str, Any], *, required: bool) -> list[dict[str, Any]]:
    feedback = obj.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason") and not obj.get("candidates"):
        raise lossy(
            "Google blocked the prompt by safety policy",
            {"field": "promptFeedback.blockReason", "reason": str(feedback["blockReason"])[:64]},
            error_code=ErrorCode.GUARDRAIL_VIOLATION,
        )
    value = obj.get("candidates")
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise malformed("candidates must be a list")
    if len(value) > 1:
        raise lossy("Google returned several candidates", {"field": "candidates", "reason": "multiple"})
    return [as_object(c, "candidates[0]") for c in value]


def _candidate_index(candidate: dict[str, Any]) -> int:
    index = candidate.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise malformed("candidates[].index must be an integer")
    return index


def _parts_of(candidate: dict[str, Any]) -> list[Any]:
    content = as_object(candidate.get("content") or {}, "candidates[].content")
    return as_list(content.get("parts") or [], "candidates[].content.parts")


def _finish_reason(value: str) -> StopReason:
    if value not in _FINISH:
        raise _unknown_finish(value)
    return _FINISH[value]


def _unknown_finish(value: str) -> CodecError:
    return lossy("Unsupported Google finish reason", {"field": "finishReason", "reason": value[:64]})


def _usage(value: Any) -> Usage:
    usage = as_object(value, "usageMetadata")
    return Usage(
        source="google",
        input_tokens=count(usage.get("promptTokenCount"), "usageMetadata.promptTokenCount"),
        output_tokens=count(usage.get("candidatesTokenCount"), "usageMetadata.candidatesTokenCount"),
        cache_read_tokens=count(usage.get("cachedContentTokenCount"), "usageMetadata.cachedContentTokenCount"),
        reasoning_tokens=count(usage.get("thoughtsTokenCount"), "usageMetadata.thoughtsTokenCount"),
        total_tokens=count(usage.get("totalTokenCount"), "usageMetadata.totalTokenCount"),
    )


def _retry_delay(details: Any) -> float | None:
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith(_RETRY_INFO):
            delay = detail.get("retryDelay")
            seconds = parse_duration(delay) if isinstance(delay, str) else None
            return min(seconds, MAX_RETRY_AFTER) if seconds is not None else None
    return None
