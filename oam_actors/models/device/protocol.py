"""Wire shapes of the Nano device protocol (``protocol/DEVICE.md``) and the ML Kit code table.

Pure: msgspec Structs, encoders/decoders built once, the ML Kit → agent error mapping and an
NDJSON line framer. No I/O. Field names are snake_case here and camelCase on the wire.

Stream events (one JSON object per line, ``type`` tag)::

    {"type":"text","text":"Hel"}                  zero or more
    {"type":"done","finishReason":"stop",…}       exactly one terminal event: done …
    {"type":"error","error":{"mlkitCode":15,…}}   … or error
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import msgspec

from ...agent.model import Availability
from ...errors import ErrorCode

__all__ = [
    "DEFAULT_CONTEXT_SIZE",
    "MAX_LINE_BYTES",
    "PROTOCOL_HEADER",
    "PROTOCOL_VERSION",
    "CountTokensRequest",
    "CountTokensResponse",
    "DeviceStatus",
    "DoneEvent",
    "ErrorBody",
    "ErrorEvent",
    "ErrorResponse",
    "Features",
    "FinishReason",
    "GenerateRequest",
    "LineFramer",
    "MlKitCode",
    "ModelStatus",
    "StreamEvent",
    "TextEvent",
    "UnavailableReason",
    "agent_code_for",
    "availability_from_status",
    "decode_error_response",
    "decode_event",
    "decode_status",
    "encode",
    "http_status_for",
    "is_quota_code",
    "mlkit_name",
    "protocol_major",
]

PROTOCOL_VERSION = "1.0"
PROTOCOL_HEADER = "OAM-Device-Protocol"
DEFAULT_CONTEXT_SIZE = 4000
MAX_LINE_BYTES = 1_048_576


class MlKitCode(enum.IntEnum):
    """``GenAiException.ErrorCode`` values the protocol knows by name (others pass through)."""

    UNKNOWN = 0
    REQUEST_PROCESSING_ERROR = 4
    CANCELLED = 7
    NOT_AVAILABLE = 8
    BUSY = 9
    RESPONSE_PROCESSING_ERROR = 11
    REQUEST_TOO_LARGE = 12
    RESPONSE_GENERATION_ERROR = 15
    NOT_SUPPORTED = 16
    PER_APP_BATTERY_USE_QUOTA_EXCEEDED = 27
    # Not in ML Kit's published IntDef; the issue reports it as the per-device battery quota.
    PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED = 28
    BACKGROUND_USE_BLOCKED = 30
    NOT_ENOUGH_DISK_SPACE = 501
    NEEDS_SYSTEM_UPDATE = 604
    REQUEST_TOO_SMALL = -100
    AICORE_INCOMPATIBLE = -101
    INVALID_INPUT_IMAGE = -102
    CACHE_PROCESSING_ERROR = -103
    STRUCTURED_OUTPUT_REQUEST_ERROR = -104


_AGENT_CODES: Mapping[int, ErrorCode] = {
    MlKitCode.BUSY: ErrorCode.RATE_LIMITED,
    MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED: ErrorCode.RATE_LIMITED,
    MlKitCode.PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED: ErrorCode.RATE_LIMITED,
    MlKitCode.BACKGROUND_USE_BLOCKED: ErrorCode.RATE_LIMITED,
    MlKitCode.REQUEST_PROCESSING_ERROR: ErrorCode.GUARDRAIL_VIOLATION,
    MlKitCode.RESPONSE_PROCESSING_ERROR: ErrorCode.GUARDRAIL_VIOLATION,
    MlKitCode.RESPONSE_GENERATION_ERROR: ErrorCode.GUARDRAIL_VIOLATION,
    MlKitCode.REQUEST_TOO_LARGE: ErrorCode.CONTEXT_SIZE_EXCEEDED,
    MlKitCode.NOT_AVAILABLE: ErrorCode.MODEL_UNAVAILABLE,
    MlKitCode.NOT_SUPPORTED: ErrorCode.MODEL_UNAVAILABLE,
    MlKitCode.NOT_ENOUGH_DISK_SPACE: ErrorCode.MODEL_UNAVAILABLE,
    MlKitCode.NEEDS_SYSTEM_UPDATE: ErrorCode.MODEL_UNAVAILABLE,
    MlKitCode.AICORE_INCOMPATIBLE: ErrorCode.MODEL_UNAVAILABLE,
    MlKitCode.CANCELLED: ErrorCode.CANCELLED,
    MlKitCode.REQUEST_TOO_SMALL: ErrorCode.INVALID_REQUEST,
    MlKitCode.INVALID_INPUT_IMAGE: ErrorCode.INVALID_REQUEST,
    MlKitCode.STRUCTURED_OUTPUT_REQUEST_ERROR: ErrorCode.INVALID_SCHEMA,
}

_QUOTA_CODES = frozenset({
    MlKitCode.BUSY,
    MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED,
    MlKitCode.PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED,
    MlKitCode.BACKGROUND_USE_BLOCKED,
})


def agent_code_for(mlkit_code: int) -> ErrorCode:
    """The agent error code of an ML Kit code (protocol-core §4.3); unknown codes fail generation."""
    return _AGENT_CODES.get(mlkit_code, ErrorCode.GENERATION_FAILED)


def is_quota_code(mlkit_code: int) -> bool:
    """True for the codes that mean "this device, not this request, is refusing for a while"."""
    return mlkit_code in _QUOTA_CODES


def mlkit_name(mlkit_code: int) -> str:
    """ML Kit's constant name, or ``CODE_<n>`` for a code this table does not know."""
    try:
        return MlKitCode(mlkit_code).name
    except ValueError:
        return f"CODE_{mlkit_code}"


def http_status_for(mlkit_code: int) -> int:
    """The HTTP status a device uses for an ML Kit error answered before streaming starts.

    Informative only: clients branch on ``mlkitCode``, never on the status.
    """
    match agent_code_for(mlkit_code):
        case ErrorCode.RATE_LIMITED:
            return 429
        case ErrorCode.GUARDRAIL_VIOLATION:
            return 422
        case ErrorCode.CONTEXT_SIZE_EXCEEDED:
            return 413
        case ErrorCode.MODEL_UNAVAILABLE:
            return 503
        case ErrorCode.INVALID_REQUEST | ErrorCode.INVALID_SCHEMA:
            return 400
    return 500


def protocol_major(version: str) -> str:
    """The major part of a ``major.minor`` protocol version."""
    return version.split(".", 1)[0]


# --- availability --------------------------------------------------------------------------


class ModelStatus(enum.StrEnum):
    """ML Kit's ``FeatureStatus`` by name."""

    AVAILABLE = "available"
    DOWNLOADABLE = "downloadable"
    DOWNLOADING = "downloading"
    UNAVAILABLE = "unavailable"


class UnavailableReason(enum.StrEnum):
    """Why the model cannot run (the bridge's ``model/availability`` reasons)."""

    MODEL_NOT_READY = "model_not_ready"
    DEVICE_NOT_ELIGIBLE = "device_not_eligible"
    AICORE_UNAVAILABLE = "aicore_unavailable"
    NEEDS_SYSTEM_UPDATE = "needs_system_update"
    NOT_ENOUGH_DISK_SPACE = "not_enough_disk_space"
    UNKNOWN = "unknown"


class Features(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """What the app detected about the on-device model; ``None`` when it could not tell."""

    model_name: str | None = None
    input_token_limit: int | None = None
    max_output_tokens: int | None = None
    system_instructions: bool = False
    prefix_caching: bool = False


class DeviceStatus(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """``GET /v1/availability``: model status, download progress, foreground state, features."""

    protocol_version: str
    status: ModelStatus
    foreground: bool
    reason: UnavailableReason | None = None
    detail: str | None = None
    bytes_downloaded: int | None = None
    total_bytes: int | None = None
    features: Features = Features()


def availability_from_status(status: DeviceStatus) -> Availability:
    """The bridge's ``model/availability`` result for one device."""
    features = status.features
    available = status.status is ModelStatus.AVAILABLE
    reason = None
    if not available:
        reason = (status.reason or UnavailableReason.UNKNOWN).value
    detail = status.detail
    if available and not status.foreground and detail is None:
        detail = "The companion app is in the background; inference is blocked until it returns."
    return Availability(
        available=available,
        reason=reason,
        contextSize=features.input_token_limit or DEFAULT_CONTEXT_SIZE,
        variant=features.model_name,
        status=status.status.value,
        detail=detail,
        maxOutputTokens=features.max_output_tokens,
        bytesDownloaded=status.bytes_downloaded,
        totalBytes=status.total_bytes,
    )


# --- requests ------------------------------------------------------------------------------


class GenerateRequest(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """``POST /v1/generate``. Unknown members are ignored (newer clients, older apps)."""

    prompt: str
    system_instruction: str | None = None
    temperature: float | None = None
    top_k: int | None = None
    seed: int | None = None
    max_output_tokens: int | None = None
    request_id: str | None = None


class CountTokensRequest(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """``POST /v1/count-tokens``: the tokens ``text`` (after ``systemInstruction``) would use."""

    text: str
    system_instruction: str | None = None


class CountTokensResponse(msgspec.Struct, frozen=True, rename="camel"):
    total_tokens: int


# --- errors and stream events --------------------------------------------------------------


class ErrorBody(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """A device error. ``mlkit_code`` is ML Kit's code, or ``None`` for protocol errors
    (``name`` then says which: ``UNAUTHORIZED``, ``BAD_REQUEST``, ``NOT_FOUND``, …).
    ``retry_after_ms`` is real time."""

    name: str
    message: str
    mlkit_code: int | None = None
    retry_after_ms: int | None = None


class ErrorResponse(msgspec.Struct, frozen=True):
    """The body of every non-2xx response."""

    error: ErrorBody


class FinishReason(enum.StrEnum):
    STOP = "stop"
    MAX_TOKENS = "max_tokens"


class TextEvent(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class DoneEvent(msgspec.Struct, frozen=True, tag="done", tag_field="type", rename="camel"):
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    finish_reason: FinishReason = FinishReason.STOP


class ErrorEvent(msgspec.Struct, frozen=True, tag="error", tag_field="type"):
    error: ErrorBody


StreamEvent = TextEvent | DoneEvent | ErrorEvent

_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(StreamEvent)
_status_decoder = msgspec.json.Decoder(DeviceStatus)
_error_decoder = msgspec.json.Decoder(ErrorResponse)


def encode(value: msgspec.Struct) -> bytes:
    """Compact JSON of any wire Struct."""
    return _encoder.encode(value)


def decode_event(line: bytes) -> StreamEvent:
    """One stream line; raises ``msgspec.DecodeError`` (incl. ``ValidationError``) if invalid."""
    return _event_decoder.decode(line)


def decode_status(body: bytes) -> DeviceStatus:
    return _status_decoder.decode(body)


def decode_error_response(body: bytes) -> ErrorBody | None:
    """The error of a non-2xx body, or ``None`` when the body is not one (a proxy's HTML page)."""
    try:
        return _error_decoder.decode(body).error
    except msgspec.DecodeError:
        return None


class LineFramer:
    """Splits an NDJSON body into lines (any chunking; ``\\r\\n`` accepted; blank lines skipped).

    A line longer than ``max_line_bytes`` raises ``ValueError``: a device must not make the
    client buffer without bound.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        if len(self._buffer) > self._max:
            raise ValueError(f"a stream line exceeds {self._max} bytes")
        return [stripped for line in lines if (stripped := bytes(line).strip())]

    def finish(self) -> list[bytes]:
        """What is left after the body ended: a last line without its newline."""
        rest = bytes(self._buffer).strip()
        self._buffer.clear()
        return [rest] if rest else []
