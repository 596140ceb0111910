"""The proxy :class:`~oam_actors.agent.LanguageModel`: one provider endpoint over httpx.

Per step: encode (codec) → POST with streaming → check the status → feed the SSE body to the
codec's stream decoder → fold the events into text for the agent (:class:`~._translate.StepReader`).
Every failure leaves as an :class:`~oam_actors.errors.AgentError` (:mod:`._errors`), so the
agent's per-step retry and the bridge's error table apply unchanged; a step that fails after
yielding text commits nothing (the agent commits a turn only at its end).

Timeouts: httpx's connect/read/write/pool bound each network wait; ``step_timeout`` bounds the
whole step (checked around every wait, never across a ``yield``). Closing the generator early (the
agent does, once a decide step holds its JSON) or cancelling it closes the HTTP response, which
closes that connection.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from contextlib import aclosing, contextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import httpx

from ...agent.model import Availability, GenerationRequest, ModelCapabilities, Usage
from ..codecs import (
    Affinity,
    CodecError,
    EncodedRequest,
    ProviderCodec,
    ProviderError,
    codec_for,
    parse_rate_limit_headers,
)
from ..address_guard import AddressGuard
from ..codecs.antigravity import AntigravityCodec
from ._config import Provider, ProxyConfig, is_loopback
from ._errors import codec_failure, provider_failure, timeout_failure, transport_failure
from ._quota import RateLimitHook, RateLimitReport
from ._translate import StepReader, is_native_step, response_events, to_provider_request

__all__ = ["ProxyModel", "new_client"]

_ERROR_BODY_LIMIT = 65_536  # enough for any provider's error object; an HTML page is cut
_JSON_BODY_LIMIT = 8_388_608
_AUTH_HEADERS = {
    Provider.OPENAI: lambda key: {"authorization": f"Bearer {key}"},
    Provider.ANTHROPIC: lambda key: {"x-api-key": key},
    Provider.GEMINI: lambda key: {"x-goog-api-key": key},
    Provider.ANTIGRAVITY: lambda key: {"authorization": f"Bearer {key}"},
}


def new_client(*, max_connections: int = 100, trust_env: bool = True, guard: AddressGuard | None = None
               ) -> httpx.AsyncClient:
    """The pooled client proxy models share; timeouts are set per request by each model. With
    ``guard`` it connects only to the addresses the guard checked, and never through a proxy
    from the environment."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    if guard is not None:
        return httpx.AsyncClient(transport=guard.transport(limits=limits, trust_env=False), trust_env=False,
                                 follow_redirects=False)
    return httpx.AsyncClient(limits=limits, trust_env=trust_env, follow_redirects=False)


class ProxyModel:
    """A :class:`~oam_actors.agent.LanguageModel` for one :class:`ProxyConfig`.

    ``client``: a shared :func:`new_client` (not closed here); without one the model makes its
    own and closes it in :meth:`aclose` (or ``async with``). ``environ`` is where the key is read
    from (default ``os.environ``), once, here. ``on_rate_limit`` receives every
    :class:`RateLimitReport`; the latest is kept as :attr:`last_rate_limit`. Safe for concurrent
    steps on one event loop.
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
        on_rate_limit: RateLimitHook | None = None,
    ) -> None:
        self.config = config
        self.on_rate_limit = on_rate_limit
        self.last_rate_limit: RateLimitReport | None = None
        env = os.environ if environ is None else environ
        self._codec = _codec(config, env)
        key = _read_key(config, env)
        self._key_sent = key is not None
        self._headers = {**config.extra_headers, **(_AUTH_HEADERS[config.provider](key) if key else {})}
        self._owns_client = client is None
        self._client = client if client is not None else new_client()
        self._timeout = httpx.Timeout(
            connect=config.connect_timeout, read=config.read_timeout, write=config.read_timeout, pool=config.connect_timeout
        )
        self._capabilities = ModelCapabilities(
            context_size=config.context_size,
            max_output_tokens=config.max_output_tokens,
            native_tool_calling=config.native_tools,
        )

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def availability(self) -> Availability:
        """Available unless a key is needed (not a loopback server) and none is set. No request
        is sent: an endpoint's health shows in the first step's error."""
        missing = not self._key_sent and not is_loopback(self.config.host)
        detail = f"No API key: set {' or '.join(self.config.key_envs)} on the server." if missing else None
        return Availability(
            available=not missing,
            reason="unknown" if missing else None,
            contextSize=self.config.context_size,
            variant=self.config.label,
            status="unavailable" if missing else "available",
            detail=detail,
            maxOutputTokens=self.config.max_output_tokens,
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        reader = StepReader(request, native=is_native_step(request, self.config))
        encoded = self._encode(request)
        deadline = anyio.current_time() + self.config.step_timeout
        try:
            response = await self._send(encoded, deadline)
            try:
                # aclosing: an early close of this stream closes the reader at once, not at GC.
                async with aclosing(self._read(response, reader, deadline)) as pieces:
                    async for piece in pieces:
                        yield piece
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        except ProviderError as exc:
            raise provider_failure(exc, self.config, key_sent=self._key_sent) from exc
        except CodecError as exc:
            raise codec_failure(exc, self.config) from exc
        except httpx.HTTPError as exc:
            raise transport_failure(exc, self.config) from exc

    async def aclose(self) -> None:
        """Close the client if this model made it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"ProxyModel({self.config.label} at {self.config.url})"

    # --- one step ----------------------------------------------------------------------------

    def _encode(self, request: GenerationRequest) -> EncodedRequest:
        try:
            return self._codec.encode_request(to_provider_request(request, self.config), stream=True)
        except CodecError as exc:
            raise codec_failure(exc, self.config) from exc

    async def _send(self, encoded: EncodedRequest, deadline: float) -> httpx.Response:
        request = self._client.build_request(
            "POST",
            self.config.url + encoded.path,
            headers={**encoded.headers, **self._headers},
            content=encoded.body,
            timeout=self._timeout,
        )
        with _step_deadline(deadline, self.config):
            response = await self._client.send(request, stream=True)
        if response.is_success:
            self._report(response, None)
        return response

    async def _read(
        self, response: httpx.Response, reader: StepReader, deadline: float
    ) -> AsyncGenerator[str | Usage, None]:
        if not response.is_success:
            body = await self._body(response, deadline, _ERROR_BODY_LIMIT)
            error = self._codec.decode_error(response.status_code, response.headers.multi_items(), body)
            self._report(response, error.retry_after)
            raise error
        if response.headers.get("content-type", "").startswith("application/json"):
            # A server that ignored "stream": read the whole answer the same way.
            body = await self._body(response, deadline, _JSON_BODY_LIMIT)
            decoded = self._codec.decode_response(
                response.status_code, response.headers.multi_items(), body, model=self.config.model
            )
            for piece in reader.finish(response_events(decoded)):
                yield piece
            return
        decoder = self._codec.new_stream(model=self.config.model)
        chunks = response.aiter_bytes()
        try:
            while (chunk := await self._next(chunks, deadline)) is not None:
                for text in reader.push(decoder.feed(chunk)):
                    yield text
            for piece in reader.finish(decoder.finish()):
                yield piece
        finally:
            await _close(chunks)

    async def _next(self, chunks: AsyncIterator[bytes], deadline: float) -> bytes | None:
        with _step_deadline(deadline, self.config):
            return await anext(chunks, None)

    async def _body(self, response: httpx.Response, deadline: float, limit: int) -> bytes:
        """Up to ``limit`` bytes of the body (a bigger body is cut, not read on)."""
        body = bytearray()
        chunks = response.aiter_bytes()
        try:
            while len(body) < limit and (chunk := await self._next(chunks, deadline)) is not None:
                body += chunk
        finally:
            await _close(chunks)
        return bytes(body[:limit])

    def _report(self, response: httpx.Response, retry_after: float | None) -> None:
        info = parse_rate_limit_headers(response.headers.multi_items())
        report = RateLimitReport(response.status_code, info, retry_after)
        if report.known or report.throttled:
            self.last_rate_limit = report
            if self.on_rate_limit is not None:
                self.on_rate_limit(report)


async def _close(chunks: AsyncIterator[bytes]) -> None:
    """Close httpx's body iterator (an async generator) even while being cancelled."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


@contextmanager
def _step_deadline(deadline: float, config: ProxyConfig) -> Iterator[None]:
    """``fail_after`` up to the step's deadline, raising the step-timeout AgentError."""
    try:
        with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
            yield
    except TimeoutError as exc:
        raise timeout_failure(config, step=True) from exc


def _codec(config: ProxyConfig, environ: Mapping[str, str]) -> ProviderCodec:
    options: dict[str, Any] = {
        "affinity": Affinity(
            profile="oam-actors",
            endpoint=config.url,
            account="environment",
            model=config.model,
            credential_scope=config.key_envs[0],
            credential_version="1",
        ),
        "max_frame_bytes": config.max_event_bytes,
        # An unframed remainder over the event bound is an event over the bound.
        "max_buffer_bytes": config.max_event_bytes,
    }
    if config.provider is Provider.OPENAI:
        options["path"] = "/chat/completions"  # the base URL carries the version, as in the SDK
    if config.provider is Provider.ANTIGRAVITY:
        project = config.project or environ.get("ANTIGRAVITY_PROJECT", "").strip() or None
        return AntigravityCodec(project=project, user_agent="oam-actors", **options)
    return codec_for(config.provider.codec_name, **options)


def _read_key(config: ProxyConfig, environ: Mapping[str, str]) -> str | None:
    for name in config.key_envs:
        key = environ.get(name, "").strip()
        if key:
            return key
    return None
