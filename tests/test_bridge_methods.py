"""The core methods through the real ``oam-actors stdio`` process (reference §9 items 16-37, 41-43,
46-47 and 54-63; items 20, 25's unavailable model, 29's model request, 44, 48 and 53 need an
in-process model or caller and are covered where those live)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import OPEN_GATE, BridgeProcess, check_order, scripted

CORE_METHODS = [
    "initialize",
    "ping",
    "model/availability",
    "session/create",
    "session/respond",
    "session/cancel",
    "session/reset",
    "session/delete",
    "session/list",
    "session/transcript",
    "session/setInstructions",
    "session/setContextNote",
    "session/setTools",
    "session/compact",
    "schema/validate",
    "tools/validate",
    "shutdown",
]
WAVE = {"name": "wave", "description": "Wave."}
DEAL_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "choice": {"type": "string", "enum": ["sell", "refuse", "haggle"]}},
    "required": ["reasoning", "choice"],
}


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    """One process with a scripted system model, shared by the tests (each uses its own sessions)."""
    with BridgeProcess(["--model", "scripted"]) as process:
        yield process
        assert process.close() == 0
        check_order(process.log)


def error_code(bridge: BridgeProcess, method: str, params: Any) -> tuple[int, str]:
    error = bridge.error(bridge.request(method, params))
    return error["code"], error["data"]["code"]


def create(bridge: BridgeProcess, session: str, steps: list[Any] | None = None, **params: Any) -> dict[str, Any]:
    return bridge.call("session/create", {"session": session, "model": scripted(steps or []), **params})


def entry(bridge: BridgeProcess, session: str) -> dict[str, Any]:
    [found] = [s for s in bridge.call("session/list")["sessions"] if s["session"] == session]
    return found


def events(related: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["event"] for m in related if m.get("method") == "session/event"]


# --- initialize / ping / model/availability ------------------------------------------------------


def test_initialize_describes_the_server(bridge: BridgeProcess) -> None:
    result = bridge.call("initialize", {"client": {"name": "unit-test", "version": "1"}, "protocolVersion": "1.0"})
    assert list(result) == ["protocolVersion", "server", "capabilities", "model"]
    assert result["protocolVersion"] == "1.0"
    assert result["server"] == {"name": "oam-actors", "version": "0.1.0"}
    caps = result["capabilities"]
    assert set(CORE_METHODS) <= set(caps["methods"]) and caps["methods"] == sorted(caps["methods"])
    assert caps["notifications"][:2] == ["session/event", "tool/cancel"]  # then extensions' ones
    assert caps["clientRequests"] == ["tool/call"]
    # Exactly the references' list; every type "model" may name is the extension modelTypes.
    assert caps["models"] == ["system", "scripted"]
    assert caps["modelTypes"] == ["system", "scripted", "openai", "anthropic", "gemini", "antigravity", "device"]
    assert (caps["batch"], caps["maxSessions"], caps["streaming"], caps["clientTools"]) == (False, 64, True, True)
    assert result["model"] == {
        "available": True,
        "contextSize": 4096,
        "variant": "Scripted",
        "supportedLanguages": ["en"],
    }


def test_initialize_accepts_any_1_x_version_only(bridge: BridgeProcess) -> None:
    assert error_code(bridge, "initialize", {"protocolVersion": "2.0"}) == (-32602, "invalid_params")
    assert bridge.call("initialize", {"protocolVersion": "1.3"})["protocolVersion"] == "1.0"
    assert bridge.call("initialize")["protocolVersion"] == "1.0"


def test_ping_answers_an_empty_object_whatever_the_params(bridge: BridgeProcess) -> None:
    assert bridge.call("ping") == {}
    assert bridge.call("ping", {"anything": [1, 2]}) == {}


def test_model_availability_of_the_scripted_system_model(bridge: BridgeProcess) -> None:
    assert bridge.call("model/availability") == {
        "available": True,
        "contextSize": 4096,
        "variant": "Scripted",
        "supportedLanguages": ["en"],
    }


def test_without_a_system_model_only_explicit_models_work() -> None:
    with BridgeProcess() as bridge:
        availability = bridge.call("model/availability")
        assert (availability["available"], availability["reason"], availability["status"]) == (
            False,
            "unknown",
            "unavailable",
        )
        assert error_code(bridge, "session/create", {}) == (-32001, "model_unavailable")
        assert error_code(bridge, "session/create", {"model": "system"}) == (-32001, "model_unavailable")
        assert bridge.call("session/create", {"model": "scripted"})["session"].startswith("s")
        assert bridge.close() == 0


def test_scripted_models_can_be_disabled() -> None:
    with BridgeProcess(["--no-scripted", "--model", "scripted"]) as bridge:
        capabilities = bridge.call("initialize")["capabilities"]
        assert capabilities["models"] == ["system"]
        assert capabilities["modelTypes"] == ["system", "openai", "anthropic", "gemini", "antigravity", "device"]
        assert error_code(bridge, "session/create", {"model": {"type": "scripted", "steps": []}}) == (
            -32602,
            "invalid_params",
        )
        assert error_code(bridge, "session/create", {"model": "scripted"}) == (-32602, "invalid_params")
        # A failed create without "session" still used up a generated id (as K does).
        assert bridge.call("session/create", {})["session"] == "s3"
        assert bridge.close() == 0


# --- session/create ------------------------------------------------------------------------------


def test_create_answers_the_id_and_generated_ids_count_up() -> None:
    with BridgeProcess() as bridge:
        result = bridge.call(
            "session/create",
            {"session": "gorm", "instructions": "You are Gorm.", "model": scripted([{"text": "Hmph."}])},
        )
        assert result == {"session": "gorm", "warnings": []}
        assert bridge.call("session/create", {"model": "scripted"}) == {"session": "s1", "warnings": []}
        assert bridge.call("session/create", {"model": "scripted"})["session"] == "s2"
        assert error_code(bridge, "session/create", {"session": "gorm", "model": "scripted"}) == (
            -32021,
            "session_exists",
        )
        error = bridge.error(bridge.request("session/create", {"session": "s1", "model": "scripted"}))
        assert error["data"] == {"code": "session_exists", "session": "s1"}
        assert bridge.close() == 0


def test_the_session_limit_is_checked_last() -> None:
    with BridgeProcess(["--max-sessions", "1"]) as bridge:
        bridge.call("session/create", {"session": "one", "model": "scripted"})
        error = bridge.error(bridge.request("session/create", {"session": "two", "model": "scripted"}))
        assert (error["code"], error["data"]) == (-32022, {"code": "session_limit", "limit": 1})
        assert error_code(bridge, "session/create", {"session": "one", "model": "scripted"}) == (
            -32021,
            "session_exists",
        )
        assert error_code(bridge, "session/create", {"session": "two", "model": 5}) == (-32602, "invalid_params")
        assert bridge.call("initialize")["capabilities"]["maxSessions"] == 1
        bridge.call("session/delete", {"session": "one"})
        assert bridge.call("session/create", {"session": "two", "model": "scripted"})["session"] == "two"
        assert bridge.close() == 0


def test_unknown_parameters_are_warned_about(bridge: BridgeProcess) -> None:
    result = bridge.call(
        "session/create",
        {"session": "typo", "model": "scripted", "instructionz": "typo", "options": {"temprature": 0.5}},
    )
    assert result["warnings"] == [
        "Unknown parameter 'instructionz' was ignored.",
        "Unknown parameter 'options.temprature' was ignored.",
    ]


def test_more_than_five_tools_get_one_warning(bridge: BridgeProcess) -> None:
    tools = [{"name": f"tool_{i}", "description": f"Tool {i}."} for i in range(1, 7)]
    warnings = create(bridge, "six", tools=tools)["warnings"]
    assert len(warnings) == 1 and "6 tools" in warnings[0]
    assert bridge.call("session/setTools", {"session": "six", "tools": tools[:3]}) == {"session": "six", "warnings": []}


@pytest.mark.parametrize(
    ("params", "mentions"),
    [
        ({"options": {"toolChoice": "sometimes"}}, "toolChoice"),
        ({"options": {"toolChoice": {"tool": "ghost"}}}, "ghost"),
        ({"model": scripted([{"dance": True}])}, "model.steps[0]"),
        ({"model": scripted([{"error": "oops"}])}, "guardrail_violation"),
        ({"model": {"type": "quantum"}}, "quantum"),
        ({"model": "quantum"}, "quantum"),
        ({"tools": [{"name": "open gate"}]}, "name"),
        ({"tools": [{"name": "x", "execution": "server"}]}, "execution"),
        ({"tools": [{"name": "respond"}]}, "respond"),
        ({"tools": [{"name": "a"}, {"name": "a"}]}, "Duplicate"),
        ({"tools": "nope"}, "tools"),
        ({"tools": [5]}, "tools[0]"),
        ({"session": ""}, "session"),
        ({"session": "a\u0007b"}, "session"),
        ({"session": "x" * 129}, "session"),
        ({"session": 5}, "session"),
        ({"options": {"userLabel": " "}}, "userLabel"),
        ({"options": 3}, "options"),
        ({"options": {"maxToolRounds": -1}}, "maxToolRounds"),
        ({"options": {"maxToolCalls": 1.5}}, "maxToolCalls"),
        ({"options": {"temperature": -0.1}}, "temperature"),
        ({"options": {"sampling": {"seed": 3}}}, "sampling"),
        ({"options": {"sampling": "creative"}}, "sampling"),
        ({"options": {"toolTimeoutSeconds": 1e19}}, "toolTimeoutSeconds"),
        ({"options": {"toolTimeoutSeconds": -1}}, "toolTimeoutSeconds"),
        ({"options": {"toolTimeoutSeconds": 86401}}, "toolTimeoutSeconds"),
        ({"tools": [{"name": "slow", "timeoutSeconds": 1e19}]}, "timeoutSeconds"),
        ({"history": {"entries": 5}}, "history"),
        ({"history": {"hello": "world"}}, "history"),
        ({"instructions": 7}, "instructions"),
    ],
)
def test_create_refuses_bad_params(bridge: BridgeProcess, params: dict[str, Any], mentions: str) -> None:
    params = {"model": "scripted", **params}
    error = bridge.error(bridge.request("session/create", params))
    assert (error["code"], error["data"]["code"]) == (-32602, "invalid_params"), error
    assert mentions in error["message"]


def test_an_infinite_timeout_is_refused(bridge: BridgeProcess) -> None:
    params = '{"model":"scripted","options":{"toolTimeoutSeconds":1e999}}'  # 1e999: JSON text, not a float
    line = f'{{"jsonrpc":"2.0","id":"inf","method":"session/create","params":{params}}}'
    [reply] = bridge.exchange(line)
    assert (reply["id"], reply["error"]["code"]) == ("inf", -32602)


def test_a_bad_tool_schema_is_invalid_schema(bridge: BridgeProcess) -> None:
    error = bridge.error(
        bridge.request("session/create", {"model": "scripted", "tools": [{"name": "x", "parameters": {"type": "wat"}}]})
    )
    assert (error["code"], error["data"]["code"], error["data"]["path"]) == (
        -32007,
        "invalid_schema",
        "tools[0].parameters",
    )


@pytest.mark.parametrize("timeout", [86400, 0, 0.2])
def test_timeouts_in_range_are_accepted(bridge: BridgeProcess, timeout: float) -> None:
    result = bridge.call(
        "session/create",
        {
            "model": "scripted",
            "options": {"toolTimeoutSeconds": timeout},
            "tools": [{"name": "t", "description": "T.", "timeoutSeconds": timeout}],
        },
    )
    assert result["warnings"] == []


def test_sampling_options(bridge: BridgeProcess) -> None:
    options = {
        "sampling": {"topP": 0.9, "seed": 7},
        "temperature": 0.3,
        "maxResponseTokens": 64,
        "userLabel": "Player",
        "assistantLabel": "Gorm",
        "trimHistory": False,
        "reservedResponseTokens": 10,
        "maxAttempts": 1,
        "maxToolRounds": 2,
        "maxToolCalls": 3,
        "enabledTools": [],
    }
    warnings = bridge.call("session/create", {"model": "scripted", "options": options})["warnings"]
    assert len(warnings) == 1 and "topP" in warnings[0]
    assert bridge.call("session/create", {"model": "scripted", "options": {"sampling": "greedy"}})["warnings"] == []
    assert bridge.call("session/create", {"model": "scripted", "options": {"sampling": {"topK": 3}}})["warnings"] == []


def test_tool_limit_setting_with_set_tools_errors(bridge: BridgeProcess) -> None:
    create(bridge, "badtools")
    assert error_code(
        bridge, "session/setTools", {"session": "badtools", "tools": [{"name": "slow", "timeoutSeconds": 1e19}]}
    ) == (-32602, "invalid_params")
    assert error_code(bridge, "session/setTools", {"session": "badtools"}) == (-32602, "invalid_params")
    assert error_code(bridge, "session/setTools", {"session": "nobody", "tools": []}) == (-32020, "session_not_found")


# --- session/respond ----------------------------------------------------------------------------


def test_a_plain_turn_without_streaming(bridge: BridgeProcess) -> None:
    create(bridge, "forge", [{"text": "Welcome to the forge."}])
    request = bridge.request("session/respond", {"session": "forge", "prompt": "Hello"})
    response, related = bridge.response(request)
    result = response["result"]
    assert list(result) == ["session", "text", "toolCalls", "usage", "steps"]
    assert (result["session"], result["text"], result["toolCalls"]) == ("forge", "Welcome to the forge.", [])
    assert list(result["usage"]) == ["inputTokens", "cachedInputTokens", "outputTokens", "totalTokens"]
    assert result["usage"]["totalTokens"] == result["usage"]["inputTokens"] + result["usage"]["outputTokens"]
    [step] = result["steps"]
    assert (step["index"], step["toolCallingMode"], step["kind"], step["isRepair"]) == (
        0,
        "disallowed",
        "respond",
        False,
    )
    assert related == []


def test_a_streamed_turn_sends_its_events_first(bridge: BridgeProcess) -> None:
    text = "Steel is forged in fire and patience."
    create(bridge, "smith", [{"text": text, "chunks": 5}])
    request = bridge.request("session/respond", {"session": "smith", "prompt": "Tell me", "stream": True})
    response, related = bridge.response(request)
    streamed = events(related)
    assert streamed[0]["type"] == "modelStep" and streamed[0]["step"]["kind"] == "respond"
    deltas = [e["delta"] for e in streamed if e["type"] == "text"]
    assert len(deltas) > 1 and "".join(deltas) == text == response["result"]["text"]
    assert all(list(m["params"])[:2] == ["session", "requestId"] and m["params"]["session"] == "smith" for m in related)
    assert all(e["type"] != "completed" for e in streamed)


def test_respond_checks_its_params(bridge: BridgeProcess) -> None:
    create(bridge, "strict")
    error = bridge.error(bridge.request("session/respond", {"session": "strict"}))
    assert error["code"] == -32602 and "'prompt'" in error["message"]
    assert error_code(bridge, "session/respond", {"session": "strict", "prompt": 5}) == (-32602, "invalid_params")
    assert error_code(bridge, "session/respond", {"session": "strict", "prompt": "x", "stream": "yes"}) == (
        -32602,
        "invalid_params",
    )
    error = bridge.error(bridge.request("session/respond", {"session": "ghost", "prompt": "x"}))
    assert (error["code"], error["data"]) == (-32020, {"code": "session_not_found", "session": "ghost"})
    assert error_code(bridge, "session/respond", {"prompt": "x"}) == (-32602, "invalid_params")


def test_an_empty_prompt_is_allowed(bridge: BridgeProcess) -> None:
    create(bridge, "quiet", [{"template": "[{prompt}]"}])
    assert bridge.call("session/respond", {"session": "quiet", "prompt": ""})["text"] == "[]"


def test_unknown_respond_params_are_warned_about(bridge: BridgeProcess) -> None:
    create(bridge, "warned", [{"text": "ok"}])
    result = bridge.call("session/respond", {"session": "warned", "prompt": "x", "temprature": 1})
    assert result["warnings"] == ["Unknown parameter 'temprature' was ignored."]
    assert list(result)[-1] == "warnings"


def test_structured_output(bridge: BridgeProcess) -> None:
    create(bridge, "deal", [{"json": {"choice": "haggle", "reasoning": "Too cheap."}}])
    request = bridge.request(
        "session/respond", {"session": "deal", "prompt": "Offer: 3 gold", "schema": DEAL_SCHEMA, "stream": True}
    )
    response, related = bridge.response(request)
    result = response["result"]
    assert result["structured"] == {"reasoning": "Too cheap.", "choice": "haggle"}
    assert list(result["structured"]) == ["reasoning", "choice"]
    assert list(result)[:3] == ["session", "text", "structured"]
    assert json.loads(result["text"]) == result["structured"]
    partials = [e for e in events(related) if e["type"] == "partial"]
    assert partials and partials[-1]["value"] == result["structured"]
    error = bridge.error(
        bridge.request("session/respond", {"session": "deal", "prompt": "x", "schema": {"type": "nope"}})
    )
    assert (error["code"], error["data"]["code"], error["data"]["path"]) == (-32007, "invalid_schema", "schema")


def test_structured_output_drops_undeclared_keys(bridge: BridgeProcess) -> None:
    create(bridge, "calm", [{"json": {"choice": "sell", "reasoning": "Fair price.", "mood": "calm"}}])
    result = bridge.call(
        "session/respond", {"session": "calm", "prompt": "x", "schema": DEAL_SCHEMA, "toolChoice": "none"}
    )
    assert result["structured"] == {"reasoning": "Fair price.", "choice": "sell"}
    assert result["text"] == '{"reasoning":"Fair price.","choice":"sell"}'


def test_client_tool_round_trip(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "gate",
        [
            {"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north", "force": True}}]},
            {"template": "Gate result: {toolOutput}"},
        ],
        tools=[OPEN_GATE],
        options={"toolChoice": "required"},
    )
    request = bridge.request("session/respond", {"session": "gate", "prompt": "Open it", "stream": True})
    call = bridge.tool_call(request)
    assert call["id"].startswith("t-")
    assert list(call["params"]) == ["session", "requestId", "call"]
    assert (call["params"]["session"], call["params"]["requestId"]) == ("gate", request)
    assert call["params"]["call"]["name"] == "open_gate"
    assert call["params"]["call"]["arguments"] == {"gate": "north"}
    assert call["params"]["call"]["id"].startswith("call_") and len(call["params"]["call"]["id"]) == 29
    assert not any(m.get("id") == request for m in bridge.exchange())  # no answer while the tool is out
    bridge.reply(call["id"], {"output": {"opened": True}})
    response, related = bridge.response(request)
    result = response["result"]
    assert result["text"] == 'Gate result: {"opened":true}'
    [record] = result["toolCalls"]
    assert list(record) == ["call", "output", "isError", "durationSeconds"]
    assert (record["output"], record["isError"], record["call"]) == ({"opened": True}, False, call["params"]["call"])
    assert result["steps"][0]["toolCallingMode"] == "required"
    kinds = [m["params"]["event"]["type"] if m["method"] == "session/event" else m["method"] for m in related]
    started = next(
        i
        for i, m in enumerate(related)
        if m.get("method") == "session/event" and m["params"]["event"]["type"] == "toolCallStarted"
    )
    assert related[started]["params"]["event"]["execution"] == "client"
    assert started < kinds.index("tool/call")
    assert "toolCallCompleted" in kinds


@pytest.mark.parametrize(
    ("reply", "output", "text"),
    [
        (
            {"error": {"code": -32000, "message": "Gate subsystem offline"}},
            "Gate subsystem offline",
            "1:Error: Gate subsystem offline",
        ),
        (
            {"result": {"output": "The chain is jammed.", "isError": True}},
            "The chain is jammed.",
            "1:Error: The chain is jammed.",
        ),
        ({"result": {"output": {"jam": 1}, "isError": True}}, '{"jam":1}', '1:Error: {"jam":1}'),
        ({"result": {"opened": True}}, {"opened": True}, '1:{"opened":true}'),
        ({"result": "ok"}, "ok", "1:ok"),
    ],
)
def test_tool_reply_forms(bridge: BridgeProcess, reply: dict[str, Any], output: Any, text: str) -> None:
    session = f"forms-{bridge.count()}"  # a fresh session per case
    create(
        bridge,
        session,
        [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "n"}}]}, {"template": "1:{toolOutput}"}],
        tools=[OPEN_GATE],
    )
    request = bridge.request("session/respond", {"session": session, "prompt": "go"})
    call = bridge.tool_call(request)
    bridge.send({"jsonrpc": "2.0", "id": call["id"], **reply})
    result = bridge.result(request)
    [record] = result["toolCalls"]
    assert (record["output"], record["isError"]) == (output, text.startswith("1:Error"))
    assert result["text"] == text


def test_two_calls_in_one_round_run_one_after_another(bridge: BridgeProcess) -> None:
    calls = [{"name": "open_gate", "arguments": {"gate": "east"}}, {"name": "open_gate", "arguments": {"gate": "west"}}]
    create(bridge, "both", [{"toolCalls": calls}, {"template": "{toolOutputs}"}], tools=[OPEN_GATE])
    request = bridge.request("session/respond", {"session": "both", "prompt": "both gates"})
    first = bridge.tool_call(request)
    assert first["params"]["call"]["arguments"] == {"gate": "east"}
    bridge.reply(first["id"], {"output": "Opened."})
    second = bridge.tool_call(request)
    assert second["params"]["call"]["arguments"] == {"gate": "west"}
    bridge.reply(second["id"], {"opened": False})
    result = bridge.result(request)
    assert [r["output"] for r in result["toolCalls"]] == ["Opened.", {"opened": False}]
    assert result["text"] == 'Opened.\n{"opened":false}'


def test_an_unanswered_tool_times_out_and_is_cancelled(bridge: BridgeProcess) -> None:
    slow = {**OPEN_GATE, "timeoutSeconds": 0.2}
    create(
        bridge,
        "late",
        [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "s"}}]}, {"template": "T:{toolOutput}"}],
        tools=[slow],
    )
    request = bridge.request("session/respond", {"session": "late", "prompt": "go", "stream": True})
    call = bridge.tool_call(request)
    response, related = bridge.response(request)
    result = response["result"]
    [record] = result["toolCalls"]
    assert record["isError"] is True and "timed out" in record["output"] and "timed out" in result["text"]
    [cancel] = [m for m in related if m.get("method") == "tool/cancel"]
    assert list(cancel["params"]) == ["session", "requestId", "id", "callId", "reason"]
    assert cancel["params"]["id"] == call["id"] and cancel["params"]["callId"] == call["params"]["call"]["id"]
    assert (cancel["params"]["session"], cancel["params"]["requestId"]) == ("late", request)
    assert "timed out" in cancel["params"]["reason"]
    completed = next(
        i
        for i, m in enumerate(related)
        if m.get("method") == "session/event" and m["params"]["event"]["type"] == "toolCallCompleted"
    )
    assert completed < related.index(cancel)
    assert bridge.exchange(json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": {"output": "late"}})) == []
    assert (
        bridge.call("session/transcript", {"session": "late"})["transcript"]["transcript"]["entries"][1]["output"][
            "type"
        ]
        == "error"
    )


def test_per_turn_tool_choice_overrides_the_session(bridge: BridgeProcess) -> None:
    create(bridge, "choosy", [{"text": "No tools today."}], tools=[OPEN_GATE], options={"toolChoice": "required"})
    result = bridge.call("session/respond", {"session": "choosy", "prompt": "hi", "toolChoice": "none"})
    assert (result["steps"][0]["toolCallingMode"], result["toolCalls"]) == ("disallowed", [])
    error = bridge.error(
        bridge.request("session/respond", {"session": "choosy", "prompt": "hi", "toolChoice": {"tool": "ghost"}})
    )
    assert error["code"] == -32602 and "ghost" in error["message"]


def test_a_forced_tool_may_come_from_a_pipelined_set_tools(bridge: BridgeProcess) -> None:
    create(bridge, "waver", [{"toolCalls": [{"name": "wave"}]}, {"template": "{toolOutput}"}])
    set_tools = bridge.request("session/setTools", {"session": "waver", "tools": [WAVE]})
    request = bridge.request("session/respond", {"session": "waver", "prompt": "wave", "toolChoice": {"tool": "wave"}})
    call = bridge.tool_call(request)
    bridge.reply(call["id"], {"output": "waved"})
    assert bridge.result(set_tools) == {"session": "waver", "warnings": []}
    result = bridge.result(request)
    assert result["text"] == "waved"
    # wave has no parameters: it is called with {} without a model step (§6.5).
    first = result["steps"][0]
    assert (first["kind"], first["completedToolRounds"], first["enabledTools"]) == ("decide", 1, ["wave"])


def test_model_errors_fail_only_their_turn(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "moody",
        [
            {"error": "guardrail_violation", "message": "Unsafe content."},
            {"error": "context_size_exceeded"},
            {"text": "Recovered."},
        ],
    )
    first = bridge.error(bridge.request("session/respond", {"session": "moody", "prompt": "a"}))
    assert (first["code"], first["data"]["code"]) == (-32002, "guardrail_violation") and "Unsafe content." in first[
        "message"
    ]
    assert error_code(bridge, "session/respond", {"session": "moody", "prompt": "b"}) == (
        -32004,
        "context_size_exceeded",
    )
    assert bridge.call("session/respond", {"session": "moody", "prompt": "c"})["text"] == "Recovered."
    assert entry(bridge, "moody")["entries"] == 2


def test_transient_errors_are_retried_per_step(bridge: BridgeProcess) -> None:
    create(
        bridge, "retry", [{"error": "busy"}, {"error": "generation_failed"}, {"text": "Third time."}, {"text": "Next."}]
    )
    assert bridge.call("session/respond", {"session": "retry", "prompt": "a"})["text"] == "Third time."
    assert bridge.call("session/respond", {"session": "retry", "prompt": "b"})["text"] == "Next."


def test_a_plain_turn_takes_one_model_step(bridge: BridgeProcess) -> None:
    create(bridge, "one", [{"text": "first"}, {"text": "second"}])
    assert [s["kind"] for s in bridge.call("session/respond", {"session": "one", "prompt": "a"})["steps"]] == [
        "respond"
    ]
    assert bridge.call("session/respond", {"session": "one", "prompt": "b"})["text"] == "second"
    assert bridge.call("session/respond", {"session": "one", "prompt": "c"})["text"] == "(script exhausted)"


def test_the_system_model_is_used_by_default(bridge: BridgeProcess) -> None:
    session = bridge.call("session/create", {})["session"]
    assert bridge.call("session/respond", {"session": session, "prompt": "hi"})["text"] == "(script exhausted)"
    assert entry(bridge, session)["model"] == "system"


def test_a_respond_notification_runs_a_turn_with_a_private_request_id(bridge: BridgeProcess) -> None:
    create(bridge, "told", [{"text": "One.", "chunks": 1}, {"text": "Two.", "chunks": 1}, {"text": "Three."}])
    start = bridge.count()
    bridge.notify("session/respond", {"session": "told", "prompt": "a", "stream": True})
    bridge.notify("session/respond", {"session": "told", "prompt": "b", "stream": True})
    # Per-session order: once this request is answered, both notified turns have ended.
    assert bridge.call("session/respond", {"session": "told", "prompt": "c"})["text"] == "Three."
    texts = [
        (m["params"]["requestId"], m["params"]["event"]["text"])
        for m in bridge.since(start)
        if m.get("method") == "session/event" and m["params"]["event"]["type"] == "text"
    ]
    assert [text for _, text in texts] == ["One.", "Two."]
    ids = [request_id for request_id, _ in texts]
    assert all(i.startswith("local-") for i in ids) and ids[0] != ids[1]
    assert entry(bridge, "told")["entries"] == 6


def test_a_busy_session_reports_its_queue_and_the_turn_in_progress(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "queue",
        [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "n"}}]}, {"text": "done"}],
        tools=[OPEN_GATE],
    )
    running = bridge.request("session/respond", {"session": "queue", "prompt": "Open"})
    call = bridge.tool_call(running)
    queued = [bridge.request("session/respond", {"session": "queue", "prompt": p}) for p in ("q1", "q2")]
    listed = entry(bridge, "queue")
    assert (listed["busy"], listed["pendingOperations"], listed["entries"]) == (True, 3, 0)
    transcript = bridge.call("session/transcript", {"session": "queue"})["transcript"]["transcript"]
    assert transcript["entries"] == [{"type": "prompt", "text": "Open"}]
    bridge.reply(call["id"], {"output": "ok"})
    assert [bridge.result(r)["text"] for r in (running, *queued)] == [
        "done",
        "(script exhausted)",
        "(script exhausted)",
    ]
    assert (entry(bridge, "queue")["pendingOperations"], entry(bridge, "queue")["entries"]) == (0, 7)


# --- session/list / transcript / history ---------------------------------------------------------


def test_list_entries_in_creation_order() -> None:
    with BridgeProcess() as bridge:
        bridge.call(
            "session/create",
            {"session": "gorm", "instructions": "You are Gorm.", "tools": [OPEN_GATE], "model": "scripted"},
        )
        bridge.call("session/create", {"model": "scripted"})
        sessions = bridge.call("session/list")["sessions"]
        assert [s["session"] for s in sessions] == ["gorm", "s1"]
        assert list(sessions[0]) == [
            "session",
            "model",
            "instructions",
            "tools",
            "busy",
            "pendingOperations",
            "entries",
            "createdAt",
        ]
        assert list(sessions[1]) == ["session", "model", "tools", "busy", "pendingOperations", "entries", "createdAt"]
        assert sessions[0] | {"createdAt": None} == {
            "session": "gorm",
            "model": "scripted",
            "instructions": "You are Gorm.",
            "tools": ["open_gate"],
            "busy": False,
            "pendingOperations": 0,
            "entries": 0,
            "createdAt": None,
        }
        assert len(sessions[0]["createdAt"]) == 20 and sessions[0]["createdAt"].endswith("Z")
        assert bridge.close() == 0


def test_transcript_round_trip_as_history(bridge: BridgeProcess) -> None:
    create(bridge, "mira", [{"text": "Hello, traveller."}], instructions="You are Mira.", tools=[OPEN_GATE])
    bridge.call("session/respond", {"session": "mira", "prompt": "Hi"})
    saved = bridge.call("session/transcript", {"session": "mira"})
    assert saved["session"] == "mira"
    transcript = saved["transcript"]
    assert (transcript["type"], transcript["version"]) == ("open-android-models.Transcript", "1.0")
    assert transcript["transcript"]["instructions"] == "You are Mira."
    assert transcript["transcript"]["entries"] == [
        {"type": "prompt", "text": "Hi"},
        {"type": "response", "text": "Hello, traveller."},
    ]
    restored = json.loads(json.dumps(transcript))
    again = [{"template": "Again: {prompt}"}]
    assert create(bridge, "mira2", again, history=restored)["warnings"] == []
    assert entry(bridge, "mira2")["entries"] == 2
    assert bridge.call("session/respond", {"session": "mira2", "prompt": "Still Mira?"})["text"] == "Again: Still Mira?"
    assert entry(bridge, "mira2")["entries"] == 4
    create(bridge, "mira3", history=saved)  # the whole session/transcript result works too
    assert entry(bridge, "mira3")["entries"] == 2


def test_history_restores_instructions_and_tools_unless_sent(bridge: BridgeProcess) -> None:
    create(bridge, "keeper", [{"text": "Saved."}], instructions="Keep the gate.", tools=[OPEN_GATE])
    bridge.call("session/respond", {"session": "keeper", "prompt": "Hi"})
    history = bridge.call("session/transcript", {"session": "keeper"})["transcript"]
    assert (
        create(
            bridge,
            "keeper2",
            [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "n"}}]}, {"text": "ok"}],
            history=history,
        )["warnings"]
        == []
    )
    restored = entry(bridge, "keeper2")
    assert (restored["instructions"], restored["tools"], restored["entries"]) == ("Keep the gate.", ["open_gate"], 2)
    request = bridge.request(
        "session/respond", {"session": "keeper2", "prompt": "open", "toolChoice": {"tool": "open_gate"}}
    )
    bridge.reply(bridge.tool_call(request)["id"], {"output": "done"})
    assert bridge.result(request)["steps"][0]["enabledTools"] == ["open_gate"]
    create(bridge, "keeper3", history=history, instructions=None, tools=[])
    cleared = entry(bridge, "keeper3")
    assert "instructions" not in cleared and cleared["tools"] == [] and cleared["entries"] == 2


def test_transcript_of_an_unknown_session(bridge: BridgeProcess) -> None:
    assert error_code(bridge, "session/transcript", {"session": "nobody"}) == (-32020, "session_not_found")
    assert error_code(bridge, "session/transcript", {}) == (-32602, "invalid_params")


# --- settings / reset / compact --------------------------------------------------------------------


def test_settings_apply_to_later_turns(bridge: BridgeProcess) -> None:
    wave = {**WAVE, "parameters": {"type": "object", "properties": {"at": {"type": "string"}}}}
    create(
        bridge, "host", [{"toolCalls": [{"name": "wave", "arguments": {"at": "player"}}]}, {"text": "waved at player"}]
    )
    assert bridge.call("session/setTools", {"session": "host", "tools": [wave]}) == {"session": "host", "warnings": []}
    assert bridge.call("session/setInstructions", {"session": "host", "instructions": "You are friendly."}) == {
        "session": "host"
    }
    assert bridge.call("session/setContextNote", {"session": "host", "note": "The player saved the village."}) == {
        "session": "host"
    }
    listed = entry(bridge, "host")
    assert (listed["tools"], listed["instructions"]) == (["wave"], "You are friendly.")
    request = bridge.request("session/respond", {"session": "host", "prompt": "hello", "toolChoice": {"tool": "wave"}})
    bridge.reply(bridge.tool_call(request)["id"], {"output": "ok"})
    result = bridge.result(request)
    assert result["text"] == "waved at player"
    step = result["steps"][0]
    assert (step["enabledTools"], step["toolCallingMode"], step["kind"]) == (["wave"], "required", "toolArguments")
    saved = bridge.call("session/transcript", {"session": "host"})["transcript"]["transcript"]
    assert saved["contextNote"] == "The player saved the village."
    assert bridge.call("session/reset", {"session": "host"}) == {"session": "host"}
    listed = entry(bridge, "host")
    assert (listed["entries"], listed["instructions"], listed["tools"]) == (0, "You are friendly.", ["wave"])
    assert "contextNote" not in bridge.call("session/transcript", {"session": "host"})["transcript"]["transcript"]
    bridge.call("session/setInstructions", {"session": "host"})
    assert "instructions" not in entry(bridge, "host")


def test_compaction_summarises_older_turns(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "sage",
        [{"text": "One."}, {"text": "Two."}, {"text": "Three."}, {"text": "The player asked three things."}],
    )
    for prompt in ("a", "b", "c"):
        bridge.call("session/respond", {"session": "sage", "prompt": prompt})
    result = bridge.call("session/compact", {"session": "sage", "keepRecentTurns": 1})
    assert result == {"session": "sage", "summary": "The player asked three things."}
    assert entry(bridge, "sage")["entries"] == 2
    saved = bridge.call("session/transcript", {"session": "sage"})["transcript"]["transcript"]
    assert saved["contextNote"] == "The player asked three things."
    assert [e["text"] for e in saved["entries"]] == ["c", "Three."]
    assert bridge.call("session/compact", {"session": "sage", "keepRecentTurns": 5}) == {
        "session": "sage",
        "summary": None,
    }
    assert error_code(bridge, "session/compact", {"session": "sage", "keepRecentTurns": -1}) == (
        -32602,
        "invalid_params",
    )


def test_an_empty_summary_is_a_generation_failure(bridge: BridgeProcess) -> None:
    create(bridge, "mute", [{"text": "One."}, {"text": "  "}])
    bridge.call("session/respond", {"session": "mute", "prompt": "a"})
    assert error_code(bridge, "session/compact", {"session": "mute", "keepRecentTurns": 0}) == (
        -32012,
        "generation_failed",
    )
    assert entry(bridge, "mute")["entries"] == 2


def test_a_cancelled_compaction_changes_nothing(bridge: BridgeProcess) -> None:
    steps = [{"text": "One."}, {"text": "Two."}, {"text": "Three."}, {"text": "Never kept.", "delayMs": 60000}]
    create(bridge, "undo", steps)
    for prompt in ("a", "b", "c"):
        bridge.call("session/respond", {"session": "undo", "prompt": prompt})
    compact = bridge.request("session/compact", {"session": "undo", "keepRecentTurns": 1})
    assert bridge.call("session/cancel", {"session": "undo"}) == {"session": "undo", "cancelled": 1}
    error = bridge.error(compact)
    assert (error["code"], error["data"]["code"]) == (-32009, "cancelled")
    listed = entry(bridge, "undo")
    assert (listed["entries"], listed["busy"]) == (6, False)
    assert "Never kept." not in json.dumps(bridge.call("session/transcript", {"session": "undo"}))


def test_deleting_a_session_during_compaction_cancels_it(bridge: BridgeProcess) -> None:
    create(bridge, "gone", [{"text": "One."}, {"text": "Summary.", "delayMs": 60000}])
    bridge.call("session/respond", {"session": "gone", "prompt": "a"})
    compact = bridge.request("session/compact", {"session": "gone", "keepRecentTurns": 0})
    assert bridge.call("session/delete", {"session": "gone"}) == {"session": "gone", "deleted": True}
    assert bridge.error(compact)["code"] == -32009


# --- schema/validate / tools/validate -------------------------------------------------------------


def test_schema_validate(bridge: BridgeProcess) -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "format": "uuid"},
            "mood": {"type": "string", "enum": ["calm", "angry"]},
        },
    }
    result = bridge.call("schema/validate", {"schema": schema, "name": "Mood"})
    assert list(result) == ["warnings", "generationSchema", "rendered"]
    assert any("format" in w for w in result["warnings"])
    assert set(result["generationSchema"]["properties"]) == {"code", "mood"}
    assert result["generationSchema"]["additionalProperties"] is False
    assert "calm" in result["rendered"]
    error = bridge.error(bridge.request("schema/validate", {"schema": {"type": "quaternion"}}))
    assert (error["code"], error["data"]["code"], error["data"]["path"]) == (-32007, "invalid_schema", "schema")
    assert isinstance(error["data"]["schemaPath"], str)
    assert error_code(bridge, "schema/validate", {}) == (-32602, "invalid_params")


def test_schema_validate_closes_objects_unless_told_otherwise(bridge: BridgeProcess) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}},
        "additionalProperties": True,
    }
    generated = bridge.call("schema/validate", {"schema": schema})["generationSchema"]
    assert generated["additionalProperties"] is True
    assert generated["properties"]["a"]["additionalProperties"] is False


def test_tools_validate(bridge: BridgeProcess) -> None:
    gate = {**OPEN_GATE, "parameters": {"type": "object", "properties": {"gate": {"type": "string", "format": "uuid"}}}}
    wave = {"type": "function", "function": {"name": "wave", "parameters": {"type": "object", "properties": {}}}}
    result = bridge.call("tools/validate", {"tools": [gate, wave]})
    first, second = result["tools"]
    assert list(first) == ["name", "warnings", "generationSchema", "rendered"]
    assert first["name"] == "open_gate" and any("format" in w for w in first["warnings"])
    assert not any(w.startswith("open_gate:") for w in first["warnings"])
    assert second["name"] == "wave"
    assert any(w.startswith("wave:") and "description" in w for w in result["warnings"])
    assert error_code(bridge, "tools/validate", {"tools": [{"name": "a"}, {"name": "a"}]}) == (-32602, "invalid_params")
    error = bridge.error(bridge.request("tools/validate", {"tools": [{"name": "a", "parameters": {"type": "wat"}}]}))
    assert (error["code"], error["data"]["path"]) == (-32007, "tools[0].parameters")
    assert error_code(bridge, "tools/validate", {"tools": [{"name": "a", "timeoutSeconds": 1e300}]}) == (
        -32602,
        "invalid_params",
    )
    assert error_code(bridge, "tools/validate", {}) == (-32602, "invalid_params")
