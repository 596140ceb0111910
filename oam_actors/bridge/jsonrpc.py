"""The JSON-RPC 2.0 wire codec of the bridge: one inbound line in, one typed message out.

Contract
--------
:func:`decode` takes one line (without its newline) and applies the protocol's inbound
validation order (reference §1.3, steps 0-8) exactly:

0. a blank line (empty or JSON whitespace only) gives ``None``: no reply;
1. text that is not strict JSON gives :class:`Invalid` ``-32700 parse_error`` with ``id: null``
   (invalid UTF-8, bare words, ``NaN``/``Infinity``, lone surrogate escapes and nesting deeper than
   the decoder allows are all parse errors);
2. a value that is not an object gives ``-32600 invalid_message``, ``id: null`` (arrays: batches
   are not supported);
3. ``jsonrpc`` other than ``"2.0"`` gives ``-32600`` with the message's id when that id is valid;
4. an ``id`` member that is not a valid id (§1.4) gives ``-32600`` with ``id: null``;
5. a ``method`` member that is not a non-empty string gives ``-32600`` with the id (``null`` when
   there is none);
6. otherwise a message with ``method`` is a :class:`Request` (has ``id``) or a
   :class:`Notification`;
7. a message with a valid ``id``, no ``method`` and a ``result`` or ``error`` member is a
   :class:`Response` to a bridge request;
8. anything else gives ``-32600``.

``decode`` never raises. Ids are normalised: integral numbers become ``int`` (``8.0`` and ``8e0``
give ``8``); other finite numbers (``1.5``) are kept; numeric ids must have magnitude at most
``2**53 - 1``.

Params: absent or ``null`` params become ``{}``. Params that are present but not an object are *not*
an error here, because the dispatcher must first answer ``-32601`` for an unknown method: such a
message carries ``params == {}`` and ``params_error=True``, and the dispatcher calls
:func:`require_params_object`, which raises ``-32602 "params must be an object."``.

A :class:`Response` whose ``error`` member is not an object (``"error": "boom"``) keeps it as
``{"message": <the string, or the value's JSON text>}`` so the bridge can fail the call with it;
``"error": null`` means no error.

The ``encode_*`` functions write one compact JSON message with keys in the protocol's order and no
trailing newline; strings never contain a raw newline. Integral float ids are written as integers;
other floats are written as given. They raise ``msgspec.EncodeError``, ``TypeError`` or
``UnicodeEncodeError`` when a value cannot be written as JSON.

:func:`error_for_exception` is the normalisation of thrown errors (§4.2).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from oam_actors.errors import ErrorCode, OamError, ProtocolError, internal_error, invalid_params

__all__ = [
    "MAX_SAFE_INTEGER",
    "Inbound",
    "Invalid",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "decode",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_result",
    "error_for_exception",
    "require_params_object",
]

_log = logging.getLogger(__name__)

RequestId = int | float | str

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest magnitude a numeric id may have (§1.4)."""


class Request(msgspec.Struct, frozen=True):
    """A client request: it gets exactly one response. ``params_error``: params was not an object."""

    id: RequestId
    method: str
    params: dict[str, Any]
    params_error: bool = False


class Notification(msgspec.Struct, frozen=True):
    """A client notification: never answered. ``params_error``: params was not an object."""

    method: str
    params: dict[str, Any]
    params_error: bool = False


class Response(msgspec.Struct, frozen=True):
    """The client's answer to a bridge request (``tool/call``); ``error`` is ``None`` on success."""

    id: RequestId
    result: Any = None
    error: dict | None = None


class Invalid(msgspec.Struct, frozen=True):
    """A line that must be answered with ``error``, sent with ``id`` (``None`` writes ``null``)."""

    id: RequestId | None
    error: ProtocolError


Inbound = Request | Notification | Response | Invalid | None

_DECODER = msgspec.json.Decoder()
# Only used when the fast decoder rejects a number as out of range: 1e999 is valid JSON text and
# must reach the id check (§9 item 10), so it is decoded as ±inf.
_WIDE_DECODER = msgspec.json.Decoder(float_hook=float)
_ENCODE = msgspec.json.Encoder().encode

_JSON_WHITESPACE = " \t\r\n"
_JSON_WHITESPACE_BYTES = b" \t\r\n"


# --- inbound -------------------------------------------------------------------------------------


def decode(line: bytes | str) -> Inbound:
    """Decode one line (§1.3 steps 0-8, in order); ``None`` for a blank line. Never raises."""
    try:
        value = _DECODER.decode(line)  # the usual line: valid JSON (so not blank)
    except (msgspec.DecodeError, RecursionError, UnicodeError):  # blank, invalid, out of range: the steps in order
        if _is_blank(line):
            return None
        try:
            value = _parse(line)
        except ProtocolError as error:
            return Invalid(None, error)
    return _classify(value)


def require_params_object(message: Request | Notification) -> dict[str, Any]:
    """The message's params; ``-32602 "params must be an object."`` if they were not an object."""
    if message.params_error:
        raise invalid_params("params must be an object.")
    return message.params


def _is_blank(line: bytes | str) -> bool:
    # Only lines that start with whitespace are stripped (a copy); messages start with "{".
    if not line:
        return True
    if isinstance(line, str):
        return line[0] in _JSON_WHITESPACE and not line.strip(_JSON_WHITESPACE)
    return line[0] in _JSON_WHITESPACE_BYTES and not line.strip(_JSON_WHITESPACE_BYTES)


def _parse(line: bytes | str) -> Any:
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError:
        # Untyped decoding only fails validation on numbers out of float range.
        return _parse_wide(line)
    except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
        raise _parse_error(exc) from None


def _parse_wide(line: bytes | str) -> Any:
    try:
        return _WIDE_DECODER.decode(line)
    except (msgspec.DecodeError, RecursionError, UnicodeError) as exc:
        raise _parse_error(exc) from None


def _parse_error(exc: BaseException) -> ProtocolError:
    if isinstance(exc, RecursionError):
        reason = "nested too deeply"
    elif isinstance(exc, UnicodeError):
        reason = "not valid Unicode"
    else:
        reason = str(exc)
    return ProtocolError(ErrorCode.PARSE_ERROR, f"Parse error: the line is not valid JSON ({reason}).")


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"Invalid message: {message}")


def _classify(value: Any) -> Inbound:
    if not isinstance(value, dict):
        return Invalid(None, _not_an_object(value))
    has_id = "id" in value
    if has_id:
        raw_id = value["id"]
        kind = type(raw_id)  # exact types in decoded JSON: the usual ids need no checks
        if kind is str or (kind is int and -MAX_SAFE_INTEGER <= raw_id <= MAX_SAFE_INTEGER):
            request_id, id_error = raw_id, None
        else:
            request_id, id_error = _read_id(raw_id)
    else:
        request_id, id_error = None, None
    if value.get("jsonrpc") != "2.0":
        return Invalid(request_id, _invalid('"jsonrpc" must be "2.0".'))
    if id_error is not None:
        return Invalid(None, id_error)
    if "method" in value:
        return _call(value, request_id)
    if has_id and ("result" in value or "error" in value):
        return Response(request_id, value.get("result"), _error_object(value.get("error")))
    return Invalid(request_id, _invalid('needs "method", or "result"/"error" with an "id".'))


def _not_an_object(value: Any) -> ProtocolError:
    if isinstance(value, list):
        return _invalid("batches are not supported; send one JSON object per line.")
    return _invalid("expected a JSON object.")


def _read_id(raw: Any) -> tuple[RequestId | None, ProtocolError | None]:
    """A valid, normalised id and ``None``, or ``None`` and the error (§1.4)."""
    # Decoded JSON has exact types (bool is not int here), so type() is both exact and fast.
    kind = type(raw)
    if kind is str:
        return raw, None
    if kind is not int and kind is not float:
        return None, _invalid('"id" must be a string or a number.')
    if not -MAX_SAFE_INTEGER <= raw <= MAX_SAFE_INTEGER:  # false for ±inf too
        return None, _invalid(
            f"a numeric id must be finite with magnitude at most {MAX_SAFE_INTEGER}; use a string id."
        )
    if kind is float and raw.is_integer():
        return int(raw), None
    return raw, None


def _call(value: dict[str, Any], request_id: RequestId | None) -> Inbound:
    """A request (``request_id`` given; a valid id is never ``None``) or a notification."""
    method = value["method"]
    if not isinstance(method, str) or not method:
        return Invalid(request_id, _invalid('"method" must be a non-empty string.'))
    raw_params = value.get("params")
    params_error = raw_params is not None and not isinstance(raw_params, dict)
    params = {} if raw_params is None or params_error else raw_params
    if request_id is not None:
        return Request(request_id, method, params, params_error)
    return Notification(method, params, params_error)


def _error_object(raw: Any) -> dict | None:
    if raw is None or isinstance(raw, dict):
        return raw
    return {"message": raw if isinstance(raw, str) else _ENCODE(raw).decode()}


# --- outbound ------------------------------------------------------------------------------------

_WITH_ID = b'{"jsonrpc":"2.0","id":'
_WITH_METHOD = b'{"jsonrpc":"2.0","method":'


def encode_result(id: RequestId | None, result: Any) -> bytes:
    """``{"jsonrpc":"2.0","id":…,"result":…}`` without a newline."""
    return b"".join((_WITH_ID, _encode_id(id), b',"result":', _ENCODE(result), b"}"))


def encode_error(id: RequestId | None, error: OamError) -> bytes:
    """``{"jsonrpc":"2.0","id":…,"error":{code,message,data}}`` without a newline."""
    return b"".join((_WITH_ID, _encode_id(id), b',"error":', _ENCODE(error.to_wire()), b"}"))


def encode_notification(method: str, params: Any) -> bytes:
    """``{"jsonrpc":"2.0","method":…,"params":…}`` without a newline."""
    return b"".join((_WITH_METHOD, _ENCODE(method), b',"params":', _ENCODE(params), b"}"))


def encode_request(id: RequestId, method: str, params: Any) -> bytes:
    """``{"jsonrpc":"2.0","id":…,"method":…,"params":…}`` (a bridge request) without a newline."""
    return b"".join(
        (_WITH_ID, _encode_id(id), b',"method":', _ENCODE(method), b',"params":', _ENCODE(params), b"}")
    )


def _encode_id(id: RequestId | None) -> bytes:
    # Integral ids are always written as plain digits (§1.4), even if a caller kept a float.
    if isinstance(id, float) and id.is_integer():
        return _ENCODE(int(id))
    return _ENCODE(id)


# --- thrown errors -------------------------------------------------------------------------------


def error_for_exception(exc: Exception, *, request_id: RequestId | None = None, method: str | None = None) -> OamError:
    """The protocol error a handler's exception is answered with (§4.2).

    An :class:`OamError` is returned as is: a client's mistake is always one of these, raised by
    params validation (``-32602`` naming the parameter) or by the method. Anything else is our
    bug: it is logged with its traceback, the request id and the method, and the client gets
    ``-32603 internal_error`` with a generic message (never Python's own text).
    """
    if isinstance(exc, OamError):
        return exc
    _log.error("request %r (%s) failed with an unexpected error", request_id, method, exc_info=exc)
    return internal_error()
