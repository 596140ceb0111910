"""Messages understood by object actors. Ordered-lane messages change a turn's world; control-lane
messages are served at once (tool results, descriptions, transcripts)."""

from __future__ import annotations

import time

import msgspec

from ..agent import Schema, ToolDefinition, ToolOutput, TurnOverrides
from .outlet import Outlet, RequestId

__all__ = [
    "Compact",
    "Describe",
    "GetTranscript",
    "Reset",
    "Respond",
    "SetContextNote",
    "SetInstructions",
    "SetTools",
    "ToolResult",
    "deadline_after",
    "seconds_left",
]


def deadline_after(seconds: float | None) -> float | None:
    """A request's deadline ``seconds`` from now, on the wall clock: messages carry it between
    processes (Ray shards), where monotonic clocks do not agree."""
    return None if seconds is None else time.time() + seconds


def seconds_left(deadline: float | None) -> float | None:
    """What is left of a :func:`deadline_after` deadline (0 once it has passed)."""
    return None if deadline is None else max(0.0, deadline - time.time())


class Respond(msgspec.Struct, frozen=True, kw_only=True):
    request_id: RequestId
    prompt: str
    schema: Schema | None = None
    stream: bool = False
    overrides: TurnOverrides | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    # The connection that sent the turn (set by the bridge): its events and tool calls go there,
    # so with objects shared across connections each turn talks to its own client. ``None``: the
    # outlet the session was created with.
    outlet: Outlet | None = None


class Reset(msgspec.Struct, frozen=True):
    pass


class SetInstructions(msgspec.Struct, frozen=True):
    instructions: str | None


class SetContextNote(msgspec.Struct, frozen=True):
    note: str | None


class SetTools(msgspec.Struct, frozen=True):
    tools: list[ToolDefinition]
    warnings: list[str]


class Compact(msgspec.Struct, frozen=True):
    keep_recent_turns: int = 2
    summary_instructions: str | None = None


class ToolResult(msgspec.Struct, frozen=True):
    call_id: str
    output: ToolOutput


class Describe(msgspec.Struct, frozen=True):
    pass


class GetTranscript(msgspec.Struct, frozen=True):
    pass

