"""Google Gemini GenerateContent codec (reference §8, checklist §14 items 38-53)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from oam_actors import ErrorCode
from oam_actors.models.codecs import (
    Affinity,
    BlockEvent,
    CodecError,
    ErrorKind,
    GoogleCodec,
    Image,
    Message,
    ProviderError,
    ProviderState,
    ProviderStateEvent,
    Reasoning,
    Request,
    Role,
    StopReason,
    Terminal,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDone,
    ToolCallStart,
    ToolDefinition,
    ToolStatus,
    Usage,
    UsageEvent,
    assemble,
)

FIXTURES = Path(__file__).parent / "fixtures" / "providers" / "google"
MODEL = "gemini-2.5-flash"
FULL = Affinity(
    profile="google-primary",
    endpoint="https://generativelanguage.googleapis.com",
    account="tenant-a",
    credential_scope="projects/example",
    credential_version="7",
)
ORIGIN = msgspec.structs.replace(FULL, protocol="google", model=MODEL)


def sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def body(encoded: Any) -> dict[str, Any]:
    return msgspec.json.decode(encoded.body)


def frame(parts: list[dict[str, Any]], finish: str | None = None, **extra: Any) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return sse({"candidates": [candidate], **extra})


def decode(raw: dict[str, Any], codec: GoogleCodec | None = None) -> Any:
    return (codec or GoogleCodec(affinity=FULL)).decode_response(200, {}, msgspec.json.encode(raw), model=MODEL)


def candidate_body(parts: list[dict[str, Any]], finish: str = "STOP", **extra: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}], **extra}


def user(text: str) -> Message:
    return Message(role=Role.USER, content=[Text(text)])


# --- encoding ---------------------------------------------------------------------------------


def test_encode_shared_fixture_tool_result() -> None:  # §14.38
    request = Request(
        model=MODEL,
        messages=[
            Message(role=Role.USER, content=[Text("hello"), Image("image/png", "iVBORw0KGgo=")]),
            Message(role=Role.ASSISTANT, content=[ToolCall("call-1", "lookup", {"q": "x"})]),
            Message(role=Role.TOOL, tool_call_id="call-1", status=ToolStatus.ERROR, content=[Text("failed")]),
        ],
        tools=[ToolDefinition(name="lookup")],
    )
    wire = body(GoogleCodec().encode_request(request))
    assert wire["contents"][0]["parts"] == [
        {"text": "hello"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]
    assert wire["contents"][1] == {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"q": "x"}}}]}
    assert wire["contents"][2]["parts"] == [{"functionResponse": {"name": "lookup", "response": {"error": "failed"}}}]
    assert wire["tools"] == [
        {"functionDeclarations": [{"name": "lookup", "description": "", "parameters": {"type": "object"}}]}
    ]


def test_target_and_generation_config() -> None:  # §14.39
    request = Request(
        model=MODEL,
        messages=[user("hello")],
        settings={"temperature": 0.2, "max_output_tokens": 64},
        output_constraints={"response_modalities": ["TEXT"]},
    )
    encoded = GoogleCodec().encode_request(request, stream=True)
    assert encoded.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert encoded.headers["accept"] == "text/event-stream"
    wire = body(encoded)
    assert "model" not in wire and "stream" not in wire
    assert wire["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64, "responseModalities": ["TEXT"]}
    assert GoogleCodec().encode_request(request).path == "/v1beta/models/gemini-2.5-flash:generateContent"


def test_model_is_escaped_in_the_path() -> None:
    request = Request(model="tuned/x y", messages=[user("hi")])
    assert GoogleCodec(api_version="v1").encode_request(request).path == "/v1/models/tuned%2Fx%20y:generateContent"


@pytest.mark.parametrize(
    ("settings", "constraints", "field", "reason"),
    [
        ({"unknown": True}, {}, "settings.unknown", "unsupported_google_mapping"),
        ({"candidate_count": 2}, {}, "settings.candidate_count", "unsupported_google_mapping"),
        ({}, {"candidate_count": 2}, "output_constraints.candidate_count", "canonical_subset_requires_one"),
        (
            {},
            {"response_modalities": ["AUDIO"]},
            "output_constraints.response_modalities",
            "canonical_subset_requires_text",
        ),
        ({"maxOutputTokens": 5}, {}, "settings.maxOutputTokens", "unsupported_google_mapping"),
        ({"tool_choice": "auto"}, {}, "settings.tool_choice", "unsupported_google_mapping"),
    ],
)
def test_unmapped_options_are_incompatible(
    settings: dict[str, Any], constraints: dict[str, Any], field: str, reason: str
) -> None:  # §14.40
    request = Request(model=MODEL, messages=[user("hi")], settings=settings, output_constraints=constraints)
    with pytest.raises(CodecError) as err:
        GoogleCodec().encode_request(request)
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert err.value.compatibility == {"field": field, "reason": reason}


def test_system_instruction_reasoning_and_unmatched_tool_result() -> None:
    request = Request(
        model=MODEL,
        messages=[
            Message(role=Role.SYSTEM, content=[Text("Gorm")]),
            Message(role=Role.ASSISTANT, content=[Reasoning("r"), Text("t")]),
        ],
    )
    wire = body(GoogleCodec().encode_request(request))
    assert wire["systemInstruction"] == {"parts": [{"text": "Gorm"}]}
    assert wire["contents"] == [{"role": "model", "parts": [{"text": "r", "thought": True}, {"text": "t"}]}]
    orphan = Request(model=MODEL, messages=[Message(role=Role.TOOL, tool_call_id="nope", content=[Text("x")])])
    with pytest.raises(CodecError, match="no matching tool call"):
        GoogleCodec().encode_request(orphan)


def test_tool_message_with_reasoning_is_incompatible() -> None:  # §14.26
    request = Request(
        model=MODEL,
        messages=[
            Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", {})]),
            Message(role=Role.TOOL, tool_call_id="c", content=[Reasoning("r")]),
        ],
    )
    with pytest.raises(CodecError) as err:
        GoogleCodec().encode_request(request)
    assert err.value.kind is ErrorKind.INCOMPATIBLE


# --- signed parts -----------------------------------------------------------------------------


def signed_calls() -> list[Any]:
    return decode(msgspec.json.decode((FIXTURES / "generate_content_signed_calls.json").read_bytes())).output


def continuation(output: list[Any], model: str = MODEL) -> Request:
    def result(call_id: str, price: int) -> Message:
        return Message(
            role=Role.TOOL,
            tool_call_id=call_id,
            content=[Text(str(price))],
            extensions={"google::function_response": {"result": {"price": price}}},
        )

    return Request(
        model=model,
        messages=[
            Message(role=Role.SYSTEM, content=[Text("You are Gorm the smith.")]),
            user("Price of an axe and a sword?"),
            Message(role=Role.ASSISTANT, content=output),
            result("native-a", 9),
            result("native-b", 12),
        ],
        tools=[ToolDefinition(name="lookup_item")],
        settings={"temperature": 0.2, "max_output_tokens": 64},
        output_constraints={"response_modalities": ["TEXT"]},
    )


def test_signed_calls_decode_and_continuation_matches_sdk_capture() -> None:  # §14.41
    output = signed_calls()
    assert [type(b).__name__ for b in output] == ["ToolCall", "ProviderState", "ToolCall", "ProviderState"]
    assert output[0] == ToolCall("native-a", "lookup_item", {"q": "axe"}, native_id="native-a")
    assert output[1].payload["position"] == {"candidate": 0, "part": 0}
    assert output[3].payload["position"] == {"candidate": 0, "part": 1}
    assert output[1].origin == ORIGIN
    wire = body(GoogleCodec(affinity=FULL).encode_request(continuation(output)))
    assert wire == msgspec.json.decode((FIXTURES / "generate_content_tool_continuation.json").read_bytes())


@pytest.mark.parametrize("field", ["profile", "endpoint", "account", "credential_scope", "credential_version"])
def test_replay_with_any_identity_change_is_incompatible(field: str) -> None:  # §14.42
    destination = msgspec.structs.replace(FULL, **{field: "changed"})
    with pytest.raises(CodecError) as err:
        GoogleCodec(affinity=destination).encode_request(continuation(signed_calls()))
    assert err.value.compatibility is not None and err.value.compatibility["field"] == "affinity"


def test_replay_to_another_model_is_incompatible() -> None:  # §14.42
    with pytest.raises(CodecError) as err:
        GoogleCodec(affinity=FULL).encode_request(continuation(signed_calls(), "gemini-2.5-pro"))
    assert err.value.compatibility == {"field": "affinity", "reason": "cross_origin"}


def test_replay_needs_complete_destination_affinity() -> None:
    partial = msgspec.structs.replace(FULL, credential_version=None)
    with pytest.raises(CodecError) as err:
        GoogleCodec(affinity=partial).encode_request(continuation(signed_calls()))
    assert err.value.compatibility == {"field": "affinity", "reason": "missing_credential_version"}


def test_legacy_state_payload_is_incompatible() -> None:  # §14.43
    legacy = ProviderState("google_thought_signature", {"thinking": "legacy", "signature": "unbound"}, ORIGIN)
    request = Request(model=MODEL, messages=[Message(role=Role.ASSISTANT, content=[Text("x"), legacy])])
    with pytest.raises(CodecError, match="exact signed part and position"):
        GoogleCodec(affinity=FULL).encode_request(request)


def test_signed_thought_text_round_trips_exactly() -> None:  # §14.44
    part = {"text": "private", "thought": True, "thoughtSignature": "opaque"}
    output = decode(candidate_body([part])).output
    assert output[0] == Reasoning("private")
    request = Request(model=MODEL, messages=[user("q"), Message(role=Role.ASSISTANT, content=output)])
    assert body(GoogleCodec(affinity=FULL).encode_request(request))["contents"][1]["parts"] == [part]


def test_identical_calls_keep_their_own_signatures() -> None:  # §14.45
    call = {"functionCall": {"name": "f", "args": {"a": 1}}}
    output = decode(
        candidate_body([{**call, "thoughtSignature": "first"}, {**call, "thoughtSignature": "second"}])
    ).output
    call1, state1, call2, state2 = output
    assert (call1.id, call2.id) == ("google-0-0", "google-0-1")
    request = Request(
        model=MODEL,
        messages=[
            user("q"),
            Message(role=Role.ASSISTANT, content=output),
            Message(role=Role.TOOL, tool_call_id=call1.id, content=[Text("1")]),
            Message(role=Role.TOOL, tool_call_id=call2.id, content=[Text("2")]),
        ],
    )
    wire = body(GoogleCodec(affinity=FULL).encode_request(request))
    assert [p["thoughtSignature"] for p in wire["contents"][1]["parts"]] == ["first", "second"]
    assert wire["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "f", "response": {"result": "1"}}},
            {"functionResponse": {"name": "f", "response": {"result": "2"}}},
        ],
    }
    swapped = msgspec.structs.replace(
        request, messages=[user("q"), Message(role=Role.ASSISTANT, content=[call1, state2, call2, state1])]
    )
    with pytest.raises(CodecError, match="moved"):
        GoogleCodec(affinity=FULL).encode_request(swapped)


def test_state_with_nothing_before_it_is_incompatible() -> None:
    (_, state) = decode(candidate_body([{"text": "t", "thoughtSignature": "s"}])).output
    request = Request(model=MODEL, messages=[Message(role=Role.ASSISTANT, content=[state])])
    with pytest.raises(CodecError, match="moved"):
        GoogleCodec(affinity=FULL).encode_request(request)


def test_signed_calls_in_separate_stream_frames() -> None:  # §14.46
    decoder = GoogleCodec(affinity=FULL).new_stream(model=MODEL)
    a = {"functionCall": {"id": "native-a", "name": "lookup_item", "args": {"q": "axe"}}, "thoughtSignature": "sig-a"}
    b = {"functionCall": {"id": "native-b", "name": "lookup_item", "args": {"q": "sword"}}, "thoughtSignature": "sig-b"}
    events = decoder.feed(frame([a])) + decoder.feed(frame([b], "STOP"))
    states = [e.state for e in events if isinstance(e, ProviderStateEvent)]
    assert [s.payload["position"]["part"] for s in states] == [0, 1]
    terminal = decoder.finish()
    assert terminal == [Terminal(StopReason.TOOL_USE)]
    output = assemble(events + terminal).output
    request = Request(model=MODEL, messages=[user("q"), Message(role=Role.ASSISTANT, content=output)])
    assert body(GoogleCodec(affinity=FULL).encode_request(request))["contents"][1]["parts"] == [a, b]


def test_signed_call_after_streamed_text_replays() -> None:
    decoder = GoogleCodec(affinity=FULL).new_stream(model=MODEL)
    wire = (FIXTURES / "stream_text_function_call.sse").read_bytes()
    events = decoder.feed(wire) + decoder.finish()
    signed = {"functionCall": {"name": "lookup_item", "args": {"q": "axe"}}, "thoughtSignature": "c2ln"}
    assert events == [
        TextDelta(0, "Nine "),
        UsageEvent(Usage(source="google", input_tokens=30, total_tokens=30)),
        TextDelta(0, "gold."),
        ToolCallStart(1, "google-0-1", "lookup_item"),
        ToolCallDone(1, ToolCall("google-0-1", "lookup_item", {"q": "axe"})),
        ProviderStateEvent(
            1,
            ProviderState(
                "google_thought_signature", {"part": signed, "position": {"candidate": 0, "part": 1}}, ORIGIN
            ),
        ),
        UsageEvent(Usage(source="google", input_tokens=30, output_tokens=8, total_tokens=38)),
        Terminal(StopReason.TOOL_USE),
    ]
    assert decoder.model == MODEL
    output = assemble(events).output
    request = Request(model=MODEL, messages=[user("q"), Message(role=Role.ASSISTANT, content=output)])
    assert body(GoogleCodec(affinity=FULL).encode_request(request))["contents"][1]["parts"] == [
        {"text": "Nine gold."},
        signed,
    ]


def test_signed_text_starts_its_own_block() -> None:
    decoder = GoogleCodec(affinity=FULL).new_stream(model=MODEL)
    events = (
        decoder.feed(frame([{"text": "a"}]) + frame([{"text": "", "thoughtSignature": "s"}], "STOP")) + decoder.finish()
    )
    output = assemble(events).output
    assert output[:2] == [Text("a"), Text("")] and isinstance(output[2], ProviderState)
    request = Request(model=MODEL, messages=[user("q"), Message(role=Role.ASSISTANT, content=output)])
    assert body(GoogleCodec(affinity=FULL).encode_request(request))["contents"][1]["parts"] == [
        {"text": "a"},
        {"text": "", "thoughtSignature": "s"},
    ]


# --- streaming --------------------------------------------------------------------------------


def test_stop_then_repeated_usage_tail() -> None:  # §14.47
    usage = {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}}
    wire = frame([{"text": "ok"}], "STOP").replace(b"\n\n", b"\r\n\r\n") + sse(usage) + sse(usage)
    decoder = GoogleCodec().new_stream()
    events = decoder.feed(wire)
    assert events == [
        TextDelta(0, "ok"),
        UsageEvent(Usage(source="google", input_tokens=3, output_tokens=1, total_tokens=4)),
    ]
    assert decoder.finish() == [Terminal(StopReason.STOP)]


def test_unknown_finish_reason_fails_at_finish() -> None:  # §14.48
    decoder = GoogleCodec().new_stream()
    assert decoder.feed(frame([{"text": "x"}], "FUTURE")) == [TextDelta(0, "x")]
    with pytest.raises(CodecError) as err:
        decoder.finish()
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert err.value.compatibility == {"field": "finishReason", "reason": "FUTURE"}


def test_cancelled_finish_fails_even_after_finish_reason() -> None:
    decoder = GoogleCodec().new_stream()
    decoder.feed(frame([{"text": "x"}], "STOP"))
    with pytest.raises(CodecError, match="ended before completion") as err:
        decoder.finish(cancelled=True)
    assert err.value.error_code is ErrorCode.CANCELLED


def test_content_after_finish_reason() -> None:
    decoder = GoogleCodec().new_stream()
    decoder.feed(frame([{"text": "x"}], "STOP"))
    with pytest.raises(CodecError, match="content after finish reason"):
        decoder.feed(frame([{"text": "late"}]))


def test_blocked_prompt_and_error_frame() -> None:  # §14.49
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}}
    with pytest.raises(CodecError) as err:
        decode(blocked)
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.error_code is ErrorCode.GUARDRAIL_VIOLATION
    with pytest.raises(CodecError) as err:
        GoogleCodec().new_stream().feed(sse(blocked))
    assert err.value.error_code is ErrorCode.GUARDRAIL_VIOLATION
    with pytest.raises(ProviderError, match="Google provider stream failed") as failed:
        GoogleCodec().new_stream().feed(sse({"error": {"message": "secret"}}))
    assert failed.value.kind is ErrorKind.UPSTREAM_ERROR and "secret" not in failed.value.message


def test_inline_image_streams_as_a_block_event() -> None:
    decoder = GoogleCodec().new_stream()
    events = decoder.feed(frame([{"inlineData": {"mimeType": "image/png", "data": "AAA="}}], "STOP"))
    assert events == [BlockEvent(0, Image("image/png", "AAA="))]


def test_several_candidates_and_unknown_parts() -> None:
    two = {"candidates": [{"content": {"parts": []}}, {"content": {"parts": []}}]}
    with pytest.raises(CodecError, match="several candidates"):
        GoogleCodec().new_stream().feed(sse(two))
    with pytest.raises(CodecError) as err:
        decode(candidate_body([{"executableCode": {"code": "1"}}]))
    assert err.value.compatibility == {"field": "parts[]", "reason": "executableCode"}


# --- non-streaming decoding -------------------------------------------------------------------


def test_non_stream_mixed_parts_with_full_affinity() -> None:  # §14.50
    raw = candidate_body(
        [
            {"text": "think", "thought": True, "thoughtSignature": "t"},
            {"inlineData": {"mimeType": "image/png", "data": "AAA="}},
            {"functionCall": {"name": "a", "args": {}}},
            {"functionCall": {"name": "a", "args": {}}},
        ],
        usageMetadata={"promptTokenCount": 1, "candidatesTokenCount": 2, "thoughtsTokenCount": 1, "totalTokenCount": 4},
        modelVersion=MODEL,
    )
    response = decode(raw)
    assert [b.id for b in response.output if isinstance(b, ToolCall)] == ["google-0-2", "google-0-3"]
    assert any(isinstance(b, ProviderState) for b in response.output)
    assert response.output[2] == Image("image/png", "AAA=")
    assert response.usage is not None and response.usage.reasoning_tokens == 1
    assert response.stop_reason is StopReason.TOOL_USE and response.model == MODEL


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("STOP", StopReason.STOP),
        ("MAX_TOKENS", StopReason.MAX_OUTPUT_TOKENS),
        ("SAFETY", StopReason.SAFETY),
        ("RECITATION", StopReason.SAFETY),
    ],
)
def test_finish_reasons(finish: str, stop: StopReason) -> None:
    assert decode(candidate_body([{"text": "x"}], finish)).stop_reason is stop


def test_safety_stop_without_content() -> None:
    raw = {"candidates": [{"finishReason": "SAFETY", "index": 0}]}
    response = decode(raw)
    assert (response.output, response.stop_reason) == ([], StopReason.SAFETY)


def test_error_body_and_rate_limit_decode() -> None:  # §14.51
    error = GoogleCodec().decode_error(429, {}, b'{"error":{"message":"secret"}}')
    assert error.kind is ErrorKind.RATE_LIMITED and error.message == "Google provider request failed"
    assert error.error_code is ErrorCode.RATE_LIMITED


def test_resource_exhausted_fixture_gives_retry_delay() -> None:
    error = GoogleCodec().decode_error(429, {}, (FIXTURES / "error_resource_exhausted.json").read_bytes())
    assert (error.provider_code, error.retry_after, error.error_code) == (
        "RESOURCE_EXHAUSTED",
        13.0,
        ErrorCode.RATE_LIMITED,
    )
    assert error.to_agent_error().data()["retryAfterSeconds"] == 13


def test_token_limit_is_context_size_exceeded() -> None:
    error = GoogleCodec().decode_error(400, {}, (FIXTURES / "error_token_limit.json").read_bytes())
    assert error.error_code is ErrorCode.CONTEXT_SIZE_EXCEEDED and error.provider_code == "INVALID_ARGUMENT"
    plain = GoogleCodec().decode_error(400, {}, b'{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}')
    assert plain.error_code is ErrorCode.INVALID_REQUEST
    numeric = GoogleCodec().decode_error(500, {}, b'{"error":{"code":500,"message":"x"}}')
    assert numeric.provider_code == "500" and numeric.error_code is ErrorCode.GENERATION_FAILED


def test_unavailable_is_busy() -> None:
    error = GoogleCodec().decode_error(503, {}, b'{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}')
    assert error.error_code is ErrorCode.BUSY and error.retryable


@pytest.mark.parametrize("path", ["body", "stream"])
def test_signed_part_without_affinity_is_incompatible(path: str) -> None:  # §14.52
    part = {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "s"}
    with pytest.raises(CodecError) as err:
        if path == "body":
            decode(candidate_body([part]), GoogleCodec())
        else:
            GoogleCodec().new_stream(model=MODEL).feed(frame([part]))
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert err.value.compatibility == {"field": "affinity", "reason": "missing_endpoint"}


def test_empty_body_is_an_error() -> None:  # §14.53
    with pytest.raises(CodecError, match="candidates must be a list"):
        GoogleCodec().decode_response(200, {}, b"{}")


def test_done_is_tolerated() -> None:
    decoder = GoogleCodec().new_stream()
    assert decoder.feed(frame([{"text": "x"}], "STOP") + b"data: [DONE]\n\n") == [TextDelta(0, "x")]
    assert decoder.finish() == [Terminal(StopReason.STOP)]
