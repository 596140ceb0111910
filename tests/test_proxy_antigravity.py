"""Antigravity over a real loopback ``v1internal`` server: the native lifecycle through the facade
(checklist item 40 on the wire), a session turn with a client tool through the proxy model (agent
level and the real ``oam-actors stdio`` process), and the error table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from antigravity_server import PROJECT, TOKEN, AntigravityServer, json_reply, native_stream, native_text
from bridge_process import OPEN_GATE, BridgeProcess, check_order

from oam_actors.agent import (
    Agent,
    GenerationRequest,
    JsonOutput,
    StepKind,
    ToolCallStarted,
    TurnEvent,
    parse_tool_definitions,
)
from oam_actors import AgentError, ErrorCode, ProtocolError
from oam_actors.models.codecs.antigravity import (
    Bindings,
    GoogleStream,
    NativeStream,
    StreamStatus,
    UsageObserver,
    available_models,
    build_request,
    decode_response,
    encode_google_request,
    onboarding_status,
    project_id,
)
from oam_actors.models.proxy import Provider, ProxyConfig, ProxyModel, config_from_wire

HANG_GUARD = 10.0  # seconds; only so a broken test fails instead of hanging the suite
ENV = {"ANTIGRAVITY_ACCESS_TOKEN": TOKEN, "ANTIGRAVITY_PROJECT": PROJECT}
CALL = '{"action":"open_gate","arguments":{"gate":"north"}}'
RESPOND = '{"action":"respond","arguments":{}}'
STEP = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="Hi")


@pytest.fixture
def server() -> Iterator[AntigravityServer]:
    with AntigravityServer() as running:
        yield running


def proxy(server: AntigravityServer, environ: dict[str, str] = ENV, **fields: Any) -> ProxyModel:
    config = ProxyConfig(provider=Provider.ANTIGRAVITY, model="gemini-x", base_url=server.url, **fields)
    return ProxyModel(config, environ=environ)


def sent(server: AntigravityServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests]


# --- the native lifecycle over HTTP, through the facade ------------------------------------


def post(client: httpx.Client, op: str, body: dict[str, Any], bindings: Bindings) -> httpx.Response:
    request = build_request(op, body, bindings)
    headers = [*request.headers, ("authorization", f"Bearer {TOKEN}")]  # the host adds credentials
    return client.post(request.target, headers=headers, content=request.body)


def test_lifecycle_load_onboard_catalog_generate_and_stream(server: AntigravityServer) -> None:
    with httpx.Client(base_url=server.url, timeout=HANG_GUARD) as client:
        loaded = post(client, "loadCodeAssist", {}, Bindings(user_agent="oam-tests"))
        loaded_doc = decode_response("loadCodeAssist", loaded.status_code, loaded.headers.multi_items(), loaded.content)
        project = project_id(loaded_doc)
        assert project == PROJECT
        bound = Bindings(project=project, model="gemini-x", session_id="sess-1", request_id="agent-1")
        statuses = []
        for _ in range(2):  # the host polls the long-running operation
            answer = post(client, "onboardUser", {"tierId": "standard-tier"}, bound)
            statuses.append(onboarding_status(decode_response("onboardUser", answer.status_code, [], answer.content)))
        assert [s.done for s in statuses] == [False, True] and statuses[1].project == PROJECT
        catalog = post(client, "fetchAvailableModels", {}, bound)
        models = available_models(decode_response("fetchAvailableModels", 200, [], catalog.content))
        assert models is not None and models["gemini-x"]["quotaInfo"] == {"remainingFraction": 0.75}

        whole = {
            "response": {"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "finishReason": "STOP"}]},
            "traceId": "t-1",
        }
        server.push(json_reply(whole))
        generated = post(client, "generateContent", encode_google_request({"contents": []}), bound)
        assert decode_response("generateContent", generated.status_code, [], generated.content) == whole

        server.push(native_text("The north ", "gate is open."))
        wrapped = encode_google_request({"contents": [{"role": "user", "parts": [{"text": "Gate?"}]}]})
        request = build_request("streamGenerateContent", wrapped, bound)
        native, google, observer = NativeStream(), GoogleStream(), UsageObserver()
        documents, frames = [], []
        headers = [*request.headers, ("authorization", f"Bearer {TOKEN}")]
        with client.stream("POST", request.target, headers=headers, content=request.body) as response:
            for chunk in response.iter_raw():
                documents += native.feed(chunk)
                frames += google.feed(chunk)
                observer.feed(chunk)
    documents += native.finish()
    frames += google.finish()
    observer.finish()
    assert [d["traceId"] for d in documents] == ["trace-0", "trace-1"] and native.terminal is StreamStatus.EOF
    texts = [msgspec.json.decode(f[6:])["candidates"][0]["content"]["parts"][0]["text"] for f in frames]
    assert texts == ["The north ", "gate is open."]
    facts = observer.facts()
    assert (facts.protocol_status, facts.input_tokens, facts.output_tokens) == (StreamStatus.COMPLETED, 42, 7)
    assert [r.path for r in server.requests] == [
        "/v1internal:loadCodeAssist",
        "/v1internal:onboardUser",
        "/v1internal:onboardUser",
        "/v1internal:fetchAvailableModels",
        "/v1internal:generateContent",
        "/v1internal:streamGenerateContent?alt=sse",
    ]
    assert server.requests[-1].headers["x-machine-session-id"] == "sess-1"


# --- a session turn with a client tool through the proxy model -------------------------------


async def test_agent_turn_with_a_client_tool(server: AntigravityServer) -> None:
    server.push(native_text(CALL), native_text(RESPOND), native_text("The north ", "gate is open."))
    tools, _ = parse_tool_definitions([OPEN_GATE])
    async with proxy(server) as model:
        agent = Agent(model, tools=tools)

        async def answer_tools(event: TurnEvent) -> None:
            if isinstance(event, ToolCallStarted) and event.execution == "client":
                assert agent.submit_tool_result(event.call.id, JsonOutput({"opened": True}))

        with anyio.fail_after(HANG_GUARD):
            result = await agent.respond("Open the north gate.", emit=answer_tools)
    assert result.text == "The north gate is open."
    [record] = result.tool_calls
    assert (record.call.name, record.call.arguments) == ("open_gate", {"gate": "north"})
    assert record.output == JsonOutput({"opened": True})
    assert [r.path for r in server.requests] == ["/v1internal:streamGenerateContent?alt=sse"] * 3
    bodies = sent(server)
    assert {(b["project"], b["model"], b["userAgent"], b["requestType"]) for b in bodies} == {
        (PROJECT, "gemini-x", "antigravity", "agent")
    }
    assert len({b["requestId"] for b in bodies}) == 3 and all(b["requestId"].startswith("agent-") for b in bodies)
    assert all("model" not in b["request"] and "project" not in b["request"] for b in bodies)
    sessions = {b["request"]["sessionId"] for b in bodies}
    assert len(sessions) == 1
    for recorded in server.requests:
        assert recorded.headers["authorization"] == f"Bearer {TOKEN}"
        assert recorded.headers["x-client-name"] == "antigravity" and recorded.headers["user-agent"] == "oam-actors"
        assert recorded.headers["x-machine-session-id"] in sessions
    last_prompt = bodies[2]["request"]["contents"][-1]["parts"][0]["text"]
    assert 'open_gate {"gate":"north"} → {"opened":true}' in last_prompt


def test_a_session_turn_through_the_stdio_bridge(server: AntigravityServer) -> None:
    server.push(native_text(CALL), native_text(RESPOND), native_text("Opened ", "for you."))
    model = f"antigravity:{server.url}#gemini-x"
    with BridgeProcess(["--model", model], env=ENV) as bridge:
        bridge.call("session/create", {"session": "gate", "tools": [OPEN_GATE]})
        request = bridge.request("session/respond", {"session": "gate", "prompt": "Open the north gate."})
        call = bridge.tool_call(request)
        assert call["params"]["call"]["name"] == "open_gate"
        assert call["params"]["call"]["arguments"] == {"gate": "north"}
        bridge.reply(call["id"], {"output": {"opened": True}})
        result = bridge.result(request)
        assert result["text"] == "Opened for you."
        assert result["toolCalls"][0]["output"] == {"opened": True}
        assert bridge.close() == 0
        check_order(bridge.log)
    assert {b["project"] for b in sent(server)} == {PROJECT}


# --- configuration: credentials and project never from protocol messages ---------------------


def test_the_project_comes_from_configuration_first_then_the_environment(server: AntigravityServer) -> None:
    server.push(native_text("Hi."))
    configured = proxy(server, environ={"ANTIGRAVITY_ACCESS_TOKEN": TOKEN}, project=PROJECT)

    async def run() -> list[Any]:
        async with configured:
            return [p async for p in configured.stream(STEP)]

    assert anyio.run(run)[0] == "Hi."
    assert sent(server)[0]["project"] == PROJECT


@pytest.mark.parametrize("key", ["project", "cloudaicompanionProject", "accessToken"])
def test_a_protocol_model_object_cannot_carry_a_project_or_credentials(key: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        config_from_wire({"type": "antigravity", "model": "gemini-x", key: "x"})
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert config_from_wire({"type": "antigravity", "model": "gemini-x"}).provider is Provider.ANTIGRAVITY


# --- the error table --------------------------------------------------------------------------


async def failure(model: ProxyModel) -> AgentError:
    with pytest.raises(AgentError) as caught:
        async with model:
            with anyio.fail_after(HANG_GUARD):
                async for _ in model.stream(STEP):
                    pass
    return caught.value


async def test_rate_limit_carries_retry_after_and_no_provider_text(server: AntigravityServer) -> None:
    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "secret quota detail"}}
    server.push(json_reply(body, 429, {"retry-after": "7"}))
    error = await failure(proxy(server))
    wire = error.to_wire()
    assert (error.code, error.retry_after, wire["data"]["retryAfterSeconds"]) == (ErrorCode.RATE_LIMITED, 7.0, 7)
    assert "secret" not in str(wire) and "HTTP 429" in error.message


async def test_stream_error_frame_and_truncated_stream(server: AntigravityServer) -> None:
    unavailable = {"error": {"code": 503, "status": "UNAVAILABLE", "message": "secret"}, "traceId": "t"}
    server.push(native_stream(unavailable))
    error = await failure(proxy(server))
    assert error.code is ErrorCode.BUSY and "secret" not in error.message
    unfinished = {"response": {"candidates": [{"content": {"parts": [{"text": "Hal"}]}}]}}
    server.push(native_stream(unfinished))
    assert (await failure(proxy(server))).code is ErrorCode.GENERATION_FAILED
    server.push(native_stream({"response": {}}, size=3))
    server.replies[-1].chunks.append(b"data: [DONE]\n\n")
    assert (await failure(proxy(server))).code is ErrorCode.GENERATION_FAILED


async def test_missing_project_fails_before_sending(server: AntigravityServer) -> None:
    error = await failure(proxy(server, environ={"ANTIGRAVITY_ACCESS_TOKEN": TOKEN}))
    assert error.code is ErrorCode.INVALID_REQUEST and "project" in error.message
    assert server.requests == []


@pytest.mark.parametrize(
    ("environ", "code"),
    [
        ({"ANTIGRAVITY_ACCESS_TOKEN": "wrong", "ANTIGRAVITY_PROJECT": PROJECT}, ErrorCode.MODEL_UNAVAILABLE),
        ({"ANTIGRAVITY_ACCESS_TOKEN": TOKEN, "ANTIGRAVITY_PROJECT": "someone-else"}, ErrorCode.MODEL_UNAVAILABLE),
    ],
)
async def test_credentials_and_project_refused_upstream(
    server: AntigravityServer, environ: dict[str, str], code: ErrorCode
) -> None:
    error = await failure(proxy(server, environ=environ))
    assert error.code is code and "private detail" not in error.message
