"""Prompt layout, task texts, history trimming and system text: protocol-core §6.7, §9 items 81, 83."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from oam_actors.agent import (
    Agent,
    AgentOptions,
    Schema,
    parse_tool_definitions,
    prompts,
)
from oam_actors.agent.envelope import Call, parse_envelope
from oam_actors.agent.prompts import Labels
from oam_actors import ErrorOutput, JsonOutput, ScriptStep, ScriptStyle, ScriptedModel, TextOutput, ToolCall
from oam_actors.agent.transcript import (
    Entry,
    PromptEntry,
    ResponseEntry,
    ToolUseEntry,
    Transcript,
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
                "item": {"type": "string", "enum": ["ale", "stew", "bread"], "description": "menu item"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["item"],
        },
    },
]
TOOLS, _ = parse_tool_definitions(TOOLS_WIRE)


def use(name: str, arguments: dict[str, Any], output: Any) -> ToolUseEntry:
    return ToolUseEntry(ToolCall("call_x", name, arguments), output)


async def check_menu(arguments: dict[str, Any]) -> Any:
    return MENU


PRICE_TURN: list[Entry] = [
    PromptEntry("Price?"),
    use("check_menu", {}, JsonOutput(MENU)),
    ResponseEntry("Ale is 3."),
]


# --- system text -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instructions", "note", "expected"),
    [
        ("You are Mira.", "The guest is a dwarf.", "You are Mira.\n\nThe guest is a dwarf."),
        ("  You are Mira.\n", None, "You are Mira."),
        (None, " The guest is a dwarf. ", "The guest is a dwarf."),
        ("   ", "", ""),
        (None, None, ""),
    ],
)
def test_system_text(instructions: str | None, note: str | None, expected: str) -> None:
    assert prompts.system_text(instructions, note) == expected


async def test_system_text_is_byte_stable_across_steps_and_turns() -> None:
    model = ScriptedModel(
        [ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3."),
         ScriptStep.respond(), ScriptStep.say("Bye.")],
        style=ScriptStyle.ENVELOPE,
    )
    tools = [dataclasses.replace(TOOLS[0], handler=check_menu)]
    agent = Agent(model, instructions="You are Mira.", context_note="The guest is a dwarf.", tools=tools)
    await agent.respond("Price?")
    await agent.respond("Bye")
    assert {r.system for r in model.requests} == {"You are Mira.\n\nThe guest is a dwarf."}


# --- layout ----------------------------------------------------------------------------------


DEFAULT_LABELS = Labels()


def build(history: list[Entry], prompt: str, *, plain_task: str | None = None,
          uses: tuple[ToolUseEntry, ...] = (), labels: Labels = DEFAULT_LABELS, **kwargs: Any) -> str:
    return prompts.build_prompt(
        history=history, prompt=prompt, turn_tool_uses=list(uses), task="TASK", labels=labels,
        plain_task=plain_task, **kwargs,
    )


def test_a_plain_first_request_is_the_users_text() -> None:
    assert build([], "Hello there", plain_task="") == "Hello there"
    assert build([], "Hello there", plain_task="FORM") == "Hello there\n\nFORM"


def test_a_decide_step_is_never_plain() -> None:
    assert build([], "Hello there") == "Conversation:\nUser: Hello there\n\nTASK"


def test_a_blank_prompt_is_not_a_plain_request_and_gets_no_user_line() -> None:
    assert build([], "  ", plain_task="") == "Conversation:\n\nTASK"


def test_this_turns_tool_uses_follow_the_prompt() -> None:
    uses = (use("take_order", {"item": "ale", "quantity": 2}, ErrorOutput("Out of ale.")),)
    assert build([], "Two ales", plain_task="", uses=uses) == (
        'Conversation:\nUser: Two ales\n[take_order {"item":"ale","quantity":2} → Error: Out of ale.]\n\nTASK'
    )


def test_history_is_rendered_as_labelled_lines() -> None:
    assert build(PRICE_TURN, "Hello again", labels=Labels("Player", "Mira")) == (
        "Conversation:\n"
        "Player: Price?\n"
        '[check_menu → {"ale":3,"stew":5,"bread":1}]\n'
        "Mira: Ale is 3.\n"
        "Player: Hello again\n"
        "\n"
        "TASK"
    )


def test_structured_replies_in_history_are_key_value_text() -> None:
    history: list[Entry] = [
        PromptEntry("Hi"),
        ResponseEntry('{"emotion":"happy","line":"Welcome!","tags":["a"]}',
                      {"emotion": "happy", "line": "Welcome!", "tags": ["a"]}),
    ]
    assert build(history, "Bye") == (
        'Conversation:\nUser: Hi\nAssistant: emotion: happy; line: Welcome!; tags: ["a"]\nUser: Bye\n\nTASK'
    )
    npc = build(history, "Bye", render_response=lambda entry: entry.structured["line"])
    assert "Assistant: Welcome!\n" in npc


def test_long_tool_outputs_are_cut() -> None:
    entry = use("read_book", {}, TextOutput("z" * 5000))
    [line] = prompts.render_entries([entry], Labels())
    assert line == "[read_book → " + "z" * prompts.TOOL_OUTPUT_LIMIT + "… (truncated)]"
    assert prompts.TOOL_OUTPUT_LIMIT == 1500
    short = use("read_book", {}, TextOutput("z" * 1500))
    assert prompts.render_entries([short], Labels()) == ["[read_book → " + "z" * 1500 + "]"]


def test_render_structured() -> None:
    assert prompts.render_structured({"a": 1, "b": "two", "c": None}) == "a: 1; b: two; c: null"
    assert prompts.render_structured(["x", 2]) == '["x",2]'
    assert prompts.render_structured("plain") == "plain"


async def test_a_resumed_agent_sees_the_saved_conversation() -> None:
    """§9 item 81."""
    tools = [dataclasses.replace(TOOLS[0], handler=check_menu)]
    first = Agent(
        ScriptedModel([ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say("Ale is 3.")],
                      style=ScriptStyle.ENVELOPE),
        instructions="You are Mira.",
        tools=tools,
    )
    await first.respond("Price?")
    text = first.transcript().encode().decode()
    assert text.startswith(
        '{"type":"open-android-models.Transcript","version":"1.0","transcript":{"instructions":"You are Mira."'
    )

    saved = Transcript.decode(text)
    definitions, _ = parse_tool_definitions(saved.tools)
    model = ScriptedModel([ScriptStep.respond(), ScriptStep.say("Welcome back.")], style=ScriptStyle.ENVELOPE)
    resumed = Agent(model, instructions=saved.instructions, context_note="The guest is a dwarf.",
                    tools=definitions, history=saved.entries)
    assert (await resumed.respond("Hello again")).text == "Welcome back."
    for request in model.requests:
        assert request.prompt.startswith(
            'Conversation:\nUser: Price?\n[check_menu → {"ale":3,"stew":5,"bread":1}]\n'
            "Assistant: Ale is 3.\nUser: Hello again"
        )
        assert request.system == "You are Mira.\n\nThe guest is a dwarf."


# --- task texts ------------------------------------------------------------------------------


def test_decide_task_with_respond() -> None:
    assert prompts.decide_task(TOOLS, allow_respond=True, last_message="Two ales, please") == (
        "Available tools:\n"
        "- check_menu: See the menu. Arguments: {}\n"
        '- take_order: Order food. Arguments: {"item": one of "ale", "stew", "bread" (menu item), '
        '"quantity"?: integer 1-10}\n'
        "- respond: answer the user directly, without a tool. Arguments: {}\n"
        "\n"
        'The user\'s last message: "Two ales, please"\n'
        "\n"
        "Decide the next step. If a tool does what the user asks, or looks up what they want to know, "
        "call it: the tools know things you do not. If no tool fits, or the conversation already has "
        "what you need, choose respond.\n"
        "Answer with one JSON object only, no other text. The possible answers:\n"
        '{"action": "respond", "arguments": {}}\n'
        '{"action": "check_menu", "arguments": {}}\n'
        '{"action": "take_order", "arguments": {"item":"ale"}}'
    )


def test_decide_task_when_a_tool_is_required() -> None:
    task = prompts.decide_task(TOOLS[:1], allow_respond=False, last_message="")
    assert task == (
        "Available tools:\n"
        "- check_menu: See the menu. Arguments: {}\n"
        "\n"
        "You must use one of the tools now.\n"
        "Answer with one JSON object only, no other text. The possible answers:\n"
        '{"action": "check_menu", "arguments": {}}'
    )


def test_decide_task_quotes_at_most_300_characters_of_the_last_message() -> None:
    task = prompts.decide_task(TOOLS, allow_respond=True, last_message="word   " * 100)
    quoted = task.split('The user\'s last message: "')[1].split('"\n')[0]
    assert len(quoted) == 300
    assert quoted.endswith("…") and "  " not in quoted


def test_decide_task_example_envelopes_are_valid_calls() -> None:
    task = prompts.decide_task(TOOLS, allow_respond=False, last_message="")
    examples = task.split("The possible answers:\n")[1].split("\n")
    assert len(examples) == len(TOOLS)
    for tool, example in zip(TOOLS, examples, strict=True):
        parsed = parse_envelope(example, [t.name for t in TOOLS], allow_respond=False)
        assert isinstance(parsed, Call) and parsed.tool == tool.name
        assert not tool.schema.validate(parsed.candidates[0])


def test_tool_arguments_task() -> None:
    assert prompts.tool_arguments_task(TOOLS[1]) == (
        "You are calling the tool take_order: Order food.\n"
        "Its arguments are a JSON object with these keys:\n"
        '- "item": one of "ale", "stew", "bread", menu item\n'
        '- "quantity" (optional): integer 1-10\n'
        "Answer with the JSON object of arguments only, no other text."
    )


def test_respond_task() -> None:
    assert prompts.respond_task(used_tools=False, assistant_label="Mira") == (
        "Write Mira's reply to the user's last message. Reply in plain text, without a speaker label."
    )
    assert "Use the tool results above" in prompts.respond_task(used_tools=True, assistant_label="Mira")


def test_structured_task() -> None:
    schema = Schema.compile({
        "type": "object",
        "properties": {"line": {"type": "string"}, "mood": {"type": "string", "enum": ["calm", "angry"]}},
        "required": ["line"],
    })
    first = prompts.structured_task(schema, last_message="Hi", later_turn=False)
    assert first == (
        "Answer with one JSON object only, no other text, with these keys:\n"
        '- "line": string\n'
        '- "mood" (optional): one of "calm", "angry"'
    )
    later = prompts.structured_task(schema, last_message="Hi", later_turn=True)
    assert later == 'Write a new reply to the user\'s last message: "Hi"\n' + first
    array = Schema.compile({"type": "array", "items": {"type": "string"}})
    assert prompts.structured_task(array, last_message="", later_turn=False) == (
        "Answer with a JSON array only, no other text. Its form:\n[string, …]"
    )


def test_repair_task() -> None:
    assert prompts.repair_task("TASK", problem="the answer was not a JSON object", previous_answer="hm") == (
        "TASK\n\nYour previous answer could not be used: the answer was not a JSON object.\n"
        "Previous answer: hm\nAnswer again, correctly."
    )


def test_summary_input() -> None:
    assert prompts.summary_input(" Old. ", PRICE_TURN, Labels()) == (
        "Summary so far:\nOld.\n\n"
        'Conversation:\nUser: Price?\n[check_menu → {"ale":3,"stew":5,"bread":1}]\nAssistant: Ale is 3.'
    )
    assert prompts.summary_input(None, PRICE_TURN[:1], Labels()) == "Conversation:\nUser: Price?"


# --- trimming (§6.7, §9 item 83) -------------------------------------------------------------


def long_history(turns: int = 10) -> list[Entry]:
    history: list[Entry] = []
    for n in range(turns):
        history += [PromptEntry(f"question {n} " + "q" * 390), ResponseEntry(f"answer {n} " + "a" * 390)]
    return history


async def trimmed_turn(**options: Any) -> tuple[Agent, ScriptedModel, Any]:
    model = ScriptedModel([ScriptStep.say("Newest answer.")])
    agent = Agent(model, history=long_history(),
                  options=AgentOptions(max_input_tokens=1000, reserved_response_tokens=100, **options))
    result = await agent.respond("newest question")
    return agent, model, result


async def test_trimming_hides_the_oldest_whole_turns() -> None:
    agent, model, result = await trimmed_turn()
    trimmed = result.steps[0].trimmed_entries
    assert trimmed % 2 == 0 and 12 <= trimmed <= 20
    prompt = model.requests[0].prompt
    assert "question 0 " not in prompt
    assert "question 9 " in prompt and "answer 9 " in prompt
    assert prompt.startswith(f"Conversation:\nUser: question {trimmed // 2} ")
    assert len(agent.history) == 22  # the transcript keeps everything


async def test_trimming_can_be_switched_off() -> None:
    _, model, result = await trimmed_turn(trim_history=False)
    assert result.steps[0].trimmed_entries == 0
    assert "question 0 " in model.requests[0].prompt


async def test_trimming_keeps_the_minimum_recent_turns() -> None:
    _, _, result = await trimmed_turn(minimum_recent_turns=9)
    assert result.steps[0].trimmed_entries == 2


async def test_each_history_entry_is_rendered_once_across_steps_and_turns() -> None:
    rendered: list[str] = []

    def render(entry: ResponseEntry) -> str:
        rendered.append(entry.text)
        return entry.text.upper()

    steps = [step for n in range(5) for step in (ScriptStep.call("check_menu"), ScriptStep.respond(), ScriptStep.say(f"Line {n}."))]
    model = ScriptedModel(steps, style=ScriptStyle.ENVELOPE)
    tools = [dataclasses.replace(TOOLS[0], handler=check_menu)]
    agent = Agent(model, tools=tools, render_response=render)
    for n in range(4):
        await agent.respond(f"Question {n}?")
    assert rendered == ["Line 0.", "Line 1.", "Line 2."]  # each earlier reply once, though 3 steps x 3 turns showed them
    assert "Assistant: LINE 2.\nUser: Question 3?" in model.requests[-1].prompt
    agent.history = [PromptEntry("Fresh start"), ResponseEntry("Line 9.")]  # a replaced history renders anew
    await agent.respond("Question 4?")
    assert "User: Fresh start\nAssistant: LINE 9." in model.requests[-1].prompt


def test_a_history_that_grows_is_trimmed_as_if_rendered_anew() -> None:
    turn: list[Entry] = [PromptEntry("x" * 36), ResponseEntry("y" * 26)]  # 20 + 1 tokens a turn
    history: list[Entry] = []
    shown = prompts.HistoryLines(Labels())
    blank = [PromptEntry(" "), ResponseEntry("w")]  # a blank prompt shows no line
    for turns in range(1, 6):
        history.extend(blank if turns == 3 else turn)
        shown.sync(history)  # renders the two new entries only
        for budget in (1, 21, 40, 62, 63, 200):
            assert shown.hidden(fixed_tokens=0, budget=budget) == prompts.trim_history(history, fixed_tokens=0, budget=budget)
        for hidden in range(2 * turns + 1):
            assert shown.text(hidden) == "\n".join(prompts.render_entries(history[hidden:], Labels()))
    history[-1] = ResponseEntry("z")  # a history rewritten in place is rendered anew
    shown.sync(history)
    assert shown.text(8) == "User: " + "x" * 36 + "\nAssistant: z"
    del history[2:]  # so is a shorter one
    shown.sync(history)
    assert shown.text(0) == "User: " + "x" * 36 + "\nAssistant: " + "y" * 26


def test_a_conversation_that_fits_is_never_trimmed() -> None:
    history: list[Entry] = [PromptEntry("hi"), ResponseEntry("hello")]  # "User: hi\nAssistant: hello" → 7 + 1
    assert prompts.trim_history(history, fixed_tokens=2, budget=10) == 0
    assert prompts.trim_history(history, fixed_tokens=3, budget=10, minimum_recent_turns=0) == 2
    assert prompts.trim_history([], fixed_tokens=10_000, budget=10) == 0


def test_trimming_drops_turns_only_while_over_budget() -> None:
    turn: list[Entry] = [PromptEntry("x" * 36), ResponseEntry("y" * 26)]  # "User: …\nAssistant: …" = 80 chars → 20 + 1
    history = turn * 3
    assert prompts.trim_history(history, fixed_tokens=0, budget=63) == 0
    assert prompts.trim_history(history, fixed_tokens=0, budget=62) == 2
    assert prompts.trim_history(history, fixed_tokens=0, budget=21) == 4
    assert prompts.trim_history(history, fixed_tokens=0, budget=1) == 4  # one turn always stays
    assert prompts.trim_history(history, fixed_tokens=0, budget=1, minimum_recent_turns=0) == 6


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "object", "properties": {"item": {"enum": ["ale", "stew"]}, "note": {"type": "string"}}, "required": ["item"]}, {"item": "ale"}),
        ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}, {"n": 3}),
        ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2}}, "required": ["tags"]}, {"tags": [True, True]}),
        ({"type": "object", "properties": {}}, {}),
        (True, {}),
    ],
)
def test_example_value_is_valid_for_common_schemas(schema, expected) -> None:
    from oam_actors.agent import Schema

    value = Schema.compile(schema).example()
    assert value == expected
    assert not Schema.compile(schema).validate(value)
