"""A small valid value for a schema, shown to the model as a prompt example (private).

Best effort over the closed schema: required properties (else the first one), the first
``enum`` choice or the ``const``, the first branch of a composition, lower bounds, minimum
lengths. ``$ref`` is not followed. Small models copy the example's shape, so it must be concrete.
"""

from __future__ import annotations

from typing import Any, Final

from ._json import keyword_list, required_names, whole

__all__ = ["example"]

_MAX_DEPTH: Final = 6
_COMPOSITIONS: Final = ("anyOf", "oneOf", "allOf")
_DEFAULT_ITEMS: Final = {"type": "string"}


def example(root: Any) -> Any:
    """The example value of a whole schema document (an object unless the root says otherwise)."""
    return _node(root, 0)


def _node(node: Any, depth: int) -> Any:
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return {} if depth == 0 else "…"
    if "const" in node:
        return node["const"]
    if allowed := keyword_list(node, "enum"):
        return allowed[0]
    for keyword in _COMPOSITIONS:
        if branches := keyword_list(node, keyword):
            return _node(branches[0], depth + 1)
    kind = _kind(node)
    properties = node.get("properties")
    if kind == "object" or isinstance(properties, dict) or (kind is None and depth == 0):
        return _object(node, properties if isinstance(properties, dict) else {}, depth)
    match kind:
        case "array":
            return _array(node, depth)
        case "integer" | "number":
            return _number(node, kind)
        case "boolean":
            return True
        case "null":
            return None
    return _string(node)


def _kind(node: dict[str, Any]) -> Any:
    """The declared type; of a list of types, the first that is not ``null``."""
    declared = node.get("type")
    if isinstance(declared, list):
        return next((name for name in declared if name != "null"), None)
    return declared


def _object(node: dict[str, Any], properties: dict[str, Any], depth: int) -> dict[str, Any]:
    required = set(required_names(node))
    names = [name for name in properties if name in required] or list(properties)[:1]
    return {name: _node(properties[name], depth + 1) for name in names}


def _array(node: dict[str, Any], depth: int) -> list[Any]:
    count = max(1, whole(node.get("minItems")) or 1)
    return [_node(node.get("items", _DEFAULT_ITEMS), depth + 1) for _ in range(min(count, 2))]


def _number(node: dict[str, Any], kind: str) -> int | float:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if isinstance(low, int | float):
        # An exclusive bound alone is not a valid value: step over it.
        value = low + (1 if "exclusiveMinimum" in node and "minimum" not in node else 0)
    else:
        value = 1
    return int(value) if kind == "integer" else value


def _string(node: dict[str, Any]) -> str:
    length = whole(node.get("minLength")) or 0
    return "text" if length <= 4 else "x" * length
