"""``DeviceModel``: a :class:`~oam_actors.agent.LanguageModel` for ONE phone over the device protocol.

Contract:

- ``stream`` POSTs ``/v1/generate`` and yields text pieces as the phone streams them, then one
  :class:`~oam_actors.agent.Usage` from the final ``done`` event. Closing the generator early
  closes the HTTP response, which tells the phone to cancel the generation.
- Every failure is a :class:`DeviceError` (an :class:`~oam_actors.errors.AgentError`) carrying the
  ML Kit code (``mlkit_code``, ``None`` when the failure was not ML Kit's) and a
  :class:`FailureKind` for the pool. Text already yielded is never a result on its own: a stream
  that breaks, hangs past the read timeout, sends garbage or ends without ``done`` raises.
- ``availability()`` never raises: an unreachable phone is reported unavailable. ``status()``,
  ``download()`` and ``count_tokens()`` raise :class:`DeviceError`.

Foreign errors map once, here::

    ConnectError / ConnectTimeout            → model_unavailable   (UNREACHABLE)
    ReadTimeout / WriteTimeout / PoolTimeout → generation_failed   (TIMEOUT)
    RemoteProtocolError / ReadError / …      → generation_failed   (DISCONNECTED)
    bad JSON, unknown event, no final event  → generation_failed   (MALFORMED)
    device error with mlkitCode              → protocol-core §4.3  (MLKIT), retryAfter kept
    device error without it / non-JSON body  → by HTTP status      (REJECTED)
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import AsyncIterator
from types import TracebackType
from typing import NoReturn, Self

import httpx
import msgspec

from ...agent.model import Availability, GenerationRequest, ModelCapabilities, Usage
from ...errors import AgentError, ErrorCode
from . import protocol as wire

__all__ = ["DeviceError", "DeviceModel", "DeviceTimeouts", "FailureKind", "error_from_body", "generate_body"]


class FailureKind(enum.Enum):
    """Where a device failure came from (for the pool's fail-over decisions)."""

    MLKIT = "mlkit"                # ML Kit refused or failed; see ``mlkit_code``
    REJECTED = "rejected"          # the app refused the HTTP request (auth, bad request, …)
    UNREACHABLE = "unreachable"    # no connection could be made
    TIMEOUT = "timeout"            # the phone stopped answering
    DISCONNECTED = "disconnected"  # the connection broke
    MALFORMED = "malformed"        # the phone answered something that is not the protocol


class DeviceError(AgentError):
    """A device failure as an agent error, with what the pool needs to inspect."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        kind: FailureKind,
        mlkit_code: int | None = None,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(code, message, retry_after=retry_after)
        self.kind = kind
        self.mlkit_code = mlkit_code
        self.http_status = http_status

    def __repr__(self) -> str:
        return f"DeviceError({self.code.wire}, {self.kind.value}, mlkit={self.mlkit_code}, {self.message!r})"


class DeviceTimeouts(msgspec.Struct, frozen=True):
    """Seconds. ``read`` bounds every wait for the next bytes, so a hung stream fails after it."""

    connect: float = 5.0
    read: float = 30.0
    write: float = 10.0
    pool: float = 5.0

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


def _status_code(status: int) -> ErrorCode:
    # Same table as the bridge's OpenAI-compatible backend (protocol-core §4.3).
    if status in (401, 403, 404):
        return ErrorCode.MODEL_UNAVAILABLE
    if status == 429:
        return ErrorCode.RATE_LIMITED
    if status == 503:
        return ErrorCode.BUSY
    if 400 <= status < 500:
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.GENERATION_FAILED


def error_from_body(body: wire.ErrorBody, http_status: int | None) -> DeviceError:
    """A device error object (HTTP error body or ``error`` event) as a :class:`DeviceError`."""
    retry_after = body.retry_after_ms / 1000 if body.retry_after_ms is not None else None
    if body.mlkit_code is not None:
        text = f"Device: {wire.mlkit_name(body.mlkit_code)} ({body.mlkit_code}): {body.message}"
        return DeviceError(wire.agent_code_for(body.mlkit_code), text, kind=FailureKind.MLKIT,
                           mlkit_code=body.mlkit_code, http_status=http_status, retry_after=retry_after)
    code = _status_code(http_status) if http_status is not None else ErrorCode.GENERATION_FAILED
    return DeviceError(code, f"Device: {body.name}: {body.message}", kind=FailureKind.REJECTED,
                       http_status=http_status, retry_after=retry_after)


def _error_from_response(status: int, body: bytes) -> DeviceError:
    parsed = wire.decode_error_response(body)
    if parsed is not None:
        return error_from_body(parsed, status)
    return DeviceError(_status_code(status), f"Device answered HTTP {status} without a device error.",
                       kind=FailureKind.REJECTED, http_status=status)


def _malformed(message: str) -> DeviceError:
    return DeviceError(ErrorCode.GENERATION_FAILED, f"Device: {message}", kind=FailureKind.MALFORMED)


def _transport_error(error: httpx.TransportError) -> DeviceError:
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        return DeviceError(ErrorCode.MODEL_UNAVAILABLE, f"Device unreachable: {error}", kind=FailureKind.UNREACHABLE)
    if isinstance(error, httpx.TimeoutException):
        return DeviceError(ErrorCode.GENERATION_FAILED, "Device stopped responding (timed out).",
                           kind=FailureKind.TIMEOUT)
    return DeviceError(ErrorCode.GENERATION_FAILED, f"Device connection broke: {error or type(error).__name__}",
                       kind=FailureKind.DISCONNECTED)


def _raise_transport(error: httpx.TransportError) -> NoReturn:
    raise _transport_error(error) from error


def generate_body(request: GenerationRequest, request_id: str) -> wire.GenerateRequest:
    """The wire request for one inference (``topP`` has no ML Kit equivalent and is dropped)."""
    sampling = request.sampling
    return wire.GenerateRequest(
        prompt=request.prompt,
        system_instruction=request.system or None,
        temperature=request.temperature,
        top_k=sampling.top_k if sampling else None,
        seed=sampling.seed if sampling else None,
        max_output_tokens=request.max_output_tokens,
        request_id=request_id,
    )


class DeviceModel:
    """One phone running the companion app. See the module docstring for the contract.

    ``client`` may be shared by several models (the pool does); a client created here is closed
    by :meth:`aclose`. Environment proxies are ignored: phones sit on loopback or the LAN.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeouts: DeviceTimeouts | None = None,
        client: httpx.AsyncClient | None = None,
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = (timeouts or DeviceTimeouts()).to_httpx()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=self._timeout, trust_env=False)
        self._headers = {wire.PROTOCOL_HEADER: wire.PROTOCOL_VERSION}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._capabilities = capabilities or ModelCapabilities()

    @property
    def capabilities(self) -> ModelCapabilities:
        """Updated from the phone's detected features by every :meth:`status` call."""
        return self._capabilities

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    # --- status ------------------------------------------------------------------------------

    async def status(self) -> wire.DeviceStatus:
        """The phone's status and features; raises :class:`DeviceError`."""
        return self._remember(await self._call_status("GET", "/v1/availability"))

    async def download(self) -> wire.DeviceStatus:
        """Ask the phone to download the model (idempotent); returns the status after asking."""
        return self._remember(await self._call_status("POST", "/v1/download"))

    async def availability(self) -> Availability:
        """``model/availability`` for this phone; never raises."""
        try:
            return wire.availability_from_status(await self.status())
        except DeviceError as error:
            return Availability(available=False, reason="unknown", status="unavailable", detail=error.message,
                                contextSize=self._capabilities.context_size)

    async def count_tokens(self, text: str, *, system: str | None = None) -> int:
        """Tokens ``text`` (after ``system``) uses on this phone's model."""
        body = wire.encode(wire.CountTokensRequest(text=text, system_instruction=system or None))
        raw = await self._call("POST", "/v1/count-tokens", body)
        try:
            return msgspec.json.decode(raw, type=wire.CountTokensResponse).total_tokens
        except msgspec.DecodeError as error:
            raise _malformed(f"invalid count-tokens answer: {error}") from error

    def _remember(self, status: wire.DeviceStatus) -> wire.DeviceStatus:
        features = status.features
        self._capabilities = msgspec.structs.replace(
            self._capabilities,
            context_size=features.input_token_limit or self._capabilities.context_size,
            max_output_tokens=features.max_output_tokens or self._capabilities.max_output_tokens,
        )
        return status

    async def _call_status(self, method: str, path: str) -> wire.DeviceStatus:
        raw = await self._call(method, path, None)
        try:
            status = wire.decode_status(raw)
        except msgspec.DecodeError as error:
            raise _malformed(f"invalid status answer: {error}") from error
        if wire.protocol_major(status.protocol_version) != wire.protocol_major(wire.PROTOCOL_VERSION):
            raise DeviceError(ErrorCode.MODEL_UNAVAILABLE,
                              f"Device speaks protocol {status.protocol_version}, not {wire.PROTOCOL_VERSION}.",
                              kind=FailureKind.REJECTED)
        return status

    async def _call(self, method: str, path: str, body: bytes | None) -> bytes:
        try:
            response = await self._client.request(method, self.base_url + path, content=body,
                                                  headers=self._json_headers(body), timeout=self._timeout)
        except httpx.TransportError as error:
            _raise_transport(error)
        if response.status_code >= 300:
            raise _error_from_response(response.status_code, response.content)
        return response.content

    def _json_headers(self, body: bytes | None) -> dict[str, str]:
        if body is None:
            return self._headers
        return {**self._headers, "Content-Type": "application/json"}

    # --- generation ----------------------------------------------------------------------------

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        """Stream one inference. See the module docstring."""
        body = wire.encode(generate_body(request, uuid.uuid4().hex))
        try:
            async with self._client.stream("POST", self.base_url + "/v1/generate", content=body,
                                           headers=self._json_headers(body), timeout=self._timeout) as response:
                if response.status_code >= 300:
                    raise _error_from_response(response.status_code, await response.aread())
                async for item in _read_events(response):
                    yield item
        except httpx.TransportError as error:
            _raise_transport(error)

    def __repr__(self) -> str:
        return f"DeviceModel({self.base_url!r})"


async def _read_events(response: httpx.Response) -> AsyncIterator[str | Usage]:
    """Text pieces, then the usage of ``done``; raises on ``error``, garbage or a missing end."""
    framer = wire.LineFramer()
    async for chunk in response.aiter_bytes():
        try:
            lines = framer.feed(chunk)
        except ValueError as error:
            raise _malformed(str(error)) from error
        for line in lines:
            event = _decode(line)
            if isinstance(event, wire.TextEvent):
                yield event.text
                continue
            yield _finish(event, response.status_code)
            return
    for line in framer.finish():
        event = _decode(line)
        if not isinstance(event, wire.TextEvent):
            yield _finish(event, response.status_code)
            return
    raise _malformed("the stream ended without its final event")


def _decode(line: bytes) -> wire.StreamEvent:
    try:
        return wire.decode_event(line)
    except msgspec.DecodeError as error:
        raise _malformed(f"invalid stream line ({error}): {line[:80]!r}") from error


def _finish(event: wire.DoneEvent | wire.ErrorEvent, http_status: int) -> Usage:
    """The terminal event: ``done`` becomes the usage, ``error`` is raised."""
    if isinstance(event, wire.ErrorEvent):
        raise error_from_body(event.error, http_status)
    return Usage(input_tokens=event.input_tokens, cached_input_tokens=event.cached_input_tokens,
                 output_tokens=event.output_tokens)
