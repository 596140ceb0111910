"""Validation of canonical requests before any provider encoding.

:func:`check_bounds` enforces Backplane's stricter term limits (:class:`Limits`) on any JSON-like
value: nesting depth, entries per map, items per list, bytes per string, aggregate string bytes
(map keys count), and node count (every map, list, string and scalar is one node); strings must be
encodable as UTF-8 and values must be JSON data.

:func:`validate_request` applies those bounds to a whole :class:`~._canonical.Request` and checks
the canonical rules: a concrete model, messages only, tool messages with a call id, non-empty text
(an empty text directly before a provider state is allowed: it is a signed empty Gemini part),
tool and call names ``[A-Za-z0-9_.-]`` (1-256 bytes), call ids 1-256 bytes, non-empty raw
arguments, unique tool names and call ids, and namespaced extension keys (``vendor::key``).
Namespaced tool names (``ns::name``) are valid canonically but no codec here can express them:
they are rejected as unsupported (capability ``tool_namespaces``) before anything is sent.

Errors: :func:`~._errors.invalid_request` or :func:`~._errors.unsupported`.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from ._canonical import (
    Image,
    Message,
    ProviderState,
    Reasoning,
    Request,
    Role,
    Text,
    ToolCall,
    ToolDefinition,
    ToolStatus,
)
from ._errors import invalid_request, unsupported

__all__ = ["DEFAULT_LIMITS", "Limits", "check_bounds", "validate_request"]


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    max_depth: int = 32
    max_entries: int = 512
    max_items: int = 4_096
    max_bytes: int = 1_048_576
    max_string_bytes: int = 262_144
    max_nodes: int = 16_384


DEFAULT_LIMITS = Limits()

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_NAMESPACED_NAME = re.compile(r"[A-Za-z0-9_.-]+(::[A-Za-z0-9_.-]+)+")
_EXTENSION_KEY = re.compile(r"[a-z][a-z0-9_-]{0,63}(::[a-z][a-z0-9_-]{0,63})+")
_MAX_ID_BYTES = 256
_ROLES = tuple(Role)
_STATUSES = tuple(ToolStatus)


class _Budget:
    """Running totals for one bounds check."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.nodes = 0
        self.bytes = 0

    def count_node(self) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise invalid_request(f"value exceeds {self.limits.max_nodes} nodes")

    def count_string(self, text: str) -> None:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise invalid_request("string is not valid UTF-8") from None
        if size > self.limits.max_string_bytes:
            raise invalid_request(f"string exceeds {self.limits.max_string_bytes} bytes")
        self.bytes += size
        if self.bytes > self.limits.max_bytes:
            raise invalid_request(f"value exceeds {self.limits.max_bytes} string bytes")


def check_bounds(value: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise ``invalid_request`` if ``value`` breaks ``limits`` or is not JSON data."""
    budget = _Budget(limits)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        budget.count_node()
        if isinstance(item, str):
            budget.count_string(item)
        elif isinstance(item, dict):
            _check_container(len(item), limits.max_entries, "map entries", depth, limits)
            for key, child in item.items():
                if not isinstance(key, str):
                    raise invalid_request("map keys must be strings")
                budget.count_string(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            _check_container(len(item), limits.max_items, "list items", depth, limits)
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise invalid_request("numbers must be finite")
        elif item is not None and not isinstance(item, bool | int | float):
            raise invalid_request(f"{type(item).__name__} is not JSON data")


def _check_container(size: int, limit: int, what: str, depth: int, limits: Limits) -> None:
    if depth > limits.max_depth:
        raise invalid_request(f"value nests deeper than {limits.max_depth}")
    if size > limit:
        raise invalid_request(f"value exceeds {limit} {what}")


def validate_request(request: Request, limits: Limits = DEFAULT_LIMITS) -> None:
    """Check ``request`` against the canonical rules and ``limits``; raise a codec error."""
    if not isinstance(request.model, str) or not request.model:
        raise invalid_request("model must be a concrete string")
    try:
        wire = msgspec.to_builtins(request)
    except TypeError as exc:
        raise invalid_request(f"request holds a value that is not JSON data: {exc}") from None
    check_bounds(wire, limits)
    _check_extensions(request.extensions, "extensions")
    _check_tools(request.tools)
    call_ids: set[str] = set()
    for index, message in enumerate(request.messages):
        _check_message(message, f"messages[{index}]", call_ids)


def _check_tools(tools: list[ToolDefinition]) -> None:
    names: set[str] = set()
    for index, tool in enumerate(tools):
        _check_name(tool.name, f"tools[{index}].name")
        if tool.name in names:
            raise invalid_request(f"tools[{index}].name duplicates {tool.name!r}")
        names.add(tool.name)
        _check_extensions(tool.extensions, f"tools[{index}].extensions")


def _check_message(message: Any, where: str, call_ids: set[str]) -> None:
    if isinstance(message, ProviderState):
        raise unsupported(f"{where}: root-level provider state requires host resolution")
    if not isinstance(message, Message):
        raise invalid_request(f"{where} is not a message")
    if message.role not in _ROLES:
        raise invalid_request(f"{where}.role must be one of {', '.join(_ROLES)}")
    if message.status is not None and message.status not in _STATUSES:
        raise invalid_request(f"{where}.status must be success or error")
    if message.role == Role.TOOL and not message.tool_call_id:
        raise invalid_request(f"{where}.tool_call_id is required for a tool message")
    _check_extensions(message.extensions, f"{where}.extensions")
    blocks = message.content
    for index, block in enumerate(blocks):
        at = f"{where}.content[{index}]"
        followed_by_state = index + 1 < len(blocks) and isinstance(blocks[index + 1], ProviderState)
        _check_block(block, at, followed_by_state)
        if isinstance(block, ToolCall):
            if block.id in call_ids:
                raise invalid_request(f"{at}.id duplicates tool call {block.id!r}")
            call_ids.add(block.id)


def _check_block(block: Any, at: str, followed_by_state: bool) -> None:
    if isinstance(block, Text | Reasoning):
        if not block.text and not followed_by_state:
            raise invalid_request(f"{at}.text must not be empty")
    elif isinstance(block, ToolCall):
        _check_call(block, at)
    elif isinstance(block, ProviderState):
        if not block.kind or not block.origin.profile:
            raise invalid_request(f"{at}: provider state needs a kind and an origin profile")
    elif not isinstance(block, Image):
        raise invalid_request(f"{at} is not a content block")


def _check_call(call: ToolCall, at: str) -> None:
    if not 0 < len(call.id.encode()) <= _MAX_ID_BYTES:
        raise invalid_request(f"{at}.id must be 1-{_MAX_ID_BYTES} bytes")
    if call.native_id is not None and len(call.native_id.encode()) > _MAX_ID_BYTES:
        raise invalid_request(f"{at}.native_id exceeds {_MAX_ID_BYTES} bytes")
    _check_name(call.name, f"{at}.name")
    if isinstance(call.arguments, str) and not call.arguments:
        raise invalid_request(f"{at}.arguments must not be empty JSON text")


def _check_name(name: str, at: str) -> None:
    if not 0 < len(name.encode()) <= _MAX_ID_BYTES:
        raise invalid_request(f"{at} must be 1-{_MAX_ID_BYTES} bytes")
    if _NAMESPACED_NAME.fullmatch(name):
        raise unsupported(f"{at}: namespaced tool names are not supported", {"capability": "tool_namespaces"})
    if not _NAME.fullmatch(name):
        raise invalid_request(f"{at} must match [A-Za-z0-9_.-]+")


def _check_extensions(extensions: dict[str, Any], at: str) -> None:
    for key in extensions:
        if not _EXTENSION_KEY.fullmatch(key):
            raise invalid_request(f"{at}: {key!r} is not a namespaced key (vendor::name)")
