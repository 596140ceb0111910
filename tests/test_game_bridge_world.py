"""The ``world/*`` methods and ``world/changed`` through the real ``oam-actors stdio`` process
(protocol-game §5, §7, §9 items 27, 31-36): documents, paths, errors, subscriptions, a world
shared by several NPCs, the limits and shutdown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import BridgeProcess, is_response, scripted

VILLAGE = {"player": {"name": "Aria", "gold": 60}}
GAME_METHODS = [
    "npc/create",
    "npc/restore",
    "npc/talk",
    "npc/bark",
    "npc/state",
    "npc/update",
    "npc/reset",
    "npc/cancel",
    "npc/delete",
    "npc/list",
    "decision/decide",
    "decision/decideMany",
    "content/generate",
    "world/create",
    "world/get",
    "world/set",
    "world/merge",
    "world/remove",
    "world/snapshot",
    "world/delete",
    "world/list",
    "world/subscribe",
    "world/unsubscribe",
]


@pytest.fixture
def bridge() -> Iterator[BridgeProcess]:
    """A fresh process per test: world and subscription ids are generated per connection."""
    with BridgeProcess() as process:
        yield process
        assert process.close() == 0


@pytest.fixture(scope="module")
def village() -> Iterator[BridgeProcess]:
    """One process with the world "village" that the error tests must leave unchanged."""
    with BridgeProcess() as process:
        process.call("world/create", {"world": "village", "state": VILLAGE})
        yield process
        assert process.close() == 0


def changes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "world/changed"]


def tool_step(name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": name, "arguments": arguments}]}


def reply(line: str) -> dict[str, Any]:
    return {"json": {"emotion": "neutral", "line": line, "player_options": [], "ends_conversation": False}}


def test_create_get_and_generated_ids(bridge: BridgeProcess) -> None:
    assert bridge.call("world/create", {"world": "village", "state": VILLAGE}) == {"world": "village", "version": 0}
    assert bridge.call("world/create", {}) == {"world": "w1", "version": 0}
    assert bridge.call("world/get", {"world": "village", "path": "player.gold"}) == {
        "world": "village",
        "path": "player.gold",
        "value": 60,
        "exists": True,
        "version": 0,
    }
    assert bridge.call("world/get", {"world": "village", "path": "player.horse"}) == {
        "world": "village",
        "path": "player.horse",
        "value": None,
        "exists": False,
        "version": 0,
    }
    assert bridge.call("world/get", {"world": "village"})["value"] == VILLAGE


def test_set_merge_remove_snapshot_list_delete(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "village", "state": VILLAGE})
    bridge.call("world/create", {})
    assert bridge.call("world/set", {"world": "village", "path": "quests.ring.stage", "value": 1}) == {
        "world": "village",
        "path": "quests.ring.stage",
        "version": 1,
    }
    bridge.call("world/set", {"world": "village", "path": "player.horse", "value": None})
    horse = bridge.call("world/get", {"world": "village", "path": "player.horse"})
    assert (horse["exists"], horse["value"], horse["version"]) == (True, None, 2)
    merged = bridge.call("world/merge", {"world": "village", "path": "player", "patch": {"gold": 15, "horse": None}})
    assert merged == {"world": "village", "path": "player", "version": 3}
    assert bridge.call("world/remove", {"world": "village", "path": "quests.ring"}) == {
        "world": "village",
        "path": "quests.ring",
        "removed": True,
        "oldValue": {"stage": 1},
        "version": 4,
    }
    again = bridge.call("world/remove", {"world": "village", "path": "quests.ring"})
    assert (again["removed"], again["oldValue"], again["version"]) == (False, None, 4)
    snapshot = bridge.call("world/snapshot", {"world": "village"})
    assert snapshot == {
        "world": "village",
        "state": {"player": {"name": "Aria", "gold": 15}, "quests": {}},
        "version": 4,
    }
    assert list(snapshot["state"]["player"]) == ["name", "gold"]
    worlds = bridge.call("world/list")["worlds"]
    assert [w["world"] for w in worlds] == ["village", "w1"]
    assert list(worlds[0]) == ["world", "version", "npcs", "subscriptions", "createdAt"]
    assert (worlds[0]["version"], worlds[0]["npcs"], worlds[0]["subscriptions"]) == (4, 0, [])
    assert bridge.call("world/delete", {"world": "village"}) == {
        "world": "village",
        "deleted": True,
        "endedSubscriptions": 0,
    }
    error = bridge.error(bridge.request("world/get", {"world": "village"}))
    assert (error["code"], error["data"], error["message"]) == (
        -32052,
        {"code": "world_not_found", "world": "village"},
        "No world with id 'village'.",
    )


@pytest.mark.parametrize(
    ("method", "params", "code", "data", "message"),
    [
        (
            "world/create",
            {"world": "village"},
            -32053,
            {"code": "world_exists", "world": "village"},
            "A world with id 'village' already exists.",
        ),
        (
            "world/create",
            {"world": "fresh", "state": [1, 2]},
            -32602,
            {"code": "invalid_params"},
            "'state' must be a JSON object (the world root).",
        ),
        (
            "world/create",
            {"world": ""},
            -32602,
            {"code": "invalid_params"},
            "'world' must be 1-128 printable characters; got ''.",
        ),
        (
            "world/set",
            {"path": "player.gold.copper", "value": 1},
            -32054,
            {"code": "world_error", "world": "village", "path": "player.gold.copper"},
            "Cannot write 'player.gold.copper': 'player.gold' is a number, not an object or list.",
        ),
        (
            "world/set",
            {"value": 3},
            -32054,
            {"code": "world_error", "world": "village", "path": ""},
            "The world state root must be a JSON object.",
        ),
        (
            "world/get",
            {"path": "player..gold"},
            -32054,
            {"code": "world_error", "world": "village", "path": "player..gold"},
            "'player..gold' is not a valid path. Use dot-separated keys such as 'player.gold'.",
        ),
        (
            "world/subscribe",
            {"path": "a..b"},
            -32054,
            {"code": "world_error", "world": "village", "path": "a..b"},
            "'a..b' is not a valid path. Use dot-separated keys such as 'player.gold'.",
        ),
        (
            "world/merge",
            {"path": "a..b", "patch": {}},
            -32054,
            {"code": "world_error", "world": "village", "path": "a..b"},
            "'a..b' is not a valid path. Use dot-separated keys such as 'player.gold'.",
        ),
        (
            "world/set",
            {"path": "player.gold"},
            -32602,
            {"code": "invalid_params"},
            "Missing required parameter 'value' (use world/remove to delete).",
        ),
        ("world/merge", {}, -32602, {"code": "invalid_params"}, "Missing required parameter 'patch'."),
        ("world/remove", {}, -32602, {"code": "invalid_params"}, "Missing required parameter 'path'."),
        (
            "world/set",
            {"path": 7, "value": 1},
            -32602,
            {"code": "invalid_params"},
            "Parameter 'path' must be a string; got 7.",
        ),
        (
            "world/unsubscribe",
            {"subscription": "sub99"},
            -32056,
            {"code": "subscription_not_found", "subscription": "sub99"},
            "No world subscription with id 'sub99'.",
        ),
        (
            "world/snapshot",
            {"world": "nowhere"},
            -32052,
            {"code": "world_not_found", "world": "nowhere"},
            "No world with id 'nowhere'.",
        ),
    ],
)
def test_errors_name_the_problem_and_change_nothing(
    village: BridgeProcess, method: str, params: dict[str, Any], code: int, data: dict[str, Any], message: str
) -> None:
    error = village.error(village.request(method, {"world": "village", **params}))
    assert (error["code"], error["data"], error["message"]) == (code, data, message)
    assert village.call("world/snapshot", {"world": "village"}) == {"world": "village", "state": VILLAGE, "version": 0}
    assert [w["world"] for w in village.call("world/list")["worlds"]] == ["village"]


def test_subscriptions_hear_changes_before_the_response(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "village", "state": {"player": {"gold": 60}, "time": "dawn"}})
    assert bridge.call("world/subscribe", {"world": "village", "path": "player"}) == {
        "subscription": "sub1",
        "world": "village",
        "path": "player",
    }
    assert bridge.call("world/subscribe", {"world": "village"})["subscription"] == "sub2"
    start = bridge.count()
    bridge.call("world/set", {"world": "village", "path": "player.gold", "value": 45})
    written = bridge.since(start)
    assert changes(written) == [
        {"world": "village", "subscription": "sub1", "path": "player.gold", "oldValue": 60, "newValue": 45},
        {"world": "village", "subscription": "sub2", "path": "player.gold", "oldValue": 60, "newValue": 45},
    ]
    assert [is_response(m) for m in written] == [False, False, True]
    start = bridge.count()
    bridge.call("world/set", {"world": "village", "path": "time", "value": "noon"})
    assert [c["subscription"] for c in changes(bridge.since(start))] == ["sub2"]
    start = bridge.count()
    bridge.call("world/remove", {"world": "village", "path": "player.gold"})
    assert changes(bridge.since(start)) == [
        {"world": "village", "subscription": "sub1", "path": "player.gold", "oldValue": 45},
        {"world": "village", "subscription": "sub2", "path": "player.gold", "oldValue": 45},
    ]
    start = bridge.count()
    bridge.call("world/set", {"world": "village", "path": "time", "value": "noon"})  # no change, no notification
    assert changes(bridge.since(start)) == []
    assert bridge.call("world/unsubscribe", {"subscription": "sub1"}) == {
        "subscription": "sub1",
        "world": "village",
        "path": "player",
        "unsubscribed": True,
    }
    assert len(bridge.call("world/list")["worlds"][0]["subscriptions"]) == 1
    assert bridge.call("world/delete", {"world": "village"})["endedSubscriptions"] == 1
    assert bridge.error(bridge.request("world/unsubscribe", {"subscription": "sub2"}))["code"] == -32056


def test_a_merge_sends_one_notification_per_changed_leaf(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "village", "state": {"player": {"name": "Aria", "gold": 12, "hp": 30}}})
    bridge.call("world/subscribe", {"world": "village", "path": "player"})
    start = bridge.count()
    result = bridge.call(
        "world/merge", {"world": "village", "patch": {"player": {"gold": 20, "hp": None, "title": "Knight"}}}
    )
    assert result == {"world": "village", "path": "", "version": 1}
    assert [(c["path"], c.get("oldValue"), c.get("newValue")) for c in changes(bridge.since(start))] == [
        ("player.gold", 12, 20),
        ("player.hp", 30, None),
        ("player.title", None, "Knight"),
    ]
    assert "newValue" not in changes(bridge.since(start))[1]


def test_a_world_shared_by_several_npcs(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "village", "state": VILLAGE})
    bridge.call("world/subscribe", {"world": "village", "path": "quests"})
    bridge.call("world/subscribe", {"world": "village", "path": "player.gold"})
    gorm_steps = [
        tool_step("read_world_state", path="player.gold"),
        tool_step("update_world_state", path="quests.ring", value="started"),
        reply("Sixty gold, Aria. Find my ring."),
    ]
    options = {"groundingTool": "read_world_state", "worldWritable": ["quests"], "maxToolRounds": 3}
    created = bridge.call(
        "npc/create",
        {
            "npc": "gorm",
            "persona": {"name": "Gorm"},
            "world": "village",
            "options": options,
            "model": scripted(gorm_steps),
        },
    )
    assert created["tools"] == ["read_world_state", "update_world_state"]
    mira_steps = [tool_step("read_world_state", path="quests.ring"), reply("The ring hunt has started.")]
    bridge.call(
        "npc/create",
        {
            "npc": "mira",
            "persona": {"name": "Mira"},
            "world": "village",
            "options": {"groundingTool": "read_world_state"},
            "model": scripted(mira_steps),
        },
    )

    start = bridge.count()
    talk = bridge.request("npc/talk", {"npc": "gorm", "line": "Any work?", "stream": True})
    message, related = bridge.response(talk)
    result = message["result"]
    assert result["toolCalls"][0]["output"] == 60
    assert result["toolCalls"][1]["call"]["name"] == "update_world_state"
    started = [e["params"]["event"] for e in related if e["params"]["event"]["type"] == "toolCallStarted"]
    assert [e["execution"] for e in started] == ["local", "local"]
    response_at = bridge.index_of(lambda m: m.get("id") == talk)
    assert changes(bridge.since(start)[: response_at - start]) == [
        {"world": "village", "subscription": "sub1", "path": "quests.ring", "newValue": "started"}
    ]

    assert bridge.call("world/get", {"world": "village", "path": "quests.ring"})["value"] == "started"
    assert bridge.call("npc/talk", {"npc": "mira", "line": "News?"})["toolCalls"][0]["output"] == "started"
    # The protocol changes the same document the NPCs use, and subscribers hear it.
    start = bridge.count()
    bridge.call("world/set", {"world": "village", "path": "player.gold", "value": 5})
    assert [c["subscription"] for c in changes(bridge.since(start))] == ["sub2"]
    assert bridge.call("world/list")["worlds"][0]["npcs"] == 2
    # Deleting the world leaves the NPCs their document; only the id is gone.
    bridge.call("world/delete", {"world": "village"})
    assert [e["world"] for e in bridge.call("npc/list")["npcs"]] == ["village", "village"]
    # A world created again under the id is a new document: NPCs created now use it, not the old one.
    bridge.call("world/create", {"world": "village", "state": {"player": {"gold": 7}}})
    lina_steps = [tool_step("read_world_state", path="player.gold"), reply("Seven.")]
    bridge.call("npc/create", {"npc": "lina", "persona": {"name": "Lina"}, "world": "village",
                               "options": {"groundingTool": "read_world_state"}, "model": scripted(lina_steps)})
    assert bridge.call("npc/talk", {"npc": "lina", "line": "Gold?"})["toolCalls"][0]["output"] == 7
    assert bridge.call("world/get", {"world": "village", "path": "quests"})["exists"] is False


def test_limits_and_shutdown() -> None:
    with BridgeProcess(["--max-npcs", "1", "--max-worlds", "2", "--max-subscriptions", "1"]) as bridge:
        caps = bridge.call("initialize")["capabilities"]
        assert set(GAME_METHODS) <= set(caps["methods"])
        assert {"npc/event", "world/changed"} <= set(caps["notifications"])
        bridge.call("npc/create", {"persona": {"name": "Ann"}, "model": "scripted"})
        error = bridge.error(bridge.request("npc/create", {"persona": {"name": "Bob"}, "model": "scripted"}))
        assert (error["code"], error["data"], error["message"]) == (
            -32055,
            {"code": "limit_reached", "limit": 1},
            "The limit of 1 NPCs is reached; delete some first.",
        )
        bridge.call("world/create", {"world": "a"})
        bridge.call("world/create", {"world": "b"})
        assert bridge.error(bridge.request("world/create", {"world": "c"}))["message"] == (
            "The limit of 2 worlds is reached; delete some first."
        )
        bridge.call("world/subscribe", {"world": "a"})
        assert bridge.error(bridge.request("world/subscribe", {"world": "b"}))["message"] == (
            "The limit of 1 world subscriptions is reached; delete some first."
        )
        bridge.call("world/delete", {"world": "b"})
        assert bridge.call("world/create", {"world": "c"})["world"] == "c"
        assert bridge.call("shutdown") == {}
        assert bridge.wait_exit() == 0


def test_shutdown_cancels_running_npc_work() -> None:
    with BridgeProcess() as bridge:
        bridge.call(
            "npc/create",
            {"npc": "slow", "persona": {"name": "Slow"}, "model": scripted([{**reply("Late."), "delayMs": 60000}])},
        )
        talk = bridge.request("npc/talk", {"npc": "slow", "line": "Hurry."})
        decide = bridge.request(
            "decision/decide",
            {"situation": "x", "options": ["a", "b"], "model": scripted([{"json": {}, "delayMs": 60000}])},
        )
        shutdown = bridge.request("shutdown")
        assert bridge.error(talk)["code"] == -32009
        assert bridge.error(decide)["code"] == -32009
        assert bridge.result(shutdown) == {}
        assert bridge.wait_exit() == 0


def test_npc_writes_outside_writable_paths_or_of_the_wrong_type_change_nothing(bridge: BridgeProcess) -> None:
    bridge.call("world/create", {"world": "village", "state": {"player": {"gold": 60}, "quests": {"count": 2}}})
    bridge.call("world/subscribe", {"world": "village"})
    steps = [
        tool_step("update_world_state", path="player.gold", value=5),
        tool_step("update_world_state", path="quests.count", value="lots"),
        reply("Nothing changed."),
    ]
    bridge.call(
        "npc/create",
        {
            "npc": "thief",
            "persona": {"name": "Thief"},
            "world": "village",
            "options": {"worldWritable": ["quests"]},
            "model": scripted(steps),
        },
    )
    start = bridge.count()
    result = bridge.call("npc/talk", {"npc": "thief", "line": "Take the gold."})
    first, second = result["toolCalls"]
    assert (first["isError"], first["output"]) == (True, "'player.gold' is read-only. You may change: quests.")
    assert second["isError"] is True and "not a number" in second["output"]
    assert result["line"] == "Nothing changed."
    assert changes(bridge.since(start)) == []
    snapshot = bridge.call("world/snapshot", {"world": "village"})
    assert snapshot == {"world": "village", "state": {"player": {"gold": 60}, "quests": {"count": 2}}, "version": 0}
