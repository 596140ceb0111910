"""Object actors: sessions (and, with the game layer, NPCs and worlds), each behind an ordered
mailbox, talking to their connection through an :class:`Outlet`."""

from .messages import (
    Compact,
    Describe,
    GetTranscript,
    Reset,
    Respond,
    SetContextNote,
    SetInstructions,
    SetTools,
    ToolResult,
)
from .outlet import Outlet, RequestId
from .relay import TURN_ENDED_REASON, TurnRelay
from .session import SessionActor

__all__ = [
    "Compact",
    "Describe",
    "GetTranscript",
    "Outlet",
    "RequestId",
    "Reset",
    "Respond",
    "SessionActor",
    "SetContextNote",
    "SetInstructions",
    "SetTools",
    "TURN_ENDED_REASON",
    "ToolResult",
    "TurnRelay",
]
