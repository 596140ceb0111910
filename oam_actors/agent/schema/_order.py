"""Key order (private, protocol §5.6).

A model writes JSON field by field, so the order of keys is part of the answer's shape: a
``reasoning`` key declared before ``choice`` acts as a small chain of thought, and replies read
back in history look the way the schema declares them.
"""

from __future__ import annotations

from typing import Any

from ._json import MAX_DEPTH, keyword_dict, keyword_list, resolve

__all__ = ["order"]

_ANY: dict[str, Any] = {}


def order(root: Any, node: Any, value: Any, depth: int) -> Any:
    """``value`` with object keys in declared order (``x-order`` first if given), recursively;
    keys the schema does not declare follow in their original order."""
    if depth > MAX_DEPTH:
        return value
    schema = resolve(root, node)
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        return _order_object(root, schema, value, depth)
    if isinstance(value, list) and "items" in schema:
        return [order(root, schema["items"], item, depth + 1) for item in value]
    return value


def _order_object(root: Any, schema: dict[str, Any], value: dict[str, Any], depth: int) -> Any:
    choices = keyword_list(schema, "anyOf")
    if choices is None:
        choices = keyword_list(schema, "oneOf")
    if choices:
        branches = [resolve(root, choice) for choice in choices]
        best = max(branches, key=lambda branch: _overlap(branch, value))
        return order(root, best, value, depth + 1)
    properties = _declared_properties(root, schema)
    listed = keyword_list(schema, "x-order")
    first = [key for key in listed if isinstance(key, str)] if listed is not None else list(properties)
    result: dict[str, Any] = {}
    for key in first:
        if key in value and key not in result:
            result[key] = order(root, properties.get(key, _ANY), value[key], depth + 1)
    additional = schema.get("additionalProperties", _ANY)
    for key, child in value.items():
        if key not in result:
            result[key] = order(root, properties.get(key, additional), child, depth + 1)
    return result


def _declared_properties(root: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """``properties`` merged with those of the ``allOf`` branches (first declaration wins)."""
    merged = dict(keyword_dict(schema, "properties"))
    for branch in keyword_list(schema, "allOf") or ():
        resolved = resolve(root, branch)
        if isinstance(resolved, dict):
            for key, child in keyword_dict(resolved, "properties").items():
                merged.setdefault(key, child)
    return merged


def _overlap(branch: Any, value: dict[str, Any]) -> int:
    """Shared keys count double; declared keys the value lacks count against."""
    names = keyword_dict(branch, "properties") if isinstance(branch, dict) else {}
    shared = sum(1 for name in names if name in value)
    return shared * 2 - (len(names) - shared)
