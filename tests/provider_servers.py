"""Real HTTP servers on loopback that speak each provider's wire format, for the proxy tests.

:class:`ProviderServer` is an HTTP/1.1 server (``http.server`` on a thread, keep-alive, chunked
transfer) on 127.0.0.1 that answers every POST with the next queued :class:`Reply` and records the
request. A reply is a status, headers and body pieces, each written and flushed on its own (so an
SSE frame can arrive split anywhere), and an ending: complete, hang (before the headers or after
the pieces), connection reset (RST) or close mid-body.

Replies come from recorded-style fixture files (``tests/fixtures/providers/http/<provider>/*.json``:
``{"status", "headers", "chunks"}``) or from the builders below, which write the same frames as
the providers do (ids, created stamps, usage chunks, ``[DONE]``, event names).
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

FIXTURES = Path(__file__).parent / "fixtures" / "providers" / "http"
COMPLETE, HANG, HANG_BEFORE_HEADERS, RESET, CLOSE = "complete", "hang", "hang_before_headers", "reset", "close"


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    chunks: list[bytes] = field(default_factory=list)
    ending: str = COMPLETE


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ProviderServer:
    """One loopback server; ``with ProviderServer() as server:`` starts and stops it."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.always: Reply | None = None  # answered when the queue is empty (benchmarks)
        self.requests: list[Recorded] = []
        self.released = threading.Event()  # ends every hang
        self._lock = threading.Lock()
        self._http = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        # A short poll interval: shutdown() waits for the serving loop to notice.
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.01,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            if self.replies:
                return self.replies.popleft()
        if self.always is not None:
            return self.always
        return Reply(500, {"content-type": "text/plain"}, [b"no reply queued"])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self._http.shutdown()
        self._http.server_close()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops a connection (a closed stream, a test's reset) is expected here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(server: ProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # As real servers do: without it, the small last chunk waits out a delayed ACK.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            recorded = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"))
            reply = server.next_reply(recorded)
            try:
                self._answer(reply)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: allowed
                self.close_connection = True

        def _answer(self, reply: Reply) -> None:
            if reply.ending == HANG_BEFORE_HEADERS:
                server.released.wait()
                self.close_connection = True
                return
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in reply.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            if reply.ending == COMPLETE:
                self.wfile.write(b"0\r\n\r\n")
            elif reply.ending == HANG:
                server.released.wait()
                self.close_connection = True
            elif reply.ending == RESET:
                # SO_LINGER 0: close() sends RST instead of FIN.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
            else:
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the tests read results, not logs

    return Handler


# --- fixtures and helpers --------------------------------------------------------------------


def fixture(provider: str, name: str, *, ending: str = COMPLETE) -> Reply:
    """A recorded-style reply from ``fixtures/providers/http/<provider>/<name>.json``."""
    data = json.loads((FIXTURES / provider / f"{name}.json").read_text())
    chunks = [c.encode() for c in data["chunks"]]
    return Reply(data["status"], data["headers"], chunks, ending)


def split(body: bytes, size: int = 7) -> list[bytes]:
    """``body`` in pieces of ``size`` bytes: frames and JSON are cut mid-way."""
    return [body[i : i + size] for i in range(0, len(body), size)]


def sse(*objects: Any, event_names: bool = False, done: bool = False) -> bytes:
    frames = []
    for obj in objects:
        head = f"event: {obj['type']}\n" if event_names else ""
        frames.append(f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n")
    if done:
        frames.append("data: [DONE]\n\n")
    return "".join(frames).encode()


def stream(body: bytes, *, size: int = 7, headers: dict[str, str] | None = None, ending: str = COMPLETE) -> Reply:
    return Reply(200, {"content-type": "text/event-stream", **(headers or {})}, split(body, size), ending)


# --- OpenAI chat completions -----------------------------------------------------------------


def _openai_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-AbC123",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4.1-mini-2025-04-14",
        "system_fingerprint": "fp_6ec83003ad",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def _openai_usage() -> dict[str, Any]:
    return {
        "id": "chatcmpl-AbC123",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4.1-mini-2025-04-14",
        "choices": [],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49,
                  "prompt_tokens_details": {"cached_tokens": 16}},
    }


def openai_text(*pieces: str) -> bytes:
    chunks = [_openai_chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [_openai_chunk({"content": p}) for p in pieces]
    chunks += [_openai_chunk({}, "stop"), _openai_usage()]
    return sse(*chunks, done=True)


def openai_call(name: str, arguments: dict[str, Any], call_id: str = "call_Xy12") -> bytes:
    text = json.dumps(arguments)
    half = len(text) // 2
    chunks = [
        _openai_chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[:half]}}]}),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[half:]}}]}),
        _openai_chunk({}, "tool_calls"),
        _openai_usage(),
    ]
    return sse(*chunks, done=True)


# --- Anthropic messages ----------------------------------------------------------------------


def _anthropic_start() -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 42, "cache_read_input_tokens": 16, "output_tokens": 1}}}


def _anthropic_end(reason: str) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]


def anthropic_text(*pieces: str) -> bytes:
    events = [_anthropic_start(),
              {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
              {"type": "ping"}]
    events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in pieces]
    events += [{"type": "content_block_stop", "index": 0}, *_anthropic_end("end_turn")]
    return sse(*events, event_names=True)


def anthropic_call(name: str, arguments: dict[str, Any], call_id: str = "toolu_01A09q90qw") -> bytes:
    text = json.dumps(arguments)
    half = len(text) // 2
    events = [
        _anthropic_start(),
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": text[:half]}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": text[half:]}},
        {"type": "content_block_stop", "index": 0},
        *_anthropic_end("tool_use"),
    ]
    return sse(*events, event_names=True)


# --- Gemini streamGenerateContent ------------------------------------------------------------


def _gemini(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    usage = {"promptTokenCount": 42, "cachedContentTokenCount": 16, "totalTokenCount": 42}
    if finish:
        usage = {**usage, "candidatesTokenCount": 7, "totalTokenCount": 49}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash",
            "responseId": "mJ2aaPq0Ks"}


def gemini_text(*pieces: str) -> bytes:
    frames = [_gemini([{"text": p}]) for p in pieces[:-1]]
    frames.append(_gemini([{"text": pieces[-1]}], "STOP"))
    return sse(*frames)


def gemini_call(name: str, arguments: dict[str, Any]) -> bytes:
    return sse(_gemini([{"functionCall": {"name": name, "args": arguments}}], "STOP"))


TEXT = {"openai": openai_text, "anthropic": anthropic_text, "gemini": gemini_text}
CALL = {"openai": openai_call, "anthropic": anthropic_call, "gemini": gemini_call}


# --- a provider that enforces a rate -----------------------------------------------------------


class WindowedProvider(ProviderServer):
    """An OpenAI-compatible provider allowing ``limit`` requests per fixed ``window`` seconds
    (counted from its start), as providers that count per window do.

    Every answer carries ``x-ratelimit-{limit,remaining,reset}-requests``; a request over the
    limit gets a 429 with ``retry-after`` (the rest of the window) and does not count. The
    counts by window are ``accepted`` and ``refused``. ``hang_next`` makes the next request
    hang until :attr:`released` is set (a step in flight, for kill tests).
    """

    def __init__(self, limit: int, window: float, text: str = "Aye.") -> None:
        super().__init__()
        self.limit, self.window = limit, window
        self.accepted: dict[int, int] = {}
        self.refused: dict[int, int] = {}
        self.hang_next = False
        self._body = openai_text(text)
        self._started = time.monotonic()

    def next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            elapsed = time.monotonic() - self._started
            index = int(elapsed // self.window)
            ok = self.accepted.get(index, 0) < self.limit
            book = self.accepted if ok else self.refused
            book[index] = book.get(index, 0) + 1
            reset = (index + 1) * self.window - elapsed
            hang, self.hang_next = self.hang_next and ok, False
        headers = {
            "x-ratelimit-limit-requests": str(self.limit),
            "x-ratelimit-remaining-requests": str(self.limit - self.accepted.get(index, 0)),
            "x-ratelimit-reset-requests": f"{reset:.3f}s",
        }
        if not ok:
            error = json.dumps({"error": {"message": "Rate limit reached for requests", "type": "requests",
                                          "code": "rate_limit_exceeded"}}).encode()
            return Reply(429, {"content-type": "application/json", "retry-after": f"{reset:.3f}", **headers}, [error])
        return Reply(200, {"content-type": "text/event-stream", **headers}, [self._body], HANG if hang else COMPLETE)

    def most_in_a_window(self) -> int:
        with self._lock:
            return max(self.accepted.values(), default=0)
