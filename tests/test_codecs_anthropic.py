"""Anthropic Messages codec (reference §7, checklist §14 items 27-37)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from oam_actors import ErrorCode
from oam_actors.models.codecs import (
    Affinity,
    AnthropicCodec,
    CodecError,
    ErrorKind,
    Image,
    Message,
    Outcome,
    ProviderError,
    ProviderState,
    ProviderStateEvent,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    Stage,
    StopReason,
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
    assemble,
)

FIXTURES = Path(__file__).parent / "fixtures" / "providers" / "anthropic"
OPTS = Affinity(profile="p", endpoint="https://api.example")
SIGNED_BODY = {
    "model": "claude-test",
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 8, "output_tokens": 3},
    "content": [{"type": "thinking", "thinking": "private", "signature": "signed"}, {"type": "text", "text": "answer"}],
}


def sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def body(encoded: Any) -> dict[str, Any]:
    return msgspec.json.decode(encoded.body)


def shared_fixture(model: str = "claude-test") -> Request:
    return Request(
        model=model,
        messages=[
            Message(role=Role.USER, content=[Text("hello"), Image("image/png", "iVBORw0KGgo=")]),
            Message(role=Role.ASSISTANT, content=[ToolCall("call-1", "lookup", {"q": "x"})]),
            Message(role=Role.TOOL, tool_call_id="call-1", status=ToolStatus.ERROR, content=[Text("failed")]),
        ],
        tools=[ToolDefinition(name="lookup")],
    )


def signed_output(codec: AnthropicCodec, model: str = "m") -> list[Any]:
    return codec.decode_response(200, {}, msgspec.json.encode(SIGNED_BODY), model=model).output


def replay(output: list[Any], model: str) -> Request:
    return Request(
        model=model,
        messages=[Message(role=Role.USER, content=[Text("q")]), Message(role=Role.ASSISTANT, content=output)],
    )


# --- encoding ---------------------------------------------------------------------------------


def test_encode_shared_fixture() -> None:  # §14.27
    encoded = AnthropicCodec().encode_request(shared_fixture(), stream=True)
    assert encoded.path == "/v1/messages"
    assert encoded.headers["anthropic-version"] == "2023-06-01"
    assert not any(k in encoded.headers for k in ("x-api-key", "authorization"))
    wire = body(encoded)
    assert wire["stream"] is True and wire["max_tokens"] == 4096
    assert [b["type"] for b in wire["messages"][0]["content"]] == ["text", "image"]
    assert wire["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert wire["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "call-1", "name": "lookup", "input": {"q": "x"}}],
    }
    assert wire["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call-1",
                "is_error": True,
                "content": [{"type": "text", "text": "failed"}],
            }
        ],
    }
    assert wire["tools"] == [{"name": "lookup", "description": "", "input_schema": {"type": "object"}}]


def test_system_messages_and_consecutive_tool_results() -> None:
    request = Request(
        model="m",
        messages=[
            Message(role=Role.SYSTEM, content=[Text("You are Gorm.")]),
            Message(role=Role.USER, content=[Text("hi")]),
            Message(role=Role.DEVELOPER, content=[Text("Be brief.")]),
            Message(
                role=Role.ASSISTANT,
                content=[ToolCall("a", "f", '{"x":1}', native_id="toolu_a"), ToolCall("b", "f", {})],
            ),
            Message(role=Role.TOOL, tool_call_id="a", content=[Text("1")]),
            Message(role=Role.TOOL, tool_call_id="b", content=[Text("2")]),
        ],
        settings={"max_tokens": 100, "temperature": 0.5},
    )
    wire = body(AnthropicCodec().encode_request(request))
    assert wire["system"] == [{"type": "text", "text": "You are Gorm."}, {"type": "text", "text": "Be brief."}]
    assert wire["max_tokens"] == 100 and wire["temperature"] == 0.5
    assert wire["messages"][1]["content"][0] == {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"x": 1}}
    assert [m["role"] for m in wire["messages"]] == ["user", "assistant", "user"]
    assert [r["tool_use_id"] for r in wire["messages"][2]["content"]] == ["toolu_a", "b"]
    assert [r["is_error"] for r in wire["messages"][2]["content"]] == [False, False]


def test_default_max_tokens_can_be_turned_off() -> None:
    request = Request(model="m", messages=[Message(role=Role.USER, content=[Text("hi")])])
    assert "max_tokens" not in body(AnthropicCodec(default_max_tokens=None).encode_request(request))


def test_reserved_settings() -> None:  # §14.24
    request = Request(model="m", messages=[Message(role=Role.USER, content=[Text("hi")])], settings={"system": "x"})
    with pytest.raises(CodecError, match="cannot override core field: system"):
        AnthropicCodec().encode_request(request)


def test_raw_arguments_must_be_an_object() -> None:
    request = Request(model="m", messages=[Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", "[1]")])])
    with pytest.raises(CodecError, match="not complete JSON") as err:
        AnthropicCodec().encode_request(request)
    assert err.value.stage is Stage.VALIDATION


def test_unsigned_reasoning_cannot_be_replayed() -> None:  # §12.5
    request = Request(model="m", messages=[Message(role=Role.ASSISTANT, content=[Reasoning("hmm"), Text("x")])])
    with pytest.raises(CodecError) as err:
        AnthropicCodec().encode_request(request)
    assert err.value.compatibility == {"field": "assistant.reasoning", "reason": "unsigned"}


# --- replay binding ---------------------------------------------------------------------------


def test_decode_signed_thinking() -> None:  # §14.28
    codec = AnthropicCodec(affinity=Affinity(profile="p"))
    response = codec.decode_response(200, {}, msgspec.json.encode(SIGNED_BODY))
    assert response.output == [
        ProviderState(
            "anthropic_signed_thinking",
            {"thinking": "private", "signature": "signed"},
            Affinity(profile="p", protocol="anthropic"),
        ),
        Text("answer"),
    ]
    assert response.stop_reason is StopReason.STOP
    assert response.usage == Usage(source="anthropic", input_tokens=8, output_tokens=3)
    assert response.model == "claude-test"


def test_replay_to_same_origin_only() -> None:  # §14.29
    codec = AnthropicCodec(affinity=OPTS)
    output = signed_output(codec, "m")
    wire = body(codec.encode_request(replay(output, "m")))
    assert wire["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "private", "signature": "signed"},
        {"type": "text", "text": "answer"},
    ]
    with pytest.raises(CodecError) as err:
        codec.encode_request(replay(output, "changed"))
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert err.value.compatibility == {"field": "affinity", "reason": "cross_origin"}


def test_state_without_endpoint_or_model_is_incompatible() -> None:  # §14.29
    bare = signed_output(AnthropicCodec(affinity=Affinity(profile="p")), "m")
    with pytest.raises(CodecError) as err:
        AnthropicCodec(affinity=OPTS).encode_request(replay(bare, "m"))
    assert err.value.compatibility == {"field": "affinity", "reason": "missing_origin"}
    no_model = AnthropicCodec(affinity=OPTS).decode_response(200, {}, msgspec.json.encode(SIGNED_BODY)).output
    with pytest.raises(CodecError, match="cannot be replayed"):
        AnthropicCodec(affinity=OPTS).encode_request(replay(no_model, "m"))


def test_cross_origin_replay() -> None:  # §14.30
    source = AnthropicCodec(affinity=Affinity(profile="source", endpoint="https://source.invalid"))
    output = signed_output(source, "source-model")
    different = AnthropicCodec(affinity=Affinity(profile="different", endpoint="https://different.invalid"))
    with pytest.raises(CodecError) as err:
        different.encode_request(replay(output, "different-model"))
    assert err.value.compatibility == {"field": "affinity", "reason": "cross_origin"}


def test_account_in_origin_must_be_matched() -> None:
    output = signed_output(AnthropicCodec(affinity=Affinity(profile="p", endpoint="e", account="a")), "m")
    with pytest.raises(CodecError, match="cannot be replayed"):
        AnthropicCodec(affinity=Affinity(profile="p", endpoint="e")).encode_request(replay(output, "m"))
    AnthropicCodec(affinity=Affinity(profile="p", endpoint="e", account="a")).encode_request(replay(output, "m"))


# --- non-streaming decoding -------------------------------------------------------------------


def test_decode_fixture() -> None:
    response = AnthropicCodec(affinity=OPTS).decode_response(
        200, {}, (FIXTURES / "message_thinking_tool_use.json").read_bytes(), model="m"
    )
    assert [type(b).__name__ for b in response.output] == ["ProviderState", "Text", "ToolCall"]
    assert response.output[2] == ToolCall("toolu_01", "lookup_item", {"q": "axe"}, native_id="toolu_01")
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.usage == Usage(
        source="anthropic", input_tokens=472, output_tokens=89, cache_read_tokens=128, cache_write_tokens=0
    )


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        ("max_tokens", StopReason.MAX_OUTPUT_TOKENS),
        ("refusal", StopReason.REFUSAL),
        ("stop_sequence", StopReason.STOP),
        ("pause_turn", StopReason.STOP),
    ],
)
def test_stop_reasons(reason: str, stop: StopReason) -> None:
    raw = {"stop_reason": reason, "content": [{"type": "text", "text": "x"}]}
    assert AnthropicCodec().decode_response(200, {}, msgspec.json.encode(raw)).stop_reason is stop


def test_refusal_maps_to_refusal_code() -> None:
    assert StopReason.REFUSAL.error_code is ErrorCode.REFUSAL
    assert StopReason.SAFETY.error_code is ErrorCode.GUARDRAIL_VIOLATION
    assert StopReason.STOP.error_code is None


def test_unsupported_content_and_missing_stop_reason() -> None:
    raw = {"stop_reason": "end_turn", "content": [{"type": "redacted_thinking", "data": "x"}]}
    with pytest.raises(CodecError, match="Unsupported Anthropic response content") as err:
        AnthropicCodec().decode_response(200, {}, msgspec.json.encode(raw))
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.compatibility == {
        "field": "content",
        "reason": "redacted_thinking",
    }
    with pytest.raises(CodecError, match="no completion reason"):
        AnthropicCodec().decode_response(200, {}, b'{"content":[]}')
    with pytest.raises(CodecError, match="content must be a list"):
        AnthropicCodec().decode_response(200, {}, b'{"stop_reason":"end_turn"}')


def test_unsigned_thinking_and_empty_text() -> None:
    raw = {"stop_reason": "end_turn", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": ""}]}
    assert AnthropicCodec().decode_response(200, {}, msgspec.json.encode(raw)).output == [Reasoning("hm")]


def test_decode_error_401() -> None:  # §14.33
    raw = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    error = AnthropicCodec().decode_error(401, {}, msgspec.json.encode(raw))
    assert (error.kind, error.stage, error.http_status, error.provider_code) == (
        ErrorKind.AUTHENTICATION,
        Stage.RESPONSE,
        401,
        "authentication_error",
    )
    assert error.message == "Anthropic provider request failed"
    assert not error.retryable and error.outcome is Outcome.KNOWN
    assert error.error_code is ErrorCode.MODEL_UNAVAILABLE


def test_decode_error_overloaded_and_rate_limited() -> None:  # §14.37
    overloaded = AnthropicCodec().decode_error(529, {}, (FIXTURES / "error_overloaded.json").read_bytes())
    assert overloaded.kind is ErrorKind.UPSTREAM_ERROR and overloaded.retryable
    assert overloaded.error_code is ErrorCode.BUSY and overloaded.provider_code == "overloaded_error"
    limited = AnthropicCodec().decode_error(
        429, {"retry-after": "20"}, b'{"type":"error","error":{"type":"rate_limit_error"}}'
    )
    assert limited.kind is ErrorKind.RATE_LIMITED and limited.retryable
    assert limited.retry_after == 20.0 and limited.error_code is ErrorCode.RATE_LIMITED


def test_prompt_too_long_is_context_size_exceeded() -> None:
    error = AnthropicCodec().decode_error(400, {}, (FIXTURES / "error_prompt_too_long.json").read_bytes())
    assert error.error_code is ErrorCode.CONTEXT_SIZE_EXCEEDED
    assert error.kind is ErrorKind.INVALID_REQUEST and "208310" not in error.message


# --- streaming --------------------------------------------------------------------------------


def test_stream_fixture_full_event_list() -> None:  # §14.34 (usage merged on purpose, §12.8)
    codec = AnthropicCodec(affinity=OPTS)
    decoder = codec.new_stream(model="m")
    events = decoder.feed((FIXTURES / "stream_thinking_tool_use.sse").read_bytes())
    origin = Affinity(profile="p", protocol="anthropic", endpoint="https://api.example", model="m")
    assert events == [
        UsageEvent(Usage(source="anthropic", input_tokens=25, output_tokens=1)),
        ReasoningDelta(0, "Check stock."),
        ProviderStateEvent(
            0,
            ProviderState("anthropic_signed_thinking", {"thinking": "Check stock.", "signature": "EqQBCkgIAR"}, origin),
        ),
        ToolCallStart(1, "toolu_01", "lookup_item", native_id="toolu_01"),
        ToolCallDelta(1, "toolu_01", "lookup_item", '{"q":', native_id="toolu_01"),
        ToolCallDelta(1, "toolu_01", "lookup_item", '"axe"}', native_id="toolu_01"),
        ToolCallDone(1, ToolCall("toolu_01", "lookup_item", {"q": "axe"}, native_id="toolu_01")),
        UsageEvent(Usage(source="anthropic", input_tokens=25, output_tokens=40)),
        Terminal(StopReason.TOOL_USE),
    ]
    assert decoder.finish() == []
    assert decoder.model == "claude-x"
    # The assembled output replays: the visible reasoning is covered by its signed state.
    output = assemble(events).output
    wire = body(codec.encode_request(replay(output, "m")))
    assert wire["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Check stock.", "signature": "EqQBCkgIAR"},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_item", "input": {"q": "axe"}},
    ]


def test_stream_split_byte_by_byte() -> None:
    wire = (FIXTURES / "stream_thinking_tool_use.sse").read_bytes()
    whole = AnthropicCodec(affinity=OPTS).new_stream(model="m")
    expected = whole.feed(wire) + whole.finish()
    pieces = AnthropicCodec(affinity=OPTS).new_stream(model="m")
    events = [e for i in range(len(wire)) for e in pieces.feed(wire[i : i + 1])] + pieces.finish()
    assert events == expected


def test_text_block_with_initial_text() -> None:  # §12.6
    decoder = AnthropicCodec().new_stream()
    wire = (
        sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}})
        + sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}})
        + sse({"type": "content_block_stop", "index": 0})
        + sse({"type": "message_stop"})
    )
    assert decoder.feed(wire) == [TextDelta(0, "Hi"), TextDelta(0, " there"), Terminal(StopReason.STOP)]


def test_tool_block_left_open_at_message_stop() -> None:  # §14.31
    wire = (
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "call-1", "name": "f", "input": {}},
            }
        )
        + sse({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}})
        + sse({"type": "message_stop"})
    )
    with pytest.raises(CodecError, match="ended before content_block_stop") as err:
        AnthropicCodec().new_stream().feed(wire)
    assert err.value.kind is ErrorKind.INVALID_REQUEST


def test_tool_block_with_initial_input_only() -> None:
    wire = sse(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "c", "name": "f", "input": {"a": 1}},
        }
    ) + sse({"type": "content_block_stop", "index": 0})
    events = AnthropicCodec().new_stream().feed(wire)
    assert events[-1] == ToolCallDone(0, ToolCall("c", "f", {"a": 1}, native_id="c"))


def test_content_after_terminal() -> None:  # §14.32
    decoder = AnthropicCodec().new_stream()
    assert decoder.feed(sse({"type": "message_stop"})) == [Terminal(StopReason.STOP)]
    assert decoder.feed(sse({"type": "message_stop"})) == []
    with pytest.raises(CodecError, match="content after terminal state") as err:
        decoder.feed(
            sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "late"}})
        )
    assert err.value.kind is ErrorKind.INCOMPATIBLE


def test_message_delta_after_terminal_is_allowed() -> None:
    decoder = AnthropicCodec().new_stream()
    decoder.feed(sse({"type": "message_stop"}))
    events = decoder.feed(sse({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}}))
    assert events == [UsageEvent(Usage(source="anthropic", output_tokens=9))]


def test_unsupported_delta_ping_and_unknown_event() -> None:  # §14.35
    start = sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    with pytest.raises(CodecError, match="Unsupported Anthropic stream delta") as err:
        AnthropicCodec().new_stream().feed(
            start + sse({"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta"}})
        )
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert AnthropicCodec().new_stream().feed(sse({"type": "ping"})) == []
    with pytest.raises(CodecError, match="Unsupported Anthropic stream event"):
        AnthropicCodec().new_stream().feed(sse({"type": "mystery"}))


def test_unknown_block_types_are_rejected_in_the_stream() -> None:  # §12.6
    start = sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "x"}}
    )
    with pytest.raises(CodecError, match="Unsupported Anthropic response content"):
        AnthropicCodec().new_stream().feed(start)


def test_in_stream_error_event() -> None:  # §14.36 (no invented HTTP status)
    with pytest.raises(ProviderError) as err:
        AnthropicCodec().new_stream().feed(
            sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        )
    assert err.value.kind is ErrorKind.UPSTREAM_ERROR and err.value.provider_code == "overloaded_error"
    assert err.value.retryable and err.value.error_code is ErrorCode.BUSY and err.value.http_status is None
    assert err.value.message == "Anthropic provider stream failed"
