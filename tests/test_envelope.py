"""The decide step's envelope parser: §6.3 and the black-box expectations §9 items 64-70."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors.agent.envelope import (
    RESPOND,
    Call,
    Invalid,
    Respond,
    argument_candidates,
    parse_envelope,
    quote_answer,
    resolve_action,
)

TOOLS = ("check_menu", "take_order")
OPTIONS = "check_menu, take_order, respond"


def parse(text: str, *, allow_respond: bool = True) -> Call | Respond | Invalid:
    return parse_envelope(text, TOOLS, allow_respond=allow_respond)


# --- item 64: finding the object ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "respond", "arguments": {}}', Respond()),
        (
            '{"action": "take_order", "arguments": {"item": "ale", "quantity": 2}}',
            Call("take_order", ({"item": "ale", "quantity": 2},)),
        ),
        ('Sure! ```json\n{"action": "check_menu"}\n```', Call("check_menu", ({},))),
        ('```\n{"action": "check_menu"}\n```', Call("check_menu", ({},))),
        ('Here:\n```json\n{"action": "check_menu"', Call("check_menu", ({},))),  # unterminated fence
        (
            "I think the best step is {'action': 'check_menu', 'arguments': {},} because.",
            Call("check_menu", ({},)),
        ),
        ('{"action":"respond","arguments":{}}{"action":"check_menu"}', Respond()),  # first object wins
        ("{action: check_menu, arguments: {}}", Call("check_menu", ({},))),
    ],
)
def test_finds_the_envelope(text: str, expected: object) -> None:
    assert parse(text) == expected


# --- item 65: synonyms and wrappers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tool":"check_menu","args":{}}', Call("check_menu", ({},))),
        ('{"tool_name":"check_menu","parameters":{}}', Call("check_menu", ({},))),
        ('{"name":"take_order","input":{"item":"ale"}}', Call("take_order", ({"item": "ale"},))),
        (
            '{"type":"function","function":{"name":"take_order",'
            '"arguments":"{\\"item\\": \\"stew\\", \\"quantity\\": 1}"}}',
            Call("take_order", ({"item": "stew", "quantity": 1},)),
        ),
        (
            '{"tool_call":{"name":"take_order","arguments":{"item":"bread"}}}',
            Call("take_order", ({"item": "bread"},)),
        ),
        ('{"tool_calls":[{"function":{"name":"check_menu","arguments":"{}"}}]}', Call("check_menu", ({},))),
        (
            '{"action":{"name":"take_order","arguments":{"item":"ale"}}}',
            Call("take_order", ({"item": "ale"},)),
        ),
        ('{"action":{"tool":"check_menu"}}', Call("check_menu", ({},))),
        # Three wrapper levels are unwrapped.
        ('{"envelope":{"step":{"tool_call":{"action":"check_menu"}}}}', Call("check_menu", ({},))),
        (
            '{"function_call":{"function_name":"take_order","tool_input":{"item":"ale"}}}',
            Call("take_order", ({"item": "ale"},)),
        ),
    ],
)
def test_synonyms_and_wrappers(text: str, expected: Call) -> None:
    assert parse(text) == expected


def test_unwrapping_stops_after_three_levels() -> None:
    four = '{"call":{"call":{"call":{"call":{"action":"check_menu"}}}}}'
    assert parse(four) == Invalid('the JSON object has no "action"')


@pytest.mark.parametrize(
    "key",
    [
        "action", "tool", "toolName", "name", "function", "functionName", "call", "next_action", "next",
        "step", "command", "use", "choice", "decision", "tool_to_use", "selected_tool", "TOOL-NAME",
    ],
)  # fmt: skip
def test_every_action_key(key: str) -> None:
    assert parse(f'{{"{key}": "take_order", "x": 0}}') == Call("take_order", ({"x": 0},))


@pytest.mark.parametrize(
    "key",
    [
        "arguments", "args", "parameters", "params", "input", "inputs", "tool_input", "action_input",
        "argument", "tool_arguments", "toolArgs", "function_arguments",
    ],
)  # fmt: skip
def test_every_argument_key(key: str) -> None:
    assert parse(f'{{"action": "take_order", "{key}": {{"item": "ale"}}}}') == Call(
        "take_order", ({"item": "ale"},)
    )


def test_action_keys_are_tried_in_priority_order() -> None:
    # "name" is not a tool, "tool" is: the resolving field wins whatever the member order.
    assert parse('{"name": "Mira", "tool": "check_menu"}') == Call("check_menu", ({"name": "Mira"},))
    # Two resolving fields: "action" outranks "tool".
    assert parse('{"tool": "take_order", "action": "check_menu"}') == Call(
        "check_menu", ({"tool": "take_order"},)
    )


def test_argument_keys_are_tried_in_priority_order() -> None:
    found = parse('{"action": "take_order", "params": {"b": 2}, "args": {"a": 1}}')
    assert found == Call("take_order", ({"a": 1},))


# --- item 66: respond words -----------------------------------------------------------------------

_RESPOND_WORDS = [
    "respond", "respond_directly", "reply", "answer", "final", "final_answer", "none", "no_tool", "talk",
    "say", "speak", "chat", "response", "direct_response", "respond_to_user", "reply_to_user", "finish",
    "done", "no_action", "nothing", "direct_reply", "reply_directly", "answer_directly",
    "Respond", "respondDirectly", "FINAL-ANSWER", "No Tool",
]  # fmt: skip


@pytest.mark.parametrize("word", _RESPOND_WORDS)
def test_respond_words(word: str) -> None:
    assert parse(f'{{"action": "{word}"}}') == Respond()
    assert resolve_action(word, TOOLS, allow_respond=True) == RESPOND


def test_respond_with_text() -> None:
    assert parse('{"respond": "Welcome!"}') == Respond("Welcome!")
    assert parse('{"reply": "  "}') == Respond()
    assert parse('{"action": "respond", "arguments": {"text": "Hello there!"}}') == Respond()


def test_user_tool_named_like_a_respond_word_wins() -> None:
    assert parse_envelope('{"action":"reply"}', ["reply"], allow_respond=True) == Call("reply", ({},))
    assert parse_envelope('{"reply": {"text": "hi"}}', ["reply"], allow_respond=True) == Call(
        "reply", ({"text": "hi"},)
    )
    assert resolve_action("reply", ["reply"], allow_respond=True) == "reply"


# --- item 67: name matching and bare words --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("check_menu", "check_menu"),
        ("check_menu()", "check_menu"),
        ("Check Menu", "check_menu"),
        ("functions.check_menu", "check_menu"),
        ("tools.check_menu", "check_menu"),
        ("tool:check_menu", "check_menu"),
        ("`check_menu`", "check_menu"),
        ("**check_menu**", "check_menu"),
        ("takeOrder", "take_order"),
        ("TAKE-ORDER", "take_order"),
        ("TakeOrder", "take_order"),
        ("take order.", "take_order"),
        ("CHECKMENU", "check_menu"),  # same normalised key
        ("order_food", None),
        ("", None),
        ("()", None),
    ],
)
def test_resolve_action(name: str, expected: str | None) -> None:
    assert resolve_action(name, TOOLS, allow_respond=True) == expected


def test_resolve_action_respond_only_when_allowed() -> None:
    assert resolve_action("respond", TOOLS, allow_respond=False) is None
    assert resolve_action("take_order", ["check_menu"], allow_respond=True) is None  # only offered tools


@pytest.mark.parametrize("tools", [TOOLS, ("reply", "take_order"), ("tools.x", "x")])
@pytest.mark.parametrize(
    "name", ["take_order", "Check Menu", "tools.check_menu", "`take_order`", "respond", "reply", "tools.x", "x", "order_food", ""]
)
@pytest.mark.parametrize("allow_respond", [True, False])
def test_the_canonical_envelope_reads_as_the_full_interpretation_does(
    tools: tuple[str, ...], name: str, allow_respond: bool
) -> None:
    from oam_actors.agent.envelope import _interpret, _unwrap  # the reading the shortcut must agree with

    envelope = {"action": name, "arguments": {"item": "ale"}}
    text = json.dumps(envelope)
    assert parse_envelope(text, tools, allow_respond=allow_respond) == _interpret(_unwrap(envelope), tools, allow_respond)


def test_exact_name_wins_over_looser_matches() -> None:
    tools = ["takeOrder", "take_order"]
    assert resolve_action("take_order", tools, allow_respond=True) == "take_order"
    assert resolve_action("takeOrder", tools, allow_respond=True) == "takeOrder"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("check_menu", Call("check_menu", ({},))),
        ("`check_menu()`", Call("check_menu", ({},))),
        ('"Take Order"\n', Call("take_order", ({},))),
        ("```\ncheck_menu\n```", Call("check_menu", ({},))),
        ("respond.", Respond()),
        ("Welcome to the inn, traveler! What can I get you?", Invalid("the answer was not a JSON object")),
        ("check_menu\nthen take_order", Invalid("the answer was not a JSON object")),
        ("x" * 65, Invalid("the answer was not a JSON object")),
    ],
)
def test_bare_words(text: str, expected: object) -> None:
    assert parse(text) == expected


# --- item 68: argument candidates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "candidates"),
    [
        (
            '{"action":"take_order","item":"ale","quantity":2,"reasoning":"asked"}',
            ({"item": "ale", "quantity": 2},),
        ),
        (
            '{"action":"take_order","arguments":{},"item":"bread","quantity":3}',
            ({}, {"item": "bread", "quantity": 3}),
        ),
        ('{"action":"take_order","arguments":["stew"]}', ({},)),
        ('{"action":"take_order","arguments":null}', ({},)),
        ('{"action":"take_order","arguments":"  "}', ({},)),
        ('{"action":"take_order","arguments":"item is ale"}', ({},)),
        ('{"action":"take_order","arguments":5,"item":"ale"}', ({"item": "ale"},)),
        ('{"take_order": {"item": "stew", "quantity": 1}}', ({"item": "stew", "quantity": 1},)),
        ('{"take_order": "not an object"}', ({},)),
        # (a) nested in the action object, then (b) top level, then (c) the rest.
        (
            '{"action":{"name":"take_order","args":{"item":"ale"}},"arguments":{"item":"stew"},"quantity":1}',
            ({"item": "ale"}, {"item": "stew"}, {"quantity": 1}),
        ),
        # Meta keys (compared lower-cased, not normalised) are not arguments.
        (
            '{"action":"take_order","Reason":"r","thought":"t","type":"x","note":"n","why_not":1}',
            ({"why_not": 1},),
        ),
    ],
)
def test_argument_candidates(text: str, candidates: tuple[object, ...]) -> None:
    assert parse(text) == Call("take_order", candidates)


def test_copied_union_takes_the_first_alternative() -> None:
    text = '{"action": "check_menu" | "take_order" | "respond", "arguments": {}}'
    assert parse(text) == Call("check_menu", ({},))


def test_argument_candidates_for_a_named_tool() -> None:
    plain = {"item": "ale", "quantity": 1}
    assert argument_candidates(plain, "take_order") == (plain,)
    enveloped = {"action": "take_order", "arguments": plain}
    assert argument_candidates(enveloped, "take_order") == (enveloped, plain)
    assert argument_candidates({"arguments": plain}, "take_order") == ({"arguments": plain}, plain)


# --- item 69: problem texts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "allow_respond", "problem"),
    [
        ('{"action":"order_food"}', True, f'"order_food" is not an available action; use one of: {OPTIONS}'),
        (
            '{"action":"order_food"}',
            False,
            '"order_food" is not an available action; use one of: check_menu, take_order',
        ),
        (
            '{"action": "check_menu | take_order | respond"}',
            True,
            f'"check_menu | take_order | respond" is not an available action; use one of: {OPTIONS}',
        ),
        (
            '{"tool": "fly", "action": "teleport"}',
            True,
            f'"teleport" is not an available action; use one of: {OPTIONS}',
        ),
        ('{"item":"ale","quantity":2}', True, 'the JSON object has no "action"'),
        ('{"action": 5}', True, 'the JSON object has no "action"'),
        ("", True, "the answer was not a JSON object"),
        ("Welcome, traveller!", True, "the answer was not a JSON object"),
        (
            '{"action":"respond"}',
            False,
            '"respond" is not allowed now; you must call one of the tools: check_menu, take_order',
        ),
        (
            '{"respond":"Hi"}',
            False,
            '"respond" is not allowed now; you must call one of the tools: check_menu, take_order',
        ),
        (
            "respond",
            False,
            '"respond" is not allowed now; you must call one of the tools: check_menu, take_order',
        ),
    ],
)
def test_problems(text: str, allow_respond: bool, problem: str) -> None:
    assert parse(text, allow_respond=allow_respond) == Invalid(problem)


# --- item 70: truncation ------------------------------------------------------------------------


def test_truncated_envelope() -> None:
    text = '{"action": "take_order", "arguments": {"item": "ale", "quantity": 2'
    assert parse(text) == Call("take_order", ({"item": "ale", "quantity": 2},))


# --- quote_answer -------------------------------------------------------------------------------


def test_quote_answer() -> None:
    assert quote_answer("  I will\n\n  check\tthe menu.  ") == "I will check the menu."
    assert quote_answer("a" * 240) == "a" * 240
    assert quote_answer("a" * 241) == "a" * 240 + "…"
    assert quote_answer("") == ""


# --- properties ---------------------------------------------------------------------------------

_TOKENS = [
    *"{}[]\":,' \n`.*()|", "action", "tool", "arguments", "check_menu", "take_order", "respond",
    "tool_calls", "function", "null", "\"name\"", "```json\n",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(), st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)),
    st.booleans(),
)
def test_parse_envelope_never_raises(text: str, allow_respond: bool) -> None:
    result = parse(text, allow_respond=allow_respond)
    assert isinstance(result, (Call, Respond, Invalid))
    if isinstance(result, Call):
        assert result.tool in TOOLS
        assert result.candidates and all(isinstance(c, dict) for c in result.candidates)
    if isinstance(result, Respond):
        assert allow_respond
