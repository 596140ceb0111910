"""Param accessors: values, defaults and the exact -32602 messages (reference §2)."""

from __future__ import annotations

import datetime as dt

import msgspec
import pytest

from oam_actors.bridge.params import Params, is_object_id, preview
from oam_actors.clock import wire_instant
from oam_actors import ErrorCode, ProtocolError


def message_of(call) -> str:
    with pytest.raises(ProtocolError) as caught:
        call()
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    return caught.value.message


P = Params(
    {
        "session": "gorm",
        "count": 3,
        "whole": 3.0,
        "half": 2.5,
        "flag": True,
        "none": None,
        "obj": {"toolChoice": 7, "inner": {"deep": "x"}},
        "list": [1, 2],
        "big": 2**31,
        "inf": float("inf"),
        "huge": 10**400,
        "long": "x" * 100,
    }
)


def test_values_of_the_right_type_are_returned() -> None:
    assert P.string("session") == "gorm"
    assert P.integer("count") == 3
    assert P.integer("whole") == 3 and type(P.integer("whole")) is int
    assert P.number("half") == 2.5
    assert P.number("count") == 3.0 and type(P.number("count")) is float
    assert P.boolean("flag") is True
    assert P.object("obj") == {"toolChoice": 7, "inner": {"deep": "x"}}
    assert P.array("list") == [1, 2]


def test_absent_and_null_members_give_the_default() -> None:
    assert P.string("missing") is None
    assert P.string("none", default="d") == "d"
    assert P.integer("none", default=5) == 5
    assert P.number("missing", default=0.5) == 0.5
    assert P.boolean("none", default=False) is False
    assert P.object("none") is None and P.array("missing") is None
    assert P.raw("none") is None and P.raw("missing") is None
    assert P.raw("list") == [1, 2]


@pytest.mark.parametrize("accessor", ["string", "integer", "number", "boolean", "object", "array"])
@pytest.mark.parametrize("name", ["missing", "none"])
def test_required_members_that_are_absent_or_null_are_missing(accessor: str, name: str) -> None:
    assert (
        message_of(lambda: getattr(P, accessor)(name, required=True))
        == f"Missing required parameter '{name}'."
    )


@pytest.mark.parametrize(
    ("accessor", "name", "expected"),
    [
        ("string", "count", "Parameter 'count' must be a string; got 3."),
        ("string", "obj", 'Parameter \'obj\' must be a string; got {"toolChoice":7,"inner":{"deep":"x"}}.'),
        ("integer", "half", "Parameter 'half' must be an integer; got 2.5."),
        ("integer", "flag", "Parameter 'flag' must be an integer; got true."),
        ("integer", "session", "Parameter 'session' must be an integer; got \"gorm\"."),
        ("integer", "inf", "Parameter 'inf' must be an integer; got Infinity."),
        ("number", "flag", "Parameter 'flag' must be a number; got true."),
        ("number", "inf", "Parameter 'inf' must be a number; got Infinity."),
        ("number", "huge", "Parameter 'huge' must be a number; got " + "1" + "0" * 38 + "…."),
        ("number", "list", "Parameter 'list' must be a number; got [1,2]."),
        ("boolean", "count", "Parameter 'count' must be a boolean; got 3."),
        ("object", "list", "Parameter 'list' must be an object; got [1,2]."),
        ("array", "obj", 'Parameter \'obj\' must be an array; got {"toolChoice":7,"inner":{"deep":"x"}}.'),
        ("boolean", "long", "Parameter 'long' must be a boolean; got \"" + "x" * 38 + "…."),
    ],
)
def test_wrong_types_name_the_kind_and_show_the_value(accessor: str, name: str, expected: str) -> None:
    assert message_of(lambda: getattr(P, accessor)(name)) == expected


def test_integers_must_fit_int32() -> None:
    assert Params({"n": 2**31 - 1}).integer("n") == 2**31 - 1
    assert Params({"n": -(2**31)}).integer("n") == -(2**31)
    assert (
        message_of(lambda: P.integer("big")) == "Parameter 'big' must be at most 2147483647; got 2147483648."
    )
    assert (
        message_of(lambda: Params({"n": -(2**31) - 1}).integer("n"))
        == "Parameter 'n' must be at least -2147483648; got -2147483649."
    )
    assert message_of(lambda: Params({"n": 1e10}).integer("n", maximum=5)) == (
        "Parameter 'n' must be at most 5; got 10000000000."
    )


def test_ranges_name_the_parameter_and_the_bound() -> None:
    params = Params({"keepRecentTurns": -1, "temperature": 2.5, "topK": 0})
    assert params.integer("topK", minimum=0) == 0
    assert message_of(lambda: params.integer("keepRecentTurns", minimum=0)) == (
        "Parameter 'keepRecentTurns' must be at least 0; got -1."
    )
    assert message_of(lambda: params.number("temperature", minimum=0.0, maximum=2.0)) == (
        "Parameter 'temperature' must be at most 2.0; got 2.5."
    )
    assert params.number("temperature", maximum=2.5) == 2.5


def test_nested_params_carry_the_path_prefix() -> None:
    options = P.nested("obj")
    assert options is not None
    assert (
        message_of(lambda: options.string("toolChoice"))
        == "Parameter 'obj.toolChoice' must be a string; got 7."
    )
    assert (
        message_of(lambda: options.integer("absent", required=True))
        == "Missing required parameter 'obj.absent'."
    )
    inner = options.nested("inner")
    assert inner is not None and inner.string("deep") == "x"
    assert (
        message_of(lambda: inner.boolean("deep"))
        == "Parameter 'obj.inner.deep' must be a boolean; got \"x\"."
    )
    assert P.nested("missing") is None and P.nested("none") is None
    assert message_of(lambda: P.nested("list")) == "Parameter 'list' must be an object; got [1,2]."


def test_an_explicit_prefix_names_array_items() -> None:
    tool = Params({"name": 3}, prefix="tools[0].")
    assert message_of(lambda: tool.string("name")) == "Parameter 'tools[0].name' must be a string; got 3."


def test_unknown_members_become_warnings_in_order() -> None:
    params = Params({"session": "s", "colour": "red", "prompt": "hi", "extra": None})
    assert params.unknown(["session", "prompt"]) == [
        "Unknown parameter 'colour' was ignored.",
        "Unknown parameter 'extra' was ignored.",
    ]
    options = Params({"model": {}, "temprature": 1}, prefix="options.")
    assert options.unknown(iter(["model"])) == ["Unknown parameter 'options.temprature' was ignored."]
    assert Params({}).unknown([]) == []


def test_preview_is_short_json() -> None:
    assert preview("a") == '"a"'
    assert preview(None) == "null"
    assert preview(float("-inf")) == "-Infinity"
    assert preview(float("nan")) == "NaN"
    assert preview([1, "x" * 100]) == '[1,"' + "x" * 35 + "…"
    assert len(preview("y" * 1000)) == 40


@pytest.mark.parametrize(
    ("text", "valid"),
    [("gorm", True), ("Gorm the Smith", True), ("x" * 128, True), ("", False), ("x" * 129, False),
     ("a\nb", False), ("a\u200bb", False), ("é" * 128, True)],
)
def test_one_rule_for_client_chosen_ids(text: str, valid: bool) -> None:
    assert is_object_id(text) is valid


def test_instants_are_written_in_utc_whole_seconds() -> None:
    moment = dt.datetime(2024, 5, 1, 14, 0, 7, 900_000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert wire_instant(moment) == "2024-05-01T12:00:07Z"
    assert wire_instant().endswith("Z") and len(wire_instant()) == 20



class _Usual(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    flag: bool = False


def test_fields_read_a_usual_object_in_one_call() -> None:
    assert Params({"name": "gorm", "flag": True}).fields(_Usual) == _Usual("gorm", True)
    assert Params({"name": "gorm"}).fields(_Usual) == _Usual("gorm", False)


@pytest.mark.parametrize(
    "values",
    [
        {"name": "gorm", "flag": None},  # null is absent to the accessors: they decide the default
        {"name": "gorm", "flag": 1},  # a number is no boolean
        {"name": "gorm", "extra": 1},  # an unknown member is a warning the accessors word
        {"flag": True},  # a missing member is an error they word
    ],
)
def test_fields_leave_anything_unusual_to_the_accessors(values: dict) -> None:
    assert Params(values).fields(_Usual) is None
