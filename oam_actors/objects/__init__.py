"""Object actors: sessions, NPCs, worlds and one-off game requests, each behind an ordered
mailbox, talking to their connection through an :class:`Outlet`. The game actors' messages live
in their modules (``objects.npc``, ``objects.world``, ``objects.request``). Importing this package
declares to the runtime how outlets and world documents cross processes (``objects.crossing``)."""

from . import crossing as crossing  # registers with the runtime: needed wherever these actors are

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
from .npc import NPCActor
from .outlet import Outlet, RequestId
from .relay import TURN_ENDED_REASON, TurnRelay
from .request import RequestActor
from .session import SessionActor
from .world import WorldActor

__all__ = [
    "Compact",
    "Describe",
    "GetTranscript",
    "NPCActor",
    "Outlet",
    "RequestId",
    "RequestActor",
    "Reset",
    "Respond",
    "SessionActor",
    "SetContextNote",
    "SetInstructions",
    "SetTools",
    "TURN_ENDED_REASON",
    "ToolResult",
    "TurnRelay",
    "WorldActor",
]
