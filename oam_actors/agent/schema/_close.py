"""Closing of object schemas (private, protocol §5.3).

A model writing JSON freely sometimes adds keys the schema never declared; closing the schema
makes coercion drop them before a tool call or a structured reply leaves the agent.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["close_schema"]

# Deeper than any schema the check accepts; stops runaway recursion through unchecked `not`.
_MAX_DEPTH: Final = 64
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions")
_SCHEMA_SLOTS: Final = ("items", "additionalProperties", "not")


def close_schema(node: Any) -> Any:
    """A copy where every object schema declaring ``properties`` without
    ``additionalProperties`` gets ``"additionalProperties": false``, recursively.

    Members of ``allOf`` themselves stay open (closed, they would reject each other's keys);
    schemas nested inside them are closed. An explicit ``additionalProperties`` is kept.
    """
    return _close(node, False, 0)


def _close(node: Any, in_all_of: bool, depth: int) -> Any:
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return node
    closed = {key: _close_member(key, value, depth + 1) for key, value in node.items()}
    if not in_all_of and isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        closed["additionalProperties"] = False
    return closed


def _close_member(key: str, value: Any, depth: int) -> Any:
    if key in _SCHEMA_MAPS and isinstance(value, dict):
        return {name: _close(child, False, depth) for name, child in value.items()}
    if key in _SCHEMA_SLOTS:
        return _close(value, False, depth)
    if key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
        return [_close(child, key == "allOf", depth) for child in value]
    return value
