"""Antigravity native facade, Google boundary and observer (reference antigravity.md §14, 1-40)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from oam_actors import ErrorCode
from oam_actors.models import codecs
from oam_actors.models.codecs import (
    Affinity,
    CodecError,
    ErrorKind,
    Message,
    ProviderError,
    ProviderState,
    Reasoning,
    Request,
    Role,
    Stage,
    StopReason,
    Terminal,
    Text,
    ToolCall,
)
from oam_actors.models.codecs.antigravity import (
    OPERATIONS,
    AntigravityCodec,
    Bindings,
    EndReason,
    GoogleStream,
    NativeStream,
    OnboardingStatus,
    Operation,
    StreamStatus,
    UsageObserver,
    available_models,
    build_request,
    decode_error,
    decode_response,
    encode_count_request,
    encode_google_request,
    map_count_response,
    map_google_response,
    observe_response,
    onboarding_status,
    operation,
    project_id,
)

FIXTURE = json.loads((Path(__file__).parent / "fixtures/providers/antigravity/native_lifecycle.json").read_text())
P = "my-project"
ALL = Bindings(
    project=P, model="gemini-x", session_id="S", request_id="agent-1", user_agent="oam/1.0", client_version="1.2.3"
)
SIGNED_CALL = {"functionCall": {"id": "c1", "name": "f", "args": {"a": 1}}, "thoughtSignature": "c2ln"}


def doc(req: Any) -> dict[str, Any]:
    return msgspec.json.decode(req.body)


def sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def raw(obj: object) -> bytes:
    return msgspec.json.encode(obj)


def invalid(fn: Any, *args: Any, match: str | None = None) -> CodecError:
    with pytest.raises(CodecError, match=match) as err:
        fn(*args)
    assert err.value.kind is ErrorKind.INVALID_REQUEST, err.value
    assert err.value.error_code is ErrorCode.INVALID_REQUEST
    return err.value


def incompatible(fn: Any, *args: Any) -> CodecError:
    with pytest.raises(CodecError) as err:
        fn(*args)
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.stage is Stage.TRANSLATION, err.value
    return err.value


# Native facade.


def test_1_operations_in_order_only_stream_streams() -> None:
    assert [op.rpc for op in OPERATIONS] == [
        "loadCodeAssist",
        "onboardUser",
        "fetchAvailableModels",
        "generateContent",
        "streamGenerateContent",
    ]
    assert [op.streaming for op in OPERATIONS] == [False, False, False, False, True]
    assert [op.path for op in OPERATIONS][-1] == "/v1internal:streamGenerateContent"


def test_2_lookup_by_id_or_exact_rpc_name() -> None:
    for op in OPERATIONS:
        assert operation(op.rpc) is op and operation(op.value) is op
    invalid(operation, "countTokens", match="Unsupported")
    invalid(operation, "GenerateContent", match="Unsupported")
    invalid(operation, 3, match="must be a string")


def test_3_load_merges_metadata_and_binds_project() -> None:
    body = {"metadata": {"platform": 7, "native": {"keep": True}}}
    req = build_request("loadCodeAssist", body, Bindings(project=P, user_agent="oam/1.0"))
    assert doc(req) == {
        "metadata": {"ideType": 9, "pluginType": 2, "platform": 7, "native": {"keep": True}, "duetProject": P},
        "mode": 1,
    }
    assert (req.method, req.path, req.query) == ("POST", "/v1internal:loadCodeAssist", "")
    assert req.headers == [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("x-client-name", "antigravity"),
        ("user-agent", "oam/1.0"),
    ]
    names = {name for name, _ in req.headers}
    assert not names & {"authorization", "x-goog-api-client", "x-goog-api-key", "x-api-key"}
    assert body == {"metadata": {"platform": 7, "native": {"keep": True}}}  # never mutated


def test_3b_load_keeps_caller_mode_and_rejects_non_map_metadata() -> None:
    assert doc(build_request("load_code_assist", {"mode": 3}))["mode"] == 3
    invalid(build_request, "loadCodeAssist", {"metadata": None}, match="metadata must be a map")
    invalid(build_request, "onboardUser", {"tierId": "t", "metadata": []}, match="metadata must be a map")


def test_4_onboard_puts_project_in_metadata_only() -> None:
    sent = doc(build_request("onboardUser", {"tierId": "standard-tier"}, Bindings(project=P)))
    assert sent == {
        "tierId": "standard-tier",
        "metadata": {"ideType": 9, "pluginType": 2, "platform": 0, "duetProject": P},
    }
    invalid(build_request, "onboardUser", {}, match="tierId")
    invalid(build_request, "onboardUser", {"tierId": 5}, match="tierId must be a string")
    invalid(build_request, "onboardUser", {"tierId": "a\nb"}, match="tierId must not contain CR or LF")
    invalid(build_request, "onboardUser", {"tierId": "t", "project": P}, match="duetProject")


def test_5_fetch_models_top_level_project_no_defaults() -> None:
    bound = Bindings(project=P)
    assert doc(build_request("fetchAvailableModels", {"opaque": [1, 2]}, bound)) == {"project": P, "opaque": [1, 2]}
    assert doc(build_request("fetchAvailableModels", {}, bound)) == {"project": P}


def test_6_stream_with_all_bindings() -> None:
    inner = {"contents": [{"role": "model", "parts": [SIGNED_CALL]}], "futureKnob": {"x": [1]}, "candidateCount": 2}
    req = build_request("streamGenerateContent", {"request": inner}, ALL)
    assert (req.path, req.query, req.target) == (
        "/v1internal:streamGenerateContent",
        "alt=sse",
        "/v1internal:streamGenerateContent?alt=sse",
    )
    assert doc(req) == {
        "request": {**inner, "sessionId": "S"},
        "project": P,
        "model": "gemini-x",
        "requestId": "agent-1",
        "userAgent": "antigravity",
        "requestType": "agent",
    }
    assert req.headers == [
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("x-client-name", "antigravity"),
        ("user-agent", "oam/1.0"),
        ("x-client-version", "1.2.3"),
        ("x-machine-session-id", "S"),
    ]
    assert "sessionId" not in inner


def test_6b_caller_defaults_and_equal_fields_are_kept() -> None:
    body = {"project": P, "model": "gemini-x", "userAgent": "ua", "requestType": "chat", "request": {"sessionId": "S"}}
    sent = doc(build_request("generateContent", body, ALL))
    assert (sent["userAgent"], sent["requestType"], sent["request"]["sessionId"]) == ("ua", "chat", "S")


def test_7_generation_requires_trusted_project() -> None:
    invalid(build_request, "generateContent", {"model": "gemini-x", "request": {}}, match="project")
    not_a_string = Bindings(project=5)  # type: ignore[arg-type]
    invalid(build_request, "generateContent", {"model": "m", "request": {}}, not_a_string, match="project")


def test_8_model_conflicts_with_binding() -> None:
    body = {"model": "gemini-y", "request": {}}
    invalid(build_request, "generateContent", body, Bindings(project=P, model="gemini-x"), match="model conflicts")


def test_9_unsafe_model_and_identifiers() -> None:
    bound = Bindings(project=P)
    invalid(build_request, "generateContent", {"model": "models/gemini", "request": {}}, bound, match="safe single")
    invalid(build_request, "generateContent", {"request": {}}, bound, match="safe single")
    crlf = Bindings(project="p\r\nx-evil: 1", model="m")
    invalid(build_request, "generateContent", {"request": {}}, crlf, match="CR or LF")
    session = Bindings(project=P, model="m", session_id="s\r\nx")
    invalid(build_request, "generateContent", {"request": {}}, session, match="CR or LF")
    long_id = Bindings(project=P, model="m", request_id="r" * 257)
    invalid(build_request, "generateContent", {"request": {}}, long_id, match="256 bytes")
    invalid(build_request, "generateContent", {"request": {}}, Bindings(project="", model="m"), match="empty")
    surrogate = Bindings(project=P, model="m", user_agent="ua\ud800")
    invalid(build_request, "generateContent", {"request": {}}, surrogate, match="UTF-8")
    invalid(build_request, "generateContent", {"model": "m", "request": []}, bound, match="generation request")


def test_10_unbound_body_identifiers_are_still_checked() -> None:
    bound = Bindings(project=P, model="m")
    invalid(build_request, "generateContent", {"requestId": "bad\nheader", "request": {}}, bound)
    invalid(build_request, "generateContent", {"request": {"sessionId": 7}}, bound)
    # A non-generation body with request.sessionId gets the header, so it is checked too.
    invalid(build_request, "loadCodeAssist", {"request": {"sessionId": "a\rb"}})
    req = build_request("loadCodeAssist", {"request": {"sessionId": "sess"}})
    assert req.headers[-1] == ("x-machine-session-id", "sess")


def test_11_load_caller_duet_project_conflicts() -> None:
    body = {"metadata": {"duetProject": "other"}}
    invalid(build_request, "loadCodeAssist", body, Bindings(project=P), match="project conflicts")


def test_11b_body_and_bindings_shape() -> None:
    invalid(build_request, "loadCodeAssist", [], match="body must be a map")
    invalid(build_request, "loadCodeAssist", {str(i): i for i in range(513)}, match="too large")
    invalid(build_request, "loadCodeAssist", {}, {"project": P}, match="Bindings")


def test_12_decode_returns_fixture_documents_unchanged() -> None:
    for name, document in FIXTURE.items():
        op = "stream_generate_content" if name == "stream_frame" else "generate_content"
        assert decode_response(op, 200, {}, raw(document)) == document


def test_12b_decode_rejects_non_objects() -> None:
    with pytest.raises(CodecError, match="not a JSON object") as err:
        decode_response("generateContent", 200, {}, b"[1]")
    assert err.value.kind is ErrorKind.INVALID_REQUEST
    for body in (b"{bad", b'{"a":"\xff"}'):
        with pytest.raises(CodecError, match="not a JSON object"):
            decode_response("generateContent", 200, {}, body)
    with pytest.raises(CodecError, match="not a JSON object"):
        decode_response("generateContent", 200, {}, b'{"a": 1}', max_response_bytes=4)
    invalid(decode_response, "generateContent", 200, {}, 42, match="JSON string")
    invalid(decode_response, "countTokens", 200, {}, b"{}", match="Unsupported")


def test_12c_2xx_error_object_is_a_provider_error() -> None:
    with pytest.raises(ProviderError) as err:
        decode_response("generateContent", 200, {}, raw({"error": {"code": 500, "status": "INTERNAL"}}))
    assert (err.value.http_status, err.value.kind, err.value.provider_code) == (
        200,
        ErrorKind.UPSTREAM_ERROR,
        "INTERNAL",
    )


def test_13_lifecycle_helpers_on_fixtures() -> None:
    assert project_id(FIXTURE["load_code_assist"]) == "example-project"
    assert project_id(FIXTURE["onboard_done"]) == "example-project"
    assert onboarding_status(FIXTURE["onboard_pending"]) == OnboardingStatus(done=False)
    assert onboarding_status(FIXTURE["onboard_done"]) == OnboardingStatus(done=True, project="example-project")
    assert onboarding_status({"done": "yes"}) == OnboardingStatus(done=False)
    models = available_models(FIXTURE["fetch_available_models"])
    assert models is not None and models["gemini-x-lite"]["futureField"] == [1, 2]
    assert models["gemini-x"]["quotaInfo"]["remainingFraction"] == 0.75
    assert project_id({}) is None and available_models({}) is None
    assert available_models({"models": []}) is None
    invalid(onboarding_status, [], match="must be a map")
    with pytest.raises(ProviderError) as err:
        onboarding_status({"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "secret"}})
    assert err.value.http_status == 200 and "secret" not in str(err.value)


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, ErrorKind.INVALID_REQUEST, ErrorCode.RATE_LIMITED),
        (401, ErrorKind.AUTHENTICATION, ErrorCode.RATE_LIMITED),
        (403, ErrorKind.AUTHORIZATION, ErrorCode.RATE_LIMITED),
        (429, ErrorKind.RATE_LIMITED, ErrorCode.RATE_LIMITED),
        (500, ErrorKind.UPSTREAM_ERROR, ErrorCode.RATE_LIMITED),
        (503, ErrorKind.UPSTREAM_ERROR, ErrorCode.RATE_LIMITED),
    ],
)
def test_14_error_statuses_sanitized_with_retry_after(status: int, kind: ErrorKind, code: ErrorCode) -> None:
    body = raw({"error": {"code": status, "status": "RESOURCE_EXHAUSTED", "message": "secret"}})
    with pytest.raises(ProviderError) as err:
        decode_response("generateContent", status, [("Retry-After", "3")], body)
    e = err.value
    assert (e.http_status, e.kind, e.provider_code, e.retry_after) == (status, kind, "RESOURCE_EXHAUSTED", 3.0)
    assert e.error_code is code and e.stage is Stage.RESPONSE
    assert "secret" not in e.message and "secret" not in repr(e)
    wire = e.to_agent_error().to_wire()
    assert wire["data"]["code"] == "rate_limited" and wire["data"]["retryAfterSeconds"] == 3
    assert "secret" not in json.dumps(wire)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ErrorCode.INVALID_REQUEST),
        (401, ErrorCode.MODEL_UNAVAILABLE),
        (404, ErrorCode.MODEL_UNAVAILABLE),
        (500, ErrorCode.GENERATION_FAILED),
        (503, ErrorCode.BUSY),
        (408, ErrorCode.GENERATION_FAILED),
    ],
)
def test_14b_status_only_errors_map_onto_the_protocol_table(status: int, code: ErrorCode) -> None:
    error = decode_error(status, {}, b"<html>proxy</html>")
    assert error.error_code is code and error.provider_code is None
    assert error.retryable is (status in (408, 500, 503))


def test_14c_google_details_context_overflow_and_retry_info() -> None:
    body = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "input token count exceeds the limit"}}
    assert decode_error(400, {}, raw(body)).error_code is ErrorCode.CONTEXT_SIZE_EXCEEDED
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "13s"}
    limited = decode_error(429, {}, raw({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [retry]}}))
    assert limited.retry_after == 13.0
    assert decode_error(429, {"retry-after": "2"}, raw({"error": {"details": [retry]}})).retry_after == 2.0


def test_15_http_date_retry_after_and_unparsable_body() -> None:
    now = dt.datetime.fromtimestamp(784111777, dt.UTC)
    headers = [("retry-after", "Sun, 06 Nov 1994 08:49:42 GMT"), ("Retry-After", "99")]
    error = decode_error(429, headers, b"not-json", now=now)
    assert (error.retry_after, error.provider_code, error.error_code) == (5.0, None, ErrorCode.RATE_LIMITED)
    past = decode_error(429, {"Retry-After": "Sun, 06 Nov 1994 08:49:30 GMT"}, b"", now=now)
    assert past.retry_after == 0.0
    for value in ("-1", "3.5", "soon", "Sunday, 06-Nov-94 08:49:37 GMT"):
        assert decode_error(429, {"Retry-After": value}, b"", now=now).retry_after is None, value


def test_16_provider_code_is_strict_and_picked_first() -> None:
    leaky = raw({"error": {"status": "secret account data", "code": 400}})
    assert decode_error(400, {}, leaky).provider_code is None
    assert decode_error(400, {}, raw({"error": {"type": "BAD_THING"}})).provider_code == "BAD_THING"
    assert decode_error(400, {}, raw({"error": {"code": 400}})).provider_code == "400"
    assert decode_error(400, {}, raw({"error": {"status": "lower_case"}})).provider_code is None


@pytest.mark.parametrize("bad", ["x", ["x"], 42, True, None, {"cloudaicompanionProject": []}])
def test_17_malformed_done_response(bad: Any) -> None:
    document = {"done": True, "response": bad}
    assert project_id(document) is None
    invalid(onboarding_status, document, match="no project")


def test_18_fixture_frame_byte_by_byte() -> None:
    data = sse(FIXTURE["stream_frame"])
    stream = NativeStream()
    documents = [d for i in range(len(data)) for d in stream.feed(data[i : i + 1])]
    assert documents == [FIXTURE["stream_frame"]]
    assert stream.finish() == [] and stream.terminal is StreamStatus.EOF
    assert stream.protocol_terminal is None


def test_18b_last_frame_needs_no_blank_line() -> None:
    stream = NativeStream()
    assert stream.feed(b'data: {"response": {}}') == []
    assert stream.finish(EndReason.EOF) == [{"response": {}}]
    with pytest.raises(CodecError, match="closed"):
        stream.feed(b"")
    assert stream.terminal is StreamStatus.EOF


def test_19_error_frame_is_a_document_and_fails_the_protocol() -> None:
    stream = NativeStream()
    frame = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}, "opaque": True}
    assert stream.feed(sse(frame) + sse({"response": {}})) == [frame, {"response": {}}]
    assert stream.protocol_terminal is StreamStatus.FAILED
    assert stream.finish() == [] and stream.protocol_terminal is StreamStatus.FAILED


def test_20_finish_cancelled_and_other_reasons() -> None:
    stream = NativeStream()
    with pytest.raises(CodecError) as err:
        stream.finish(EndReason.CANCELLED)
    assert err.value.error_code is ErrorCode.CANCELLED and err.value.stage is Stage.RESPONSE
    assert stream.terminal is StreamStatus.CANCELLED
    with pytest.raises(CodecError, match="closed"):
        stream.finish(EndReason.EOF)
    assert stream.terminal is StreamStatus.CANCELLED
    other = NativeStream()
    with pytest.raises(CodecError) as err:
        other.finish("reset")
    assert err.value.kind is ErrorKind.UPSTREAM_ERROR and other.terminal is StreamStatus.INCOMPLETE


@pytest.mark.parametrize(
    ("options", "chunk"),
    [
        ({}, b"data: {bad}\n\n"),
        ({"max_total_bytes": 8}, b"data: {}\n\n"),
        ({"max_events": 1}, b"data: {}\n\ndata: {}\n\n"),
        ({}, b"data: [DONE]\n\n"),
        ({}, b"data: [1]\n\n"),
        ({"max_frame_bytes": 16}, sse({"response": {"x": "y" * 20}})),
    ],
)
def test_21_stream_errors_close_as_incomplete(options: dict[str, int], chunk: bytes) -> None:
    stream = NativeStream(**options)
    with pytest.raises(CodecError):
        stream.feed(chunk)
    assert stream.terminal is StreamStatus.INCOMPLETE
    with pytest.raises(CodecError, match="closed"):
        stream.finish()


def test_21b_non_positive_limits_fall_back_and_non_bytes_fail() -> None:
    assert NativeStream(max_total_bytes=0, max_events=-1).feed(sse({}) * 3) == [{}, {}, {}]
    stream = NativeStream()
    with pytest.raises(CodecError, match="bytes"):
        stream.feed("data: {}\n\n")  # type: ignore[arg-type]
    assert stream.terminal is StreamStatus.INCOMPLETE


# Google boundary.


def test_22_encode_request_wraps_the_body_unchanged() -> None:
    body = {
        "cachedContent": "cachedContents/1",
        "contents": [{"role": "model", "parts": [SIGNED_CALL]}],
        "generationConfig": {"temperature": 0.1, "candidateCount": 1},
        "labels": {"team": "npc"},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "sessionId": "client-session",
        "systemInstruction": {"parts": [{"text": "You are Gorm."}]},
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "tools": [{"functionDeclarations": [{"name": "f"}]}],
    }
    wrapped = encode_google_request(body)
    assert wrapped == {"request": body} and wrapped["request"] is body
    req = build_request("generateContent", wrapped, Bindings(project=P, model="gemini-x"))
    assert doc(req)["request"] == body
    assert ("x-machine-session-id", "client-session") in req.headers


@pytest.mark.parametrize("extra", ["project", "model", "unknown"])
def test_23_encode_request_refuses_provider_owned_and_unknown(extra: str) -> None:
    invalid(encode_google_request, {"contents": [], extra: "x"}, match=extra)


def test_23b_encode_request_shape_and_smallest_offender() -> None:
    invalid(encode_google_request, {"contents": [], "zeta": 1, "alpha": 2}, match="alpha")
    invalid(encode_google_request, {"contents": {}}, match="contents must be a list")
    invalid(encode_google_request, [], match="map")


def test_24_map_response() -> None:
    inner = FIXTURE["generate_content"]["response"]
    assert msgspec.json.decode(map_google_response(200, raw(FIXTURE["generate_content"]))) == inner
    error_body = b'{"error": {"code": 429,   "status": "RESOURCE_EXHAUSTED"}}'
    assert map_google_response(429, error_body) == error_body
    assert msgspec.json.decode(map_google_response(200, error_body)) == msgspec.json.decode(error_body)
    with pytest.raises(CodecError) as err:
        map_google_response(200, b"{bad}")
    assert err.value.kind is ErrorKind.INVALID_REQUEST
    for body in (b"[]", raw({"traceId": "t"})):
        with pytest.raises(CodecError):
            map_google_response(200, body)
    invalid(map_google_response, 200, {"response": {}})


def test_25_count_direct_and_nested() -> None:
    contents = [{"role": "user", "parts": [{"text": "Hello world"}, {"text": ""}]}, {"parts": []}]
    expected = {"request": {"model": "gemini-resolved", "contents": contents}}
    assert encode_count_request({"contents": contents}, "alias", "gemini-resolved") == expected
    nested = {"generateContentRequest": {"model": "models/gemini-resolved", "contents": contents}}
    assert encode_count_request(nested, "alias", "gemini-resolved") == expected
    for model in ("alias", "models/alias", "gemini-resolved"):
        nested = {"generateContentRequest": {"model": model, "contents": []}}
        assert encode_count_request(nested, "alias", "gemini-resolved")["request"]["contents"] == []


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"contents": "text"},
        {"contents": [{"role": 1, "parts": []}]},
        {"contents": [{"role": "", "parts": []}]},
        {"contents": [{"role": "user", "parts": "text"}]},
        {"contents": [{"role": "user"}]},
        {"contents": [{"parts": [{"text": 1}]}]},
        {"contents": [{"parts": ["text"]}]},
        {"contents": ["text"]},
        {"contents": [], "generateContentRequest": {"contents": []}},
        {"generateContentRequest": []},
        {"generateContentRequest": {"model": "m"}},
        {"generateContentRequest": {"model": 3, "contents": []}},
    ],
)
def test_26_count_broken_input_is_invalid(body: Any) -> None:
    invalid(encode_count_request, body, "alias", "gemini-resolved")


def test_26b_count_model_arguments_and_size() -> None:
    invalid(encode_count_request, {"contents": []}, 1, "gemini-resolved")
    invalid(encode_count_request, {"contents": []}, "alias", None)
    invalid(encode_count_request, {"contents": [], **{str(i): i for i in range(512)}}, "a", "b", match="too large")


@pytest.mark.parametrize(
    "body",
    [
        {"contents": [], "systemInstruction": {"parts": [{"text": "s"}]}},
        {"contents": [], "tools": []},
        {"contents": [], "toolConfig": {}},
        {"contents": [], "cachedContent": "c"},
        {"contents": [], "generationConfig": {}},
        {"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]},
        {"contents": [{"parts": [{"functionCall": {"name": "f", "args": {}}}]}]},
        {"contents": [{"parts": [{"text": "t", "thought": True}]}]},
        {"contents": [{"role": "user", "parts": [], "extra": 1}]},
        {"generateContentRequest": {"contents": [], "tools": []}},
    ],
)
def test_27_count_beyond_text_is_incompatible(body: dict[str, Any]) -> None:
    err = incompatible(encode_count_request, body, "alias", "gemini-resolved")
    assert err.error_code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    "body",
    [
        {"contents": [], "project": "p"},
        {"contents": [], "model": "m"},
        {"contents": [], "authorization": "Bearer x", "tools": []},
        {"generateContentRequest": {"contents": [], "project": "p"}},
        {"generateContentRequest": {"contents": [], "model": "models/other"}},
    ],
)
def test_28_count_provider_owned_is_invalid(body: dict[str, Any]) -> None:
    invalid(encode_count_request, body, "alias", "gemini-resolved")


def test_29_map_count_response() -> None:
    body = b'{"totalTokens": 3, "cachedContentTokenCount": 1}'
    assert map_count_response(200, body) == body
    assert map_count_response(200, b"{}") == b'{"totalTokens":0}'
    assert map_count_response(429, b"quota!") == b"quota!"
    for bad in (b'{"unexpected": 1}', b'{"totalTokens": -1}', b'{"totalTokens": "2"}', b'{"totalTokens": null}'):
        with pytest.raises(CodecError) as err:
            map_count_response(200, bad)
        assert err.value.kind is ErrorKind.INVALID_REQUEST
    for bad in (b"invalid", raw({"response": {"totalTokens": 1}})):
        with pytest.raises(CodecError):
            map_count_response(200, bad)


def test_30_google_stream_split_frame() -> None:
    data = sse(FIXTURE["stream_frame"])
    stream = GoogleStream()
    half = len(data) // 2
    assert stream.feed(data[:half]) == []
    [frame] = stream.feed(data[half:])
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    inner = msgspec.json.decode(frame[6:])
    assert inner == FIXTURE["stream_frame"]["response"]
    assert inner["candidates"][0]["content"]["parts"][0]["thoughtSignature"] == "c2lnLWI="
    assert stream.finish() == [] and stream.terminal is StreamStatus.EOF


def test_31_google_stream_broken_inputs() -> None:
    stream = GoogleStream()
    with pytest.raises(CodecError):
        stream.feed(b"data: {broken}\n\n")
    truncated = GoogleStream()
    assert truncated.feed(b'data: {"response":') == []
    with pytest.raises(CodecError):
        truncated.finish()
    assert truncated.terminal is StreamStatus.INCOMPLETE
    empty = GoogleStream()
    with pytest.raises(CodecError, match="missing response"):
        empty.feed(b"data: {}\n\n")
    assert empty.terminal is StreamStatus.INCOMPLETE
    with pytest.raises(CodecError) as err:
        GoogleStream().finish(EndReason.CANCELLED)
    assert err.value.error_code is ErrorCode.CANCELLED


def test_32_google_stream_requires_completion() -> None:
    with pytest.raises(CodecError, match="before Gemini completion"):
        GoogleStream().finish()
    text = {"response": {"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]}}
    stream = GoogleStream()
    assert len(stream.feed(sse(text))) == 1
    with pytest.raises(CodecError, match="before Gemini completion"):
        stream.finish()
    # A completed frame then a usage frame: both forwarded, eof fine.
    done = GoogleStream()
    stop = {"response": {"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "finishReason": "STOP"}]}}
    usage = {"response": {"usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1}}}
    assert len(done.feed(sse(stop) + sse(usage))) == 2 and done.finish() == []
    blocked = GoogleStream()
    assert len(blocked.feed(sse({"response": {"promptFeedback": {"blockReason": "SAFETY"}}}))) == 1
    assert blocked.finish() == []
    failed = GoogleStream()
    [frame] = failed.feed(sse({"error": {"code": 500, "status": "INTERNAL"}}))
    assert msgspec.json.decode(frame[6:]) == {"error": {"code": 500, "status": "INTERNAL"}}
    assert failed.finish() == []


def test_32b_flushed_frames_are_dropped_without_completion() -> None:
    stream = GoogleStream()
    stream.feed(b'data: {"response": {"candidates": []}}')
    with pytest.raises(CodecError, match="before Gemini completion"):
        stream.finish()
    assert stream.terminal is StreamStatus.INCOMPLETE


# Observer.


def wrapped_two_candidates() -> dict[str, Any]:
    return {
        "response": {
            "candidates": [{"index": 0, "finishReason": "STOP"}, {"index": 1, "finishReason": "MAX_TOKENS"}],
            "usageMetadata": {
                "promptTokenCount": 10,
                "candidatesTokenCount": 6,
                "thoughtsTokenCount": 2,
                "totalTokenCount": 18,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 10}],
            },
        },
        "opaque": {"secret": "opaque-value"},
    }


def test_33_observer_byte_by_byte_two_candidates() -> None:
    data = sse(wrapped_two_candidates())
    observer = UsageObserver()
    for i in range(len(data)):
        observer.feed(data[i : i + 1])
    observer.finish()
    facts = observer.facts()
    assert facts.transport_status is StreamStatus.EOF and facts.protocol_status is StreamStatus.INCOMPLETE
    assert (facts.candidate_count, facts.candidate_ambiguous) == (2, True)
    assert (facts.input_tokens, facts.output_tokens, facts.reasoning_tokens, facts.native_total) == (10, 6, 2, 18)
    assert facts.finish_reason == "STOP" and facts.finish_reasons == {0: "STOP", 1: "MAX_TOKENS"}
    assert facts.native_usage["promptTokensDetails"] == [{"modality": "TEXT", "tokenCount": 10}]
    assert facts.observation == "incomplete" and facts.source == "google_antigravity"
    assert "opaque-value" not in msgspec.json.encode(facts).decode()


def test_34_observe_response() -> None:
    ok = {
        "response": {
            "candidates": [{"finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2},
        }
    }
    facts = observe_response(200, raw(ok))
    assert facts.protocol_status is StreamStatus.COMPLETED and facts.observation == "complete"
    assert facts.usage_status == "complete" and (facts.input_tokens, facts.output_tokens) == (1, 2)
    error = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "private text"}}
    failed = observe_response(429, raw(error))
    assert failed.protocol_status is StreamStatus.FAILED
    assert (failed.error_code, failed.error_type) == ("429", "RESOURCE_EXHAUSTED")
    assert "private text" not in msgspec.json.encode(failed).decode()
    assert observe_response(503, b"<html/>").protocol_status is StreamStatus.FAILED


def stop_frame() -> bytes:
    return sse({"response": {"candidates": [{"index": 0, "finishReason": "STOP"}]}})


def test_35_finish_error_or_cancelled_after_stop() -> None:
    for reason, protocol, transport in (
        (EndReason.ERROR, StreamStatus.INCOMPLETE, StreamStatus.FAILED),
        (EndReason.CANCELLED, StreamStatus.CANCELLED, StreamStatus.CANCELLED),
    ):
        observer = UsageObserver()
        observer.feed(stop_frame())
        observer.finish(reason)
        facts = observer.facts()
        assert (facts.protocol_status, facts.transport_status) == (protocol, transport)


def test_36_byte_budget_marks_malformed() -> None:
    observer = UsageObserver(max_total_bytes=8)
    observer.feed(b"data: {}\n")
    facts = observer.facts()
    assert (facts.observation, facts.partial) == ("incomplete", True)
    assert facts.transport_status is StreamStatus.FAILED and "antigravity_observer_error" in facts.diagnostics


def test_37_usage_snapshots_replace_and_bare_documents() -> None:
    observer = UsageObserver()
    usage = {"response": {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2}}}
    observer.feed(stop_frame() + sse(usage) + sse(usage))
    observer.feed(sse({"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}}))
    assert observer.facts().transport_status is None and observer.facts().protocol_status is None
    observer.finish()
    facts = observer.facts()
    assert facts.protocol_status is StreamStatus.COMPLETED and facts.observation == "complete"
    assert (facts.input_tokens, facts.output_tokens, facts.native_total) == (10, 5, 15)


def test_37b_bad_counters_and_invalid_events() -> None:
    observer = UsageObserver()
    observer.feed(sse({"response": {"usageMetadata": {"promptTokenCount": -1, "candidatesTokenCount": None}}}))
    observer.feed(b"data: [DONE]\n\n" + stop_frame())
    observer.finish()
    facts = observer.facts()
    assert facts.input_tokens is None and facts.usage_status == "unknown"
    assert facts.protocol_status is StreamStatus.COMPLETED and facts.observation == "incomplete"
    assert {"invalid_usage_counter:promptTokenCount", "invalid_event"} <= set(facts.diagnostics)


@pytest.mark.parametrize(
    ("reason", "transport", "protocol"),
    [
        (EndReason.EOF, StreamStatus.EOF, StreamStatus.INCOMPLETE),
        (EndReason.CANCELLED, StreamStatus.CANCELLED, StreamStatus.CANCELLED),
        (EndReason.ERROR, StreamStatus.FAILED, StreamStatus.INCOMPLETE),
    ],
)
def test_38_over_budget_keeps_the_real_transport_reason(
    reason: EndReason, transport: StreamStatus, protocol: StreamStatus
) -> None:
    observer = UsageObserver(max_total_bytes=8)
    observer.feed(stop_frame())
    observer.finish(reason)
    first = observer.facts()
    assert (first.transport_status, first.protocol_status, first.partial) == (transport, protocol, True)
    observer.finish(EndReason.CANCELLED if reason is EndReason.EOF else EndReason.EOF)
    assert observer.facts() == first


def test_39_event_budget() -> None:
    for chunks in ([stop_frame() + b"data: {}\n\n"], [stop_frame(), b"data: {}\n\n"]):
        observer = UsageObserver(max_events=1)
        for chunk in chunks:
            observer.feed(chunk)
        observer.finish()
        facts = observer.facts()
        assert facts.transport_status is StreamStatus.EOF
        assert (facts.protocol_status, facts.observation) == (StreamStatus.INCOMPLETE, "incomplete")


def test_39b_parse_budget_with_injected_clock_and_passive_on_garbage() -> None:
    ticks = iter(range(100))
    observer = UsageObserver(parse_budget_s=1.5, clock=lambda: float(next(ticks)))
    observer.feed(stop_frame() + stop_frame())
    observer.finish()
    facts = observer.facts()
    assert facts.protocol_status is StreamStatus.INCOMPLETE and facts.partial
    assert "parse_budget_exhausted" in facts.diagnostics
    passive = UsageObserver()
    passive.feed("not bytes")  # type: ignore[arg-type]
    passive.finish()
    assert passive.facts().protocol_status is StreamStatus.INCOMPLETE


def test_40_end_to_end_lifecycle() -> None:
    load = build_request("loadCodeAssist", {}, Bindings(user_agent="oam/1.0"))
    assert doc(load)["metadata"] == {"ideType": 9, "pluginType": 2, "platform": 0}
    loaded = decode_response(load.operation, 200, {}, raw(FIXTURE["load_code_assist"]))
    project = project_id(loaded)
    assert project == "example-project"
    bound = Bindings(project=project, model="gemini-x", session_id="sess-1", request_id="agent-1")
    onboard = build_request("onboardUser", {"tierId": "standard-tier"}, bound)
    assert doc(onboard)["metadata"]["duetProject"] == project
    pending = decode_response(onboard.operation, 200, {}, raw(FIXTURE["onboard_pending"]))
    assert onboarding_status(pending).done is False
    done = decode_response(onboard.operation, 200, {}, raw(FIXTURE["onboard_done"]))
    assert onboarding_status(done).project == project
    catalog = build_request("fetchAvailableModels", {}, bound)
    models = available_models(decode_response(catalog.operation, 200, {}, raw(FIXTURE["fetch_available_models"])))
    assert models is not None and "gemini-x" in models
    generate = build_request("generateContent", encode_google_request({"contents": []}), bound)
    assert decode_response(generate.operation, 200, {}, raw(FIXTURE["generate_content"])) == FIXTURE["generate_content"]
    stream_req = build_request("streamGenerateContent", encode_google_request({"contents": []}), bound)
    stream = NativeStream()
    assert stream.feed(sse(FIXTURE["stream_frame"])) == [FIXTURE["stream_frame"]]
    assert stream.finish() == [] and stream_req.query == "alt=sse"


def test_exports() -> None:
    from oam_actors.models.codecs import antigravity

    assert codecs.antigravity is antigravity and "antigravity" in codecs.__all__
    assert sorted(antigravity.__all__) == sorted(set(antigravity.__all__))
    for name in antigravity.__all__:
        assert getattr(antigravity, name) is not None, name
    assert Operation.GENERATE_CONTENT.generation and not Operation.ONBOARD_USER.generation


# The canonical codec (the proxy model's seam).

FULL = Affinity(
    profile="oam-actors",
    endpoint="https://cloudcode-pa.googleapis.com",
    account="environment",
    credential_scope="ANTIGRAVITY_ACCESS_TOKEN",
    credential_version="1",
)


def agy(**options: Any) -> AntigravityCodec:
    return AntigravityCodec(project=P, session_id="S", request_ids=lambda: "agent-1", affinity=FULL, **options)


def canonical() -> Request:
    return Request(
        model="gemini-x",
        messages=[
            Message(role=Role.SYSTEM, content=[Text("You guard the gate.")]),
            Message(role=Role.USER, content=[Text("Open it")]),
        ],
        settings={"temperature": 0.2},
    )


def test_codec_wraps_the_google_body_into_the_native_envelope() -> None:
    encoded = agy(user_agent="oam-actors").encode_request(canonical(), stream=True)
    assert encoded.path == "/v1internal:streamGenerateContent?alt=sse"
    assert encoded.headers == {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "x-client-name": "antigravity",
        "user-agent": "oam-actors",
        "x-machine-session-id": "S",
    }
    assert msgspec.json.decode(encoded.body) == {
        "request": {
            "contents": [{"role": "user", "parts": [{"text": "Open it"}]}],
            "systemInstruction": {"parts": [{"text": "You guard the gate."}]},
            "generationConfig": {"temperature": 0.2},
            "sessionId": "S",
        },
        "project": P,
        "model": "gemini-x",
        "requestId": "agent-1",
        "userAgent": "antigravity",
        "requestType": "agent",
    }
    assert agy().encode_request(canonical()).path == "/v1internal:generateContent"
    invalid(AntigravityCodec(affinity=FULL).encode_request, canonical(), match="project")
    invalid(agy().encode_request, msgspec.structs.replace(canonical(), model="models/x"), match="safe single")


def test_codec_decodes_wrapped_answers_and_streams() -> None:
    codec = agy()
    response = codec.decode_response(200, {}, raw(FIXTURE["generate_content"]), model="gemini-x")
    assert [type(b) for b in response.output] == [Reasoning, ToolCall, ProviderState]
    assert response.stop_reason is StopReason.TOOL_USE and response.usage is not None
    assert response.output[2].origin.protocol == "antigravity"
    decoder = codec.new_stream(model="gemini-x")
    data = sse(FIXTURE["stream_frame"])
    events = [e for i in range(0, len(data), 5) for e in decoder.feed(data[i : i + 5])]
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolCallDone", "ProviderStateEvent", "UsageEvent"]
    assert [type(e) for e in decoder.finish()] == [Terminal]
    with pytest.raises(CodecError, match="missing response"):
        codec.decode_response(200, {}, b'{"candidates": []}')


def test_codec_errors_are_the_sanitized_native_ones() -> None:
    codec = agy()
    secret = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "secret"}}
    error = codec.decode_error(429, {"retry-after": "4"}, raw(secret))
    assert (error.error_code, error.retry_after) == (ErrorCode.RATE_LIMITED, 4.0)
    assert error.provider_code == "RESOURCE_EXHAUSTED"
    decoder = codec.new_stream(model="gemini-x")
    with pytest.raises(ProviderError) as err:
        decoder.feed(sse(secret))
    assert err.value.http_status is None and "secret" not in err.value.message
    with pytest.raises(ProviderError) as err:
        codec.decode_response(200, {}, raw(secret))
    assert err.value.error_code is ErrorCode.RATE_LIMITED
    for body in (b"data: [DONE]\n\n", b"data: {}\n\n"):
        with pytest.raises(CodecError):
            codec.new_stream(model="gemini-x").feed(body)
    unfinished = codec.new_stream(model="gemini-x")
    unfinished.feed(sse({"response": {"candidates": [{"content": {"parts": [{"text": "Hal"}]}}]}}))
    with pytest.raises(CodecError) as err:
        unfinished.finish()
    assert err.value.error_code is ErrorCode.GENERATION_FAILED
