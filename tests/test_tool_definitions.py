"""Tool definitions, outputs and call records: protocol-core §5.1, §3.2 and §2.5 (toolCalls)."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from oam_actors.agent.tools import (
    ErrorOutput,
    JsonOutput,
    TextOutput,
    ToolCall,
    ToolCallRecord,
    ToolDefinition,
    new_call_id,
    output_from_value,
    parse_tool_definitions,
    too_many_tools_warning,
)
from oam_actors import AgentError, ErrorCode, ProtocolError

OPEN_GATE: dict[str, Any] = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}


def one(definition: Any) -> tuple[ToolDefinition, list[str]]:
    [tool], warnings = parse_tool_definitions([definition])
    return tool, warnings


def invalid(value: Any, **kwargs: Any) -> str:
    with pytest.raises(ProtocolError) as caught:
        parse_tool_definitions(value, **kwargs)
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    return caught.value.message


# --- accepted definitions --------------------------------------------------------------------


def test_a_full_definition() -> None:
    tool, warnings = one({**OPEN_GATE, "execution": "client", "timeoutSeconds": 30})
    assert (tool.name, tool.description, tool.timeout, tool.is_local) == (
        "open_gate", "Ask the game to open a gate.", 30.0, False
    )
    assert warnings == []
    assert tool.schema.generation_schema == {**OPEN_GATE["parameters"], "additionalProperties": False}
    assert tool.to_wire() == {
        "name": "open_gate", "description": "Ask the game to open a gate.", "parameters": OPEN_GATE["parameters"]
    }


def test_a_bare_name_takes_no_arguments_and_warns_about_the_description() -> None:
    tool, warnings = one({"name": "wave"})
    assert tool.description == ""
    assert tool.schema.is_empty_object
    assert tool.schema.generation_schema == {"type": "object", "properties": {}, "additionalProperties": False}
    assert tool.timeout is None
    assert len(warnings) == 1 and warnings[0].startswith("wave: no description; ")
    assert one({"name": "wave", "description": ""})[1] == warnings


def test_the_openai_wrapper_is_accepted() -> None:
    tool, _ = one({"type": "function", "function": OPEN_GATE})
    assert tool.name == "open_gate"
    assert tool.schema.raw == OPEN_GATE["parameters"]


@pytest.mark.parametrize("parameters", [True, '{"type":"object","properties":{"gate":{"type":"string"}}}'])
def test_parameters_may_be_true_or_json_text(parameters: Any) -> None:
    tool, _ = one({"name": "open_gate", "description": "d", "parameters": parameters})
    assert tool.schema.validate({"gate": "north"}) == []


def test_unknown_members_are_ignored_without_a_warning() -> None:
    _, warnings = one({**OPEN_GATE, "strict": True, "x-colour": "red"})
    assert warnings == []


def test_schema_warnings_are_prefixed_with_the_tool_name() -> None:
    parameters = {"type": "object", "properties": {"gate": {"type": "string", "format": "uuid"}}}
    _, warnings = one({"name": "open_gate", "description": "d", "parameters": parameters})
    assert warnings == ["open_gate: #/properties/gate: 'format' is not supported and is ignored"]


@pytest.mark.parametrize("name", ["a", "open_gate", "Open-Gate.v2", "x" * 64, "0_9"])
def test_valid_names(name: str) -> None:
    assert one({"name": name, "description": "d"})[0].name == name


@pytest.mark.parametrize("seconds", [0, 0.5, 30, 86400])
def test_valid_timeouts(seconds: float) -> None:
    assert one({**OPEN_GATE, "timeoutSeconds": seconds})[0].timeout == float(seconds)


def test_an_empty_list_is_no_tools() -> None:
    assert parse_tool_definitions([]) == ([], [])


# --- rejected definitions --------------------------------------------------------------------


def test_tools_must_be_an_array() -> None:
    assert invalid({"name": "wave"}) == "'tools' must be an array."
    assert invalid("wave", path="options.tools") == "'options.tools' must be an array."


@pytest.mark.parametrize("element", ["wave", 3, None, ["wave"]])
def test_each_element_must_be_an_object(element: Any) -> None:
    assert invalid([OPEN_GATE, element]) == "'tools[1]' must be an object."


def test_a_function_member_that_is_not_an_object_is_no_wrapper() -> None:
    assert invalid([{"type": "function", "function": "wave"}]) == "Missing required parameter 'tools[0].name'."


def test_the_name_is_required() -> None:
    assert invalid([{"description": "d"}]) == "Missing required parameter 'tools[0].name'."
    assert "'tools[0].name' must be a string" in invalid([{"name": 5}])


@pytest.mark.parametrize("name", ["", "open gate", "x" * 65, "ouvrir_la_porte_é", "a/b", "tool:x"])
def test_invalid_names(name: str) -> None:
    assert "'tools[0].name' must be 1-64 characters" in invalid([{"name": name}])


@pytest.mark.parametrize("name", ["respond", "respond_directly"])
def test_reserved_names(name: str) -> None:
    assert f"'{name}' is reserved" in invalid([{"name": name}])


def test_duplicate_names() -> None:
    assert invalid([{"name": "a"}, {"name": "b"}, {"name": "a"}]) == "Duplicate tool name 'a'."


def test_the_description_must_be_a_string() -> None:
    assert "'tools[0].description' must be a string" in invalid([{"name": "a", "description": 5}])


@pytest.mark.parametrize("execution", ["server", "local", 1])
def test_only_client_execution_is_accepted(execution: Any) -> None:
    assert "'tools[0].execution' must be \"client\"" in invalid([{**OPEN_GATE, "execution": execution}])


@pytest.mark.parametrize("seconds", [-1, 86400.5, "30", True, math.inf, math.nan])
def test_invalid_timeouts(seconds: Any) -> None:
    assert "'tools[0].timeoutSeconds' must be a number of seconds from 0 to 86400" in invalid(
        [{**OPEN_GATE, "timeoutSeconds": seconds}]
    )


@pytest.mark.parametrize(
    ("parameters", "schema_path"),
    [({"type": "wat"}, "#/type"), ("{not json", "#"), (5, "#"), ({"type": "object", "required": "gate"}, "#/required")],
)
def test_an_unusable_parameters_schema_is_invalid_schema(parameters: Any, schema_path: str) -> None:
    with pytest.raises(AgentError) as caught:
        parse_tool_definitions([{"name": "a"}, {"name": "b", "parameters": parameters}])
    assert caught.value.code is ErrorCode.INVALID_SCHEMA
    assert caught.value.data()["path"] == "tools[1].parameters"
    assert caught.value.data()["schemaPath"] == schema_path


def test_too_many_tools_warning() -> None:
    assert too_many_tools_warning(5) is None
    warning = too_many_tools_warning(6)
    assert warning is not None and warning.startswith("6 tools: ")


# --- outputs and records ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "is_error", "output", "model_text", "wire"),
    [
        ("The gate opened.", False, TextOutput("The gate opened."), "The gate opened.", "The gate opened."),
        ({"opened": True}, False, JsonOutput({"opened": True}), '{"opened":true}', {"opened": True}),
        ([1, 2], False, JsonOutput([1, 2]), "[1,2]", [1, 2]),
        ("Chain jammed.", True, ErrorOutput("Chain jammed."), "Error: Chain jammed.", "Chain jammed."),
        ({"why": "jam"}, True, ErrorOutput('{"why":"jam"}'), 'Error: {"why":"jam"}', '{"why":"jam"}'),
    ],
)
def test_outputs(value: Any, is_error: bool, output: Any, model_text: str, wire: Any) -> None:
    made = output_from_value(value, is_error=is_error)
    assert made == output
    assert (made.model_text(), made.wire_value(), made.is_error) == (model_text, wire, is_error)


@pytest.mark.parametrize(("seconds", "wire"), [(1.0, 1), (0.0, 0), (0.12345, 0.123), (2.0004, 2), (1.5, 1.5)])
def test_record_durations_are_rounded_to_milliseconds(seconds: float, wire: Any) -> None:
    record = ToolCallRecord(ToolCall("call_x", "open_gate", {"gate": "north"}), ErrorOutput("No."), seconds)
    assert record.to_wire() == {
        "call": {"id": "call_x", "name": "open_gate", "arguments": {"gate": "north"}},
        "output": "No.",
        "isError": True,
        "durationSeconds": wire,
    }
    assert type(record.to_wire()["durationSeconds"]) is type(wire)


def test_call_ids() -> None:
    ids = {new_call_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids)

