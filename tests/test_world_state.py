"""WorldState and WorldPath: protocol-game §6.12 and the §9 world items (47-52, 33-35)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors import ErrorCode
from oam_actors.game.world import (
    MISSING,
    Change,
    WorldPath,
    WorldState,
    WorldStateError,
    json_equal,
    resolve_case,
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


def dumps(value: Any) -> str:
    """Order-sensitive text that also tells 1, 1.0 and true apart."""
    return json.dumps(value)


# --- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("party[0].name", ("party", "0", "name")),
        ("$.player.gold", ("player", "gold")),
        ("/player/gold", ("player", "gold")),
        ("npcs/gorm/mood", ("npcs", "gorm", "mood")),
        ("[0].x", ("0", "x")),
        ("  player.gold ", ("player", "gold")),
        ("", ()),
        (" $ ", ()),
        ("/", ()),
        (".", ()),
        ("$.", ()),
    ],
)
def test_path_parsing(text: str, segments: tuple[str, ...]) -> None:
    assert WorldPath.parse(text).segments == segments


@pytest.mark.parametrize("text", ["a..b", "player.", ".player", "[]", "a[]b..c"])
def test_malformed_paths_raise_the_spec_message(text: str) -> None:
    with pytest.raises(WorldStateError) as caught:
        WorldPath.parse(text)
    assert caught.value.message == (
        f"'{text}' is not a valid path. Use dot-separated keys such as 'player.gold'."
    )
    assert caught.value.path == text


def test_path_relations() -> None:
    gold = WorldPath.parse("player.gold")
    player = WorldPath.parse("player")
    assert gold.canonical == str(gold) == "player.gold"
    assert WorldPath().canonical == ""
    assert gold.is_within(player) and gold.is_within(WorldPath())
    assert not player.is_within(gold)
    assert player.overlaps(gold) and gold.overlaps(player)
    assert not gold.overlaps(WorldPath.parse("party"))
    assert gold.parent == player
    assert WorldPath().parent is None


_SAFE_SEGMENT = st.text(st.sampled_from("abcXYZ019_-"), min_size=1, max_size=4)


@given(st.lists(_SAFE_SEGMENT, max_size=5))
def test_path_format_parse_round_trip(segments: list[str]) -> None:
    path = WorldPath(tuple(segments))
    assert WorldPath.parse(path.canonical) == path


@given(st.text(st.sampled_from("ab0./[]"), max_size=10))
def test_parsing_a_canonical_path_is_idempotent(text: str) -> None:
    try:
        parsed = WorldPath.parse(text)
    except WorldStateError:
        return
    assert WorldPath.parse(parsed.canonical) == parsed


# --- reading ------------------------------------------------------------------------------------


def test_get_reads_keys_and_indices() -> None:
    world = make_world()
    assert world.get("player.gold") == 12
    assert world.get("party.1.name") == "Lysa"
    assert world.get("party[0].class") == "cleric"
    assert world.get("npcs/gorm/mood") == "grumpy"
    assert list(world.get("")) == ["player", "party", "npcs", "quests"]


@pytest.mark.parametrize(
    "path", ["player.missing", "party.9.name", "party.-1", "player.gold.x", "player..gold", "Player.gold"]
)
def test_get_returns_missing_for_absent_or_invalid_paths(path: str) -> None:
    assert make_world().get(path) is MISSING


def test_get_and_snapshot_return_copies() -> None:
    world = make_world()
    world.get("player")["gold"] = 999
    world.snapshot()["party"].clear()
    assert world.get("player.gold") == 12
    assert len(world.get("party")) == 2


def test_stored_null_is_a_value() -> None:
    world = WorldState({"a": None})
    assert world.get("a") is None
    assert world.get("b") is MISSING


def test_resolve_case_matches_keys_case_insensitively() -> None:
    document = make_world().snapshot()
    assert resolve_case(document, WorldPath.parse("Player.GOLD")).canonical == "player.gold"
    assert resolve_case(document, WorldPath.parse("PARTY.1.Name")).canonical == "party.1.name"
    assert resolve_case(document, WorldPath.parse("Player.Mana.X")).canonical == "player.Mana.X"


# --- set --------------------------------------------------------------------------------------


def test_set_creates_objects_appends_and_replaces() -> None:
    world = make_world()
    assert world.set("npcs.mira.mood", "cheerful") == [Change("npcs.mira.mood", new="cheerful")]
    assert world.get("npcs.mira") == {"mood": "cheerful"}
    world.set("party.2", {"name": "Kael"})
    assert world.get("party.2.name") == "Kael"
    assert world.set("party.0.name", "Bromm") == [Change("party.0.name", "Brom", "Bromm")]
    assert len(world.get("party")) == 3
    assert world.set("player.title", None) == [Change("player.title", new=None)]
    assert world.get("player.title") is None
    assert world.version == 4


def test_set_writes_through_a_stored_null() -> None:
    world = WorldState({"a": None})
    world.set("a.b.c", 1)
    assert world.snapshot() == {"a": {"b": {"c": 1}}}


def test_set_keeps_key_order() -> None:
    world = WorldState({"b": 1, "a": 2})
    world.set("b", 3)
    world.set("c", 4)
    assert list(world.snapshot()) == ["b", "a", "c"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "player.gold.amount",
            3,
            "Cannot write 'player.gold.amount': 'player.gold' is a number, not an object or list.",
        ),
        (
            "player.name.first",
            3,
            "Cannot write 'player.name.first': 'player.name' is a string, not an object or list.",
        ),
        (
            "player.alive.x",
            3,
            "Cannot write 'player.alive.x': 'player.alive' is a boolean, not an object or list.",
        ),
        (
            "party.7.name",
            "x",
            "'party' is a list of 2 items; '7' is not a valid index (use 0-2, where 2 appends).",
        ),
        (
            "party.first",
            "x",
            "'party' is a list of 2 items; 'first' is not a valid index (use 0-2, where 2 appends).",
        ),
        ("", 5, "The world state root must be a JSON object."),
        ("", [1, 2], "The world state root must be a JSON object."),
        ("a..b", 1, "'a..b' is not a valid path. Use dot-separated keys such as 'player.gold'."),
    ],
)
def test_set_errors_change_nothing(path: str, value: Any, message: str) -> None:
    world = make_world()
    seen: list[Change] = []
    world.observe("", seen.append)
    before = world.snapshot()
    with pytest.raises(WorldStateError) as caught:
        world.set(path, value)
    assert caught.value.message == message
    assert world.snapshot() == before
    assert world.version == 0
    assert seen == []


def test_set_rejects_values_that_are_not_json() -> None:
    world = make_world()
    for value in (float("nan"), {1: "a"}, object()):
        with pytest.raises(ValueError):
            world.set("x", value)
    assert world.version == 0


def test_set_copies_the_value_in() -> None:
    world = WorldState()
    value = {"items": ["a"]}
    world.set("bag", value)
    value["items"].append("b")
    assert world.get("bag") == {"items": ["a"]}


def test_writing_an_equal_value_is_a_no_op() -> None:
    world = make_world()
    seen: list[Change] = []
    world.observe("", seen.append)
    assert world.set("player.gold", 12) == []
    assert world.set("party", [{"class": "cleric", "name": "Brom"}, {"name": "Lysa", "class": "rogue"}]) == []
    assert world.merge("", {"player": {"gold": 12}}) == []
    assert (seen, world.version) == ([], 0)


def test_number_types_are_distinct_values() -> None:
    world = WorldState({"n": 1})
    assert world.set("n", 1.0) == [Change("n", 1, 1.0)]
    assert world.set("n", True) == [Change("n", 1.0, True)]
    assert world.version == 2


# --- remove -------------------------------------------------------------------------------------


def test_remove_returns_old_values_and_shifts_lists() -> None:
    world = make_world()
    assert world.remove("player.hp") == (30, [Change("player.hp", old=30)])
    assert world.get("player.hp") is MISSING
    removed, _ = world.remove("party.0")
    assert removed == {"name": "Brom", "class": "cleric"}
    assert world.get("party.0.name") == "Lysa"
    assert world.version == 2


@pytest.mark.parametrize("path", ["nothing.here", "party.5", "player.gold.copper", "party.x"])
def test_removing_an_absent_value_is_a_no_op(path: str) -> None:
    world = make_world()
    assert world.remove(path) == (MISSING, [])
    assert world.version == 0


def test_remove_with_a_malformed_path_raises() -> None:
    with pytest.raises(WorldStateError):
        make_world().remove("a..b")


def test_removing_the_root_empties_the_document() -> None:
    world = make_world()
    old = world.snapshot()
    removed, changes = world.remove("")
    assert removed == old
    assert changes == [Change("", old, {})]
    assert world.snapshot() == {}
    assert world.remove("") == ({}, [])
    assert world.version == 1


# --- modify -------------------------------------------------------------------------------------


def test_modify_transforms_and_can_remove() -> None:
    world = make_world()
    assert world.modify("player.gold", lambda gold: gold - 5) == [Change("player.gold", 12, 7)]
    world.modify("counter", lambda value: (0 if value is MISSING else value) + 1)
    assert world.get("counter") == 1
    assert world.modify("player.hp", lambda _: MISSING) == [Change("player.hp", old=30)]
    assert world.get("player.hp") is MISSING
    assert world.modify("absent", lambda _: MISSING) == []
    assert world.version == 3


def test_modify_exceptions_propagate_and_change_nothing() -> None:
    world = make_world()

    def broken(value: Any) -> Any:
        value["gold"] = 0  # mutates only the copy it was given
        raise RuntimeError("nope")

    with pytest.raises(RuntimeError):
        world.modify("player", broken)
    with pytest.raises(WorldStateError):
        world.modify("", lambda _: MISSING)
    assert world.get("player.gold") == 12
    assert world.version == 0


# --- merge --------------------------------------------------------------------------------------


def test_merge_patch_adds_replaces_and_deletes() -> None:
    world = make_world()
    changes = world.merge("", {"player": {"gold": 20, "hp": None, "title": "Knight"}})
    assert changes == [
        Change("player.gold", 12, 20),
        Change("player.hp", old=30),
        Change("player.title", new="Knight"),
    ]
    assert world.get("player") == {"name": "Aria", "gold": 20, "alive": True, "title": "Knight"}
    assert world.version == 1


def test_merging_an_object_into_a_scalar_replaces_it() -> None:
    world = make_world()
    assert world.merge("player.name", {"a": 1, "b": None}) == [Change("player.name", "Aria", {"a": 1})]
    assert world.get("player.name.a") == 1


def test_merge_creates_missing_targets_and_stores_non_object_patches() -> None:
    world = WorldState()
    assert world.merge("quests.ring", {"stage": 1}) == [Change("quests.ring", new={"stage": 1})]
    assert world.merge("quests.ring.stage", None) == [Change("quests.ring.stage", 1, None)]
    assert world.snapshot() == {"quests": {"ring": {"stage": None}}}


def test_merge_errors_change_nothing() -> None:
    world = make_world()
    with pytest.raises(WorldStateError, match="must be a JSON object"):
        world.merge("", [1])
    with pytest.raises(WorldStateError, match="not an object or list"):
        world.merge("player.gold.x", {"a": 1})
    assert world.version == 0


def test_merge_depth_is_capped() -> None:
    patch: Any = {"leaf": None}
    for _ in range(70):
        patch = {"k": patch}
    world = WorldState()
    world.merge("", patch)
    node = world.snapshot()
    for _ in range(64):
        node = node["k"]
    # Below the cap the patch object is stored as is, its null member included.
    assert node == {"k": {"k": {"k": {"k": {"k": {"k": {"leaf": None}}}}}}}


def merge_patch_reference(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, written as directly as the RFC states it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch_reference(result.get(name), value)
    return result


_KEYS = st.sampled_from(["a", "b", "c", "0", "1"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.0, 2.5]),
    st.sampled_from(["", "x", "1"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)
_DOCUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=4)


@settings(max_examples=150)
@given(_DOCUMENTS, st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_merge_agrees_with_rfc_7386(document: dict[str, Any], patch: dict[str, Any]) -> None:
    world = WorldState(document)
    changes = world.merge("", patch)
    expected = merge_patch_reference(document, patch)
    assert dumps(world.snapshot()) == dumps(expected)
    changed = dumps(expected) != dumps(document)
    assert world.version == int(changed)
    assert bool(changes) == changed


@settings(max_examples=150)
@given(_DOCUMENTS, st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_merge_changes_replay_to_the_same_document(document: dict[str, Any], patch: dict[str, Any]) -> None:
    world = WorldState(document)
    changes = world.merge("", patch)
    replay = WorldState(document)
    for change in changes:
        assert json_equal(replay.get(change.path), change.old)
        if change.new is MISSING:
            replay.remove(change.path)
        else:
            replay.set(change.path, change.new)
    assert dumps(replay.snapshot()) == dumps(world.snapshot())


_PATHS = st.lists(_KEYS, max_size=3).map(".".join)
_OPERATIONS = st.one_of(
    st.tuples(st.just("set"), _PATHS, _VALUES),
    st.tuples(st.just("remove"), _PATHS, st.none()),
    st.tuples(st.just("merge"), _PATHS, _VALUES),
)


@settings(max_examples=100)
@given(_DOCUMENTS, st.lists(_OPERATIONS, max_size=8))
def test_version_moves_exactly_when_the_document_changes(
    document: dict[str, Any], operations: list[Any]
) -> None:
    world = WorldState(document)
    for name, path, value in operations:
        before, version = world.snapshot(), world.version
        try:
            changes = world.remove(path)[1] if name == "remove" else getattr(world, name)(path, value)
        except WorldStateError:
            assert (world.snapshot(), world.version) == (before, version)
            continue
        changed = json.dumps(before, sort_keys=True) != json.dumps(world.snapshot(), sort_keys=True)
        assert world.version - version == int(changed)
        assert bool(changes) == changed


# --- observers --------------------------------------------------------------------------------


def test_observers_filter_by_path_and_stop_when_cancelled() -> None:
    world = make_world()
    player: list[Change] = []
    gold: list[Change] = []
    quests: list[Change] = []
    world.observe("player", player.append)
    gold_observation = world.observe("player.gold", gold.append)
    world.observe("quests", quests.append)

    world.set("player.gold", 50)
    world.set("player.name", "Aria the Bold")
    world.set("player", {"gold": 1})
    assert [change.path for change in player] == ["player.gold", "player.name", "player"]
    assert [change.path for change in gold] == ["player.gold", "player"]
    assert (gold[0].old, gold[0].new) == (12, 50)
    assert gold[1].new == {"gold": 1}
    assert quests == []

    gold_observation.cancel()
    gold_observation.cancel()
    assert not gold_observation.active
    world.set("player.gold", 2)
    assert (len(gold), len(player)) == (2, 4)


def test_observers_run_in_registration_order_after_the_change() -> None:
    world = WorldState({"player": {"gold": 60}, "time": "dawn"})
    calls: list[tuple[str, str, Any]] = []
    world.observe("player", lambda change: calls.append(("sub1", change.path, world.get("player.gold"))))
    world.observe("", lambda change: calls.append(("sub2", change.path, world.get("player.gold"))))
    world.set("player.gold", 45)
    world.set("time", "noon")
    world.remove("player.gold")
    assert calls == [
        ("sub1", "player.gold", 45),
        ("sub2", "player.gold", 45),
        ("sub2", "time", 45),
        ("sub1", "player.gold", MISSING),
        ("sub2", "player.gold", MISSING),
    ]


def test_merge_notifies_once_per_changed_leaf() -> None:
    world = make_world()
    seen: list[str] = []
    world.observe("player.hp", lambda change: seen.append(change.path))
    world.merge("player", {"gold": 15, "hp": None})
    assert seen == ["player.hp"]


def test_a_failing_observer_does_not_stop_the_others() -> None:
    world = WorldState()
    seen: list[str] = []

    def failing(change: Change) -> None:
        raise RuntimeError("handler bug")

    world.observe("", failing)
    world.observe("", lambda change: seen.append(change.path))
    with pytest.raises(ExceptionGroup) as caught:
        world.set("a", 1)
    assert [str(error) for error in caught.value.exceptions] == ["handler bug"]
    assert (seen, world.get("a"), world.version) == (["a"], 1, 1)


def test_observe_rejects_malformed_paths() -> None:
    with pytest.raises(WorldStateError):
        WorldState().observe("a..b", lambda change: None)


def test_change_encodes_as_world_changed_fields() -> None:
    encode = msgspec.json.encode
    assert encode(Change("player.gold", 60, 45)) == b'{"path":"player.gold","oldValue":60,"newValue":45}'
    assert encode(Change("quests.ring", new="started")) == b'{"path":"quests.ring","newValue":"started"}'
    assert encode(Change("player.gold", old=45)) == b'{"path":"player.gold","oldValue":45}'
    assert encode(Change("a", new=None)) == b'{"path":"a","newValue":null}'


# --- summary ------------------------------------------------------------------------------------


def test_summary_flattens_leaves() -> None:
    world = make_world()
    assert world.summary(["player", "npcs.gorm.mood", "missing.path", "party", "bad..path"]) == (
        "player.name: Aria\n"
        "player.gold: 12\n"
        "player.hp: 30\n"
        "player.alive: true\n"
        "npcs.gorm.mood: grumpy\n"
        'party: [{"name":"Brom","class":"cleric"},{"name":"Lysa","class":"rogue"}]'
    )
    assert world.summary(["player"], max_lines=2) == "player.name: Aria\nplayer.gold: 12\n(2 more not shown)"
    assert world.summary([]) == ""


def test_summary_labels_depth_and_clipping() -> None:
    world = WorldState(
        {
            "weather": "rain",
            "e": {},
            "n": None,
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
            "long": "x" * 250,
        }
    )
    assert world.summary(["weather", "e", "n"]) == "weather: rain\ne: {}\nn: null"
    assert world.summary(["deep"]) == 'deep.a.b.c.d: {"e":1}'
    assert world.summary(["long"]) == "long: " + "x" * 197 + "..."
    assert WorldState({"a": 1}).summary([""]) == "a: 1"
    assert WorldState().summary([""]) == "state: {}"
    assert world.summary(["weather", "n"], max_lines=0) == "weather: rain\n(1 more not shown)"


# --- construction and checkpoints ------------------------------------------------------------


def test_checkpoint_round_trip_keeps_version_and_key_order() -> None:
    world = make_world()
    world.set("time", "night")
    checkpoint = world.to_json()
    assert checkpoint["version"] == 1
    restored = WorldState.from_json(msgspec.json.decode(msgspec.json.encode(checkpoint)))
    assert restored.version == 1
    assert list(restored.snapshot()) == ["player", "party", "npcs", "quests", "time"]
    assert restored.snapshot() == world.snapshot()


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"document": {}},
        {"version": "1", "document": {}},
        {"version": True, "document": {}},
        {"version": 1},
        {"version": -1, "document": {}},
    ],
)
def test_malformed_checkpoints_raise_value_error(checkpoint: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        WorldState.from_json(checkpoint)


def test_the_root_must_be_an_object() -> None:
    with pytest.raises(WorldStateError, match="must be a JSON object, not a list"):
        WorldState([1, 2])  # type: ignore[arg-type]
    with pytest.raises(WorldStateError, match="not a string"):
        WorldState.from_json({"version": 0, "document": "x"})
    assert WorldState().snapshot() == {}


def test_world_state_error_maps_to_world_error() -> None:
    with pytest.raises(WorldStateError) as caught:
        make_world().set("player.gold.copper", 1)
    error = caught.value.to_protocol("village")
    assert error.code is ErrorCode.WORLD_ERROR
    assert error.to_wire() == {
        "code": -32054,
        "message": "Cannot write 'player.gold.copper': 'player.gold' is a number, not an object or list.",
        "data": {"code": "world_error", "world": "village", "path": "player.gold.copper"},
    }
    assert caught.value.to_protocol("village", "player.gold.copper ").data()["path"] == "player.gold.copper "


def test_derived_values_are_kept_until_the_document_changes() -> None:
    world = make_world()
    made: list[int] = []

    def keys() -> list[str]:
        made.append(world.version)
        return world.top_level_keys()

    first = world.derived("keys", keys)
    assert world.derived("keys", keys) is first and made == [0]
    world.set("player.gold", 12)  # the same value: no change, the version stays
    assert world.derived("keys", keys) is first and made == [0]
    world.set("weather", "rain")
    assert world.derived("keys", keys)[-1] == "weather" and made == [0, 1]
