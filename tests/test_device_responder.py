"""The simulated phone's responder, fed with prompts built by ``oam_actors.agent.prompts`` so the
tests follow the agent's real prompt shapes."""

from __future__ import annotations

import json
from random import Random
from typing import Any

import pytest

from oam_actors.agent import Schema, parse_tool_definitions, prompts
from oam_actors.agent.envelope import Call, Invalid, Respond, parse_envelope
from oam_actors.agent.prompts import Labels
from oam_actors import JsonOutput, ToolCall
from oam_actors.agent.transcript import PromptEntry, ToolUseEntry
from oam_actors.models.device.responder import ResponderConfig, respond, sample_value

TOOLS, _ = parse_tool_definitions([
    {"name": "check_menu", "description": "See the menu."},
    {"name": "take_order", "description": "Order food.", "parameters": {
        "type": "object",
        "properties": {
            "item": {"type": "string", "enum": ["ale", "stew", "bread"], "description": "menu item"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
            "note": {"type": "string", "maxLength": 12},
            "extras": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
            "table": {"type": "object", "properties": {"row": {"type": "integer", "exclusiveMinimum": 3}},
                      "required": ["row"]},
        },
        "required": ["item", "quantity", "extras", "table"],
    }},
])
NAMES = [tool.name for tool in TOOLS]
NPC = Schema.compile({"type": "object", "properties": {
    "emotion": {"type": "string", "enum": ["happy", "wary"]},
    "line": {"type": "string"},
    "player_options": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "ends_conversation": {"type": "boolean"},
}, "required": ["emotion", "line"]})
CALLS = ResponderConfig(tool_call_rate=1.0)
NO_CALLS = ResponderConfig(tool_call_rate=0.0)


def decide_prompt(*, tool_uses: tuple[ToolUseEntry, ...] = (), allow_respond: bool = True,
                  message: str = "Two ales for table four, please") -> str:
    task = prompts.decide_task(TOOLS, allow_respond=allow_respond, last_message=message)
    return prompts.build_prompt(history=[], prompt=message, turn_tool_uses=tool_uses, task=task, labels=Labels())


def answer(prompt: str, seed: int = 0, config: ResponderConfig = CALLS) -> str:
    return respond("You are Gorm.", prompt, Random(seed), config)


def valid_call(text: str) -> tuple[str, Any]:
    parsed = parse_envelope(text, NAMES, allow_respond=True)
    assert isinstance(parsed, Call), text
    arguments = parsed.candidates[0]
    tool = next(t for t in TOOLS if t.name == parsed.tool)
    assert tool.schema.validate(arguments) == [], arguments
    return parsed.tool, arguments


@pytest.mark.parametrize("seed", range(8))
def test_a_decide_step_calls_a_tool_with_arguments_that_fit_its_schema(seed: int) -> None:
    valid_call(answer(decide_prompt(), seed))


def test_both_tools_get_called_across_seeds() -> None:
    assert {valid_call(answer(decide_prompt(), seed))[0] for seed in range(12)} == set(NAMES)


def test_a_decide_step_responds_when_told_not_to_call() -> None:
    assert json.loads(answer(decide_prompt(), config=NO_CALLS)) == {"action": "respond", "arguments": {}}


def test_a_decide_step_responds_once_this_turn_has_a_tool_result() -> None:
    used = ToolUseEntry(ToolCall("call_1", "check_menu", {}), JsonOutput({"ale": 3}))
    assert isinstance(parse_envelope(answer(decide_prompt(tool_uses=(used,))), NAMES, allow_respond=True), Respond)


def test_a_forced_decide_step_calls_a_tool_whatever_the_rate() -> None:
    assert "You must use one of the tools now." in decide_prompt(allow_respond=False)
    valid_call(answer(decide_prompt(allow_respond=False), config=NO_CALLS))


@pytest.mark.parametrize("seed", range(6))
def test_malformed_answers_are_unusable_and_their_repairs_are_valid(seed: int) -> None:
    config = ResponderConfig(tool_call_rate=1.0, malformed_rate=1.0)
    first = answer(decide_prompt(), seed, config)
    parsed = parse_envelope(first, NAMES, allow_respond=True)
    assert isinstance(parsed, Invalid), first
    repair = prompts.repair_task(decide_prompt(), problem=parsed.problem, previous_answer=first)
    valid_call(answer(repair, seed, config))


def test_a_tool_arguments_step_writes_only_fitting_arguments() -> None:
    take_order = TOOLS[1]
    prompt = prompts.build_prompt(history=[], prompt="Order stew", turn_tool_uses=(),
                                  task=prompts.tool_arguments_task(take_order), labels=Labels())
    for seed in range(5):
        arguments = json.loads(answer(prompt, seed))
        assert take_order.schema.validate(arguments) == []
        assert "note" not in arguments  # optional keys are left out of tool arguments


def test_a_structured_step_fills_every_rendered_key() -> None:
    task = prompts.structured_task(NPC, last_message="Who are you?", later_turn=False)
    value = json.loads(answer(prompts.build_prompt(history=[], prompt="Who are you?", turn_tool_uses=(),
                                                   task=task, labels=Labels())))
    assert NPC.validate(value) == []
    assert list(value) == ["emotion", "line", "player_options", "ends_conversation"]


def test_an_array_schema_gets_an_array() -> None:
    schema = Schema.compile({"type": "array", "items": {"type": "integer", "minimum": 5, "maximum": 6},
                             "minItems": 2})
    task = prompts.structured_task(schema, last_message="Numbers", later_turn=False)
    value = json.loads(answer(prompts.build_prompt(history=[], prompt="Numbers", turn_tool_uses=(), task=task,
                                                   labels=Labels())))
    assert schema.validate(value) == []


def test_a_reply_mentions_the_topic_and_this_turns_tool_result() -> None:
    used = ToolUseEntry(ToolCall("call_1", "check_menu", {}), JsonOutput({"ale": 3}))
    prompt = prompts.build_prompt(history=[PromptEntry("Hello")], prompt="What does the ale cost tonight?",
                                  turn_tool_uses=(used,), labels=Labels(),
                                  task=prompts.respond_task(used_tools=True, assistant_label="Assistant"))
    text = answer(prompt)
    assert "tonight" in text
    assert 'check_menu says {"ale":3}.' in text


def test_a_plain_first_request_is_answered_about_its_own_words() -> None:
    assert "Rivertown" in answer("Tell me about Rivertown")


def test_a_summary_step_writes_a_summary() -> None:
    text = respond("Summarise the conversation below.", "Conversation:\nUser: The bridge fell.", Random(0))
    assert text.startswith("Summary:")


def test_the_same_seed_gives_the_same_answer() -> None:
    assert [answer(decide_prompt(), 5) for _ in range(3)] == [answer(decide_prompt(), 5)] * 3


@pytest.mark.parametrize(("rendered", "check"), [
    ('exactly "x"', lambda v: v == "x"),
    ("one of 1, 2", lambda v: v in (1, 2)),
    ("integer 3-4", lambda v: v in (3, 4)),
    ("integer > 3 < 5", lambda v: v == 4),
    ("number <= -2", lambda v: v <= -2),
    ("string (5-6 chars)", lambda v: 5 <= len(v) <= 6),
    ("[true or false, …] (exactly 3 items)", lambda v: len(v) == 3 and all(isinstance(b, bool) for b in v)),
    ('{"a": integer, "b"?: string}', lambda v: list(v) == ["a"]),
    ("{[key: string]: integer}", lambda v: v == {}),
    ("string or null", lambda v: isinstance(v, str)),
])
def test_sample_value_reads_the_rendered_types(rendered: str, check: Any) -> None:
    assert check(sample_value(rendered, Random(1)))
