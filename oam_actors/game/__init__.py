"""The game library: personas, NPC turns, memory, world state, decisions and content. Pure.

No actors, no bridge, no sockets: everything here runs on the agent engine and a
:class:`~oam_actors.agent.LanguageModel`; the object layer (NPC and world actors) wraps it.
"""

from ._dialogue import (
    DialogueTurn,
    EmotionEvent,
    LineDelta,
    LineReset,
    LineTracker,
    NPCEvent,
    NPCEventSink,
)
from .content import DEFAULT_CONTENT_INSTRUCTIONS, ContentGenerator, GeneratedContent
from .decision import (
    DEFAULT_DECISION_INSTRUCTIONS,
    Decision,
    DecisionEngine,
    DecisionOption,
    DecisionRequest,
    check_request,
    decisions_to_wire,
    parse_decision_options,
)
from .memory import MemoryStore, NPCMemory, attitude, memory_tools, secret_visibility
from .npc import NPC, RECENT_BARKS, SAVE_STATE_VERSION, BarkLine, NPCSaveState
from .options import (
    DEFAULT_FALLBACK_LINES,
    MAX_PLAYER_OPTIONS,
    MemoryTool,
    NPCOptions,
    ReplyFormat,
    check_configuration,
)
from .persona import Decoded, Emotion, Persona, SecretVisibility, parse_emotion
from .world import MISSING, Change, Observation, WorldPath, WorldState, WorldStateError
from .world_tools import (
    READ_TOOL_NAME,
    UPDATE_TOOL_NAME,
    WorldToolOutput,
    read_tool_definition,
    read_world_state,
    update_tool_definition,
    update_world_state,
)

__all__ = [
    "RECENT_BARKS",
    "BarkLine",
    "DEFAULT_CONTENT_INSTRUCTIONS",
    "DEFAULT_DECISION_INSTRUCTIONS",
    "DEFAULT_FALLBACK_LINES",
    "MAX_PLAYER_OPTIONS",
    "MISSING",
    "NPC",
    "READ_TOOL_NAME",
    "SAVE_STATE_VERSION",
    "UPDATE_TOOL_NAME",
    "Change",
    "ContentGenerator",
    "Decision",
    "DecisionEngine",
    "DecisionOption",
    "DecisionRequest",
    "Decoded",
    "DialogueTurn",
    "Emotion",
    "EmotionEvent",
    "GeneratedContent",
    "LineDelta",
    "LineReset",
    "LineTracker",
    "MemoryStore",
    "MemoryTool",
    "NPCEvent",
    "NPCEventSink",
    "NPCMemory",
    "NPCOptions",
    "NPCSaveState",
    "Observation",
    "Persona",
    "ReplyFormat",
    "SecretVisibility",
    "WorldPath",
    "WorldState",
    "WorldStateError",
    "WorldToolOutput",
    "attitude",
    "check_configuration",
    "check_request",
    "decisions_to_wire",
    "memory_tools",
    "parse_decision_options",
    "parse_emotion",
    "read_tool_definition",
    "read_world_state",
    "secret_visibility",
    "update_tool_definition",
    "update_world_state",
]
