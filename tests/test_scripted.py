"""The scripted model: wire forms, both styles, chunking, templates, delays, fallback.

protocol-core §7, §4.4 (scripted errors) and §9 item 87.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from oam_actors.agent import (
    Agent,
    GenerationRequest,
    Schema,
    StepKind,
    ToolChoice,
    ToolChoiceKind,
    TurnOverrides,
    parse_tool_definitions,
)
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


def request(kind: StepKind = StepKind.RESPOND, **fields: Any) -> GenerationRequest:
    return GenerationRequest(kind=kind, system="", prompt="", **fields)


async def pieces(model: ScriptedModel, kind: StepKind = StepKind.RESPOND, **fields: Any) -> list[str]:
    with anyio.fail_after(5):
        return [p async for p in model.stream(request(kind, **fields))]  # type: ignore[misc]


async def play(model: ScriptedModel, kind: StepKind = StepKind.RESPOND, **fields: Any) -> str:
    return "".join(await pieces(model, kind, **fields))


def wire(*steps: Any, **extra: Any) -> ScriptedModel:
    return ScriptedModel.from_wire({"type": "scripted", "steps": list(steps), **extra})


# --- wire parsing ----------------------------------------------------------------------------


async def test_the_bare_word_is_an_empty_script() -> None:
    model = ScriptedModel.from_wire("scripted")
    assert model.remaining == 0
    assert await play(model) == "(script exhausted)"


async def test_every_step_form_parses() -> None:
    model = wire(
        {"text": "Hi", "chunks": 1},
        {"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}, "id": "c1"}, {"name": "wave"}]},
        {"json": {"a": 1}},
        {"template": "You said {prompt}"},
        {"error": "refusal", "message": "No."},
        {"error": "busy", "delayMs": 5},
    )
    assert await pieces(model) == ["Hi"]
    assert await play(model, StepKind.DECIDE) == '{"action":"open_gate","arguments":{"gate":"north"}}'
    assert await play(model, StepKind.DECIDE) == '{"action":"wave","arguments":{}}'
    assert await play(model) == '{"a":1}'
    assert await play(model, user_prompt="hi") == "You said hi"
    with pytest.raises(AgentError) as refusal:
        await play(model)
    with pytest.raises(AgentError) as busy:
        await play(model)
    assert (refusal.value.code, refusal.value.message) == (ErrorCode.REFUSAL, "No.")
    assert (busy.value.code, busy.value.message) == (ErrorCode.BUSY, "Scripted busy.")
    assert model.remaining == 0


@pytest.mark.parametrize(
    ("step", "kind", "played"),
    [
        ({"text": "t", "toolCalls": [{"name": "x"}], "json": 1, "template": "p", "error": "busy"}, StepKind.RESPOND, "t"),
        ({"toolCalls": [{"name": "x"}], "json": 1, "template": "p", "error": "busy"}, StepKind.DECIDE,
         '{"action":"x","arguments":{}}'),
        ({"json": 1, "template": "p", "error": "busy"}, StepKind.RESPOND, "1"),
        ({"template": "p", "error": "busy"}, StepKind.RESPOND, "p"),
        ({"json": None}, StepKind.RESPOND, "null"),  # presence of the key counts
    ],
)
async def test_precedence_of_step_keys(step: dict[str, Any], kind: StepKind, played: str) -> None:
    assert await play(wire(step), kind) == played


async def test_a_null_member_is_absent() -> None:
    with pytest.raises(AgentError) as caught:
        await play(wire({"text": None, "error": "busy"}))
    assert caught.value.code is ErrorCode.BUSY


@pytest.mark.parametrize(
    ("model", "path"),
    [
        (42, "'model'"),
        ({"type": "scripted", "steps": {"text": "x"}}, "'model.steps'"),
        ({"type": "scripted", "steps": ["text"]}, "'model.steps[0]'"),
        ({"type": "scripted", "steps": [{"text": "ok"}, {"delayMs": 5}]}, "'model.steps[1]'"),
        ({"type": "scripted", "steps": [{"text": 5}]}, "'model.steps[0].text'"),
        ({"type": "scripted", "steps": [{"template": ["x"]}]}, "'model.steps[0].template'"),
        ({"type": "scripted", "steps": [{"toolCalls": []}]}, "'model.steps[0].toolCalls'"),
        ({"type": "scripted", "steps": [{"toolCalls": "open_gate"}]}, "'model.steps[0].toolCalls'"),
        ({"type": "scripted", "steps": [{"toolCalls": [{"name": "a"}, "b"]}]}, "'model.steps[0].toolCalls[1]'"),
        ({"type": "scripted", "steps": [{"toolCalls": [{"arguments": {}}]}]}, "'model.steps[0].toolCalls[0].name'"),
        ({"type": "scripted", "steps": [{"toolCalls": [{"name": "a", "arguments": [1]}]}]},
         "'model.steps[0].toolCalls[0].arguments'"),
        ({"type": "scripted", "steps": [{"toolCalls": [{"name": "a", "id": 7}]}]}, "'model.steps[0].toolCalls[0].id'"),
        ({"type": "scripted", "steps": [{"error": "busy", "message": 1}]}, "'model.steps[0].message'"),
        ({"type": "scripted", "steps": [{"text": "x", "delayMs": -1}]}, "'model.steps[0].delayMs'"),
        ({"type": "scripted", "steps": [{"text": "x", "delayMs": 1.5}]}, "'model.steps[0].delayMs'"),
        ({"type": "scripted", "steps": [{"text": "x", "delayMs": True}]}, "'model.steps[0].delayMs'"),
        ({"type": "scripted", "steps": [{"text": "x", "chunks": 0}]}, "'model.steps[0].chunks'"),
        ({"type": "scripted", "steps": [], "fallback": {"nothing": 1}}, "'model.fallback'"),
    ],
)
def test_bad_scripts_are_invalid_params_naming_the_step_path(model: Any, path: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        ScriptedModel.from_wire(model)
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert path in caught.value.message


def test_an_unknown_error_code_lists_the_agent_codes() -> None:
    with pytest.raises(ProtocolError) as caught:
        wire({"error": "session_not_found"})
    message = caught.value.message
    assert "'model.steps[0].error'" in message
    for code in ("model_unavailable", "guardrail_violation", "refusal", "context_size_exceeded", "rate_limited",
                 "unsupported_language", "invalid_schema", "tool_failed", "cancelled", "busy",
                 "invalid_request", "generation_failed"):
        assert code in message


def test_a_step_without_a_form_names_the_forms() -> None:
    with pytest.raises(ProtocolError) as caught:
        wire({"text": "a"}, {"chunks": 2})
    assert caught.value.message == (
        "'model.steps[1]' must have one of \"text\", \"toolCalls\", \"json\", \"template\" or \"error\"."
    )


async def test_integral_floats_are_accepted_as_integers() -> None:
    assert await pieces(wire({"text": "abcd", "delayMs": 1.0, "chunks": 2.0}), streamed=True) == ["ab", "cd"]


# --- playing steps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "chunks", "expected"),
    [
        ("abcdefgh", 3, ["abc", "def", "gh"]),
        ("abcdefgh", 1, ["abcdefgh"]),
        ("abcdefgh", 7, ["ab", "cd", "ef", "gh"]),
        ("abcdefgh", 8, ["abcdefgh"]),
        ("ab", 3, ["ab"]),
        ("abc", 3, ["abc"]),
        ("abcd", 3, ["ab", "cd"]),
        ("", 3, []),
    ],
)
async def test_text_is_streamed_in_chunks(text: str, chunks: int, expected: list[str]) -> None:
    assert await pieces(ScriptedModel([ScriptStep.say(text, chunks=chunks)]), streamed=True) == expected
    # Nobody sees the pieces of an unstreamed step: its text comes whole.
    assert await pieces(ScriptedModel([ScriptStep.say(text, chunks=chunks)])) == ([text] if text else [])


async def test_an_unstreamed_decide_step_keeps_its_chunks() -> None:
    # Its reading stops at the first complete value, so the pieces after it are never read.
    model = ScriptedModel([ScriptStep.say('{"a":1} and more', chunks=2)], style=ScriptStyle.ENVELOPE)
    assert await pieces(model, StepKind.DECIDE, stop_at_json=True) == ['{"a":1} ', "and more"]


@pytest.mark.parametrize("streamed", [True, False])
async def test_only_watched_pieces_let_the_event_loop_run_between_them(streamed: bool) -> None:
    model = ScriptedModel([ScriptStep.say("abcdef", chunks=3)], style=ScriptStyle.ENVELOPE)
    others_ran: list[bool] = []
    seen: list[bool] = []

    async def other() -> None:
        others_ran.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(other)
        async for _ in model.stream(request(StepKind.DECIDE, streamed=streamed, stop_at_json=not streamed)):
            seen.append(bool(others_ran))
    assert seen == ([False, True, True] if streamed else [False, False, False])


async def test_a_decision_is_one_piece() -> None:
    model = ScriptedModel([ScriptStep.tool_calls(ScriptCall("open_gate", {"gate": "north"}))])
    assert await pieces(model, StepKind.DECIDE) == ['{"action":"open_gate","arguments":{"gate":"north"}}']
    assert await pieces(model, StepKind.DECIDE) == ['{"action":"respond","arguments":{}}']


async def test_the_default_is_three_chunks() -> None:
    assert await pieces(wire({"text": "Hello, traveller"}), streamed=True) == ["Hello,", " trave", "ller"]


async def test_templates_substitute_prompt_and_tool_outputs() -> None:
    template = ScriptStep.template("{prompt}|{toolOutput}|{toolOutputs}", chunks=1)
    text = await play(ScriptedModel([template]), user_prompt="Hi", tool_outputs=("one", "Error: two"))
    assert text == "Hi|Error: two|one\nError: two"
    assert await play(ScriptedModel([template]), user_prompt="Hi") == "Hi||"


async def test_json_steps_play_compact_json() -> None:
    assert await play(ScriptedModel([ScriptStep.json({"a": [1, "b"], "c": None})])) == '{"a":[1,"b"],"c":null}'


async def test_error_steps_raise_the_agent_error() -> None:
    model = wire({"error": "rate_limited"}, {"error": "refusal", "message": "No."})
    with pytest.raises(AgentError) as first:
        await play(model)
    with pytest.raises(AgentError) as second:
        await play(model)
    assert (first.value.code, first.value.message) == (ErrorCode.RATE_LIMITED, "Scripted rate_limited.")
    assert (second.value.code, second.value.message) == (ErrorCode.REFUSAL, "No.")


async def test_the_fallback_plays_when_the_script_is_exhausted() -> None:
    model = wire({"text": "Only."}, fallback={"text": "Again?"})
    assert [await play(model) for _ in range(3)] == ["Only.", "Again?", "Again?"]
    assert await play(ScriptedModel()) == "(script exhausted)"


async def test_a_delay_postpones_the_step() -> None:
    model = ScriptedModel([ScriptStep.say("Late.", delay_ms=60_000)])
    got: list[str] = []
    with anyio.move_on_after(0.05):
        async for piece in model.stream(request()):
            got.append(piece)  # type: ignore[arg-type]
    assert got == []
    assert model.remaining == 0  # a started step is consumed


async def test_requests_are_recorded() -> None:
    model = ScriptedModel([ScriptStep.say("a"), ScriptStep.say("b")])
    await play(model, StepKind.RESPOND, user_prompt="one")
    await play(model, StepKind.SUMMARY, user_prompt="two")
    assert [(r.kind, r.user_prompt) for r in model.requests] == [(StepKind.RESPOND, "one"), (StepKind.SUMMARY, "two")]


async def test_a_client_model_keeps_no_request_log() -> None:
    # The bridge's models: nobody reads the log there, and a crowd's prompts would pile up.
    for value, text in (("scripted", "(script exhausted)"), ({"type": "scripted", "steps": [{"text": "a"}]}, "a")):
        model = ScriptedModel.from_wire(value, record_requests=False)
        assert await play(model, user_prompt="one") == text
        assert model.requests == []


async def test_availability() -> None:
    availability = await ScriptedModel().availability()
    assert availability.to_wire() == {
        "available": True, "contextSize": 4096, "variant": "Scripted", "supportedLanguages": ["en"]
    }


# --- native style (§7.2) ---------------------------------------------------------------------


def native_round(*names: str, delay_ms: int = 0) -> ScriptStep:
    return ScriptStep.tool_calls(*(ScriptCall(n, {"n": i}) for i, n in enumerate(names)), delay_ms=delay_ms)


async def test_native_decide_plays_the_head_call_and_keeps_the_rest() -> None:
    model = ScriptedModel([native_round("a", "b"), ScriptStep.say("Done.")])
    assert await play(model, StepKind.DECIDE) == '{"action":"a","arguments":{"n":0}}'
    assert await play(model, StepKind.TOOL_ARGUMENTS) == '{"n":1}'
    assert await play(model, StepKind.DECIDE) == '{"action":"respond","arguments":{}}'
    assert model.remaining == 1  # a decide step only peeks at an answer
    assert await play(model, StepKind.TOOL_ARGUMENTS) == "{}"
    assert model.remaining == 1
    assert await play(model) == "Done."
    assert await play(model, StepKind.DECIDE) == '{"action":"respond","arguments":{}}'  # empty: fallback ⇒ respond


async def test_native_errors_are_consumed_by_decide_steps() -> None:
    model = ScriptedModel([ScriptStep.fail(ErrorCode.BUSY), ScriptStep.say("Hi.")])
    with pytest.raises(AgentError):
        await play(model, StepKind.DECIDE)
    assert model.remaining == 1


@pytest.mark.parametrize("kind", [StepKind.RESPOND, StepKind.STRUCTURED, StepKind.SUMMARY])
async def test_native_replies_discard_leading_tool_rounds(kind: StepKind) -> None:
    model = ScriptedModel([native_round("a"), native_round("b"), ScriptStep.json({"ok": True})])
    assert await play(model, kind) == '{"ok":true}'
    assert model.remaining == 0


async def test_a_native_call_delay_applies_to_the_first_call_only() -> None:
    model = ScriptedModel([native_round("a", "b", delay_ms=60_000)])
    with anyio.move_on_after(0.05):
        await play(model, StepKind.DECIDE)
        pytest.fail("the first call was not delayed")
    assert await play(model, StepKind.DECIDE) == '{"action":"b","arguments":{"n":1}}'


async def test_a_native_answer_delay_applies_at_the_reply_not_the_decide_step() -> None:
    model = ScriptedModel([ScriptStep.say("Late.", delay_ms=60_000)])
    assert await play(model, StepKind.DECIDE) == '{"action":"respond","arguments":{}}'
    with anyio.move_on_after(0.05):
        await play(model)
        pytest.fail("the answer was not delayed")


# --- envelope style (§7.3) -------------------------------------------------------------------


async def test_envelope_style_plays_each_step_verbatim() -> None:
    seen: list[StepKind] = []

    def dynamic(req: GenerationRequest) -> ScriptStep:
        seen.append(req.kind)
        return ScriptStep.say(f"kind={req.kind.value}", chunks=1)

    model = ScriptedModel(
        [
            ScriptStep.call("take_order", {"item": "ale"}),
            ScriptStep.respond(),
            native_round("a", "b"),
            ScriptStep.say("plain text at a decide step"),
            ScriptStep.from_function(dynamic),
        ],
        style=ScriptStyle.ENVELOPE,
    )
    assert await play(model, StepKind.DECIDE) == '{"action":"take_order","arguments":{"item":"ale"}}'
    assert await play(model, StepKind.RESPOND) == '{"action":"respond","arguments":{}}'
    assert await play(model, StepKind.DECIDE) == '{"action":"a","arguments":{"n":0}}'
    assert model.remaining == 2  # a tool round plays its first call only and is consumed whole
    assert await play(model, StepKind.DECIDE) == "plain text at a decide step"
    assert await play(model, StepKind.TOOL_ARGUMENTS) == "kind=toolArguments"
    assert seen == [StepKind.TOOL_ARGUMENTS]
    assert await play(model) == "(script exhausted)"


# --- through the agent (§9 item 87, §7.2 example) --------------------------------------------


def kitchen_tools() -> list[Any]:
    async def check_menu(arguments: dict[str, Any]) -> Any:
        return MENU

    async def take_order(arguments: dict[str, Any]) -> Any:
        return {"ok": True, **arguments}

    definitions, _ = parse_tool_definitions([
        {"name": "check_menu", "description": "See the menu."},
        {"name": "take_order", "description": "Order food.", "parameters": {
            "type": "object",
            "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["item", "quantity"],
        }},
    ])
    handlers = {"check_menu": check_menu, "take_order": take_order}
    return [dataclasses.replace(t, handler=handlers[t.name]) for t in definitions]


async def test_a_native_tool_round_then_text() -> None:
    model = ScriptedModel([ScriptStep.tool_calls(ScriptCall("check_menu")), ScriptStep.say("Ale is 3 gold.")])
    result = await Agent(model, tools=kitchen_tools()).respond("Price?")
    assert [r.kind for r in model.requests] == [StepKind.DECIDE, StepKind.DECIDE, StepKind.RESPOND]
    assert [s.completed_tool_rounds for s in result.steps] == [0, 1, 1]
    assert result.text == "Ale is 3 gold."
    assert model.remaining == 0


async def test_a_native_plain_answer_then_a_structured_answer() -> None:
    model = ScriptedModel([ScriptStep.say("Hello."), ScriptStep.json({"mood": "calm"})])
    agent = Agent(model, tools=kitchen_tools())
    assert (await agent.respond("Hi")).text == "Hello."
    schema = Schema.compile({"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]})
    result = await agent.respond("Mood?", schema=schema)
    assert result.structured == {"mood": "calm"}
    assert [r.kind.value for r in model.requests] == ["decide", "respond", "decide", "structured"]


async def test_native_calls_of_one_round_run_in_turn() -> None:
    model = ScriptedModel([
        ScriptStep.tool_calls(ScriptCall("check_menu"), ScriptCall("take_order", {"item": "ale", "quantity": 2})),
        ScriptStep.template("Done: {toolOutput} for '{prompt}'"),
    ])
    result = await Agent(model, tools=kitchen_tools()).respond("Two ales")
    assert [r.call.name for r in result.tool_calls] == ["check_menu", "take_order"]
    assert result.text == """Done: {"ok":true,"item":"ale","quantity":2} for 'Two ales'"""


async def test_a_native_round_after_a_forced_call_is_read_as_the_same_call() -> None:
    """§9 item 42 at agent level: the forced call runs without a model step; the scripted round
    that describes it is then consumed by a decide step as a duplicate, and the template answers."""
    waved: list[dict[str, Any]] = []

    async def wave(arguments: dict[str, Any]) -> Any:
        waved.append(arguments)
        return "waved"

    [definition], _ = parse_tool_definitions([{"name": "wave", "description": "Wave."}])
    tools = [dataclasses.replace(definition, handler=wave)]
    model = ScriptedModel([ScriptStep.tool_calls(ScriptCall("wave")), ScriptStep.template("{toolOutput}")])
    overrides = TurnOverrides(tool_choice=ToolChoice(ToolChoiceKind.TOOL, "wave"))
    result = await Agent(model, tools=tools).respond("Wave!", overrides=overrides)
    assert result.text == "waved"
    assert waved == [{}]
    assert [s.kind.value for s in result.steps] == ["decide", "respond"]
    assert model.remaining == 0


async def test_an_exhausted_script_fails_a_schema_turn() -> None:
    schema = Schema.compile({"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]})
    with pytest.raises(AgentError) as caught:
        await Agent(ScriptedModel()).respond("Mood?", schema=schema)
    assert caught.value.code is ErrorCode.GENERATION_FAILED


# --- progress (what a checkpoint keeps) ---------------------------------------------------------


def _script() -> list[ScriptStep]:
    return [ScriptStep.tool_calls(ScriptCall("a"), ScriptCall("b")), ScriptStep.say("one", chunks=1),
            ScriptStep.say("two", chunks=1)]


async def test_a_fresh_model_resumes_where_another_was_in_the_same_script() -> None:
    model = ScriptedModel(_script())
    assert model.progress() == [0, 0]
    await pieces(model, StepKind.DECIDE)  # the first of the two tool calls
    assert model.progress() == [0, 1]
    resumed = ScriptedModel(_script())
    resumed.resume(model.progress())
    assert "".join(await pieces(resumed, StepKind.DECIDE)) == '{"action":"b","arguments":{}}'
    assert await pieces(resumed) == ["one"]
    assert resumed.progress() == [2, 0]
    again = ScriptedModel(_script())
    again.resume(resumed.progress())
    assert await pieces(again) == ["two"]


@pytest.mark.parametrize("progress", [[4, 0], [-1, 0], [1, 1], [0, 2], ["0", 0]])
def test_a_position_outside_the_script_is_refused(progress: list[Any]) -> None:
    with pytest.raises(ValueError, match="not a position in this script"):
        ScriptedModel(_script()).resume(progress)
