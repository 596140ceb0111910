"""An incremental, bounded Server-Sent Events framer shared by the three codecs.

Contract: :meth:`SseParser.feed` takes the next body chunk (any size, split anywhere, even inside
a UTF-8 character) and returns the frames it completes; :meth:`SseParser.finish` parses what is
left as one last frame (a final frame needs no blank line). Payloads stay bytes: JSON is decoded
only from whole frames.

Framing (Backplane's, with one WHATWG fix):

- a frame ends at the earliest ``\\r\\n\\r\\n``, ``\\n\\n`` or ``\\r\\r``; lines split on
  ``\\r\\n``, ``\\r`` or ``\\n``;
- ``data:`` lines append (one leading space removed) and are joined with ``\\n``; ``event:`` sets
  the name, last one wins; comments (``:``), ``id:``, ``retry:``, unknown fields and a bare
  ``data`` without a colon are ignored; a frame without ``data:`` yields nothing;
- a UTF-8 BOM at the very start of the stream is skipped (Backplane keeps it; WHATWG strips it).

Bounds: a frame over ``max_frame_bytes`` or an unframed remainder over ``max_buffer_bytes`` raises
:class:`~._errors.CodecError` and closes the framer; any use after closing (an error or
``finish``) raises "SSE framer is closed".
"""

from __future__ import annotations

import re

import msgspec

from ._errors import malformed

__all__ = ["MAX_BUFFER_BYTES", "MAX_FRAME_BYTES", "SseFrame", "SseParser"]

MAX_FRAME_BYTES = 262_144
MAX_BUFFER_BYTES = 524_288

_DELIMITER = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_BOM = b"\xef\xbb\xbf"
# A delimiter is at most 4 bytes, so one may start up to 3 bytes before the old end.
_OVERLAP = 3


class SseFrame(msgspec.Struct, frozen=True):
    data: bytes
    event: str | None = None


class SseParser:
    """Frames one SSE body. Not thread-safe; one parser per response."""

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES, max_buffer_bytes: int = MAX_BUFFER_BYTES) -> None:
        self._max_frame = max_frame_bytes
        self._max_buffer = max_buffer_bytes
        self._buffer = bytearray()
        self._at_start = True
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse all further input."""
        self._closed = True
        self._buffer.clear()

    def feed(self, chunk: bytes) -> list[SseFrame]:
        """Append ``chunk``; return the frames it completes, in order."""
        self._check_open()
        if not isinstance(chunk, bytes | bytearray | memoryview):
            self.close()
            raise malformed("SSE chunk must be bytes")
        scan = max(0, len(self._buffer) - _OVERLAP)
        self._buffer += chunk
        if self._at_start and not self._skip_bom():
            return []
        frames, consumed, oversized = _split(self._buffer, scan, self._max_frame)
        if oversized:
            self._fail(f"SSE frame exceeds {self._max_frame} bytes")
        del self._buffer[:consumed]
        if len(self._buffer) > self._max_buffer:
            self._fail(f"SSE buffer exceeds {self._max_buffer} bytes")
        return frames

    def finish(self) -> list[SseFrame]:
        """Parse the remainder as a final frame and close the framer."""
        self._check_open()
        rest = bytes(self._buffer)
        self._closed = True
        self._buffer.clear()
        if not rest.strip():
            return []
        if len(rest) > self._max_frame:
            self._fail(f"SSE frame exceeds {self._max_frame} bytes")
        frame = _parse_frame(rest)
        return [frame] if frame is not None else []

    def _check_open(self) -> None:
        if self._closed:
            raise malformed("SSE framer is closed")

    def _fail(self, message: str) -> None:
        self.close()
        raise malformed(message)

    def _skip_bom(self) -> bool:
        """Drop a leading BOM; False while the first bytes could still be one."""
        if len(self._buffer) < len(_BOM) and _BOM.startswith(self._buffer):
            return False
        if self._buffer.startswith(_BOM):
            del self._buffer[: len(_BOM)]
        self._at_start = False
        return True


def _split(buffer: bytearray, scan: int, max_frame: int) -> tuple[list[SseFrame], int, bool]:
    """Complete frames from ``scan`` on, bytes consumed, and whether a frame was too large.

    A function of its own: the regex holds an export of ``buffer`` until it returns, and a
    bytearray cannot be resized while exported.
    """
    frames: list[SseFrame] = []
    start = 0
    for match in _DELIMITER.finditer(buffer, scan):
        end = match.start()
        if end - start > max_frame:
            return frames, start, True
        frame = _parse_frame(bytes(buffer[start:end]))
        if frame is not None:
            frames.append(frame)
        start = match.end()
    return frames, start, False


def _parse_frame(raw: bytes) -> SseFrame | None:
    if raw.startswith(b"data: ") and b"\n" not in raw and b"\r" not in raw:
        return SseFrame(raw[6:])  # the common single-line frame
    event: str | None = None
    data: list[bytes] = []
    for line in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            data.append(_field_value(line, 5))
        elif line.startswith(b"event:"):
            event = _field_value(line, 6).decode("utf-8", "replace")
    if not data:
        return None
    return SseFrame(b"\n".join(data), event)


def _field_value(line: bytes, offset: int) -> bytes:
    value = line[offset:]
    return value[1:] if value.startswith(b" ") else value
