"""ContentGenerator on the scripted model: schema order, coercion, repair, tools, errors."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oam_actors.agent import JsonOutput, StepKind, ToolCallStarted, ToolDefinition
from oam_actors import AgentError, ErrorCode, OamError, ScriptedModel
from oam_actors.game import ContentGenerator, DecisionEngine, DecisionOption, DecisionRequest

WEAPON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "rarity": {"type": "string", "enum": ["common", "rare", "legendary"]},
        "damage": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["name", "rarity", "damage"],
}


def scripted(*steps: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.from_wire({"type": "scripted", "steps": list(steps)})


async def test_content_follows_schema_order_with_facts_in_the_prompt():
    model = scripted({"json": {"damage": 45, "name": "Drowned Fang", "rarity": "legendary"}})
    content = await ContentGenerator(model).generate("A cursed sword.", WEAPON, context={"playerLevel": 7})
    assert content.to_wire() == {"content": {"name": "Drowned Fang", "rarity": "legendary", "damage": 45}}
    assert list(content.content) == ["name", "rarity", "damage"]
    request = model.requests[0]
    assert request.prompt.startswith('A cursed sword.\nFacts: {"playerLevel":7}\n\n')
    assert request.priority == "background" and request.kind is StepKind.STRUCTURED
    assert request.system.startswith("You write content for a video game.")


async def test_near_misses_are_coerced_and_invalid_output_repaired_once():
    coerced = await ContentGenerator(scripted({"json": {"name": "X", "rarity": "Rare", "damage": "12"}})).generate(
        "An item.", WEAPON)
    assert coerced.content == {"name": "X", "rarity": "rare", "damage": 12}
    model = scripted({"json": {"name": "X", "rarity": "rare", "damage": 99}},
                     {"json": {"name": "X", "rarity": "rare", "damage": 50}})
    repaired = await ContentGenerator(model, instructions="Be terse.").generate("An item.", WEAPON)
    assert repaired.content["damage"] == 50
    assert model.requests[1].is_repair and "must be at most 50" in model.requests[1].prompt
    assert model.requests[0].system == "Be terse."
    with pytest.raises(AgentError) as info:
        await ContentGenerator(scripted(*[{"json": {"damage": 99}}] * 2)).generate("An item.", WEAPON)
    assert info.value.code is ErrorCode.GENERATION_FAILED


async def test_schema_problems_and_settings():
    with pytest.raises(AgentError) as info:
        await ContentGenerator(scripted()).generate("x", {"type": "nope"})
    assert info.value.code is ErrorCode.INVALID_SCHEMA and info.value.data()["path"] == "schema"
    with pytest.raises(OamError) as info:
        await ContentGenerator(scripted(), temperature=-1).generate("x", WEAPON)
    assert info.value.code is ErrorCode.INVALID_PARAMS
    loose = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "patternProperties": {}}
    content = await ContentGenerator(scripted({"json": {"name": "Bog"}})).generate("x", loose)
    assert content.to_wire(["first"])["warnings"] == ["first", "#: 'patternProperties' is not supported and is ignored"]
    with pytest.raises(AgentError) as info:
        await ContentGenerator(scripted({"error": "guardrail_violation"})).generate("x", WEAPON)
    assert info.value.code is ErrorCode.GUARDRAIL_VIOLATION


async def test_client_tools_run_before_the_content():
    model = scripted({"toolCalls": [{"name": "biome"}]}, {"json": {"name": "Bog Lurker"}})
    generator = ContentGenerator(model)
    biome = ToolDefinition("biome", "The current biome.")

    async with anyio.create_task_group() as group:
        async def emit(event: Any) -> None:
            if isinstance(event, ToolCallStarted):
                group.start_soon(answer, event.call)

        async def answer(call: Any) -> None:
            await anyio.lowlevel.checkpoint()
            assert generator.submit_tool_result(call.id, JsonOutput({"biome": "swamp"}))

        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        content = await generator.generate("A monster.", schema, tools=[biome], emit=emit)
    assert content.content == {"name": "Bog Lurker"}
    assert content.tool_calls[0].to_wire()["output"] == {"biome": "swamp"}


async def test_decisions_and_content_refuse_a_negative_temperature_alike():
    options = [DecisionOption("a"), DecisionOption("b")]
    errors = []
    for run in (
        ContentGenerator(scripted(), temperature=-0.5).generate("x", WEAPON),
        DecisionEngine(scripted(), temperature=-0.5).decide(DecisionRequest(situation="x", options=options)),
    ):
        with pytest.raises(OamError) as info:
            await run
        errors.append(info.value.to_wire())
    assert errors[0] == errors[1] == {
        "code": -32602,
        "message": "Parameter 'temperature' must be at least 0; got -0.5.",
        "data": {"code": "invalid_params"},
    }
