"""Error mapping, retry-after and rate-limit headers, request validation, registry and exports
(reference §3, §9, checklist §14 items 54-60)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import msgspec
import pytest

import oam_actors.models.codecs as codecs
from oam_actors import AgentError, ErrorCode
from oam_actors.models.codecs import (
    Affinity,
    AnthropicCodec,
    CodecError,
    ErrorKind,
    GoogleCodec,
    Image,
    Limits,
    Message,
    OpenAICodec,
    Outcome,
    ProviderState,
    RateLimitInfo,
    RateLimitWindow,
    Request,
    Role,
    Stage,
    Text,
    ToolCall,
    ToolDefinition,
    ToolStatus,
    check_bounds,
    codec_for,
    error_code_for,
    parse_rate_limit_headers,
    retry_after_from_headers,
)

PROVIDERS = ["openai", "anthropic", "google"]
NOW = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def request(*messages: Message, **fields: Any) -> Request:
    return Request(model="m", messages=list(messages) or [Message(role=Role.USER, content=[Text("hi")])], **fields)


# --- status and code mapping ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, ErrorKind.INVALID_REQUEST, ErrorCode.INVALID_REQUEST),
        (401, ErrorKind.AUTHENTICATION, ErrorCode.MODEL_UNAVAILABLE),
        (403, ErrorKind.AUTHORIZATION, ErrorCode.MODEL_UNAVAILABLE),
        (404, ErrorKind.NOT_FOUND, ErrorCode.MODEL_UNAVAILABLE),
        (408, ErrorKind.INVALID_REQUEST, ErrorCode.GENERATION_FAILED),
        (409, ErrorKind.INVALID_REQUEST, ErrorCode.INVALID_REQUEST),
        (413, ErrorKind.INVALID_REQUEST, ErrorCode.CONTEXT_SIZE_EXCEEDED),
        (422, ErrorKind.INVALID_REQUEST, ErrorCode.INVALID_REQUEST),
        (429, ErrorKind.RATE_LIMITED, ErrorCode.RATE_LIMITED),
        (500, ErrorKind.UPSTREAM_ERROR, ErrorCode.GENERATION_FAILED),
        (502, ErrorKind.UPSTREAM_ERROR, ErrorCode.GENERATION_FAILED),
        (503, ErrorKind.UPSTREAM_ERROR, ErrorCode.BUSY),
        (504, ErrorKind.UPSTREAM_ERROR, ErrorCode.GENERATION_FAILED),
        (529, ErrorKind.UPSTREAM_ERROR, ErrorCode.BUSY),
        (302, ErrorKind.UPSTREAM_ERROR, ErrorCode.GENERATION_FAILED),
    ],
)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_status_mapping(provider: str, status: int, kind: ErrorKind, code: ErrorCode) -> None:
    error = codec_for(provider).decode_error(status, {}, b"<html>Bad Gateway</html>")
    assert (error.kind, error.error_code, error.http_status) == (kind, code, status)
    assert (error.stage, error.outcome) == (Stage.RESPONSE, Outcome.KNOWN)
    assert error.provider_code is None


@pytest.mark.parametrize(
    ("provider_code", "code"),
    [
        ("context_length_exceeded", ErrorCode.CONTEXT_SIZE_EXCEEDED),
        ("content_filter", ErrorCode.GUARDRAIL_VIOLATION),
        ("guardrail_violation", ErrorCode.GUARDRAIL_VIOLATION),
        ("refusal", ErrorCode.REFUSAL),
        ("rate_limit_exceeded", ErrorCode.RATE_LIMITED),
        ("rate_limited", ErrorCode.RATE_LIMITED),
        ("unsupported_language", ErrorCode.UNSUPPORTED_LANGUAGE),
        ("invalid_schema", ErrorCode.INVALID_SCHEMA),
        ("model_not_found", ErrorCode.MODEL_UNAVAILABLE),
        ("model_unavailable", ErrorCode.MODEL_UNAVAILABLE),
        ("busy", ErrorCode.BUSY),
        ("RESOURCE_EXHAUSTED", ErrorCode.RATE_LIMITED),
        ("invalid_request_error", ErrorCode.INVALID_REQUEST),
    ],
)
def test_provider_code_mapping(provider_code: str, code: ErrorCode) -> None:
    assert error_code_for(400, provider_code) is code


def test_context_hint_wins_and_in_stream_default() -> None:
    assert error_code_for(400, "invalid_request_error", context_exceeded=True) is ErrorCode.CONTEXT_SIZE_EXCEEDED
    assert error_code_for(None, None) is ErrorCode.GENERATION_FAILED


def test_openai_fixtures() -> None:
    root = Path(__file__).parent / "fixtures" / "providers" / "openai"
    context = OpenAICodec().decode_error(400, {}, (root / "error_context_length.json").read_bytes())
    assert (context.provider_code, context.error_code) == ("context_length_exceeded", ErrorCode.CONTEXT_SIZE_EXCEEDED)
    headers = [
        ("X-Request-Id", "req_123"),
        ("x-ratelimit-limit-tokens", "200000"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "1m30s"),
        ("x-ratelimit-remaining-requests", "499"),
        ("x-ratelimit-reset-requests", "120ms"),
    ]
    limited = OpenAICodec().decode_error(429, headers, (root / "error_rate_limit.json").read_bytes())
    assert (limited.provider_code, limited.error_code, limited.request_id) == (
        "rate_limit_exceeded",
        ErrorCode.RATE_LIMITED,
        "req_123",
    )
    assert limited.retry_after == 90.0  # the exhausted window's reset


def test_compatible_server_context_message() -> None:
    raw = b'{"error":{"message":"This model\'s maximum context length is 4096 tokens.","type":"BadRequestError"}}'
    assert OpenAICodec().decode_error(400, {}, raw).error_code is ErrorCode.CONTEXT_SIZE_EXCEEDED


def test_provider_code_is_bounded() -> None:
    raw = msgspec.json.encode({"error": {"code": "x" * 2000}})
    assert len(OpenAICodec().decode_error(400, {}, raw).provider_code or "") == 512


def test_to_agent_error() -> None:
    error = OpenAICodec().decode_error(429, {"retry-after": "7"}, b"{}")
    agent = error.to_agent_error()
    assert isinstance(agent, AgentError)
    assert (agent.code, agent.message, agent.retry_after) == (
        ErrorCode.RATE_LIMITED,
        "OpenAI provider request failed",
        7.0,
    )
    assert agent.data()["retryAfterSeconds"] == 7
    codec_error = codecs.CodecError(
        ErrorKind.INCOMPATIBLE,
        "x",
        stage=Stage.TRANSLATION,
        error_code=ErrorCode.INVALID_REQUEST,
        outcome=Outcome.NOT_SUBMITTED,
    )
    assert codec_error.to_agent_error().code is ErrorCode.INVALID_REQUEST and codec_error.retry_after is None


# --- retry-after and rate-limit headers -------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Fri, 01 May 2026 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Fri, 01 May 2026 11:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "86400"}, 600.0),
        ({}, None),
    ],
)
def test_retry_after(provider: str, headers: dict[str, str], expected: float | None) -> None:  # §14.60
    error = codec_for(provider).decode_error(429, headers, b"{}", now=NOW)
    assert error.kind is ErrorKind.RATE_LIMITED
    assert error.retry_after == expected


def test_retry_after_from_headers_directly() -> None:
    assert retry_after_from_headers([(b"Retry-After-Ms", b"250")], now=NOW) == 0.25
    assert retry_after_from_headers({"retry-after-ms": "x", "retry-after": "3"}, now=NOW) == 3.0


def test_openai_rate_limit_headers() -> None:
    info = parse_rate_limit_headers(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-limit-tokens": "200000",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-remaining-tokens": "199000",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-reset-tokens": "6m0s",
        },
        now=NOW,
    )
    assert info == RateLimitInfo(
        requests=RateLimitWindow(limit=500, remaining=499, reset_after=0.12),
        tokens=RateLimitWindow(limit=200000, remaining=199000, reset_after=360.0),
    )
    assert info.cool_down() == 360.0


def test_anthropic_rate_limit_headers() -> None:
    info = parse_rate_limit_headers(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2026-05-01T12:00:20Z",
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-tokens-remaining": "39000",
            "anthropic-ratelimit-tokens-reset": "2026-05-01T12:00:45Z",
            "retry-after": "21",
        },
        now=NOW,
    )
    assert info.requests == RateLimitWindow(limit=50, remaining=0, reset_after=20.0)
    assert info.tokens == RateLimitWindow(limit=40000, remaining=39000, reset_after=45.0)
    assert info.requests.exhausted and not info.tokens.exhausted
    assert info.retry_after == 21.0


def test_anthropic_429_without_retry_after_uses_exhausted_window() -> None:
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-05-01T12:00:20Z",
    }
    assert AnthropicCodec().decode_error(429, headers, b"{}", now=NOW).retry_after == 20.0
    assert AnthropicCodec().decode_error(500, headers, b"{}", now=NOW).retry_after is None


def test_garbage_rate_limit_headers_are_unknown() -> None:
    info = parse_rate_limit_headers(
        {"x-ratelimit-limit-requests": "lots", "x-ratelimit-reset-requests": "1 minute"}, now=NOW
    )
    assert info == RateLimitInfo()
    assert info.cool_down() is None


# --- request validation -----------------------------------------------------------------------


def test_bounds() -> None:  # §14.55
    check_bounds({"a": "1234"}, Limits(max_bytes=5, max_string_bytes=4))
    with pytest.raises(CodecError, match="string exceeds 4 bytes"):
        check_bounds({"a": "12345"}, Limits(max_bytes=5, max_string_bytes=4))
    with pytest.raises(CodecError, match="exceeds 9 string bytes"):
        check_bounds({"a": "1234", "b": "5678"}, Limits(max_bytes=9))
    with pytest.raises(CodecError, match="exceeds 3 nodes"):
        check_bounds([1, 2, 3], Limits(max_nodes=3))
    nested: dict[str, Any] = {}
    for _ in range(40):
        nested = {"a": nested}
    with pytest.raises(CodecError, match="nests deeper than 32") as err:
        check_bounds(nested)
    assert (err.value.kind, err.value.stage) == (ErrorKind.INVALID_REQUEST, Stage.VALIDATION)


def test_bounds_reject_non_json_data() -> None:
    for value in ({1: "a"}, {"x": float("nan")}, {"x": object()}, "\ud800", [b"bytes"]):
        with pytest.raises(CodecError):
            check_bounds(value)
    with pytest.raises(CodecError, match="map entries"):
        check_bounds({str(i): i for i in range(3)}, Limits(max_entries=2))
    with pytest.raises(CodecError, match="list items"):
        check_bounds([0, 1, 2], Limits(max_items=2))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_large_inline_image_needs_raised_limits(provider: str) -> None:  # §14.54
    image = Message(role=Role.USER, content=[Image("image/png", "A" * 2_000_000)])
    with pytest.raises(CodecError, match="string exceeds"):
        codec_for(provider).encode_request(request(image))
    raised = codec_for(provider, limits=Limits(max_bytes=12_000_000, max_string_bytes=6_000_000))
    assert len(raised.encode_request(request(image)).body) > 2_000_000


def test_canonical_rules() -> None:  # §14.56 and friends
    cases: list[tuple[Request, str]] = [
        (Request(model="", messages=[]), "model must be a concrete string"),
        (request(Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", "")])), "arguments must not be empty"),
        (request(Message(role=Role.ASSISTANT, content=[ToolCall("", "f", {})])), r"id must be 1-256 bytes"),
        (request(Message(role=Role.ASSISTANT, content=[ToolCall("c", "bad name", {})])), r"must match"),
        (
            request(Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", {}), ToolCall("c", "g", {})])),
            "duplicates tool call",
        ),
        (request(tools=[ToolDefinition(name="f"), ToolDefinition(name="f")]), "duplicates 'f'"),
        (request(Message(role=Role.TOOL, content=[Text("x")])), "tool_call_id is required"),
        (request(Message(role=Role.USER, content=[Text("")])), "text must not be empty"),
        (request(extensions={"plain": 1}), "not a namespaced key"),
        (request(Message(role="narrator", content=[Text("x")])), "role must be one of"),  # type: ignore[arg-type]
    ]
    for bad, message in cases:
        with pytest.raises(CodecError, match=message) as err:
            OpenAICodec().encode_request(bad)
        assert err.value.kind is ErrorKind.INVALID_REQUEST and err.value.outcome is Outcome.NOT_SUBMITTED


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plain_string_roles_and_status_work(provider: str) -> None:
    typed = request(
        Message(role=Role.ASSISTANT, content=[ToolCall("c", "f", {})]),
        Message(role=Role.TOOL, tool_call_id="c", status=ToolStatus.ERROR, content=[Text("no")]),
    )
    plain = request(
        Message(role="assistant", content=[ToolCall("c", "f", {})]),  # type: ignore[arg-type]
        Message(role="tool", tool_call_id="c", status="error", content=[Text("no")]),  # type: ignore[arg-type]
    )
    codec = codec_for(provider)
    assert codec.encode_request(plain).body == codec.encode_request(typed).body


@pytest.mark.parametrize("provider", PROVIDERS)
def test_root_level_provider_state_is_incompatible(provider: str) -> None:  # §14.58
    state = ProviderState("x", {}, Affinity(profile="p"))
    bad = Request(model="m", messages=[state])  # type: ignore[list-item]
    with pytest.raises(CodecError, match="root-level provider state") as err:
        codec_for(provider).encode_request(bad)
    assert err.value.kind is ErrorKind.INCOMPATIBLE


@pytest.mark.parametrize("provider", PROVIDERS)
def test_namespaced_tool_names_are_rejected_before_dispatch(provider: str) -> None:  # §14.59
    with pytest.raises(CodecError) as err:
        codec_for(provider).encode_request(request(tools=[ToolDefinition(name="clock::curr_time")]))
    assert err.value.kind is ErrorKind.INCOMPATIBLE and err.value.outcome is Outcome.NOT_SUBMITTED
    assert err.value.compatibility == {"capability": "tool_namespaces"}


# --- registry and exports ---------------------------------------------------------------------


def test_registry() -> None:  # §14.57
    assert codecs.PROTOCOLS == ("openai", "anthropic", "google")
    assert isinstance(codec_for("openai", path="/chat/completions"), OpenAICodec)
    assert codec_for("openai", path="/chat/completions").encode_request(request()).path == "/chat/completions"
    assert isinstance(codec_for("anthropic"), AnthropicCodec) and isinstance(codec_for("google"), GoogleCodec)
    with pytest.raises(CodecError, match="Unknown provider protocol") as err:
        codec_for("responses")
    assert err.value.kind is ErrorKind.INCOMPATIBLE
    assert err.value.compatibility == {"field": "protocol", "reason": "unknown"}


def test_codec_affinity_protocol_is_forced() -> None:
    assert OpenAICodec(affinity=Affinity(profile="p", protocol="google")).affinity == Affinity(
        profile="p", protocol="openai"
    )


def test_exports() -> None:
    assert sorted(codecs.__all__) == sorted(set(codecs.__all__))
    for name in codecs.__all__:
        assert getattr(codecs, name) is not None, name
    public = {n for n in dir(codecs) if not n.startswith("_")}
    modules = {"anthropic", "google", "openai"}
    assert public - modules == set(codecs.__all__)


def test_canonical_values_round_trip_through_msgspec() -> None:
    from oam_actors.models.codecs import ContentBlock, StreamEvent, ToolCallDone

    blocks = [Text("a"), ToolCall("c", "f", {"x": 1}), ProviderState("k", [1], Affinity(profile="p"))]
    assert msgspec.json.decode(msgspec.json.encode(blocks), type=list[ContentBlock]) == blocks
    event = ToolCallDone(0, ToolCall("c", "f", {}))
    assert msgspec.json.decode(msgspec.json.encode(event), type=StreamEvent) == event
