"""A real ``oam-actors serve`` subprocess and real TCP / WebSocket clients for it (used by the
``test_serve_*`` tests and the network scenario replay).

Every client has the same two-method seam, :meth:`Peer.send_line` and :meth:`Peer.next`, plus the
request helpers of ``bridge_process.BridgeProcess``. A reader thread parses every incoming
message into ``log``; waits have a hang guard (never a timing assertion).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Self
from urllib.parse import urlsplit

HANG_GUARD = 20.0  # seconds; only to fail a hung test instead of blocking the suite


class ServeProcess:
    """``oam-actors serve ARGS``; reads the bound addresses from stdout's first lines."""

    def __init__(self, args: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oam_actors", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.tcp_address: tuple[str, int] | None = None
        self.ws_url: str | None = None
        self.openai_urls: list[str] = []  # http://HOST:PORT/v1, one per --openai
        self.console_url: str | None = None  # http://HOST:PORT/console with --console
        assert self.proc.stdout is not None
        for _ in range(("--tcp" in args) + ("--ws" in args) + list(args).count("--openai") + ("--console" in args)):
            self._read_address(self.proc.stdout.readline().decode().strip())
        self._stderr: list[bytes] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _read_address(self, line: str) -> None:
        parts = urlsplit(line)
        if parts.scheme == "tcp":
            assert parts.hostname is not None and parts.port is not None, line
            self.tcp_address = (parts.hostname, parts.port)
        elif parts.scheme == "ws":
            self.ws_url = line
        elif parts.scheme == "http" and parts.path == "/console":
            self.console_url = line
        elif parts.scheme == "http":
            self.openai_urls.append(line)
        else:
            raise AssertionError(f"unexpected first stdout line {line!r}; stderr: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")

    @property
    def http_base(self) -> str:
        assert self.ws_url is not None
        return self.ws_url.replace("ws://", "http://", 1).rsplit("/", 1)[0]

    def tcp(self, token: str | None = None) -> TcpPeer:
        """A TCP client; with ``token`` it authenticates first (and checks the answer)."""
        assert self.tcp_address is not None
        peer = TcpPeer(self.tcp_address)
        if token is not None:
            peer.call("auth", {"token": token})
        return peer

    def ws(self, token: str | None = None) -> WsPeer:
        assert self.ws_url is not None
        return WsPeer(self.ws_url, token)

    def get(self, path: str, token: str | None = None) -> tuple[int, str, str]:
        """``GET path`` on the WebSocket port: status, content type, body."""
        request = urllib.request.Request(self.http_base + path)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=HANG_GUARD) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    def stop(self) -> int:
        """SIGTERM, then the exit status."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_serve(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``oam-actors serve ARGS`` expected to exit by itself (start-up refusals)."""
    return subprocess.run(
        [sys.executable, "-m", "oam_actors", "serve", *args],
        capture_output=True, text=True, timeout=HANG_GUARD, check=False,
    )


class Peer:
    """One client connection: the seam (``send_line``, ``next``) and request helpers."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.closed = False
        self.cursor = 0
        self._cond = threading.Condition()
        self._taken_tool_calls: set[str] = set()
        self._next_id = 0

    # --- the seam ---------------------------------------------------------------------------

    def send_line(self, line: bytes | str) -> None:
        """Send one message (one line over TCP, one text frame over WebSocket)."""
        raise NotImplementedError

    def send_lines(self, text: bytes) -> None:
        """Send newline-separated messages at once (one write over TCP, a frame each over WebSocket)."""
        raise NotImplementedError

    def close_input(self) -> None:
        """End what this client sends (a TCP half-close; WebSocket has none: it closes)."""
        raise NotImplementedError

    def next(self) -> dict[str, Any]:
        """The next message in arrival order."""
        index = self.wait_for(lambda m: True, self.cursor)
        self.cursor = index + 1
        return self.log[index]

    def close(self) -> None:
        raise NotImplementedError

    # --- for the reader threads --------------------------------------------------------------

    def _received(self, raw: bytes | str) -> None:
        with self._cond:
            self.log.append(json.loads(raw))
            self._cond.notify_all()

    def _ended(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    # --- helpers ------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        self.send_line(json.dumps(message, separators=(",", ":")))

    def request(self, method: str, params: Any = None, *, id: Any = None) -> Any:
        if id is None:
            self._next_id += 1
            id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return id

    def reply(self, tool_id: str, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": tool_id, "result": result})

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], start: int = 0) -> int:
        with self._cond:
            index = start
            while True:
                while index < len(self.log):
                    if predicate(self.log[index]):
                        return index
                    index += 1
                if self.closed:
                    raise EOFError(f"the server closed the connection; log: {self.log[-5:]}")
                if not self._cond.wait(timeout=HANG_GUARD):
                    raise TimeoutError(f"no matching message; log tail: {self.log[-5:]}")

    def wait_closed(self) -> None:
        """Block until the server has closed the connection."""
        with self._cond:
            while not self.closed:
                if not self._cond.wait(timeout=HANG_GUARD):
                    raise TimeoutError("the server did not close the connection")

    def response(self, id: Any) -> dict[str, Any]:
        index = self.wait_for(lambda m: m.get("id") == id and "method" not in m and ("result" in m or "error" in m))
        return self.log[index]

    def result(self, id: Any) -> Any:
        message = self.response(id)
        assert "result" in message, message
        return message["result"]

    def error(self, id: Any) -> dict[str, Any]:
        message = self.response(id)
        assert "error" in message, message
        return message["error"]

    def call(self, method: str, params: Any = None) -> Any:
        return self.result(self.request(method, params))

    def tool_call(self) -> dict[str, Any]:
        """The next ``tool/call`` not yet taken."""
        index = self.wait_for(lambda m: m.get("method") == "tool/call" and m["id"] not in self._taken_tool_calls)
        self._taken_tool_calls.add(self.log[index]["id"])
        return self.log[index]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpPeer(Peer):
    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__()
        self.sock = socket.create_connection(address, timeout=HANG_GUARD)
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def send_line(self, line: bytes | str) -> None:
        self.send_raw((line.encode() if isinstance(line, str) else line) + b"\n")

    def send_lines(self, text: bytes) -> None:
        self.send_raw(text + b"\n")

    def send_raw(self, data: bytes) -> None:
        with self._lock:
            self.sock.sendall(data)

    def close_input(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def _read(self) -> None:
        try:
            for line in self.sock.makefile("rb"):
                self._received(line)
        except OSError:
            pass
        self._ended()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class WsPeer(Peer):
    def __init__(self, url: str, token: str | None = None) -> None:
        from websockets.sync.client import connect

        super().__init__()
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        connection = connect(url, additional_headers=headers, proxy=None, open_timeout=HANG_GUARD, max_size=None)
        self.ws = connection.__enter__()  # entered as its context manager; close() leaves it
        threading.Thread(target=self._read, daemon=True).start()

    def send_line(self, line: bytes | str) -> None:
        self.ws.send(line.decode() if isinstance(line, bytes) else line)

    def send_lines(self, text: bytes) -> None:
        for line in text.split(b"\n"):
            self.send_line(line)

    def close_input(self) -> None:
        self.ws.close()

    def send_binary(self, data: bytes) -> None:
        self.ws.send(data)

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for message in self.ws:
                self._received(message)
        except ConnectionClosed:
            pass
        self._ended()

    def close(self) -> None:
        self.ws.close()


def scripted(steps: list[Any]) -> dict[str, Any]:
    return {"type": "scripted", "steps": steps}


OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
TOOL_ROUND = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]


def metric(text: str, sample: str) -> float:
    """The value of one sample line (``name{labels}``) of a Prometheus exposition; 0 if absent."""
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0
