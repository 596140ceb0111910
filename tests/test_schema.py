"""Unit tests for the JSON Schema engine (protocol §5, §6.5, §6.10, §9 items 61-63, 73-74, 79, 84-86)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from oam_actors.agent.schema import Schema, Violation, format_violations
from oam_actors import AgentError, ErrorCode

ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "description": "menu item", "enum": ["ale", "stew", "bread"]},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["item", "quantity"],
}


def messages(schema: Any, value: Any) -> list[str]:
    return [str(v) for v in Schema.compile(schema).validate(value)]


def check_error(schema: Any, path: str = "schema") -> AgentError:
    with pytest.raises(AgentError) as caught:
        Schema.compile(schema, path=path)
    assert caught.value.code is ErrorCode.INVALID_SCHEMA
    return caught.value


# --- compile -------------------------------------------------------------------------------------


def test_compile_accepts_text_and_keeps_the_parsed_raw() -> None:
    schema = Schema.compile('{"type":"object","properties":{"a":{"type":"string"}}}')
    assert schema.raw == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schema.generation_schema == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    assert schema.warnings == ()


def test_boolean_schemas() -> None:
    anything = Schema.compile(True)
    assert anything.generation_schema is True
    assert anything.validate({"x": [1, None]}) == []
    assert anything.coerce("7") == "7"
    nothing = Schema.compile(False)
    assert [str(v) for v in nothing.validate(1)] == ["$: no value is allowed here"]
    assert messages({"properties": {"a": False}}, {"a": 1}) == ["$.a: no value is allowed here"]


def test_empty_object_is_the_closed_default_for_tools_without_parameters() -> None:
    empty = Schema.empty_object()
    assert empty.generation_schema == {"type": "object", "properties": {}, "additionalProperties": False}
    assert empty.is_empty_object
    assert empty.validate({}) == []
    assert [str(v) for v in empty.validate({"x": 1})] == [
        '$: unexpected property "x" (no properties are allowed)'
    ]
    assert empty.render_compact() == "{}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "object", "properties": {}}, True),
        ({"type": "object"}, True),
        ({}, True),
        (True, True),
        ({"description": "No arguments."}, True),
        (False, False),
        (ORDER, False),
        ({"type": "string"}, False),
        ({"type": ["object"]}, False),
        ({"type": "object", "anyOf": [{"required": ["a"]}]}, False),
        ({"$defs": {"A": {}}, "$ref": "#/$defs/A"}, False),
        ({"enum": [{}]}, False),
        ({"const": {}}, False),
        ({"items": {}}, False),
    ],
)
def test_is_empty_object(raw: Any, expected: bool) -> None:
    assert Schema.compile(raw).is_empty_object is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "array", "items": {"type": "string"}}, True),
        ({"type": ["array", "null"]}, True),
        ({"items": {"type": "string"}}, True),
        ({"$defs": {"L": {"type": "array"}}, "$ref": "#/$defs/L"}, True),
        (ORDER, False),
        (True, False),
    ],
)
def test_root_is_array(raw: Any, expected: bool) -> None:
    assert Schema.compile(raw).root_is_array is expected


@pytest.mark.parametrize(
    ("raw", "empty", "array"),
    [
        ({"type": "array", "description": "Names.", "items": {"type": "string", "description": "A name."}}, False, True),
        ({"type": "object", "description": "Nothing to fill in."}, True, False),
        (ORDER, False, False),
    ],
)
def test_schemas_of_one_outline_have_its_kind(raw: Any, empty: bool, array: bool) -> None:
    schema = Schema.compile(raw)
    others = schema.described(["Other."] * len(schema._descriptions))
    for each in (schema, others):
        assert (each.is_empty_object, each.root_is_array) == (empty, array)


# --- check errors (§5.2) -------------------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("raw", "schema_path", "reason"),
    [
        (nested(33), "#" + "/properties/a" * 33, "the schema nests more than 32 levels deep"),
        ({"properties": {"a": 5}}, "#/properties/a", "expected a schema object"),
        ({"items": None}, "#/items", "expected a schema object"),
        ({"$ref": 5}, "#/$ref", "must be a string"),
        ({"$ref": "#/$defs/Missing"}, "#/$ref", "cannot resolve '#/$defs/Missing'"),
        ({"$ref": "https://example.com/schema"}, "#/$ref", "only local references are supported"),
        ({"type": "quaternion"}, "#/type", 'unsupported type "quaternion"'),
        ({"type": ""}, "#/type", 'unsupported type ""'),
        ({"type": []}, "#/type", "must not be empty"),
        ({"type": 5}, "#/type", "unsupported type 5"),
        ({"type": ["string", 1]}, "#/type", "unsupported type 1"),
        ({"type": None}, "#/type", "unsupported type null"),
        ({"type": {"name": "string"}}, "#/type", "must be a string or an array of strings"),
        ({"properties": {"a": {"type": "strin"}}}, "#/properties/a/type", 'unsupported type "strin"'),
        ({"properties": ["a"]}, "#/properties", "must be an object"),
        ({"required": "a"}, "#/required", "must be an array of property names"),
        ({"required": ["a", 2]}, "#/required/1", "must be a string"),
        ({"additionalProperties": 5}, "#/additionalProperties", "expected a schema object"),
        ({"items": [{"type": "string"}]}, "#/items", "tuple validation"),
        ({"anyOf": {}}, "#/anyOf", "must be an array of schemas"),
        ({"oneOf": []}, "#/oneOf", "must not be empty"),
        ({"allOf": [{"type": "nope"}]}, "#/allOf/0/type", 'unsupported type "nope"'),
        ({"enum": "ale"}, "#/enum", "must be an array"),
        ({"enum": []}, "#/enum", "must not be empty"),
        ({"minimum": "one"}, "#/minimum", "must be a number"),
        ({"exclusiveMaximum": True}, "#/exclusiveMaximum", "must be a number"),
        ({"maxItems": -1}, "#/maxItems", "must be a non-negative integer"),
        ({"minLength": 1.5}, "#/minLength", "must be a non-negative integer"),
        (
            {"properties": {"a": {"minLength": "2"}}},
            "#/properties/a/minLength",
            "must be a non-negative integer",
        ),
        ({"pattern": 5}, "#/pattern", "must be a string"),
        ({"pattern": "(unclosed"}, "#/pattern", "invalid regular expression"),
        ({"pattern": r"\p{L}+"}, "#/pattern", "invalid regular expression"),
        ({"$defs": []}, "#/$defs", "must be an object"),
        ({"definitions": {"A": {"type": "wat"}}}, "#/definitions/A/type", 'unsupported type "wat"'),
        ({"properties": {"a/b~c": {"type": "x"}}}, "#/properties/a~1b~0c/type", 'unsupported type "x"'),
    ],
)
def test_check_errors_point_at_the_keyword(raw: Any, schema_path: str, reason: str) -> None:
    error = check_error(raw)
    assert error.extra == {"path": "schema", "schemaPath": schema_path}
    assert error.message.startswith("schema: ")
    assert reason in error.message
    assert error.message.endswith(f"(at {schema_path})")


def test_check_error_data_and_message() -> None:
    error = check_error({"type": "wat"}, path="tools[0].parameters")
    assert error.to_wire() == {
        "code": -32007,
        "message": 'tools[0].parameters: unsupported type "wat" (at #/type)',
        "data": {"code": "invalid_schema", "path": "tools[0].parameters", "schemaPath": "#/type"},
    }


def test_nesting_of_32_levels_is_allowed() -> None:
    assert Schema.compile(nested(32)).warnings == ()


@pytest.mark.parametrize("raw", [5, None, [1], "[1]", "not json", '"text"'])
def test_a_root_that_is_not_a_schema_is_invalid(raw: Any) -> None:
    error = check_error(raw)
    assert error.extra["schemaPath"] == "#"


def test_unparsable_text_says_so() -> None:
    assert "the schema is not valid JSON" in check_error("{nope").message


# --- warnings ------------------------------------------------------------------------------------


def test_warnings_for_ignored_keywords_in_document_order() -> None:
    schema = Schema.compile(
        {
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email"},
                "n": {"type": "number", "multipleOf": 2},
            },
            "uniqueItems": True,
            "not": {"type": "null"},
            "x-custom": 1,
            "title": "T",
            "description": "D",
            "default": {},
            "examples": [],
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "x",
            "$comment": "c",
            "x-order": ["n", "email"],
        }
    )
    assert schema.warnings == (
        "#: 'uniqueItems' is not supported and is ignored",
        "#: 'not' is not supported and is ignored",
        "#/properties/email: 'format' is not supported and is ignored",
        "#/properties/n: 'multipleOf' is not supported and is ignored",
    )
    assert Schema.compile(ORDER).warnings == ()


# --- closing (§5.3) ------------------------------------------------------------------------------


def test_closing_reaches_every_schema_position() -> None:
    leaf = {"type": "object", "properties": {"x": {"type": "string"}}}
    closed_leaf = {**leaf, "additionalProperties": False}
    raw = {
        "type": "object",
        "properties": {"p": leaf},
        "$defs": {"D": leaf},
        "definitions": {"E": leaf},
        "additionalProperties": {"type": "object", "properties": {"q": leaf}},
        "anyOf": [leaf, {"type": "null"}],
        "oneOf": [leaf],
        "not": leaf,
        "items": leaf,
    }
    original = copy.deepcopy(raw)
    closed = Schema.compile(raw).generation_schema
    assert raw == original
    assert closed["properties"]["p"] == closed_leaf
    assert closed["$defs"]["D"] == closed_leaf
    assert closed["definitions"]["E"] == closed_leaf
    assert closed["additionalProperties"] == {
        "type": "object",
        "properties": {"q": closed_leaf},
        "additionalProperties": False,
    }
    assert closed["anyOf"] == [closed_leaf, {"type": "null"}]
    assert closed["oneOf"] == [closed_leaf]
    assert closed["not"] == closed_leaf
    assert closed["items"] == closed_leaf


def test_all_of_members_stay_open_but_their_children_close() -> None:
    raw = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "object", "properties": {"x": {}}}}},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    }
    closed = Schema.compile(raw).generation_schema
    first, second = closed["allOf"]
    assert "additionalProperties" not in first
    assert "additionalProperties" not in second
    assert first["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in closed
    assert Schema.compile(raw).validate({"a": {"x": 1}, "b": 2}) == []


def test_explicit_additional_properties_is_kept() -> None:
    kept = Schema.compile({"type": "object", "properties": {"a": {}}, "additionalProperties": True})
    assert kept.generation_schema["additionalProperties"] is True
    typed = Schema.compile({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}})
    assert typed.generation_schema["additionalProperties"] == {"type": "integer"}
    assert Schema.compile({"type": "object"}).generation_schema == {"type": "object"}


# --- coercion (§5.4) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"type": "integer"}, "2", 2),
        ({"type": "integer"}, " 3.0 ", 3),
        ({"type": "integer"}, "-1e2", -100),
        ({"type": "integer"}, 2.0, 2),
        ({"type": "integer"}, "2.5", "2.5"),
        ({"type": "integer"}, "many", "many"),
        ({"type": "integer", "maximum": 10}, 50, 50),
        ({"type": "number"}, "2", 2),
        ({"type": "number"}, "1.5", 1.5),
        ({"type": "number"}, "1e999", "1e999"),
        ({"type": "number"}, "nan", "nan"),
        ({"type": "number"}, 2.0, 2.0),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "boolean"}, " yes", True),
        ({"type": "boolean"}, "False", False),
        ({"type": "boolean"}, "No", False),
        ({"type": "boolean"}, "maybe", "maybe"),
        ({"type": "boolean"}, 1, 1),
        ({"type": "string"}, 42, "42"),
        ({"type": "string"}, 2.5, "2.5"),
        ({"type": "string"}, True, "true"),
        ({"type": "string"}, {"a": 1}, {"a": 1}),
        ({"type": "object"}, '{"a": 1}', {"a": 1}),
        ({"type": "object"}, "[1]", "[1]"),
        ({"type": "array"}, "[1, 2]", [1, 2]),
        ({"type": "array"}, "solo", ["solo"]),
        ({"type": "array"}, 5, [5]),
        ({"type": "array", "items": {"type": "integer"}}, '["1", 2]', [1, 2]),
        ({"type": "null"}, "None", None),
        ({"type": "null"}, "null", None),
        ({"type": ["integer", "boolean"]}, "true", True),
        ({"type": ["boolean", "string"]}, 7, "7"),
        ({"type": "string", "nullable": True}, None, None),
        ({"type": "integer", "nullable": True}, "none", None),
        ({"type": "integer"}, None, None),
    ],
)
def test_type_coercion(schema: dict[str, Any], value: Any, expected: Any) -> None:
    coerced = Schema.compile(schema).coerce(value)
    assert coerced == expected
    assert type(coerced) is type(expected)


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"enum": ["ale", "stew", "bread"]}, "Ale ", "ale"),
        ({"enum": ["ale", "stew", "bread"]}, "STEW", "stew"),
        ({"enum": ["dark ale", "pale"]}, "Dark_Ale", "dark ale"),
        ({"enum": ["dark ale", "pale"]}, "dark--  ale", "dark ale"),
        ({"enum": ["dark ale", "Dark-Ale"]}, "DARK ALE", "DARK ALE"),
        ({"enum": ["dark ale", "Dark-Ale"]}, "Dark-Ale", "Dark-Ale"),
        ({"enum": [1, "one"]}, 1.0, 1.0),
        ({"enum": ["wine"]}, "mead", "mead"),
        ({"const": "yes"}, " YES", "yes"),
        ({"const": "yes"}, "no", "no"),
        ({"type": "string", "enum": ["1", "2"]}, 2, "2"),
    ],
)
def test_enum_and_const_coercion(schema: dict[str, Any], value: Any, expected: Any) -> None:
    assert Schema.compile(schema).coerce(value) == expected


def test_object_coercion_renames_drops_and_recurses() -> None:
    schema = Schema.compile(
        {
            "type": "object",
            "properties": {
                "flag": {"type": "boolean"},
                "label": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "nested": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "maybe": {"type": "string"},
                "itemName": {"type": "string"},
            },
            "required": ["flag", "label", "tags", "nested", "itemName"],
        }
    )
    value = {
        "flag": "yes",
        "label": 42,
        "tags": "solo",
        "nested": '{"x": "1.5"}',
        "maybe": None,
        "item_name": "x",
        "extra": 1,
    }
    coerced = schema.coerce(value)
    assert coerced == {"flag": True, "label": "42", "tags": ["solo"], "nested": {"x": 1.5}, "itemName": "x"}
    assert list(coerced) == ["flag", "label", "tags", "nested", "itemName"]
    assert schema.validate(coerced) == []
    assert value["flag"] == "yes" and "extra" in value  # the input is untouched


def test_null_is_kept_for_required_or_nullable_properties() -> None:
    schema = Schema.compile(
        {
            "properties": {
                "a": {"type": "string"},
                "b": {"type": ["string", "null"]},
                "c": {"type": "string"},
            },
            "required": ["c"],
        }
    )
    assert schema.coerce({"a": None, "b": None, "c": None}) == {"b": None, "c": None}


def test_renaming_uses_each_declared_name_once_and_never_an_existing_key() -> None:
    schema = Schema.compile({"properties": {"item_name": {}, "Count": {}}, "additionalProperties": True})
    assert schema.coerce({"itemName": 1, "ITEM-NAME": 2, "count": 3}) == {
        "item_name": 1,
        "ITEM-NAME": 2,
        "Count": 3,
    }
    assert schema.coerce({"itemName": 1, "item_name": 2}) == {"itemName": 1, "item_name": 2}


def test_unknown_keys_are_dropped_only_from_closed_complete_objects() -> None:
    closed = Schema.compile(ORDER)
    assert closed.coerce({"item": "bread", "quantity": 1, "note": "warm"}) == {"item": "bread", "quantity": 1}
    assert closed.coerce({"item_name": "bread", "quantity": 1}) == {"item_name": "bread", "quantity": 1}
    open_ = Schema.compile({**ORDER, "additionalProperties": True})
    assert open_.coerce({"item": "ale", "quantity": 1, "note": "warm"}) == {
        "item": "ale",
        "quantity": 1,
        "note": "warm",
    }
    typed = Schema.compile({"type": "object", "additionalProperties": {"type": "integer"}})
    assert typed.coerce({"a": "1", "b": "x"}) == {"a": 1, "b": "x"}


def test_ref_and_all_of_coercion() -> None:
    schema = Schema.compile(
        {
            "$defs": {"Qty": {"type": "integer"}},
            "allOf": [
                {"properties": {"n": {"$ref": "#/$defs/Qty"}}},
                {"properties": {"flag": {"type": "boolean"}}},
            ],
        }
    )
    assert schema.coerce({"n": "4", "flag": "no"}) == {"n": 4, "flag": False}


def test_any_of_coercion_keeps_accepted_values_and_tries_branches_in_order() -> None:
    choice = Schema.compile({"anyOf": [{"type": "integer"}, {"type": "boolean"}]})
    assert choice.coerce("7") == 7
    assert choice.coerce("true") is True
    assert choice.coerce(True) is True
    assert choice.coerce("seven") == "seven"
    either = Schema.compile({"oneOf": [{"type": "string"}, {"type": "integer"}]})
    assert either.coerce("7") == "7"
    # The other keywords of a node with alternatives are not applied.
    mixed = Schema.compile({"anyOf": [{"type": "string"}], "enum": ["a"]})
    assert mixed.coerce("A") == "A"


def test_coerce_never_mutates_its_input() -> None:
    value = {"tags": "a", "n": "1", "free": {"k": ["2"]}}
    original = copy.deepcopy(value)
    schema = Schema.compile(
        {
            "properties": {"tags": {"type": "array"}, "n": {"type": "integer"}},
            "additionalProperties": {"properties": {"k": {"type": "array", "items": {"type": "integer"}}}},
        }
    )
    assert schema.coerce(value) == {"tags": ["a"], "n": 1, "free": {"k": [2]}}
    assert value == original


# --- validation messages (§5.5) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (
            ORDER,
            {"item": "ale", "quantity": "two"},
            ['$.quantity: expected an integer, got a string ("two")'],
        ),
        (ORDER, {"item": "ale", "quantity": 2.5}, ["$.quantity: expected an integer, got a number (2.5)"]),
        (ORDER, {"item": "ale", "quantity": 2.0}, []),
        (ORDER, [], ["$: expected an object, got an array"]),
        (ORDER, None, ["$: expected an object, got null"]),
        ({"type": "array"}, {}, ["$: expected an array, got an object"]),
        ({"type": "number"}, True, ["$: expected a number, got a boolean (true)"]),
        ({"type": "boolean"}, 0, ["$: expected a boolean, got a number (0)"]),
        (
            {"properties": {"x": {"type": ["string", "null"]}}},
            {"x": True},
            ["$.x: expected a string or null, got a boolean (true)"],
        ),
        (
            ORDER,
            {"item": "wine", "quantity": 12},
            [
                '$.item: must be one of "ale", "stew", "bread"; got "wine"',
                "$.quantity: must be at most 10; got 12",
            ],
        ),
        (ORDER, {"item": "ale", "quantity": 0}, ["$.quantity: must be at least 1; got 0"]),
        ({"const": "yes"}, "no", ['$: must be exactly "yes"; got "no"']),
        ({"enum": [1, "one", None]}, 1.0, []),
        ({"enum": [1, "one", None]}, None, []),
        ({"enum": [1]}, True, ["$: must be one of 1; got true"]),
        ({"const": {"a": [1, 2.0]}}, {"a": [1.0, 2]}, []),
        ({"type": "number", "exclusiveMinimum": 0}, 0, ["$: must be greater than 0; got 0"]),
        ({"type": "number", "exclusiveMaximum": 1.5}, 1.5, ["$: must be less than 1.5; got 1.5"]),
        ({"type": "number", "minimum": 0.5, "maximum": 1e3}, 1000.5, ["$: must be at most 1000; got 1000.5"]),
        ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5}, 0.5, []),
        ({"type": "string", "minLength": 2}, "a", ["$: must have at least 2 characters; got 1"]),
        ({"type": "string", "maxLength": 1}, "ab", ["$: must have at most 1 character; got 2"]),
        ({"type": "string", "maxLength": 2}, "🍺🍺", []),
        ({"type": "string", "minLength": 3}, "🍺🍺", ["$: must have at least 3 characters; got 2"]),
        ({"type": "string", "pattern": "^[a-z]+$"}, "abC", ['$: must match the pattern ^[a-z]+$; got "abC"']),
        ({"type": "string", "pattern": "[0-9]"}, "room 7", []),
        ({"type": "array", "minItems": 1}, [], ["$: must have at least 1 item; got 0"]),
        ({"type": "array", "maxItems": 2}, [1, 2, 3], ["$: must have at most 2 items; got 3"]),
        (
            {"type": "array", "items": {"type": "integer"}},
            [1, "x"],
            ['$[1]: expected an integer, got a string ("x")'],
        ),
        (
            ORDER,
            {"item": "ale", "colour": "red"},
            [
                '$: missing required property "quantity"',
                '$: unexpected property "colour" (allowed: "item", "quantity")',
            ],
        ),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            {"a": 1, "b": "2"},
            ['$.b: expected an integer, got a string ("2")'],
        ),
        (
            {"properties": {"odd key": {"type": "string"}}},
            {"odd key": 1},
            ['$["odd key"]: expected a string, got a number (1)'],
        ),
        (
            {"properties": {"1st": {"type": "string"}, "": {"type": "string"}}},
            {"1st": 1, "": 2},
            ['$["1st"]: expected a string, got a number (1)', '$[""]: expected a string, got a number (2)'],
        ),
        (
            {
                "properties": {
                    "items": {"type": "array", "items": {"properties": {"name": {"type": "string"}}}}
                }
            },
            {"items": [{"name": 5}]},
            ["$.items[0].name: expected a string, got a number (5)"],
        ),
    ],
)
def test_violation_messages(schema: Any, value: Any, expected: list[str]) -> None:
    assert messages(schema, value) == expected


def test_previews_are_cut_after_60_characters() -> None:
    long = "x" * 70
    assert messages({"const": "y"}, long) == [f'$: must be exactly "y"; got "{"x" * 56}…']
    exact = "x" * 58  # 60 characters of JSON text
    assert messages({"const": "y"}, exact) == [f'$: must be exactly "y"; got "{exact}"']
    assert messages({"type": "integer"}, long) == [f'$: expected an integer, got a string ("{"x" * 56}…)']


def test_format_violations_shows_four_then_counts() -> None:
    found = [Violation(f"$.v{i}", "bad") for i in range(6)]
    assert str(found[0]) == "$.v0: bad"
    assert format_violations(found[:2]) == "$.v0: bad; $.v1: bad"
    assert format_violations(found[:4]) == "$.v0: bad; $.v1: bad; $.v2: bad; $.v3: bad"
    assert format_violations(found) == "$.v0: bad; $.v1: bad; $.v2: bad; $.v3: bad; and 2 more"
    assert format_violations([]) == ""


# --- composition and nullable --------------------------------------------------------------------


def test_any_of() -> None:
    either = {
        "anyOf": [
            {"type": "string"},
            {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
        ]
    }
    assert messages(either, "hi") == []
    assert messages(either, {"x": 1}) == []
    assert messages(either, {"x": "1"}) == [
        '$: does not match any of the 2 allowed alternatives (closest: $.x: expected a number, got a string ("1"))'
    ]


def test_closest_alternative_prefers_the_fewest_problems_of_the_right_type() -> None:
    schema = {
        "anyOf": [
            {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}},
            {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        ]
    }
    assert messages(schema, {"a": "1", "b": "2", "c": "3"}) == [
        "$: does not match any of the 2 allowed alternatives (closest: "
        '$.a: expected an integer, got a string ("1"); $.b: expected an integer, got a string ("2"); and 1 more)'
    ]


def test_one_of() -> None:
    exactly_one = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert messages(exactly_one, 3) == ["$: matches 2 of the alternatives but must match exactly one"]
    assert messages(exactly_one, 3.5) == []
    assert messages(exactly_one, "x") == [
        '$: does not match any of the 2 allowed alternatives (closest: $: expected an integer, got a string ("x"))'
    ]


def test_all_of() -> None:
    both = {"allOf": [{"type": "object", "required": ["a"]}, {"required": ["b"]}]}
    assert messages(both, {"a": 1}) == ['$: missing required property "b"']
    assert messages(both, {"a": 1, "b": 2}) == []


def test_nullable() -> None:
    assert messages({"type": "string", "nullable": True}, None) == []
    assert messages({"type": "string", "nullable": True}, 1) == [
        "$: expected a string or null, got a number (1)"
    ]
    assert messages({"enum": ["a"], "nullable": True}, None) == []
    assert messages({"type": "string", "nullable": False}, None) == ["$: expected a string, got null"]


# --- $ref ----------------------------------------------------------------------------------------


def test_refs_to_defs_definitions_and_pointers() -> None:
    schema = {
        "$defs": {"Pet": {"enum": ["cat"]}, "a/b": {"type": "integer"}, "t~x": {"type": "boolean"}},
        "definitions": {"Id": {"type": "integer"}},
        "properties": {
            "pet": {"$ref": "#/$defs/Pet"},
            "id": {"$ref": "#/definitions/Id"},
            "slash": {"$ref": "#/$defs/a~1b"},
            "tilde": {"$ref": "#/$defs/t~0x"},
            "same": {"$ref": "#/properties/id"},
            "first": {"$ref": "#/allOf/0"},
        },
        "allOf": [{"type": "object"}],
    }
    assert messages(schema, {"pet": "dog", "id": "x", "slash": "x", "tilde": 1, "same": "x", "first": 1}) == [
        '$.pet: must be one of "cat"; got "dog"',
        '$.id: expected an integer, got a string ("x")',
        '$.slash: expected an integer, got a string ("x")',
        "$.tilde: expected a boolean, got a number (1)",
        '$.same: expected an integer, got a string ("x")',
        "$.first: expected an object, got a number (1)",
    ]


def test_recursive_refs() -> None:
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert messages(tree, {"name": "root", "children": [{"name": "leaf", "children": []}]}) == []
    assert messages(tree, {"name": "root", "children": [{}]}) == [
        '$.children[0]: missing required property "name"'
    ]
    whole = {"properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}}
    assert messages(whole, {"next": {"next": {"v": "x"}}}) == [
        '$.next.next.v: expected an integer, got a string ("x")'
    ]
    assert Schema.compile(whole).coerce({"next": {"v": "2"}}) == {"next": {"v": 2}}


def chain(hops: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(1, hops)}
    defs[f"d{hops}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d1"}


def test_refs_are_followed_for_16_hops_only() -> None:
    assert messages(chain(16), "x") == ['$: expected an integer, got a string ("x")']
    assert Schema.compile(chain(16)).coerce("3") == 3
    # One hop more and resolution stops on a bare reference, which constrains nothing.
    assert messages(chain(17), "x") == []


def test_a_reference_loop_terminates() -> None:
    loop = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    schema = Schema.compile(loop)
    assert schema.validate(1) == []
    assert schema.coerce("1") == "1"
    assert schema.order({"b": 1, "a": 2}) == {"b": 1, "a": 2}
    assert schema.render_compact() == "a"


def test_a_long_chain_of_nested_references_is_checked_only_as_deep_as_the_value() -> None:
    # Each definition nests the next inside a property: compiled eagerly, 2,000 of them would
    # exhaust the recursion limit; checked as values go, a shallow value never reaches them.
    defs: dict[str, Any] = {
        f"d{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(2000)
    }
    defs["d2000"] = {"type": "integer"}
    schema = Schema.compile({"$defs": defs, "$ref": "#/$defs/d0"})
    assert messages({"$defs": defs, "$ref": "#/$defs/d0"}, {"next": {"next": "x"}}) == [
        '$.next.next: expected an object, got a string ("x")'
    ]
    assert schema.coerce({"next": {"next": {}}}) == {"next": {"next": {}}}


def test_a_schema_checks_many_values_alike() -> None:
    # The compiled checks are kept with the schema: later values are judged exactly as the first.
    schema = Schema.compile({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["n"]})
    for _ in range(3):
        assert [str(v) for v in schema.validate({"n": 4})] == ["$.n: must be at most 3; got 4"]
        assert [str(v) for v in schema.validate({})] == ['$: missing required property "n"']
        assert schema.conform({"n": "2"}) == ({"n": 2}, [])


def test_equal_documents_share_one_compiled_schema_that_owns_its_values() -> None:
    raw = {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]}
    first = Schema.compile(raw, path="tools[0].parameters")
    assert Schema.compile(copy.deepcopy(raw)) is first
    assert Schema.compile(json.dumps(raw)) is first
    raw["required"].append("key")  # the caller's value stays the caller's
    assert first.raw == {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]}
    # Not plain JSON (a tuple is no array to the engine): compiled on its own, as given.
    odd = {"type": "string", "x-tags": ("a", "b")}
    assert Schema.compile(odd).raw is odd
    assert Schema.compile(odd) is not Schema.compile(odd)
    with pytest.raises(AgentError) as caught:
        Schema.compile({"type": "strin"}, path="tools[3].parameters")
    assert caught.value.extra == {"path": "tools[3].parameters", "schemaPath": "#/type"}


def test_schemas_differing_in_descriptions_check_alike_and_references_still_reach_them() -> None:
    def reply(name: str) -> dict[str, Any]:
        return {"type": "object", "title": name, "properties": {
            "line": {"type": "string", "description": f"What {name} says.", "x-hint": name, "maxLength": 5},
        }, "required": ["line"]}

    for name in ("Mira", "Gorm"):
        assert messages(reply(name), {"line": "Hello there"}) == ["$.line: must have at most 5 characters; got 11"]
        assert Schema.compile(reply(name)).coerce({"Line": 2}) == {"line": "2"}
        # Rendered once per shape, each with its own description.
        assert Schema.compile(reply(name)).render_lines() == f'- "line": string (at most 5 chars), What {name} says.'
    # A placeholder-like name in a property key: that document is rendered on its own.
    odd = {"type": "object", "properties": {"\x000\x00": {"type": "string", "description": "d"}}}
    assert Schema.compile(odd).render_compact() == '{"\x000\x00"?: string (d)}'
    # A reference may point into an annotation: that document is checked on its own.
    pointed = {"type": "object", "properties": {
        "a": {"$ref": "#/properties/b/examples/0"}, "b": {"examples": [{"type": "integer"}]},
    }}
    assert messages(pointed, {"a": "x"}) == ['$.a: expected an integer, got a string ("x")']


def test_described_is_the_schema_compiled_with_other_descriptions_sharing_its_compiled_parts() -> None:
    def reply(name: str) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "mood": {"type": "string", "description": f"How {name} feels.", "enum": ["calm", "cross"]},
            "tags": {"type": "array", "items": {"type": "string", "description": f"{name}'s tag"}},
            "line": {"anyOf": [{"type": "string", "description": f"{name} says"}, {"type": "null"}]},
        }, "required": ["mood"]}

    template = Schema.compile(reply("X"))
    gorm = template.described(["How Gorm feels.", "Gorm's tag", "Gorm says"])
    alone = Schema.compile(reply("Gorm"))
    assert gorm == alone  # raw, the closed schema and the warnings
    assert gorm.render_lines() == alone.render_lines()
    assert gorm.render_compact() == alone.render_compact()
    assert gorm.conform({"Mood": "Calm", "tags": [1], "x": 0}) == alone.conform({"Mood": "Calm", "tags": [1], "x": 0})
    assert template.render_compact() != gorm.render_compact()  # the template keeps its own
    with pytest.raises(ValueError):
        template.described(["one"])
    with pytest.raises(ValueError):  # a reference: no shared outline
        Schema.compile({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a", "description": "d"}).described(["e"])


def test_schemas_differing_only_in_x_order_order_each_their_own_way() -> None:
    first = Schema.compile({"properties": {"a": {}, "b": {}}, "x-order": ["b", "a"], "description": "one"})
    second = Schema.compile({"properties": {"a": {}, "b": {}}, "x-order": ["a", "b"], "description": "two"})
    assert list(first.order({"a": 1, "b": 2})) == ["b", "a"]
    assert list(second.order({"b": 2, "a": 1})) == ["a", "b"]


# --- key order (§5.6) ----------------------------------------------------------------------------


def test_key_order_item_86() -> None:
    schema = Schema.compile(
        {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "choice": {"type": "string"},
                "details": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    },
                },
            },
        }
    )
    ordered = schema.order({"extra": 0, "details": [{"b": 2, "a": 1}], "choice": "x", "reasoning": "r"})
    assert (
        json.dumps(ordered, separators=(",", ":"))
        == '{"reasoning":"r","choice":"x","details":[{"a":1,"b":2}],"extra":0}'
    )


def test_x_order_all_of_any_of_and_additional_properties() -> None:
    x_order = Schema.compile({"properties": {"a": {}, "b": {}, "c": {}}, "x-order": ["c", "a"]})
    assert list(x_order.order({"a": 1, "b": 2, "c": 3})) == ["c", "a", "b"]
    merged = Schema.compile(
        {"properties": {"z": {}}, "allOf": [{"properties": {"y": {}, "z": {}}}, {"properties": {"x": {}}}]}
    )
    assert list(merged.order({"x": 1, "y": 2, "z": 3, "w": 4})) == ["z", "y", "x", "w"]
    union = Schema.compile(
        {"anyOf": [{"properties": {"p": {}, "q": {}}}, {"properties": {"y": {}, "x": {}}}]}
    )
    assert list(union.order({"x": 2, "y": 1})) == ["y", "x"]
    mapping = Schema.compile({"type": "object", "additionalProperties": {"properties": {"a": {}, "b": {}}}})
    assert list(mapping.order({"k": {"b": 1, "a": 2}})["k"]) == ["a", "b"]


def test_conform_orders_only_valid_values() -> None:
    schema = Schema.compile({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    assert list(schema.conform({"b": "1", "a": 2})[0]) == ["a", "b"]
    value, found = schema.conform({"b": "x", "a": 2})
    assert list(value) == ["b", "a"]
    assert [str(v) for v in found] == ['$.b: expected an integer, got a string ("x")']


FLAT = {
    "type": "object",
    "properties": {
        "mood": {"type": "string", "enum": ["calm", "angry"], "description": "how"},
        "line": {"type": "string"},
        "options": {"type": "array", "items": {"type": "string"}},
        "ends": {"type": "boolean", "title": "done"},
    },
    "required": ["mood", "line"],
}


@pytest.mark.parametrize(
    "value",
    [
        {"line": "hi", "mood": "calm"},
        {"mood": "calm", "line": "hi", "options": ["a", "b"], "ends": False},
        {"mood": "Calm", "line": "hi"},
        {"mood": "calm", "line": 5},
        {"mood": "calm", "line": "hi", "ends": "true"},
        {"mood": "calm", "line": "hi", "ends": None},
        {"mood": "calm", "line": "hi", "options": ["a", 1]},
        {"mood": "calm", "line": "hi", "extra": 1},
        {"mood": "calm", "line": "hi", "options": [], "ends": True, "extra": 1},
        {"mood": "calm", "line": "hi", "options": [], "Ends": True},
        {"mood": "calm", "line": "hi", "options": [], "ends": True, "Ends": False},
        {"mood": "calm", "Line": "hi"},
        {"mood": "calm"},
        ["calm"],
        "calm",
        None,
    ],
)
def test_conform_of_a_flat_object_matches_coerce_validate_order(value: Any) -> None:
    """conform's one-pass path for flat objects answers as its three steps would."""
    schema = Schema.compile(FLAT)
    kept = copy.deepcopy(value)
    coerced = schema.coerce(value)
    found = schema.validate(coerced)
    expected = (coerced, found) if found else (schema.order(coerced), found)
    got = schema.conform(value)
    assert json.dumps(got[0]) == json.dumps(expected[0])
    assert [str(v) for v in got[1]] == [str(v) for v in expected[1]]
    assert value == kept
    if isinstance(value, dict) and isinstance(value.get("options"), list):
        assert got[0]["options"] is not value["options"]


# --- rendering (§5.7) ----------------------------------------------------------------------------


def test_compact_rendering() -> None:
    assert Schema.compile(ORDER).render_compact() == (
        '{"item": one of "ale", "stew", "bread" (menu item), "quantity": integer 1-10}'
    )
    rich = Schema.compile(
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "note": {"type": ["string", "null"], "description": "optional note"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$", "minLength": 3, "maxLength": 3},
                "mode": {"const": "fast"},
                "ok": {"type": "boolean"},
                "target": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
                "score": {"type": "number", "maximum": 5, "exclusiveMinimum": 0.5},
                "one": {"enum": [1]},
                "map": {"type": "object", "additionalProperties": {"type": "integer"}},
                "both": {"allOf": [{"type": "string"}, {"minLength": 1, "type": "string"}]},
                "list": {"type": "array", "minItems": 1, "maxItems": 4},
                "pair": {"items": {}, "minItems": 2, "maxItems": 2},
                "free": {},
                "none": False,
            },
            "required": ["tags", "ok"],
        }
    )
    assert rich.render_compact() == (
        '{"tags": [string, …] (at most 3 items), "note"?: string or null (optional note), '
        '"code"?: string matching /^[A-Z]{3}$/ (exactly 3 chars), "mode"?: exactly "fast", "ok": true or false, '
        '"target"?: integer >= 0 or string, "score"?: number <= 5 > 0.5, "one"?: exactly 1, '
        '"map"?: {[key: string]: integer}, "both"?: string and also string (at least 1 chars), '
        '"list"?: [any, …] (1-4 items), "pair"?: [any, …] (exactly 2 items), "free"?: any, "none"?: never}'
    )


def test_rendering_refs_and_recursion() -> None:
    tree = Schema.compile(
        {
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                    "description": "a node",
                }
            },
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "required": ["root"],
        }
    )
    assert tree.render_compact() == '{"root": {"kids"?: [Node, …]} (a node)}'
    assert tree.render_lines() == '- "root": {"kids"?: [Node, …]}, a node'


def test_key_per_line_rendering() -> None:
    npc = Schema.compile(
        {
            "type": "object",
            "properties": {
                "emotion": {"type": "string", "enum": ["happy", "sad"]},
                "line": {"type": "string", "description": "what Mira says"},
                "endsConversation": {"type": "boolean"},
            },
            "required": ["emotion", "line"],
        }
    )
    assert npc.render_lines() == (
        '- "emotion": one of "happy", "sad"\n'
        '- "line": string, what Mira says\n'
        '- "endsConversation" (optional): true or false'
    )
    assert Schema.compile({"type": "array", "items": {"type": "integer"}}).render_lines() == "[integer, …]"
    assert Schema.empty_object().render_lines() == "{}"
    assert Schema.compile(True).render_lines() == "any"


# --- black-box expectations (§9, §6.10) ----------------------------------------------------------


def test_item_61_warnings_generation_schema_and_rendering() -> None:
    schema = Schema.compile(
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "format": "uuid"},
                "mood": {"type": "string", "enum": ["calm", "angry"]},
            },
        }
    )
    assert any("format" in warning for warning in schema.warnings)
    assert "properties" in schema.generation_schema
    assert "calm" in schema.render_lines()
    error = check_error({"type": "quaternion"})
    assert error.extra["path"] == "schema"
    assert isinstance(error.extra["schemaPath"], str)


def test_item_62_closing() -> None:
    kept = Schema.compile(
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}
    )
    assert kept.generation_schema["additionalProperties"] is True
    nested = Schema.compile(
        {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
    )
    assert nested.generation_schema["properties"]["a"]["additionalProperties"] is False


def test_item_63_tool_parameters() -> None:
    gate = Schema.compile(
        {
            "type": "object",
            "properties": {"gate": {"type": "string", "format": "uuid"}},
            "required": ["gate"],
        },
        path="tools[0].parameters",
    )
    assert gate.warnings == ("#/properties/gate: 'format' is not supported and is ignored",)
    assert check_error({"type": "wat"}, path="tools[0].parameters").extra["path"] == "tools[0].parameters"


def test_items_73_and_74_tool_arguments() -> None:
    schema = Schema.compile(ORDER)
    assert schema.conform({"item": "Ale", "quantity": "2"}) == ({"item": "ale", "quantity": 2}, [])
    _, too_many = schema.conform({"item": "ale", "quantity": 12})
    assert format_violations(too_many) == "$.quantity: must be at most 10; got 12"
    _, mead = schema.conform({"item": "mead", "quantity": 1})
    assert format_violations(mead) == '$.item: must be one of "ale", "stew", "bread"; got "mead"'


def test_item_79_structured_reply() -> None:
    reply = Schema.compile(
        {
            "type": "object",
            "properties": {
                "emotion": {"type": "string", "enum": ["happy", "sad", "angry"]},
                "line": {"type": "string"},
                "endsConversation": {"type": "boolean"},
            },
            "required": ["emotion", "line"],
        }
    )
    value, found = reply.conform({"line": "Welcome!", "endsConversation": "false", "emotion": "Happy"})
    assert found == []
    assert (
        json.dumps(value, separators=(",", ":"))
        == '{"emotion":"happy","line":"Welcome!","endsConversation":false}'
    )
    _, missing = reply.conform({"line": "Hi"})
    assert 'missing required property "emotion"' in format_violations(missing)
    names = Schema.compile({"type": "array", "items": {"type": "string"}})
    assert names.root_is_array
    assert names.conform(["Bree", "Tom"]) == (["Bree", "Tom"], [])


def test_item_84_validation_texts() -> None:
    assert messages(ORDER, {"item": "wine", "quantity": 12}) == [
        '$.item: must be one of "ale", "stew", "bread"; got "wine"',
        "$.quantity: must be at most 10; got 12",
    ]
    assert messages({"type": "integer"}, 2.0) == []
    assert messages({"type": "integer"}, 2.5) == ["$: expected an integer, got a number (2.5)"]
    assert messages({"properties": {"x": {"type": ["string", "null"]}}}, {"x": True}) == [
        "$.x: expected a string or null, got a boolean (true)"
    ]
    assert messages({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 3) == [
        "$: matches 2 of the alternatives but must match exactly one"
    ]


def test_item_85_coercion() -> None:
    schema = Schema.compile(ORDER)
    assert schema.coerce({"Item": "STEW", "quantity": "3.0"}) == {"item": "stew", "quantity": 3}
    assert schema.coerce({"item": "bread", "quantity": 1, "note": "warm"}) == {"item": "bread", "quantity": 1}
    assert list(schema.coerce({"item_name": "bread", "quantity": 1})) == ["item_name", "quantity"]
    assert (
        Schema.compile({"type": "string", "enum": ["dark ale", "Dark-Ale"]}).coerce("DARK ALE") == "DARK ALE"
    )
    choice = Schema.compile({"anyOf": [{"type": "integer"}, {"type": "boolean"}]})
    assert choice.coerce("7") == 7
    assert choice.coerce("true") is True


def test_npc_key_variants_section_6_10() -> None:
    npc = Schema.compile(
        {
            "type": "object",
            "properties": {
                "emotion": {"type": "string", "enum": ["neutral", "happy"]},
                "line": {"type": "string"},
                "player_options": {"type": "array", "items": {"type": "string"}},
                "ends_conversation": {"type": "boolean"},
            },
            "required": ["line"],
        }
    )
    value, found = npc.conform(
        {"Line": "Hi.", "playerOptions": ["Bye"], "endsConversation": "yes", "emotion": "HAPPY"}
    )
    assert found == []
    assert value == {"emotion": "happy", "line": "Hi.", "player_options": ["Bye"], "ends_conversation": True}
    assert list(value) == ["emotion", "line", "player_options", "ends_conversation"]
    assert npc.coerce({"line": "x", "Player-Options": "Bye"}) == {"line": "x", "player_options": ["Bye"]}
