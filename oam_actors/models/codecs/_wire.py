"""Small helpers for reading and writing provider JSON, shared by the three codecs.

Readers raise :func:`~._errors.malformed` with the offending field named; writers are
deterministic (compact JSON, keys in insertion order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ._canonical import Request, StopReason
from ._errors import CodecError, invalid_request, malformed

__all__ = [
    "arguments_object",
    "as_list",
    "as_object",
    "count",
    "encode_json",
    "merge_options",
    "opt_str",
    "parse_object",
    "tool_aware",
]

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


def parse_object(data: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """Decode a provider JSON object."""
    try:
        value = _decode.decode(data)
    except msgspec.DecodeError:
        raise malformed("Provider response is not a JSON object") from None
    if not isinstance(value, dict):
        raise malformed("Provider response is not a JSON object")
    return value


def encode_json(value: Any) -> bytes:
    return _encode.encode(value)


def as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise malformed(f"{where} must be an object")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise malformed(f"{where} must be a list")
    return value


def opt_str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise malformed(f"{where} must be a string")
    return value


def count(value: Any, where: str) -> int | None:
    """A usage counter: absent, or a non-negative integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed(f"{where} must be a non-negative integer")
    return value


def arguments_object(
    arguments: dict[str, Any] | str,
    where: str,
    error: Callable[[str], CodecError] = malformed,
) -> dict[str, Any]:
    """Tool arguments as an object; JSON text must parse to one (else ``error``)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = _decode.decode(arguments)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise error(f"{where}: tool arguments are not complete JSON")
    return value


def merge_options(body: dict[str, Any], request: Request, reserved: frozenset[str]) -> None:
    """Copy settings, then output constraints, verbatim to the top level of ``body``."""
    for source in (request.settings, request.output_constraints):
        for key, value in source.items():
            if key in reserved:
                raise invalid_request(f"Provider option cannot override core field: {key}")
            body[key] = value


def tool_aware(stop: StopReason, has_calls: bool) -> StopReason:
    """A plain ``stop`` whose output holds tool calls is a ``tool_use`` stop."""
    return StopReason.TOOL_USE if has_calls and stop is StopReason.STOP else stop
