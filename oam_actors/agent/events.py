"""What a turn reports while it runs, and what it returns.

Streamed events are the protocol's ``session/event`` types (``modelStep``, ``text``, ``partial``,
``toolCallStarted``, ``toolCallCompleted``). :class:`ToolCallAbandoned` is not streamed: it tells
the host that an external call's answer is no longer needed (a timeout), so it can send
``tool/cancel``. :class:`TurnResult` is the ``session/respond`` result.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from .model import StepKind
from .tools import ToolCall, ToolCallRecord

__all__ = [
    "EventSink",
    "ModelStep",
    "PartialValue",
    "StepInfo",
    "TextDelta",
    "ToolCallAbandoned",
    "ToolCallCompleted",
    "ToolCallStarted",
    "ToolCallingMode",
    "TurnEvent",
    "TurnResult",
    "TurnUsage",
]


class ToolCallingMode(enum.StrEnum):
    ALLOWED = "allowed"
    REQUIRED = "required"
    DISALLOWED = "disallowed"


class StepInfo(msgspec.Struct, frozen=True):
    index: int
    completed_tool_rounds: int
    mode: ToolCallingMode
    enabled_tools: tuple[str, ...]
    trimmed_entries: int
    kind: StepKind
    is_repair: bool = False

    def to_wire(self) -> dict[str, Any]:
        # A StrEnum's str is its value (``.value`` is a Python-level descriptor: twice a step).
        return {
            "index": self.index,
            "completedToolRounds": self.completed_tool_rounds,
            "toolCallingMode": str(self.mode),
            "enabledTools": list(self.enabled_tools),
            "trimmedEntries": self.trimmed_entries,
            "kind": str(self.kind),
            "isRepair": self.is_repair,
        }


class ModelStep(msgspec.Struct, frozen=True):
    step: StepInfo

    def to_wire(self) -> dict[str, Any]:
        return {"type": "modelStep", "step": self.step.to_wire()}


class TextDelta(msgspec.Struct, frozen=True):
    delta: str
    text: str
    is_reset: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"type": "text", "delta": self.delta, "text": self.text, "isReset": self.is_reset}


class PartialValue(msgspec.Struct, frozen=True):
    value: Any

    def to_wire(self) -> dict[str, Any]:
        return {"type": "partial", "value": self.value}


class ToolCallStarted(msgspec.Struct, frozen=True):
    call: ToolCall
    execution: str  # "client" or "local"

    def to_wire(self) -> dict[str, Any]:
        return {"type": "toolCallStarted", "call": msgspec.to_builtins(self.call), "execution": self.execution}


class ToolCallCompleted(msgspec.Struct, frozen=True):
    record: ToolCallRecord

    def to_wire(self) -> dict[str, Any]:
        return {"type": "toolCallCompleted", "record": self.record.to_wire()}


class ToolCallAbandoned(msgspec.Struct, frozen=True):
    """An external call whose answer is no longer wanted; ``reason`` is what to tell the client."""

    call: ToolCall
    reason: str


TurnEvent = ModelStep | TextDelta | PartialValue | ToolCallStarted | ToolCallCompleted | ToolCallAbandoned
EventSink = Callable[[TurnEvent], Awaitable[None]]


class TurnUsage(msgspec.Struct):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0

    def to_wire(self) -> dict[str, int]:
        return {
            "inputTokens": self.input_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.input_tokens + self.output_tokens,
        }


_UNSET: Any = msgspec.UNSET


class TurnResult(msgspec.Struct, frozen=True):
    """A committed turn. ``structured`` is ``UNSET`` unless the turn had a schema."""

    text: str
    tool_calls: list[ToolCallRecord]
    usage: TurnUsage
    steps: list[StepInfo]
    structured: Any = _UNSET
    warnings: list[str] = msgspec.field(default_factory=list)

    def to_wire(self, **head: Any) -> dict[str, Any]:
        """The ``session/respond`` result, in protocol key order, after ``head`` members."""
        result = dict(head)
        result["text"] = self.text
        if self.structured is not msgspec.UNSET:
            result["structured"] = self.structured
        result["toolCalls"] = [r.to_wire() for r in self.tool_calls]
        result["usage"] = self.usage.to_wire()
        result["steps"] = [s.to_wire() for s in self.steps]
        if self.warnings:
            result["warnings"] = list(self.warnings)
        return result
