"""Line framing over byte streams, and the process's stdin/stdout as such streams.

Contract
--------
:func:`read_lines` turns a byte stream into lines: split on ``b"\\n"``, one trailing ``b"\\r"``
stripped, blank lines passed through (the codec ignores them), a last unterminated line yielded at
end of stream. A line longer than ``max_line_bytes`` is never buffered whole: once the limit is
passed its bytes are counted and dropped up to its newline, and a single :class:`LineTooLong` is
yielded in its place, so the bridge can answer ``-32600`` and carry on with the next line.
:class:`LineSplitter` is the same logic without I/O.

:func:`open_stdio` wraps the process's stdin and stdout descriptors. Pipes and sockets are switched
to non-blocking mode and driven by the event loop; terminals and regular files (which cannot be
polled, or whose mode is shared with the shell) are read and written in a worker thread. Each call
of the returned writer writes its bytes followed by ``b"\\n"``. Closing the returned stream restores
both descriptors' blocking mode (it does not close them); writes after that raise
``anyio.ClosedResourceError``.

:func:`reserve_stdout` keeps the process's stdout for one writer: it returns a private descriptor
of it and points descriptor 1 at stderr, so nothing else in the process (a library's print, Ray's
driver threads, native code, child processes) can write into what stdout carries.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec
from anyio.abc import ByteReceiveStream

from oam_actors.errors import ErrorCode, ProtocolError

__all__ = ["MAX_LINE_BYTES", "LineSplitter", "LineTooLong", "open_stdio", "read_lines", "reserve_stdout"]

MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest inbound line accepted (8 MiB, excluding the newline). Large enough for a restored
transcript or a big tool result; bounds the memory one connection can pin with one line."""

_READ_CHUNK = 64 * 1024


class LineTooLong(msgspec.Struct, frozen=True):
    """An inbound line longer than ``limit`` was discarded; ``size`` counts its bytes (a trailing
    ``\\r`` included, the newline not)."""

    size: int
    limit: int

    def to_error(self) -> ProtocolError:
        """The ``-32600`` the bridge answers with (``id: null``: the line was never parsed)."""
        return ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"Invalid message: the line exceeds {self.limit} bytes."
        )


class LineSplitter:
    """Incremental line splitting with a length limit; pure logic, fed chunk by chunk."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._limit = max_line_bytes
        self._buffer = bytearray()
        self._discarded: int | None = None  # bytes seen of an oversize line, while discarding

    @property
    def buffered(self) -> int:
        """Bytes of the unfinished line held (an oversize line being discarded holds none)."""
        return len(self._buffer)

    @property
    def partial(self) -> bool:
        """Whether a line has begun and not ended."""
        return bool(self._buffer) or self._discarded is not None

    def feed(self, chunk: bytes) -> list[bytes | LineTooLong]:
        """The lines completed by ``chunk``, in order."""
        lines: list[bytes | LineTooLong] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lines.append(self._complete(chunk, start, end))
            start = end + 1
        self._keep(chunk, start, len(chunk))
        return lines

    def finish(self) -> list[bytes | LineTooLong]:
        """At end of stream: the unterminated last line, if any."""
        if self._discarded is None and not self._buffer:
            return []
        return [self._complete(b"", 0, 0)]

    def _complete(self, chunk: bytes, start: int, end: int) -> bytes | LineTooLong:
        if self._discarded is None and not self._buffer:
            line = chunk[start:end]  # the common case: no copy into the buffer
        else:
            self._keep(chunk, start, end)
            if self._discarded is not None:
                size, self._discarded = self._discarded, None
                return LineTooLong(size, self._limit)
            line = bytes(self._buffer)
            self._buffer.clear()
        content = line[:-1] if line.endswith(b"\r") else line
        return content if len(content) <= self._limit else LineTooLong(len(line), self._limit)

    def _keep(self, chunk: bytes, start: int, end: int) -> None:
        if self._discarded is not None:
            self._discarded += end - start
            return
        self._buffer += chunk[start:end]
        # One byte of slack for a trailing "\r" that will be stripped.
        if len(self._buffer) > self._limit + 1:
            self._discarded = len(self._buffer)
            self._buffer = bytearray()


async def read_lines(
    stream: ByteReceiveStream, *, max_line_bytes: int = MAX_LINE_BYTES, splitter: LineSplitter | None = None
) -> AsyncIterator[bytes | LineTooLong]:
    """Lines of ``stream`` (see the module docstring); ends at end of stream. Pass ``splitter``
    to watch how much input it holds (``splitter.buffered``)."""
    splitter = splitter or LineSplitter(max_line_bytes)
    while True:
        try:
            chunk = await stream.receive()
        except anyio.EndOfStream:
            break
        for item in splitter.feed(chunk):
            yield item
    for item in splitter.finish():
        yield item


async def open_stdio(
    *, stdin_fd: int = 0, stdout_fd: int = 1
) -> tuple[ByteReceiveStream, Callable[[bytes], Awaitable[None]]]:
    """The process's stdin as a byte stream and a line writer for its stdout."""
    link = _Link([fd for fd in (stdin_fd, stdout_fd) if _pollable(fd)])
    return _FdReceiveStream(stdin_fd, link), _FdWriter(stdout_fd, link)


def reserve_stdout() -> int:
    """A private descriptor of this process's stdout; descriptor 1 (so ``sys.stdout``, and the
    stdout of every child process started later) then writes to stderr. Ray's driver prints
    raylet errors ("A worker died…") to ``sys.stdout`` from a thread of its own, and native code
    writes to descriptor 1: with this, none of it can interleave with protocol output."""
    sys.stdout.flush()
    private = os.dup(1)  # not inherited by child processes
    os.dup2(2, 1)
    return private


def _pollable(fd: int) -> bool:
    """Pipes and sockets can be made non-blocking and polled; ttys and files are left alone."""
    if sys.platform == "win32":
        return False
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Link:
    """What the two halves share: which descriptors went non-blocking, and whether it is closed."""

    def __init__(self, nonblocking: list[int]) -> None:
        self.restore = {fd: os.get_blocking(fd) for fd in nonblocking}
        for fd in nonblocking:
            os.set_blocking(fd, False)
        self.closed = False

    def polled(self, fd: int) -> bool:
        return fd in self.restore

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd, blocking in self.restore.items():
            os.set_blocking(fd, blocking)


class _FdReceiveStream(ByteReceiveStream):
    def __init__(self, fd: int, link: _Link) -> None:
        self._fd = fd
        self._link = link

    async def receive(self, max_bytes: int = _READ_CHUNK) -> bytes:
        if self._link.closed:
            raise anyio.ClosedResourceError
        if self._link.polled(self._fd):
            data = await self._read_polled(max_bytes)
        else:
            data = await anyio.to_thread.run_sync(os.read, self._fd, max_bytes, abandon_on_cancel=True)
        if not data:
            raise anyio.EndOfStream
        return data

    async def _read_polled(self, max_bytes: int) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            await anyio.lowlevel.checkpoint()
            return data

    async def aclose(self) -> None:
        self._link.close()


class _FdWriter:
    def __init__(self, fd: int, link: _Link) -> None:
        self._fd = fd
        self._link = link

    async def __call__(self, data: bytes) -> None:
        if self._link.closed:
            raise anyio.ClosedResourceError
        payload = data + b"\n"
        if self._link.polled(self._fd):
            await self._write_polled(memoryview(payload))
        else:
            await anyio.to_thread.run_sync(_write_all, self._fd, payload)

    async def _write_polled(self, payload: memoryview) -> None:
        while payload:
            try:
                payload = payload[os.write(self._fd, payload) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
        await anyio.lowlevel.checkpoint()


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]
