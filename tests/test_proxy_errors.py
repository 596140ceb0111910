"""ProxyModel against real loopback servers: the error table case by case, bad input of every
kind, keys, and rate-limit headers surfaced for the quota scheduler."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from provider_servers import (
    HANG,
    HANG_BEFORE_HEADERS,
    RESET,
    TEXT,
    ProviderServer,
    Reply,
    fixture,
    sse,
    stream,
)

from oam_actors.agent.model import GenerationRequest, StepKind, ToolSpec, Usage
from oam_actors import AgentError, ErrorCode
from oam_actors.models.proxy import Provider, ProxyConfig, ProxyModel, RateLimitReport

HANG_GUARD = 10.0  # seconds; only so a broken test fails instead of hanging the suite
KEYS = {"OPENAI_API_KEY": "sk-test-0P3N41", "ANTHROPIC_API_KEY": "sk-ant-test-9", "GEMINI_API_KEY": "AIza-test-7"}
SUFFIX = {"openai": "/v1", "anthropic": "", "gemini": ""}
STEP = GenerationRequest(kind=StepKind.RESPOND, system="You guard the gate.", prompt="Hello?")


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def model(server: ProviderServer, provider: str = "openai", *, environ: dict[str, str] | None = None, **fields: Any) -> ProxyModel:
    cfg = ProxyConfig(provider=Provider(provider), model="m1", base_url=server.url + SUFFIX[provider], **fields)
    return ProxyModel(cfg, environ=KEYS if environ is None else environ)


async def run_step(proxy: ProxyModel, request: GenerationRequest = STEP) -> list[str | Usage]:
    async with proxy:
        with anyio.fail_after(HANG_GUARD):
            return [piece async for piece in proxy.stream(request)]


async def failure(proxy: ProxyModel, request: GenerationRequest = STEP) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await run_step(proxy, request)
    return caught.value


# --- success, keys, headers ------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_a_recorded_stream_split_anywhere_reads_whole(server: ProviderServer, provider: str) -> None:
    server.push(fixture(provider, "stream_text"))
    pieces = await run_step(model(server, provider))
    assert pieces == ["The north ", "gate is ", "open.", Usage(input_tokens=42, cached_input_tokens=16, output_tokens=7)]


@pytest.mark.parametrize(
    ("provider", "path", "header", "value"),
    [
        ("openai", "/v1/chat/completions", "authorization", "Bearer sk-test-0P3N41"),
        ("anthropic", "/v1/messages", "x-api-key", "sk-ant-test-9"),
        ("gemini", "/v1beta/models/m1:streamGenerateContent?alt=sse", "x-goog-api-key", "AIza-test-7"),
    ],
)
async def test_each_provider_gets_its_path_and_key_header(
    server: ProviderServer, provider: str, path: str, header: str, value: str
) -> None:
    server.push(stream(TEXT[provider]("Hi.")))
    await run_step(model(server, provider))
    sent = server.requests[0]
    assert (sent.path, sent.headers[header]) == (path, value)


async def test_the_named_key_variable_wins_and_no_key_sends_no_header(server: ProviderServer) -> None:
    server.push(stream(TEXT["openai"]("a")), stream(TEXT["openai"]("b")))
    await run_step(model(server, environ={"TEAM_API_KEY": "sk-team", **KEYS}, api_key_env="TEAM_API_KEY"))
    await run_step(model(server, environ={}))
    assert server.requests[0].headers["authorization"] == "Bearer sk-team"
    assert "authorization" not in server.requests[1].headers


async def test_rate_limit_headers_of_a_success_are_exposed_and_hooked(server: ProviderServer) -> None:
    server.push(fixture("openai", "stream_text"))
    proxy = model(server)
    seen: list[RateLimitReport] = []
    proxy.on_rate_limit = seen.append
    await run_step(proxy)
    report = proxy.last_rate_limit
    assert report is not None and seen == [report]
    assert (report.status, report.info.requests.remaining, report.info.requests.reset_after) == (200, 499, 0.12)
    assert (report.info.tokens.remaining, report.info.tokens.reset_after) == (199950, 0.015)


async def test_a_429_is_reported_with_its_retry_after(server: ProviderServer) -> None:
    server.push(fixture("gemini", "resource_exhausted_429"))
    proxy = model(server, "gemini")
    await failure(proxy)
    assert proxy.last_rate_limit == RateLimitReport(429, proxy.last_rate_limit.info, retry_after=13.0)


async def test_a_recorded_signed_gemini_call_reads_as_an_envelope(server: ProviderServer) -> None:
    # Gemini 2.5 signs its calls; the model's own affinity lets the codec decode the signature.
    server.push(fixture("gemini", "stream_function_call_signed"))
    gate = ToolSpec("open_gate", "Open a gate.", {"type": "object", "properties": {"gate": {"type": "string"}}})
    decide = GenerationRequest(kind=StepKind.DECIDE, system="", prompt="Open it", tools=(gate,))
    pieces = await run_step(model(server, "gemini", native_tools=True), decide)
    assert pieces == ['{"action":"open_gate","arguments":{"gate":"north"}}', Usage(42, 16, 7)]


async def test_a_server_that_ignores_stream_answers_as_json(server: ProviderServer) -> None:
    body = b'{"id":"c1","object":"chat.completion","model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}'
    server.push(Reply(200, {"content-type": "application/json"}, [body]))
    assert await run_step(model(server)) == ["Hi.", Usage(5, 0, 2)]


# --- the error table -------------------------------------------------------------------------

TABLE = [
    # provider, fixture, code, retryAfterSeconds, words in the message
    ("openai", "rate_limited_429", ErrorCode.RATE_LIMITED, 2, "rate limit reached (HTTP 429)"),
    ("openai", "rate_limited_headers_only_429", ErrorCode.RATE_LIMITED, 360, "HTTP 429"),
    ("anthropic", "rate_limited_429", ErrorCode.RATE_LIMITED, 7, "HTTP 429"),
    ("gemini", "resource_exhausted_429", ErrorCode.RATE_LIMITED, 13, "HTTP 429"),
    ("openai", "context_length_400", ErrorCode.CONTEXT_SIZE_EXCEEDED, None, "longer than model 'm1'"),
    ("anthropic", "prompt_too_long_400", ErrorCode.CONTEXT_SIZE_EXCEEDED, None, "HTTP 400"),
    ("gemini", "token_limit_400", ErrorCode.CONTEXT_SIZE_EXCEEDED, None, "HTTP 400"),
    ("openai", "content_filter_400", ErrorCode.GUARDRAIL_VIOLATION, None, "safety policy (HTTP 400)"),
    ("openai", "unauthorized_401", ErrorCode.MODEL_UNAVAILABLE, None, "rejected the API key from OPENAI_API_KEY"),
    ("anthropic", "unauthorized_401", ErrorCode.MODEL_UNAVAILABLE, None, "ANTHROPIC_API_KEY (HTTP 401)"),
    ("openai", "forbidden_403", ErrorCode.MODEL_UNAVAILABLE, None, "refused access to model 'm1' (HTTP 403)"),
    ("anthropic", "forbidden_403", ErrorCode.MODEL_UNAVAILABLE, None, "HTTP 403"),
    ("gemini", "permission_denied_403", ErrorCode.MODEL_UNAVAILABLE, None, "HTTP 403"),
    ("openai", "model_not_found_404", ErrorCode.MODEL_UNAVAILABLE, None, "has no model 'm1'"),
    ("anthropic", "not_found_404", ErrorCode.MODEL_UNAVAILABLE, None, "HTTP 404"),
    ("gemini", "not_found_404", ErrorCode.MODEL_UNAVAILABLE, None, "HTTP 404"),
    ("openai", "bad_request_400", ErrorCode.INVALID_REQUEST, None, "rejected the request as invalid (HTTP 400)"),
    ("openai", "server_error_500_html", ErrorCode.GENERATION_FAILED, None, "failed to answer (HTTP 500)"),
    ("openai", "overloaded_503", ErrorCode.BUSY, None, "overloaded (HTTP 503)"),
    ("anthropic", "overloaded_529", ErrorCode.BUSY, None, "HTTP 529"),
    ("gemini", "unavailable_503", ErrorCode.BUSY, None, "HTTP 503"),
    ("openai", "stream_content_filter", ErrorCode.GUARDRAIL_VIOLATION, None, "safety policy"),
    ("gemini", "stream_safety", ErrorCode.GUARDRAIL_VIOLATION, None, "safety policy"),
    ("gemini", "prompt_blocked", ErrorCode.GUARDRAIL_VIOLATION, None, "safety policy"),
    ("anthropic", "stream_refusal", ErrorCode.REFUSAL, None, "refused"),
    ("openai", "stream_error_event", ErrorCode.GENERATION_FAILED, None, "in the stream"),
    ("anthropic", "stream_error_event", ErrorCode.BUSY, None, "(in the stream: overloaded_error)"),
]


@pytest.mark.parametrize(("provider", "name", "code", "retry_after", "words"), TABLE)
async def test_provider_errors_map_onto_the_protocol_table(
    server: ProviderServer, provider: str, name: str, code: ErrorCode, retry_after: int | None, words: str
) -> None:
    server.push(fixture(provider, name))
    error = await failure(model(server, provider))
    assert error.code is code
    assert error.extra.get("retryAfterSeconds") == retry_after
    assert ("retryAfter" in error.extra) == (retry_after is not None)
    assert words in error.message
    assert not any(key in error.message for key in KEYS.values())


async def test_a_401_without_a_key_says_which_variable_to_set(server: ProviderServer) -> None:
    server.push(fixture("openai", "unauthorized_401"))
    error = await failure(model(server, environ={}))
    assert error.message == (
        "OpenAI (127.0.0.1) wants an API key and none was sent: set OPENAI_API_KEY on the server (HTTP 401)."
    )


# --- bad input -------------------------------------------------------------------------------


def cut_stream(provider: str, ending: str) -> Reply:
    """Two thirds of a text stream (its first text included), then ``ending``."""
    reply = stream(TEXT[provider]("The gate ", "stays shut."), size=9, ending=ending)
    reply.chunks = reply.chunks[: len(reply.chunks) * 2 // 3]
    return reply


def invalid_json(provider: str) -> Reply:
    """A text stream whose second event's JSON is cut short (the frame itself is complete)."""
    frames = TEXT[provider]("The gate ", "stays shut.", "Go away.").split(b"\n\n")
    frames[1] = frames[1][:-12]
    return stream(b"\n\n".join(frames), size=40)


BAD_INPUT = [
    ("truncated", lambda p: fixture(p, "stream_truncated"), "ended before completion"),
    ("invalid JSON in a chunk", invalid_json, "not a JSON object"),
    ("oversize event", lambda p: stream(sse({"pad": "x" * 3000}), size=512), "exceeds 1024 bytes"),
    ("hang before headers", lambda p: Reply(ending=HANG_BEFORE_HEADERS), "did not answer within 0.3 s"),
    ("hang mid-stream", lambda p: cut_stream(p, HANG), "did not answer within 0.3 s"),
    ("connection reset", lambda p: cut_stream(p, RESET), "broke mid-response"),
    ("500 with HTML", lambda p: fixture("openai", "server_error_500_html"), "HTTP 500"),
]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize(("case", "make", "words"), BAD_INPUT, ids=[case for case, *_ in BAD_INPUT])
async def test_bad_input_becomes_generation_failed_within_the_timeout(
    server: ProviderServer, provider: str, case: str, make: Any, words: str
) -> None:
    server.push(make(provider))
    error = await failure(model(server, provider, read_timeout=0.3, max_event_bytes=1024))
    assert error.code is ErrorCode.GENERATION_FAILED
    assert words in error.message


async def test_the_recorded_invalid_json_stream_fails(server: ProviderServer) -> None:
    server.push(fixture("openai", "stream_invalid_json"))
    error = await failure(model(server))
    assert (error.code, error.message) == (
        ErrorCode.GENERATION_FAILED, "OpenAI (127.0.0.1): Provider response is not a JSON object.")


async def test_the_step_deadline_bounds_a_slow_drip(server: ProviderServer) -> None:
    server.push(cut_stream("openai", HANG))
    error = await failure(model(server, read_timeout=30, step_timeout=0.3))
    assert error.message == "OpenAI (127.0.0.1) did not finish the step within 0.3 s."


async def test_nothing_listening_is_model_unavailable() -> None:
    with ProviderServer() as gone:
        url = gone.url
    cfg = ProxyConfig(provider=Provider.OPENAI, model="m1", base_url=url + "/v1")
    error = await failure(ProxyModel(cfg, environ={}))
    assert error.code is ErrorCode.MODEL_UNAVAILABLE
    assert error.message == f"Cannot connect to OpenAI (127.0.0.1) at {url}/v1."


async def test_closing_the_stream_early_closes_the_response(server: ProviderServer) -> None:
    server.push(cut_stream("openai", HANG), stream(TEXT["openai"]("next")))
    async with model(server, read_timeout=5) as proxy:
        with anyio.fail_after(HANG_GUARD):
            pieces = proxy.stream(STEP)
            first = await anext(pieces)
            await pieces.aclose()  # what the agent does once a decide step holds its JSON
            after = [p async for p in proxy.stream(STEP)]
    assert first == "The gate "
    assert after[0] == "next"
