"""Validation against a (closed) schema document (private, protocol §5.5).

Every problem is reported, not just the first, each with a JSONPath-like location, so one
repair prompt can name them all.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ._json import (
    MAX_DEPTH,
    declared_types,
    is_number,
    json_equals,
    json_text,
    keyword_dict,
    keyword_list,
    keyword_number,
    matches_type,
    plain_number,
    preview,
    required_names,
    resolve,
    whole,
)

__all__ = ["Violation", "accepts", "format_violations", "pattern_error", "violations"]


class Violation(msgspec.Struct, frozen=True):
    """One way a value fails a schema.

    ``path`` is JSONPath-like (``$``, ``$.quantity``, ``$.items[0].name``, ``$["odd key"]``);
    ``message`` says what is wrong, e.g. ``must be at most 10; got 12``.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def format_violations(violations: Sequence[Violation], limit: int = 4) -> str:
    """Violations joined with ``"; "``: at most ``limit``, then ``"; and N more"``."""
    shown = "; ".join(str(v) for v in violations[:limit])
    return f"{shown}; and {len(violations) - limit} more" if len(violations) > limit else shown


@functools.lru_cache(maxsize=512)
def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError, ValueError):
        return None


def pattern_error(text: str) -> str | None:
    """Why ``text`` is not a usable regular expression (Python syntax), or ``None``."""
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError, ValueError) as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def violations(root: Any, value: Any) -> list[Violation]:
    """All the ways ``value`` fails the schema document ``root``; empty when valid."""
    out: list[Violation] = []
    _Validator(root, out).node(value, root, "$", 0)
    return out


def accepts(root: Any, node: Any, value: Any, depth: int) -> bool:
    """True if ``value`` satisfies ``node`` (a schema inside the document ``root``)."""
    out: list[Violation] = []
    _Validator(root, out).node(value, node, "$", depth + 1)
    return not out


def child_path(path: str, key: str) -> str:
    """``$.name`` for identifier-like keys, ``$["odd key"]`` otherwise."""
    plain = key and not key[0].isdecimal() and all(c.isalpha() or c.isdecimal() or c == "_" for c in key)
    return f"{path}.{key}" if plain else f"{path}[{json_text(key)}]"


def _describe_types(types: list[str]) -> str:
    articles = {"object": "an object", "array": "an array", "integer": "an integer", "null": "null"}
    return " or ".join(articles.get(name, f"a {name}") for name in types)


def _describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"a string ({preview(value)})"
    if isinstance(value, bool):
        return f"a boolean ({json_text(value)})"
    return f"a number ({json_text(value)})"


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


class _Validator:
    def __init__(self, root: Any, out: list[Violation]) -> None:
        self.root = root
        self.out = out

    def add(self, path: str, message: str) -> None:
        self.out.append(Violation(path, message))

    def node(self, value: Any, node: Any, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        schema = resolve(self.root, node)
        if schema is False:
            self.add(path, "no value is allowed here")
        if not isinstance(schema, dict):
            return
        for branch in keyword_list(schema, "allOf") or ():
            self.node(value, branch, path, depth + 1)
        if (choices := keyword_list(schema, "anyOf")) is not None:
            self.choice(value, choices, path, depth, exactly_one=False)
        if (choices := keyword_list(schema, "oneOf")) is not None:
            self.choice(value, choices, path, depth, exactly_one=True)
        if value is None and schema.get("nullable") is True:
            return
        types = declared_types(schema)
        if types is not None and not any(matches_type(value, name) for name in types):
            self.add(path, f"expected {_describe_types(types)}, got {_describe_value(value)}")
            return
        self.choices(value, schema, path)
        if isinstance(value, dict):
            self.object(value, schema, path, depth)
        elif isinstance(value, list):
            self.array(value, schema, path, depth)
        elif isinstance(value, str):
            self.string(value, schema, path)
        elif is_number(value):
            self.number(value, schema, path)

    def choice(self, value: Any, choices: list[Any], path: str, depth: int, *, exactly_one: bool) -> None:
        results = [self.branch(value, choice, path, depth) for choice in choices]
        matches = sum(1 for result in results if not result)
        if matches == 1 or (matches > 1 and not exactly_one):
            return
        if matches > 1:
            self.add(path, f"matches {matches} of the alternatives but must match exactly one")
            return
        # An alternative of the wrong type is the least helpful one to report.
        closest = min(
            results,
            key=lambda found: (
                any(v.path == path and v.message.startswith("expected ") for v in found),
                len(found),
            ),
        )
        self.add(
            path,
            f"does not match any of the {len(choices)} allowed alternatives "
            f"(closest: {format_violations(closest, 2)})",
        )

    def branch(self, value: Any, node: Any, path: str, depth: int) -> list[Violation]:
        found: list[Violation] = []
        _Validator(self.root, found).node(value, node, path, depth + 1)
        return found

    def choices(self, value: Any, schema: dict[str, Any], path: str) -> None:
        allowed = keyword_list(schema, "enum")
        if allowed is not None and not any(json_equals(choice, value) for choice in allowed):
            listed = ", ".join(json_text(choice) for choice in allowed)
            self.add(path, f"must be one of {listed}; got {preview(value)}")
        if "const" in schema and not json_equals(schema["const"], value):
            self.add(path, f"must be exactly {json_text(schema['const'])}; got {preview(value)}")

    def object(self, value: dict[str, Any], schema: dict[str, Any], path: str, depth: int) -> None:
        properties = keyword_dict(schema, "properties")
        for name in required_names(schema):
            if name not in value:
                self.add(path, f'missing required property "{name}"')
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            if key in properties:
                self.node(child, properties[key], child_path(path, key), depth + 1)
            elif isinstance(additional, dict):
                self.node(child, additional, child_path(path, key), depth + 1)
            elif additional is False:
                allowed = ", ".join(f'"{name}"' for name in properties)
                reason = f"allowed: {allowed}" if properties else "no properties are allowed"
                self.add(path, f'unexpected property "{key}" ({reason})')

    def array(self, value: list[Any], schema: dict[str, Any], path: str, depth: int) -> None:
        low, high = whole(schema.get("minItems")), whole(schema.get("maxItems"))
        if low is not None and len(value) < low:
            self.add(path, f"must have at least {_plural(low, 'item')}; got {len(value)}")
        if high is not None and len(value) > high:
            self.add(path, f"must have at most {_plural(high, 'item')}; got {len(value)}")
        if "items" in schema:
            for index, item in enumerate(value):
                self.node(item, schema["items"], f"{path}[{index}]", depth + 1)

    def string(self, value: str, schema: dict[str, Any], path: str) -> None:
        low, high = whole(schema.get("minLength")), whole(schema.get("maxLength"))
        if low is not None and len(value) < low:
            self.add(path, f"must have at least {_plural(low, 'character')}; got {len(value)}")
        if high is not None and len(value) > high:
            self.add(path, f"must have at most {_plural(high, 'character')}; got {len(value)}")
        pattern = schema.get("pattern")
        regex = _pattern(pattern) if isinstance(pattern, str) else None
        if regex is not None and regex.search(value) is None:
            self.add(path, f"must match the pattern {pattern}; got {preview(value)}")

    def number(self, value: int | float, schema: dict[str, Any], path: str) -> None:
        got = plain_number(value)
        if (bound := keyword_number(schema, "minimum")) is not None and value < bound:
            self.add(path, f"must be at least {plain_number(bound)}; got {got}")
        if (bound := keyword_number(schema, "maximum")) is not None and value > bound:
            self.add(path, f"must be at most {plain_number(bound)}; got {got}")
        if (bound := keyword_number(schema, "exclusiveMinimum")) is not None and value <= bound:
            self.add(path, f"must be greater than {plain_number(bound)}; got {got}")
        if (bound := keyword_number(schema, "exclusiveMaximum")) is not None and value >= bound:
            self.add(path, f"must be less than {plain_number(bound)}; got {got}")
