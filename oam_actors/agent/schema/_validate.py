"""Validation against a (closed) schema document (private, protocol §5.5).

Every problem is reported, not just the first, each with a JSONPath-like location, so one
repair prompt can name them all.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ._json import (
    MAX_DEPTH,
    NodeCompiler,
    declared_types,
    is_integral,
    is_number,
    json_equals,
    json_text,
    keyword_dict,
    keyword_list,
    keyword_number,
    plain_number,
    preview,
    required_names,
    resolve,
    whole,
)

__all__ = ["Check", "Validator", "Violation", "format_violations", "pattern_error"]


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


def child_path(path: str, key: str) -> str:
    """``$.name`` for identifier-like keys, ``$["odd key"]`` otherwise."""
    return f"{path}{_key_step(key)}"


@functools.lru_cache(maxsize=4096)
def _key_step(key: str) -> str:
    """What a key adds to a path (keys repeat: the same properties in every value)."""
    plain = key and not key[0].isdecimal() and all(c.isalpha() or c.isdecimal() or c == "_" for c in key)
    return f".{key}" if plain else f"[{json_text(key)}]"


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


Check = Callable[[Any, str, int, list[Violation]], None]
"""A compiled schema node: ``check(value, path, depth, out)`` appends ``value``'s violations."""

_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "number": is_number,
    "integer": is_integral,
}


def _accept_all(value: Any, path: str, depth: int, out: list[Violation]) -> None:
    return None

_EVERY_TYPE: frozenset[str] = frozenset(_TYPE_TESTS)


class Validator(NodeCompiler[Check]):
    """The checks of one (closed) schema document, compiled once.

    Each schema node becomes a closure that holds its keywords already looked up, so checking a
    value never reads the schema document again. :meth:`violations` reports every problem with
    the messages and paths of §5.5.
    """

    def violations(self, value: Any) -> list[Violation]:
        """All the ways ``value`` fails the document; empty when valid."""
        out: list[Violation] = []
        self.function_of(self.root)(value, "$", 0, out)
        return out

    def accepts(self, node: Any, value: Any, depth: int) -> bool:
        """True if ``value`` satisfies ``node`` (a schema inside the document)."""
        out: list[Violation] = []
        self.function_of(node)(value, "$", depth + 1, out)
        return not out

    def _compile(self, node: Any) -> Check:
        schema = resolve(self.root, node)
        if schema is False:

            def nothing(value: Any, path: str, depth: int, out: list[Violation]) -> None:
                if depth <= MAX_DEPTH:
                    out.append(Violation(path, "no value is allowed here"))

            return nothing
        if not isinstance(schema, dict):
            return _accept_all
        return self._compile_dict(schema)

    def _compile_dict(self, schema: dict[str, Any]) -> Check:
        slot = self.slot
        all_of = [slot(branch) for branch in keyword_list(schema, "allOf") or ()]
        any_of = keyword_list(schema, "anyOf")
        one_of = keyword_list(schema, "oneOf")
        any_checks = [slot(choice) for choice in any_of] if any_of is not None else None
        one_checks = [slot(choice) for choice in one_of] if one_of is not None else None
        nullable = schema.get("nullable") is True
        types = declared_types(schema)
        # An unknown type name matches anything, as it does when interpreted.
        type_tests = (
            [_TYPE_TESTS[name] for name in types] if types is not None and all(n in _TYPE_TESTS for n in types) else None
        )
        # With known types, only values of those types get past the type check: the keywords of
        # the other types are not even looked at.
        reach = frozenset(types) if type_tests is not None and types is not None else _EVERY_TYPE
        choices = self._choices(schema)
        of_object = self._object(schema) if "object" in reach else None
        of_array = self._array(schema) if "array" in reach else None
        of_string = _string(schema) if "string" in reach else None
        of_number = _number(schema) if "number" in reach or "integer" in reach else None
        choose = _choice

        def check(value: Any, path: str, depth: int, out: list[Violation]) -> None:
            if depth > MAX_DEPTH:
                return
            for branch in all_of:
                branch[0](value, path, depth + 1, out)
            if any_checks is not None:
                choose(any_checks, value, path, depth, out, exactly_one=False)
            if one_checks is not None:
                choose(one_checks, value, path, depth, out, exactly_one=True)
            if value is None and nullable:
                return
            if type_tests is not None and not any(test(value) for test in type_tests):
                assert types is not None
                out.append(Violation(path, f"expected {_describe_types(types)}, got {_describe_value(value)}"))
                return
            if choices is not None:
                choices(value, path, out)
            if isinstance(value, dict):
                if of_object is not None:
                    of_object(value, path, depth, out)
            elif isinstance(value, list):
                if of_array is not None:
                    of_array(value, path, depth, out)
            elif isinstance(value, str):
                if of_string is not None:
                    of_string(value, path, out)
            elif of_number is not None and is_number(value):
                of_number(value, path, out)

        return check

    @staticmethod
    def _choices(schema: dict[str, Any]) -> Callable[[Any, str, list[Violation]], None] | None:
        allowed = keyword_list(schema, "enum")
        has_const = "const" in schema
        if allowed is None and not has_const:
            return None
        const = schema.get("const")
        # A plain string is found among the string choices by hash (most enums are strings).
        strings = frozenset(choice for choice in allowed or () if type(choice) is str)

        def choices(value: Any, path: str, out: list[Violation]) -> None:
            if allowed is not None and not (type(value) is str and value in strings) \
                    and not any(json_equals(choice, value) for choice in allowed):
                listed = ", ".join(json_text(choice) for choice in allowed)
                out.append(Violation(path, f"must be one of {listed}; got {preview(value)}"))
            if has_const and not json_equals(const, value):
                out.append(Violation(path, f"must be exactly {json_text(const)}; got {preview(value)}"))

        return choices

    def _object(self, schema: dict[str, Any]) -> Callable[[dict[str, Any], str, int, list[Violation]], None] | None:
        properties = keyword_dict(schema, "properties")
        required = required_names(schema)
        additional = schema.get("additionalProperties")
        if not properties and not required and not isinstance(additional, dict) and additional is not False:
            return None
        children = {name: self.slot(child) for name, child in properties.items()}
        other = self.slot(additional) if isinstance(additional, dict) else None
        closed = additional is False

        def of_object(value: dict[str, Any], path: str, depth: int, out: list[Violation]) -> None:
            for name in required:
                if name not in value:
                    out.append(Violation(path, f'missing required property "{name}"'))
            for key, child in value.items():
                check = children.get(key)
                if check is not None:
                    check[0](child, f"{path}{_key_step(key)}", depth + 1, out)
                elif other is not None:
                    other[0](child, f"{path}{_key_step(key)}", depth + 1, out)
                elif closed:
                    allowed = ", ".join(f'"{name}"' for name in properties)
                    reason = f"allowed: {allowed}" if properties else "no properties are allowed"
                    out.append(Violation(path, f'unexpected property "{key}" ({reason})'))

        return of_object

    def _array(self, schema: dict[str, Any]) -> Callable[[list[Any], str, int, list[Violation]], None] | None:
        low, high = whole(schema.get("minItems")), whole(schema.get("maxItems"))
        items = self.slot(schema["items"]) if "items" in schema else None
        if low is None and high is None and items is None:
            return None

        def of_array(value: list[Any], path: str, depth: int, out: list[Violation]) -> None:
            if low is not None and len(value) < low:
                out.append(Violation(path, f"must have at least {_plural(low, 'item')}; got {len(value)}"))
            if high is not None and len(value) > high:
                out.append(Violation(path, f"must have at most {_plural(high, 'item')}; got {len(value)}"))
            if items is not None:
                check = items[0]
                for index, item in enumerate(value):
                    check(item, f"{path}[{index}]", depth + 1, out)

        return of_array


def _choice(
    checks: list[list[Check]], value: Any, path: str, depth: int, out: list[Violation], *, exactly_one: bool
) -> None:
    results: list[list[Violation]] = []
    for check in checks:
        found: list[Violation] = []
        check[0](value, path, depth + 1, found)
        results.append(found)
    matches = sum(1 for result in results if not result)
    if matches == 1 or (matches > 1 and not exactly_one):
        return
    if matches > 1:
        out.append(Violation(path, f"matches {matches} of the alternatives but must match exactly one"))
        return
    # An alternative of the wrong type is the least helpful one to report.
    closest = min(
        results,
        key=lambda found: (
            any(v.path == path and v.message.startswith("expected ") for v in found),
            len(found),
        ),
    )
    out.append(Violation(
        path,
        f"does not match any of the {len(checks)} allowed alternatives "
        f"(closest: {format_violations(closest, 2)})",
    ))


def _string(schema: dict[str, Any]) -> Callable[[str, str, list[Violation]], None] | None:
    low, high = whole(schema.get("minLength")), whole(schema.get("maxLength"))
    pattern = schema.get("pattern")
    regex = _pattern(pattern) if isinstance(pattern, str) else None
    if low is None and high is None and regex is None:
        return None

    def of_string(value: str, path: str, out: list[Violation]) -> None:
        if low is not None and len(value) < low:
            out.append(Violation(path, f"must have at least {_plural(low, 'character')}; got {len(value)}"))
        if high is not None and len(value) > high:
            out.append(Violation(path, f"must have at most {_plural(high, 'character')}; got {len(value)}"))
        if regex is not None and regex.search(value) is None:
            out.append(Violation(path, f"must match the pattern {pattern}; got {preview(value)}"))

    return of_string


def _number(schema: dict[str, Any]) -> Callable[[int | float, str, list[Violation]], None] | None:
    minimum, maximum = keyword_number(schema, "minimum"), keyword_number(schema, "maximum")
    above, below = keyword_number(schema, "exclusiveMinimum"), keyword_number(schema, "exclusiveMaximum")
    if minimum is None and maximum is None and above is None and below is None:
        return None

    def of_number(value: int | float, path: str, out: list[Violation]) -> None:
        if minimum is not None and value < minimum:
            out.append(Violation(path, f"must be at least {plain_number(minimum)}; got {plain_number(value)}"))
        if maximum is not None and value > maximum:
            out.append(Violation(path, f"must be at most {plain_number(maximum)}; got {plain_number(value)}"))
        if above is not None and value <= above:
            out.append(Violation(path, f"must be greater than {plain_number(above)}; got {plain_number(value)}"))
        if below is not None and value >= below:
            out.append(Violation(path, f"must be less than {plain_number(below)}; got {plain_number(value)}"))

    return of_number
