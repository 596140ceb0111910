"""Line framing (split chunks, CRLF, blank lines, oversize lines, EOF) and the stdio streams."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from oam_actors.bridge.jsonrpc import Invalid, Request, decode, encode_error
from oam_actors import ErrorCode
from oam_actors.transports.stdio import MAX_LINE_BYTES, LineSplitter, LineTooLong, open_stdio, read_lines


class ChunkStream(ByteReceiveStream):
    """Hands out the given chunks, then end of stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        self._chunks.clear()


async def collect(chunks: list[bytes], **kwargs: int) -> list[bytes | LineTooLong]:
    return [item async for item in read_lines(ChunkStream(chunks), **kwargs)]


async def test_lines_split_across_chunks_are_joined() -> None:
    chunks = [b'{"a":', b"1}\n{", b'"b":2}\n', b"\n", b"x", b"y\nz\n"]
    assert await collect(chunks) == [b'{"a":1}', b'{"b":2}', b"", b"xy", b"z"]


async def test_every_split_point_gives_the_same_lines() -> None:
    data = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n\n  \n{"x":"\xc3\xa9"}\nlast'
    expected = [b'{"jsonrpc":"2.0","id":1,"method":"ping"}', b"", b"  ", b'{"x":"\xc3\xa9"}', b"last"]
    for cut in range(len(data) + 1):
        assert await collect([data[:cut], data[cut:]]) == expected
    assert await collect([bytes([b]) for b in data]) == expected


async def test_crlf_is_stripped_once_and_blank_lines_decode_to_nothing() -> None:
    lines = await collect([b"a\r\n\r\n\r\r\nb\rc\n"])
    assert lines == [b"a", b"", b"\r", b"b\rc"]
    assert decode(lines[1]) is None and decode(lines[2]) is None


async def test_eof_without_newline_yields_the_last_line() -> None:
    assert await collect([b'{"jsonrpc":"2.0","id":1,"method":"ping"}']) == [
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    ]
    assert await collect([b"a\n"]) == [b"a"]
    assert await collect([]) == []


async def test_an_oversize_line_is_reported_once_and_the_next_line_comes_through() -> None:
    good = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
    chunks = [b"x" * 30, b"y" * 30, b"z" * 30 + b"\n" + good + b"\n"]
    items = await collect(chunks, max_line_bytes=50)
    assert items == [LineTooLong(size=90, limit=50), good]
    assert isinstance(decode(items[1]), Request)
    error = items[0].to_error()
    assert error.code is ErrorCode.INVALID_MESSAGE and "exceeds 50 bytes" in error.message
    assert encode_error(None, error).startswith(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,')


def test_the_splitter_never_holds_more_than_the_limit() -> None:
    splitter = LineSplitter(max_line_bytes=100)
    for _ in range(1000):
        assert splitter.feed(b"q" * 1000) == []
        assert len(splitter._buffer) <= 101
    assert splitter.feed(b"\nok\n") == [LineTooLong(size=1_000_000, limit=100), b"ok"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"x" * 10 + b"\n", [b"x" * 10]),  # exactly at the limit
        (b"x" * 10 + b"\r\n", [b"x" * 10]),  # the CR does not count
        (b"x" * 11 + b"\n", [LineTooLong(11, 10)]),
        (b"x" * 11 + b"\r\n", [LineTooLong(12, 10)]),  # the size counts the CR
        (b"x" * 25, [LineTooLong(25, 10)]),  # oversize at end of stream
        (b"x" * 11, [LineTooLong(11, 10)]),
    ],
)
async def test_limit_boundaries(data: bytes, expected: list[bytes | LineTooLong]) -> None:
    for cut in range(len(data) + 1):
        assert await collect([data[:cut], data[cut:]], max_line_bytes=10) == expected


async def test_invalid_utf8_passes_framing_and_is_a_parse_error() -> None:
    lines = await collect([b'{"jsonrpc":"2.0","id":1,"method":"p\xff\xfeng"}\n', b"\xc3\n"])
    assert len(lines) == 2
    for line in lines:
        result = decode(line)
        assert (
            isinstance(result, Invalid) and result.error.code is ErrorCode.PARSE_ERROR and result.id is None
        )


def test_default_limit_is_eight_mebibytes() -> None:
    assert MAX_LINE_BYTES == 8 * 1024 * 1024


# --- open_stdio over real descriptors ------------------------------------------------------------


async def drain(fd: int) -> bytes:
    os.set_blocking(fd, True)
    out = b""
    while chunk := os.read(fd, 65536):
        out += chunk
    return out


async def test_stdio_over_pipes_reads_lines_and_writes_with_newlines() -> None:
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        stream, write = await open_stdio(stdin_fd=in_read, stdout_fd=out_write)
        assert os.get_blocking(in_read) is False and os.get_blocking(out_write) is False
        os.write(in_write, b'{"a":1}\r\n\n{"b":')
        os.write(in_write, b"2}\ntail")
        os.close(in_write)
        assert [line async for line in read_lines(stream)] == [b'{"a":1}', b"", b'{"b":2}', b"tail"]
        await write(b'{"r":1}\n{"r":2}')
        await write(b'{"r":3}')
        await stream.aclose()
        assert os.get_blocking(in_read) is True and os.get_blocking(out_write) is True
        with pytest.raises(anyio.ClosedResourceError):
            await write(b"late")
        with pytest.raises(anyio.ClosedResourceError):
            await stream.receive()
        os.close(out_write)
        assert await drain(out_read) == b'{"r":1}\n{"r":2}\n{"r":3}\n'
    finally:
        for fd in (in_read, out_read):
            os.close(fd)


async def test_stdio_writes_more_than_a_pipe_buffer_without_losing_bytes() -> None:
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    payload = b"p" * (1 << 20)  # larger than the pipe buffer: the writer must wait for the reader
    try:
        stream, write = await open_stdio(stdin_fd=in_read, stdout_fd=out_write)
        received = bytearray()

        async def reader() -> None:
            async with await anyio.open_file(out_read, "rb", buffering=0, closefd=False) as file:
                while len(received) < len(payload) + 1:
                    received.extend(await file.read(65536))

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await write(payload)
        assert bytes(received) == payload + b"\n"
        await stream.aclose()
    finally:
        for fd in (in_read, in_write, out_read, out_write):
            os.close(fd)


async def test_stdio_over_regular_files_uses_a_worker_thread() -> None:
    with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as sink:
        source.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\nsecond')
        source.seek(0)
        stream, write = await open_stdio(stdin_fd=source.fileno(), stdout_fd=sink.fileno())
        assert [line async for line in read_lines(stream)] == [
            b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
            b"second",
        ]
        await write(b"out")
        await stream.aclose()
        sink.seek(0)
        assert sink.read() == b"out\n"


# --- reserve_stdout: one writer for the process's stdout ----------------------------------------

_STRAY_WRITERS = """
import os, subprocess, sys
from oam_actors.transports.stdio import reserve_stdout
ours = reserve_stdout()
print("a library's print")
sys.stdout.flush()
os.write(1, b"native code\\n")
subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
os.write(ours, b"ours\\n")
"""


def test_only_the_reserved_descriptor_reaches_stdout() -> None:
    done = subprocess.run([sys.executable, "-c", _STRAY_WRITERS], capture_output=True, check=True, timeout=60)
    assert done.stdout == b"ours\n"
    assert done.stderr.splitlines() == [b"a library's print", b"native code", b"a child process"]
