"""Coercion of near-miss values (private, protocol §5.4).

Small models write ``"2"`` for ``2``, ``"Ale "`` for ``"ale"`` or ``itemName`` for
``item_name``; these are fixed here before validation, so they cost no repair round. Nothing
is guessed: ambiguous or unconvertible values are left as they are for validation to report.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from ._json import (
    MAX_DEPTH,
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

__all__ = ["coerce"]

_NUMERAL: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER: Final = re.compile(r"[+-]?\d+")
_SEPARATORS: Final = re.compile(r"[\s_-]+")
# Integral numerals beyond this many digits are left alone rather than expanded.
_MAX_DIGITS: Final = 300
_NO: Final[Any] = object()
"""A converter's "cannot convert" (``None`` is a JSON value)."""


def coerce(validator: Validator, node: Any, value: Any, depth: int) -> Any:
    """``value`` coerced towards ``node`` (a schema inside the document ``validator`` checks).

    Never raises and never mutates ``value``: changed containers are rebuilt, unchanged
    parts are shared.
    """
    if depth > MAX_DEPTH:
        return value
    schema = resolve(validator.root, node)
    if not isinstance(schema, dict):
        return value
    for branch in keyword_list(schema, "allOf") or ():
        value = coerce(validator, branch, value, depth + 1)
    choices = keyword_list(schema, "anyOf")
    if choices is None:
        choices = keyword_list(schema, "oneOf")
    if choices is not None:
        return _choose(validator, choices, value, depth)
    if value is None:
        return value
    value = _convert_type(value, declared_types(schema))
    if (allowed := keyword_list(schema, "enum")) is not None:
        value = _match_choice(value, allowed)
    if "const" in schema:
        value = _match_choice(value, [schema["const"]])
    if isinstance(value, dict):
        return _coerce_object(validator, schema, value, depth)
    if isinstance(value, list) and "items" in schema:
        return [coerce(validator, schema["items"], item, depth + 1) for item in value]
    return value


def _choose(validator: Validator, choices: list[Any], value: Any, depth: int) -> Any:
    """Unchanged if a branch accepts it, else the first branch whose coercion is accepted."""
    accepts = validator.accepts
    if any(accepts(choice, value, depth) for choice in choices):
        return value
    for choice in choices:
        candidate = coerce(validator, choice, value, depth + 1)
        if accepts(choice, candidate, depth):
            return candidate
    return value


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


def _normalize_key(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalpha() or c.isdecimal())


def _match_choice(value: Any, choices: list[Any]) -> Any:
    """An exact match stays; else the one choice equal up to case and separators, if unique."""
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


def _coerce_object(validator: Validator, schema: dict[str, Any], value: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = keyword_dict(schema, "properties")
    required = set(required_names(schema))
    additional = schema.get("additionalProperties")
    renamed = _rename_keys(value, properties)
    # Unknown keys are dropped only when nothing is missing, so a misnamed key still shows.
    complete = required.issubset(renamed)
    result: dict[str, Any] = {}
    for key, child in renamed.items():
        if key in properties:
            if child is None and key not in required and not validator.accepts(properties[key], None, depth):
                continue
            result[key] = coerce(validator, properties[key], child, depth + 1)
        elif isinstance(additional, dict):
            result[key] = coerce(validator, additional, child, depth + 1)
        elif not (additional is False and complete):
            result[key] = child
    return result
