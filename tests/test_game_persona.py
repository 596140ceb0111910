"""Game value types: Emotion, Persona, NPCOptions, NPCMemory, text cleanup and the line tracker."""

from __future__ import annotations

import pytest

from oam_actors import ErrorCode, OamError
from oam_actors.game import (
    DEFAULT_FALLBACK_LINES,
    Emotion,
    EmotionEvent,
    LineDelta,
    LineReset,
    LineTracker,
    MemoryStore,
    MemoryTool,
    NPCMemory,
    NPCOptions,
    Persona,
    ReplyFormat,
    SecretVisibility,
    attitude,
    check_configuration,
)
from oam_actors.game._text import (
    single_line,
    split_emotion_tag,
    spoken_line,
    streaming_line,
)


def invalid(call) -> str:
    with pytest.raises(OamError) as info:
        call()
    assert info.value.code is ErrorCode.INVALID_PARAMS
    return info.value.message


# --- Emotion --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Angry", Emotion.ANGRY), (" scared! ", Emotion.AFRAID), ("grumpy", Emotion.ANNOYED),
     ("[happy]", Emotion.HAPPY), ("flabbergasted", None), ("gruff", Emotion.ANNOYED), ("", None)],
)
def test_emotion_matching_is_lenient(text, expected):
    assert Emotion.matching(text) is expected


def test_emotion_wire_lookup_is_exact_and_ordered():
    assert Emotion.from_wire("angry") is Emotion.ANGRY
    assert Emotion.from_wire("Angry") is None
    assert [e.value for e in Emotion][:4] == ["neutral", "happy", "sad", "angry"]
    assert len(Emotion) == 16 and list(Emotion)[-1] is Emotion.PROUD


# --- Persona --------------------------------------------------------------------------------------

GORM = {"name": "Gorm", "role": "the village blacksmith", "personality": "Gruff but fair.",
        "speakingStyle": "Short, blunt sentences."}


def test_persona_decodes_with_defaults_and_encodes_all_fields_in_order():
    decoded = Persona.from_wire({**GORM, "backstory": None})
    assert decoded.warnings == ()
    wire = decoded.value.to_wire()
    assert list(wire) == ["name", "role", "personality", "speakingStyle", "backstory", "goals", "secrets",
                          "knowledge", "defaultEmotion", "maxSentences"]
    assert wire["backstory"] == "" and wire["goals"] == [] and wire["defaultEmotion"] == "neutral"
    assert wire["maxSentences"] == 2
    assert Persona.from_wire(wire).value == decoded.value


def test_persona_decoding_errors_name_the_member():
    assert invalid(lambda: Persona.from_wire("Gorm")) == "'persona' must be an object with at least a 'name'."
    assert invalid(lambda: Persona.from_wire({"role": "a ghost"})) == "Missing required parameter 'persona.name'."
    assert invalid(lambda: Persona.from_wire({"name": "Ann", "goals": "gold"})) == (
        "Parameter 'persona.goals' must be an array."
    )
    assert invalid(lambda: Persona.from_wire({"name": "Ann", "goals": ["a", 3]})) == (
        "Parameter 'persona.goals[1]' must be a string."
    )
    assert invalid(lambda: Persona.from_wire({"name": "Ann", "maxSentences": 1.5})) == (
        "Parameter 'persona.maxSentences' must be an integer."
    )
    assert invalid(lambda: Persona.from_wire({"name": "  "})) == "'persona.name' must not be empty."
    assert invalid(lambda: Persona.from_wire({"name": 7}, "state.persona")) == (
        "Parameter 'state.persona.name' must be a string."
    )
    message = invalid(lambda: Persona.from_wire({"name": "Ann", "defaultEmotion": "gleeful"}))
    assert message.startswith("Parameter 'persona.defaultEmotion' must be one of neutral, happy, sad,")
    assert message.endswith("; got 'gleeful'.")


def test_persona_accepts_emotion_synonyms_and_warns_about_unknown_keys():
    decoded = Persona.from_wire({"name": "Ann", "personalty": "typo", "defaultEmotion": "mad"})
    assert decoded.value.default_emotion is Emotion.ANGRY
    assert decoded.warnings == ("Unknown parameter 'persona.personalty' was ignored.",)


def test_persona_instructions_render_sheet_and_rules():
    persona = Persona(
        name="Gorm", role="the village blacksmith", personality="Gruff but fair", speaking_style="Short.",
        backstory="", goals=("Sell swords.", " ", "Find his ring"), knowledge=("The mine is closed",),
        secrets=("He forged the blade that killed the old king.",), max_sentences=1,
    )
    assert persona.instructions("Extra line.", uses_tools=True) == (
        "You play Gorm, the village blacksmith, a character in a video game.\n"
        "Personality: Gruff but fair.\n"
        "Speaking style: Short.\n"
        "Goals: Sell swords; Find his ring.\n"
        "You know: The mine is closed.\n"
        "Your secret: He forged the blade that killed the old king.\n"
        "Rules:\n"
        "- Speak only as Gorm. Never say you are an AI, a model or an assistant.\n"
        "- Reply in at most 1 short sentence.\n"
        "- Use your tools to check facts about the world, such as items, prices, people and places. Never invent them.\n"
        "- When a tool gives you facts, say the specific ones the player asked about (names, prices, numbers).\n"
        "- Keep your secret unless the player has truly earned your trust.\n"
        "Extra line."
    )
    hidden = persona.instructions(uses_tools=False, secret_visibility=SecretVisibility.HIDDEN)
    assert "secret" not in hidden.lower()
    assert "- If you do not know a fact about the world, say so in character. Never invent it." in hidden
    shareable = persona.instructions(secret_visibility=SecretVisibility.SHAREABLE)
    assert shareable.endswith("- The player has earned your trust. You may share your secret if asked.")
    assert "- Reply in at most 1 short sentence." in Persona(name="Mira", max_sentences=0).instructions()


# --- NPCOptions -----------------------------------------------------------------------------------


def test_options_defaults_encode_android_style():
    wire = NPCOptions().to_wire()
    assert wire["toolChoice"] == "explicit"
    assert "groundingTool" not in wire and "temperature" not in wire and "extraInstructions" not in wire
    assert wire["secretsUnlockAtRelationship"] == 50
    assert wire["worldReadable"] == [""] and wire["memoryTools"] == [] and wire["fallbackLines"] == []
    assert wire["barkMaximumTokens"] == 48 and list(wire)[-1] == "barkMaximumTokens"
    assert NPCOptions.from_wire(wire).value == NPCOptions()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, set(MemoryTool)), ("change_relationship", {MemoryTool.CHANGE_RELATIONSHIP}),
     (["rememberFact", "CHANGE_RELATIONSHIP"], set(MemoryTool)), ("all", set(MemoryTool)), ("none", set()),
     (1, {MemoryTool.REMEMBER_FACT}), (None, set())],
)
def test_memory_tools_accept_many_forms(value, expected):
    options = NPCOptions.from_wire({"memoryTools": value, "maxFacts": None}).value
    assert options.memory_tools == expected
    assert options.max_facts == 12


def test_memory_tools_reject_unknown_names_and_shapes():
    assert invalid(lambda: NPCOptions.from_wire({"memoryTools": ["teleport"]})) == (
        "'options.memoryTools' contains unknown memory tool \"teleport\"; known: \"rememberFact\", \"changeRelationship\"."
    )
    assert "'options.memoryTools' must be a list" in invalid(lambda: NPCOptions.from_wire({"memoryTools": {}}))


def test_equal_options_decode_once_and_keep_their_path():
    wire = {"playerOptionCount": 1, "emotions": ["happy"], "colour": "red"}
    first = NPCOptions.from_wire(dict(wire))
    assert NPCOptions.from_wire(dict(wire)) is first  # a crowd shares one decoded set
    assert first.value.player_option_count == 1 and first.warnings == ("Unknown parameter 'options.colour' was ignored.",)
    restored = NPCOptions.from_wire(dict(wire), "state.options")
    assert restored.value == first.value
    assert restored.warnings == ("Unknown parameter 'state.options.colour' was ignored.",)
    # A bad value is refused every time, not remembered as anything.
    for _ in range(2):
        assert invalid(lambda: NPCOptions.from_wire({"playerOptionCount": 9})) == (
            "'options.playerOptionCount' must be between 0 and 4."
        )


def test_options_errors_name_the_key():
    assert invalid(lambda: NPCOptions.from_wire({"replyFormat": "json"})) == (
        "Parameter 'options.replyFormat' must be one of \"automatic\", \"structured\", \"text\"; got 'json'."
    )
    assert "options.toolChoice" in invalid(lambda: NPCOptions.from_wire({"toolChoice": "sometimes"}))
    assert invalid(lambda: NPCOptions.from_wire({"playerOptionCount": 9})) == (
        "'options.playerOptionCount' must be between 0 and 4."
    )
    assert invalid(lambda: NPCOptions.from_wire({"toolTimeoutSeconds": -1})) == (
        "Parameter 'options.toolTimeoutSeconds' must be a number of seconds from 0 to 86400 (0 means no limit); got -1."
    )
    assert invalid(lambda: NPCOptions.from_wire([])) == "'options' must be an object."
    assert invalid(lambda: NPCOptions.from_wire({"emotions": ["happy", "gleeful"]})).startswith(
        "Parameter 'options.emotions[1]' must be one of neutral,"
    )


def test_options_decode_values_warnings_and_thresholds():
    decoded = NPCOptions.from_wire(
        {"temprature": 0.5, "toolChoice": {"tool": "look"}, "replyFormat": "text", "emotions": ["happy", "glad"],
         "secretsUnlockAtRelationship": None, "toolTimeoutSeconds": 30, "groundingTool": "look"}
    )
    options = decoded.value
    assert decoded.warnings == ("Unknown parameter 'options.temprature' was ignored.",)
    assert options.reply_format is ReplyFormat.TEXT
    assert options.emotions == (Emotion.HAPPY,)
    assert options.secrets_unlock_at_relationship is None
    wire = options.to_wire()
    assert wire["toolChoice"] == {"tool": "look"} and wire["groundingTool"] == "look"
    assert wire["secretsUnlockAtRelationship"] is None and wire["toolTimeoutSeconds"] == 30
    assert NPCOptions.from_wire({}).value.secrets_unlock_at_relationship == 50
    assert NPCOptions(fallback_lines=(" ", " Go away. ")).fallback_pool == ("Go away.",)
    assert NPCOptions().fallback_pool == DEFAULT_FALLBACK_LINES


def test_configuration_checks():
    assert invalid(lambda: check_configuration(NPCOptions(), ["a", "remember_fact", "a"])).startswith(
        "Duplicate tool name 'a' (built-in world and memory tools use"
    )
    assert invalid(lambda: check_configuration(NPCOptions(grounding_tool="check_inventory"), [])) == (
        "groundingTool 'check_inventory' is not one of the NPC's tools: (none)."
    )
    assert invalid(lambda: check_configuration(NPCOptions(grounding_tool="x"), ["a", "b"])) == (
        "groundingTool 'x' is not one of the NPC's tools: a, b."
    )
    options = NPCOptions.from_wire({"toolChoice": {"tool": "nope"}}).value
    assert invalid(lambda: check_configuration(options, ["a"])) == "toolChoice names unknown tool 'nope'."
    assert invalid(lambda: check_configuration(NPCOptions(max_tool_calls=-1), [])) == (
        "maxToolRounds and maxToolCalls must not be negative."
    )
    assert invalid(lambda: check_configuration(NPCOptions(bark_maximum_tokens=0), [])) == (
        "barkMaximumTokens must be at least 1."
    )
    check_configuration(NPCOptions(grounding_tool="a"), ["a"])


# --- NPCMemory ------------------------------------------------------------------------------------


def test_memory_decoding_clamps_and_defaults():
    memory = NPCMemory.from_wire({"relationship": 999})
    assert memory == NPCMemory(facts=(), relationship=100, summary=None)
    assert memory.adjusting_relationship(10**12).relationship == 100
    assert NPCMemory(relationship=-5000).relationship == -100
    assert invalid(lambda: NPCMemory.from_wire([])) == "'memory' must be an object."
    assert invalid(lambda: NPCMemory.from_wire({"facts": "x"})) == "Parameter 'memory.facts' must be an array."
    assert NPCMemory(("a",), 3, "s").to_wire() == {"facts": ["a"], "relationship": 3, "summary": "s"}
    assert NPCMemory().to_wire() == {"facts": [], "relationship": 0}


@pytest.mark.parametrize(
    ("value", "word"),
    [(-61, "hostile"), (-21, "unfriendly"), (-20, "neutral"), (20, "neutral"), (60, "friendly"), (61, "trusting")],
)
def test_attitude_words(value, word):
    assert attitude(value) == word


def test_facts_compare_loosely_and_drop_oldest():
    memory = NPCMemory().remembering("The player's name is Aria.")
    assert memory.remembering("the players name is aria") is memory
    assert memory.remembering("   ") is memory
    assert NPCMemory(("a", "b")).remembering("c", limit=2).facts == ("b", "c")


def test_memory_note():
    assert NPCMemory().note(include_relationship=False) is None
    assert NPCMemory(("A.", "B"), 8, "They met.").note(include_relationship=False) == (
        "Memory:\n- You feel neutral toward the player (8 on a scale from -100 to 100).\n"
        "- You remember: A; B.\n- Earlier conversation: They met."
    )
    assert NPCMemory().note(include_relationship=True) == (
        "Memory:\n- You feel neutral toward the player (0 on a scale from -100 to 100)."
    )


def test_memory_store_stages_until_commit():
    store = MemoryStore(NPCMemory(("old",), relationship=-95))
    assert store.stage_fact("Aria likes axes.") is True
    assert store.stage_fact("aria likes AXES") is False
    assert store.stage_fact("OLD") is False
    assert store.stage_relationship(-10) == -100
    assert store.memory.relationship == -95
    store.discard()
    assert store.commit(max_facts=12) == NPCMemory(("old",), -95)
    store.stage_fact("new")
    store.stage_relationship(5)
    assert store.commit(max_facts=1) == NPCMemory(("new",), -90)


# --- text cleanup and streaming -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("  **Gorm**: “Hello.” ", "Hello."), ("'Tis fine", "'Tis fine"), ("Gorm says: Aye.", "Aye."),
     ('"A" and "B"', '"A" and "B"'), ("gorm: lowercase label", "lowercase label"), ("Gormless fool.", "Gormless fool."),
     ("Gorm, no label here", "Gorm, no label here"), ("Note: Gorm: Aye.", "Note: Gorm: Aye.")],
)
def test_spoken_line_cleanup(raw, expected):
    assert spoken_line(raw, "Gorm") == expected


def test_streaming_line_withholds_possible_labels():
    assert streaming_line("Gor", "Gorm") is None
    assert streaming_line("Gorm: “Aye", "Gorm") == "Aye"
    assert streaming_line("'Tis", "Gorm") == "'Tis"
    assert single_line('\n  Gorm: "Fine steel!"\nMore.', "Gorm") == "Fine steel!"


def test_emotion_tags():
    assert split_emotion_tag("[angry] Get out!").tag == "angry"
    assert split_emotion_tag("[angry] Get out!").rest == "Get out!"
    assert split_emotion_tag("  [gru").pending is True
    long = "[" + "x" * 30
    assert split_emotion_tag(long).pending is False and split_emotion_tag(long).rest == long
    assert split_emotion_tag("No tag.").tag is None


def test_line_tracker_events():
    tracker = LineTracker("Gorm")
    events = []
    for partial in ({"emotion": "hap"}, {"emotion": "happy", "line": "Go"}, {"emotion": "happy", "line": "Gorm: Aye"},
                    {"emotion": "happy", "line": "Gorm: Aye, lad"}):
        events += tracker.consume(partial)
    events += tracker.finish("Aye, lad.", Emotion.HAPPY)
    assert events == [EmotionEvent(Emotion.HAPPY), LineDelta("Aye"), LineDelta(", lad"), LineDelta(".")]
    assert tracker.finish("Something else.", Emotion.SAD) == [EmotionEvent(Emotion.SAD), LineReset("Something else.")]
    assert [e.to_wire() for e in events[:2]] == [{"type": "emotion", "emotion": "happy"}, {"type": "lineDelta", "delta": "Aye"}]
    assert LineReset("x").to_wire() == {"type": "lineReset", "line": "x"}
