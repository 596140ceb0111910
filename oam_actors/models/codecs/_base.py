"""The interface every provider codec implements, and the parts they share.

A :class:`ProviderCodec` is configuration only (backend identity, bounds, provider options); every
operation is a pure function of its arguments, so one codec serves any number of concurrent
requests. The host (an httpx ``LanguageModel``) does the I/O::

    encoded = codec.encode_request(request, stream=True)        # path, headers, body bytes
    # POST base_url + encoded.path, adding credentials to encoded.headers
    if not 2xx: raise codec.decode_error(status, headers, body).to_agent_error()
    decoder = codec.new_stream(model=request.model)
    for chunk in body: events = decoder.feed(chunk)
    events = decoder.finish()

Non-streaming: ``codec.decode_response(status, headers, body, model=request.model)`` returns a
:class:`~._canonical.Response` or raises :class:`~._errors.ProviderError` (error status or error
body) / :class:`~._errors.CodecError` (malformed or unsupported output).

Credentials never appear in an :class:`EncodedRequest`; the host adds them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

import msgspec

from ...errors import ErrorCode
from ._canonical import Affinity, Request, Response
from ._errors import CodecError, ProviderError, error_code_for
from ._ratelimit import Headers, normalize_headers, parse_rate_limit_headers
from ._replay import origin_for
from ._sse import MAX_BUFFER_BYTES, MAX_FRAME_BYTES, SseParser
from ._stream import StreamDecoder
from ._validate import DEFAULT_LIMITS, Limits, validate_request
from ._wire import parse_object

__all__ = ["EncodedRequest", "ErrorDetails", "ProviderCodec", "provider_code"]

_MAX_PROVIDER_CODE = 512
_JSON = "application/json"


class EncodedRequest(msgspec.Struct, frozen=True):
    """What to POST: a path below the backend's base URL, headers without credentials, a body."""

    path: str
    headers: dict[str, str]
    body: bytes


class ErrorDetails(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider's error object says, read by each codec in its own way."""

    provider_code: str | None = None
    context_exceeded: bool = False
    retry_after: float | None = None


class ProviderCodec:
    """Base of the three codecs. ``name`` is the registry selector and the replay protocol."""

    name: ClassVar[str]
    title: ClassVar[str]

    def __init__(
        self,
        *,
        affinity: Affinity | None = None,
        limits: Limits = DEFAULT_LIMITS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
    ) -> None:
        self.affinity = msgspec.structs.replace(affinity, protocol=self.name) if affinity else None
        self.limits = limits
        self._sse_bounds = {"max_frame_bytes": max_frame_bytes, "max_buffer_bytes": max_buffer_bytes}

    def encode_request(self, request: Request, *, stream: bool = False) -> EncodedRequest:
        """Validate ``request`` and translate it; raises a codec error, nothing is sent then."""
        validate_request(request, self.limits)
        return self._encode(request, stream)

    def decode_response(self, status: int, headers: Headers, body: bytes, *, model: str | None = None) -> Response:
        """Decode a whole (non-streaming) response; ``model`` is the requested model, which
        binds any opaque state in it."""
        if not 200 <= status < 300:
            raise self.decode_error(status, headers, body)
        obj = parse_object(body)
        if "error" in obj:
            raise self.in_band_error(obj, streaming=False)
        return self._decode(obj, origin_for(self.affinity, self.name, model))

    def decode_error(
        self, status: int, headers: Headers, body: bytes, *, now: dt.datetime | None = None
    ) -> ProviderError:
        """The error an HTTP error response means. Never raises; any body is accepted."""
        details = self._error_details(_object_or_empty(body))
        h = normalize_headers(headers)
        limits = parse_rate_limit_headers(h, now=now)
        code = error_code_for(status, details.provider_code, context_exceeded=details.context_exceeded)
        retry_after = limits.retry_after if limits.retry_after is not None else details.retry_after
        if retry_after is None and code is ErrorCode.RATE_LIMITED:
            retry_after = limits.cool_down()
        return ProviderError(
            f"{self.title} provider request failed",
            http_status=status,
            provider_code=details.provider_code,
            error_code=code,
            retry_after=retry_after,
            request_id=h.get("x-request-id") or h.get("request-id"),
        )

    def in_band_error(self, obj: dict[str, Any], *, streaming: bool) -> ProviderError:
        """The error a 2xx body or a stream frame carries instead of content."""
        details = self._error_details(obj)
        code = error_code_for(None, details.provider_code, context_exceeded=details.context_exceeded)
        action = "stream" if streaming else "request"
        return ProviderError(
            f"{self.title} provider {action} failed",
            http_status=None,
            provider_code=details.provider_code,
            error_code=code,
            retry_after=details.retry_after,
        )

    def new_stream(self, *, model: str | None = None) -> StreamDecoder:
        """A decoder for one streamed response to a request for ``model``."""
        origin = origin_for(self.affinity, self.name, model)
        return self._new_decoder(origin, SseParser(**self._sse_bounds))

    def _headers(self, stream: bool) -> dict[str, str]:
        return {"content-type": _JSON, "accept": "text/event-stream" if stream else _JSON}

    # Provider hooks.

    def _encode(self, request: Request, stream: bool) -> EncodedRequest:
        raise NotImplementedError

    def _decode(self, obj: dict[str, Any], origin: Affinity) -> Response:
        raise NotImplementedError

    def _error_details(self, obj: dict[str, Any]) -> ErrorDetails:
        raise NotImplementedError

    def _new_decoder(self, origin: Affinity, sse: SseParser) -> StreamDecoder:
        raise NotImplementedError


def provider_code(value: Any) -> str | None:
    """A provider error code or type as a bounded string (numbers are stringified)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value)[:_MAX_PROVIDER_CODE] or None


def _object_or_empty(body: bytes) -> dict[str, Any]:
    try:
        return parse_object(body)
    except (CodecError, TypeError):  # any body at all: a proxy's HTML page, no body, …
        return {}
