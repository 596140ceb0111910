"""Closing of object schemas (private, protocol §5.3), and the outline schemas share.

A model writing JSON freely sometimes adds keys the schema never declared; closing the schema
makes coercion drop them before a tool call or a structured reply leaves the agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

__all__ = ["close_schema", "placeholder", "redescribed"]

# Deeper than any schema the check accepts; stops runaway recursion through unchecked `not`.
_MAX_DEPTH: Final = 64
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions")
_SCHEMA_SLOTS: Final = ("items", "additionalProperties", "not")
_COMPOSITIONS: Final = ("anyOf", "oneOf", "allOf")
_WALKED: Final = frozenset({*_SCHEMA_MAPS, *_SCHEMA_SLOTS, *_COMPOSITIONS})
_ANNOTATIONS: Final = frozenset({"description", "title", "examples", "$comment"})
_ORDER: Final = "x-order"  # the one x- keyword read: ordering keys


def placeholder(index: int) -> str:
    """What stands for the ``index``-th string description in an outline."""
    return f"\x00{index}\x00"


def close_schema(node: Any) -> tuple[Any, Any | None, list[str]]:
    """``(closed, outline, descriptions)``.

    ``closed`` is a copy where every object schema declaring ``properties`` without
    ``additionalProperties`` gets ``"additionalProperties": false``, recursively. Members of
    ``allOf`` themselves stay open (closed, they would reject each other's keys); schemas nested
    inside them are closed. An explicit ``additionalProperties`` is kept.

    ``outline`` is ``closed`` without the keywords no check, fix, order or rendering reads
    (titles, examples, comments, ``x-*`` but ``x-order``), each string description replaced by
    :func:`placeholder` of its index in ``descriptions``. Schemas with one outline check,
    validate, coerce, order and render alike (a crowd's reply schemas differ in the persona's
    name), so they share all of that. ``None`` when that cannot be known: a ``$ref`` might point
    into what was left out, and very deep documents are not walked.
    """
    closer = _Closer()
    closed, outline = closer.node(node, False, 0)
    return closed, None if closer.unshareable else outline, closer.descriptions


class _Closer:
    """One walk building the closed copy and its outline side by side."""

    def __init__(self) -> None:
        self.descriptions: list[str] = []
        self.unshareable = False

    def node(self, node: Any, in_all_of: bool, depth: int) -> tuple[Any, Any]:
        if not isinstance(node, dict):
            return node, node
        if depth > _MAX_DEPTH:
            self.unshareable = True
            return node, node
        if "$ref" in node:
            self.unshareable = True
        closed, outline = {}, {}
        for key, value in node.items():
            if key in _WALKED:
                closed[key], outline[key] = self.member(key, value, depth + 1)
            elif key == "description" and isinstance(value, str):
                closed[key], outline[key] = value, placeholder(len(self.descriptions))
                self.descriptions.append(value)
            else:
                closed[key] = value
                if key not in _ANNOTATIONS and (key == _ORDER or not key.startswith("x-")):
                    outline[key] = value
        if not in_all_of and isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
            closed["additionalProperties"] = outline["additionalProperties"] = False
        return closed, outline

    def member(self, key: str, value: Any, depth: int) -> tuple[Any, Any]:
        """A member of a schema object, with the schemas in it closed and outlined."""
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            closed, outline = {}, {}
            for name, child in value.items():
                closed[name], outline[name] = self.node(child, False, depth)
            return closed, outline
        if key in _SCHEMA_SLOTS:
            return self.node(value, False, depth)
        if key in _COMPOSITIONS and isinstance(value, list):
            pairs = [self.node(child, key == "allOf", depth) for child in value]
            return [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        return value, value


def redescribed(node: Any, descriptions: Iterator[str]) -> Any:
    """A copy of ``node`` whose string descriptions are the next of ``descriptions``, taken in the
    order :func:`close_schema` lists them (the schemas of one outline differ only there)."""
    if not isinstance(node, dict):
        return node
    copy = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            copy[key] = {name: redescribed(child, descriptions) for name, child in value.items()}
        elif key in _SCHEMA_SLOTS:
            copy[key] = redescribed(value, descriptions)
        elif key in _COMPOSITIONS and isinstance(value, list):
            copy[key] = [redescribed(child, descriptions) for child in value]
        elif key == "description" and isinstance(value, str):
            copy[key] = next(descriptions)
        else:
            copy[key] = value
    return copy
