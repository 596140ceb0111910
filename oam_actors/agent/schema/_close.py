"""Closing of object schemas (private, protocol §5.3).

A model writing JSON freely sometimes adds keys the schema never declared; closing the schema
makes coercion drop them before a tool call or a structured reply leaves the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["checked_keywords", "close_schema"]

# Deeper than any schema the check accepts; stops runaway recursion through unchecked `not`.
_MAX_DEPTH: Final = 64
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions")
_SCHEMA_SLOTS: Final = ("items", "additionalProperties", "not")
_ANNOTATIONS: Final = frozenset({"description", "title", "examples", "$comment"})


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
    closed = {key: _member(key, value, depth + 1, _close) for key, value in node.items()}
    if not in_all_of and isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        closed["additionalProperties"] = False
    return closed


def _member(key: str, value: Any, depth: int, visit: Callable[[Any, bool, int], Any]) -> Any:
    """A member of a schema object, with the schemas in it passed through ``visit``."""
    if key in _SCHEMA_MAPS and isinstance(value, dict):
        return {name: visit(child, False, depth) for name, child in value.items()}
    if key in _SCHEMA_SLOTS:
        return visit(value, False, depth)
    if key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
        return [visit(child, key == "allOf", depth) for child in value]
    return value


class _Unshareable(Exception):
    """The document's checks depend on more than its checked keywords."""


def checked_keywords(node: Any) -> Any | None:
    """A copy of a (closed) schema without the keywords no check or fix reads: descriptions,
    titles, examples, comments and ``x-*``. Schemas differing only in those validate and coerce
    alike (a crowd's reply schemas differ in the persona's name), so they can share their
    compiled checks. ``None`` when that cannot be known: a ``$ref`` might point into what was
    left out, and very deep documents are not walked."""
    try:
        return _strip(node, False, 0)
    except _Unshareable:
        return None


def _strip(node: Any, in_all_of: bool, depth: int) -> Any:
    if not isinstance(node, dict):
        return node
    if depth > _MAX_DEPTH or "$ref" in node:
        raise _Unshareable
    return {
        key: _member(key, value, depth + 1, _strip)
        for key, value in node.items()
        if key not in _ANNOTATIONS and not key.startswith("x-")
    }
