"""OpenAI Chat Completions codec (reference §6, checklist §14 items 13-26)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from oam_actors import ErrorCode
from oam_actors.models.codecs import (
    Affinity,
    CodecError,
    ErrorKind,
    Image,
    Message,
    OpenAICodec,
    Outcome,
    ProviderError,
    ProviderState,
    ProviderStateEvent,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    StopReason,
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
    assemble,
)

FIXTURES = Path(__file__).parent / "fixtures" / "providers" / "openai"
ORIGIN = Affinity(profile="p", endpoint="https://api.example")


def sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def body(encoded: Any) -> dict[str, Any]:
    return msgspec.json.decode(encoded.body)


def user(text: str) -> Message:
    return Message(role=Role.USER, content=[Text(text)])


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    function = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    fragment: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        fragment["id"] = id
    return fragment


# --- encoding ---------------------------------------------------------------------------------


def test_encode_reference_example() -> None:
    request = Request(
        model="gpt-4.1-mini",
        messages=[
            Message(role=Role.SYSTEM, content=[Text("You are Gorm the smith.")]),
            Message(role=Role.USER, content=[Text("What is this?"), Image("image/png", "iVBORw0")]),
            Message(role=Role.ASSISTANT, content=[ToolCall("call_7", "lookup_item", {"q": "sword"})]),
            Message(role=Role.TOOL, tool_call_id="call_7", content=[Text("iron sword, 12 gold")]),
        ],
        tools=[
            ToolDefinition(name="lookup_item", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
        ],
        settings={"temperature": 0.7, "max_tokens": 256, "tool_choice": "auto"},
    )
    encoded = OpenAICodec().encode_request(request, stream=True)
    assert encoded.path == "/v1/chat/completions"
    assert encoded.headers == {"content-type": "application/json", "accept": "text/event-stream"}
    assert body(encoded) == {
        "model": "gpt-4.1-mini",
        "stream": True,
        "messages": [
            {"role": "system", "content": "You are Gorm the smith."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "lookup_item", "arguments": '{"q":"sword"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_7", "content": "iron sword, 12 gold"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup_item",
                    "description": "",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
        "temperature": 0.7,
        "max_tokens": 256,
        "tool_choice": "auto",
        "stream_options": {"include_usage": True},
    }


def test_encode_non_stream_has_no_stream_options_and_raw_arguments_are_kept() -> None:
    request = Request(
        model="m",
        messages=[
            Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", '{"a": 1.0}', native_id="call_n")]),
            Message(role=Role.TOOL, tool_call_id="c", status=ToolStatus.ERROR, content=[Text("boom"), Text("again")]),
        ],
    )
    wire = body(OpenAICodec().encode_request(request))
    assert wire["stream"] is False and "stream_options" not in wire
    assert wire["messages"][0]["tool_calls"][0]["id"] == "call_n"
    assert wire["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1.0}'
    assert wire["messages"][1] == {"role": "tool", "tool_call_id": "call_n", "content": "Error: boom\nagain"}


def test_include_usage_can_be_disabled_or_overridden() -> None:
    request = Request(model="m", messages=[user("hi")])
    assert "stream_options" not in body(OpenAICodec(include_usage=False).encode_request(request, stream=True))
    custom = Request(model="m", messages=[user("hi")], settings={"stream_options": {"include_usage": False}})
    assert body(OpenAICodec().encode_request(custom, stream=True))["stream_options"] == {"include_usage": False}


@pytest.mark.parametrize("key", ["model", "messages", "tools", "stream", "reasoning_split"])
def test_settings_cannot_override_core_fields(key: str) -> None:  # §14.24
    request = Request(model="m", messages=[user("hi")], settings={key: "override"})
    with pytest.raises(CodecError, match=f"cannot override core field: {key}") as err:
        OpenAICodec().encode_request(request)
    assert err.value.kind is ErrorKind.INVALID_REQUEST and err.value.outcome is Outcome.NOT_SUBMITTED


def test_output_constraints_are_merged() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}}
    request = Request(model="m", messages=[user("hi")], output_constraints={"response_format": fmt})
    assert body(OpenAICodec().encode_request(request))["response_format"] == fmt


def test_minimax_replay() -> None:  # §14.25, updated on purpose: list payloads are spliced (§12.15)
    payload = [{"type": "reasoning", "text": "opaque"}]
    state = ProviderState(
        "minimax_reasoning_details",
        payload,
        Affinity(profile="p", protocol="openai", endpoint="https://api.example", model="m"),
    )
    request = Request(
        model="m",
        messages=[Message(role=Role.ASSISTANT, content=[Reasoning("why"), state])],
        extensions={"minimax::reasoning_split": True},
    )
    wire = body(OpenAICodec(affinity=ORIGIN).encode_request(request))
    assert wire["reasoning_split"] is True
    assert wire["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "why",
            "reasoning_details": [{"type": "reasoning", "text": "opaque"}],
        }
    ]
    object_state = msgspec.structs.replace(state, payload={"token": "t"})
    request = msgspec.structs.replace(request, messages=[Message(role=Role.ASSISTANT, content=[object_state])])
    assert body(OpenAICodec(affinity=ORIGIN).encode_request(request))["messages"][0]["reasoning_details"] == [
        {"token": "t"}
    ]


def test_minimax_replay_to_another_endpoint_is_incompatible() -> None:
    state = ProviderState(
        "minimax_reasoning_details", {"t": 1}, Affinity(profile="p", protocol="openai", endpoint="https://a", model="m")
    )
    request = Request(model="m", messages=[Message(role=Role.ASSISTANT, content=[state])])
    with pytest.raises(CodecError) as err:
        OpenAICodec(affinity=Affinity(profile="p", endpoint="https://b")).encode_request(request)
    assert err.value.compatibility == {"field": "affinity", "reason": "cross_origin"}


def test_other_provider_state_kinds_are_incompatible() -> None:
    state = ProviderState(
        "anthropic_signed_thinking", {}, Affinity(profile="p", protocol="openai", endpoint="e", model="m")
    )
    request = Request(model="m", messages=[Message(role=Role.ASSISTANT, content=[state])])
    with pytest.raises(CodecError, match="Unsupported openai provider state") as err:
        OpenAICodec(affinity=ORIGIN).encode_request(request)
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.error_code is ErrorCode.INVALID_REQUEST


def test_tool_message_with_reasoning_is_incompatible() -> None:  # §14.26
    request = Request(
        model="m",
        messages=[
            Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", {})]),
            Message(role=Role.TOOL, tool_call_id="c", content=[Reasoning("r")]),
        ],
    )
    with pytest.raises(CodecError) as err:
        OpenAICodec().encode_request(request)
    assert err.value.kind is ErrorKind.INCOMPATIBLE


# --- non-streaming decoding -------------------------------------------------------------------


def test_decode_reference_example_fixture() -> None:
    response = OpenAICodec().decode_response(200, {}, (FIXTURES / "chat_completion_tool_calls.json").read_bytes())
    assert response.output == [ToolCall("call_9", "lookup_item", {"q": "axe"}, native_id="call_9")]
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.usage == Usage(
        source="openai", input_tokens=41, output_tokens=12, cache_read_tokens=32, reasoning_tokens=0, total_tokens=53
    )
    assert response.model == "gpt-4.1-mini-2025-04-14"


def test_decode_text_fixture() -> None:
    response = OpenAICodec().decode_response(
        200, [("Content-Type", "application/json")], (FIXTURES / "chat_completion_text.json").read_bytes()
    )
    assert response.output == [Text("Nine gold for the axe.")]
    assert response.stop_reason is StopReason.STOP


def test_decode_minimax_reasoning() -> None:  # §14.20
    raw = {
        "model": "m",
        "choices": [
            {
                "finish_reason": "stop",
                "message": {
                    "content": "ok",
                    "reasoning_content": "why",
                    "reasoning_details": [{"type": "reasoning", "text": "opaque"}],
                },
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    }
    response = OpenAICodec(affinity=ORIGIN).decode_response(200, {}, msgspec.json.encode(raw), model="m")
    origin = Affinity(profile="p", protocol="openai", endpoint="https://api.example", model="m")
    assert response.output == [
        Text("ok"),
        Reasoning("why"),
        ProviderState("minimax_reasoning_details", [{"type": "reasoning", "text": "opaque"}], origin),
    ]
    assert response.stop_reason is StopReason.STOP and response.usage is not None and response.usage.total_tokens == 3
    # …and it replays to the same backend and model.
    request = Request(model="m", messages=[Message(role=Role.ASSISTANT, content=response.output)])
    assert body(OpenAICodec(affinity=ORIGIN).encode_request(request))["messages"][0]["content"] == "ok"


def test_refusal_and_empty_body() -> None:  # §14.21
    raw = {"choices": [{"finish_reason": "stop", "message": {"content": None, "refusal": "blocked"}}]}
    with pytest.raises(CodecError) as err:
        OpenAICodec().decode_response(200, {}, msgspec.json.encode(raw))
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.error_code is ErrorCode.REFUSAL
    assert "blocked" not in err.value.message
    with pytest.raises(CodecError, match="choices must be a list"):
        OpenAICodec().decode_response(200, {}, b"{}")


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", StopReason.STOP), ("length", StopReason.MAX_OUTPUT_TOKENS), ("content_filter", StopReason.SAFETY)],
)
def test_finish_reasons(finish: str, stop: StopReason) -> None:  # §14.22
    raw = {"choices": [{"finish_reason": finish, "message": {"content": "x"}}]}
    assert OpenAICodec().decode_response(200, {}, msgspec.json.encode(raw)).stop_reason is stop


def test_missing_and_unknown_finish_reasons() -> None:  # §14.22
    with pytest.raises(CodecError, match="no completion reason") as err:
        OpenAICodec().decode_response(200, {}, b'{"choices":[{"message":{"content":"x"}}]}')
    assert err.value.kind is ErrorKind.INVALID_REQUEST
    with pytest.raises(CodecError) as err:
        OpenAICodec().decode_response(200, {}, b'{"choices":[{"finish_reason":"eos","message":{"content":"x"}}]}')
    assert err.value.compatibility == {"field": "finish_reason", "reason": "eos"}


def test_several_choices_and_non_text_parts_are_incompatible() -> None:
    two = {"choices": [{"finish_reason": "stop", "message": {}}, {"finish_reason": "stop", "message": {}}]}
    with pytest.raises(CodecError, match="several choices"):
        OpenAICodec().decode_response(200, {}, msgspec.json.encode(two))
    audio = {"choices": [{"finish_reason": "stop", "message": {"content": [{"type": "audio"}]}}]}
    with pytest.raises(CodecError) as err:
        OpenAICodec().decode_response(200, {}, msgspec.json.encode(audio))
    assert err.value.kind is ErrorKind.INCOMPATIBLE


def test_empty_text_is_skipped_and_text_parts_are_accepted() -> None:
    raw = {
        "choices": [
            {
                "finish_reason": "stop",
                "message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]},
            }
        ]
    }
    assert OpenAICodec().decode_response(200, {}, msgspec.json.encode(raw)).output == [Text("a")]
    raw = {"choices": [{"finish_reason": "stop", "message": {"content": ""}}]}
    assert OpenAICodec().decode_response(200, {}, msgspec.json.encode(raw)).output == []


def test_negative_usage_is_malformed() -> None:
    raw = {"choices": [{"finish_reason": "stop", "message": {"content": "x"}}], "usage": {"prompt_tokens": -1}}
    with pytest.raises(CodecError, match="prompt_tokens must be a non-negative integer"):
        OpenAICodec().decode_response(200, {}, msgspec.json.encode(raw))


def test_error_status_raises_provider_error() -> None:  # §14.23
    with pytest.raises(ProviderError) as err:
        OpenAICodec().decode_response(401, {}, b'{"error":{"message":"sk-secret-signature"}}')
    assert err.value.kind is ErrorKind.AUTHENTICATION
    assert err.value.error_code is ErrorCode.MODEL_UNAVAILABLE
    assert "secret" not in err.value.message and "secret" not in repr(err.value)


def test_error_body_on_2xx_is_a_provider_error() -> None:
    with pytest.raises(ProviderError) as err:
        OpenAICodec().decode_response(200, {}, b'{"error":{"message":"x","code":"rate_limit_exceeded"}}')
    assert err.value.http_status is None and err.value.error_code is ErrorCode.RATE_LIMITED


# --- streaming --------------------------------------------------------------------------------


def test_stream_fixture() -> None:
    decoder = OpenAICodec().new_stream()
    events = decoder.feed((FIXTURES / "chat_stream_text_tools.sse").read_bytes()) + decoder.finish()
    assert events == [
        TextDelta(0, "Hel"),
        TextDelta(0, "lo"),
        ToolCallDelta(0, "call_1", "lookup_item", "", native_id="call_1"),
        ToolCallDelta(0, "call_1", "lookup_item", '{"q":', native_id="call_1"),
        ToolCallDelta(0, "call_1", "lookup_item", '"axe"}', native_id="call_1"),
        ToolCallDone(0, ToolCall("call_1", "lookup_item", {"q": "axe"}, native_id="call_1")),
        Terminal(StopReason.TOOL_USE),
        UsageEvent(
            Usage(
                source="openai",
                input_tokens=41,
                output_tokens=12,
                cache_read_tokens=0,
                reasoning_tokens=0,
                total_tokens=53,
            )
        ),
    ]
    assert decoder.model == "gpt-4.1-mini-2025-04-14"
    assert assemble(events).output == [
        Text("Hello"),
        ToolCall("call_1", "lookup_item", {"q": "axe"}, native_id="call_1"),
    ]


def test_interleaved_tool_calls() -> None:  # §14.13
    decoder = OpenAICodec().new_stream()
    first = chunk(
        {"tool_calls": [tool_delta(1, id="c2", name="b", args='{"b":'), tool_delta(0, id="c1", name="a", args='{"a":')]}
    )
    second = chunk(
        {"tool_calls": [tool_delta(0, args="1}"), tool_delta(1, args="2}")]},
        "tool_calls",
        usage={"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    )
    events = decoder.feed(first) + decoder.feed(second) + decoder.feed(b"data: [DONE]\n\n")
    assert [e.index for e in events if isinstance(e, ToolCallDelta)] == [1, 0, 0, 1]
    assert [e for e in events if isinstance(e, ToolCallDone)] == [
        ToolCallDone(0, ToolCall("c1", "a", {"a": 1}, native_id="c1")),
        ToolCallDone(1, ToolCall("c2", "b", {"b": 2}, native_id="c2")),
    ]
    assert [e for e in events if isinstance(e, Terminal)] == [Terminal(StopReason.TOOL_USE)]
    usages = [e for e in events if isinstance(e, UsageEvent)]
    assert len(usages) == 1 and usages[0].usage.total_tokens == 3
    assert events.index(usages[0]) == len(events) - 1  # after the chunk's choice events
    assert decoder.finish() == []


def test_incomplete_arguments_at_finish_reason() -> None:  # §14.14
    decoder = OpenAICodec().new_stream()
    with pytest.raises(CodecError, match="not complete JSON") as err:
        decoder.feed(chunk({"tool_calls": [tool_delta(0, id="c", name="f", args="{")]}, "tool_calls"))
    assert err.value.kind is ErrorKind.INVALID_REQUEST


def test_fragmented_identity() -> None:  # §14.15
    decoder = OpenAICodec().new_stream()
    decoder.feed(chunk({"tool_calls": [tool_delta(0, id="call-", name="look", args="{")]}))
    events = decoder.feed(chunk({"tool_calls": [tool_delta(0, id="1", name="up", args="}")]}, "tool_calls"))
    assert events[0] == ToolCallDelta(0, "call-1", "lookup", "}", native_id="call-1")
    assert events[1] == ToolCallDone(0, ToolCall("call-1", "lookup", {}, native_id="call-1"))


def test_repeated_identity_fragments_are_not_doubled() -> None:
    decoder = OpenAICodec().new_stream()
    decoder.feed(chunk({"tool_calls": [tool_delta(0, id="call_1", name="f", args='{"a"')]}))
    events = decoder.feed(chunk({"tool_calls": [tool_delta(0, id="call_1", name="f", args=":1}")]}, "tool_calls"))
    assert events[1] == ToolCallDone(0, ToolCall("call_1", "f", {"a": 1}, native_id="call_1"))


def test_two_choices_in_a_chunk() -> None:  # §14.16
    two = sse({"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]})
    with pytest.raises(CodecError) as err:
        OpenAICodec().new_stream().feed(two)
    assert err.value.kind is ErrorKind.INCOMPATIBLE


def test_refusal_delta_and_error_frame() -> None:  # §14.17
    with pytest.raises(CodecError) as err:
        OpenAICodec().new_stream().feed(sse({"choices": [{"delta": {"refusal": "blocked"}}]}))
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.error_code is ErrorCode.REFUSAL
    with pytest.raises(ProviderError, match="OpenAI provider stream failed") as failed:
        OpenAICodec().new_stream().feed(sse({"error": {"message": "secret"}}))
    assert failed.value.kind is ErrorKind.UPSTREAM_ERROR and failed.value.outcome is Outcome.KNOWN
    assert failed.value.http_status is None and failed.value.error_code is ErrorCode.GENERATION_FAILED
    assert "secret" not in failed.value.message


def test_reasoning_details_then_done_with_incomplete_tool() -> None:  # §14.18
    decoder = OpenAICodec(affinity=ORIGIN).new_stream(model="m")
    events = decoder.feed(
        chunk({"reasoning_details": {"token": "opaque"}, "tool_calls": [tool_delta(0, id="c", name="f", args="{")]})
    )
    origin = Affinity(profile="p", protocol="openai", endpoint="https://api.example", model="m")
    assert events[0] == ProviderStateEvent(0, ProviderState("minimax_reasoning_details", {"token": "opaque"}, origin))
    with pytest.raises(CodecError, match="not complete JSON"):
        decoder.feed(b"data: [DONE]\n\n")


def test_content_after_terminal() -> None:  # §14.19
    decoder = OpenAICodec().new_stream()
    assert decoder.feed(chunk({"content": "hi"})) == [TextDelta(0, "hi")]
    assert decoder.feed(chunk({}, "stop")) == [Terminal(StopReason.STOP)]
    with pytest.raises(CodecError, match="content after terminal state") as err:
        decoder.feed(chunk({"content": "late"}))
    assert err.value.kind is ErrorKind.INCOMPATIBLE


def test_usage_and_empty_choices_after_terminal_are_accepted() -> None:  # §14.19, §12.10
    decoder = OpenAICodec().new_stream()
    decoder.feed(chunk({"content": "hi"}, "stop"))
    assert decoder.feed(chunk({}, "stop")) == []
    events = decoder.feed(
        sse({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
    )
    assert events == [UsageEvent(Usage(source="openai", input_tokens=1, output_tokens=1, total_tokens=2))]
    assert decoder.finish() == []


def test_done_alone_completes_with_stop_and_reasoning_content_streams() -> None:
    decoder = OpenAICodec().new_stream()
    events = decoder.feed(chunk({"reasoning_content": "think"}) + chunk({"content": "say"}) + b"data: [DONE]\n\n")
    assert events == [ReasoningDelta(0, "think"), TextDelta(0, "say"), Terminal(StopReason.STOP)]
    assert assemble(events).output == [Reasoning("think"), Text("say")]


def test_no_argument_tool_call_means_empty_object() -> None:
    decoder = OpenAICodec().new_stream()
    events = decoder.feed(chunk({"tool_calls": [tool_delta(0, id="c", name="now", args="")]}, "tool_calls"))
    assert events[1] == ToolCallDone(0, ToolCall("c", "now", {}, native_id="c"))
