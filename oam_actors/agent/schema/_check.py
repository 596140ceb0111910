"""Schema checking (private): malformed schemas raise, ignored keywords become warnings.

Follows the Android validator: the first problem found stops the check, and its pointer names
the offending keyword (``#/properties/a/minLength``), so clients can point at it.
"""

from __future__ import annotations

from typing import Any, Final

from ._json import MISSING, TYPES, is_number, json_text, resolve_pointer, whole
from ._validate import pattern_error

__all__ = ["SchemaCheckError", "check_schema"]

MAX_NESTING: Final = 32

_KNOWN: Final = frozenset(
    {
        "type", "nullable", "properties", "required", "additionalProperties", "items",
        "minItems", "maxItems", "enum", "const", "pattern", "minLength", "maxLength",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf",
        "allOf", "$ref", "$defs", "definitions", "title", "description", "default",
        "examples", "$schema", "$id", "$comment", "x-order",
    }
)  # fmt: skip
_COMPOSITION: Final = ("anyOf", "oneOf", "allOf")
_BOUNDS: Final = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS: Final = ("minLength", "maxLength", "minItems", "maxItems")


class SchemaCheckError(Exception):
    """A malformed schema: ``pointer`` is where (``#/type``), ``reason`` what."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer}: {reason}")
        self.pointer = pointer
        self.reason = reason


def check_schema(root: Any) -> list[str]:
    """Checks a whole schema document; returns the ignored-keyword warnings in document order.

    Raises :class:`SchemaCheckError` at the first malformed keyword.
    """
    warnings: dict[str, None] = {}
    _Checker(root, warnings).node(root, "#", 0)
    return list(warnings)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


class _Checker:
    def __init__(self, root: Any, warnings: dict[str, None]) -> None:
        self.root = root
        self.warnings = warnings

    def node(self, node: Any, at: str, depth: int) -> None:
        if depth > MAX_NESTING:
            raise SchemaCheckError(at, f"the schema nests more than {MAX_NESTING} levels deep")
        if isinstance(node, bool):
            return
        if not isinstance(node, dict):
            raise SchemaCheckError(at, "expected a schema object")
        for key in node:
            if key not in _KNOWN and not key.startswith("x-"):
                self.warnings[f"{at}: '{key}' is not supported and is ignored"] = None
        self.ref(node, at)
        self.type(node, at)
        self.children(node, "properties", at, depth)
        self.required(node, at)
        self.additional(node, at, depth)
        self.items(node, at, depth)
        self.composition(node, at, depth)
        self.enum(node, at)
        self.numbers(node, at)
        self.pattern(node, at)
        self.children(node, "$defs", at, depth)
        self.children(node, "definitions", at, depth)

    def ref(self, node: dict[str, Any], at: str) -> None:
        if "$ref" not in node:
            return
        target = node["$ref"]
        if not isinstance(target, str):
            raise SchemaCheckError(f"{at}/$ref", "must be a string")
        if resolve_pointer(self.root, target) is MISSING:
            raise SchemaCheckError(
                f"{at}/$ref", f"cannot resolve '{target}' (only local references are supported)"
            )

    def type(self, node: dict[str, Any], at: str) -> None:
        if "type" not in node:
            return
        declared = node["type"]
        if isinstance(declared, dict):
            raise SchemaCheckError(f"{at}/type", "must be a string or an array of strings")
        if isinstance(declared, list):
            if not declared:
                raise SchemaCheckError(f"{at}/type", "must not be empty")
            names = declared
        else:
            names = [declared]
        for name in names:
            if not isinstance(name, str) or name not in TYPES:
                raise SchemaCheckError(f"{at}/type", f"unsupported type {json_text(name)}")

    def children(self, node: dict[str, Any], keyword: str, at: str, depth: int) -> None:
        if keyword not in node:
            return
        members = node[keyword]
        if not isinstance(members, dict):
            raise SchemaCheckError(f"{at}/{keyword}", "must be an object")
        for name, child in members.items():
            self.node(child, f"{at}/{keyword}/{_escape(name)}", depth + 1)

    def required(self, node: dict[str, Any], at: str) -> None:
        if "required" not in node:
            return
        names = node["required"]
        if not isinstance(names, list):
            raise SchemaCheckError(f"{at}/required", "must be an array of property names")
        for index, name in enumerate(names):
            if not isinstance(name, str):
                raise SchemaCheckError(f"{at}/required/{index}", "must be a string")

    def additional(self, node: dict[str, Any], at: str, depth: int) -> None:
        if "additionalProperties" in node and not isinstance(node["additionalProperties"], bool):
            self.node(node["additionalProperties"], f"{at}/additionalProperties", depth + 1)

    def items(self, node: dict[str, Any], at: str, depth: int) -> None:
        if "items" not in node:
            return
        if isinstance(node["items"], list):
            raise SchemaCheckError(f"{at}/items", "tuple validation (an array of schemas) is not supported")
        self.node(node["items"], f"{at}/items", depth + 1)

    def composition(self, node: dict[str, Any], at: str, depth: int) -> None:
        for keyword in _COMPOSITION:
            if keyword not in node:
                continue
            choices = node[keyword]
            if not isinstance(choices, list):
                raise SchemaCheckError(f"{at}/{keyword}", "must be an array of schemas")
            if not choices:
                raise SchemaCheckError(f"{at}/{keyword}", "must not be empty")
            for index, child in enumerate(choices):
                self.node(child, f"{at}/{keyword}/{index}", depth + 1)

    def enum(self, node: dict[str, Any], at: str) -> None:
        if "enum" not in node:
            return
        if not isinstance(node["enum"], list):
            raise SchemaCheckError(f"{at}/enum", "must be an array")
        if not node["enum"]:
            raise SchemaCheckError(f"{at}/enum", "must not be empty")

    def numbers(self, node: dict[str, Any], at: str) -> None:
        for keyword in _BOUNDS:
            if keyword in node and not is_number(node[keyword]):
                raise SchemaCheckError(f"{at}/{keyword}", "must be a number")
        for keyword in _COUNTS:
            if keyword in node and (whole(node[keyword]) is None or node[keyword] < 0):
                raise SchemaCheckError(f"{at}/{keyword}", "must be a non-negative integer")

    def pattern(self, node: dict[str, Any], at: str) -> None:
        if "pattern" not in node:
            return
        if not isinstance(node["pattern"], str):
            raise SchemaCheckError(f"{at}/pattern", "must be a string")
        problem = pattern_error(node["pattern"])
        if problem is not None:
            raise SchemaCheckError(f"{at}/pattern", f"invalid regular expression: {problem}")
