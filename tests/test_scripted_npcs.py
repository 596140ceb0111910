"""Scripted NPCs over a real ``oam-actors stdio``: which steps an NPC turn takes in each reply
format (PROTOCOL.md §7, §10.2), and a script that cannot serve a step saying why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bridge_process import BridgeProcess


def script(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"type": "scripted", "steps": list(steps)}


def reply(line: str, emotion: str = "neutral") -> dict[str, Any]:
    """The json step of one structured NPC reply: the NPC's reply schema, every member required."""
    return {"emotion": emotion, "line": line, "player_options": [], "ends_conversation": False}


def create(bridge: BridgeProcess, npc: str, model: dict[str, Any], **options: Any) -> None:
    bridge.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "options": options, "model": model})


def lines(bridge: BridgeProcess, npc: str, talks: int) -> list[str]:
    return [bridge.call("npc/talk", {"npc": npc, "line": "Hello?"})["line"] for _ in range(talks)]


def test_a_structured_reply_takes_one_json_step_per_talk() -> None:
    steps = [{"json": reply("Welcome, traveller!", "happy")}, {"json": reply("Safe roads.")}]
    with BridgeProcess() as bridge:
        create(bridge, "automatic", script(*steps))
        create(bridge, "structured", script(*steps), replyFormat="structured")
        for npc in ("automatic", "structured"):
            assert lines(bridge, npc, 2) == ["Welcome, traveller!", "Safe roads."]
        talk = bridge.call("npc/talk", {"npc": "automatic", "line": "Hello?"})
        assert (talk["line"], talk["isFallback"]) == ("(script exhausted)", False)  # then the fallback
        assert bridge.close() == 0


def test_a_text_reply_takes_one_text_step_per_talk() -> None:
    with BridgeProcess() as bridge:
        create(bridge, "plain", script({"text": "one"}, {"text": "two"}, {"text": "three"}), replyFormat="text")
        assert lines(bridge, "plain", 4) == ["one", "two", "three", "(script exhausted)"]
        assert bridge.close() == 0


def test_a_text_step_cannot_serve_a_structured_reply_and_the_script_stays_where_it_was() -> None:
    with BridgeProcess() as bridge:
        create(bridge, "gorm", script(*({"text": word} for word in ("one", "two", "three", "four"))))
        error = bridge.error(bridge.request("npc/talk", {"npc": "gorm", "line": "Hello?"}))
        assert (error["code"], error["data"]["code"]) == (-32011, "invalid_request")
        for words in ("steps[0]", "text step", '{"json"', "replyFormat text"):
            assert words in error["message"], error["message"]
        # The failed turn took no step: switched to text replies, the NPC says its script in order.
        bridge.call("npc/update", {"npc": "gorm", "options": {"replyFormat": "text"}})
        assert lines(bridge, "gorm", 2) == ["one", "two"]
        assert bridge.close() == 0


def test_a_text_step_holding_json_still_serves_a_structured_reply() -> None:
    with BridgeProcess() as bridge:
        create(bridge, "gorm", script({"text": json.dumps(reply("Hm."))}))
        assert lines(bridge, "gorm", 1) == ["Hm."]
        assert bridge.close() == 0


def test_the_protocol_documents_recipe_runs_as_it_says() -> None:
    document = (Path(__file__).parent.parent / "protocol" / "PROTOCOL.md").read_text()
    recipe = document.split("A working recipe, two talks in the default")[1].split("```json\n")[1].split("```")[0]
    with BridgeProcess() as bridge:
        for message in re.split(r"\n(?=\{\"jsonrpc\")", recipe.strip()):
            bridge.send(json.loads(message))
        talks = [bridge.result(n)["line"] for n in (2, 3, 5, 6)]
        assert talks == ["Welcome, traveller!", "Safe roads.", "Back again?", "Off you go."]
        assert lines(bridge, "gorm", 1) == ["(script exhausted)"]
        assert bridge.close() == 0
