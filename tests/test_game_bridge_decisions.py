"""``decision/decide``, ``decision/decideMany`` and ``content/generate`` through the real
``oam-actors stdio`` process (protocol-game §4, §9 items 37-45): results, validation before any
model call, fallbacks, forwarded client tools with their context, and ordering."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import BridgeProcess, scripted

GOBLIN = {
    "situation": "The goblin has 3 HP left.",
    "options": [
        {"id": "attack", "description": "Keep fighting"},
        {"id": "flee", "description": "Run into the woods"},
        "beg",
    ],
    "actor": {"name": "Snik", "personality": "Timid and greedy."},
    "context": {"hp": 3, "playerHp": 40},
}
DECISION_KEYS = ["optionID", "reasoning", "confidence", "toolCalls", "usage", "isFallback"]
ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "rarity": {"type": "string", "enum": ["common", "rare", "legendary"]},
        "damage": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["name", "rarity", "damage"],
}


def tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Look up {name}.",
        "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
    }


def choose(choice: str, confidence: int = 50, reasoning: str = "Because.") -> dict[str, Any]:
    return {"json": {"reasoning": reasoning, "choice": choice, "confidence": confidence}}


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess(["--model", "scripted"]) as process:
        yield process
        assert process.close() == 0


def test_a_decision_with_an_actor_and_facts(bridge: BridgeProcess) -> None:
    steps = [{"json": {"reasoning": "Snik is timid.", "choice": "flee", "confidence": 78}}]
    result = bridge.call("decision/decide", {**GOBLIN, "model": scripted(steps)})
    assert list(result) == DECISION_KEYS
    assert result | {"usage": None} == {
        "optionID": "flee",
        "reasoning": "Snik is timid.",
        "confidence": 78,
        "toolCalls": [],
        "usage": None,
        "isFallback": False,
    }


def test_a_single_option_needs_no_model(bridge: BridgeProcess) -> None:
    result = bridge.call("decision/decide", {"situation": "Cornered.", "options": ["fight"], "model": "scripted"})
    assert (result["optionID"], result["confidence"], result["reasoning"]) == ("fight", 100, "It is the only option.")


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"situation": "x", "options": ["a", "a"]}, -32602, "Duplicate option id 'a' in 'options'."),
        ({"situation": "x", "options": [" a", "a "]}, -32602, "Duplicate option id 'a' in 'options'."),
        (
            {"situation": "x", "options": []},
            -32602,
            '\'options\' must be a non-empty array of {"id", "description"} objects.',
        ),
        (
            {"situation": "x", "options": ["a", 3]},
            -32602,
            '\'options[1]\' must be an object {"id", "description"} or an id string.',
        ),
        ({"situation": "x", "options": ["a", {"id": " "}]}, -32602, "'options[1].id' must not be empty."),
        (
            {"situation": "x", "options": ["a", "b"], "fallbackOptionID": "c"},
            -32602,
            "'fallbackOptionID' must be one of the option ids (a, b); got 'c'.",
        ),
        (
            {"situation": "x", "options": ["a", "b"], "toolChoice": {"tool": "scout"}},
            -32602,
            "'toolChoice' names tool 'scout', which is not in 'tools'.",
        ),
        ({"options": ["a", "b"]}, -32602, "Missing required parameter 'situation'."),
        ({"situation": "x"}, -32602, "Missing required parameter 'options'."),
        ({"situation": "x", "options": ["a", "b"], "actor": "nobody"}, -32050, "No NPC with id 'nobody'."),
        (
            {"situation": "x", "options": ["a", "b"], "actor": 7},
            -32602,
            "Parameter 'actor' must be a persona object or an NPC id; got 7.",
        ),
        (
            {"situation": "x", "options": ["a", "b"], "actor": {"role": "cook"}},
            -32602,
            "Missing required parameter 'actor.name'.",
        ),
        (
            {"situation": "x", "options": ["a", "b"], "temperature": -1},
            -32602,
            "Parameter 'temperature' must be at least 0; got -1.0.",
        ),
        (
            {"situation": "x", "options": ["a", "b"], "maxToolRounds": -1},
            -32602,
            "Parameter 'maxToolRounds' must be at least 0; got -1.",
        ),
        (
            {"situation": "x", "options": ["a", "b"], "toolTimeoutSeconds": 90000},
            -32602,
            "Parameter 'toolTimeoutSeconds' must be a number of seconds from 0 to 86400 (0 means no limit); got 90000.",
        ),
    ],
)
def test_bad_decisions_fail_before_any_model_call(
    bridge: BridgeProcess, params: dict[str, Any], code: int, message: str
) -> None:
    # The script would answer "a": a request that reached the model would succeed.
    error = bridge.error(bridge.request("decision/decide", {**params, "model": scripted([choose("a")])}))
    assert (error["code"], error["message"]) == (code, message)


def test_an_npc_actor_lends_its_persona_and_tools_are_forwarded(bridge: BridgeProcess) -> None:
    bridge.call(
        "npc/create", {"npc": "snik", "persona": {"name": "Snik", "role": "a goblin scout"}, "model": "scripted"}
    )
    steps = [{"toolCalls": [{"name": "measure", "arguments": {"target": "adventurer"}}]}, choose("flee", 60)]
    request = bridge.request(
        "decision/decide",
        {**GOBLIN, "actor": "snik", "tools": [tool("measure")], "toolChoice": "required", "model": scripted(steps)},
    )
    call = bridge.tool_call(request)
    assert list(call["params"]) == ["requestId", "call"]
    assert call["params"]["call"]["arguments"] == {"target": "adventurer"}
    bridge.reply(call["id"], {"output": {"distance": 12, "target": call["params"]["call"]["arguments"]["target"]}})
    message, related = bridge.response(request)
    result = message["result"]
    assert result["optionID"] == "flee"
    assert (result["toolCalls"][0]["call"]["name"], result["toolCalls"][0]["output"]["distance"]) == ("measure", 12)
    assert call in related


def test_a_silent_client_times_out_with_a_cancel_before_the_response(bridge: BridgeProcess) -> None:
    steps = [{"toolCalls": [{"name": "weather", "arguments": {}}]}, choose("camp", 40)]
    request = bridge.request(
        "decision/decide",
        {
            "situation": "Night falls.",
            "options": ["camp", "march"],
            "tools": [tool("weather")],
            "toolChoice": "required",
            "toolTimeoutSeconds": 0.05,
            "model": scripted(steps),
        },
    )
    call = bridge.tool_call(request)
    message, related = bridge.response(request)
    assert (message["result"]["optionID"], message["result"]["toolCalls"][0]["isError"]) == ("camp", True)
    [cancel] = [m for m in related if m.get("method") == "tool/cancel"]
    assert cancel["params"] == {
        "requestId": request,
        "id": call["id"],
        "callId": call["params"]["call"]["id"],
        "reason": "The tool call timed out or its request was cancelled.",
    }


def test_fallbacks_cover_unusable_answers_only(bridge: BridgeProcess) -> None:
    blocked = scripted([{"error": "guardrail_violation"}])
    result = bridge.call("decision/decide", {**GOBLIN, "fallbackOptionID": " flee ", "model": blocked})
    assert result | {"usage": None} == {
        "optionID": "flee",
        "reasoning": "",
        "confidence": 0,
        "toolCalls": [],
        "usage": None,
        "isFallback": True,
    }
    error = bridge.error(
        bridge.request("decision/decide", {**GOBLIN, "model": scripted([{"error": "guardrail_violation"}])})
    )
    assert (error["code"], error["data"]["code"]) == (-32002, "guardrail_violation")
    off_list = scripted([choose("dance"), choose("sing")])
    result = bridge.call(
        "decision/decide",
        {"situation": "Dusk.", "options": ["camp", "march"], "fallbackOptionID": "camp", "model": off_list},
    )
    assert (result["optionID"], result["isFallback"]) == ("camp", True)
    unavailable = scripted([{"error": "context_size_exceeded"}])
    error = bridge.error(
        bridge.request("decision/decide", {**GOBLIN, "fallbackOptionID": "flee", "model": unavailable})
    )
    assert error["data"]["code"] == "context_size_exceeded"


def test_unknown_params_are_warnings(bridge: BridgeProcess) -> None:
    result = bridge.call("decision/decide", {**GOBLIN, "mood": "grim", "model": scripted([choose("beg")])})
    assert result["warnings"] == ["Unknown parameter 'mood' was ignored."]


def test_decide_many_keeps_request_order_and_isolates_failures(bridge: BridgeProcess) -> None:
    script = scripted([choose("investigate", 90), {"error": "guardrail_violation"}])
    result = bridge.call(
        "decision/decideMany",
        {
            "maxConcurrency": 1,
            "requests": [
                {"situation": "A noise.", "options": ["investigate", "ignore"]},
                {"situation": "A scream.", "options": ["investigate", "ignore"]},
                {"situation": "Silence.", "options": ["wait"]},
            ],
            "model": script,
        },
    )
    assert list(result) == ["results"]
    first, second, third = result["results"]
    assert first["optionID"] == "investigate"
    assert (second["error"]["code"], second["error"]["data"]["code"]) == (-32002, "guardrail_violation")
    assert third["optionID"] == "wait"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"requests": [{"situation": "x", "options": ["a"]}, {"situation": "y"}]},
            "Missing required parameter 'requests[1].options'.",
        ),
        ({"requests": []}, "'requests' must be a non-empty array of decisions."),
        ({}, "'requests' must be a non-empty array of decisions."),
        ({"requests": [{"situation": "x", "options": ["a"]}, "y"]}, "'requests[1]' must be an object."),
        (
            {
                "requests": [
                    {"situation": "x", "options": ["a", "b"]},
                    {"situation": "y", "options": ["a", "b"], "fallbackOptionID": "z"},
                ]
            },
            "'fallbackOptionID' must be one of the option ids (a, b); got 'z'.",
        ),
        (
            {"requests": [{"situation": "x", "options": ["a"]}], "maxConcurrency": 0},
            "Parameter 'maxConcurrency' must be at least 1; got 0.",
        ),
    ],
)
def test_one_bad_element_fails_the_whole_batch(bridge: BridgeProcess, params: dict[str, Any], message: str) -> None:
    error = bridge.error(bridge.request("decision/decideMany", {**params, "model": scripted([choose("a")] * 2)}))
    assert (error["code"], error["message"]) == (-32602, message)


def test_decide_many_warnings_and_tool_indexes(bridge: BridgeProcess) -> None:
    steps = [
        {"toolCalls": [{"name": "look", "arguments": {}}]},
        choose("a"),
        {"toolCalls": [{"name": "look", "arguments": {}}]},
        choose("b"),
    ]
    element = {"options": ["a", "b"], "tools": [{"name": "look"}], "toolChoice": {"tool": "look"}}
    request = bridge.request(
        "decision/decideMany",
        {
            "maxConcurrency": 1,
            "requests": [{**element, "situation": "one", "foo": 1}, {**element, "situation": "two"}],
            "model": scripted(steps),
        },
    )
    first = bridge.tool_call(request)
    bridge.reply(first["id"], {"output": "nothing"})
    second = bridge.tool_call(request)
    bridge.reply(second["id"], {"output": "a shadow"})
    result = bridge.result(request)
    assert [first["params"]["index"], second["params"]["index"]] == [0, 1]
    assert list(first["params"]) == ["index", "requestId", "call"]
    assert [r["optionID"] for r in result["results"]] == ["a", "b"]
    assert result["warnings"] == [
        "Unknown parameter 'requests[0].foo' was ignored.",
        "requests[0]: look: no description; the model may not know when to call it.",
        "requests[1]: look: no description; the model may not know when to call it.",
    ]


def test_content_follows_the_schema_order(bridge: BridgeProcess) -> None:
    steps = [{"json": {"damage": 45, "name": "Drowned Fang", "rarity": "legendary"}}]
    result = bridge.call(
        "content/generate",
        {"prompt": "A cursed blade.", "schema": ITEM_SCHEMA, "context": {"playerLevel": 7}, "model": scripted(steps)},
    )
    assert result == {"content": {"name": "Drowned Fang", "rarity": "legendary", "damage": 45}}
    assert list(result["content"]) == ["name", "rarity", "damage"]


def test_content_schema_as_json_text_and_coercion(bridge: BridgeProcess) -> None:
    steps = [{"json": {"name": "Bog Lurker", "rarity": "Rare", "damage": "12"}}]
    result = bridge.call(
        "content/generate", {"prompt": "A monster.", "schema": json.dumps(ITEM_SCHEMA), "model": scripted(steps)}
    )
    assert result["content"] == {"name": "Bog Lurker", "rarity": "rare", "damage": 12}


def test_content_errors(bridge: BridgeProcess) -> None:
    bad = bridge.error(
        bridge.request("content/generate", {"prompt": "x", "schema": {"type": "nope"}, "model": "scripted"})
    )
    assert (bad["code"], bad["data"]["code"], bad["data"]["path"]) == (-32007, "invalid_schema", "schema")
    missing = bridge.error(bridge.request("content/generate", {"schema": ITEM_SCHEMA, "model": "scripted"}))
    assert (missing["code"], missing["message"]) == (-32602, "Missing required parameter 'prompt'.")
    no_schema = bridge.error(bridge.request("content/generate", {"prompt": "x", "model": "scripted"}))
    assert no_schema["message"] == "Missing required parameter 'schema'."
    blocked = bridge.error(
        bridge.request(
            "content/generate", {"prompt": "x", "schema": ITEM_SCHEMA, "model": scripted([{"error": "refusal"}])}
        )
    )
    assert blocked["data"]["code"] == "refusal"


def test_content_with_a_forwarded_tool(bridge: BridgeProcess) -> None:
    steps = [{"toolCalls": [{"name": "biome", "arguments": {}}]}, {"json": {"name": "Bog Lurker"}}]
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    request = bridge.request(
        "content/generate",
        {"prompt": "A monster for here.", "schema": schema, "tools": [tool("biome")], "model": scripted(steps)},
    )
    call = bridge.tool_call(request)
    assert list(call["params"]) == ["requestId", "call"]
    bridge.reply(call["id"], {"output": {"biome": "swamp"}})
    assert bridge.result(request) == {"content": {"name": "Bog Lurker"}}
