"""A simulated phone: a real HTTP/1.1 server (anyio + h11) speaking the device protocol.

It models what the issue reports about Gemini Nano on ML Kit, so the client and the pool can be
exercised without hardware:

- a per-app quota: ``quota_requests`` admitted generations per rolling ``quota_window_s`` (36 per
  60 s by default: ~36–41 back-to-back generations of ~1.5 s succeed), then BUSY (9) within
  ~20 ms, with the time until the window frees as the retry delay;
- a battery quota (27 or 28) over a much longer window; background periods (30 for inference,
  while ``/v1/availability`` still answers, with ``foreground: false``);
- a download state machine with progress; input/output token limits (12 over the input budget,
  output truncated at the cap); safety-blocked words (4 before streaming, 15 mid-stream, 11 after
  the text); latency and tokens per second;
- seeded random faults per admitted generation: code 0, code 15 mid-stream, a disconnect or a
  hang mid-stream, a garbage line;
- a deterministic responder (:mod:`.responder`) that answers the agent's prompts.

Time: every ``*_s`` duration in :class:`PhoneConfig` is phone time. The phone's clock is
``time.monotonic() / time_scale`` unless a clock is injected (:class:`ManualClock` in tests), and
every real wait is the phone duration × ``time_scale``. Retry delays on the wire are real time.
:class:`PhoneState` holds all the rules and takes ``now`` as an argument; it does no I/O.
"""

from __future__ import annotations

import enum
import logging
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from random import Random
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import h11
import msgspec

from ...agent.model import estimate_tokens
from .protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    CountTokensRequest,
    CountTokensResponse,
    DeviceStatus,
    DoneEvent,
    ErrorBody,
    ErrorEvent,
    ErrorResponse,
    Features,
    FinishReason,
    GenerateRequest,
    MlKitCode,
    ModelStatus,
    StreamEvent,
    TextEvent,
    UnavailableReason,
    encode,
    http_status_for,
    is_quota_code,
    mlkit_name,
)
from .responder import ResponderConfig, respond

__all__ = [
    "Admission",
    "Fault",
    "ManualClock",
    "PhoneConfig",
    "PhoneState",
    "PhoneStatistics",
    "Refusal",
    "SimulatedPhone",
    "plan_stream",
]

_log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1_048_576
_GARBAGE = b"\x00\xff{not json"
_SAFETY_CODES = (MlKitCode.REQUEST_PROCESSING_ERROR, MlKitCode.RESPONSE_PROCESSING_ERROR,
                 MlKitCode.RESPONSE_GENERATION_ERROR)
_BATTERY_CODES = (MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED, MlKitCode.PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED)
_REASON_CODES: Mapping[UnavailableReason, MlKitCode] = {
    UnavailableReason.AICORE_UNAVAILABLE: MlKitCode.AICORE_INCOMPATIBLE,
    UnavailableReason.NEEDS_SYSTEM_UPDATE: MlKitCode.NEEDS_SYSTEM_UPDATE,
    UnavailableReason.NOT_ENOUGH_DISK_SPACE: MlKitCode.NOT_ENOUGH_DISK_SPACE,
}


class Fault(enum.Enum):
    """A random failure of one admitted generation."""

    UNKNOWN = "unknown"        # ML Kit code 0 before any text
    GENERATION = "generation"  # code 15 half-way through the text
    DISCONNECT = "disconnect"  # the connection drops half-way through
    HANG = "hang"              # the phone stops sending half-way through, connection open
    GARBAGE = "garbage"        # a line that is not JSON half-way through


class PhoneConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything a simulated phone does. Durations (``*_s``) are phone seconds."""

    # the model and what the app detects about it
    model_name: str = "nano-v3"
    input_token_limit: int = 4000
    max_output_tokens: int = 256
    system_instructions: bool = True
    prefix_caching: bool = True
    # availability and download
    status: ModelStatus = ModelStatus.AVAILABLE
    unavailable_reason: UnavailableReason = UnavailableReason.DEVICE_NOT_ELIGIBLE
    download_bytes: int = 1_500_000_000
    download_bytes_per_s: float = 25_000_000.0
    # quotas (0 requests = no quota)
    quota_requests: int = 36
    quota_window_s: float = 60.0
    busy_latency_s: float = 0.02
    battery_requests: int = 0
    battery_window_s: float = 86_400.0
    battery_code: int = MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED
    # [start, end) phone seconds after the phone started during which the app is in the background
    background_periods: tuple[tuple[float, float], ...] = ()
    # timing
    first_token_latency_s: float = 0.3
    tokens_per_s: float = 20.0  # 0 = all text at once
    max_concurrent: int = 1
    time_scale: float = 1.0
    # content
    seed: int = 0
    tool_call_rate: float = 0.6
    malformed_rate: float = 0.0
    blocked_words: dict[str, int] = {}  # word → ML Kit code: 4 (input), 15 (mid-stream), 11 (after text)
    # faults: probabilities per admitted generation (their sum at most 1)
    fault_unknown: float = 0.0
    fault_generation: float = 0.0
    fault_disconnect: float = 0.0
    fault_hang: float = 0.0
    fault_garbage: float = 0.0
    # access: when set, every request needs "Authorization: Bearer <token>"
    token: str | None = None

    def __post_init__(self) -> None:
        rates = (self.tool_call_rate, self.malformed_rate, *self.fault_rates().values())
        if any(not 0.0 <= rate <= 1.0 for rate in rates) or sum(self.fault_rates().values()) > 1.0:
            raise ValueError("rates must lie in 0…1 and the fault rates must sum to at most 1")
        if self.time_scale <= 0 or self.download_bytes_per_s <= 0 or self.tokens_per_s < 0:
            raise ValueError("time_scale and download_bytes_per_s must be > 0, tokens_per_s >= 0")
        if min(self.input_token_limit, self.max_output_tokens, self.max_concurrent) < 1:
            raise ValueError("token limits and max_concurrent must be >= 1")
        if self.battery_code not in _BATTERY_CODES:
            raise ValueError("battery_code must be 27 or 28")
        if any(code not in _SAFETY_CODES for code in self.blocked_words.values()):
            raise ValueError("blocked_words codes must be 4, 11 or 15")

    def fault_rates(self) -> dict[Fault, float]:
        return {Fault.UNKNOWN: self.fault_unknown, Fault.GENERATION: self.fault_generation,
                Fault.DISCONNECT: self.fault_disconnect, Fault.HANG: self.fault_hang,
                Fault.GARBAGE: self.fault_garbage}


class ManualClock:
    """An injectable phone clock that moves only when told (tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Refusal(msgspec.Struct, frozen=True):
    """An ML Kit error answered instead of a result; ``retry_after_s`` is phone time."""

    code: int
    message: str
    retry_after_s: float | None = None


class Admission(msgspec.Struct, frozen=True):
    """An admitted generation: its number (from 0), token counts and any safety block."""

    number: int
    input_tokens: int
    cached_input_tokens: int
    max_output_tokens: int
    safety_code: int | None = None


class PhoneStatistics(msgspec.Struct, frozen=True):
    admitted: int
    refused: dict[str, int]
    remembered: int = 0
    """Request times the quota windows keep now (at most their limits: memory stays bounded)."""


class _Window:
    """A rolling-window request counter; ``limit`` 0 never refuses."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self.times: deque[float] = deque()

    def wait(self, now: float) -> float | None:
        """Phone seconds until there is room, or ``None`` when there is room now."""
        while self.times and self.times[0] <= now - self.window:
            self.times.popleft()
        if self.limit == 0 or len(self.times) < self.limit:
            return None
        return self.times[0] + self.window - now

    def record(self, now: float) -> None:
        # Without a limit nothing is counted: a day-long battery window kept every request's time.
        if self.limit:
            self.times.append(now)


class PhoneState:
    """The rules of one phone, as pure functions of ``now`` (phone seconds)."""

    def __init__(self, config: PhoneConfig, start: float) -> None:
        self.config = config
        self.start = start
        self._status = config.status
        self._download_started = start if config.status is ModelStatus.DOWNLOADING else None
        self._foreground: bool | None = None
        self._quota = _Window(config.quota_requests, config.quota_window_s)
        self._battery = _Window(config.battery_requests, config.battery_window_s)
        self._last_system: str | None = None
        self._admitted = 0
        self._refused: dict[str, int] = {}

    # --- availability --------------------------------------------------------------------------

    def set_foreground(self, foreground: bool | None) -> None:
        """Force the app to the foreground (True) or background (False); None follows the config."""
        self._foreground = foreground

    def foreground(self, now: float) -> bool:
        if self._foreground is not None:
            return self._foreground
        elapsed = now - self.start
        return not any(start <= elapsed < end for start, end in self.config.background_periods)

    def status(self, now: float) -> DeviceStatus:
        self._advance_download(now)
        config = self.config
        downloading = self._status is ModelStatus.DOWNLOADING
        return DeviceStatus(
            protocol_version=PROTOCOL_VERSION,
            status=self._status,
            reason=self._reason(),
            detail="The model is downloading." if downloading else None,
            bytes_downloaded=self._downloaded(now) if downloading else None,
            total_bytes=config.download_bytes if self._status is not ModelStatus.AVAILABLE else None,
            foreground=self.foreground(now),
            features=Features(
                model_name=config.model_name,
                input_token_limit=config.input_token_limit,
                max_output_tokens=config.max_output_tokens,
                system_instructions=config.system_instructions,
                prefix_caching=config.prefix_caching,
            ),
        )

    def download(self, now: float) -> DeviceStatus | Refusal:
        """Start the download if the model is downloadable; idempotent otherwise."""
        self._advance_download(now)
        if self._status is ModelStatus.UNAVAILABLE:
            return self._unavailable()
        if self._status is ModelStatus.DOWNLOADABLE:
            self._status = ModelStatus.DOWNLOADING
            self._download_started = now
        return self.status(now)

    def _reason(self) -> UnavailableReason | None:
        if self._status is ModelStatus.AVAILABLE:
            return None
        if self._status is ModelStatus.UNAVAILABLE:
            return self.config.unavailable_reason
        return UnavailableReason.MODEL_NOT_READY

    def _downloaded(self, now: float) -> int:
        started = self._download_started if self._download_started is not None else now
        return min(self.config.download_bytes, int((now - started) * self.config.download_bytes_per_s))

    def _advance_download(self, now: float) -> None:
        if self._status is ModelStatus.DOWNLOADING and self._downloaded(now) >= self.config.download_bytes:
            self._status = ModelStatus.AVAILABLE

    def _unavailable(self) -> Refusal:
        if self._status is ModelStatus.UNAVAILABLE:
            reason = self.config.unavailable_reason
            return Refusal(_REASON_CODES.get(reason, MlKitCode.NOT_AVAILABLE), f"Gemini Nano is unavailable: {reason}.")
        return Refusal(MlKitCode.NOT_AVAILABLE, f"The model is not downloaded yet ({self._status}).")

    # --- requests --------------------------------------------------------------------------------

    def count_tokens(self, now: float, request: CountTokensRequest) -> int | Refusal:
        self._advance_download(now)
        if self._status is not ModelStatus.AVAILABLE:
            return self._refuse(self._unavailable())
        return _tokens(request.system_instruction, request.text)

    def admit(self, now: float, request: GenerateRequest) -> Admission | Refusal:
        """Admit a generation (counting it against the quotas) or refuse it."""
        refusal = self._check(now, request)
        if refusal is not None:
            return self._refuse(refusal)
        self._quota.record(now)
        self._battery.record(now)
        system = request.system_instruction or ""
        cached = estimate_tokens(system) if self.config.prefix_caching and system == self._last_system else 0
        self._last_system = system or None
        number, self._admitted = self._admitted, self._admitted + 1
        cap = self.config.max_output_tokens
        return Admission(
            number=number,
            input_tokens=_tokens(system, request.prompt),
            cached_input_tokens=cached,
            max_output_tokens=min(request.max_output_tokens or cap, cap),
            safety_code=self._blocked(request),
        )

    def _check(self, now: float, request: GenerateRequest) -> Refusal | None:
        self._advance_download(now)
        config = self.config
        if self._status is not ModelStatus.AVAILABLE:
            return self._unavailable()
        if not self.foreground(now):
            return Refusal(MlKitCode.BACKGROUND_USE_BLOCKED, "Background usage is blocked.")
        if not request.prompt.strip():
            return Refusal(MlKitCode.REQUEST_TOO_SMALL, "The prompt is empty.")
        size = _tokens(request.system_instruction, request.prompt)
        if size > config.input_token_limit:
            return Refusal(MlKitCode.REQUEST_TOO_LARGE,
                           f"The request has {size} tokens; the limit is {config.input_token_limit}.")
        if self._blocked(request) == MlKitCode.REQUEST_PROCESSING_ERROR:
            return Refusal(MlKitCode.REQUEST_PROCESSING_ERROR, "The request did not pass a policy check.")
        if (wait := self._battery.wait(now)) is not None:
            return Refusal(config.battery_code, "The battery-use quota is exceeded.", wait)
        if (wait := self._quota.wait(now)) is not None:
            return Refusal(MlKitCode.BUSY, "The service is currently busy.", wait)
        return None

    def _blocked(self, request: GenerateRequest) -> int | None:
        text = f"{request.system_instruction or ''}\n{request.prompt}".lower()
        for word, code in self.config.blocked_words.items():
            if re.search(rf"\b{re.escape(word.lower())}\b", text):
                return code
        return None

    def _refuse(self, refusal: Refusal) -> Refusal:
        name = mlkit_name(refusal.code)
        self._refused[name] = self._refused.get(name, 0) + 1
        return refusal

    def statistics(self) -> PhoneStatistics:
        return PhoneStatistics(admitted=self._admitted, refused=dict(self._refused),
                               remembered=len(self._quota.times) + len(self._battery.times))


def _tokens(system: str | None, prompt: str) -> int:
    return estimate_tokens(system or "") + estimate_tokens(prompt)


def _draw_fault(config: PhoneConfig, rng: Random) -> Fault | None:
    """At most one fault, each with its configured probability."""
    draw = rng.random()
    for fault, rate in config.fault_rates().items():
        if draw < rate:
            return fault
        draw -= rate
    return None


def plan_stream(text: str, admission: Admission, fault: Fault | None) -> list[StreamEvent | Fault]:
    """What the phone sends for one admitted generation, in order; a ``Fault`` item marks where
    the connection breaks, hangs or carries garbage."""
    limit = admission.max_output_tokens * 4  # the simulator's tokenizer: ~4 characters a token
    finish = FinishReason.MAX_TOKENS if len(text) > limit else FinishReason.STOP
    pieces = re.findall(r"\S+\s*", text[:limit])
    half = len(pieces) // 2
    events: list[StreamEvent | Fault] = [TextEvent(piece) for piece in pieces]
    code = admission.safety_code
    if code == MlKitCode.RESPONSE_GENERATION_ERROR or fault is Fault.GENERATION:
        events[half:] = [_error_event(MlKitCode.RESPONSE_GENERATION_ERROR, "The model failed to generate a proper response.")]
    elif code == MlKitCode.RESPONSE_PROCESSING_ERROR:
        events.append(_error_event(MlKitCode.RESPONSE_PROCESSING_ERROR, "The response did not pass a policy check."))
    else:
        events.append(DoneEvent(input_tokens=admission.input_tokens, output_tokens=estimate_tokens("".join(pieces)),
                                cached_input_tokens=admission.cached_input_tokens, finish_reason=finish))
    if fault in (Fault.DISCONNECT, Fault.HANG, Fault.GARBAGE):
        events.insert(half, fault)
    return events


def _error_event(code: int, message: str) -> ErrorEvent:
    return ErrorEvent(ErrorBody(name=mlkit_name(code), message=message, mlkit_code=code))


# --- HTTP --------------------------------------------------------------------------------------


class _Request(msgspec.Struct, frozen=True):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Close(Exception):
    """End the connection now (a simulated disconnect, or a request we cannot answer)."""


class _Http:
    """One server-side HTTP/1.1 connection (keep-alive; chunked streaming responses)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.SERVER)

    async def _event(self) -> object:
        while (event := self.conn.next_event()) is h11.NEED_DATA:
            try:
                data = await self.stream.receive()
            except anyio.EndOfStream:
                data = b""
            self.conn.receive_data(data)
        return event

    async def read_request(self) -> _Request | None:
        """The next request, or ``None`` when the client is done with the connection."""
        head = await self._event()
        if not isinstance(head, h11.Request):
            return None
        body = bytearray()
        while isinstance(event := await self._event(), h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                await self.respond(413, _error_response("PAYLOAD_TOO_LARGE", "The body is too large."))
                raise _Close
        if not isinstance(event, h11.EndOfMessage):
            return None
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
        path = head.target.decode("latin-1").split("?", 1)[0]
        return _Request(head.method.decode("latin-1"), path, headers, bytes(body))

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send(data)

    async def respond(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        await self.send(h11.Response(status_code=status, headers=[
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            (PROTOCOL_HEADER, PROTOCOL_VERSION), *headers]))
        await self.send(h11.Data(data=body))
        await self.send(h11.EndOfMessage())

    async def start_stream(self) -> None:
        # No Content-Length: h11 sends the body chunked.
        await self.send(h11.Response(status_code=200, headers=[
            ("Content-Type", "application/x-ndjson"), ("Cache-Control", "no-store"),
            (PROTOCOL_HEADER, PROTOCOL_VERSION)]))

    async def send_lines(self, lines: list[bytes], *, end: bool = False) -> None:
        """``lines`` as one chunk of the body (NDJSON), and the body's end with it if ``end``."""
        data = self.conn.send(h11.Data(data=b"".join(line + b"\n" for line in lines))) if lines else b""
        if end:
            data = (data or b"") + (self.conn.send(h11.EndOfMessage()) or b"")
        if data:
            await self.stream.send(data)

    def next_cycle(self) -> bool:
        """Ready the connection for the next request; False when it must close."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False


def _error_response(name: str, message: str, *, code: int | None = None, retry_ms: int | None = None) -> bytes:
    return encode(ErrorResponse(ErrorBody(name=name, message=message, mlkit_code=code, retry_after_ms=retry_ms)))


_Handler = Callable[[_Http, _Request], Awaitable[None]]


class SimulatedPhone:
    """A running simulated phone: ``async with SimulatedPhone(config) as phone: phone.url``.

    ``config`` defaults to ``PhoneConfig()``.
    Serves on ``host:port`` (port 0 picks a free one) until the ``async with`` block ends; enter
    and exit it in the same task. ``clock`` returns phone seconds (default: scaled monotonic time).
    """

    def __init__(
        self,
        config: PhoneConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config = config = config or PhoneConfig()
        self.host = host
        self.port = port
        self._clock = clock or (lambda: time.monotonic() / config.time_scale)
        self.state = PhoneState(config, self._clock())
        self._routes: dict[str, tuple[str, _Handler]] = {
            "/v1/availability": ("GET", self._availability),
            "/v1/download": ("POST", self._download),
            "/v1/count-tokens": ("POST", self._count_tokens),
            "/v1/generate": ("POST", self._generate),
        }

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def set_foreground(self, foreground: bool | None) -> None:
        """See :meth:`PhoneState.set_foreground`."""
        self.state.set_foreground(foreground)

    def statistics(self) -> PhoneStatistics:
        return self.state.statistics()

    async def __aenter__(self) -> Self:
        self._slots = anyio.Semaphore(self.config.max_concurrent)
        self._listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        self.port = self._listener.extra(anyio.abc.SocketAttribute.local_port)
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._listener.serve, self._connection)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._tasks.cancel_scope.cancel()
        try:
            # The body's own exception propagates as it is, not inside an ExceptionGroup.
            await self._tasks.__aexit__(None, None, None)
        finally:
            await self._listener.aclose()

    # --- connections ---------------------------------------------------------------------------

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            http = _Http(stream)
            try:
                while (request := await http.read_request()) is not None:
                    await self._answer_request(http, request)
                    if not http.next_cycle():
                        return
            except h11.RemoteProtocolError:
                await self._bad_http(http)
            except (_Close, anyio.BrokenResourceError, anyio.ClosedResourceError, h11.LocalProtocolError):
                return  # the client went away or we dropped the connection on purpose

    async def _bad_http(self, http: _Http) -> None:
        if http.conn.our_state is h11.SEND_RESPONSE:
            try:
                await http.respond(400, _error_response("BAD_REQUEST", "Invalid HTTP."))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, h11.LocalProtocolError):
                pass

    async def _answer_request(self, http: _Http, request: _Request) -> None:
        """Route one request; a bug fails that request with 500, never the phone."""
        try:
            await self._route(http, request)
        except Exception as error:
            if isinstance(error, _Close | anyio.BrokenResourceError | anyio.ClosedResourceError):
                raise
            _log.exception("simulated phone: %s %s failed", request.method, request.path)
            if http.conn.our_state is not h11.SEND_RESPONSE:
                raise _Close from error
            await http.respond(500, _error_response("INTERNAL", f"{type(error).__name__}: {error}"))

    async def _route(self, http: _Http, request: _Request) -> None:
        if self.config.token is not None and request.headers.get("authorization") != f"Bearer {self.config.token}":
            return await http.respond(401, _error_response("UNAUTHORIZED", "A valid bearer token is required."))
        route = self._routes.get(request.path)
        if route is None:
            return await http.respond(404, _error_response("NOT_FOUND", f"No endpoint {request.path}."))
        method, handler = route
        if request.method != method:
            return await http.respond(405, _error_response("METHOD_NOT_ALLOWED", f"Use {method}."),
                                      (("Allow", method),))
        await handler(http, request)

    async def _availability(self, http: _Http, _request: _Request) -> None:
        await http.respond(200, encode(self.state.status(self._clock())))

    async def _download(self, http: _Http, _request: _Request) -> None:
        result = self.state.download(self._clock())
        if isinstance(result, Refusal):
            return await self._refuse(http, result)
        await http.respond(200, encode(result))

    async def _count_tokens(self, http: _Http, request: _Request) -> None:
        try:
            body = msgspec.json.decode(request.body, type=CountTokensRequest)
        except msgspec.DecodeError as error:
            return await http.respond(400, _error_response("BAD_REQUEST", str(error)))
        result = self.state.count_tokens(self._clock(), body)
        if isinstance(result, Refusal):
            return await self._refuse(http, result)
        await http.respond(200, encode(CountTokensResponse(total_tokens=result)))

    async def _generate(self, http: _Http, request: _Request) -> None:
        try:
            body = msgspec.json.decode(request.body, type=GenerateRequest)
        except msgspec.DecodeError as error:
            return await http.respond(400, _error_response("BAD_REQUEST", str(error)))
        admission = self.state.admit(self._clock(), body)
        if isinstance(admission, Refusal):
            if is_quota_code(admission.code):
                await self._sleep(self.config.busy_latency_s)
            return await self._refuse(http, admission)
        fault = _draw_fault(self.config, Random(f"{self.config.seed}|fault|{admission.number}"))
        if fault is Fault.UNKNOWN:
            return await self._refuse(http, Refusal(MlKitCode.UNKNOWN, "Unknown error."))
        async with self._slots:
            await self._sleep(self.config.first_token_latency_s)
            await http.start_stream()
            hung = await self._play(http, plan_stream(self._answer(body), admission, fault))
        if hung:
            await anyio.sleep_forever()  # the engine is free again; this connection just stalls

    def _answer(self, request: GenerateRequest) -> str:
        system = request.system_instruction or ""
        rng = Random(f"{self.config.seed}|{request.seed}|{system}|{request.prompt}")
        responder = ResponderConfig(self.config.tool_call_rate, self.config.malformed_rate)
        return respond(system, request.prompt, rng, responder)

    async def _play(self, http: _Http, events: list[StreamEvent | Fault]) -> bool:
        """Send ``events``; True when the stream is to hang where it stopped. Without a token
        rate (``tokens_per_s=0``) the text is all there at once and goes out in one write (up to
        a fault): a write per word would cost a turn of both event loops per word, so a long
        answer (a coalesced batch) would hold the phone for as many turns as it has words."""
        paced = self.config.tokens_per_s > 0
        # Words are due at the phone's own rate from the first: a phone decodes on its own
        # hardware, so a late wake-up of this (shared) event loop must not slow it down. What is
        # already due when the loop gets round to it goes out in one write.
        started = anyio.current_time()
        decoded = 0.0  # phone seconds of decoding the words so far take
        ready: list[bytes] = []
        for event in events:
            if event is Fault.DISCONNECT or event is Fault.HANG:
                await http.send_lines(ready)
                if event is Fault.DISCONNECT:
                    raise _Close
                return True
            ready.append(_GARBAGE if isinstance(event, Fault) else encode(event))
            if paced and isinstance(event, TextEvent):
                decoded += estimate_tokens(event.text) / self.config.tokens_per_s
                wait = started + decoded * self.config.time_scale - anyio.current_time()
                if wait > 0:
                    await http.send_lines(ready)
                    ready = []
                    await anyio.sleep(wait)
        await http.send_lines(ready, end=True)
        return False

    async def _refuse(self, http: _Http, refusal: Refusal) -> None:
        headers: tuple[tuple[str, str], ...] = ()
        retry_ms = None
        if refusal.retry_after_s is not None:
            real = refusal.retry_after_s * self.config.time_scale
            retry_ms = max(1, math.ceil(real * 1000))  # never earlier than the window frees
            headers = (("Retry-After", str(max(1, math.ceil(real)))),)
        body = _error_response(mlkit_name(refusal.code), refusal.message, code=refusal.code, retry_ms=retry_ms)
        await http.respond(http_status_for(refusal.code), body, headers)

    async def _sleep(self, phone_seconds: float) -> None:
        await anyio.sleep(phone_seconds * self.config.time_scale)
