"""The scenario language (patterns, substitution, replay) and every scenario file replayed through
the real ``oam-actors stdio`` process."""

from __future__ import annotations

from typing import Any

import pytest

from bridge_process import BridgeProcess
from scenarios import STEP_KINDS, Scenario, ScenarioFailed, load_all, match, replay, steps_of, substitute

SCENARIOS = load_all()


class StdioConnection:
    """A :class:`scenarios.Connection` over one ``oam-actors stdio`` process."""

    def __init__(self, process: BridgeProcess) -> None:
        self.process = process

    def send_line(self, line: bytes) -> None:
        self.process.send_raw(line + b"\n")

    def receive(self) -> dict[str, Any] | None:
        try:
            return self.process.next()
        except EOFError:
            return None

    def close_input(self) -> None:
        self.process.close_input()

    def exit_status(self) -> int:
        return self.process.wait_exit()


class ScriptedConnection:
    """A fake connection that hands out fixed messages and records what was sent."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = list(messages)
        self.sent: list[bytes] = []

    def send_line(self, line: bytes) -> None:
        self.sent.append(line)
        if b'"scenario-end"' in line:
            self.messages.append({"jsonrpc": "2.0", "id": "scenario-end", "result": {}})

    def receive(self) -> dict[str, Any] | None:
        return self.messages.pop(0) if self.messages else None

    def close_input(self) -> None:
        pass

    def exit_status(self) -> int:
        return 0


# --- patterns ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ({"id": 1}, {"jsonrpc": "2.0", "id": 1, "result": {}}),
        ({"result": {"n": 2}}, {"result": {"n": 2.0, "m": 3}}),
        ("$any", None),
        ("$string", "x"),
        ("$number", 1.5),
        ("$integer", 3),
        ("$boolean", False),
        ("$object", {}),
        ("$array", []),
        ("$contains:gate", "open the gate"),
        ("$startsWith:wave:", "wave: no description"),
        ("$$literal", "$literal"),
        ({"a": "$absent"}, {"b": 1}),
        ({"$keys": ["b", "a"]}, {"b": 1, "a": 2}),
        ({"$includes": {"m": ["ping", "$startsWith:session/"]}}, {"m": ["initialize", "ping", "session/list"]}),
        ([{"a": 1}, "$any"], [{"a": 1, "b": 2}, 5]),
        ({"$excludes": {"m": ["scripted"]}}, {"m": ["system", "openai"]}),
    ],
)
def test_patterns_that_match(pattern: Any, value: Any) -> None:
    assert match(pattern, value, {}) == []


@pytest.mark.parametrize(
    ("pattern", "value", "problem"),
    [
        ({"id": 1}, {"id": 2}, "$.id: expected 1, got 2"),
        ({"id": 1}, {"result": {}}, "$.id: missing"),
        ({"a": True}, {"a": 1}, "$.a: expected true, got 1"),
        ("$integer", 1.5, "$: expected integer, got 1.5"),
        ("$number", True, "$: expected number, got true"),
        ("$contains:gate", "door", "$: expected a string contains 'gate', got \"door\""),
        ({"a": "$absent"}, {"a": None}, "$.a: expected absent, got null"),
        ({"$keys": ["a"]}, {"a": 1, "b": 2}, "$: keys ['a', 'b'] are not exactly ['a']"),
        ([1, 2], [1], "$: expected 2 elements, got 1: [1]"),
        ({"x": [{"y": "$string"}]}, {"x": [{"y": 3}]}, "$.x[0].y: expected string, got 3"),
        ({"$includes": {"m": ["shutdown"]}}, {"m": ["ping"]}, '$.m: no element matches "shutdown"'),
        (
            {"$excludes": {"m": ["$startsWith:s"]}},
            {"m": ["ping", "scripted"]},
            '$.m: an element matches "$startsWith:s"',
        ),
    ],
)
def test_patterns_that_do_not_match_say_why(pattern: Any, value: Any, problem: str) -> None:
    assert match(pattern, value, {}) == [problem]


def test_captures_bind_and_are_reused() -> None:
    captures: dict[str, Any] = {}
    assert (
        match(
            {"id": "$capture:tool", "params": {"call": {"id": "$capture:call"}}},
            {"id": "t-3", "params": {"call": {"id": "call_x"}}},
            captures,
        )
        == []
    )
    assert captures == {"tool": "t-3", "call": "call_x"}
    assert match({"id": "$tool"}, {"id": "t-3"}, captures) == []
    assert match({"id": "$tool"}, {"id": "t-4"}, captures) == ['$.id: expected "t-3", got "t-4"']
    assert substitute({"id": "$tool", "result": {"output": "$$tool", "n": [1, "$call"]}}, captures) == {
        "id": "t-3",
        "result": {"output": "$tool", "n": [1, "call_x"]},
    }
    with pytest.raises(ScenarioFailed, match="never captured"):
        substitute("$ghost", captures)


def test_replay_sends_substitutes_and_checks_every_message() -> None:
    scenario = Scenario(
        name="fake",
        description="",
        steps=[
            {
                "send": {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "session/respond",
                    "params": {"session": "s", "prompt": "go"},
                }
            },
            {"expect": {"id": "$capture:tool", "method": "tool/call"}},
            {"reply": {"id": "$tool", "result": {"output": "done"}}},
            {"expectUnordered": [{"id": 2}, {"id": 1}]},
            {"expectError": {"id": 3, "code": -32602, "dataCode": "invalid_params"}},
        ],
    )
    connection = ScriptedConnection(
        [
            {"jsonrpc": "2.0", "id": "t-1", "method": "tool/call", "params": {}},
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": 2, "result": {}},
            {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "m", "data": {"code": "invalid_params"}}},
        ]
    )
    assert replay(scenario, connection) == {"tool": "t-1"}
    assert connection.sent[1] == b'{"jsonrpc":"2.0","id":"t-1","result":{"output":"done"}}'


def test_replay_fails_on_an_unexpected_extra_message() -> None:
    scenario = Scenario(name="extra", description="", steps=[{"expect": {"id": 1}}])
    connection = ScriptedConnection(
        [{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": 2, "result": {}}]
    )
    with pytest.raises(ScenarioFailed, match="unexpected message after the last step"):
        replay(scenario, connection)


def test_replay_names_the_failing_step() -> None:
    scenario = Scenario(name="wrong", description="", steps=[{"expectError": {"id": 1, "code": -32601}}])
    connection = ScriptedConnection([{"jsonrpc": "2.0", "id": 1, "result": {}}])
    with pytest.raises(ScenarioFailed, match=r"(?s)wrong, step 0 .*\$\.error: missing"):
        replay(scenario, connection)


# --- the scenario files -------------------------------------------------------------------------------


def test_the_scenario_files_are_well_formed() -> None:
    assert len(SCENARIOS) >= 15
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
    for scenario in SCENARIOS:
        kinds = [kind for kind, _ in steps_of(scenario)]
        assert kinds and set(kinds) <= set(STEP_KINDS), scenario.name
        assert any(kind.startswith("expect") for kind in kinds), scenario.name


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_over_stdio(scenario: Scenario) -> None:
    with BridgeProcess(scenario.args) as process:
        replay(scenario, StdioConnection(process))
        assert process.close() == 0
