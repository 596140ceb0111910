"""Lenient JSON: grammar, finding JSON in model output, truncation, streaming prefixes."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors.agent.lenient_json import (
    candidate_texts,
    complete_prefix,
    find_json,
    has_complete_value,
    parse_value,
)

# --- parse_value: the lenient grammar ---------------------------------------------------------


def test_standard_json_keeps_key_order() -> None:
    value = parse_value('{"z": 1, "a": [true, null, "x"], "m": {"k": 2.5}}')
    assert value == {"z": 1, "a": [True, None, "x"], "m": {"k": 2.5}}
    assert list(value) == ["z", "a", "m"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{'a': 'b'}", {"a": "b"}),  # single quotes
        ("{action: respond}", {"action": "respond"}),  # unquoted key, bare word
        ("{$id-x_1: 2}", {"$id-x_1": 2}),  # key characters
        ('{"a" = 1}', {"a": 1}),  # '=' separator
        ('{"a": 1,}', {"a": 1}),  # trailing comma
        ('{,"a": 1,, "b": 2,}', {"a": 1, "b": 2}),  # extra commas
        ("[1,,2,]", [1, 2]),
        ('{"a": 1 // note\n}', {"a": 1}),  # line comment
        ('{/* c */ "a": /* d */ 1}', {"a": 1}),  # block comments
        ('\ufeff{"a": 1}', {"a": 1}),  # BOM
        ("[True, False, None, nil, true, false, null]", [True, False, None, None, True, False, None]),
        ("{mood: very-happy.v2}", {"mood": "very-happy.v2"}),
        ("+12", 12),
        ("-12", -12),
        ("1.5e3", 1500.0),
        ("3.0", 3.0),
        (".5", 0.5),
        ('{"s": "line one\nline two"}', {"s": "line one\nline two"}),  # raw newline
        ('{"a": "x" | "y" | "z"}', {"a": "x"}),  # copied union
        ('["x" | "y", 2]', ["x", 2]),
        ('"only" | "first"', "only"),
        ("{action: check_menu | take_order}", {"action": "check_menu"}),
        ('{"a": 1, "a": 2}', {"a": 2}),
    ],
)
def test_lenient_grammar(text: str, expected: object) -> None:
    assert parse_value(text) == expected


def test_integers_and_floats_keep_their_type() -> None:
    assert type(parse_value("7")) is int
    assert type(parse_value("7.0")) is float
    assert type(parse_value("7e0")) is float


def test_escapes() -> None:
    assert parse_value(r'{"s": "a\"b\\c\né\/", "q": "it\'s"}') == {"s": 'a"b\\c\né/', "q": "it's"}
    assert parse_value(r"'it\'s'") == "it's"
    assert parse_value(r'"\u00e9\t\b\f\r"') == "é\t\b\f\r"
    assert parse_value(r'"\ud83d\ude00"') == "😀"  # a surrogate pair is one character
    assert parse_value(r'"\q"') == "q"  # unknown escapes keep the character


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        '{"a": 1} extra',
        '{"a": }',
        '{"a": 1',
        "[1, 2",
        '"open',
        '{"a" 1}',
        "{: 1}",
        "1e999",
        "--1",
        "1.2.3",
        r'"\u12"',
        r'"\uzzzz"',
        "[" * 500,
        '{"a": 1 | }',
        '"a" |',
    ],
)
def test_not_exactly_one_value_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_value(text)


def test_error_names_the_offset() -> None:
    with pytest.raises(ValueError, match="offset 9"):
        parse_value('{"a": 1} extra')


# --- candidate_texts / find_json --------------------------------------------------------------


def test_candidates_fenced_blocks_first_then_blanked_text() -> None:
    text = 'Sure!\n```json\n{"a": 1}\n```\nand ```\n[2]\n```'
    assert candidate_texts(text) == ['{"a": 1}\n', "[2]\n", text.replace("```", " ")]
    assert candidate_texts("no fences") == ["no fences"]
    assert candidate_texts('```json\n{"a": 1') == ['{"a": 1', ' json\n{"a": 1']  # unterminated fence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Sure! ```json\n{"action": "check_menu"}\n``` Let me check.', {"action": "check_menu"}),  # tagged
        ('```\n{"action": "respond"}\n```', {"action": "respond"}),  # untagged
        ('Here:\n```json\n{"action": "x"}', {"action": "x"}),  # unterminated fence
        ('```text\nignore this\n```\n{"b": 2}', {"b": 2}),  # JSON outside the fence
        (
            "I think {'action': 'check_menu', 'arguments': {},} because.",
            {"action": "check_menu", "arguments": {}},
        ),
        (
            '{"action":"respond","arguments":{}}{"action":"check_menu"}',
            {"action": "respond", "arguments": {}},
        ),
        ('I will {not json} then: {"action": "check_menu"} and {"x": 1}', {"action": "check_menu"}),
        ('{"text": "use } and { freely"}', {"text": "use } and { freely"}),  # brackets in strings
        ('Here\'s what I\'d do: {"action": "respond"}', {"action": "respond"}),  # apostrophes in prose
        ("{\"a\": \"x\", 'b': 'it}s'}", {"a": "x", "b": "it}s"}),  # a quote after ',' opens a string
    ],
)
def test_find_json_objects(text: str, expected: object) -> None:
    assert find_json(text) == expected


def test_find_json_truncated_as_last_resort() -> None:
    text = '{"action": "take_order", "arguments": {"item": "ale", "quantity": 2'
    assert find_json(text) == {"action": "take_order", "arguments": {"item": "ale", "quantity": 2}}
    assert find_json('Answer: {"emotion": "happy", "line": "Welcome, trav') == {
        "emotion": "happy",
        "line": "Welcome, trav",
    }
    assert find_json('{"a": 1, "li') == {"a": 1}  # incomplete key dropped
    assert find_json('{"a": 1, "b":') == {"a": 1}  # key without value dropped
    assert find_json('{"a": 1, "b": tr') == {"a": 1}  # incomplete literal dropped
    assert find_json('{"a": [1, 2') == {"a": [1, 2]}
    assert find_json("} ] {") == {}
    assert find_json('{"a": 1.5e') == {"a": 1.5}
    assert find_json('{"s": "caf\\u00') == {"s": "caf"}
    # A stray brace before the object does not hide it.
    assert find_json('{bad} and {"action": "x"') == {"action": "x"}


def test_find_json_arrays_only_when_allowed() -> None:
    text = 'Names: ["Bree", "Tom"] and more'
    assert find_json(text) is None
    assert find_json(text, allow_array=True) == ["Bree", "Tom"]
    assert find_json('[1, {"a": 2}]') == {"a": 2}
    assert find_json('```json\n["a", "b"]\n```', allow_array=True) == ["a", "b"]
    assert find_json('Here: ["Bree", "To', allow_array=True) == ["Bree", "To"]


def test_find_json_skips_broken_and_failed_brackets() -> None:
    assert find_json('{"a": [1} then {"b": 2}') == {"b": 2}  # wrong closer
    assert find_json('{"a": {"b": 1 x}} then {"c": 2}') == {"c": 2}  # the inner object fails too
    assert find_json("{a = 'x]'}") == {"a": "x]"}  # a quote after '=' opens a string
    deep = '{"a":' * 300 + "1" + "}" * 300
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_value(deep)
    assert isinstance(find_json(deep), dict)  # an inner object within the depth limit


@pytest.mark.parametrize("text", ["", "no json here", "} ] ", "```\n```", "{:}"])
def test_find_json_nothing(text: str) -> None:
    assert find_json(text, allow_array=True) is None


# --- complete_prefix / has_complete_value -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("Sure, here", None),
        ("{", {}),
        ('{"emo', {}),
        ('{"emotion": "ha', {"emotion": "ha"}),
        ('```json\n{"emotion": "happy", "line": "Wel', {"emotion": "happy", "line": "Wel"}),
        ('{"line": "Hi", "tags": ["a"], "mo', {"line": "Hi", "tags": ["a"]}),  # outer object, not the array
        ('{"line": "Hi"} trailing', {"line": "Hi"}),
        ('["Bree", "To', ["Bree", "To"]),
        ('{"n": -', {}),
        ('{"ok": tr', {}),
        ('{"ok": true', {"ok": True}),
        ('I { think {{"a": 1', {"a": 1}),  # prose braces skipped
        ("[" * 1000, None),  # only three unclosed openers are tried
    ],
)
def test_complete_prefix(text: str, expected: object) -> None:
    assert complete_prefix(text) == expected


@pytest.mark.parametrize(
    ("text", "allow_array", "expected"),
    [
        ('{"action": "respo', False, False),
        ('{"action": "respond"} and then prose', False, True),
        ('{"action": "x", "arguments": {}', False, False),  # only the inner object is closed
        ('prose {bad} {"action": "x"}', False, True),
        ("[1, 2]", False, False),
        ("[1, 2]", True, True),
        ("", False, False),
    ],
)
def test_has_complete_value(text: str, allow_array: bool, expected: bool) -> None:
    assert has_complete_value(text, allow_array=allow_array) is expected


# --- properties -------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=20,
)


_TOKENS = [*"{}[]\"':,=|/*` \n\\aeunlTF01.-+", "```", "json", "true", "None", "\\u"]
_jsonish = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_parse_value_round_trips_json(value: object) -> None:
    assert parse_value(json.dumps(value)) == value
    assert parse_value(json.dumps(value, ensure_ascii=False, indent=2)) == value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), _jsonish))
def test_parse_value_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_value(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), _jsonish))
def test_finders_never_raise(text: str) -> None:
    find_json(text)
    find_json(text, allow_array=True)
    complete_prefix(text)
    has_complete_value(text, allow_array=True)
    for prefix_end in range(0, len(text), 7):
        complete_prefix(text[:prefix_end])
