"""The bounded native ``streamGenerateContent`` decoder: SSE frames to native documents, unchanged.

See :mod:`oam_actors.models.codecs.antigravity` for the contract.
"""

from __future__ import annotations

import enum
from typing import Any

from ._errors import CodecError, incomplete_stream, malformed
from ._sse import MAX_BUFFER_BYTES, MAX_FRAME_BYTES, SseFrame, SseParser
from ._wire import parse_object

__all__ = ["MAX_EVENTS", "MAX_TOTAL_BYTES", "EndReason", "NativeStream", "StreamStatus", "positive_or"]

MAX_TOTAL_BYTES = 8 * 1024 * 1024
MAX_EVENTS = 10_000


class StreamStatus(enum.StrEnum):
    """How a stream (or one of its layers) ended."""

    EOF = "eof"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"


class EndReason(enum.StrEnum):
    """Why the host stopped reading: the body ended, it cancelled, or the transport failed."""

    EOF = "eof"
    CANCELLED = "cancelled"
    ERROR = "error"


def positive_or(value: int, default: int) -> int:
    """A configured limit; a non-positive value means the default."""
    return value if value > 0 else default


class NativeStream:
    """Decodes one native SSE body. One instance per response; not thread-safe.

    ``terminal`` is ``None`` while open, then ``eof`` (clean finish), ``cancelled`` or
    ``incomplete`` (any error, or a non-eof finish). ``protocol_terminal`` becomes ``failed``, for
    good, once an ``error`` document arrives (the document itself is still returned).
    """

    def __init__(
        self,
        *,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        max_events: int = MAX_EVENTS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
    ) -> None:
        self._max_total = positive_or(max_total_bytes, MAX_TOTAL_BYTES)
        self._max_events = positive_or(max_events, MAX_EVENTS)
        self._sse = SseParser(
            max_frame_bytes=positive_or(max_frame_bytes, MAX_FRAME_BYTES),
            max_buffer_bytes=positive_or(max_buffer_bytes, MAX_BUFFER_BYTES),
        )
        self._bytes = 0
        self._events = 0
        self.terminal: StreamStatus | None = None
        self.protocol_terminal: StreamStatus | None = None

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The documents this chunk completes, exactly as sent. Any error closes the stream."""
        self._check_open()
        try:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise malformed("Antigravity stream chunk must be bytes")
            self._bytes += len(chunk)
            if self._bytes > self._max_total:
                raise malformed(f"Antigravity stream exceeds {self._max_total} bytes")
            return self._documents(self._sse.feed(chunk))
        except CodecError:
            self.abort()
            raise

    def finish(self, reason: EndReason | str = EndReason.EOF) -> list[dict[str, Any]]:
        """At ``eof``: the last frame's documents (no trailing blank line needed). Cancelled or any
        other reason: raises the incomplete-stream error (code ``cancelled`` / ``generation_failed``)."""
        self._check_open()
        if reason == EndReason.EOF:
            try:
                documents = self._documents(self._sse.finish())
            except CodecError:
                self.abort()
                raise
            self.terminal = StreamStatus.EOF
            return documents
        self._sse.close()
        cancelled = reason == EndReason.CANCELLED
        self.terminal = StreamStatus.CANCELLED if cancelled else StreamStatus.INCOMPLETE
        raise incomplete_stream(cancelled=cancelled)

    def abort(self) -> None:
        """Close after a failure (here or in a layer above): the stream ends ``incomplete``."""
        self._sse.close()
        self.terminal = StreamStatus.INCOMPLETE

    def _check_open(self) -> None:
        if self.terminal is not None:
            raise malformed("Antigravity stream is closed")

    def _documents(self, frames: list[SseFrame]) -> list[dict[str, Any]]:
        self._events += len(frames)  # counted per chunk, before any decoding
        if self._events > self._max_events:
            raise malformed(f"Antigravity stream exceeds {self._max_events} events")
        return [self._document(frame) for frame in frames]

    def _document(self, frame: SseFrame) -> dict[str, Any]:
        if frame.data.strip() == b"[DONE]":
            raise malformed("Antigravity streams have no [DONE] marker")
        doc = parse_object(frame.data)
        if isinstance(doc.get("error"), dict):
            self.protocol_terminal = StreamStatus.FAILED
        return doc
