"""The model's two world tools, ``read_world_state`` and ``update_world_state``, as pure functions.

Contract (protocol-game §6.12 "Model tools"):

- :func:`read_tool_definition` / :func:`update_tool_definition` build the tool definitions
  (``{"name", "description", "parameters"}``) from the readable / writable path prefixes
  (``""`` = everything; malformed prefixes are ignored); ``None`` when no prefix is left.
- :func:`read_world_state` and :func:`update_world_state` run one call. Every mistake the model
  can make (malformed, unknown, forbidden path, wrong type) comes back as an error *output* that
  names the valid alternatives, never as an exception; keys match case-insensitively.
- :class:`WorldToolOutput` says which tool output kind the result is (text, JSON or error); the
  NPC layer turns it into the agent's ``TextOutput`` / ``JsonOutput`` / ``ErrorOutput``.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from .world import (
    MISSING,
    Change,
    Missing,
    WorldPath,
    WorldState,
    WorldStateError,
    compact_json,
    copy_value,
    lookup,
    resolve_case,
    to_json_value,
    type_name,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "MIN_OUTPUT_CHARS",
    "READ_TOOL_NAME",
    "UPDATE_TOOL_NAME",
    "OutputKind",
    "WorldToolOutput",
    "fit_value",
    "missing_value_message",
    "read_tool_definition",
    "read_world_state",
    "shorten",
    "update_tool_definition",
    "update_world_state",
]

READ_TOOL_NAME = "read_world_state"
UPDATE_TOOL_NAME = "update_world_state"
DEFAULT_MAX_OUTPUT_CHARS = 1500
MIN_OUTPUT_CHARS = 100

_TOP_LEVEL_KEYS_SHOWN = 12
_MISSING_KEYS_SHOWN = 20
_PREVIEW_STRING_CHARS = 80
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LARGEST_EXACT_INTEGER = 1e15
_TRUE_WORDS = frozenset({"true", "yes", "1"})
_FALSE_WORDS = frozenset({"false", "no", "0"})


class OutputKind(enum.StrEnum):
    """The agent's tool output kinds."""

    TEXT = "text"
    JSON = "json"
    ERROR = "error"


class WorldToolOutput(msgspec.Struct, frozen=True):
    """A tool result: ``value`` is the text (TEXT, ERROR) or the JSON value (JSON)."""

    kind: OutputKind
    value: Any

    @property
    def is_error(self) -> bool:
        return self.kind is OutputKind.ERROR


# --- definitions ------------------------------------------------------------------------------


def read_tool_definition(state: WorldState, readable: Sequence[str]) -> dict[str, Any] | None:
    """The read tool's definition; it lists the top-level keys when the root is readable."""
    paths = _parsed(readable)
    if not paths:
        return None
    description = "Read the current game state (JSON). Use it to check facts before you answer."
    if any(path.is_root for path in paths):
        keys = state.top_level_keys()[:_TOP_LEVEL_KEYS_SHOWN]  # no copy: every NPC of a crowd asks
        if keys:
            description += f" Top-level keys: {', '.join(keys)}."
    else:
        description += f" Readable paths: {_listed(paths)}."
    path = _string_schema("Dot path such as 'player.gold'. Empty string for everything you may read.")
    return _definition(READ_TOOL_NAME, description, {"path": path})


def update_tool_definition(writable: Sequence[str]) -> dict[str, Any] | None:
    """The update tool's definition, or ``None`` when nothing is writable."""
    paths = _parsed(writable)
    if not paths:
        return None
    description = f"Change a value in the game state. Writable paths: {_described(paths)}."
    properties = {
        "path": _string_schema("Dot path to change, such as 'quests.lost_ring.status'."),
        # Any JSON: the value is fitted to the stored type, so 42, "42" and true all have a use.
        "value": {"description": 'The new value, such as 42, true, done or {"a": 1}.'},
    }
    return _definition(UPDATE_TOOL_NAME, description, properties)


# --- calls ------------------------------------------------------------------------------------


def read_world_state(
    state: WorldState, path: str, readable: Sequence[str], *, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS
) -> WorldToolOutput:
    """Read ``path`` within the ``readable`` prefixes.

    Inside a readable prefix: the JSON value (shortened past ``max_chars``, at least 100) or the
    missing-value message. Above readable prefixes: only the readable sub-trees. Elsewhere: an
    error listing the readable paths.
    """
    readable_paths = _parsed(readable)
    try:
        requested = WorldPath.parse(path)
    except WorldStateError as error:
        return _error(error.message)
    # Read in place, not from a snapshot: a crowd's reads would copy the whole document each.
    document = state.document
    resolved = resolve_case(document, requested)
    limit = max(max_chars, MIN_OUTPUT_CHARS)
    if any(resolved.is_within(prefix) for prefix in readable_paths):
        value = lookup(document, resolved)
        if value is MISSING:
            return _error(missing_value_message(document, resolved))
        return WorldToolOutput(OutputKind.JSON, copy_value(shorten(value, limit)))
    visible = [prefix for prefix in readable_paths if prefix.is_within(resolved)]
    if not visible:
        return _error(f"You cannot read '{resolved}'. Readable paths: {_listed(readable_paths)}.")
    return WorldToolOutput(OutputKind.JSON, shorten(_readable_parts(document, visible, resolved), limit))


def update_world_state(
    state: WorldState, path: str, value: Any, writable: Sequence[str]
) -> tuple[WorldToolOutput, list[Change]]:
    """Write ``value``, fitted to the stored type, at ``path`` under a ``writable`` prefix.

    Returns the output (``Set <path> to <json> (was <json>).`` or an error) and the changes made;
    observers of ``state`` have run by the time it returns.
    """
    writable_paths = _parsed(writable)
    try:
        requested = WorldPath.parse(path)
    except WorldStateError as error:
        return _error(error.message), []
    resolved = resolve_case(state.document, requested)
    if not any(resolved.is_within(prefix) for prefix in writable_paths):
        return _error(f"'{resolved}' is read-only. You may change: {_described(writable_paths)}."), []
    current = state.get(resolved)
    try:
        fitted = fit_value(current, value)
    except ValueError as error:
        return _error(f"Cannot set '{resolved}': {error}"), []
    try:
        changes = state.set(resolved, fitted)
    except WorldStateError as error:
        return _error(error.message), []
    was = "." if current is MISSING else f" (was {compact_json(current)})."
    return WorldToolOutput(OutputKind.TEXT, f"Set {resolved} to {compact_json(fitted)}{was}"), changes


# --- value fitting ----------------------------------------------------------------------------


def fit_value(stored: Any | Missing, incoming: Any) -> Any:
    """Fit a model-sent value to the type already stored (the §6.12 table).

    Models often send numbers and booleans as strings; ``"45"`` for a number becomes ``45``.
    Raises ``ValueError`` with the reason (``it holds a number; 'lots' is not a number.``).
    """
    if stored is MISSING or stored is None:
        return _fit_new(incoming)
    if isinstance(stored, str):
        return _fit_string(incoming)
    if isinstance(stored, bool):
        return _fit_boolean(incoming)
    if isinstance(stored, (int, float)):
        return _fit_number(incoming)
    return _fit_structure(stored, incoming)


def _fit_new(incoming: Any) -> Any:
    if not isinstance(incoming, str):
        return incoming
    # Real JSON literals become values ("42", "[\"a\"]"); anything else ("pleased") stays text.
    parsed = _strict_json(incoming.strip())
    return incoming if parsed is MISSING else parsed


def _fit_string(incoming: Any) -> Any:
    if isinstance(incoming, str):
        trimmed = incoming.strip()
        if len(trimmed) >= 2 and trimmed[0] == trimmed[-1] == '"':
            inner = _strict_json(trimmed)  # the model quoted the text itself
            if isinstance(inner, str):
                return inner
        return incoming
    if isinstance(incoming, (dict, list)):
        raise ValueError(f"it holds a string; send text, not {type_name(incoming)}.")
    return compact_json(incoming)


def _fit_number(incoming: Any) -> Any:
    if isinstance(incoming, (int, float)) and not isinstance(incoming, bool):
        return incoming
    number = _parsed_number(incoming) if isinstance(incoming, str) else None
    if number is None:
        raise ValueError(f"it holds a number; '{_quoted(incoming)}' is not a number.")
    return int(number) if number.is_integer() and abs(number) < _LARGEST_EXACT_INTEGER else number


def _fit_boolean(incoming: Any) -> Any:
    if isinstance(incoming, bool):
        return incoming
    word = incoming.strip().lower() if isinstance(incoming, str) else None
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"it holds true or false; got '{_quoted(incoming)}'.")


def _fit_structure(stored: Any, incoming: Any) -> Any:
    if isinstance(incoming, (dict, list)):
        return incoming
    parsed = _lenient_structure(incoming.strip()) if isinstance(incoming, str) else None
    if parsed is None:
        raise ValueError(f"it holds {type_name(stored)}; send valid JSON.")
    return parsed


def _parsed_number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    if not _NUMBER.fullmatch(cleaned):
        return None
    number = float(cleaned)
    return number if math.isfinite(number) else None


def _strict_json(text: str) -> Any | Missing:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return MISSING


def _lenient_structure(text: str) -> Any:
    """The object or list the text holds (lenient JSON), or ``None``."""
    try:
        value = to_json_value(_parse_lenient(text))
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def _parse_lenient(text: str) -> Any:
    # Imported on use: the world layer stays importable without the agent engine loaded.
    from ..agent.lenient_json import parse_value

    return parse_value(text)


def _quoted(value: Any) -> str:
    return value if isinstance(value, str) else compact_json(value)


# --- messages and shortening ------------------------------------------------------------------


def missing_value_message(document: Any, path: WorldPath) -> str:
    """``No value at '<path>'.`` plus what the nearest existing ancestor holds."""
    ancestor = path.parent
    while ancestor is not None:
        value = lookup(document, ancestor)
        if value is not MISSING:
            return f"No value at '{path}'. {_described_value(ancestor, value)}"
        ancestor = ancestor.parent
    return f"No value at '{path}'."


def _described_value(path: WorldPath, value: Any) -> str:
    name = "The state" if path.is_root else f"'{path}'"
    if isinstance(value, dict):
        return f"{name} has keys: {', '.join(list(value)[:_MISSING_KEYS_SHOWN])}."
    if isinstance(value, list):
        return f"{name} is a list of {len(value)} items (indices 0-{max(len(value) - 1, 0)})."
    return f"{name} is {type_name(value)}: {compact_json(value)}."


def shorten(value: Any, limit: int) -> Any:
    """``value``, or a smaller stand-in when its compact JSON is longer than ``limit``.

    Objects keep their members but nested objects and lists become counts and long strings are
    cut, with a ``_note``; lists keep as many items as fit; long strings are cut to ``limit``.
    """
    if len(compact_json(value)) <= limit:
        return value
    if isinstance(value, dict):
        preview = {key: _preview(item) for key, item in value.items()}
        return {**preview, "_note": "Shortened. Read a narrower path for details."}
    if isinstance(value, list):
        kept = _fitting_items(value, limit)
        return {"items": kept, "_note": f"Showing {len(kept)} of {len(value)} items."}
    if isinstance(value, str):
        return value[:limit] + "..."
    return value


def _preview(value: Any) -> Any:
    if isinstance(value, dict):
        return f"{{object with {len(value)} keys}}"
    if isinstance(value, list):
        return f"[list of {len(value)} items]"
    if isinstance(value, str) and len(value) > _PREVIEW_STRING_CHARS:
        return value[: _PREVIEW_STRING_CHARS - 3] + "..."
    return value


def _fitting_items(items: list[Any], limit: int) -> list[Any]:
    kept: list[Any] = []
    used = 2  # the brackets
    for item in items:
        size = len(compact_json(item)) + 1  # the item and its comma
        if used + size > limit:
            break
        kept.append(item)
        used += size
    return kept


# --- helpers ----------------------------------------------------------------------------------


def _readable_parts(document: Any, visible: list[WorldPath], base: WorldPath) -> dict[str, Any]:
    """The readable sub-trees below ``base``, placed relative to it."""
    parts = WorldState()
    for path in visible:
        value = lookup(document, path)
        if value is MISSING:
            continue
        try:
            parts.set(WorldPath(path.segments[len(base.segments) :]), value)
        except WorldStateError:
            continue  # an earlier readable part holds a scalar or list in the way; skip this one
    return parts.snapshot()


def _error(message: str) -> WorldToolOutput:
    return WorldToolOutput(OutputKind.ERROR, message)


def _parsed(texts: Sequence[str]) -> tuple[WorldPath, ...]:
    return _parsed_paths(tuple(texts))


@functools.lru_cache(maxsize=256)
def _parsed_paths(texts: tuple[str, ...]) -> tuple[WorldPath, ...]:
    """The prefixes of a tool's paths, parsed once (every call of a crowd's tools checks them)."""
    paths = []
    for text in texts:
        try:
            paths.append(WorldPath.parse(text))
        except WorldStateError:
            continue  # a malformed prefix grants nothing
    return tuple(paths)


def _listed(paths: Sequence[WorldPath]) -> str:
    return ", ".join(path.canonical for path in paths)


def _described(paths: Sequence[WorldPath]) -> str:
    return ", ".join("(everything)" if path.is_root else path.canonical for path in paths)


def _string_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _definition(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {"name": name, "description": description, "parameters": parameters}
