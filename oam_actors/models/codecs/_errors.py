"""Typed codec errors and their mapping onto the protocol's error table.

::

    CodecError            raised by every codec operation; carries kind, stage, outcome, error_code
    └── ProviderError     the provider itself reported a failure (HTTP error status, in-stream
                          error object, error body on a 2xx); adds http_status, provider_code,
                          retry_after and request_id

``kind`` uses Backplane's vocabulary (:class:`ErrorKind`); ``error_code`` is the protocol code the
bridge will show, and :meth:`CodecError.to_agent_error` turns the error into an
:class:`~oam_actors.errors.AgentError`. ``message`` is always safe text: a provider's own error
message is never copied into it (it may echo prompts or key fragments).

Which constructor produces what:

- :func:`invalid_request` — the canonical request breaks a rule; nothing was sent.
- :func:`unsupported` — the request cannot be expressed on this provider; nothing was sent.
- :func:`malformed` — the provider's bytes break its documented format.
- :func:`lossy` — the provider answered with something the canonical model cannot carry.
- :func:`incomplete_stream` — the stream ended (or was cancelled) before its protocol end.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from ...errors import AGENT_CODES, AgentError, ErrorCode

__all__ = [
    "CodecError",
    "ErrorKind",
    "Outcome",
    "ProviderError",
    "Stage",
    "error_code_for",
    "incomplete_stream",
    "invalid_request",
    "kind_for_status",
    "lossy",
    "malformed",
    "unsupported",
]


class ErrorKind(enum.StrEnum):
    """What went wrong, in Backplane's canonical vocabulary."""

    INVALID_REQUEST = "invalid_request"
    AUTHENTICATION = "authentication"
    AUTHORIZATION = "authorization"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    UPSTREAM_ERROR = "upstream_error"
    INCOMPATIBLE = "incompatible"


class Stage(enum.StrEnum):
    """Where it went wrong."""

    VALIDATION = "validation"  # canonical request rules, before encoding
    TRANSLATION = "translation"  # canonical request -> provider wire format
    WIRE = "wire"  # provider bytes: SSE framing, JSON, documented shapes
    RESPONSE = "response"  # provider-declared failure, unsupported output, truncated stream


class Outcome(enum.StrEnum):
    """Whether the provider may have acted on the request."""

    NOT_SUBMITTED = "not_submitted"
    KNOWN = "known"
    UNKNOWN = "unknown"


# Codes the K-style retry policy retries; everything else fails the step at once.
_RETRYABLE = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.BUSY, ErrorCode.GENERATION_FAILED})


class CodecError(Exception):
    """A codec failure with a canonical kind and the protocol code it maps to."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        stage: Stage,
        error_code: ErrorCode,
        outcome: Outcome,
        compatibility: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.stage = stage
        self.error_code = error_code
        self.outcome = outcome
        self.compatibility = dict(compatibility) if compatibility else None

    @property
    def retryable(self) -> bool:
        """True when the protocol's retry policy may retry the model step."""
        return self.error_code in _RETRYABLE

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before retrying; only provider errors know it."""
        return None

    def to_agent_error(self) -> AgentError:
        """The protocol error to raise (chain it: ``raise err.to_agent_error() from err``)."""
        return AgentError(self.error_code, self.message, retry_after=self.retry_after)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind}, {self.stage}, {self.error_code.wire}, {self.message!r})"


class ProviderError(CodecError):
    """A failure the provider reported, with what its status, body and headers tell."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None,
        provider_code: str | None,
        error_code: ErrorCode,
        retry_after: float | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(
            kind_for_status(http_status),
            message,
            stage=Stage.RESPONSE,
            error_code=error_code,
            outcome=Outcome.KNOWN,
        )
        self.http_status = http_status
        self.provider_code = provider_code
        self._retry_after = retry_after
        self.request_id = request_id

    @property
    def retry_after(self) -> float | None:
        return self._retry_after


def invalid_request(message: str) -> CodecError:
    """The canonical request breaks a rule; nothing was sent."""
    return CodecError(
        ErrorKind.INVALID_REQUEST,
        message,
        stage=Stage.VALIDATION,
        error_code=ErrorCode.INVALID_REQUEST,
        outcome=Outcome.NOT_SUBMITTED,
    )


def unsupported(message: str, compatibility: Mapping[str, str] | None = None) -> CodecError:
    """The request cannot be expressed faithfully on this provider; nothing was sent."""
    return CodecError(
        ErrorKind.INCOMPATIBLE,
        message,
        stage=Stage.TRANSLATION,
        error_code=ErrorCode.INVALID_REQUEST,
        outcome=Outcome.NOT_SUBMITTED,
        compatibility=compatibility,
    )


def malformed(message: str) -> CodecError:
    """The provider's bytes break its documented format (kind stays Backplane's invalid_request)."""
    return CodecError(
        ErrorKind.INVALID_REQUEST,
        message,
        stage=Stage.WIRE,
        error_code=ErrorCode.GENERATION_FAILED,
        outcome=Outcome.KNOWN,
    )


def lossy(
    message: str,
    compatibility: Mapping[str, str] | None = None,
    *,
    error_code: ErrorCode = ErrorCode.GENERATION_FAILED,
) -> CodecError:
    """The provider's output cannot be carried by the canonical model without loss."""
    return CodecError(
        ErrorKind.INCOMPATIBLE,
        message,
        stage=Stage.RESPONSE,
        error_code=error_code,
        outcome=Outcome.KNOWN,
        compatibility=compatibility,
    )


def incomplete_stream(*, cancelled: bool) -> CodecError:
    """The stream ended before its protocol end; after a cancel the provider may have acted."""
    return CodecError(
        ErrorKind.UPSTREAM_ERROR,
        "Provider stream ended before completion",
        stage=Stage.RESPONSE,
        error_code=ErrorCode.CANCELLED if cancelled else ErrorCode.GENERATION_FAILED,
        outcome=Outcome.UNKNOWN if cancelled else Outcome.KNOWN,
    )


def kind_for_status(status: int | None) -> ErrorKind:
    """Backplane's status table; ``None`` (an in-stream error) is an upstream error."""
    if status is None:
        return ErrorKind.UPSTREAM_ERROR
    if status in _KIND_BY_STATUS:
        return _KIND_BY_STATUS[status]
    if 400 <= status < 500:
        return ErrorKind.INVALID_REQUEST
    return ErrorKind.UPSTREAM_ERROR


_KIND_BY_STATUS = {
    401: ErrorKind.AUTHENTICATION,
    403: ErrorKind.AUTHORIZATION,
    404: ErrorKind.NOT_FOUND,
    429: ErrorKind.RATE_LIMITED,
}

# Provider error codes/types (OpenAI `code`/`type`, Anthropic `error.type`, Google `status`) and
# the K dev backend's names, mapped straight onto protocol codes.
_CODE_MAP: dict[str, ErrorCode] = {
    "context_length_exceeded": ErrorCode.CONTEXT_SIZE_EXCEEDED,
    "request_too_large": ErrorCode.CONTEXT_SIZE_EXCEEDED,
    "content_filter": ErrorCode.GUARDRAIL_VIOLATION,
    "content_policy_violation": ErrorCode.GUARDRAIL_VIOLATION,
    "rate_limit_exceeded": ErrorCode.RATE_LIMITED,
    "rate_limit_error": ErrorCode.RATE_LIMITED,
    "resource_exhausted": ErrorCode.RATE_LIMITED,
    "overloaded_error": ErrorCode.BUSY,
    "unavailable": ErrorCode.BUSY,
    "model_not_found": ErrorCode.MODEL_UNAVAILABLE,
}

_STATUS_MAP: dict[int, ErrorCode] = {
    401: ErrorCode.MODEL_UNAVAILABLE,
    403: ErrorCode.MODEL_UNAVAILABLE,
    404: ErrorCode.MODEL_UNAVAILABLE,
    # A request timeout says nothing about the request's content: retry the step.
    408: ErrorCode.GENERATION_FAILED,
    413: ErrorCode.CONTEXT_SIZE_EXCEEDED,
    429: ErrorCode.RATE_LIMITED,
    503: ErrorCode.BUSY,
    529: ErrorCode.BUSY,
}

_AGENT_WIRE = {code.wire: code for code in AGENT_CODES}


def error_code_for(status: int | None, provider_code: str | None, *, context_exceeded: bool = False) -> ErrorCode:
    """The protocol code for a provider failure.

    Precedence: a detected context overflow, then the provider's code (including any agent wire
    name, as the K dev backend sends), then the HTTP status; anything else is
    ``generation_failed``.
    """
    if context_exceeded:
        return ErrorCode.CONTEXT_SIZE_EXCEEDED
    if provider_code:
        key = provider_code.lower()
        if key in _CODE_MAP:
            return _CODE_MAP[key]
        if key in _AGENT_WIRE:
            return _AGENT_WIRE[key]
    if status is None:
        return ErrorCode.GENERATION_FAILED
    if status in _STATUS_MAP:
        return _STATUS_MAP[status]
    if 400 <= status < 500:
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.GENERATION_FAILED
