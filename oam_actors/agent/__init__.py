"""The agent engine: the envelope tool loop over any :class:`LanguageModel`, pure library code.

No actors, no bridge, no backends here: sessions, NPCs, decisions and content all run on it.
"""

from .agent import DEFAULT_SUMMARY_INSTRUCTIONS, Agent
from .events import (
    EventSink,
    ModelStep,
    PartialValue,
    StepInfo,
    TextDelta,
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallingMode,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
    TurnUsage,
)
from .model import (
    Availability,
    GenerationRequest,
    LanguageModel,
    ModelCapabilities,
    Resumable,
    Sampling,
    StepKind,
    ToolSpec,
    Usage,
    estimate_tokens,
)
from .policy import AgentOptions, RetryPolicy, ToolChoice, ToolChoiceKind, TurnOverrides
from .schema import Schema, Violation, format_violations
from .tools import (
    ErrorOutput,
    JsonOutput,
    TextOutput,
    ToolCall,
    ToolCallRecord,
    ToolDefinition,
    ToolOutput,
    output_from_value,
    parse_tool_definitions,
)
from .transcript import PromptEntry, ResponseEntry, ToolUseEntry, Transcript

__all__ = [
    "Agent",
    "AgentOptions",
    "Availability",
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "ErrorOutput",
    "EventSink",
    "GenerationRequest",
    "JsonOutput",
    "LanguageModel",
    "ModelCapabilities",
    "ModelStep",
    "PartialValue",
    "PromptEntry",
    "ResponseEntry",
    "Resumable",
    "RetryPolicy",
    "Sampling",
    "Schema",
    "StepInfo",
    "StepKind",
    "TextDelta",
    "TextOutput",
    "ToolCall",
    "ToolCallAbandoned",
    "ToolCallCompleted",
    "ToolCallRecord",
    "ToolCallStarted",
    "ToolCallingMode",
    "ToolChoice",
    "ToolChoiceKind",
    "ToolDefinition",
    "ToolOutput",
    "ToolSpec",
    "ToolUseEntry",
    "Transcript",
    "TurnEvent",
    "TurnOverrides",
    "TurnResult",
    "TurnUsage",
    "Usage",
    "Violation",
    "estimate_tokens",
    "format_violations",
    "output_from_value",
    "parse_tool_definitions",
]
