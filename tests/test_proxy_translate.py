"""The proxy layer's pure parts: step → provider request, stream events → agent text, config
parsing (protocol object and command line), and the quota hook."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from oam_actors.agent.model import GenerationRequest, Sampling, StepKind, ToolSpec, Usage
from oam_actors import AgentError, ErrorCode, ProtocolError
from oam_actors.models.codecs import (
    RateLimitInfo,
    RateLimitWindow,
    StopReason,
    Terminal,
    TextDelta,
    ToolCall,
    ToolCallDone,
    UsageEvent,
    codec_for,
)
from oam_actors.models.codecs import Usage as ProviderUsage
from oam_actors.models.proxy import (
    Provider,
    ProxyConfig,
    RateLimitReport,
    StepReader,
    config_from_wire,
    is_loopback,
    parse_model_spec,
    scheduler_hook,
    to_provider_request,
)
from oam_actors.models.scheduler import ManualClock, Priority, QuotaLimits, QuotaScheduler

GATE = ToolSpec("open_gate", "Open a gate.", {"type": "object", "properties": {"gate": {"type": "string"}}})
BELL = ToolSpec("ring_bell", "Ring the bell.", {"type": "object", "properties": {}})


def config(provider: str = "openai", **fields: Any) -> ProxyConfig:
    return ProxyConfig(provider=Provider(provider), model="m1", base_url="http://127.0.0.1:9/v1", **fields)


def step(kind: StepKind = StepKind.DECIDE, **fields: Any) -> GenerationRequest:
    return GenerationRequest(kind=kind, system="You guard the gate.", prompt="Open it!", **fields)


def wire(request: GenerationRequest, cfg: ProxyConfig) -> dict[str, Any]:
    """The JSON body the provider would receive."""
    codec = codec_for(cfg.provider.codec_name)
    return json.loads(codec.encode_request(to_provider_request(request, cfg), stream=True).body)


# --- requests --------------------------------------------------------------------------------


def test_envelope_mode_sends_system_and_prompt_and_no_tools() -> None:
    body = wire(step(tools=(GATE,), temperature=0.0, max_output_tokens=256), config())
    assert body["messages"] == [
        {"role": "system", "content": "You guard the gate."},
        {"role": "user", "content": "Open it!"},
    ]
    assert "tools" not in body and "tool_choice" not in body
    assert (body["temperature"], body["max_tokens"]) == (0.0, 256)


def test_native_decide_offers_all_tools_with_auto_choice() -> None:
    body = wire(step(tools=(GATE, BELL)), config(native_tools=True))
    assert [t["function"]["name"] for t in body["tools"]] == ["open_gate", "ring_bell"]
    assert body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("provider", "choice"),
    [
        ("openai", {"type": "function", "function": {"name": "open_gate"}}),
        ("anthropic", {"type": "tool", "name": "open_gate"}),
    ],
)
def test_native_tool_arguments_forces_its_tool(provider: str, choice: dict[str, Any]) -> None:
    request = step(StepKind.TOOL_ARGUMENTS, tools=(GATE,), tool_name="open_gate")
    body = wire(request, config(provider, native_tools=True))
    assert body["tool_choice"] == choice
    assert len(body["tools"]) == 1


def test_gemini_native_tools_become_function_declarations_without_a_choice() -> None:
    body = wire(step(tools=(GATE,)), config("gemini", native_tools=True))
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "open_gate", "description": "Open a gate.", "parameters": GATE.parameters}]}]
    assert "toolConfig" not in body


def test_reply_steps_never_offer_tools_even_in_native_mode() -> None:
    body = wire(step(StepKind.RESPOND, tools=(GATE,)), config(native_tools=True))
    assert "tools" not in body


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("openai", {"temperature": 0.0, "top_p": 0.9, "seed": 7, "max_tokens": 100}),
        ("anthropic", {"temperature": 0.0, "top_p": 0.9, "max_tokens": 100}),
    ],
)
def test_sampling_maps_to_each_providers_knobs(provider: str, expected: dict[str, Any]) -> None:
    request = step(StepKind.RESPOND, temperature=0.7, max_output_tokens=100, sampling=Sampling(top_k=1, top_p=0.9, seed=7))
    body = wire(request, config(provider))
    assert {k: body[k] for k in expected} == expected
    assert "top_k" not in body and ("seed" in body) == (provider == "openai")


def test_gemini_sampling_goes_to_generation_config() -> None:
    request = step(StepKind.RESPOND, temperature=0.5, max_output_tokens=64, sampling=Sampling(top_k=40, seed=3))
    body = wire(request, config("gemini"))
    assert body["generationConfig"] == {"temperature": 0.5, "maxOutputTokens": 64, "topK": 40, "seed": 3}
    assert body["systemInstruction"] == {"parts": [{"text": "You guard the gate."}]}


def test_max_tokens_never_exceed_the_configured_ceiling() -> None:
    body = wire(step(StepKind.RESPOND, max_output_tokens=100_000), config(max_output_tokens=512))
    assert body["max_tokens"] == 512


SCHEMA = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}


def test_structured_output_sends_the_schema_as_response_format() -> None:
    request = step(StepKind.STRUCTURED, schema=SCHEMA)
    openai = wire(request, config(structured_output=True))
    assert openai["response_format"] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}
    gemini = wire(request, config("gemini", structured_output=True))
    assert gemini["generationConfig"] == {
        "maxOutputTokens": 4096, "responseMimeType": "application/json", "responseJsonSchema": SCHEMA}
    assert "response_format" not in wire(request, config())  # off by default


def test_a_blank_prompt_is_still_sent() -> None:
    request = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="  ")
    assert wire(request, config())["messages"] == [{"role": "user", "content": "…"}]


# --- reading the stream ----------------------------------------------------------------------


def reader(kind: StepKind = StepKind.DECIDE, *, native: bool = False) -> StepReader:
    return StepReader(step(kind, tools=(GATE,)), native=native)


STOP = Terminal(StopReason.STOP)
CALL = ToolCallDone(0, ToolCall("call_1", "open_gate", {"gate": "north"}))


def test_envelope_mode_yields_text_as_it_arrives() -> None:
    r = reader()
    assert r.push([TextDelta(0, '{"action":'), TextDelta(0, '"open_gate"')]) == ['{"action":', '"open_gate"']
    usage = UsageEvent(ProviderUsage(input_tokens=10, output_tokens=3, cache_read_tokens=4))
    assert r.finish([TextDelta(0, "}"), usage, STOP]) == ["}", Usage(10, 4, 3)]


def test_native_call_becomes_the_envelope() -> None:
    r = reader(native=True)
    assert r.push([CALL]) == []
    assert r.finish([STOP]) == ['{"action":"open_gate","arguments":{"gate":"north"}}']


def test_native_tool_arguments_step_yields_only_the_arguments() -> None:
    r = reader(StepKind.TOOL_ARGUMENTS, native=True)
    assert r.finish([CALL, STOP]) == ['{"gate":"north"}']


def test_native_prose_means_respond_and_native_json_text_passes() -> None:
    prose = reader(native=True)
    assert prose.finish([TextDelta(0, "Welcome, traveller."), STOP]) == ['{"action":"respond","arguments":{}}']
    envelope = reader(native=True)
    text = '{"action": "open_gate", "arguments": {"gate": "west"}}'
    assert envelope.finish([TextDelta(0, text), STOP]) == [text]


def test_a_stray_call_in_envelope_mode_is_rendered_after_the_text() -> None:
    r = reader()
    assert r.push([TextDelta(0, "Sure.")]) == ["Sure."]
    assert r.finish([CALL, STOP]) == ['{"action":"open_gate","arguments":{"gate":"north"}}']


@pytest.mark.parametrize(
    ("stop", "code"), [(StopReason.SAFETY, ErrorCode.GUARDRAIL_VIOLATION), (StopReason.REFUSAL, ErrorCode.REFUSAL)]
)
def test_blocked_answers_raise(stop: StopReason, code: ErrorCode) -> None:
    with pytest.raises(AgentError) as caught:
        reader(StepKind.RESPOND).push([TextDelta(0, "I"), Terminal(stop)])
    assert caught.value.code is code


# --- configuration ---------------------------------------------------------------------------


def test_a_protocol_model_object_becomes_a_config() -> None:
    cfg = config_from_wire({
        "type": "anthropic", "model": "claude-x", "baseUrl": "http://127.0.0.1:8080/", "apiKeyEnv": "TEAM_API_KEY",
        "nativeTools": True, "structuredOutput": True, "timeoutSeconds": 30, "contextSize": 2048, "maxOutputTokens": 300,
    })
    assert cfg == ProxyConfig(
        provider=Provider.ANTHROPIC, model="claude-x", base_url="http://127.0.0.1:8080", api_key_env="TEAM_API_KEY",
        native_tools=True, structured_output=True, step_timeout=30.0, context_size=2048, max_output_tokens=300,
    )
    assert cfg.key_envs == ("TEAM_API_KEY",)


def test_defaults_follow_each_provider() -> None:
    gemini = config_from_wire({"type": "gemini", "model": "gemini-2.5-flash"})
    assert (gemini.url, gemini.key_envs) == (
        "https://generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY"))
    assert config_from_wire({"type": "openai", "model": "x"}).url == "https://api.openai.com/v1"


@pytest.mark.parametrize("key", ["apiKey", "api_key", "Authorization", "headers", "token"])
def test_a_key_in_the_model_object_is_refused(key: str) -> None:
    secret = "sk-live-do-not-echo"
    with pytest.raises(ProtocolError) as caught:
        config_from_wire({"type": "openai", "model": "x", key: secret})
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert f"'model.{key}'" in caught.value.message and "apiKeyEnv" in caught.value.message
    assert secret not in caught.value.message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"type": "openai"}, "model.model"),
        ({"type": "cohere", "model": "x"}, "model.type"),
        ({"type": "openai", "model": "x", "baseUrl": "ftp://h/"}, "model.baseUrl"),
        ({"type": "openai", "model": "x", "baseUrl": "http://user:pw@h/v1"}, "model.baseUrl"),
        ({"type": "openai", "model": "x", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY"}, "model.apiKeyEnv"),
        ({"type": "openai", "model": "x", "timeoutSeconds": 0}, "model.timeoutSeconds"),
        ({"type": "openai", "model": "x", "nativeTools": "yes"}, "model.nativeTools"),
        ({"type": "openai", "model": "x", "temperature": 1}, "model.temperature"),
    ],
)
def test_bad_model_objects_name_the_field(value: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        config_from_wire(value)
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert f"'{field}'" in caught.value.message


def test_model_specs_from_the_command_line() -> None:
    full = parse_model_spec("openai:http://127.0.0.1:8080/v1#qwen")
    assert full is not None and (full.url, full.model) == ("http://127.0.0.1:8080/v1", "qwen")
    short = parse_model_spec("gemini#gemini-2.5-flash")
    assert short is not None and short.url == "https://generativelanguage.googleapis.com"
    filled = parse_model_spec("anthropic", base_url="http://localhost:9", model="c")
    assert filled is not None and (filled.url, filled.model) == ("http://localhost:9", "c")
    assert parse_model_spec("scripted") is None
    with pytest.raises(ValueError, match="names no model"):
        parse_model_spec("openai:http://127.0.0.1:8080/v1")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("localhost", True), ("10.0.0.1", False), ("api.openai.com", False)],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --- rate limits to the quota scheduler ------------------------------------------------------


def test_a_429_cools_the_scheduler_down_for_retry_after() -> None:
    clock = ManualClock(100.0)
    scheduler = QuotaScheduler(QuotaLimits(max_concurrency=2), clock=clock)
    scheduler_hook(scheduler)(RateLimitReport(429, RateLimitInfo(retry_after=2.0), retry_after=2.0))
    assert scheduler.statistics().cooling_down_until == 102.0
    assert scheduler.statistics().throttles == 1


async def test_headers_feed_the_schedulers_budget() -> None:
    clock = ManualClock(0.0)
    scheduler = QuotaScheduler(QuotaLimits(max_concurrency=2), clock=clock)
    info = RateLimitInfo(requests=RateLimitWindow(limit=500, remaining=0, reset_after=2.0),
                         tokens=RateLimitWindow(limit=9000, remaining=8000, reset_after=0.5))
    scheduler_hook(scheduler)(RateLimitReport(200, info))
    admitted: list[float] = []

    async def ask() -> None:
        async with scheduler.admit("npc:gorm", Priority.DIALOGUE):
            admitted.append(clock.now())

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert admitted == []  # no requests left until the window resets
        clock.advance(2.0)
    assert admitted == [2.0]
    assert scheduler.statistics().throttles == 0
