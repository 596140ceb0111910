"""Messages understood by object actors. Ordered-lane messages change a turn's world; control-lane
messages are served at once (tool results, descriptions, transcripts)."""

from __future__ import annotations

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
]


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

