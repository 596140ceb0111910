"""DecisionEngine on the scripted model: prompts, parsing, fallbacks, tools and decideMany order."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oam_actors.agent import (
    JsonOutput,
    Schema,
    StepKind,
    ToolCallAbandoned,
    ToolCallStarted,
    ToolChoice,
    ToolDefinition,
)
from oam_actors import AgentError, ErrorCode, OamError, ScriptedModel
from oam_actors.game import (
    Decision,
    DecisionEngine,
    DecisionOption,
    DecisionRequest,
    Persona,
    decisions_to_wire,
    parse_decision_options,
)

GOBLIN_OPTIONS = parse_decision_options(
    [{"id": "attack", "description": "Keep fighting"}, {"id": "flee", "description": "Run into the woods"}, "beg"]
)


def scripted(*steps: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.from_wire({"type": "scripted", "steps": list(steps)})


def choice(option: str, confidence: Any = 50, reasoning: str = "Because.") -> dict[str, Any]:
    return {"json": {"reasoning": reasoning, "choice": option, "confidence": confidence}}


def goblin(**fields: Any) -> DecisionRequest:
    return DecisionRequest(situation="The goblin has 3 HP left.", options=GOBLIN_OPTIONS, **fields)


def invalid(call) -> str:
    with pytest.raises(OamError) as info:
        call()
    assert info.value.code is ErrorCode.INVALID_PARAMS
    return info.value.message


async def invalid_async(awaitable) -> str:
    with pytest.raises(OamError) as info:
        await awaitable
    assert info.value.code is ErrorCode.INVALID_PARAMS
    return info.value.message


async def test_decide_prompts_and_returns_the_wire_result():
    model = scripted(choice("flee", 78, "Snik is timid."))
    engine = DecisionEngine(model)
    actor = Persona.from_wire({"name": "Snik", "personality": "Timid and greedy."}, "actor").value
    decision = await engine.decide(goblin(actor=actor, context={"hp": 3, "playerHp": 40}))
    wire = decision.to_wire()
    assert list(wire) == ["optionID", "reasoning", "confidence", "toolCalls", "usage", "isFallback"]
    assert (wire["optionID"], wire["reasoning"], wire["confidence"], wire["toolCalls"], wire["isFallback"]) == (
        "flee", "Snik is timid.", 78, [], False)
    request = model.requests[0]
    assert request.kind is StepKind.STRUCTURED and request.priority == "decision"
    assert request.prompt.startswith(
        'Situation: The goblin has 3 HP left.\nFacts: {"hp":3,"playerHp":40}\nOptions:\n'
        "- attack: Keep fighting\n- flee: Run into the woods\n- beg\n\n"
    )
    assert request.system == (
        "You make decisions for characters in a video game. Pick the option that best fits the character and "
        "the situation. Give one short reason, then the option id, then your confidence from 0 to 100.\n"
        "You decide for Snik.\nPersonality: Timid and greedy."
    )


async def test_single_option_needs_no_model():
    model = scripted()
    decision = await DecisionEngine(model).decide(DecisionRequest(situation="Cornered.", options=[DecisionOption("fight")]))
    assert decision == Decision(option_id="fight", reasoning="It is the only option.", confidence=100)
    assert model.requests == []


async def test_validation_happens_before_any_model_call():
    assert "Duplicate option id 'a'" in invalid(lambda: parse_decision_options(["a", "a"]))
    assert invalid(lambda: parse_decision_options([])) == (
        "'options' must be a non-empty array of {\"id\", \"description\"} objects."
    )
    assert invalid(lambda: parse_decision_options([3], "requests[0].options")) == (
        "'requests[0].options[0]' must be an object {\"id\", \"description\"} or an id string."
    )
    assert invalid(lambda: parse_decision_options([{"id": " "}])) == "'options[0].id' must not be empty."
    assert invalid(lambda: parse_decision_options([{"description": "x"}])) == "Missing required parameter 'options[0].id'."
    model = scripted()
    engine = DecisionEngine(model)
    two = [DecisionOption("a"), DecisionOption("b")]
    assert "fallbackOptionID" in await invalid_async(
        engine.decide(DecisionRequest(situation="x", options=two, fallback_option_id="c")))
    assert "scout" in await invalid_async(
        engine.decide(DecisionRequest(situation="x", options=two, tool_choice=ToolChoice.parse({"tool": "scout"}))))
    assert "Duplicate option id 'a'" in await invalid_async(
        engine.decide(DecisionRequest(situation="x", options=[DecisionOption(" a "), DecisionOption("a")])))
    assert "maxToolRounds" in await invalid_async(
        DecisionEngine(model, max_tool_rounds=-1).decide(DecisionRequest(situation="x", options=two)))
    assert model.requests == []


async def test_unusable_answers_use_the_fallback():
    engine = DecisionEngine(scripted({"error": "guardrail_violation"}))
    decision = await engine.decide(goblin(fallback_option_id=" flee "))
    assert decision.to_wire() == {"optionID": "flee", "reasoning": "", "confidence": 0, "toolCalls": [],
                                  "usage": {"inputTokens": 0, "cachedInputTokens": 0, "outputTokens": 0,
                                            "totalTokens": 0}, "isFallback": True}
    with pytest.raises(AgentError) as info:
        await DecisionEngine(scripted({"error": "guardrail_violation"})).decide(goblin())
    assert info.value.to_wire()["code"] == -32002
    camp = DecisionRequest(situation="Night.", options=[DecisionOption("camp"), DecisionOption("march")],
                           fallback_option_id="camp")
    decided = await DecisionEngine(scripted(choice("dance"), choice("sing"))).decide(camp)
    assert (decided.option_id, decided.is_fallback) == ("camp", True)
    with pytest.raises(AgentError) as info:
        await DecisionEngine(scripted({"error": "context_size_exceeded"})).decide(goblin(fallback_option_id="flee"))
    assert info.value.code is ErrorCode.CONTEXT_SIZE_EXCEEDED


async def test_choice_and_confidence_parsing():
    assert (await DecisionEngine(scripted(choice("FLEE", "70"))).decide(goblin())).confidence == 70
    assert (await DecisionEngine(scripted(choice("FLEE", "70"))).decide(goblin())).option_id == "flee"
    model = scripted(choice("dance"), choice("beg", 12.0))
    decided = await DecisionEngine(model).decide(goblin())
    assert (decided.option_id, decided.confidence) == ("beg", 12)
    assert [r.is_repair for r in model.requests] == [False, True]
    assert (await DecisionEngine(scripted(choice("attack", 140))).decide(goblin())).confidence == 100
    assert (await DecisionEngine(scripted(choice("attack", -3))).decide(goblin())).confidence == 0
    with pytest.raises(AgentError) as info:
        await DecisionEngine(scripted(*[choice("dance")] * 4)).decide(goblin())
    assert info.value.code is ErrorCode.GENERATION_FAILED


async def test_client_tools_are_forwarded_and_answered():
    measure = ToolDefinition("measure", "Measure a distance.", Schema.compile(
        {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}))
    model = scripted({"toolCalls": [{"name": "measure", "arguments": {"target": "adventurer"}}]}, choice("flee", 60))
    engine = DecisionEngine(model)
    calls: list[Any] = []

    async with anyio.create_task_group() as group:
        async def emit(event: Any) -> None:
            if isinstance(event, ToolCallStarted) and event.execution == "client":
                calls.append(event.call)
                group.start_soon(answer, event.call)

        async def answer(call: Any) -> None:
            await anyio.lowlevel.checkpoint()
            assert engine.submit_tool_result(call.id, JsonOutput({"distance": 12, "target": call.arguments["target"]}))

        actor = Persona(name="Snik", role="a goblin scout")
        decision = await engine.decide(goblin(actor=actor, tools=[measure], tool_choice=ToolChoice.parse("required")),
                                       emit=emit)
    assert decision.option_id == "flee"
    record = decision.to_wire()["toolCalls"][0]
    assert record["call"]["name"] == "measure" and record["output"]["distance"] == 12
    assert [c.arguments for c in calls] == [{"target": "adventurer"}]
    assert "You decide for Snik, a goblin scout." in model.requests[0].system
    assert engine.submit_tool_result("call_unknown", JsonOutput(1)) is False


async def test_silent_client_tool_times_out():
    weather = ToolDefinition("weather", "Check the weather.")
    engine = DecisionEngine(scripted({"toolCalls": [{"name": "weather"}]}, choice("camp", 40)), tool_timeout=0.05)
    events: list[Any] = []

    async def emit(event: Any) -> None:
        events.append(event)

    request = DecisionRequest(situation="Dusk.", options=[DecisionOption("camp"), DecisionOption("march")],
                              tools=[weather])
    decision = await engine.decide(request, emit=emit)
    assert decision.option_id == "camp" and decision.tool_calls[0].output.is_error
    assert [type(e) for e in events if isinstance(e, ToolCallAbandoned)] == [ToolCallAbandoned]


async def test_decide_many_keeps_request_order_and_isolates_failures():
    investigate = [DecisionOption("investigate"), DecisionOption("ignore")]
    requests = [
        DecisionRequest(situation="A noise.", options=investigate),
        DecisionRequest(situation="Another noise.", options=investigate),
        DecisionRequest(situation="Rain.", options=[DecisionOption("wait")]),
    ]
    engine = DecisionEngine(scripted(choice("investigate", 90), {"error": "guardrail_violation"}))
    results = await engine.decide_many(requests, max_concurrency=1)
    wire = decisions_to_wire(results)
    assert list(wire) == ["results"]
    assert wire["results"][0]["optionID"] == "investigate"
    assert wire["results"][1]["error"]["data"]["code"] == "guardrail_violation"
    assert wire["results"][1]["error"]["code"] == -32002
    assert wire["results"][2]["optionID"] == "wait"
    assert await engine.decide_many([]) == []


async def test_decide_many_starts_in_request_order():
    look = ToolDefinition("look", "Look around.")
    engine = DecisionEngine(scripted(choice("a"), choice("b")))
    order: list[int] = []

    async with anyio.create_task_group() as group:
        def emit_for(index: int):
            async def emit(event: Any) -> None:
                if isinstance(event, ToolCallStarted):
                    order.append(index)
                    group.start_soon(answer, event.call)
            return emit

        async def answer(call: Any) -> None:
            await anyio.lowlevel.checkpoint()
            engine.submit_tool_result(call.id, JsonOutput({"seen": "trees"}))

        request = DecisionRequest(situation="x", options=[DecisionOption("a"), DecisionOption("b")], tools=[look],
                                  tool_choice=ToolChoice.parse({"tool": "look"}))
        results = await engine.decide_many([request, request], max_concurrency=1, emit_for=emit_for)
    assert order == [0, 1]
    assert [r.option_id for r in results] == ["a", "b"]
