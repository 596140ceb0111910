"""JSON value and schema-document helpers shared by the schema engine (private).

Values are plain Python JSON values: ``dict`` (key order kept), ``list``, ``str``, ``int``,
``float``, ``bool`` and ``None``. ``bool`` is never a number here, although Python says it is.
"""

from __future__ import annotations

import math
from decimal import Decimal
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import msgspec

MAX_DEPTH: Final = 64
"""Recursion guard for validating, coercing and ordering (recursive ``$ref`` chains)."""

MAX_REF_HOPS: Final = 16

TYPES: Final = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})

MISSING: Final[Any] = object()
"""Returned by :func:`resolve_pointer` when nothing is there (``None`` is a JSON value)."""

_EMPTY: Final[dict[str, Any]] = {}


def is_number(value: Any) -> bool:
    """A JSON number: ``int`` or ``float``, never ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integral(value: Any) -> bool:
    """A JSON number without a fraction (``2`` and ``2.0``)."""
    if isinstance(value, float):
        return value.is_integer()
    return is_number(value)


def json_text(value: Any) -> str:
    """Compact JSON text, key order kept, non-ASCII left as is."""
    return msgspec.json.encode(value).decode()


def preview(value: Any) -> str:
    """JSON text of ``value`` for a message, cut to 57 characters + ``…`` past 60."""
    text = json_text(value)
    return text[:57] + "…" if len(text) > 60 else text


def plain_number(value: int | float) -> str:
    """A number without exponent or trailing zeros: ``10``, ``1.5``, ``0.00001``."""
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    return format(Decimal(repr(value)).normalize(), "f")


def json_equals(a: Any, b: Any) -> bool:
    """Structural equality with numbers compared by value (``1 == 1.0``) and ``true != 1``."""
    if is_number(a) and is_number(b):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool) or is_number(a) or is_number(b):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equals(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equals(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def whole(value: Any) -> int | None:
    """A count-like keyword value: an integral JSON number (``3`` or ``3.0``), else ``None``."""
    if not is_integral(value) or (isinstance(value, float) and abs(value) > 2**53):
        return None
    return int(value)


def keyword_number(schema: dict[str, Any], keyword: str) -> int | float | None:
    """A numeric keyword of ``schema`` when it is a number."""
    value = schema.get(keyword)
    return value if is_number(value) else None


def keyword_list(schema: dict[str, Any], keyword: str) -> list[Any] | None:
    value = schema.get(keyword)
    return value if isinstance(value, list) else None


def keyword_dict(schema: dict[str, Any], keyword: str) -> dict[str, Any]:
    """An object-valued keyword (``properties``), empty when absent or malformed."""
    value = schema.get(keyword)
    return value if isinstance(value, dict) else _EMPTY


def required_names(schema: dict[str, Any]) -> list[str]:
    return [name for name in keyword_list(schema, "required") or () if isinstance(name, str)]


def declared_types(schema: dict[str, Any]) -> list[str] | None:
    """The ``type`` names (plus ``null`` for ``nullable: true``); ``None`` when untyped."""
    raw = schema.get("type")
    if isinstance(raw, str):
        names = [raw]
    elif isinstance(raw, list):
        names = [name for name in raw if isinstance(name, str)]
    else:
        return None
    if schema.get("nullable") is True and "null" not in names:
        names.append("null")
    return names


def matches_type(value: Any, name: str) -> bool:
    match name:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "number":
            return is_number(value)
        case "integer":
            return is_integral(value)
    return True


def resolve_pointer(root: Any, ref: str) -> Any:
    """The node a local JSON pointer (``#``, ``#/$defs/Item``, ``~0``/``~1`` escapes) names."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return MISSING
    node = root
    for raw in ref[2:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(token, MISSING)
        elif isinstance(node, list) and token.isascii() and token.isdigit():
            index = int(token)
            node = node[index] if index < len(node) else MISSING
        else:
            return MISSING
        if node is MISSING:
            return MISSING
    return node


def resolve(root: Any, node: Any) -> Any:
    """Follows ``$ref`` up to 16 hops; an unresolvable or too long chain stops where it is."""
    for _ in range(MAX_REF_HOPS):
        ref = node.get("$ref") if isinstance(node, dict) else None
        if not isinstance(ref, str):
            return node
        target = resolve_pointer(root, ref)
        if target is MISSING:
            return node
        node = target
    return node


F = TypeVar("F", bound=Callable[..., Any])


class NodeCompiler(Generic[F]):
    """Turns the nodes of one schema document into functions, each node once.

    The document is immutable, so a node's function is kept by the node's identity (the node is
    kept alive with it). Subclasses say how one node compiles (:meth:`_compile`); a node refers
    to the nodes below it through :meth:`slot`, which compiles them on first call, so a long
    ``$ref`` chain is compiled only as deep as values go.
    """

    def __init__(self, root: Any) -> None:
        self.root = root
        self._functions: dict[int, F] = {}
        self._nodes: list[Any] = []

    def function_of(self, node: Any) -> F:
        """``node`` compiled (once)."""
        function = self._functions.get(id(node))
        if function is None:
            self._nodes.append(node)
            function = self._functions[id(node)] = self._compile(node)
        return function

    def slot(self, node: Any) -> list[F]:
        """A one-item list holding ``node``'s function; call ``slot[0]``. Until the first call it
        holds a stand-in that compiles the node and takes its place."""
        known = self._functions.get(id(node))
        if known is not None:
            return [known]
        slot: list[Any] = []

        def first_call(*args: Any) -> Any:
            function = slot[0] = self.function_of(node)
            return function(*args)

        slot.append(first_call)
        return slot

    def _compile(self, node: Any) -> F:
        raise NotImplementedError
