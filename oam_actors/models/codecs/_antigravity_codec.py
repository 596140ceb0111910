"""Canonical requests over an Antigravity upstream: the Google codec's GenerateContent body, wrapped
into the native envelope, and native answers unwrapped back into Google events.

See :mod:`oam_actors.models.codecs.antigravity` for the contract.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from ._antigravity_google import encode_google_request
from ._antigravity_native import Bindings, Operation, build_request, decode_error, error_from_document
from ._base import EncodedRequest
from ._canonical import Affinity, Request, Response, StreamEvent
from ._errors import ProviderError, malformed
from ._ratelimit import Headers
from ._sse import SseParser
from ._wire import parse_object
from .google import GoogleCodec, GoogleStreamDecoder

__all__ = ["AntigravityCodec"]


def _new_request_id() -> str:
    return f"agent-{uuid.uuid4()}"


class AntigravityCodec(GoogleCodec):
    """A :class:`~._base.ProviderCodec` for Cloud Code ``v1internal`` generation.

    ``project`` (required to generate), ``user_agent`` and ``client_version`` are the host's
    trusted configuration; ``session_id`` defaults to one fresh UUID per codec, and each request
    gets ``request_ids()`` (``agent-<uuid>``). Paths are ``/v1internal:generateContent`` and
    ``/v1internal:streamGenerateContent?alt=sse``; the host adds ``authorization``.
    """

    name = "antigravity"
    title = "Antigravity"

    def __init__(
        self,
        *,
        project: str | None = None,
        session_id: str | None = None,
        user_agent: str | None = None,
        client_version: str | None = None,
        request_ids: Callable[[], str] = _new_request_id,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.project = project
        self.session_id = session_id or str(uuid.uuid4())
        self.user_agent = user_agent
        self.client_version = client_version
        self._request_ids = request_ids

    def _encode(self, request: Request, stream: bool) -> EncodedRequest:
        google = super()._encode(request, stream)
        bindings = Bindings(
            project=self.project,
            model=request.model,
            session_id=self.session_id,
            request_id=self._request_ids(),
            user_agent=self.user_agent,
            client_version=self.client_version,
        )
        op = Operation.STREAM_GENERATE_CONTENT if stream else Operation.GENERATE_CONTENT
        native = build_request(op, encode_google_request(parse_object(google.body)), bindings)
        return EncodedRequest(native.target, dict(native.headers), native.body)

    def _decode(self, obj: dict[str, Any], origin: Affinity) -> Response:
        return super()._decode(_response_of(obj), origin)

    def decode_error(
        self, status: int, headers: Headers, body: bytes, *, now: dt.datetime | None = None
    ) -> ProviderError:
        return decode_error(status, headers, body, now=now)

    def in_band_error(self, obj: dict[str, Any], *, streaming: bool) -> ProviderError:
        return error_from_document(obj, status=None)

    def _new_decoder(self, origin: Affinity, sse: SseParser) -> AntigravityStreamDecoder:
        return AntigravityStreamDecoder(self, origin=origin, sse=sse)


class AntigravityStreamDecoder(GoogleStreamDecoder):
    """Native SSE envelopes to Google events; there is no ``[DONE]`` (the body's end is the end)."""

    def _on_object(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        if isinstance(obj.get("error"), dict):
            raise self._codec.in_band_error(obj, streaming=True)
        super()._on_object(_response_of(obj), events)

    def _on_done(self, events: list[StreamEvent]) -> None:
        raise malformed("Antigravity streams have no [DONE] marker")


def _response_of(obj: dict[str, Any]) -> dict[str, Any]:
    response = obj.get("response")
    if not isinstance(response, dict):
        raise malformed("Antigravity envelope missing response")
    return response
