"""The fast path of conform for flat object schemas (private).

Most tool arguments and replies are one object of strings, booleans and string lists, and the
model's value is usually right already: then coercion changes nothing (or drops undeclared keys),
validation finds nothing and ordering only sorts the keys. :func:`flat_conformer` checks exactly
that in one pass over the value; anything it is not sure of goes the general way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["FlatConform", "flat_conformer"]

FlatConform = Callable[[Any], "dict[str, Any] | None"]
"""``conform(value)``: the ordered value when it is valid as it stands, else ``None``."""

# Keywords that change neither checks, fixes nor order.
_ANNOTATIONS: Final = frozenset({"description", "title"})
_OBJECT_KEYS: Final = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_STRING_KEYS: Final = _ANNOTATIONS | {"type", "enum"}
_ARRAY_KEYS: Final = _ANNOTATIONS | {"type", "items"}
_STRINGS: Final = "strings"
_BOOLEANS: Final = "booleans"
_STRING_LISTS: Final = "string lists"


def flat_conformer(schema: Any) -> FlatConform | None:
    """The fast path for ``schema`` (a closed schema), or ``None`` when it is not a closed object
    of plain strings (maybe an enum of strings), booleans and lists of plain strings."""
    if not isinstance(schema, dict) or not _OBJECT_KEYS.issuperset(schema) or schema.get("type") != "object":
        return None
    properties, required = schema.get("properties"), schema.get("required", [])
    if schema.get("additionalProperties") is not False or not isinstance(properties, dict):
        return None
    if not isinstance(required, list) or not all(isinstance(name, str) and name in properties for name in required):
        return None
    kinds: dict[str, str | frozenset[str]] = {}
    for name, child in properties.items():
        kind = _kind(child)
        if kind is None:
            return None
        kinds[name] = kind
    needed = frozenset(required)

    def conform(value: Any) -> dict[str, Any] | None:
        if type(value) is not dict or not needed.issubset(value):
            return None
        unknown = False
        for key, child in value.items():
            kind = kinds.get(key)
            if kind is None:
                unknown = True
            elif not _fits(kind, child):
                return None
        # Coercion drops undeclared keys, but renames one first when it looks like a declared
        # property the value lacks: with every property present there is none to rename to.
        if unknown and not all(name in value for name in kinds):
            return None
        # Declared order; lists copied, as coercion and ordering rebuild them.
        return {key: list(value[key]) if kinds[key] is _STRING_LISTS else value[key] for key in kinds if key in value}

    return conform


def _kind(child: Any) -> str | frozenset[str] | None:
    if not isinstance(child, dict):
        return None
    kind = child.get("type")
    if kind == "string" and _STRING_KEYS.issuperset(child):
        if "enum" not in child:
            return _STRINGS
        choices = child["enum"]
        if isinstance(choices, list) and choices and all(type(choice) is str for choice in choices):
            return frozenset(choices)
        return None
    if kind == "boolean" and _ANNOTATIONS.issuperset(child.keys() - {"type"}):
        return _BOOLEANS
    if kind == "array" and _ARRAY_KEYS.issuperset(child) and _kind(child.get("items")) is _STRINGS:
        return _STRING_LISTS
    return None


def _fits(kind: str | frozenset[str], value: Any) -> bool:
    if kind is _STRINGS:
        return type(value) is str
    if kind is _BOOLEANS:
        return type(value) is bool
    if kind is _STRING_LISTS:
        return type(value) is list and all(type(item) is str for item in value)
    return type(value) is str and value in kind
