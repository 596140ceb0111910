"""What the front door sends back: whole completions, SSE chunks, stop sequences (pure, no I/O).

A streamed reply follows the agent's reply display (``TextDelta``): each update shows the whole
visible text so far, and :class:`ReplyText` turns that into the text not yet sent, holding back
what could still become a stop sequence. Text once sent cannot be taken back: when the visible
text stops extending what was sent and then goes on (the agent regenerates the reply after a
backend failed mid-stream), :class:`StreamRestarted` ends the stream with an error event; the
agent's final clean-up (wrapping quotes, echoed tool records) alone is simply not applied.

SSE framing is OpenAI's: ``data: <chunk JSON>\\n\\n`` frames, a role chunk first, a chunk with
``finish_reason`` last, then (``include_usage``) a chunk with empty ``choices`` and the usage,
then ``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from ...agent import ToolCall, TurnUsage
from .wire import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    ErrorBody,
    ErrorDetail,
    FunctionCall,
    OutputMessage,
    OutputToolCall,
    PromptTokensDetails,
    UsageOut,
)

__all__ = [
    "DONE",
    "ChunkWriter",
    "ReplyText",
    "StreamRestarted",
    "Reply",
    "apply_stop",
    "completion",
    "usage_out",
]

DONE: Final = b"data: [DONE]\n\n"
_ENCODER: Final = msgspec.json.Encoder()


class StreamRestarted(Exception):
    """The reply changed after part of it was streamed."""


@dataclass(frozen=True)
class Reply:
    """How a request ended: text (``finish_reason`` stop) or tool calls (``tool_calls``)."""

    text: str | None
    tool_calls: Sequence[ToolCall] = ()
    usage: TurnUsage | None = None

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def usage_out(usage: TurnUsage | None) -> UsageOut:
    usage = usage or TurnUsage()
    return UsageOut(usage.input_tokens, usage.output_tokens, usage.input_tokens + usage.output_tokens,
                    PromptTokensDetails(usage.cached_input_tokens))


def _arguments(call: ToolCall) -> str:
    return _ENCODER.encode(call.arguments).decode()


def completion(reply: Reply, *, id: str, model: str, created: int) -> bytes:
    """A whole ``chat.completion`` body."""
    calls = [OutputToolCall(c.id, FunctionCall(c.name, _arguments(c))) for c in reply.tool_calls]
    message = OutputMessage("assistant", reply.text, tool_calls=calls or msgspec.UNSET)
    return _ENCODER.encode(ChatCompletion(id, created, model, [Choice(0, message, reply.finish_reason)],
                                          usage_out(reply.usage)))


def apply_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first stop sequence (not included)."""
    cut = min((found for s in stop if (found := text.find(s)) >= 0), default=len(text))
    return text[:cut]


class ReplyText:
    """The streamed reply: visible text in, text to send out (see the module docstring)."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._stop = tuple(stop)
        self._sent = ""
        self._diverged = False
        self.stopped = False

    @property
    def sent(self) -> str:
        return self._sent

    def update(self, visible: str) -> str:
        """The new text to send for the visible reply so far; raises :class:`StreamRestarted`."""
        if self.stopped:
            return ""
        if self._diverged:
            raise StreamRestarted("the reply was regenerated after part of it had been streamed")
        if not visible.startswith(self._sent):
            self._diverged = True
            return ""
        return self._advance(visible, final=False)

    def finish(self, final: str) -> str:
        """The rest to send once the reply is final."""
        if self.stopped or not final.startswith(self._sent):
            return ""
        return self._advance(final, final=True)

    def _advance(self, visible: str, *, final: bool) -> str:
        cut = apply_stop(visible, self._stop)
        if len(cut) < len(visible):
            self.stopped = True
        elif not final:
            cut = visible[: len(visible) - self._held_back(visible)]
        fresh = cut[len(self._sent):]
        self._sent = cut if len(cut) > len(self._sent) else self._sent
        return fresh

    def _held_back(self, text: str) -> int:
        """How many trailing characters could be the start of a stop sequence."""
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest


class ChunkWriter:
    """The SSE frames of one streamed completion, in order."""

    def __init__(self, *, id: str, model: str, created: int, include_usage: bool) -> None:
        self._id, self._model, self._created = id, model, created
        self._include_usage = include_usage
        self._started = False

    @property
    def started(self) -> bool:
        """Whether any frame was made (the HTTP status is sent with the first)."""
        return self._started

    def text(self, delta: str) -> bytes:
        """Frames for a piece of reply text (the role chunk first, once)."""
        frames = self._role(content="")
        if delta:
            frames += self._frame([ChunkChoice(Delta(content=delta))])
        return frames

    def tool_calls(self, calls: Sequence[ToolCall]) -> bytes:
        deltas = [DeltaToolCall(i, DeltaFunction(_arguments(c), c.name), c.id, "function") for i, c in enumerate(calls)]
        if not self._started:
            self._started = True
            return self._frame([ChunkChoice(Delta(role="assistant", content=None, tool_calls=deltas))])
        return self._frame([ChunkChoice(Delta(tool_calls=deltas))])

    def finish(self, reply: Reply) -> bytes:
        """The closing frames: ``finish_reason``, the usage (if asked for), ``[DONE]``."""
        frames = self._role(content="") + self._frame([ChunkChoice(Delta(), finish_reason=reply.finish_reason)])
        if self._include_usage:
            frames += self._frame([], usage=usage_out(reply.usage))
        return frames + DONE

    def error(self, detail: ErrorDetail) -> bytes:
        """A failure after the stream began: an error frame (the SDK raises it), then the end."""
        self._started = True
        return b"data: " + _ENCODER.encode(ErrorBody(detail)) + b"\n\n" + DONE

    def _role(self, *, content: str) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._frame([ChunkChoice(Delta(role="assistant", content=content))])

    def _frame(self, choices: list[ChunkChoice], usage: UsageOut | None = None) -> bytes:
        chunk = ChatCompletionChunk(self._id, self._created, self._model, choices)
        if self._include_usage:
            chunk.usage = usage
        return b"data: " + _ENCODER.encode(chunk) + b"\n\n"
