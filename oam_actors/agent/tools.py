"""Tools: definitions (parsed from the wire), calls, outputs and call records.

A tool is *local* when it has an async Python handler, and *external* (a client tool) when it has
none: the turn then waits for a result submitted from outside (the bridge's ``tool/call``).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import invalid_params
from .schema import Schema

__all__ = [
    "ErrorOutput",
    "JsonOutput",
    "LocalHandler",
    "MAX_TIMEOUT_SECONDS",
    "RESERVED_TOOL_NAMES",
    "TextOutput",
    "ToolCall",
    "ToolCallRecord",
    "ToolDefinition",
    "ToolOutput",
    "check_timeout",
    "compact_json",
    "new_call_id",
    "output_from_value",
    "parse_tool_definitions",
    "too_many_tools_warning",
]

MAX_TIMEOUT_SECONDS = 86400.0
RESERVED_TOOL_NAMES = frozenset({"respond", "respond_directly"})
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ID_ALPHABET = string.ascii_letters + string.digits
# Byte value -> alphanumeric, so one C-level translate maps the random bytes (every turn makes one).
_ID_TABLE = bytes(ord(_ID_ALPHABET[byte % 62]) for byte in range(256))


_IDS_PER_READ = 256
_call_ids: list[str] = []  # ready ids, popped from the end
if hasattr(os, "register_at_fork"):  # POSIX: a forked process must not reuse them
    os.register_at_fork(after_in_child=_call_ids.clear)


def new_call_id() -> str:
    """``call_`` + 24 random alphanumerics from the system's secure random source, read for
    :data:`_IDS_PER_READ` ids at a time (every tool round takes one: one read, not one system
    call each; the modulo bias over 62 symbols is irrelevant for an identifier)."""
    try:
        return _call_ids.pop()  # atomic: threads never get the same id
    except IndexError:
        symbols = secrets.token_bytes(24 * _IDS_PER_READ).translate(_ID_TABLE).decode("ascii")
        _call_ids.extend("call_" + symbols[i : i + 24] for i in range(0, len(symbols), 24))
        return _call_ids.pop()


# --- outputs ---------------------------------------------------------------------------------


class TextOutput(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str

    @property
    def is_error(self) -> bool:
        return False

    def model_text(self) -> str:
        return self.text

    def wire_value(self) -> Any:
        return self.text


class JsonOutput(msgspec.Struct, frozen=True, tag="json", tag_field="type"):
    value: Any

    @property
    def is_error(self) -> bool:
        return False

    def model_text(self) -> str:
        return compact_json(self.value)

    def wire_value(self) -> Any:
        return self.value


class ErrorOutput(msgspec.Struct, frozen=True, tag="error", tag_field="type"):
    message: str

    @property
    def is_error(self) -> bool:
        return True

    def model_text(self) -> str:
        return "Error: " + self.message

    def wire_value(self) -> Any:
        return self.message


ToolOutput = TextOutput | JsonOutput | ErrorOutput


def compact_json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def output_from_value(value: Any, *, is_error: bool = False) -> ToolOutput:
    """A tool's result as an output: strings stay text, other values JSON; errors carry text."""
    if is_error:
        return ErrorOutput(value if isinstance(value, str) else compact_json(value))
    if isinstance(value, str):
        return TextOutput(value)
    return JsonOutput(value)


# --- calls and records -----------------------------------------------------------------------


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    name: str
    arguments: dict[str, Any]


class ToolCallRecord(msgspec.Struct, frozen=True):
    """One finished call (executed, failed, timed out or rejected) as reported in ``toolCalls``."""

    call: ToolCall
    output: ToolOutput
    duration_seconds: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        duration = round(self.duration_seconds, 3)
        return {
            "call": {"id": self.call.id, "name": self.call.name, "arguments": self.call.arguments},
            "output": self.output.wire_value(),
            "isError": self.output.is_error,
            "durationSeconds": int(duration) if duration == int(duration) else duration,
        }


# --- definitions -----------------------------------------------------------------------------

LocalHandler = Callable[[dict[str, Any]], Awaitable[Any]]
"""A local tool: ``await handler(arguments)``. A returned :data:`ToolOutput` is used as is; a
string becomes text, any other value JSON; an exception becomes an error output."""


@dataclass(frozen=True)
class ToolDefinition:
    """A usable tool: its name, description, compiled parameter schema and how it runs.

    ``timeout`` (seconds) overrides the session default for external tools; ``0`` waits forever;
    ``None`` uses the default.
    """

    name: str
    description: str = ""
    schema: Schema = field(default_factory=Schema.empty_object)
    timeout: float | None = None
    handler: LocalHandler | None = field(default=None, compare=False)

    @property
    def is_local(self) -> bool:
        return self.handler is not None

    def to_wire(self) -> dict[str, Any]:
        """``{"name","description","parameters"}`` as stored in transcripts."""
        return {"name": self.name, "description": self.description, "parameters": self.schema.raw}


def parse_tool_definitions(
    value: Any, *, path: str = "tools"
) -> tuple[list[ToolDefinition], list[str]]:
    """Parse wire tool definitions (an array; OpenAI ``{"type":"function","function":{…}}``
    wrappers accepted). Returns the definitions and their warnings.

    Raises ``invalid_params`` for structural problems and ``invalid_schema`` (with ``path``
    ``tools[i].parameters`` and ``schemaPath``) for unusable parameter schemas.
    """
    if not isinstance(value, list):
        raise invalid_params(f"'{path}' must be an array.")
    tools: list[ToolDefinition] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for index, element in enumerate(value):
        tool, tool_warnings = _parse_one(element, f"{path}[{index}]")
        if tool.name in seen:
            raise invalid_params(f"Duplicate tool name '{tool.name}'.")
        seen.add(tool.name)
        tools.append(tool)
        warnings.extend(tool_warnings)
    return tools, warnings


def too_many_tools_warning(count: int) -> str | None:
    """The warning for more than five tools (small models choose poorly among many)."""
    if count <= 5:
        return None
    return (
        f"{count} tools: the on-device model chooses best among at most 3-5 tools per request; "
        "narrow them per turn with 'enabledTools'."
    )


def _parse_one(element: Any, path: str) -> tuple[ToolDefinition, list[str]]:
    if isinstance(element, dict) and isinstance(element.get("function"), dict):
        element = element["function"]
    if not isinstance(element, dict):
        raise invalid_params(f"'{path}' must be an object.")
    name = element.get("name")
    if not isinstance(name, str):
        raise invalid_params(f"Missing required parameter '{path}.name'." if name is None
                             else f"Parameter '{path}.name' must be a string; got {compact_json(name)}.")
    if not _NAME.fullmatch(name):
        raise invalid_params(
            f"Parameter '{path}.name' must be 1-64 characters of A-Z a-z 0-9 _ - .; got {compact_json(name)}."
        )
    if name in RESERVED_TOOL_NAMES:
        raise invalid_params(f"Tool name '{name}' is reserved ({path}.name).")
    description = element.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_params(
            f"Parameter '{path}.description' must be a string; got {compact_json(description)}."
        )
    execution = element.get("execution")
    if execution is not None and execution != "client":
        raise invalid_params(
            f"Parameter '{path}.execution' must be \"client\"; got {compact_json(execution)}."
        )
    timeout = check_timeout(element.get("timeoutSeconds"), f"{path}.timeoutSeconds")
    parameters = element.get("parameters")
    schema = (
        Schema.empty_object()
        if parameters is None
        else Schema.compile(parameters, path=f"{path}.parameters")
    )
    warnings = [f"{name}: {w}" for w in schema.warnings]
    if not description:
        warnings.append(f"{name}: no description; the model may not know when to call it.")
    return ToolDefinition(name, description or "", schema, timeout), warnings


def check_timeout(value: Any, path: str) -> float | None:
    """Validate a timeout in seconds (finite, 0…86400); ``None`` when absent."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_TIMEOUT_SECONDS
    ):
        shown = compact_json(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
        raise invalid_params(
            f"Parameter '{path}' must be a number of seconds from 0 to 86400 (0 means no limit); got {shown}."
        )
    return float(value)


