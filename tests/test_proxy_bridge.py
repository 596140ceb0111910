"""Proxy models through the real ``oam-actors stdio`` subprocess against a loopback server:
a session's own ``{"type":"openai",…}`` model with a client tool round trip, the system model
from ``--model``, and the rules for keys and hosts."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from bridge_process import OPEN_GATE, BridgeProcess
from provider_servers import TEXT, ProviderServer, fixture, stream

SECRET = "sk-test-never-echo-4f9c"


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def envelope(action: str, arguments: dict[str, str]) -> str:
    return json.dumps({"action": action, "arguments": arguments})


def test_a_session_on_an_openai_backend_runs_a_client_tool_round(server: ProviderServer) -> None:
    server.push(
        stream(TEXT["openai"](envelope("open_gate", {"gate": "north"}))),
        stream(TEXT["openai"](envelope("respond", {}))),
        stream(TEXT["openai"]("The north gate ", "is open.")),
    )
    model = {"type": "openai", "baseUrl": server.url + "/v1", "model": "qwen"}
    with BridgeProcess(env={"OPENAI_API_KEY": SECRET}) as bridge:
        assert "openai" in bridge.call("initialize")["capabilities"]["modelTypes"]
        created = bridge.call("session/create", {"session": "guard", "instructions": "You guard the north gate.",
                                                 "tools": [OPEN_GATE], "model": model})
        assert created == {"session": "guard", "warnings": []}
        turn = bridge.request("session/respond", {"session": "guard", "prompt": "Let me through!"})
        call = bridge.tool_call(turn)
        assert call["params"]["call"]["name"] == "open_gate"
        assert call["params"]["call"]["arguments"] == {"gate": "north"}
        bridge.reply(call["id"], {"output": {"opened": True}})
        result = bridge.result(turn)
        listed = bridge.call("session/list")
        bridge.close()
    assert result["text"] == "The north gate is open."
    assert result["toolCalls"][0]["output"] == {"opened": True}
    assert listed["sessions"][0]["model"] == "openai"
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 3
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert server.requests[0].body["model"] == "qwen"
    assert "[open_gate" in server.requests[1].body["messages"][-1]["content"]  # the tool result reached the model
    assert not any(SECRET.encode() in line for line in bridge.raw_lines)


def test_keys_and_hosts_are_refused_in_protocol_messages(server: ProviderServer) -> None:
    with BridgeProcess(env={"OPENAI_API_KEY": SECRET}) as bridge:
        with_key = bridge.error(bridge.request("session/create", {
            "model": {"type": "openai", "baseUrl": server.url + "/v1", "model": "qwen", "apiKey": "sk-leaked-1"}}))
        far_host = bridge.error(bridge.request("session/create", {
            "model": {"type": "anthropic", "baseUrl": "http://10.1.2.3:8080", "model": "c"}}))
        bad_env = bridge.error(bridge.request("session/create", {
            "model": {"type": "gemini", "model": "g", "apiKeyEnv": "HOME"}}))
        bridge.close()
    assert (with_key["code"], with_key["data"]["code"]) == (-32602, "invalid_params")
    assert "'model.apiKey'" in with_key["message"] and "apiKeyEnv" in with_key["message"]
    assert far_host["code"] == -32602 and "'10.1.2.3'" in far_host["message"]
    assert bad_env["code"] == -32602 and "'model.apiKeyEnv'" in bad_env["message"]
    assert server.requests == []
    assert not any(b"sk-leaked-1" in line or SECRET.encode() in line for line in bridge.raw_lines)


def test_the_system_model_from_the_command_line(server: ProviderServer) -> None:
    server.push(stream(TEXT["openai"]("Halt! ", "Who goes there?")), fixture("openai", "rate_limited_429"))
    args = ["--model", f"openai:{server.url}/v1#qwen"]
    with BridgeProcess(args, env={"OPENAI_API_KEY": SECRET}) as bridge:
        availability = bridge.call("model/availability")
        bridge.call("session/create", {"session": "guard", "options": {"maxAttempts": 1}})
        first = bridge.result(bridge.request("session/respond", {"session": "guard", "prompt": "Hello"}))
        limited = bridge.error(bridge.request("session/respond", {"session": "guard", "prompt": "Hello again"}))
        transcript = bridge.call("session/transcript", {"session": "guard"})
        bridge.close()
    assert availability["available"] is True and availability["variant"] == "openai:qwen"
    assert first["text"] == "Halt! Who goes there?"
    assert (limited["code"], limited["data"]["code"], limited["data"]["retryAfterSeconds"]) == (
        -32005, "rate_limited", 2)
    assert "HTTP 429" in limited["message"]
    assert len(transcript["transcript"]["transcript"]["entries"]) == 2  # the rate-limited turn left nothing behind
