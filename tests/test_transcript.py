"""Transcripts: the Android save format, its three accepted wrappers and rejections (protocol-core §8.1)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from oam_actors.agent import Agent, parse_tool_definitions
from oam_actors import (
    ErrorCode,
    ErrorOutput,
    JsonOutput,
    ProtocolError,
    ScriptStep,
    ScriptedModel,
    TextOutput,
    ToolCall,
)
from oam_actors.agent.transcript import (
    PromptEntry,
    ResponseEntry,
    ToolUseEntry,
    Transcript,
    split_turns,
)

CHECK_MENU = {"name": "check_menu", "description": "See the menu.", "parameters": {"type": "object", "properties": {}}}

FULL = Transcript(
    instructions="You are Mira.",
    contextNote="The guest is a dwarf.",
    tools=[CHECK_MENU],
    entries=[
        PromptEntry("Price?"),
        ToolUseEntry(ToolCall("call_1", "check_menu", {}), JsonOutput({"ale": 3})),
        ToolUseEntry(ToolCall("call_2", "take_order", {"item": "ale"}), ErrorOutput("Out of ale.")),
        ToolUseEntry(ToolCall("call_3", "weather", {}), TextOutput("Rain.")),
        ResponseEntry("Ale is 3."),
        PromptEntry("Mood?"),
        ResponseEntry('{"mood":"calm"}', {"mood": "calm"}),
    ],
)

INNER = {
    "instructions": "You are Mira.",
    "tools": [],
    "entries": [{"type": "prompt", "text": "Hi"}, {"type": "response", "text": "Hello."}],
}


def test_encoding_is_compact_in_declared_key_order() -> None:
    small = Transcript(
        instructions="You are Mira.",
        tools=[CHECK_MENU],
        entries=[
            PromptEntry("Price?"),
            ToolUseEntry(ToolCall("call_1", "check_menu", {}), JsonOutput({"ale": 3})),
            ResponseEntry("Ale is 3."),
        ],
    )
    assert small.encode().decode() == (
        '{"type":"open-android-models.Transcript","version":"1.0","transcript":{'
        '"instructions":"You are Mira.",'
        '"tools":[{"name":"check_menu","description":"See the menu.","parameters":{"type":"object","properties":{}}}],'
        '"entries":[{"type":"prompt","text":"Price?"},'
        '{"type":"toolUse","call":{"id":"call_1","name":"check_menu","arguments":{}},'
        '"output":{"type":"json","value":{"ale":3}}},'
        '{"type":"response","text":"Ale is 3."}]}}'
    )


def test_empty_transcripts_still_write_tools_and_entries() -> None:
    assert Transcript().to_wire() == {
        "type": "open-android-models.Transcript",
        "version": "1.0",
        "transcript": {"tools": [], "entries": []},
    }


def test_output_forms() -> None:
    inner = FULL.to_wire()["transcript"]
    outputs = [e["output"] for e in inner["entries"] if e["type"] == "toolUse"]
    assert outputs == [
        {"type": "json", "value": {"ale": 3}},
        {"type": "error", "message": "Out of ale."},
        {"type": "text", "text": "Rain."},
    ]
    responses = [e for e in inner["entries"] if e["type"] == "response"]
    assert responses == [
        {"type": "response", "text": "Ale is 3."},
        {"type": "response", "text": '{"mood":"calm"}', "structured": {"mood": "calm"}},
    ]


def test_round_trip_through_text() -> None:
    assert Transcript.decode(FULL.encode()) == FULL
    assert Transcript.decode(FULL.encode().decode()) == FULL


@pytest.mark.parametrize(
    "value",
    [
        {"type": "open-android-models.Transcript", "version": "1.0", "transcript": INNER},
        INNER,
        {"session": "gorm", "transcript": {"type": "open-android-models.Transcript", "version": "1.0", "transcript": INNER}},
    ],
    ids=["wrapper", "bare", "session-transcript-result"],
)
def test_the_three_accepted_forms(value: Any) -> None:
    transcript = Transcript.from_wire(value)
    assert transcript.instructions == "You are Mira."
    assert transcript.entries == [PromptEntry("Hi"), ResponseEntry("Hello.")]


def test_unknown_keys_are_ignored() -> None:
    value = {"entries": [{"type": "prompt", "text": "Hi", "mood": "x"}], "extra": 1}
    assert Transcript.from_wire(value).entries == [PromptEntry("Hi")]


@pytest.mark.parametrize(
    "value",
    [
        {"entries": 5},
        {"hello": "world"},
        [],
        "transcript",
        None,
        {"entries": [{"type": "weird"}]},
        {"entries": [{"type": "prompt"}]},
        {"entries": [], "tools": [{"description": "no name"}]},
        {"entries": [{"type": "toolUse", "call": {"id": "c", "name": "t", "arguments": {}}, "output": {"type": "x"}}]},
        # Apple's format cannot be restored on this (Android-style) implementation.
        {"type": "FoundationModels.Transcript", "version": "1.1",
         "transcript": {"entries": [{"instructions": {"segments": []}}]}},
    ],
)
def test_rejections_are_invalid_params_naming_the_parameter(value: Any) -> None:
    with pytest.raises(ProtocolError) as caught:
        Transcript.from_wire(value, path="history")
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert "'history'" in caught.value.message


@pytest.mark.parametrize(
    ("value", "at"),
    [
        ({"entries": [{"type": "prompt", "text": 5}]}, "Expected `str`, got `int` at 'history.entries[0].text'."),
        ({"transcript": {"entries": "x"}}, "Expected `array`, got `str` at 'history.transcript.entries'."),
        ({"entries": [], "tools": [{"name": "wave"}, {"name": 5}]}, "Expected `str`, got `int` at 'history.tools[1].name'."),
    ],
)
def test_a_rejection_names_the_member_at_fault(value: Any, at: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        Transcript.from_wire(value, path="history")
    assert caught.value.message == f"Parameter 'history' is not a valid transcript: {at}"


def test_text_that_is_not_json_is_rejected() -> None:
    with pytest.raises(ProtocolError) as caught:
        Transcript.decode("{not json", path="model.history")
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert "'model.history'" in caught.value.message


def test_split_turns_starts_a_turn_at_each_prompt() -> None:
    turns = split_turns(FULL.entries)
    assert [len(t) for t in turns] == [5, 2]
    assert split_turns([]) == []
    assert split_turns([ResponseEntry("orphan"), PromptEntry("Hi")]) == [[ResponseEntry("orphan")], [PromptEntry("Hi")]]


async def test_an_agents_transcript_round_trips_into_a_new_agent() -> None:
    tools, _ = parse_tool_definitions([CHECK_MENU])
    first = Agent(ScriptedModel([ScriptStep.say("Hello.")]), instructions="You are Mira.", tools=tools)
    await first.respond("Hi")
    saved = Transcript.decode(msgspec.json.encode({"session": "s1", "transcript": first.transcript().to_wire()}))
    assert saved.tools == [CHECK_MENU]
    assert saved.entries == first.history
    restored = Agent(ScriptedModel(), instructions=saved.instructions, context_note=saved.contextNote,
                     tools=parse_tool_definitions(saved.tools)[0], history=saved.entries)
    assert restored.transcript() == first.transcript()
