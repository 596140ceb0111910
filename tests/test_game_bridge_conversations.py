"""The ``conversation/*`` methods through the real ``oam-actors stdio`` process (PROTOCOL.md §10.9):
creation and every bad input, each turn order, streaming order, the player speaking in, join and
leave, cancellation, state and restore, and what members, bystanders and absent NPCs remember."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import BridgeProcess, scripted

WORLD = "tavern"
PEOPLE = {
    "bran": {"name": "Bran", "role": "a ferryman", "personality": "Worried."},
    "cora": {"name": "Cora", "role": "a baker", "personality": "Cheerful."},
    "dena": {"name": "Dena", "role": "a guard", "personality": "Stern."},
    "ewan": {"name": "Ewan", "role": "a fisher", "personality": "Quiet."},
    "finn": {"name": "Finn", "role": "a traveller", "personality": "Curious."},
}


def text(*lines: str) -> list[dict[str, Any]]:
    return [{"text": line} for line in lines]


@pytest.fixture
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess(["--model", "scripted"]) as process:
        process.call("world/create", {"world": WORLD, "state": {"weather": "rain"}})
        process.call("world/create", {"world": "elsewhere"})
        yield process
        assert process.close() == 0


def npc(bridge: BridgeProcess, npc_id: str, lines: list[dict[str, Any]] = (), world: str = WORLD,
        **extra: Any) -> None:
    bridge.call("npc/create", {"npc": npc_id, "persona": PEOPLE[npc_id], "world": world,
                               "model": scripted(list(lines)), **extra})


def error_of(bridge: BridgeProcess, method: str, params: Any) -> dict[str, Any]:
    return bridge.error(bridge.request(method, params))


def conversation_events(related: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in related if m.get("method") == "conversation/event"]


# --- creation and turn orders --------------------------------------------------------------------


def test_round_robin_speaks_in_member_order_and_ends_at_the_budget(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("[worried] The bridge is out, Cora.", "We wait then."))
    npc(bridge, "cora", text("[happy] Then we bake more bread, Bran!"))
    created = bridge.call("conversation/create", {"conversation": "c1", "world": WORLD, "members": ["bran", "cora"],
                                                  "situation": "A rainy evening.", "lineBudget": 3})
    assert created == {"conversation": "c1", "members": ["bran", "cora"], "next": "bran", "ended": False,
                       "warnings": []}
    first = bridge.call("conversation/advance", {"conversation": "c1"})
    assert first["lines"] == [{"speaker": "bran", "name": "Bran", "line": "The bridge is out, Cora.",
                               "emotion": "worried", "addressee": "cora", "isFallback": False}]
    assert (first["next"], first["ended"], first["lineCount"]) == ("cora", False, 1)
    rest = bridge.call("conversation/run", {"conversation": "c1", "lines": 5})
    assert [(l["speaker"], l["line"]) for l in rest["lines"]] == [
        ("cora", "Then we bake more bread, Bran!"), ("bran", "We wait then.")]
    assert (rest["ended"], rest["next"], rest["lineCount"]) == (True, None, 3)
    assert bridge.call("conversation/run", {"conversation": "c1", "lines": 2})["lines"] == []


def test_sequence_order_is_followed_and_may_include_the_player(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("One.", "Three."))
    npc(bridge, "cora", text("Two."))
    npc(bridge, "dena", [])
    bridge.call("conversation/create", {"conversation": "s", "world": WORLD, "members": ["bran", "cora", "dena"],
                                        "player": "Aria", "turnOrder": "sequence",
                                        "sequence": ["bran", "cora", "player"]})
    ran = bridge.call("conversation/run", {"conversation": "s", "lines": 5})
    assert [l["speaker"] for l in ran["lines"]] == ["bran", "cora"]
    assert (ran["next"], ran["playerTurn"]) == ("player", True)
    said = bridge.call("conversation/say", {"conversation": "s", "line": "Hello, Bran."})
    assert said["line"] == {"speaker": "player", "name": "Aria", "line": "Hello, Bran.", "emotion": None,
                            "addressee": "bran", "isFallback": False}
    assert said["next"] == "bran"
    assert bridge.call("conversation/advance", {"conversation": "s"})["lines"][0]["line"] == "Three."


def test_model_order_follows_whom_each_line_addresses(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("Dena, is the bridge guarded?"))
    npc(bridge, "cora", text("Nobody asked me, Bran."))
    npc(bridge, "dena", text("It is."))
    bridge.call("conversation/create", {"conversation": "m", "world": WORLD, "members": ["bran", "cora", "dena"],
                                        "turnOrder": "model"})
    ran = bridge.call("conversation/run", {"conversation": "m", "lines": 3})
    # Bran asks Dena; Dena answers the group (nobody named), so the longest silent, Cora, speaks.
    assert [l["speaker"] for l in ran["lines"]] == ["bran", "dena", "cora"]
    assert [l["addressee"] for l in ran["lines"]] == ["dena", None, "bran"]


def test_a_line_speaking_as_another_member_is_cut_or_asked_again(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("Cora: I am not Bran.", "Fine weather. Cora: Indeed it is!"))
    npc(bridge, "cora", text("Bran: still not me.", "Cora: Hello."))
    bridge.call("conversation/create", {"conversation": "a", "world": WORLD, "members": ["bran", "cora"]})
    lines = bridge.call("conversation/run", {"conversation": "a", "lines": 2})["lines"]
    assert [(l["speaker"], l["line"]) for l in lines] == [("bran", "Fine weather."), ("cora", "Hello.")]


def test_streamed_events_come_in_order_before_the_response(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", [{"text": "[worried] Rain again.", "chunks": 3}])
    npc(bridge, "cora", text("[happy] Good for bread."))
    bridge.call("conversation/create", {"conversation": "e", "world": WORLD, "members": ["bran", "cora"],
                                        "lineBudget": 2})
    rid = bridge.request("conversation/run", {"conversation": "e", "lines": 2, "stream": True})
    response, related = bridge.response(rid)
    events = conversation_events(related)
    assert all(e["requestId"] == rid and e["conversation"] == "e" for e in events)
    kinds = [e["event"]["type"] for e in events]
    assert kinds[0] == "speaker" and kinds[-1] == "ended"
    lines = [e["event"] for e in events if e["event"]["type"] == "line"]
    assert [l["line"] for l in lines] == ["Rain again.", "Good for bread."]
    first_line = kinds.index("line")
    assert "lineDelta" in kinds[:first_line] and "emotion" in kinds[:first_line]
    assert all(e["npc"] == "bran" for e in events[:first_line] if e["event"]["type"] in ("lineDelta", "emotion"))
    assert response["result"]["ended"] is True


# --- bad input ---------------------------------------------------------------------------------------


def test_bad_input_names_the_parameter_and_creates_nothing(bridge: BridgeProcess) -> None:
    for npc_id in ("bran", "cora", "dena"):
        npc(bridge, npc_id)
    npc(bridge, "ewan", world="elsewhere")
    base = {"conversation": "x", "world": WORLD}
    cases = [
        ({"members": ["bran", "nobody"]}, -32602, "members[1]"),
        ({"members": ["bran", "bran"]}, -32602, "members[1]"),
        ({"members": ["bran", "ewan"]}, -32602, "members[1]"),
        ({"members": ["bran"]}, -32602, "members"),
        ({"members": ["bran", "cora"], "lineBudget": 0}, -32602, "lineBudget"),
        ({"members": ["bran", "cora"], "lineBudget": 2.5}, -32602, "lineBudget"),
        ({"members": ["bran", "cora"], "turnOrder": "loudest"}, -32602, "turnOrder"),
        ({"members": ["bran", "cora"], "turnOrder": "sequence", "sequence": ["bran", "dena"]}, -32602, "sequence[1]"),
        ({"members": ["bran", "cora"], "audience": ["cora"]}, -32602, "audience[0]"),
        ({"members": ["bran", "cora"], "world": "nowhere"}, -32052, "nowhere"),
    ]
    for extra, code, named in cases:
        error = error_of(bridge, "conversation/create", base | extra)
        assert error["code"] == code, extra
        assert named in error["message"], (extra, error["message"])
    too_many = error_of(bridge, "conversation/create", base | {"members": [f"n{i}" for i in range(9)]})
    assert (too_many["code"], too_many["data"]["limit"]) == (-32602, 8)
    assert bridge.call("conversation/list") == {"conversations": []}
    bridge.call("conversation/create", base | {"members": ["bran", "cora"]})
    exists = error_of(bridge, "conversation/create", base | {"members": ["bran", "dena"]})
    assert (exists["code"], exists["data"]) == (-32058, {"code": "conversation_exists", "conversation": "x"})
    not_member = error_of(bridge, "conversation/advance", {"conversation": "x", "speaker": "dena"})
    assert not_member["code"] == -32602 and "speaker" in not_member["message"]
    missing = error_of(bridge, "conversation/advance", {"conversation": "y"})
    assert (missing["code"], missing["data"]["code"]) == (-32057, "conversation_not_found")
    bad_run = error_of(bridge, "conversation/run", {"conversation": "x", "lines": 0})
    assert bad_run["code"] == -32602 and "lines" in bad_run["message"]
    for bad, named in (({"coalesce": "no"}, "coalesce"), ({"deadlineSeconds": 0}, "deadlineSeconds"),
                       ({"stream": 1}, "stream")):
        error = error_of(bridge, "conversation/advance", {"conversation": "x", **bad})
        assert error["code"] == -32602 and named in error["message"], bad
    assert bridge.call("conversation/state", {"conversation": "x"})["state"]["lines"] == []


def test_conversations_count_against_a_per_connection_limit() -> None:
    with BridgeProcess(["--model", "scripted", "--max-conversations", "1"]) as bridge:
        bridge.call("world/create", {"world": WORLD})
        for npc_id in ("bran", "cora"):
            npc(bridge, npc_id)
        bridge.call("conversation/create", {"world": WORLD, "members": ["bran", "cora"]})
        error = error_of(bridge, "conversation/create", {"world": WORLD, "members": ["bran", "cora"]})
        assert (error["code"], error["data"]) == (-32055, {"code": "limit_reached", "limit": 1})
        assert bridge.close() == 0


# --- join, leave, delete, cancel, state ---------------------------------------------------------------


def test_members_join_and_leave_and_a_deleted_npc_leaves(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("Hello.", "Again."))
    npc(bridge, "cora", text("Hi."))
    npc(bridge, "dena", text("Evening."))
    bridge.call("conversation/create", {"conversation": "j", "world": WORLD, "members": ["bran", "cora"]})
    joined = bridge.call("conversation/join", {"conversation": "j", "npc": "dena"})
    assert joined["members"] == ["bran", "cora", "dena"]
    again = error_of(bridge, "conversation/join", {"conversation": "j", "npc": "dena"})
    assert again["code"] == -32602 and "npc" in again["message"]
    ran = bridge.call("conversation/run", {"conversation": "j", "lines": 3})
    assert [l["speaker"] for l in ran["lines"]] == ["bran", "cora", "dena"]
    assert bridge.call("conversation/leave", {"conversation": "j", "npc": "cora"})["members"] == ["bran", "dena"]
    bridge.call("npc/delete", {"npc": "dena"})
    state = bridge.call("conversation/state", {"conversation": "j"})["state"]
    assert [m["npc"] for m in state["members"]] == ["bran"]
    assert state["ended"] is True


def test_cancel_leaves_no_trace(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("First."))
    # Cora's script waits for a client tool that never answers... a scripted wait: no steps, so
    # her line would fail; instead hold her with a talk that calls a client tool.
    npc(bridge, "cora", [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}],
        tools=[{"name": "open_gate", "description": "Open a gate.",
                "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}}}])
    bridge.call("conversation/create", {"conversation": "k", "world": WORLD, "members": ["bran", "cora"]})
    talk = bridge.request("npc/talk", {"npc": "cora", "line": "Open the gate."})
    bridge.wait_for(lambda m: m.get("method") == "tool/call")
    run = bridge.request("conversation/run", {"conversation": "k", "lines": 2})
    # Bran's line is spoken; Cora's waits behind her talk with the player.
    assert bridge.call("conversation/cancel", {"conversation": "k"}) == {"conversation": "k", "cancelled": 1}
    assert bridge.error(run)["code"] == -32009
    assert bridge.call("conversation/state", {"conversation": "k"})["state"]["lines"] == []
    saved = bridge.call("npc/state", {"npc": "bran", "settle": False})["state"]["memory"]
    assert "heard" not in saved
    bridge.call("npc/cancel", {"npc": "cora"})
    assert bridge.error(talk)["code"] == -32009


def test_state_and_restore_round_trip(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("One.", "Three."))
    npc(bridge, "cora", text("Two."))
    bridge.call("conversation/create", {"conversation": "r", "world": WORLD, "members": ["bran", "cora"],
                                        "situation": "At the docks.", "lineBudget": 4})
    bridge.call("conversation/run", {"conversation": "r", "lines": 2})
    saved = bridge.call("conversation/state", {"conversation": "r"})
    bridge.call("conversation/delete", {"conversation": "r"})
    restored = bridge.call("conversation/restore", {"state": saved})
    assert restored["conversation"] == "r" and restored["next"] == "bran"
    assert bridge.call("conversation/state", {"conversation": "r"}) == saved
    assert bridge.call("conversation/advance", {"conversation": "r"})["lines"][0]["line"] == "Three."


# --- memory and knowledge scoping ---------------------------------------------------------------


def test_members_remember_bystanders_overhear_absent_npcs_know_nothing(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("The bridge is out, Cora."))
    npc(bridge, "cora", text("Then the miller cannot come."))
    npc(bridge, "dena", [{"template": "{prompt}"}])
    npc(bridge, "finn", [{"template": "{prompt}"}])
    bridge.call("conversation/create", {"conversation": "h", "world": WORLD, "members": ["bran", "cora"],
                                        "audience": ["dena"]})
    bridge.call("conversation/run", {"conversation": "h", "lines": 2})
    cora = bridge.call("npc/state", {"npc": "cora"})["state"]["memory"]["heard"]
    assert cora == ["Bran to you: The bridge is out, Cora.", "You: Then the miller cannot come."]
    dena = bridge.call("npc/state", {"npc": "dena"})["state"]["memory"]["heard"]
    assert dena == ["(overheard) Bran to Cora: The bridge is out, Cora.",
                    "(overheard) Cora: Then the miller cannot come."]
    assert "heard" not in bridge.call("npc/state", {"npc": "finn"})["state"]["memory"]


def test_a_player_talk_waits_for_at_most_one_line_never_for_the_whole_conversation(bridge: BridgeProcess) -> None:
    gate = {"name": "open_gate", "description": "Open a gate.",
            "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}}}
    # Bran is busy with the player (a client tool is out): the conversation's first line waits.
    npc(bridge, "bran", [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]},
                         {"json": {"emotion": "neutral", "line": "Done.", "player_options": [],
                                   "ends_conversation": False}}, {"text": "Rain."}, {"text": "Yes."}],
        tools=[gate])
    npc(bridge, "cora", [{"json": {"emotion": "happy", "line": "Fresh bread!", "player_options": [],
                                   "ends_conversation": False}}, {"text": "Bread."}, {"text": "More."}])
    bridge.call("conversation/create", {"conversation": "p", "world": WORLD, "members": ["bran", "cora"]})
    bran_talk = bridge.request("npc/talk", {"npc": "bran", "line": "Open the north gate."})
    tool = bridge.tool_call(bran_talk)
    run = bridge.request("conversation/run", {"conversation": "p", "lines": 4})
    # Cora is a member of the running conversation, yet her talk with the player is answered now.
    assert bridge.call("npc/talk", {"npc": "cora", "line": "Any bread?"})["line"] == "Fresh bread!"
    assert not any(m.get("id") == run for m in bridge.since(0))  # the conversation still waits for Bran
    bridge.reply(tool["id"], {"opened": True})
    assert bridge.result(bran_talk)["line"] == "Done."
    assert [line["line"] for line in bridge.result(run)["lines"]] == ["Rain.", "Bread.", "Yes.", "More."]


def test_an_ambient_line_in_progress_gives_way_to_a_player_talk(bridge: BridgeProcess) -> None:
    # Bran's line would take ten seconds; the player's talk does not wait for it.
    npc(bridge, "bran", [{"text": "Slow words.", "delayMs": 10_000},
                         {"json": {"emotion": "neutral", "line": "At your service.", "player_options": [],
                                   "ends_conversation": False}}], options={"fallbackLines": ["Bran nods."]})
    npc(bridge, "cora", text("Quick words."))
    bridge.call("conversation/create", {"conversation": "g", "world": WORLD, "members": ["bran", "cora"]})
    run = bridge.request("conversation/run", {"conversation": "g", "lines": 2, "stream": True})
    bridge.wait_for(lambda m: m.get("method") == "conversation/event" and m["params"]["event"]["type"] == "speaker")
    assert bridge.call("npc/talk", {"npc": "bran", "line": "Hello?"})["line"] == "At your service."
    lines = bridge.result(run)["lines"]
    assert [(l["line"], l["isFallback"], l.get("degraded")) for l in lines] == [
        ("Bran nods.", True, "preempted"), ("Quick words.", False, None)]


def test_npcs_the_world_state_puts_at_the_location_overhear(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("The bridge is out."))
    npc(bridge, "cora", text("Oh no."))
    for other in ("dena", "ewan"):
        npc(bridge, other)
    bridge.call("world/set", {"world": WORLD, "path": "npcs", "value": {
        "dena": {"location": "inn"}, "ewan": {"location": "mill"}}})
    bridge.call("conversation/create", {"conversation": "l", "world": WORLD, "members": ["bran", "cora"],
                                        "location": "inn"})
    bridge.call("conversation/run", {"conversation": "l", "lines": 1})
    assert bridge.call("npc/state", {"npc": "dena"})["state"]["memory"]["heard"] == [
        "(overheard) Bran: The bridge is out."]
    assert "heard" not in bridge.call("npc/state", {"npc": "ewan"})["state"]["memory"]


def test_initialize_lists_the_conversation_methods_and_event(bridge: BridgeProcess) -> None:
    caps = bridge.call("initialize", {"client": {"name": "t", "version": "1"}, "protocolVersion": "1.0"})["capabilities"]
    assert [m for m in caps["methods"] if m.startswith("conversation/")] == [
        "conversation/advance", "conversation/cancel", "conversation/create", "conversation/delete",
        "conversation/join", "conversation/leave", "conversation/list", "conversation/restore",
        "conversation/run", "conversation/say", "conversation/state"]
    assert "conversation/event" in caps["notifications"]


def test_a_member_deleted_mid_line_fails_the_request_and_leaves_no_trace(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", text("Hello."))
    npc(bridge, "cora", [{"text": "Slow words.", "delayMs": 10_000}])
    npc(bridge, "dena", text("Evening."))
    bridge.call("conversation/create", {"conversation": "d", "world": WORLD, "members": ["bran", "cora", "dena"]})
    run = bridge.request("conversation/run", {"conversation": "d", "lines": 3, "stream": True})
    bridge.wait_for(lambda m: m.get("method") == "conversation/event"
                    and m["params"]["event"] == {"type": "speaker", "npc": "cora", "name": "Cora"})
    bridge.call("npc/delete", {"npc": "cora"})
    error = bridge.error(run)
    assert (error["code"], error["data"]) == (-32050, {"code": "npc_not_found", "npc": "cora"})
    assert error["message"] == "The member NPC 'cora' was deleted."
    state = bridge.call("conversation/state", {"conversation": "d"})["state"]
    assert (state["lines"], [m["npc"] for m in state["members"]]) == ([], ["bran", "dena"])
    assert "heard" not in bridge.call("npc/state", {"npc": "bran"})["state"]["memory"]


def test_restore_names_what_is_wrong_with_the_state(bridge: BridgeProcess) -> None:
    npc(bridge, "bran")
    for state, named in (({"state": 3}, "state.world"), ({"world": WORLD}, "state.members"),
                         ({"world": WORLD, "members": ["bran", "zed"]}, "state.members[1]"),
                         ({"world": WORLD, "members": ["bran", "bran"], "lines": 1}, "state.members[1]")):
        error = error_of(bridge, "conversation/restore", {"state": state})
        assert error["code"] == -32602 and named in error["message"], (state, error)
    assert error_of(bridge, "conversation/restore", {})["code"] == -32602
    assert bridge.call("conversation/list") == {"conversations": []}


def test_a_talk_cancelled_before_it_started_leaves_later_lines_alone(bridge: BridgeProcess) -> None:
    gate = {"name": "open_gate", "description": "Open a gate.",
            "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}}}
    npc(bridge, "bran", [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]},
                         {"text": "Spoken at last."}], tools=[gate])
    npc(bridge, "cora", text("Hm."))
    bridge.call("conversation/create", {"conversation": "q", "world": WORLD, "members": ["bran", "cora"]})
    first = bridge.request("npc/talk", {"npc": "bran", "line": "Open the gate."})
    bridge.tool_call(first)
    second = bridge.request("npc/talk", {"npc": "bran", "line": "And another thing."})  # queued behind
    assert bridge.call("npc/cancel", {"npc": "bran"}) == {"npc": "bran", "cancelled": 2}
    for talk in (first, second):
        assert bridge.error(talk)["code"] == -32009
    line = bridge.call("conversation/advance", {"conversation": "q"})["lines"][0]
    assert (line["line"], line["isFallback"]) == ("Spoken at last.", False)


def test_the_player_speaks_into_a_running_conversation_before_its_next_line(bridge: BridgeProcess) -> None:
    npc(bridge, "bran", [{"text": "Slow words.", "delayMs": 4000}, {"text": "As you say, Aria."}])
    npc(bridge, "cora", text("Hm.", "Indeed."))
    bridge.call("conversation/create", {"conversation": "i", "world": WORLD, "members": ["bran", "cora"],
                                        "player": "Aria", "turnOrder": "sequence", "sequence": ["bran", "cora"]})
    run = bridge.request("conversation/run", {"conversation": "i", "lines": 4, "stream": True})
    bridge.wait_for(lambda m: m.get("method") == "conversation/event" and m["params"]["event"]["type"] == "speaker")
    said = bridge.request("conversation/say", {"conversation": "i", "line": "Wait, Bran!"})
    lines = bridge.result(run)["lines"]
    assert [(l["speaker"], l["line"]) for l in lines] == [
        ("bran", "Slow words."), ("player", "Wait, Bran!"), ("cora", "Hm."), ("bran", "As you say, Aria."),
        ("cora", "Indeed.")]
    assert bridge.result(said)["line"]["addressee"] == "bran"
    heard = bridge.call("npc/state", {"npc": "cora"})["state"]["memory"]["heard"]
    assert heard[1] == "Aria to Bran: Wait, Bran!"
