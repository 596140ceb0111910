"""The one error tree of oam-actors, mirroring the protocol's error table.

Every error that can reach a client is an :class:`OamError`. It carries an :class:`ErrorCode`
(the JSON-RPC ``code`` and the stable ``data.code`` wire name) plus optional extra ``data``
fields. The bridge turns any ``OamError`` into a JSON-RPC error object in one place.

::

    OamError
    ├── AgentError            the twelve agent codes (-32001 … -32012): model and turn failures
    │   └── DeadlinePassed    rate_limited: the request's time to wait for the model ran out
    └── ProtocolError         everything else: framing, params, sessions, game extension, shutdown

Foreign exceptions (httpx, Ray, device I/O) are translated once, at the edge that sees them,
into the most specific class here, chained with ``from``.
"""

from __future__ import annotations

import datetime as _dt
import enum
import math
from typing import Any

from .clock import wire_instant

__all__ = [
    "AGENT_CODES",
    "AgentError",
    "DeadlinePassed",
    "ErrorCode",
    "OamError",
    "ProtocolError",
    "cancelled",
    "internal_error",
    "invalid_params",
    "seconds_text",
]


class ErrorCode(enum.Enum):
    """A protocol error: its stable wire name (``data.code``) and JSON-RPC number."""

    PARSE_ERROR = ("parse_error", -32700)
    INVALID_MESSAGE = ("invalid_message", -32600)
    METHOD_NOT_FOUND = ("method_not_found", -32601)
    INVALID_PARAMS = ("invalid_params", -32602)
    INTERNAL_ERROR = ("internal_error", -32603)
    # The twelve agent codes.
    MODEL_UNAVAILABLE = ("model_unavailable", -32001)
    GUARDRAIL_VIOLATION = ("guardrail_violation", -32002)
    REFUSAL = ("refusal", -32003)
    CONTEXT_SIZE_EXCEEDED = ("context_size_exceeded", -32004)
    RATE_LIMITED = ("rate_limited", -32005)
    UNSUPPORTED_LANGUAGE = ("unsupported_language", -32006)
    INVALID_SCHEMA = ("invalid_schema", -32007)
    TOOL_FAILED = ("tool_failed", -32008)
    CANCELLED = ("cancelled", -32009)
    BUSY = ("busy", -32010)
    INVALID_REQUEST = ("invalid_request", -32011)
    GENERATION_FAILED = ("generation_failed", -32012)
    # Bridge codes.
    SESSION_NOT_FOUND = ("session_not_found", -32020)
    SESSION_EXISTS = ("session_exists", -32021)
    SESSION_LIMIT = ("session_limit", -32022)
    SHUT_DOWN = ("shut_down", -32023)
    TIMEOUT = ("timeout", -32024)
    # Game extension codes.
    NPC_NOT_FOUND = ("npc_not_found", -32050)
    NPC_EXISTS = ("npc_exists", -32051)
    WORLD_NOT_FOUND = ("world_not_found", -32052)
    WORLD_EXISTS = ("world_exists", -32053)
    WORLD_ERROR = ("world_error", -32054)
    LIMIT_REACHED = ("limit_reached", -32055)
    SUBSCRIPTION_NOT_FOUND = ("subscription_not_found", -32056)
    CONVERSATION_NOT_FOUND = ("conversation_not_found", -32057)
    CONVERSATION_EXISTS = ("conversation_exists", -32058)

    @property
    def wire(self) -> str:
        """The stable ``data.code`` string clients branch on."""
        return self.value[0]

    @property
    def number(self) -> int:
        """The JSON-RPC ``code``."""
        return self.value[1]

    @classmethod
    def from_wire(cls, name: str) -> ErrorCode:
        """Look a code up by its wire name; ``KeyError`` if unknown."""
        return _BY_WIRE[name]


_BY_WIRE = {code.wire: code for code in ErrorCode}

AGENT_CODES: tuple[ErrorCode, ...] = tuple(c for c in ErrorCode if -32012 <= c.number <= -32001)
"""The twelve agent error codes, in table order."""


class OamError(Exception):
    """An error with a protocol code, a message and extra ``data`` fields.

    ``extra`` members are written into the JSON-RPC error's ``data`` after ``code``; ``None``
    values are left out.
    """

    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = {k: v for k, v in extra.items() if v is not None}

    def data(self) -> dict[str, Any]:
        """The JSON-RPC ``data`` object: ``{"code": <wire name>, …extra}``."""
        return {"code": self.code.wire, **self.extra}

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        return {"code": self.code.number, "message": self.message, "data": self.data()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.wire}, {self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (Ray shards); rebuild them field for field so the
        # ``retryAfter`` instant stays the one computed where the error happened.
        return (_rebuild, (type(self), self.code, self.message, self.extra, getattr(self, "retry_after", None)))


class AgentError(OamError):
    """A model or turn failure with one of the twelve agent codes.

    ``retry_after`` (seconds) is known for rate limits; it becomes ``data.retryAfter`` (an
    ISO 8601 instant, whole seconds) and ``data.retryAfterSeconds`` (integer, rounded up).
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        **extra: Any,
    ) -> None:
        if code not in AGENT_CODES:
            raise ValueError(f"{code.wire} is not an agent error code")
        super().__init__(code, message or f"{code.wire.replace('_', ' ').capitalize()}.", **extra)
        self.retry_after = retry_after
        if retry_after is not None and math.isfinite(retry_after):
            seconds = max(0, math.ceil(retry_after))
            at = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0) + _dt.timedelta(seconds=seconds)
            self.extra["retryAfter"] = wire_instant(at)
            self.extra["retryAfterSeconds"] = seconds


class DeadlinePassed(AgentError):
    """``rate_limited``: a step of the request could not be admitted by the model's quota within
    the request's deadline (the request's own ``deadlineSeconds``, or the server's queue time for
    its priority). The agent does not retry it (the time is spent); the game layer degrades to the
    protocol's fallback where one exists, and the client sees ``-32005`` with ``retryAfter``
    otherwise."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(ErrorCode.RATE_LIMITED, message, retry_after=retry_after)


class ProtocolError(OamError):
    """A non-agent protocol error: framing, parameters, unknown objects, limits, shutdown."""


def _rebuild(
    cls: type[OamError], code: ErrorCode, message: str, extra: dict[str, Any], retry_after: float | None
) -> OamError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.code, error.message, error.extra = code, message, dict(extra)
    if isinstance(error, AgentError):
        error.retry_after = retry_after
    return error


def seconds_text(seconds: float) -> str:
    """A duration as a message shows it: ``0.5 s``, ``0.05 s``, ``2.5 s``, ``20 s`` (two
    significant digits, never ``0.499936 s``)."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    return f"{float(f'{seconds:.2g}'):g} s"


def invalid_params(message: str) -> ProtocolError:
    """``-32602 invalid_params`` with ``message``."""
    return ProtocolError(ErrorCode.INVALID_PARAMS, message)


def internal_error() -> ProtocolError:
    """``-32603 internal_error`` with the generic message a client gets for our own bug (the
    details go to the log, never to the client)."""
    return ProtocolError(ErrorCode.INTERNAL_ERROR, "Internal error.")


def cancelled(message: str = "The operation was cancelled.") -> AgentError:
    """``-32009 cancelled``."""
    return AgentError(ErrorCode.CANCELLED, message)
