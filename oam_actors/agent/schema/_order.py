"""Key order (private, protocol §5.6).

A model writes JSON field by field, so the order of keys is part of the answer's shape: a
``reasoning`` key declared before ``choice`` acts as a small chain of thought, and replies read
back in history look the way the schema declares them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._json import MAX_DEPTH, NodeCompiler, keyword_dict, keyword_list, resolve

__all__ = ["Orderer"]

_ANY: dict[str, Any] = {}

Order = Callable[[Any, int], Any]
"""A compiled schema node: ``order(value, depth)`` is ``value`` with its keys in declared order."""


def _unchanged(value: Any, depth: int) -> Any:
    return value


class Orderer(NodeCompiler[Order]):
    """The key order of one (closed) schema document, compiled once per node (see
    :class:`~._validate.Validator`): every value of a tool or reply goes through it."""

    def order(self, value: Any) -> Any:
        """``value`` with object keys in declared order (``x-order`` first if given), recursively;
        keys the schema does not declare follow in their original order."""
        return self.function_of(self.root)(value, 0)

    def _compile(self, node: Any) -> Order:
        schema = resolve(self.root, node)
        if not isinstance(schema, dict):
            return _unchanged
        of_object = self._object(schema)  # cheap: the nodes below compile when first reached
        items = self.slot(schema["items"]) if "items" in schema else None

        def order(value: Any, depth: int) -> Any:
            if depth > MAX_DEPTH:
                return value
            if isinstance(value, dict):
                return of_object(value, depth)
            if items is not None and isinstance(value, list):
                return [items[0](item, depth + 1) for item in value]
            return value

        return order

    def _object(self, schema: dict[str, Any]) -> Order:
        choices = keyword_list(schema, "anyOf")
        if choices is None:
            choices = keyword_list(schema, "oneOf")
        if choices:
            return self._alternatives(choices)
        properties = _declared_properties(self.root, schema)
        listed = keyword_list(schema, "x-order")
        first = list(dict.fromkeys(key for key in listed if isinstance(key, str))) if listed is not None \
            else list(properties)
        children = {key: self.slot(child) for key, child in properties.items()}
        undeclared = self.slot(_ANY)
        other = self.slot(schema.get("additionalProperties", _ANY))

        def of_object(value: Any, depth: int) -> Any:
            result: dict[str, Any] = {}
            for key in first:
                if key in value:
                    result[key] = children.get(key, undeclared)[0](value[key], depth + 1)
            for key, child in value.items():
                if key not in result:
                    result[key] = children.get(key, other)[0](child, depth + 1)
            return result

        return of_object

    def _alternatives(self, choices: list[Any]) -> Order:
        """The branch sharing most keys with the value orders it (the first of equals)."""
        branches = [resolve(self.root, choice) for choice in choices]
        slots = [self.slot(branch) for branch in branches]

        def of_choice(value: Any, depth: int) -> Any:
            best = max(range(len(branches)), key=lambda index: _overlap(branches[index], value))
            return slots[best][0](value, depth + 1)

        return of_choice


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
