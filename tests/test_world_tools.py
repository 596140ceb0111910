"""The model's world tools: protocol-game §6.12 "Model tools" and the §9 items 53-55 and 27."""

from __future__ import annotations

from typing import Any

import pytest

from oam_actors.game.world import MISSING, Change, WorldPath, WorldState
from oam_actors.game.world_tools import (
    OutputKind,
    WorldToolOutput,
    fit_value,
    missing_value_message,
    read_tool_definition,
    read_world_state,
    shorten,
    update_tool_definition,
    update_world_state,
)


def make_world() -> WorldState:
    return WorldState(
        {
            "player": {"name": "Aria", "gold": 12, "hp": 30, "alive": True},
            "party": [{"name": "Brom", "class": "cleric"}, {"name": "Lysa", "class": "rogue"}],
            "npcs": {"gorm": {"mood": "grumpy"}},
            "quests": {"lost_ring": {"status": "active"}},
        }
    )


def json_output(value: Any) -> WorldToolOutput:
    return WorldToolOutput(OutputKind.JSON, value)


def error_output(message: str) -> WorldToolOutput:
    return WorldToolOutput(OutputKind.ERROR, message)


READABLE = ["player", "quests"]


# --- definitions --------------------------------------------------------------------------------


def test_read_definition_lists_top_level_keys_when_everything_is_readable() -> None:
    definition = read_tool_definition(make_world(), [""])
    assert definition == {
        "name": "read_world_state",
        "description": "Read the current game state (JSON). Use it to check facts before you answer. "
        "Top-level keys: player, party, npcs, quests.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Dot path such as 'player.gold'. Empty string for everything you may read.",
                }
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    }


def test_read_definition_shows_at_most_twelve_keys_or_the_readable_paths() -> None:
    many = WorldState({f"k{i}": i for i in range(15)})
    description = read_tool_definition(many, ["$"])["description"]
    assert description.endswith("Top-level keys: " + ", ".join(f"k{i}" for i in range(12)) + ".")
    empty = read_tool_definition(WorldState(), [""])["description"]
    assert empty == "Read the current game state (JSON). Use it to check facts before you answer."
    scoped = read_tool_definition(make_world(), ["player", "Quests[0]", "a..b"])["description"]
    assert scoped.endswith("Readable paths: player, Quests.0.")


def test_update_definition_lists_writable_paths() -> None:
    definition = update_tool_definition(["", "quests"])
    assert definition["name"] == "update_world_state"
    assert (
        definition["description"] == "Change a value in the game state. Writable paths: (everything), quests."
    )
    assert definition["parameters"]["required"] == ["path", "value"]
    assert "type" not in definition["parameters"]["properties"]["value"]


def test_no_prefixes_means_no_tool() -> None:
    assert read_tool_definition(make_world(), []) is None
    assert update_tool_definition([]) is None
    assert update_tool_definition(["a..b"]) is None


# --- read -------------------------------------------------------------------------------------


def test_read_inside_readable_prefixes() -> None:
    world = make_world()
    assert read_world_state(world, "player.gold", READABLE) == json_output(12)
    assert read_world_state(world, "Player.Gold", READABLE) == json_output(12)
    assert read_world_state(world, "player.name", READABLE) == json_output("Aria")
    assert read_world_state(world, "/quests/lost_ring", READABLE) == json_output({"status": "active"})


def test_read_above_readable_prefixes_shows_only_readable_parts() -> None:
    world = make_world()
    output = read_world_state(world, "", READABLE)
    assert output.kind is OutputKind.JSON
    assert list(output.value) == ["player", "quests"]
    assert read_world_state(world, "npcs", ["npcs.gorm.mood"]) == json_output({"gorm": {"mood": "grumpy"}})
    assert read_world_state(world, "", ["player.gold", "nothing.here"]) == json_output(
        {"player": {"gold": 12}}
    )


def test_read_forbidden_missing_and_malformed_paths_are_error_outputs() -> None:
    world = make_world()
    assert read_world_state(world, "npcs.gorm", READABLE) == error_output(
        "You cannot read 'npcs.gorm'. Readable paths: player, quests."
    )
    assert read_world_state(world, "player.mana", READABLE) == error_output(
        "No value at 'player.mana'. 'player' has keys: name, gold, hp, alive."
    )
    assert read_world_state(world, "a..b", READABLE) == error_output(
        "'a..b' is not a valid path. Use dot-separated keys such as 'player.gold'."
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("player.mana.max", "No value at 'player.mana.max'. 'player' has keys: name, gold, hp, alive."),
        ("party.5", "No value at 'party.5'. 'party' is a list of 2 items (indices 0-1)."),
        ("player.gold.copper", "No value at 'player.gold.copper'. 'player.gold' is a number: 12."),
        ("player.name.first", "No value at 'player.name.first'. 'player.name' is a string: \"Aria\"."),
        ("weather", "No value at 'weather'. The state has keys: player, party, npcs, quests."),
    ],
)
def test_missing_value_messages(path: str, message: str) -> None:
    assert read_world_state(make_world(), path, [""]) == error_output(message)


def test_missing_value_message_edge_cases() -> None:
    document = {"log": [], "keys": {f"k{i}": i for i in range(25)}}
    assert missing_value_message(document, WorldPath.parse("log.0")) == (
        "No value at 'log.0'. 'log' is a list of 0 items (indices 0-0)."
    )
    assert missing_value_message(document, WorldPath.parse("keys.z")).endswith(
        "'keys' has keys: " + ", ".join(f"k{i}" for i in range(20)) + "."
    )
    assert missing_value_message(MISSING, WorldPath.parse("a")) == "No value at 'a'."


# --- update -------------------------------------------------------------------------------------


def test_update_writes_under_writable_prefixes() -> None:
    world = make_world()
    output, changes = update_world_state(world, "quests.lost_ring.status", "done", ["quests"])
    assert output == WorldToolOutput(OutputKind.TEXT, 'Set quests.lost_ring.status to "done" (was "active").')
    assert changes == [Change("quests.lost_ring.status", "active", "done")]
    assert world.get("quests.lost_ring.status") == "done"
    output, changes = update_world_state(world, "quests.ring", "started", ["quests"])
    assert output.value == 'Set quests.ring to "started".'
    assert changes == [Change("quests.ring", new="started")]


def test_update_outside_writable_prefixes_is_refused() -> None:
    world = make_world()
    output, changes = update_world_state(world, "player.gold", "9999", ["quests"])
    assert output == error_output("'player.gold' is read-only. You may change: quests.")
    assert changes == []
    assert world.get("player.gold") == 12
    assert world.version == 0


def test_update_reports_an_unchanged_value_without_a_change() -> None:
    world = make_world()
    output, changes = update_world_state(world, "player.gold", "12", [""])
    assert output.value == "Set player.gold to 12 (was 12)."
    assert (changes, world.version) == ([], 0)


def test_update_notifies_observers() -> None:
    world = WorldState({"player": {"name": "Aria", "gold": 60}})
    seen: list[Change] = []
    world.observe("quests", seen.append)
    update_world_state(world, "quests.ring", "started", ["quests"])
    assert seen == [Change("quests.ring", new="started")]


@pytest.mark.parametrize(
    ("path", "value", "stored_at", "expected"),
    [
        ("player.gold", "45", "player.gold", 45),
        ("player.gold", 50, "player.gold", 50),
        ("player.alive", "false", "player.alive", False),
        ("player.name", '"Aria"', "player.name", "Aria"),
        ("player.name", 7, "player.name", "7"),
        ("player.buffs", '["haste"]', "player.buffs", ["haste"]),
        ("player.note", "likes swords", "player.note", "likes swords"),
        ("player.mood", "pleased", "player.mood", "pleased"),
        ("player.tags", "[haste]", "player.tags", "[haste]"),
        ("player.level", "3", "player.level", 3),
        ("Player.HP", "12.5", "player.hp", 12.5),
    ],
)
def test_update_keeps_stored_types(path: str, value: Any, stored_at: str, expected: Any) -> None:
    world = make_world()
    output, _ = update_world_state(world, path, value, [""])
    assert not output.is_error, output.value
    stored = world.get(stored_at)
    assert (stored, type(stored)) == (expected, type(expected))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("player.gold", "lots", "Cannot set 'player.gold': it holds a number; 'lots' is not a number."),
        ("player.alive", "maybe", "Cannot set 'player.alive': it holds true or false; got 'maybe'."),
        ("party", "Brom", "Cannot set 'party': it holds a list; send valid JSON."),
        (
            "player.gold.amount",
            1,
            "Cannot write 'player.gold.amount': 'player.gold' is a number, not an object or list.",
        ),
        (
            "party.9",
            "x",
            "'party' is a list of 2 items; '9' is not a valid index (use 0-2, where 2 appends).",
        ),
        ("a..b", 1, "'a..b' is not a valid path. Use dot-separated keys such as 'player.gold'."),
    ],
)
def test_update_failures_are_error_outputs_and_change_nothing(path: str, value: Any, message: str) -> None:
    world = make_world()
    output, changes = update_world_state(world, path, value, [""])
    assert output == error_output(message)
    assert (changes, world.version) == ([], 0)


# --- value fitting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "incoming", "expected"),
    [
        (MISSING, "42", 42),
        (None, " [1, 2] ", [1, 2]),
        (MISSING, "true", True),
        (MISSING, '"quoted"', "quoted"),
        (MISSING, "NaN", "NaN"),
        (MISSING, {"a": 1}, {"a": 1}),
        (None, 3.5, 3.5),
        ("old", "  spaced  ", "  spaced  "),
        ("old", ' "Aria" ', "Aria"),
        ("old", '"half', '"half'),
        ("old", True, "true"),
        ("old", 12.5, "12.5"),
        ("old", None, "null"),
        (1, 2.5, 2.5),
        (1, " 1,000 ", 1000),
        (1, "1e3", 1000),
        (1.5, "-0.25", -0.25),
        (1, "12345678901234567", 1.2345678901234568e16),
        (True, False, False),
        (False, " YES ", True),
        (True, "0", False),
        (True, "no", False),
        ([1], {"a": 1}, {"a": 1}),
        ({"a": 1}, [2], [2]),
        ({"a": 1}, ' {"b": 2} ', {"b": 2}),
        ([], "[3]", [3]),
    ],
)
def test_fit_value_table(stored: Any, incoming: Any, expected: Any) -> None:
    fitted = fit_value(stored, incoming)
    assert (fitted, type(fitted)) == (expected, type(expected))


@pytest.mark.parametrize(
    ("stored", "incoming", "reason"),
    [
        ("old", {"a": 1}, "it holds a string; send text, not an object."),
        ("old", [1], "it holds a string; send text, not a list."),
        (1, "lots", "it holds a number; 'lots' is not a number."),
        (1, "1e999", "it holds a number; '1e999' is not a number."),
        (1, True, "it holds a number; 'true' is not a number."),
        (1, None, "it holds a number; 'null' is not a number."),
        (True, "maybe", "it holds true or false; got 'maybe'."),
        (True, 1, "it holds true or false; got '1'."),
        ({"a": 1}, "nope", "it holds an object; send valid JSON."),
        ([1], '"text"', "it holds a list; send valid JSON."),
        ([1], 5, "it holds a list; send valid JSON."),
    ],
)
def test_fit_value_failures(stored: Any, incoming: Any, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        fit_value(stored, incoming)
    assert str(caught.value) == reason


# --- shortening ---------------------------------------------------------------------------------


def test_large_values_are_shortened() -> None:
    items = [f"item number {i}" for i in range(200)]
    world = WorldState({"log": items, "big": {"a": items, "b": 1, "c": "x" * 120, "d": {"k": 1}}})
    listing = read_world_state(world, "log", [""], max_chars=300).value
    assert listing["_note"] == f"Showing {len(listing['items'])} of 200 items."
    assert listing["items"] == items[: len(listing["items"])]
    assert 0 < len(listing["items"]) < 200
    assert len(str(listing)) < 400
    big = read_world_state(world, "big", [""], max_chars=300).value
    assert big == {
        "a": "[list of 200 items]",
        "b": 1,
        "c": "x" * 77 + "...",
        "d": "{object with 1 keys}",
        "_note": "Shortened. Read a narrower path for details.",
    }


def test_shorten_rules() -> None:
    assert shorten({"a": 1}, 100) == {"a": 1}
    assert shorten("y" * 120, 100) == "y" * 100 + "..."
    assert shorten(10**200, 100) == 10**200
    # Each kept item costs its JSON plus a comma; the brackets cost 2.
    assert shorten(["aaaa", "bbbb", "cccc"], 16) == {
        "items": ["aaaa", "bbbb"],
        "_note": "Showing 2 of 3 items.",
    }


def test_read_output_limit_is_at_least_100() -> None:
    world = WorldState({"text": "z" * 150})
    assert read_world_state(world, "text", [""], max_chars=10).value == "z" * 100 + "..."
