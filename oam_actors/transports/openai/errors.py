"""OpenAI-style errors: what the front door answers for every failure (pure, no I/O).

::

    HttpError                     status, OpenAI body, headers
    ├── from a client mistake     request_error(): 400 / 401 / 404 / 413 naming the field
    └── from an OamError          from_oam(): the one table below (agent codes → HTTP)

The body is always ``{"error": {"message", "type", "param", "code"}}``. Statuses 429 and 503 carry
``Retry-After`` (whole seconds, at least 1): a quota that cannot admit a request in time is a
429 ``rate_limit_exceeded``, never a 5xx; a backend that itself says it is overloaded is a 503.
"""

from __future__ import annotations

import math
from typing import Final

import msgspec

from ...errors import AgentError, ErrorCode, OamError
from .wire import ErrorBody, ErrorDetail

__all__ = ["HttpError", "from_oam", "internal_error", "param_of", "request_error"]

INVALID_REQUEST: Final = "invalid_request_error"
SERVER_ERROR: Final = "server_error"

# code → (HTTP status, OpenAI error type, OpenAI error code)
_TABLE: Final[dict[ErrorCode, tuple[int, str, str]]] = {
    ErrorCode.RATE_LIMITED: (429, "requests", "rate_limit_exceeded"),
    ErrorCode.BUSY: (503, SERVER_ERROR, "overloaded"),
    ErrorCode.MODEL_UNAVAILABLE: (503, SERVER_ERROR, "model_unavailable"),
    ErrorCode.SHUT_DOWN: (503, SERVER_ERROR, "shutting_down"),
    ErrorCode.TIMEOUT: (504, "timeout", "timeout"),
    ErrorCode.GENERATION_FAILED: (500, SERVER_ERROR, "generation_failed"),
    ErrorCode.TOOL_FAILED: (500, SERVER_ERROR, "tool_failed"),
    ErrorCode.CANCELLED: (500, SERVER_ERROR, "cancelled"),
    ErrorCode.INTERNAL_ERROR: (500, SERVER_ERROR, "internal_error"),
    ErrorCode.CONTEXT_SIZE_EXCEEDED: (400, INVALID_REQUEST, "context_length_exceeded"),
    ErrorCode.GUARDRAIL_VIOLATION: (400, INVALID_REQUEST, "content_policy_violation"),
    ErrorCode.REFUSAL: (400, INVALID_REQUEST, "refusal"),
    ErrorCode.UNSUPPORTED_LANGUAGE: (400, INVALID_REQUEST, "unsupported_language"),
    ErrorCode.INVALID_SCHEMA: (400, INVALID_REQUEST, "invalid_schema"),
    ErrorCode.INVALID_REQUEST: (400, INVALID_REQUEST, "invalid_request"),
    ErrorCode.INVALID_PARAMS: (400, INVALID_REQUEST, "invalid_value"),
}
_RETRY_STATUSES: Final = frozenset({429, 503})
_ENCODER: Final = msgspec.json.Encoder()


class HttpError(Exception):
    """A failure as the HTTP answer it becomes."""

    def __init__(self, status: int, message: str, *, type: str = INVALID_REQUEST, param: str | None = None,
                 code: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = ErrorDetail(message, type, param, code)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        headers = {}
        if self.status in _RETRY_STATUSES:
            headers["retry-after"] = str(max(1, math.ceil(self.retry_after or 1)))
        if self.status == 401:
            headers["www-authenticate"] = "Bearer"
        return headers

    def body(self) -> bytes:
        return _ENCODER.encode(ErrorBody(self.detail))

    def __repr__(self) -> str:
        return f"HttpError({self.status}, {self.detail.message!r}, param={self.detail.param!r})"


def request_error(message: str, *, param: str | None = None, status: int = 400, code: str | None = None) -> HttpError:
    """A client mistake (``invalid_request_error``)."""
    return HttpError(status, message, param=param, code=code)


def from_oam(error: OamError, *, param: str | None = None) -> HttpError:
    """The table: an agent or protocol error as its HTTP status and OpenAI body. ``param`` names
    the request field the error is about, when the caller knows it (schema errors name their own)."""
    status, kind, code = _TABLE.get(error.code, (500, SERVER_ERROR, error.code.wire))
    if error.code is ErrorCode.INVALID_SCHEMA and isinstance(error.extra.get("path"), str):
        param = error.extra["path"]
    retry_after = error.retry_after if isinstance(error, AgentError) else None
    return HttpError(status, error.message, type=kind, param=param, code=code, retry_after=retry_after)


def internal_error() -> HttpError:
    """Our own bug: the traceback goes to the log, never to the client."""
    return HttpError(500, "The server had an error while processing your request.", type=SERVER_ERROR,
                     code="internal_error")


def param_of(validation: msgspec.ValidationError) -> str | None:
    """``… - at `$.messages[1].content``` → ``messages[1].content`` (OpenAI's ``param``)."""
    text = str(validation)
    _, found, path = text.rpartition(" - at `$")
    if not found:
        return None
    path = path.rstrip("`").lstrip(".")
    return path or None
