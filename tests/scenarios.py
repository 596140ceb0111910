"""Conformance scenarios as data files: loading, message patterns, and replay over a connection.

Contract
--------
A scenario (``protocol/scenarios/*.json``, format in ``protocol/scenarios/README.md``) is a list of
steps that send lines to a bridge and expect its messages. :func:`load` reads one file into a
:class:`Scenario`; :func:`match` and :func:`substitute` are the pure pattern logic; :func:`replay`
runs a scenario over any :class:`Connection` (stdio today; TCP, WebSocket or a Ray runtime later),
so the same files check every transport and runtime. ``replay`` raises :class:`ScenarioFailed`
naming the step and what differed; every message the bridge writes must be expected by some step.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec

__all__ = [
    "SCENARIO_DIR",
    "STEP_KINDS",
    "Connection",
    "Scenario",
    "ScenarioFailed",
    "load",
    "load_all",
    "match",
    "replay",
    "steps_of",
    "substitute",
]

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "protocol" / "scenarios"
_KINDS = {
    "$string": lambda v: isinstance(v, str),
    "$number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "$integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "$boolean": lambda v: isinstance(v, bool),
    "$object": lambda v: isinstance(v, dict),
    "$array": lambda v: isinstance(v, list),
    "$any": lambda v: True,
}
_ABSENT = "$absent"
STEP_KINDS = ("send", "sendRaw", "reply", "expect", "expectError", "expectUnordered", "closeInput", "expectExit")
_END_ID = "scenario-end"


class Scenario(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One scenario file: ``args`` are extra command-line arguments of the bridge."""

    name: str
    description: str
    steps: list[dict[str, Any]]
    args: list[str] = msgspec.field(default_factory=list)


class ScenarioFailed(AssertionError):
    """A step's expectation was not met (the message says which step and why)."""


class Connection(Protocol):
    """What :func:`replay` needs from a transport."""

    def send_line(self, line: bytes) -> None:
        """Write one line (the newline is added here)."""

    def receive(self) -> dict[str, Any] | None:
        """The next message the bridge wrote, or ``None`` once its output has ended."""

    def close_input(self) -> None:
        """Signal end of input."""

    def exit_status(self) -> int:
        """Wait for the bridge to end by itself; its exit status."""


def load(path: Path) -> Scenario:
    """Read and check one scenario file."""
    return msgspec.json.decode(path.read_bytes(), type=Scenario)


def load_all(directory: Path = SCENARIO_DIR) -> list[Scenario]:
    """Every ``*.json`` scenario of ``directory``, by file name."""
    return [load(path) for path in sorted(directory.glob("*.json"))]


# --- patterns (pure) ------------------------------------------------------------------------------


def match(pattern: Any, value: Any, captures: dict[str, Any], path: str = "$") -> list[str]:
    """Why ``value`` does not match ``pattern`` (empty when it does). ``$capture:NAME`` binds into
    ``captures`` (only kept by the caller when the whole match succeeds)."""
    if isinstance(pattern, str) and pattern.startswith("$"):
        return _match_placeholder(pattern, value, captures, path)
    if isinstance(pattern, dict):
        return _match_object(pattern, value, captures, path)
    if isinstance(pattern, list):
        return _match_array(pattern, value, captures, path)
    if pattern == value and type(pattern) is type(value) or _same_number(pattern, value):
        return []
    return [f"{path}: expected {_show(pattern)}, got {_show(value)}"]


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def _match_placeholder(pattern: str, value: Any, captures: dict[str, Any], path: str) -> list[str]:
    if pattern.startswith("$$"):
        return _equal(pattern[1:], value, path)
    if pattern in _KINDS:
        return [] if _KINDS[pattern](value) else [f"{path}: expected {pattern[1:]}, got {_show(value)}"]
    head, _, argument = pattern.partition(":")
    if head == "$capture":
        captures[argument] = value
        return []
    if head in ("$contains", "$startsWith"):
        ok = isinstance(value, str) and (argument in value if head == "$contains" else value.startswith(argument))
        return [] if ok else [f"{path}: expected a string {head[1:]} {argument!r}, got {_show(value)}"]
    name = pattern[1:]
    if name not in captures:
        raise ScenarioFailed(f"{path}: {pattern} was never captured")
    # A captured value is data, compared as is (never read as a pattern).
    return _equal(captures[name], value, path)


def _equal(expected: Any, value: Any, path: str) -> list[str]:
    return (
        []
        if expected == value and isinstance(expected, bool) == isinstance(value, bool)
        else [f"{path}: expected {_show(expected)}, got {_show(value)}"]
    )


def _match_object(pattern: dict[str, Any], value: Any, captures: dict[str, Any], path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object, got {_show(value)}"]
    problems: list[str] = []
    for key, expected in pattern.items():
        if key == "$keys":
            if list(value) != expected:
                problems.append(f"{path}: keys {list(value)} are not exactly {expected}")
        elif key in ("$includes", "$excludes"):
            problems += _match_members(expected, value, captures, path, wanted=key == "$includes")
        elif expected == _ABSENT:
            if key in value:
                problems.append(f"{path}.{key}: expected absent, got {_show(value[key])}")
        elif key not in value:
            problems.append(f"{path}.{key}: missing")
        else:
            problems += match(expected, value[key], captures, f"{path}.{key}")
    return problems


def _match_members(
    spec: dict[str, Any], value: dict[str, Any], captures: dict[str, Any], path: str, *, wanted: bool
) -> list[str]:
    """``{"$includes": {"key": [patterns]}}``: each pattern matches some element of ``value[key]``;
    ``$excludes``: none does."""
    problems = []
    for key, patterns in spec.items():
        items = value.get(key)
        if not isinstance(items, list):
            problems.append(f"{path}.{key}: expected an array, got {_show(items)}")
            continue
        for pattern in patterns:
            found = any(not match(pattern, item, dict(captures), f"{path}.{key}[]") for item in items)
            if found != wanted:
                problems.append(f"{path}.{key}: {'no' if wanted else 'an'} element matches {_show(pattern)}")
    return problems


def _match_array(pattern: list[Any], value: Any, captures: dict[str, Any], path: str) -> list[str]:
    if not isinstance(value, list):
        return [f"{path}: expected an array, got {_show(value)}"]
    if len(pattern) != len(value):
        return [f"{path}: expected {len(pattern)} elements, got {len(value)}: {_show(value)}"]
    problems: list[str] = []
    for index, (expected, item) in enumerate(zip(pattern, value, strict=True)):
        problems += match(expected, item, captures, f"{path}[{index}]")
    return problems


def substitute(template: Any, captures: dict[str, Any]) -> Any:
    """``template`` with every ``"$NAME"`` string replaced by the captured value (``"$$x"`` is the
    literal ``"$x"``)."""
    if isinstance(template, str) and template.startswith("$"):
        if template.startswith("$$"):
            return template[1:]
        if template[1:] not in captures:
            raise ScenarioFailed(f"{template} was never captured")
        return captures[template[1:]]
    if isinstance(template, dict):
        return {key: substitute(item, captures) for key, item in template.items()}
    if isinstance(template, list):
        return [substitute(item, captures) for item in template]
    return template


def _error_pattern(spec: dict[str, Any]) -> dict[str, Any]:
    """The message pattern of an ``expectError`` step."""
    error: dict[str, Any] = {"code": spec["code"]}
    data = dict(spec.get("data", {}))
    if "dataCode" in spec:
        data["code"] = spec["dataCode"]
    if data:
        error["data"] = data
    if "message" in spec:
        error["message"] = spec["message"]
    return {"id": spec["id"], "error": error, "result": _ABSENT}


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"


# --- replay ---------------------------------------------------------------------------------------


def replay(scenario: Scenario, connection: Connection) -> dict[str, Any]:
    """Run every step; then check that nothing unexpected is left. Returns the captures."""
    captures: dict[str, Any] = {}
    exited = False
    for number, step in enumerate(scenario.steps):
        try:
            exited = _run_step(step, connection, captures) or exited
        except ScenarioFailed as failure:
            raise ScenarioFailed(f"{scenario.name}, step {number} {_show(step)}:\n{failure}") from None
    if not exited:
        _check_nothing_left(scenario, connection)
    return captures


def _run_step(step: dict[str, Any], connection: Connection, captures: dict[str, Any]) -> bool:
    """One step; True when it saw the bridge exit."""
    [(kind, argument)] = step.items()
    if kind == "send":
        connection.send_line(_encode(substitute(argument, captures)))
    elif kind == "reply":
        connection.send_line(_encode({"jsonrpc": "2.0", **substitute(argument, captures)}))
    elif kind == "sendRaw":
        connection.send_line(argument.encode())
    elif kind == "expect":
        _expect(argument, connection, captures)
    elif kind == "expectError":
        _expect(_error_pattern(argument), connection, captures)
    elif kind == "expectUnordered":
        _expect_unordered(argument, connection, captures)
    elif kind == "closeInput":
        connection.close_input()
    elif kind == "expectExit":
        _expect_exit(argument, connection)
        return True
    else:
        raise ScenarioFailed(f"unknown step kind {kind!r}")
    return False


def _encode(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def _receive(connection: Connection) -> dict[str, Any]:
    message = connection.receive()
    if message is None:
        raise ScenarioFailed("the bridge's output ended")
    if message.get("jsonrpc") != "2.0":
        raise ScenarioFailed(f"not a JSON-RPC 2.0 message: {_show(message)}")
    return message


def _expect(pattern: Any, connection: Connection, captures: dict[str, Any]) -> None:
    message = _receive(connection)
    trial = dict(captures)
    problems = match(pattern, message, trial)
    if problems:
        raise ScenarioFailed(f"got {_show(message)}\n" + "\n".join(problems))
    captures.update(trial)


def _expect_unordered(patterns: list[Any], connection: Connection, captures: dict[str, Any]) -> None:
    messages = [_receive(connection) for _ in patterns]
    for order in itertools.permutations(range(len(messages))):
        trial = dict(captures)
        if all(not match(patterns[i], messages[j], trial) for i, j in enumerate(order)):
            captures.update(trial)
            return
    raise ScenarioFailed("no order of these messages matches the patterns:\n" + "\n".join(map(_show, messages)))


def _expect_exit(status: int, connection: Connection) -> None:
    message = connection.receive()
    if message is not None:
        raise ScenarioFailed(f"expected the output to end, got {_show(message)}")
    if (actual := connection.exit_status()) != status:
        raise ScenarioFailed(f"exit status {actual}, expected {status}")


def _check_nothing_left(scenario: Scenario, connection: Connection) -> None:
    """A final ping must be answered next: no message went unexpected."""
    connection.send_line(_encode({"jsonrpc": "2.0", "id": _END_ID, "method": "ping"}))
    message = _receive(connection)
    if message != {"jsonrpc": "2.0", "id": _END_ID, "result": {}}:
        raise ScenarioFailed(f"{scenario.name}: unexpected message after the last step: {_show(message)}")


def steps_of(scenario: Scenario) -> Iterator[tuple[str, Any]]:
    """(kind, argument) of each step, for checks over scenario files."""
    for step in scenario.steps:
        [(kind, argument)] = step.items()
        yield kind, argument
