"""The envelope tool loop at agent level: protocol-core §6 and §9 items 46-47, 64-79, 82.

Envelope-style scripts give exact control over every model answer; native scripts are used where
the protocol does (items 46, 47). The envelope parser itself is covered by test_envelope.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from oam_actors.agent import (
    Agent,
    AgentOptions,
    Availability,
    ErrorOutput,
    GenerationRequest,
    JsonOutput,
    ModelCapabilities,
    ModelStep,
    PartialValue,
    Sampling,
    Schema,
    StepKind,
    TextDelta,
    TextOutput,
    ToolCallCompleted,
    ToolCallingMode,
    ToolCallStarted,
    ToolChoice,
    ToolChoiceKind,
    ToolDefinition,
    TurnEvent,
    TurnOverrides,
    Usage,
    parse_tool_definitions,
)
from oam_actors.agent.transcript import PromptEntry, ResponseEntry, ToolUseEntry
from oam_actors.agent.turn import decide_offer
from oam_actors import (
    AgentError,
    ErrorCode,
    ProtocolError,
    ScriptCall,
    ScriptStep,
    ScriptStyle,
    ScriptedModel,
)

MENU = {"ale": 3, "stew": 5, "bread": 1}
TOOLS_WIRE = [
    {"name": "check_menu", "description": "See the menu."},
    {
        "name": "take_order",
        "description": "Order food.",
        "parameters": {
            "type": "object",
            "properties": {
                "item": {"type": "string", "enum": ["ale", "stew", "bread"]},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["item", "quantity"],
        },
    },
]


class Kitchen:
    """Local handlers for the two tools; remembers every call it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    async def check_menu(self, arguments: dict[str, Any]) -> Any:
        self.ran.append(("check_menu", arguments))
        return MENU

    async def take_order(self, arguments: dict[str, Any]) -> Any:
        self.ran.append(("take_order", arguments))
        return {"ok": True, **arguments}

    def tools(self) -> list[ToolDefinition]:
        definitions, _ = parse_tool_definitions(TOOLS_WIRE)
        return [dataclasses.replace(t, handler=getattr(self, t.name)) for t in definitions]


class Events:
    """An event sink that keeps everything."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def envelope(*steps: ScriptStep) -> ScriptedModel:
    return ScriptedModel(steps, style=ScriptStyle.ENVELOPE)


def say_raw(text: str) -> ScriptStep:
    """A model answer written verbatim (one chunk, so nothing is read in pieces)."""
    return ScriptStep.say(text, chunks=1)


def agent_with(model: ScriptedModel, kitchen: Kitchen | None = None, **options: Any) -> Agent:
    tools = (kitchen or Kitchen()).tools()
    return Agent(model, tools=tools, options=AgentOptions(**options))


def kinds(result: Any) -> list[str]:
    return [step.kind.value for step in result.steps]


def choice(value: Any) -> TurnOverrides:
    return TurnOverrides(tool_choice=ToolChoice.parse(value))


# --- plain turns -----------------------------------------------------------------------------


async def test_a_plain_turn_without_tools_is_one_respond_request() -> None:
    model = ScriptedModel([ScriptStep.say("Hello, traveller.")])
    agent = Agent(model)
    result = await agent.respond("Hi")
    assert result.text == "Hello, traveller."
    assert [r.kind for r in model.requests] == [StepKind.RESPOND]
    assert model.requests[0].prompt == "Hi"  # §6.7 plain first request
    assert [s.to_wire() for s in result.steps] == [
        {"index": 0, "completedToolRounds": 0, "toolCallingMode": "disallowed", "enabledTools": [],
         "trimmedEntries": 0, "kind": "respond", "isRepair": False}
    ]
    assert agent.history == [PromptEntry("Hi"), ResponseEntry("Hello, traveller.")]


async def test_each_plain_turn_uses_exactly_one_model_request() -> None:
    """§9 item 47: no tools ⇒ no decide step, on every turn."""
    model = ScriptedModel([ScriptStep.say("One."), ScriptStep.say("Two.")])
    agent = Agent(model)
    assert (await agent.respond("a")).text == "One."
    assert (await agent.respond("b")).text == "Two."
    assert [r.kind for r in model.requests] == [StepKind.RESPOND, StepKind.RESPOND]


async def test_a_tool_round_runs_the_tool_and_commits_the_turn() -> None:
    kitchen = Kitchen()
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."))
    agent = agent_with(model, kitchen)
    result = await agent.respond("Price?")
    assert result.text == "Ale is 3."
    assert kinds(result) == ["decide", "decide", "respond"]
    assert [r.follow_up for r in model.requests] == [False, True, True]  # one action: charged once
    assert [s.completed_tool_rounds for s in result.steps] == [0, 1, 1]
    assert [s.mode for s in result.steps] == [ToolCallingMode.ALLOWED, ToolCallingMode.ALLOWED, ToolCallingMode.DISALLOWED]
    assert result.steps[0].enabled_tools == ("check_menu", "take_order")
    assert kitchen.ran == [("check_menu", {})]
    [record] = result.tool_calls
    assert record.call.name == "check_menu"
    assert record.output == JsonOutput(MENU)
    assert record.call.id.startswith("call_") and len(record.call.id) == 29
    assert [type(e) for e in agent.history] == [PromptEntry, ToolUseEntry, ResponseEntry]
    assert agent.history[1] == ToolUseEntry(record.call, JsonOutput(MENU))


async def test_events_of_a_tool_round_come_in_order() -> None:
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), say_raw("Ale is 3."))
    events = Events()
    await agent_with(model).respond("Price?", emit=events)
    names = [type(e).__name__ for e in events.events]
    assert names == ["ModelStep", "ToolCallStarted", "ToolCallCompleted", "ModelStep", "ModelStep", "TextDelta"]
    started = events.of(ToolCallStarted)[0]
    completed = events.of(ToolCallCompleted)[0]
    assert started.execution == "local"
    assert completed.record.call == started.call
    assert events.of(TextDelta) == [TextDelta("Ale is 3.", "Ale is 3.")]


async def test_the_tool_output_reaches_the_next_prompts() -> None:
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."))
    await agent_with(model).respond("Price?")
    decide_again, reply = model.requests[1], model.requests[2]
    assert decide_again.prompt.startswith('Conversation:\nUser: Price?\n[check_menu → {"ale":3,"stew":5,"bread":1}]\n\n')
    assert reply.prompt.startswith('Conversation:\nUser: Price?\n[check_menu → {"ale":3,"stew":5,"bread":1}]\n\n')
    assert reply.tool_outputs == ('{"ale":3,"stew":5,"bread":1}',)


async def test_step_requests_carry_the_step_settings() -> None:
    """§6.1: decide steps use 0.0 / 256 and stop at JSON; replies use the session's values."""
    sampling = Sampling(top_k=1, seed=7)
    model = envelope(ScriptStep.respond(), ScriptStep.say("Hi."))
    agent = agent_with(model, temperature=0.8, max_response_tokens=99, sampling=sampling)
    agent.owner = "npc:gorm"
    await agent.respond("Hi")
    decide, reply = model.requests
    assert (decide.temperature, decide.max_output_tokens, decide.stop_at_json) == (0.0, 256, True)
    assert (reply.temperature, reply.max_output_tokens, reply.stop_at_json) == (0.8, 99, False)
    assert decide.sampling == reply.sampling == sampling
    assert decide.owner == reply.owner == "npc:gorm"
    assert [t.name for t in decide.tools] == ["check_menu", "take_order"]
    assert reply.tools == ()


class _TwoPieces:
    """A model whose decide answer is followed by a piece that must never be read."""

    capabilities = ModelCapabilities()

    def __init__(self) -> None:
        self.kinds: list[StepKind] = []

    async def availability(self) -> Availability:
        return Availability(available=True)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        self.kinds.append(request.kind)
        if request.kind is StepKind.DECIDE:
            yield '{"action": "respond"}'
            raise AgentError(ErrorCode.REFUSAL, "read past the envelope")
        yield "Fine."


async def test_a_decide_step_stops_reading_at_the_first_complete_object() -> None:
    model = _TwoPieces()
    tools = Kitchen().tools()
    result = await Agent(model, tools=tools).respond("Hi")
    assert result.text == "Fine."
    assert model.kinds == [StepKind.DECIDE, StepKind.RESPOND]


async def test_usage_is_estimated_unless_the_backend_reports_it() -> None:
    model = ScriptedModel([ScriptStep.say("12345678")])
    result = await Agent(model, instructions="Be kind").respond("Hi there")
    # system "Be kind" → 2, prompt "Hi there" → 2, output 8 chars → 2
    assert result.usage.to_wire() == {"inputTokens": 4, "cachedInputTokens": 0, "outputTokens": 2, "totalTokens": 6}


class _Reporting:
    capabilities = ModelCapabilities()

    async def availability(self) -> Availability:
        return Availability(available=True)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        yield "Hi."
        yield Usage(input_tokens=40, cached_input_tokens=30, output_tokens=2)


async def test_reported_usage_is_summed_over_steps() -> None:
    agent = Agent(_Reporting(), tools=Kitchen().tools())
    result = await agent.respond("Hi")  # "Hi." as a decide answer is invalid, so: decide, repair, respond
    assert kinds(result) == ["decide", "decide", "respond"]
    assert result.usage.to_wire() == {"inputTokens": 120, "cachedInputTokens": 90, "outputTokens": 6, "totalTokens": 126}


# --- envelope reading at agent level (§9 items 64, 65, 70) -----------------------------------


@pytest.mark.parametrize(
    ("answer", "tool", "arguments"),
    [
        ('Sure! ```json\n{"action": "check_menu"}\n```', "check_menu", {}),
        ("Let me see {'action': 'check_menu', 'arguments': {},} first.", "check_menu", {}),
        ('{"name":"take_order","input":{"item":"ale","quantity":1}}', "take_order", {"item": "ale", "quantity": 1}),
        (
            '{"type":"function","function":{"name":"take_order","arguments":"{\\"item\\": \\"stew\\", \\"quantity\\": 1}"}}',
            "take_order",
            {"item": "stew", "quantity": 1},
        ),
        ('{"action": "take_order", "arguments": {"item": "ale", "quantity": 2', "take_order", {"item": "ale", "quantity": 2}),
    ],
)
async def test_decide_answers_are_read_leniently(answer: str, tool: str, arguments: dict[str, Any]) -> None:
    kitchen = Kitchen()
    model = envelope(say_raw(answer), ScriptStep.respond(), ScriptStep.say("Done."))
    result = await agent_with(model, kitchen).respond("Go")
    assert kitchen.ran == [(tool, arguments)]
    assert [s.is_repair for s in result.steps] == [False, False, False]


async def test_the_first_object_wins() -> None:
    kitchen = Kitchen()
    model = envelope(say_raw('{"action":"respond","arguments":{}}{"action":"check_menu"}'), ScriptStep.say("Hi."))
    result = await agent_with(model, kitchen).respond("Go")
    assert kinds(result) == ["decide", "respond"]
    assert kitchen.ran == []


# --- budgets (§6.6, §9 item 71) --------------------------------------------------------------


async def test_max_tool_rounds_forces_the_reply() -> None:
    model = envelope(
        ScriptStep.call("check_menu"),
        ScriptStep.call("take_order", {"item": "ale", "quantity": 1}),
        ScriptStep.say("Done."),
    )
    result = await agent_with(model, max_tool_rounds=2).respond("Go")
    assert kinds(result) == ["decide", "decide", "respond"]
    last = result.steps[-1]
    assert (last.mode, last.completed_tool_rounds) == (ToolCallingMode.DISALLOWED, 2)
    assert result.text == "Done."


async def test_max_tool_calls_stops_the_loop() -> None:
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.say("Done."))
    result = await agent_with(model, max_tool_calls=1).respond("Go")
    assert kinds(result) == ["decide", "respond"]
    assert len(result.tool_calls) == 1


async def test_zero_tool_rounds_is_only_a_reply() -> None:
    model = envelope(ScriptStep.say("Done."))
    result = await agent_with(model, max_tool_rounds=0).respond("Go")
    assert kinds(result) == ["respond"]


async def test_per_turn_overrides_change_only_that_turn() -> None:
    model = envelope(ScriptStep.say("One."), ScriptStep.respond(), ScriptStep.say("Two."))
    agent = agent_with(model)
    first = await agent.respond("a", overrides=TurnOverrides(max_tool_rounds=0))
    second = await agent.respond("b")
    assert kinds(first) == ["respond"]
    assert kinds(second) == ["decide", "respond"]


# --- repair (§6.4, §9 items 72-75) -----------------------------------------------------------


async def test_an_invalid_envelope_gets_one_repair_quoting_problem_and_answer() -> None:
    kitchen = Kitchen()
    model = envelope(
        say_raw("I think   we should\nlook at the menu first, friend."),
        ScriptStep.call("check_menu"),
        ScriptStep.respond(),
        ScriptStep.say("Ale is 3."),
    )
    result = await agent_with(model, kitchen).respond("Price?")
    assert [s.is_repair for s in result.steps] == [False, True, False, False]
    assert [r.is_repair for r in model.requests] == [False, True, False, False]
    assert kitchen.ran == [("check_menu", {})]
    repair = model.requests[1].prompt
    assert repair.startswith(model.requests[0].prompt + "\n\n")
    assert repair.endswith(
        "Your previous answer could not be used: the answer was not a JSON object.\n"
        "Previous answer: I think we should look at the menu first, friend.\n"
        "Answer again, correctly."
    )


async def test_arguments_are_coerced_without_a_repair() -> None:
    kitchen = Kitchen()
    model = envelope(
        ScriptStep.call("take_order", {"item": "Ale", "quantity": "2"}), ScriptStep.respond(), ScriptStep.say("Done.")
    )
    result = await agent_with(model, kitchen).respond("Two ales")
    assert kitchen.ran == [("take_order", {"item": "ale", "quantity": 2})]
    assert result.tool_calls[0].call.arguments == {"item": "ale", "quantity": 2}
    assert not any(s.is_repair for s in result.steps)


async def test_invalid_arguments_get_a_repair_with_the_violations() -> None:
    kitchen = Kitchen()
    model = envelope(
        ScriptStep.call("take_order", {"item": "ale", "quantity": 12}),
        ScriptStep.call("take_order", {"item": "ale", "quantity": 10}),
        ScriptStep.respond(),
        ScriptStep.say("Done."),
    )
    result = await agent_with(model, kitchen).respond("Twelve ales")
    assert [s.is_repair for s in result.steps] == [False, True, False, False]
    assert (
        "Your previous answer could not be used: the arguments for take_order are invalid: "
        "$.quantity: must be at most 10; got 12.\n"
    ) in model.requests[1].prompt
    assert kitchen.ran == [("take_order", {"item": "ale", "quantity": 10})]


async def test_arguments_invalid_twice_are_rejected_without_running_the_tool() -> None:
    kitchen = Kitchen()
    events = Events()
    model = envelope(
        ScriptStep.call("take_order", {"item": "wine", "quantity": 1}),
        ScriptStep.call("take_order", {"item": "mead", "quantity": 1}),
        ScriptStep.say("We have no mead."),
    )
    agent = agent_with(model, kitchen)
    result = await agent.respond("Mead!", emit=events)
    assert kitchen.ran == []
    assert kinds(result) == ["decide", "decide", "respond"]
    assert result.text == "We have no mead."
    [record] = result.tool_calls
    assert record.call.name == "take_order"
    assert record.call.arguments == {"item": "mead", "quantity": 1}
    assert record.output.model_text() == (
        'Error: The call was not made: the arguments for take_order are invalid: '
        '$.item: must be one of "ale", "stew", "bread"; got "mead".'
    )
    assert events.of(ToolCallStarted) == []
    assert [e.record for e in events.of(ToolCallCompleted)] == [record]
    assert result.steps[-1].completed_tool_rounds == 1
    assert isinstance(agent.history[1], ToolUseEntry)  # rejected calls are part of the turn


async def test_an_unknown_tool_twice_ends_the_loop_without_a_record() -> None:
    definitions, _ = parse_tool_definitions(TOOLS_WIRE[:1])
    model = envelope(ScriptStep.call("fly"), ScriptStep.call("teleport"), ScriptStep.say("I cannot fly."))
    result = await Agent(model, tools=definitions).respond("Fly!")
    assert kinds(result) == ["decide", "decide", "respond"]
    assert result.tool_calls == []
    assert result.text == "I cannot fly."
    assert '"fly" is not an available action; use one of: check_menu, respond' in model.requests[1].prompt


async def test_without_repairs_a_failure_ends_the_loop_at_once() -> None:
    model = envelope(say_raw("hmm"), ScriptStep.say("Hi."))
    result = await agent_with(model, repairs_invalid_output=False).respond("Go")
    assert kinds(result) == ["decide", "respond"]


async def test_the_last_attempt_decides_between_reject_and_no_record() -> None:
    kitchen = Kitchen()
    bad_arguments = ScriptStep.call("take_order", {"item": "wine", "quantity": 1})
    unknown = ScriptStep.call("fly")
    rejected = await agent_with(envelope(unknown, bad_arguments, ScriptStep.say("No.")), kitchen).respond("Go")
    dropped = await agent_with(envelope(bad_arguments, unknown, ScriptStep.say("No.")), kitchen).respond("Go")
    assert [r.call.name for r in rejected.tool_calls] == ["take_order"]
    assert rejected.tool_calls[0].output.is_error
    assert dropped.tool_calls == []
    assert kitchen.ran == []


async def test_a_forced_tool_whose_arguments_stay_invalid_is_rejected() -> None:
    kitchen = Kitchen()
    model = envelope(say_raw("I would like ale"), say_raw('{"item": "ale"}'), ScriptStep.say("Sorry."))
    result = await agent_with(model, kitchen).respond("Ale", overrides=choice({"tool": "take_order"}))
    assert kinds(result) == ["toolArguments", "toolArguments", "respond"]
    assert [s.is_repair for s in result.steps] == [False, True, False]
    assert "the answer was not a JSON object" in model.requests[1].prompt
    assert result.tool_calls[0].output == ErrorOutput(
        'The call was not made: the arguments for take_order are invalid: $: missing required property "quantity".'
    )
    assert kitchen.ran == []


# --- dedupe (§6.6, §9 item 76) ---------------------------------------------------------------


async def test_a_repeated_successful_call_is_read_as_respond() -> None:
    kitchen = Kitchen()
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.call("check_menu"), ScriptStep.say("Ale is 3."))
    result = await agent_with(model, kitchen).respond("Price?")
    assert kinds(result) == ["decide", "decide", "respond"]
    assert kitchen.ran == [("check_menu", {})]


async def test_a_repeated_call_with_coerced_equal_arguments_is_deduped() -> None:
    kitchen = Kitchen()
    model = envelope(
        ScriptStep.call("take_order", {"item": "ale", "quantity": 2}),
        ScriptStep.call("take_order", {"quantity": "2", "item": "Ale"}),
        ScriptStep.say("Done."),
    )
    await agent_with(model, kitchen).respond("Two ales")
    assert kitchen.ran == [("take_order", {"item": "ale", "quantity": 2})]


async def test_dedupe_can_be_disabled() -> None:
    kitchen = Kitchen()
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Hi."))
    result = await agent_with(model, kitchen, dedupe_tool_calls=False).respond("Price?")
    assert kitchen.ran == [("check_menu", {}), ("check_menu", {})]
    assert kinds(result) == ["decide", "decide", "decide", "respond"]


async def test_a_failed_call_is_not_deduped() -> None:
    calls: list[dict[str, Any]] = []

    async def flaky(arguments: dict[str, Any]) -> Any:
        calls.append(arguments)
        if len(calls) == 1:
            raise RuntimeError("Kitchen closed.")
        return "open"

    definitions, _ = parse_tool_definitions(TOOLS_WIRE[:1])
    tools = [dataclasses.replace(definitions[0], handler=flaky)]
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Hi."))
    result = await Agent(model, tools=tools).respond("Menu?")
    assert [r.output for r in result.tool_calls] == [ErrorOutput("Kitchen closed."), TextOutput("open")]
    assert len(calls) == 2


# --- tool choice (§6.5, §9 items 77-78) ------------------------------------------------------


@pytest.mark.parametrize("word", ["auto", "explicit"])
async def test_auto_and_explicit_offer_tools_and_respond(word: str) -> None:
    model = envelope(ScriptStep.respond(), ScriptStep.say("Hi."))
    result = await agent_with(model).respond("Hi", overrides=choice(word))
    first = result.steps[0]
    assert (first.kind, first.mode, first.enabled_tools) == (
        StepKind.DECIDE, ToolCallingMode.ALLOWED, ("check_menu", "take_order")
    )
    assert '- respond: answer the user directly' in model.requests[0].prompt


async def test_none_replies_directly() -> None:
    model = envelope(ScriptStep.say("Hi."))
    result = await agent_with(model, tool_choice=ToolChoice(ToolChoiceKind.NONE)).respond("Hi")
    assert kinds(result) == ["respond"]


async def test_required_without_tools_replies_directly() -> None:
    model = envelope(ScriptStep.say("Hi."))
    result = await Agent(model, options=AgentOptions(tool_choice=ToolChoice(ToolChoiceKind.REQUIRED))).respond("Hi")
    assert kinds(result) == ["respond"]


async def test_required_forces_a_tool_on_the_first_step_only() -> None:
    model = envelope(
        ScriptStep.call("check_menu"),
        ScriptStep.call("take_order", {"item": "ale", "quantity": 1}),
        ScriptStep.respond(),
        ScriptStep.say("Done."),
    )
    result = await agent_with(model).respond("Go", overrides=choice("required"))
    assert [s.mode.value for s in result.steps] == ["required", "allowed", "allowed", "disallowed"]
    assert "- respond:" not in model.requests[0].prompt
    assert "You must use one of the tools now." in model.requests[0].prompt


async def test_required_answered_with_respond_is_repaired() -> None:
    model = envelope(ScriptStep.respond(), ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Hi."))
    result = await agent_with(model).respond("Go", overrides=choice("required"))
    assert [s.is_repair for s in result.steps] == [False, True, False, False]
    assert (
        '"respond" is not allowed now; you must call one of the tools: check_menu, take_order'
        in model.requests[1].prompt
    )
    assert len(result.tool_calls) == 1


async def test_required_with_one_enabled_tool_asks_for_its_arguments() -> None:
    kitchen = Kitchen()
    model = envelope(say_raw('{"item": "stew", "quantity": 1}'), ScriptStep.respond(), ScriptStep.say("Done."))
    overrides = TurnOverrides(tool_choice=ToolChoice(ToolChoiceKind.REQUIRED), enabled_tools=frozenset({"take_order"}))
    result = await agent_with(model, kitchen).respond("Stew", overrides=overrides)
    first = result.steps[0]
    assert (first.kind, first.mode, first.enabled_tools) == (StepKind.TOOL_ARGUMENTS, ToolCallingMode.REQUIRED, ("take_order",))
    assert model.requests[0].tool_name == "take_order"
    assert kitchen.ran == [("take_order", {"item": "stew", "quantity": 1})]


async def test_a_forced_tool_without_parameters_runs_with_no_model_step() -> None:
    kitchen = Kitchen()
    model = envelope(ScriptStep.respond(), ScriptStep.say("Ale is 3."))
    result = await agent_with(model, kitchen).respond("Menu", overrides=choice({"tool": "check_menu"}))
    assert kitchen.ran == [("check_menu", {})]
    assert kinds(result) == ["decide", "respond"]
    assert result.steps[0].completed_tool_rounds == 1


async def test_a_forced_tool_reads_arguments_from_prose_with_an_envelope() -> None:
    kitchen = Kitchen()
    answer = 'Of course. {"action": "take_order", "arguments": {"item": "bread", "quantity": 3}} Enjoy!'
    model = envelope(say_raw(answer), ScriptStep.respond(), ScriptStep.say("Done."))
    result = await agent_with(model, kitchen).respond("Bread", overrides=choice({"tool": "take_order"}))
    assert (result.steps[0].kind, result.steps[0].mode) == (StepKind.TOOL_ARGUMENTS, ToolCallingMode.REQUIRED)
    assert kitchen.ran == [("take_order", {"item": "bread", "quantity": 3})]


async def test_a_forced_tool_is_found_even_when_not_enabled() -> None:
    kitchen = Kitchen()
    model = envelope(ScriptStep.say("Ale is 3."))
    overrides = TurnOverrides(tool_choice=ToolChoice.parse({"tool": "check_menu"}), enabled_tools=frozenset())
    result = await agent_with(model, kitchen).respond("Menu", overrides=overrides)
    assert kitchen.ran == [("check_menu", {})]
    assert kinds(result) == ["respond"]  # no enabled tools after the forced call ⇒ reply


async def test_an_unknown_forced_tool_is_an_invalid_request() -> None:
    model = envelope(ScriptStep.say("Hi."))
    agent = agent_with(model)
    with pytest.raises(AgentError) as caught:
        await agent.respond("Go", overrides=choice({"tool": "ghost"}))
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert "ghost" in caught.value.message
    assert agent.history == []
    assert model.requests == []


async def test_a_tool_that_is_not_enabled_is_never_executed() -> None:
    kitchen = Kitchen()
    model = envelope(
        ScriptStep.call("take_order", {"item": "ale", "quantity": 1}),
        ScriptStep.call("take_order", {"item": "ale", "quantity": 1}),
        ScriptStep.say("Hi."),
    )
    overrides = TurnOverrides(enabled_tools=frozenset({"check_menu"}))
    result = await agent_with(model, kitchen).respond("Ale", overrides=overrides)
    assert kitchen.ran == []
    assert result.tool_calls == []
    assert result.steps[0].enabled_tools == ("check_menu",)
    assert '"take_order" is not an available action; use one of: check_menu, respond' in model.requests[1].prompt


async def test_a_reply_after_deciding_to_respond_is_a_plain_request() -> None:
    model = envelope(ScriptStep.respond(), ScriptStep.say("Hi."))
    await agent_with(model).respond("Hello there")
    assert model.requests[1].prompt == "Hello there"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", ToolChoice(ToolChoiceKind.AUTO)),
        ("none", ToolChoice(ToolChoiceKind.NONE)),
        ("required", ToolChoice(ToolChoiceKind.REQUIRED)),
        ("explicit", ToolChoice(ToolChoiceKind.EXPLICIT)),
        ({"tool": "wave"}, ToolChoice(ToolChoiceKind.TOOL, "wave")),
        ({"type": "function", "function": {"name": "wave"}}, ToolChoice(ToolChoiceKind.TOOL, "wave")),
    ],
)
def test_tool_choice_forms(value: Any, expected: ToolChoice) -> None:
    assert ToolChoice.parse(value) == expected
    assert ToolChoice.parse(expected.to_wire()) == expected


@pytest.mark.parametrize("value", ["wave", "tool", "", None, 3, {"tool": ""}, {"tool": 5}, {"function": "wave"}, ["auto"]])
def test_bad_tool_choices_are_invalid_params(value: Any) -> None:
    with pytest.raises(ProtocolError) as caught:
        ToolChoice.parse(value, path="options.toolChoice")
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert "'options.toolChoice'" in caught.value.message


def test_turn_overrides_replace_only_what_they_name() -> None:
    options = AgentOptions(max_tool_rounds=4, max_tool_calls=12, temperature=0.5)
    assert TurnOverrides().apply(options) is options
    changed = TurnOverrides(max_tool_calls=1, enabled_tools=frozenset()).apply(options)
    assert (changed.max_tool_rounds, changed.max_tool_calls, changed.enabled_tools, changed.temperature) == (
        4, 1, frozenset(), 0.5
    )


# --- structured output (§6.9, §9 items 46, 79) -----------------------------------------------

LINE_SCHEMA = Schema.compile(
    {
        "type": "object",
        "properties": {
            "emotion": {"type": "string", "enum": ["happy", "sad"]},
            "line": {"type": "string"},
            "endsConversation": {"type": "boolean"},
        },
        "required": ["emotion", "line", "endsConversation"],
    }
)


async def test_structured_output_is_extracted_coerced_and_ordered() -> None:
    answer = 'Here:\n```json\n{"line":"Welcome!","endsConversation":"false","emotion":"Happy"}\n```'
    model = envelope(say_raw(answer))
    events = Events()
    agent = Agent(model)
    result = await agent.respond("Hello", schema=LINE_SCHEMA, emit=events)
    assert result.text == '{"emotion":"happy","line":"Welcome!","endsConversation":false}'
    assert result.structured == {"emotion": "happy", "line": "Welcome!", "endsConversation": False}
    assert kinds(result) == ["structured"]
    assert events.events[-1] == PartialValue(result.structured)  # the final value comes last
    assert agent.history[-1] == ResponseEntry(result.text, result.structured)
    assert model.requests[0].schema == LINE_SCHEMA.generation_schema


async def test_partial_values_grow_and_end_with_the_final_value() -> None:
    schema = Schema.compile({
        "type": "object",
        "properties": {"mood": {"type": "string", "enum": ["calm", "angry"]}, "line": {"type": "string"}},
        "required": ["mood", "line"],
    })
    model = envelope(ScriptStep.say('{"line": "Hello there", "mood": "Calm"}', chunks=5))
    events = Events()
    await Agent(model).respond("Hi", schema=schema, emit=events)
    assert [e.value for e in events.of(PartialValue)] == [
        {},
        {"line": "Hello"},
        {"line": "Hello there"},
        {"line": "Hello there", "mood": "Calm"},
        {"mood": "calm", "line": "Hello there"},
    ]


async def test_structured_output_gets_one_repair() -> None:
    model = envelope(
        ScriptStep.json({"emotion": "angry", "line": "No.", "endsConversation": True}),
        ScriptStep.json({"emotion": "sad", "line": "No.", "endsConversation": True}),
    )
    result = await Agent(model).respond("Hello", schema=LINE_SCHEMA)
    assert [s.is_repair for s in result.steps] == [False, True]
    assert result.structured == {"emotion": "sad", "line": "No.", "endsConversation": True}
    assert "the JSON does not match the required form: $.emotion: must be one of" in model.requests[1].prompt


async def test_structured_output_invalid_twice_fails_the_turn() -> None:
    model = envelope(ScriptStep.json({"line": "Hi", "endsConversation": False}), say_raw("no json here"))
    agent = Agent(model)
    with pytest.raises(AgentError) as caught:
        await agent.respond("Hello", schema=LINE_SCHEMA)
    assert caught.value.code is ErrorCode.GENERATION_FAILED
    assert caught.value.message == (
        "The model's structured output stayed invalid after a repair attempt: the answer did not contain JSON"
    )
    assert "missing required property \"emotion\"" in model.requests[1].prompt
    assert agent.history == []


async def test_structured_output_invalid_twice_names_the_violation() -> None:
    bad = ScriptStep.json({"line": "Hi", "endsConversation": False})
    with pytest.raises(AgentError) as caught:
        await Agent(envelope(bad, bad)).respond("Hello", schema=LINE_SCHEMA)
    assert 'missing required property "emotion"' in caught.value.message


async def test_an_array_schema_takes_the_first_array() -> None:
    schema = Schema.compile({"type": "array", "items": {"type": "string"}})
    model = envelope(say_raw('Names: ["Bree", "Tom"] and more'))
    result = await Agent(model).respond("Names?", schema=schema)
    assert result.text == '["Bree","Tom"]'


async def test_tools_may_run_before_the_structured_step() -> None:
    kitchen = Kitchen()
    schema = Schema.compile({"type": "object", "properties": {"price": {"type": "integer"}}, "required": ["price"]})
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.json({"price": 3}))
    result = await agent_with(model, kitchen).respond("Ale price?", schema=schema)
    assert kinds(result) == ["decide", "decide", "structured"]
    assert result.structured == {"price": 3}


async def test_native_scripts_close_objects_and_order_keys() -> None:
    """§9 item 46: undeclared keys are dropped from arguments and structured output."""
    gate = {
        "name": "open_gate",
        "description": "Ask the game to open a gate.",
        "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
    }
    opened: list[dict[str, Any]] = []

    async def open_gate(arguments: dict[str, Any]) -> Any:
        opened.append(arguments)
        return "The gate opened."

    definitions, _ = parse_tool_definitions([gate])
    tools = [dataclasses.replace(definitions[0], handler=open_gate)]
    model = ScriptedModel([
        ScriptStep.tool_calls(ScriptCall("open_gate", {"gate": "north", "force": True})),
        ScriptStep.say("Opened."),
    ])
    result = await Agent(model, tools=tools).respond("Open it")
    assert opened == [{"gate": "north"}]
    assert result.tool_calls[0].call.arguments == {"gate": "north"}

    schema = Schema.compile({
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "choice": {"type": "string"}},
        "required": ["reasoning", "choice"],
    })
    model = ScriptedModel([ScriptStep.json({"choice": "sell", "reasoning": "Fair price.", "mood": "calm"})])
    none = AgentOptions(tool_choice=ToolChoice(ToolChoiceKind.NONE))
    result = await Agent(model, tools=tools, options=none).respond("Sell?", schema=schema)
    assert result.structured == {"reasoning": "Fair price.", "choice": "sell"}
    assert list(result.structured) == ["reasoning", "choice"]


# --- reply cleaning in the loop (§6.8, §9 item 82) -------------------------------------------


async def test_the_reply_is_cleaned_while_streaming_and_at_the_end() -> None:
    model = envelope(ScriptStep.say('Mira: Welcome, friend! [check_menu → {"ale":3}]', chunks=8))
    events = Events()
    result = await Agent(model, options=AgentOptions(assistant_label="Mira")).respond("Hi", emit=events)
    assert result.text == "Welcome, friend!"
    texts = events.of(TextDelta)
    assert texts and not any(e.text.startswith("Mira") or e.delta.startswith("Mira") for e in texts)
    assert texts[-1].text == "Welcome, friend!"
    assert shown(texts) == result.text


async def test_without_text_deltas_the_reply_is_cleaned_the_same_and_nothing_streams() -> None:
    for deltas in (True, False):
        model = envelope(ScriptStep.say('Mira: Welcome, friend! [check_menu → {"ale":3}]', chunks=8))
        events = Events()
        agent = Agent(model, options=AgentOptions(assistant_label="Mira"))
        result = await agent.respond("Hi", emit=events, text_deltas=deltas)
        assert result.text == "Welcome, friend!"
        assert bool(events.of(TextDelta)) is deltas
        assert len(events.of(ModelStep)) == 1


async def test_without_step_events_the_turn_is_the_same_and_no_model_step_is_emitted() -> None:
    runs = []
    for steps in (True, False):
        model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."))
        events = Events()
        result = await agent_with(model).respond("Price?", emit=events, step_events=steps)
        assert bool(events.of(ModelStep)) is steps
        runs.append((result.text, result.steps, [type(e) for e in events.events if not isinstance(e, ModelStep)]))
    assert runs[0] == runs[1]


async def test_a_step_is_streamed_only_when_its_pieces_are_watched() -> None:
    cases = [({"emit": Events()}, True), ({"emit": Events(), "text_deltas": False}, False), ({}, False)]
    for kwargs, streamed in cases:
        model = envelope(ScriptStep.say("Hello."))
        await Agent(model).respond("Hi", **kwargs)
        assert [r.streamed for r in model.requests] == [streamed]


def shown(texts: list[TextDelta]) -> str:
    """What a client displays: each reset replaces, each other delta appends."""
    display = ""
    for event in texts:
        display = event.text if event.is_reset else display + event.delta
    return display


@pytest.mark.parametrize(
    ("raw", "clean"),
    [("Hi there", "Hi there"), ("Assistant: Assistant-free text", "Assistant-free text"),
     ("Mirabelle is my cousin.", "Mirabelle is my cousin.")],
)
async def test_reply_labels_are_removed(raw: str, clean: str) -> None:
    model = envelope(ScriptStep.say(raw))
    result = await Agent(model, options=AgentOptions(assistant_label="Mira")).respond("Hi")
    assert result.text == clean


# --- wire shapes of the result ---------------------------------------------------------------


async def test_the_result_has_the_protocol_key_order() -> None:
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."))
    result = await agent_with(model).respond("Price?")
    wire = result.to_wire(session="mira")
    assert list(wire) == ["session", "text", "toolCalls", "usage", "steps"]
    record = wire["toolCalls"][0]
    assert list(record) == ["call", "output", "isError", "durationSeconds"]
    assert (record["output"], record["isError"]) == (MENU, False)
    assert list(record["call"]) == ["id", "name", "arguments"]


async def test_model_step_events_match_the_result_steps() -> None:
    model = envelope(ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."))
    events = Events()
    result = await agent_with(model).respond("Price?", emit=events)
    assert [e.step for e in events.of(ModelStep)] == result.steps
    assert [s.index for s in result.steps] == [0, 1, 2]


# --- the decide offer ----------------------------------------------------------------------------


def test_the_decide_offer_is_shared_by_the_same_tools_and_never_by_others() -> None:
    shared = [ToolDefinition("check_menu", "List the menu.")]
    assert decide_offer(shared, allow_respond=True) is decide_offer(list(shared), allow_respond=True)
    assert decide_offer(shared, allow_respond=False) is not decide_offer(shared, allow_respond=True)
    # Tool sets made and dropped one after another (their ids free for reuse), more than are kept.
    for n in range(600):
        names = decide_offer([ToolDefinition(f"tool_{n}")], allow_respond=True)[1]
        assert names == (f"tool_{n}",)
    parts, names, by_name = decide_offer(shared, allow_respond=True)
    assert names == ("check_menu",) and by_name == {"check_menu": shared[0]} and "check_menu" in parts[0]
