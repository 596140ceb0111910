"""The stream-decoder skeleton shared by the codecs, and event assembly into a response.

:class:`StreamDecoder` owns the SSE framer and the lifecycle; a provider subclass handles one
decoded JSON object (or ``[DONE]``) at a time and decides at finish whether the stream completed.

Contract for callers (the host owns the HTTP body):

- ``feed(chunk)`` for each body chunk of a 2xx response; it returns the events that chunk
  completes, in order;
- ``finish()`` on a clean end of body; ``finish(cancelled=True)`` when the host aborted the request
  (an unfinished stream then fails with outcome ``unknown`` and code ``cancelled``);
- the first :class:`~._errors.CodecError` closes the decoder, and the events already decoded from
  that chunk are discarded with it; any later call raises. Never retry a step whose tool calls
  were already handed to the agent.

:func:`assemble` folds a complete event list into a :class:`~._canonical.Response`: consecutive
text (or reasoning) deltas with the same ``index`` form one block (events that add no block, such
as usage or tool-call fragments, do not split it); finished tool calls, whole blocks and provider
states keep their place; usage snapshots merge field by field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._canonical import (
    Affinity,
    BlockEvent,
    ContentBlock,
    ProviderStateEvent,
    Reasoning,
    ReasoningDelta,
    Response,
    StopReason,
    StreamEvent,
    Terminal,
    Text,
    TextDelta,
    ToolCallDone,
    Usage,
    UsageEvent,
)
from ._errors import CodecError, malformed
from ._sse import SseFrame, SseParser
from ._wire import parse_object

__all__ = ["StreamDecoder", "assemble"]


class StreamDecoder:
    """Decodes one streamed response; one instance per HTTP response, not thread-safe."""

    def __init__(self, *, origin: Affinity, sse: SseParser) -> None:
        self._origin = origin
        self._sse = sse
        self._closed = False
        self.model: str | None = None
        """The model the provider reports, once a frame has named it."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Decode the next body chunk."""
        self._check_open()
        events: list[StreamEvent] = []
        try:
            for frame in self._sse.feed(chunk):
                self._on_frame(frame, events)
        except CodecError:
            self._close()
            raise
        return events

    def finish(self, *, cancelled: bool = False) -> list[StreamEvent]:
        """Flush the last frame and check the stream completed; closes the decoder."""
        self._check_open()
        events: list[StreamEvent] = []
        try:
            for frame in self._sse.finish():
                self._on_frame(frame, events)
            self._on_finish(cancelled, events)
        finally:
            self._close()
        return events

    # Provider hooks.

    def _on_object(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        raise NotImplementedError

    def _on_done(self, events: list[StreamEvent]) -> None:
        raise NotImplementedError

    def _on_finish(self, cancelled: bool, events: list[StreamEvent]) -> None:
        raise NotImplementedError

    # Plumbing.

    def _on_frame(self, frame: SseFrame, events: list[StreamEvent]) -> None:
        if frame.data.strip() == b"[DONE]":
            self._on_done(events)
        else:
            self._on_object(parse_object(frame.data), events)

    def _check_open(self) -> None:
        if self._closed:
            raise malformed("stream decoder is closed")

    def _close(self) -> None:
        self._closed = True
        self._sse.close()


def assemble(events: Iterable[StreamEvent], *, model: str | None = None) -> Response:
    """The response a complete event list describes (``unknown`` stop if it has no terminal)."""
    output = _Output()
    usage: Usage | None = None
    stop = StopReason.UNKNOWN
    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta):
            output.add_delta(event)
        elif isinstance(event, ToolCallDone):
            output.add_block(event.call)
        elif isinstance(event, BlockEvent):
            output.add_block(event.block)
        elif isinstance(event, ProviderStateEvent):
            output.add_block(event.state)
        elif isinstance(event, UsageEvent):
            usage = usage.merged(event.usage) if usage else event.usage
        elif isinstance(event, Terminal):
            stop = event.stop_reason
    return Response(output=output.blocks(), stop_reason=stop, usage=usage, model=model)


class _Output:
    """Blocks in order; the open delta run is joined once, when it ends."""

    def __init__(self) -> None:
        self._blocks: list[ContentBlock] = []
        self._run: tuple[type, int] | None = None
        self._parts: list[str] = []

    def add_delta(self, event: TextDelta | ReasoningDelta) -> None:
        key = (type(event), event.index)
        if key != self._run:
            self._flush()
            self._run = key
        self._parts.append(event.text)

    def add_block(self, block: ContentBlock) -> None:
        self._flush()
        self._blocks.append(block)

    def blocks(self) -> list[ContentBlock]:
        self._flush()
        return self._blocks

    def _flush(self) -> None:
        if self._run is None:
            return
        text = "".join(self._parts)
        self._blocks.append(Text(text) if self._run[0] is TextDelta else Reasoning(text))
        self._run = None
        self._parts = []
