"""The ``npc/*`` methods through the real ``oam-actors stdio`` process (protocol-game §3, §7, §9
items 1-30): creation and ids, turns and their events, client tools, fallbacks, barks,
cancellation, updates, save and restore, and bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import BridgeProcess, scripted

GORM = {
    "name": "Gorm",
    "role": "the village blacksmith",
    "personality": "Gruff but fair.",
    "speakingStyle": "Short, blunt sentences.",
}
INV = {
    "name": "check_inventory",
    "description": "Look up stock and price of an item.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
}
TALK_KEYS = [
    "npc",
    "line",
    "emotion",
    "playerOptions",
    "endsConversation",
    "toolCalls",
    "relationship",
    "isFallback",
    "usage",
]
LIST_KEYS = [
    "npc",
    "name",
    "role",
    "world",
    "model",
    "tools",
    "turnCount",
    "relationship",
    "busy",
    "pendingOperations",
    "createdAt",
]


def reply(line: str, emotion: str = "neutral") -> dict[str, Any]:
    return {
        "json": {
            "emotion": emotion,
            "line": line,
            "player_options": ["Buy one.", "Goodbye."],
            "ends_conversation": False,
        }
    }


def calls(name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": name, "arguments": arguments}]}


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    """One process (scripted system model) shared by the tests; each test uses its own ids."""
    with BridgeProcess(["--model", "scripted", "--max-npcs", "1000"]) as process:
        yield process
        assert process.close() == 0


def create(bridge: BridgeProcess, npc: str, steps: list[Any], **extra: Any) -> dict[str, Any]:
    return bridge.call("npc/create", {"npc": npc, "persona": GORM, "model": scripted(steps), **extra})


def entry(bridge: BridgeProcess, npc: str) -> dict[str, Any]:
    [found] = [e for e in bridge.call("npc/list")["npcs"] if e["npc"] == npc]
    return found


def npc_events(related: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["event"] for m in related if m.get("method") == "npc/event"]


def folded_line(events: list[dict[str, Any]]) -> str:
    shown = ""
    for event in events:
        if event["type"] == "lineDelta":
            shown += event["delta"]
        elif event["type"] == "lineReset":
            shown = event["line"]
    return shown


def error_of(bridge: BridgeProcess, method: str, params: Any) -> dict[str, Any]:
    return bridge.error(bridge.request(method, params))


# --- create, list, delete -------------------------------------------------------------------------


def test_create_answers_exactly_the_id_tools_and_warnings(bridge: BridgeProcess) -> None:
    assert create(bridge, "c1", []) == {"npc": "c1", "tools": [], "warnings": []}
    error = error_of(bridge, "npc/create", {"npc": "c1", "persona": GORM, "model": "scripted"})
    assert (error["code"], error["data"]) == (-32051, {"code": "npc_exists", "npc": "c1"})
    assert error["message"] == "An NPC with id 'c1' already exists."


def test_generated_ids_count_up_and_skip_taken_ones() -> None:
    with BridgeProcess() as bridge:
        assert bridge.call("npc/create", {"persona": {"name": "Mira"}, "model": "scripted"})["npc"] == "npc1"
        bridge.call("npc/create", {"npc": "npc2", "persona": {"name": "Brom"}, "model": "scripted"})
        assert bridge.call("npc/create", {"persona": {"name": "Lysa"}, "model": "scripted"})["npc"] == "npc3"
        assert [e["npc"] for e in bridge.call("npc/list")["npcs"]] == ["npc1", "npc2", "npc3"]
        bridge.call("npc/delete", {"npc": "npc1"})
        assert bridge.call("npc/create", {"persona": {"name": "Aria"}, "model": "scripted"})["npc"] == "npc4"
        assert bridge.close() == 0


def test_list_entries_describe_each_npc(bridge: BridgeProcess) -> None:
    create(bridge, "l1", [], tools=[INV])
    found = entry(bridge, "l1")
    assert list(found) == LIST_KEYS
    assert found | {"createdAt": None} == {
        "npc": "l1",
        "name": "Gorm",
        "role": "the village blacksmith",
        "world": None,
        "model": "scripted",
        "tools": ["check_inventory"],
        "turnCount": 0,
        "relationship": 0,
        "busy": False,
        "pendingOperations": 0,
        "createdAt": None,
    }
    assert found["createdAt"].endswith("Z")


def test_delete_frees_the_id_and_later_requests_fail(bridge: BridgeProcess) -> None:
    create(bridge, "d1", [])
    assert bridge.call("npc/delete", {"npc": "d1"}) == {"npc": "d1", "deleted": True}
    error = error_of(bridge, "npc/talk", {"npc": "d1", "line": "Hello?"})
    assert (error["code"], error["data"], error["message"]) == (
        -32050,
        {"code": "npc_not_found", "npc": "d1"},
        "No NPC with id 'd1'.",
    )
    assert error_of(bridge, "npc/delete", {"npc": "d1"})["code"] == -32050
    assert create(bridge, "d1", [])["npc"] == "d1"


# --- talking ---------------------------------------------------------------------------------------


def test_a_plain_turn(bridge: BridgeProcess) -> None:
    create(bridge, "t1", [reply("Three swords, lad. Forty-five gold.", "proud")])
    request = bridge.request(
        "npc/talk", {"npc": "t1", "line": "Got any swords?", "context": "The player just walked in."}
    )
    message, related = bridge.response(request)
    result = message["result"]
    assert list(result) == TALK_KEYS
    assert result | {"usage": None} == {
        "npc": "t1",
        "line": "Three swords, lad. Forty-five gold.",
        "emotion": "proud",
        "playerOptions": ["Buy one.", "Goodbye."],
        "endsConversation": False,
        "toolCalls": [],
        "relationship": 0,
        "isFallback": False,
        "usage": None,
    }
    assert isinstance(result["usage"]["totalTokens"], int)
    assert related == []  # not streamed: no events
    assert entry(bridge, "t1")["turnCount"] == 1


def test_null_talk_params_read_as_absent_and_a_wrong_type_is_named(bridge: BridgeProcess) -> None:
    # The usual talk is read in one call; these leave it for the accessors, which must agree.
    create(bridge, "n1", [reply("Aye."), reply("Aye again.")])
    request = bridge.request("npc/talk", {"npc": "n1", "line": "Hi", "stream": None, "coalesce": None, "context": None})
    message, related = bridge.response(request)
    assert message["result"]["line"] == "Aye." and "warnings" not in message["result"] and related == []
    error = error_of(bridge, "npc/talk", {"npc": "n1", "line": "Hi", "stream": "yes"})
    assert (error["code"], error["message"]) == (-32602, "Parameter 'stream' must be a boolean; got \"yes\".")
    assert error_of(bridge, "npc/talk", {"npc": "n1", "line": 7})["message"] == "Parameter 'line' must be a string; got 7."


def test_a_streamed_turn_sends_its_events_first(bridge: BridgeProcess) -> None:
    create(bridge, "s1", [reply("Steel is patient, lad.", "amused")])
    request = bridge.request("npc/talk", {"npc": "s1", "line": "Teach me.", "stream": True})
    message, related = bridge.response(request)
    assert related and all(m["method"] == "npc/event" and m["params"]["npc"] == "s1" for m in related)
    events = npc_events(related)
    assert next(e for e in events if e["type"] == "emotion") == {"type": "emotion", "emotion": "amused"}
    assert folded_line(events) == message["result"]["line"] == "Steel is patient, lad."


def test_unknown_talk_params_are_warned_about_in_the_result(bridge: BridgeProcess) -> None:
    create(bridge, "w1", [reply("Aye.")])
    result = bridge.call("npc/talk", {"npc": "w1", "line": "Hi", "voice": "deep"})
    assert result["warnings"] == ["Unknown parameter 'voice' was ignored."]


def test_a_client_tool_round_trip(bridge: BridgeProcess) -> None:
    steps = [calls("check_inventory", item="iron sword"), reply("Three iron swords, forty-five gold each.")]
    created = create(bridge, "ct1", steps, tools=[INV], options={"groundingTool": "check_inventory"})
    assert created["tools"] == ["check_inventory"]
    request = bridge.request("npc/talk", {"npc": "ct1", "line": "Iron swords?", "stream": True})
    tool_call = bridge.tool_call(request)
    assert list(tool_call["params"]) == ["npc", "requestId", "call"]
    assert tool_call["params"]["npc"] == "ct1"
    item = tool_call["params"]["call"]["arguments"]["item"]
    bridge.reply(tool_call["id"], {"output": {"item": item, "stock": 3, "price_gold": 45}})
    message, related = bridge.response(request)
    record = message["result"]["toolCalls"][0]
    assert record["call"] == {
        "id": tool_call["params"]["call"]["id"],
        "name": "check_inventory",
        "arguments": {"item": "iron sword"},
    }
    assert (record["output"]["stock"], record["isError"]) == (3, False)
    kinds = [(e["type"], e.get("execution")) for e in npc_events(related) if e["type"].startswith("toolCall")]
    assert kinds == [("toolCallStarted", "client"), ("toolCallCompleted", None)]
    started = related.index(
        next(m for m in related if m.get("method") == "npc/event" and m["params"]["event"]["type"] == "toolCallStarted")
    )
    assert related.index(tool_call) == started + 1


def test_a_tool_error_reply_does_not_fail_the_turn(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "te1",
        [calls("check_inventory", item="axe"), reply("Shop's closed, lad.")],
        tools=[INV],
        options={"groundingTool": "check_inventory"},
    )
    request = bridge.request("npc/talk", {"npc": "te1", "line": "Axes?"})
    bridge.reply(bridge.tool_call(request)["id"], error={"code": -32000, "message": "The shop is closed."})
    result = bridge.result(request)
    assert (result["toolCalls"][0]["isError"], result["toolCalls"][0]["output"]) == (True, "The shop is closed.")
    assert result["line"] == "Shop's closed, lad."


def test_an_unanswered_tool_times_out_and_is_cancelled(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "to1",
        [calls("check_inventory", item="bow"), reply("My ledger is slow today.")],
        tools=[{**INV, "timeoutSeconds": 0.05}],
        options={"groundingTool": "check_inventory"},
    )
    request = bridge.request("npc/talk", {"npc": "to1", "line": "Bows?"})
    tool_call = bridge.tool_call(request)
    message, related = bridge.response(request)
    assert message["result"]["line"] == "My ledger is slow today."
    assert message["result"]["toolCalls"][0]["isError"] is True
    [cancel] = [m for m in related if m.get("method") == "tool/cancel"]
    assert cancel["params"] | {"reason": None} == {
        "npc": "to1",
        "requestId": request,
        "id": tool_call["id"],
        "callId": tool_call["params"]["call"]["id"],
        "reason": None,
    }
    assert cancel["params"]["reason"].startswith("Error: Tool 'check_inventory' timed out")


def test_cancel_fails_the_running_and_queued_turns(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "cx1",
        [calls("check_inventory", item="shield"), reply("Never mind.")],
        tools=[INV],
        options={"groundingTool": "check_inventory", "toolTimeoutSeconds": 0},
    )
    first = bridge.request("npc/talk", {"npc": "cx1", "line": "Shields?"})
    second = bridge.request("npc/talk", {"npc": "cx1", "line": "And helmets?"})
    tool_call = bridge.tool_call(first)
    assert entry(bridge, "cx1")["pendingOperations"] == 2
    assert bridge.call("npc/cancel", {"npc": "cx1"}) == {"npc": "cx1", "cancelled": 2}
    for request in (first, second):
        assert bridge.error(request)["data"]["code"] == "cancelled"
    _, related = bridge.response(first)
    assert [m["params"]["id"] for m in related if m.get("method") == "tool/cancel"] == [tool_call["id"]]
    listed = entry(bridge, "cx1")
    assert (listed["turnCount"], listed["busy"], listed["pendingOperations"]) == (0, False, 0)
    assert bridge.call("npc/cancel", {"npc": "cx1"}) == {"npc": "cx1", "cancelled": 0}


def test_delete_cancels_a_running_turn(bridge: BridgeProcess) -> None:
    create(bridge, "dx1", [{**reply("Too slow."), "delayMs": 60000}])
    request = bridge.request("npc/talk", {"npc": "dx1", "line": "Well?"})
    assert bridge.call("npc/delete", {"npc": "dx1"}) == {"npc": "dx1", "deleted": True}
    assert bridge.error(request)["code"] == -32009


# --- reply formats and fallbacks -----------------------------------------------------------------


def test_structured_only_falls_back_on_a_guardrail(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "strict",
        [{"error": "guardrail_violation"}],
        options={"replyFormat": "structured", "fallbackLines": ["Not now, lad."]},
    )
    result = bridge.call("npc/talk", {"npc": "strict", "line": "Tell me your secret."})
    assert (result["isFallback"], result["line"], result["emotion"]) == (True, "Not now, lad.", "neutral")
    assert result["usage"]["totalTokens"] == 0
    assert entry(bridge, "strict")["turnCount"] == 0


def test_automatic_retries_as_text_after_a_guardrail(bridge: BridgeProcess) -> None:
    create(bridge, "auto", [{"error": "guardrail_violation"}, {"text": "[worried] Let's not speak of it."}])
    result = bridge.call("npc/talk", {"npc": "auto", "line": "The war?"})
    assert (result["isFallback"], result["line"], result["emotion"]) == (False, "Let's not speak of it.", "worried")
    assert (result["playerOptions"], result["endsConversation"]) == ([], False)


def test_text_replies_read_the_emotion_tag(bridge: BridgeProcess) -> None:
    create(bridge, "plain", [{"text": "[happy] Welcome to the forge!"}], options={"replyFormat": "text"})
    result = bridge.call("npc/talk", {"npc": "plain", "line": "Hello"})
    assert (result["line"], result["emotion"], result["playerOptions"], result["endsConversation"]) == (
        "Welcome to the forge!",
        "happy",
        [],
        False,
    )


def test_an_unknown_emotion_tag_reads_as_the_default_emotion(bridge: BridgeProcess) -> None:
    create(bridge, "odd", [{"text": "[flabbergasted] Well I never."}], options={"replyFormat": "text"})
    result = bridge.call("npc/talk", {"npc": "odd", "line": "Boo!"})
    assert (result["line"], result["emotion"]) == ("Well I never.", "neutral")


def test_without_fallback_the_guardrail_error_is_returned(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "raw",
        [{"error": "guardrail_violation"}],
        options={"replyFormat": "structured", "fallbackOnGuardrail": False},
    )
    error = error_of(bridge, "npc/talk", {"npc": "raw", "line": "Hm?"})
    assert (error["code"], error["data"]["code"]) == (-32002, "guardrail_violation")


def test_a_named_tool_choice_the_npc_lacks_is_an_invalid_request(bridge: BridgeProcess) -> None:
    bridge.call(
        "npc/create", {"npc": "tc1", "persona": {"name": "Ann"}, "model": "scripted", "options": {"memoryTools": "all"}}
    )
    error = error_of(bridge, "npc/talk", {"npc": "tc1", "line": "Hi", "toolChoice": {"tool": "nope"}})
    assert (error["code"], error["data"]["code"], error["message"]) == (
        -32011,
        "invalid_request",
        "Tool 'nope' is not available to Ann.",
    )
    assert error_of(bridge, "npc/talk", {"npc": "tc1", "line": "Hi", "toolChoice": "sometimes"})["code"] == -32602
    assert error_of(bridge, "npc/talk", {"npc": "tc1"})["message"] == "Missing required parameter 'line'."


# --- barks ------------------------------------------------------------------------------------------


def test_a_bark_is_one_line_and_leaves_the_conversation_alone(bridge: BridgeProcess) -> None:
    create(bridge, "b1", [{"text": "Rain again. Good for quenching."}])
    assert bridge.call("npc/bark", {"npc": "b1", "situation": "It starts to rain."}) == {
        "npc": "b1",
        "line": "Rain again. Good for quenching.",
    }
    assert entry(bridge, "b1")["turnCount"] == 0
    create(bridge, "b2", [{"error": "guardrail_violation"}])
    assert error_of(bridge, "npc/bark", {"npc": "b2"})["data"]["code"] == "guardrail_violation"


def test_a_bark_does_not_wait_for_a_running_turn(bridge: BridgeProcess) -> None:
    create(
        bridge,
        "b3",
        [calls("check_inventory", item="coal"), {"text": "Hot coals!"}],
        tools=[INV],
        options={"groundingTool": "check_inventory", "toolTimeoutSeconds": 0},
    )
    talk = bridge.request("npc/talk", {"npc": "b3", "line": "Well?"})
    bridge.tool_call(talk)  # the turn is running, waiting for the client
    assert bridge.call("npc/bark", {"npc": "b3"})["line"] == "Hot coals!"
    assert bridge.call("npc/cancel", {"npc": "b3"})["cancelled"] == 1
    assert bridge.error(talk)["code"] == -32009


# --- updates, state, restore -----------------------------------------------------------------------


def test_pipelined_requests_apply_in_arrival_order(bridge: BridgeProcess) -> None:
    create(bridge, "p1", [reply("First."), {"text": "[angry] Second."}])
    one = bridge.request("npc/talk", {"npc": "p1", "line": "One"})
    update = bridge.request(
        "npc/update",
        {
            "npc": "p1",
            "persona": {"personality": "Furious today.", "goals": ["Close early"]},
            "options": {"replyFormat": "text", "fallbackLines": ["Go away."]},
            "memory": {"relationship": -30},
        },
    )
    two = bridge.request("npc/talk", {"npc": "p1", "line": "Two"})
    state = bridge.request("npc/state", {"npc": "p1"})
    assert bridge.result(one)["line"] == "First."
    assert bridge.result(update) == {"npc": "p1", "warnings": []}
    second = bridge.result(two)
    assert (second["line"], second["emotion"], second["relationship"]) == ("Second.", "angry", -30)
    saved = bridge.result(state)["state"]
    assert saved["persona"] | {"goals": None} == GORM | {
        "personality": "Furious today.",
        "backstory": "",
        "goals": None,
        "secrets": [],
        "knowledge": [],
        "defaultEmotion": "neutral",
        "maxSentences": 2,
    }
    assert saved["persona"]["goals"] == ["Close early"]
    assert (saved["options"]["replyFormat"], saved["memory"]["relationship"]) == ("text", -30)


def test_updates_are_all_or_nothing(bridge: BridgeProcess) -> None:
    create(bridge, "u1", [])
    update = {"npc": "u1", "tools": [INV], "options": {"groundingTool": "check_inventory"}}
    assert bridge.call("npc/update", update) == {"npc": "u1", "warnings": []}
    assert entry(bridge, "u1")["tools"] == ["check_inventory"]
    for bad in (
        {"tools": [], "options": {"groundingTool": "nope"}},
        {"persona": {"name": ""}},
        {"options": {"playerOptionCount": 9}},
        {"memory": {"facts": "many"}},
    ):
        assert error_of(bridge, "npc/update", {"npc": "u1", **bad})["code"] == -32602
    state = bridge.call("npc/state", {"npc": "u1", "settle": False})["state"]
    assert (state["options"]["groundingTool"], state["tools"], state["persona"]["name"]) == (
        "check_inventory",
        [INV],
        "Gorm",
    )
    bridge.call("npc/update", {"npc": "u1", "options": {"groundingTool": None, "replyFormat": None}})
    options = bridge.call("npc/state", {"npc": "u1"})["state"]["options"]
    assert "groundingTool" not in options and options["replyFormat"] == "automatic"
    assert error_of(bridge, "npc/update", {"npc": "u1", "persona": "Brom"})["message"] == "'persona' must be an object."


def test_reset_clears_the_conversation_and_optionally_memory(bridge: BridgeProcess) -> None:
    create(bridge, "r1", [reply("Hm.")], memory={"relationship": 40, "facts": ["Aria likes axes."]})
    bridge.call("npc/talk", {"npc": "r1", "line": "Hi"})
    assert bridge.call("npc/reset", {"npc": "r1"}) == {"npc": "r1"}
    assert (entry(bridge, "r1")["turnCount"], entry(bridge, "r1")["relationship"]) == (0, 40)
    bridge.call("npc/reset", {"npc": "r1", "clearMemory": True})
    memory = bridge.call("npc/state", {"npc": "r1"})["state"]["memory"]
    assert (memory["facts"], memory["relationship"], memory.get("summary")) == ([], 0, None)


def test_compaction_runs_in_the_background_after_the_turn_that_makes_it_due(bridge: BridgeProcess) -> None:
    steps = [reply("One."), reply("Two."), {"text": "They greeted each other twice."}, reply("Three.")]
    create(bridge, "cp1", steps, options={"compactAfterTurns": 2, "keepRecentTurns": 1})
    bridge.call("npc/talk", {"npc": "cp1", "line": "Hi"})
    assert bridge.call("npc/talk", {"npc": "cp1", "line": "Hi again"})["line"] == "Two."
    # The NPC's own background work is not a request npc/cancel can cancel.
    assert bridge.call("npc/cancel", {"npc": "cp1"}) == {"npc": "cp1", "cancelled": 0}
    state = bridge.call("npc/state", {"npc": "cp1"})["state"]
    assert state["memory"]["summary"] == "They greeted each other twice."
    assert entry(bridge, "cp1")["turnCount"] == 1
    assert bridge.call("npc/talk", {"npc": "cp1", "line": "And now?"})["line"] == "Three."


def test_state_is_saved_and_restored_into_a_new_npc(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "savehaven", "state": {"player": {"name": "Aria"}}})
    options = {"memoryTools": ["rememberFact"], "playerOptionCount": 2, "toolTimeoutSeconds": 30}
    create(bridge, "sv1", [reply("Welcome, Aria.")], tools=[INV], options=options, world="savehaven")
    bridge.call("npc/talk", {"npc": "sv1", "line": "Hello!"})
    bridge.call("npc/update", {"npc": "sv1", "memory": {"relationship": 25, "facts": ["Aria likes axes."]}})
    saved = bridge.call("npc/state", {"npc": "sv1"})
    state = saved["state"]
    assert (state["version"], state["npc"], state["persona"]["name"], state["world"]) == (1, "sv1", "Gorm", "savehaven")
    assert state["memory"] == {"facts": ["Aria likes axes."], "relationship": 25}
    assert isinstance(state["transcript"], dict) and state["tools"] == [INV]
    assert {
        k: state["options"][k]
        for k in ("memoryTools", "playerOptionCount", "toolTimeoutSeconds", "secretsUnlockAtRelationship", "toolChoice")
    } == {
        "memoryTools": ["rememberFact"],
        "playerOptionCount": 2,
        "toolTimeoutSeconds": 30,
        "secretsUnlockAtRelationship": 50,
        "toolChoice": "explicit",
    }
    bridge.call("npc/delete", {"npc": "sv1"})

    steps = [calls("check_inventory", item="axe"), reply("Axes, you said? Three.")]
    restored = bridge.call("npc/restore", {"state": state, "model": scripted(steps)})
    assert (restored["npc"], restored["warnings"]) == ("sv1", [])
    assert {"check_inventory", "read_world_state", "remember_fact"} <= set(restored["tools"])
    listed = entry(bridge, "sv1")
    assert (listed["turnCount"], listed["relationship"], listed["world"]) == (1, 25, "savehaven")
    request = bridge.request("npc/talk", {"npc": "sv1", "line": "Axes?"})
    bridge.reply(bridge.tool_call(request)["id"], {"output": "3 in stock"})
    result = bridge.result(request)
    assert (result["line"], result["toolCalls"][0]["output"], result["relationship"]) == (
        "Axes, you said? Three.",
        "3 in stock",
        25,
    )

    assert error_of(bridge, "npc/restore", {"state": state, "model": "scripted"})["data"]["code"] == "npc_exists"
    whole = bridge.call(
        "npc/restore", {**saved, "state": saved, "npc": "sv2", "world": None, "tools": [], "model": "scripted"}
    )
    assert whole["tools"] == ["remember_fact"]
    bridge.call("world/delete", {"world": "savehaven"})
    moved = bridge.call("npc/restore", {"state": state, "npc": "sv3"})
    assert "savehaven" in moved["warnings"][0]
    assert entry(bridge, "sv3")["world"] is None


def test_restore_needs_a_persona_name(bridge: BridgeProcess) -> None:
    error = error_of(bridge, "npc/restore", {"state": {"persona": {"role": "no name"}}})
    assert (error["code"], error["message"]) == (-32602, "Missing required parameter 'state.persona.name'.")
    assert error_of(bridge, "npc/restore", {})["message"] == "Missing required parameter 'state'."


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"model": "scripted"}, "'persona'"),
        ({"persona": {"role": "a ghost"}}, "Missing required parameter 'persona.name'."),
        ({"persona": {"name": "Ann", "goals": "gold"}}, "Parameter 'persona.goals' must be an array."),
        ({"persona": {"name": "Ann", "defaultEmotion": "gleeful"}}, "persona.defaultEmotion"),
        ({"persona": {"name": "  "}}, "'persona.name' must not be empty."),
        ({"persona": GORM, "options": {"replyFormat": "json"}}, "options.replyFormat"),
        ({"persona": GORM, "options": {"memoryTools": ["dance"]}}, "dance"),
        ({"persona": GORM, "options": {"toolChoice": "sometimes"}}, "options.toolChoice"),
        ({"persona": GORM, "options": {"playerOptionCount": 9}}, "playerOptionCount"),
        ({"persona": GORM, "options": {"groundingTool": "check_inventory"}}, "groundingTool"),
        ({"persona": GORM, "options": "fast"}, "'options' must be an object."),
        ({"persona": GORM, "memory": [1]}, "'memory' must be an object."),
        ({"persona": GORM, "tools": {"name": "x"}}, "'tools' must be an array of tool definitions."),
        ({"persona": GORM, "tools": [INV, INV]}, "Duplicate tool name 'check_inventory'"),
        (
            {"persona": GORM, "tools": [{**INV, "name": "read_world_state"}], "world": "nowhere"},
            "No world with id 'nowhere'.",
        ),
        ({"persona": GORM, "npc": ""}, "'npc' must be 1-128 printable characters"),
        ({"persona": GORM, "npc": "a\u0007b"}, "'npc' must be 1-128 printable characters"),
        ({"persona": GORM, "npc": "x" * 129}, "'npc' must be 1-128 printable characters"),
        ({"persona": GORM, "model": {"type": "oracle"}}, "Unknown model type"),
    ],
)
def test_create_refuses_bad_input_and_creates_nothing(
    bridge: BridgeProcess, params: dict[str, Any], message: str
) -> None:
    before = bridge.call("npc/list")
    error = error_of(bridge, "npc/create", {"model": "scripted", **params})
    assert message in error["message"]
    assert error["code"] in (-32602, -32052)
    assert bridge.call("npc/list") == before


def test_a_world_that_does_not_exist_is_world_not_found(bridge: BridgeProcess) -> None:
    error = error_of(bridge, "npc/create", {"npc": "atl", "persona": GORM, "model": "scripted", "world": "atlantis"})
    assert (error["code"], error["data"]) == (-32052, {"code": "world_not_found", "world": "atlantis"})


def test_persona_defaults_and_unknown_members_are_warnings(bridge: BridgeProcess) -> None:
    created = bridge.call(
        "npc/create",
        {
            "npc": "ann",
            "persona": {"name": "Ann", "personalty": "typo", "role": None},
            "options": {"temprature": 0.5, "memoryTools": "all"},
            "voice": "deep",
            "model": "scripted",
        },
    )
    assert created["tools"] == ["remember_fact", "change_relationship"]
    assert created["warnings"] == [
        "Unknown parameter 'voice' was ignored.",
        "Unknown parameter 'persona.personalty' was ignored.",
        "Unknown parameter 'options.temprature' was ignored.",
    ]
    persona = bridge.call("npc/state", {"npc": "ann", "settle": False})["state"]["persona"]
    assert persona == {
        "name": "Ann",
        "role": "",
        "personality": "",
        "speakingStyle": "",
        "backstory": "",
        "goals": [],
        "secrets": [],
        "knowledge": [],
        "defaultEmotion": "neutral",
        "maxSentences": 2,
    }


def test_many_tools_get_one_warning(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "toolworld"})
    tools = [{"name": f"tool_{i}", "description": f"Tool {i}."} for i in range(1, 5)]
    created = create(bridge, "many", [], tools=tools, world="toolworld", options={"worldWritable": [""]})
    assert len(created["tools"]) == 6
    assert [w for w in created["warnings"] if "6 tools" in w] == [
        "6 tools: the on-device model chooses best among at most 3-5 tools per request; "
        "narrow them per turn with 'enabledTools'."
    ]


def test_unknown_npc_ids_are_npc_not_found_for_every_method(bridge: BridgeProcess) -> None:
    for method, extra in (
        ("npc/talk", {"line": "x"}),
        ("npc/bark", {}),
        ("npc/state", {}),
        ("npc/update", {}),
        ("npc/reset", {}),
        ("npc/cancel", {}),
        ("npc/delete", {}),
    ):
        error = error_of(bridge, method, {"npc": "ghost", **extra})
        assert (error["code"], error["data"]) == (-32050, {"code": "npc_not_found", "npc": "ghost"}), method
    assert error_of(bridge, "npc/talk", {"line": "x"})["message"] == "Missing required parameter 'npc'."


def test_methods_the_protocol_does_not_have_are_not_found(bridge: BridgeProcess) -> None:
    for method in ("npc/say", "npc/compact", "npc/dance", "world/modify"):
        assert error_of(bridge, method, {"npc": "c1"})["code"] == -32601


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("npc/talk", {"line": "Hi", "stream": "yes"}, "Parameter 'stream' must be a boolean; got \"yes\"."),
        ("npc/talk", {"line": 5}, "Parameter 'line' must be a string; got 5."),
        ("npc/state", {"settle": "no"}, "Parameter 'settle' must be a boolean; got \"no\"."),
        ("npc/reset", {"clearMemory": 1}, "Parameter 'clearMemory' must be a boolean; got 1."),
        ("npc/update", {"tools": "all"}, "'tools' must be an array of tool definitions."),
        ("npc/update", {"memory": [1]}, "'memory' must be an object."),
    ],
)
def test_wrong_value_types_are_invalid_params(
    bridge: BridgeProcess, method: str, params: dict[str, Any], message: str
) -> None:
    if not any(e["npc"] == "types" for e in bridge.call("npc/list")["npcs"]):
        create(bridge, "types", [])
    error = error_of(bridge, method, {"npc": "types", **params})
    assert (error["code"], error["message"]) == (-32602, message)
    assert entry(bridge, "types")["pendingOperations"] == 0
