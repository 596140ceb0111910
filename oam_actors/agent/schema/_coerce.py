"""Coercion of near-miss values (private, protocol §5.4).

Small models write ``"2"`` for ``2``, ``"Ale "`` for ``"ale"`` or ``itemName`` for
``item_name``; these are fixed here before validation, so they cost no repair round. Nothing
is guessed: ambiguous or unconvertible values are left as they are for validation to report.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from ._json import (
    MAX_DEPTH,
    NodeCompiler,
    declared_types,
    is_number,
    json_equals,
    json_text,
    keyword_dict,
    keyword_list,
    matches_type,
    required_names,
    resolve,
)
from ._validate import Validator

__all__ = ["Coercer", "Fix"]

_NUMERAL: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER: Final = re.compile(r"[+-]?\d+")
_SEPARATORS: Final = re.compile(r"[\s_-]+")
# Integral numerals beyond this many digits are left alone rather than expanded.
_MAX_DIGITS: Final = 300
_NO: Final[Any] = object()
"""A converter's "cannot convert" (``None`` is a JSON value)."""


Fix = Callable[[Any, int], Any]
"""A compiled schema node: ``fix(value, depth)`` is ``value`` coerced towards it."""


def _unchanged(value: Any, depth: int) -> Any:
    return value


class Coercer(NodeCompiler[Fix]):
    """The fixes of one (closed) schema document, compiled once per node (see :class:`Validator`,
    whose checks decide between alternatives).

    :meth:`coerce` never raises and never mutates ``value``: changed containers are rebuilt,
    unchanged parts are shared.
    """

    def __init__(self, validator: Validator) -> None:
        super().__init__(validator.root)
        self.validator = validator

    def coerce(self, value: Any) -> Any:
        """``value`` coerced towards the whole document."""
        return self.function_of(self.root)(value, 0)

    def _compile(self, node: Any) -> Fix:
        schema = resolve(self.root, node)
        if not isinstance(schema, dict):
            return _unchanged
        all_of = [self.slot(branch) for branch in keyword_list(schema, "allOf") or ()]
        choices = keyword_list(schema, "anyOf")
        if choices is None:
            choices = keyword_list(schema, "oneOf")
        if choices is not None:
            return self._alternatives(all_of, choices)
        convert = _converter(declared_types(schema))
        allowed = _Choices(keyword_list(schema, "enum"))
        const = _Choices([schema["const"]] if "const" in schema else None)
        # Built when the first object reaches this node (most nodes never see one).
        of_object: list[Callable[[dict[str, Any], int], dict[str, Any]]] = []
        items = self.slot(schema["items"]) if "items" in schema else None

        def fix(value: Any, depth: int) -> Any:
            if depth > MAX_DEPTH:
                return value
            for branch in all_of:
                value = branch[0](value, depth + 1)
            if value is None:
                return value
            if convert is not None:
                value = convert(value)
            if allowed.listed is not None:
                value = allowed.match(value)
            if const.listed is not None:
                value = const.match(value)
            if isinstance(value, dict):
                if not of_object:
                    of_object.append(self._object(schema))
                return of_object[0](value, depth)
            if items is not None and isinstance(value, list):
                item_fix = items[0]
                return [item_fix(item, depth + 1) for item in value]
            return value

        return fix

    def _alternatives(self, all_of: list[list[Fix]], choices: list[Any]) -> Fix:
        """Unchanged if a branch accepts it, else the first branch whose coercion is accepted."""
        accepts = self.validator.accepts
        fixes = [(choice, self.slot(choice)) for choice in choices]

        def fix(value: Any, depth: int) -> Any:
            if depth > MAX_DEPTH:
                return value
            for branch in all_of:
                value = branch[0](value, depth + 1)
            if any(accepts(choice, value, depth) for choice in choices):
                return value
            for choice, choice_fix in fixes:
                candidate = choice_fix[0](value, depth + 1)
                if accepts(choice, candidate, depth):
                    return candidate
            return value

        return fix

    def _object(self, schema: dict[str, Any]) -> Callable[[dict[str, Any], int], dict[str, Any]]:
        properties = keyword_dict(schema, "properties")
        required = set(required_names(schema))
        additional = schema.get("additionalProperties")
        children = {name: (child, self.slot(child)) for name, child in properties.items()}
        other = self.slot(additional) if isinstance(additional, dict) else None
        closed = additional is False
        accepts = self.validator.accepts

        def of_object(value: dict[str, Any], depth: int) -> dict[str, Any]:
            renamed = value if all(key in properties for key in value) else _rename_keys(value, properties)
            # Unknown keys are dropped only when nothing is missing, so a misnamed key still shows.
            complete = required.issubset(renamed)
            result: dict[str, Any] = {}
            for key, child in renamed.items():
                declared = children.get(key)
                if declared is not None:
                    node, child_fix = declared
                    if child is None and key not in required and not accepts(node, None, depth):
                        continue
                    result[key] = child_fix[0](child, depth + 1)
                elif other is not None:
                    result[key] = other[0](child, depth + 1)
                elif not (closed and complete):
                    result[key] = child
            return result

        return of_object


def _converter(types: list[str] | None) -> Callable[[Any], Any] | None:
    """The type conversion of a node declaring ``types`` (``None``: nothing to convert)."""
    if types is None:
        return None
    if all(name in _CLASSES for name in types):
        # A value of one of these types is left as it is: one isinstance instead of a lookup per type.
        classes = tuple(_CLASSES[name] for name in types)
        return lambda value: value if isinstance(value, classes) else _convert_type(value, types)
    return lambda value: _convert_type(value, types)


def _convert_type(value: Any, types: list[str] | None) -> Any:
    if types is None:
        return value
    if not any(matches_type(value, name) for name in types):
        for name in types:
            converted = _CONVERTERS[name](value)
            if converted is not _NO:
                return converted
        return value
    # An integral float is an integer already; make it look like one.
    if "integer" in types and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _to_integer(value: Any) -> Any:
    if not isinstance(value, str):
        return _NO
    text = value.strip()
    if not _NUMERAL.fullmatch(text):
        return _NO
    try:
        number = Decimal(text)
    except InvalidOperation:
        return _NO
    if number.adjusted() > _MAX_DIGITS or number != number.to_integral_value():
        return _NO
    return int(number)


def _to_number(value: Any) -> Any:
    if not isinstance(value, str):
        return _NO
    text = value.strip()
    if _INTEGER.fullmatch(text) and len(text) <= _MAX_DIGITS:
        return int(text)
    if not _NUMERAL.fullmatch(text):
        return _NO
    number = float(text)
    return number if number not in (float("inf"), float("-inf")) else _NO


def _to_boolean(value: Any) -> Any:
    word = value.strip().lower() if isinstance(value, str) else None
    if word in ("true", "yes"):
        return True
    if word in ("false", "no"):
        return False
    return _NO


def _to_string(value: Any) -> Any:
    return json_text(value) if is_number(value) or isinstance(value, bool) else _NO


def _to_object(value: Any) -> Any:
    parsed = _parse_json(value.strip()) if isinstance(value, str) else _NO
    return parsed if isinstance(parsed, dict) else _NO


def _to_array(value: Any) -> Any:
    parsed = _parse_json(value.strip()) if isinstance(value, str) else _NO
    return parsed if isinstance(parsed, list) else [value]


def _to_null(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() in ("null", "none") else _NO


# The types whose values matches_type tells by class alone (numbers are not: bool is an int).
_CLASSES: Final[dict[str, type]] = {"string": str, "boolean": bool, "object": dict, "array": list}
_CONVERTERS: Final = {
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "string": _to_string,
    "object": _to_object,
    "array": _to_array,
    "null": _to_null,
}


def _parse_json(text: str) -> Any:
    """One JSON value from model text, read leniently (single quotes, trailing commas, …)."""
    # Imported on first use, so loading the engine never depends on the agent package import order.
    from oam_actors.agent.lenient_json import parse_value

    try:
        return parse_value(text)
    except (ValueError, RecursionError):
        return _NO


def _normalize_words(text: str) -> str:
    return _SEPARATORS.sub(" ", text.strip().lower())


@functools.lru_cache(maxsize=4096)
def _normalize_key(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalpha() or c.isdecimal())


class _Choices:
    """An ``enum`` (or a ``const`` as a one-item list): ``listed`` is ``None`` without one."""

    def __init__(self, listed: list[Any] | None) -> None:
        self.listed = listed
        # A plain string is found among the string choices by hash (most enums are strings).
        self._strings = frozenset(choice for choice in listed or () if type(choice) is str)

    def match(self, value: Any) -> Any:
        """An exact match stays; else the one choice equal up to case and separators, if unique."""
        choices = self.listed
        assert choices is not None
        if type(value) is str and value in self._strings:
            return value
        if any(json_equals(choice, value) for choice in choices) or not isinstance(value, str):
            return value
        wanted = _normalize_words(value)
        found = [c for c in choices if isinstance(c, str) and _normalize_words(c) == wanted]
        return found[0] if len(found) == 1 else value


def _rename_keys(value: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """Keys differing from an unused declared property only in case or separators take its name."""
    renamed: dict[str, Any] = {}
    for key, child in value.items():
        target = key
        if key not in properties:
            wanted = _normalize_key(key)
            target = next(
                (
                    name
                    for name in properties
                    if name not in value and name not in renamed and _normalize_key(name) == wanted
                ),
                key,
            )
        renamed[target] = child
    return renamed
