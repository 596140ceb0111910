"""The client's one seam: where a connection goes and how its messages travel.

An :class:`Endpoint` opens a :class:`Transport`; the transport carries whole messages (one
JSON-RPC message per call, no newline) both ways and knows nothing of JSON-RPC. Four endpoints:

- :class:`TcpEndpoint` (``tcp://HOST:PORT``): JSON lines over a socket; the token goes in the
  first message (``auth``), which the client sends.
- :class:`WebSocketEndpoint` (``ws://HOST:PORT/PATH``, ``wss://…``): one message per text frame,
  with the ``websockets`` library; the token goes in the handshake's ``Authorization`` header.
- :class:`ProcessEndpoint` (``stdio``): ``oam-actors stdio ARGS`` as a child process, messages
  on its stdin and stdout; its stderr is kept (the last lines name the cause when it dies).
- :class:`InProcessEndpoint`: a bridge served in this process through memory (``simulate``,
  tests, programs that embed a :class:`~oam_actors.bridge.Bridge`).

A transport's ``receive`` raises :class:`~oam_actors.client.ConnectionLost` naming the cause
when the server has gone; ``aclose`` may be called at any time, more than once.
"""

from __future__ import annotations

import abc
import collections
import math
import shlex
import subprocess
import sys
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.buffered import BufferedByteReceiveStream

from ._errors import AuthenticationFailed, ConnectError, ConnectionLost, MalformedMessage

__all__ = [
    "Endpoint",
    "InProcessEndpoint",
    "ProcessEndpoint",
    "TcpEndpoint",
    "Transport",
    "WebSocketEndpoint",
    "endpoint_of",
]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The longest message the client reads (the server's own limit on input is 8 MiB; its answers,
a transcript for one, may be longer)."""


class Transport(abc.ABC):
    """One open connection: whole messages in and out."""

    @abc.abstractmethod
    async def send(self, message: bytes) -> None:
        """Send one message; raises :class:`ConnectionLost` when the peer has gone."""

    @abc.abstractmethod
    async def receive(self) -> bytes:
        """The next message (blank lines skipped); :class:`ConnectionLost` at the end."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the connection (end the child process); idempotent."""


class Endpoint(abc.ABC):
    """Where to connect; :meth:`open` may be called again to reconnect."""

    auth_in_band = False
    """The token is sent as the first message (``auth``) rather than by the transport."""

    @abc.abstractmethod
    async def open(self, task_group: anyio.abc.TaskGroup, token: str | None) -> Transport:
        """Open a connection; helper tasks go in ``task_group``. Raises :class:`ConnectError`."""


def endpoint_of(target: str | Endpoint, args: Sequence[str] = ()) -> Endpoint:
    """The endpoint a ``connect`` target names: ``tcp://HOST:PORT``, ``ws(s)://HOST:PORT/PATH``,
    ``stdio`` (with ``args`` for ``oam-actors stdio``), or an :class:`Endpoint` as it is."""
    if isinstance(target, Endpoint):
        return target
    if target == "stdio":
        return ProcessEndpoint(args)
    parts = urlsplit(target)
    if parts.scheme == "tcp" and parts.hostname and parts.port is not None:
        return TcpEndpoint(parts.hostname, parts.port)
    if parts.scheme in ("ws", "wss") and parts.hostname:
        return WebSocketEndpoint(target)
    raise ValueError(f"connect() needs 'tcp://HOST:PORT', 'ws://HOST:PORT/PATH' or 'stdio'; got {target!r}")


# --- TCP ----------------------------------------------------------------------------------------


class _LineTransport(Transport):
    """Newline-framed messages over a byte stream (TCP, a child's stdin and stdout)."""

    def __init__(self, send_stream: anyio.abc.ByteSendStream, receive_stream: anyio.abc.ByteReceiveStream,
                 name: str) -> None:
        self._send_stream = send_stream
        self._reader = BufferedByteReceiveStream(receive_stream)
        self._lock = anyio.Lock()
        self._outgoing: list[bytes] = []
        self.name = name

    async def send(self, message: bytes) -> None:
        # Group commit: the other tasks ready to send in this turn of the event loop queue their
        # messages behind this one (the checkpoint lets them), and one write sends them all, in
        # queue order: one system call for many concurrent calls.
        self._outgoing.append(message)
        try:
            await anyio.lowlevel.checkpoint()
            async with self._lock:
                if self._outgoing:
                    data = b"\n".join(self._outgoing) + b"\n"
                    self._outgoing.clear()
                    await self._send_stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLost(f"{self.name}: {self.gone()} (sending failed: {exc or type(exc).__name__})") from exc

    async def receive(self) -> bytes:
        while True:
            try:
                line = await self._reader.receive_until(b"\n", MAX_MESSAGE_BYTES)
            except anyio.IncompleteRead as exc:
                raise ConnectionLost(f"{self.name}: {await self.ended()}") from exc
            except anyio.DelimiterNotFound as exc:
                raise MalformedMessage(f"{self.name}: a message longer than {MAX_MESSAGE_BYTES} bytes") from exc
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
                raise ConnectionLost(f"{self.name}: {self.gone()} ({exc or type(exc).__name__})") from exc
            line = line.rstrip(b"\r")
            if line.strip():
                return line

    def gone(self) -> str:
        return "the server closed the connection"

    async def ended(self) -> str:
        """Why the input ended, once what tells it is known."""
        return self.gone()


class _TcpTransport(_LineTransport):
    def __init__(self, stream: anyio.abc.SocketStream, name: str) -> None:
        super().__init__(stream, stream, name)
        self._stream = stream

    async def aclose(self) -> None:
        await self._stream.aclose()


class TcpEndpoint(Endpoint):
    """``oam-actors serve --tcp``; the client authenticates with ``auth`` when given a token."""

    auth_in_band = True

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def __str__(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    async def open(self, task_group: anyio.abc.TaskGroup, token: str | None) -> Transport:
        try:
            stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as exc:
            raise ConnectError(f"{self}: cannot connect ({exc.strerror or exc})") from exc
        return _TcpTransport(stream, str(self))


# --- WebSocket ----------------------------------------------------------------------------------


class _WebSocketTransport(Transport):
    def __init__(self, connection: Any, name: str) -> None:
        self._ws = connection
        self.name = name

    def _lost(self, exc: Exception) -> ConnectionLost:
        code = getattr(exc, "rcvd", None)
        detail = f"close code {code.code}" + (f": {code.reason}" if code.reason else "") if code else "no close frame"
        return ConnectionLost(f"{self.name}: the server closed the connection ({detail})")

    async def send(self, message: bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(message.decode())
        except ConnectionClosed as exc:
            raise self._lost(exc) from exc

    async def receive(self) -> bytes:
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                frame = await self._ws.recv()
            except ConnectionClosed as exc:
                raise self._lost(exc) from exc
            data = frame.encode() if isinstance(frame, str) else frame
            if data.strip():
                return data

    async def aclose(self) -> None:
        await self._ws.close()


class WebSocketEndpoint(Endpoint):
    """``oam-actors serve --ws``; the token goes in ``Authorization: Bearer``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __str__(self) -> str:
        return self.url

    async def open(self, task_group: anyio.abc.TaskGroup, token: str | None) -> Transport:
        # websockets is imported here: a client that never opens a WebSocket does not pay for it.
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        try:
            connection = await connect(self.url, additional_headers=headers, max_size=MAX_MESSAGE_BYTES,
                                       proxy=None, open_timeout=None)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 401:
                reason = "failed" if token is not None else "required"
                raise AuthenticationFailed(f"{self}: the server refused the token (HTTP 401)", reason) from exc
            raise ConnectError(f"{self}: the handshake was refused (HTTP {status})") from exc
        except (OSError, InvalidHandshake) as exc:
            raise ConnectError(f"{self}: cannot connect ({exc})") from exc
        return _WebSocketTransport(connection, str(self))


# --- a child process ----------------------------------------------------------------------------


class _ProcessTransport(_LineTransport):
    def __init__(self, process: anyio.abc.Process, name: str, stderr_tail: collections.deque[str],
                 stderr_done: anyio.Event) -> None:
        assert process.stdin is not None and process.stdout is not None
        super().__init__(process.stdin, process.stdout, name)
        self._process = process
        self._stderr_tail = stderr_tail
        self._stderr_done = stderr_done

    def gone(self) -> str:
        status = self._process.returncode
        said = f"; its stderr ends: {self._stderr_tail[-1]}" if self._stderr_tail else ""
        if status is None:
            return f"the server process closed its output{said}"
        return f"the server process exited with status {status}{said}"

    async def ended(self) -> str:
        # The output closes a moment before the process exits: wait a little for its status.
        with anyio.move_on_after(2):
            await self._process.wait()
            await self._stderr_done.wait()  # its last stderr line names the cause
        return self.gone()

    async def aclose(self) -> None:
        """Close its input (the server answers what it has, then exits 0); kill it after 5 s."""
        process = self._process
        with anyio.CancelScope(shield=True):
            try:
                await process.stdin.aclose()  # type: ignore[union-attr]
            except (OSError, anyio.BrokenResourceError):
                pass
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


class ProcessEndpoint(Endpoint):
    """``oam-actors stdio ARGS`` as a child process (``command`` replaces ``oam-actors``; by
    default it is this interpreter's ``python -m oam_actors``, so the same installation runs)."""

    def __init__(self, args: Sequence[str] = (), *, command: Sequence[str] | None = None) -> None:
        self.args = list(args)
        self.command = list(command) if command is not None else [sys.executable, "-m", "oam_actors"]

    def __str__(self) -> str:
        return "stdio: " + shlex.join(["oam-actors", "stdio", *self.args])

    async def open(self, task_group: anyio.abc.TaskGroup, token: str | None) -> Transport:
        try:
            process = await anyio.open_process([*self.command, "stdio", *self.args], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise ConnectError(f"{self}: cannot start the server ({exc})") from exc
        tail: collections.deque[str] = collections.deque(maxlen=20)
        done = anyio.Event()
        task_group.start_soon(_keep_stderr, process, tail, done)
        return _ProcessTransport(process, str(self), tail, done)


async def _keep_stderr(process: anyio.abc.Process, tail: collections.deque[str], done: anyio.Event) -> None:
    """Keep the child's last stderr lines (the pipe is drained to its end, or the child blocks)."""
    assert process.stderr is not None
    partial = b""
    try:
        async for chunk in process.stderr:
            *lines, partial = (partial + chunk).split(b"\n")
            partial = partial[-4096:]
            tail.extend(text for line in lines if (text := line.decode(errors="replace").strip()))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    finally:
        if partial.strip():
            tail.append(partial.decode(errors="replace").strip())
        done.set()


# --- in this process ----------------------------------------------------------------------------


class LineServer(Protocol):
    """What :class:`InProcessEndpoint` serves: a :class:`~oam_actors.bridge.Bridge` or alike."""

    def serve(self, lines: AsyncIterable[bytes]) -> Awaitable[None]: ...


class _MemoryTransport(Transport):
    def __init__(self, to_server: Any, from_server: Any, name: str) -> None:
        self._to_server = to_server
        self._from_server = from_server
        self.name = name

    async def send(self, message: bytes) -> None:
        try:
            await self._to_server.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLost(f"{self.name}: the bridge has stopped") from exc

    async def receive(self) -> bytes:
        try:
            return await self._from_server.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise ConnectionLost(f"{self.name}: the bridge has stopped") from exc

    async def aclose(self) -> None:
        self._to_server.close()  # the bridge sees end of input, answers what it has, and stops


class InProcessEndpoint(Endpoint):
    """A bridge in this process: ``make(write)`` builds it around ``write`` (the bridge's
    output), and the connection serves it until the client closes. ``server`` is the one made
    last (tests reach into it)."""

    def __init__(self, make: Callable[[Callable[[bytes], Awaitable[None]]], LineServer],
                 name: str = "in-process") -> None:
        self._make = make
        self.name = name
        self.server: LineServer | None = None

    def __str__(self) -> str:
        return self.name

    async def open(self, task_group: anyio.abc.TaskGroup, token: str | None) -> Transport:
        to_server, lines = anyio.create_memory_object_stream[bytes](max_buffer_size=1 << 16)
        # The reader never blocks the bridge's writer: the client's reader task drains it.
        output, from_server = anyio.create_memory_object_stream[bytes](max_buffer_size=math.inf)

        async def write(data: bytes) -> None:
            for line in data.split(b"\n"):
                if line:
                    output.send_nowait(line)

        server = self.server = self._make(write)

        async def serve() -> None:
            with output:
                await server.serve(lines)

        task_group.start_soon(serve)
        return _MemoryTransport(to_server, from_server, self.name)
