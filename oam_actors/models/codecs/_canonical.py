"""The canonical value model the provider codecs translate to and from.

All values are frozen msgspec Structs. Content blocks and stream events are tagged unions (tag
field ``type``), so a host can persist and reload them with one ``msgspec`` decoder each.

Request side: :class:`Request` ⊃ :class:`Message` ⊃ :data:`ContentBlock`, plus
:class:`ToolDefinition`. Response side: :class:`Response` with :class:`Usage` and a
:class:`StopReason`. Streaming: :data:`StreamEvent`. Opaque replayable state (signed thinking,
thought signatures, MiniMax reasoning details) is a :class:`ProviderState` block bound to the
:class:`Affinity` (backend identity) that produced it.

Deliberate differences from Backplane's model: a request's items are always messages (no
root-level provider state, no ``provider_state_references``); a provider state carries its origin
as one :class:`Affinity` (``origin.profile`` / ``origin.protocol`` are the source profile and
protocol); tool-call arguments are a ``dict`` (structured) or a ``str`` (raw JSON text), and every
decoded call carries a ``dict``.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ...errors import ErrorCode

__all__ = [
    "Affinity",
    "BlockEvent",
    "ContentBlock",
    "Image",
    "Message",
    "ProviderState",
    "ProviderStateEvent",
    "Reasoning",
    "ReasoningDelta",
    "Request",
    "Response",
    "Role",
    "StopReason",
    "StreamEvent",
    "Terminal",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "ToolCallStart",
    "ToolDefinition",
    "ToolStatus",
    "Usage",
    "UsageEvent",
]


class Role(enum.StrEnum):
    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolStatus(enum.StrEnum):
    SUCCESS = "success"
    ERROR = "error"


class StopReason(enum.StrEnum):
    STOP = "stop"
    TOOL_USE = "tool_use"
    MAX_OUTPUT_TOKENS = "max_output_tokens"
    REFUSAL = "refusal"
    SAFETY = "safety"
    UNKNOWN = "unknown"

    @property
    def error_code(self) -> ErrorCode | None:
        """The protocol error a turn ending this way becomes, if any."""
        return _STOP_ERRORS.get(self)


_STOP_ERRORS = {StopReason.SAFETY: ErrorCode.GUARDRAIL_VIOLATION, StopReason.REFUSAL: ErrorCode.REFUSAL}


class Affinity(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The backend identity opaque state is bound to. Labels only, never secrets."""

    profile: str
    protocol: str | None = None
    endpoint: str | None = None
    account: str | None = None
    workspace: str | None = None
    model: str | None = None
    credential_scope: str | None = None
    credential_version: str | None = None


class Text(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class Image(msgspec.Struct, frozen=True, tag="image", tag_field="type"):
    """An inline base64 image."""

    media_type: str
    data: str


class Reasoning(msgspec.Struct, frozen=True, tag="reasoning", tag_field="type"):
    """Visible (unsigned) reasoning text."""

    text: str


class ToolCall(msgspec.Struct, frozen=True, tag="tool_call", tag_field="type"):
    """A model's tool call. ``arguments``: an object, or raw JSON text (sent byte for byte)."""

    id: str
    name: str
    arguments: dict[str, Any] | str
    native_id: str | None = None


class ProviderState(msgspec.Struct, frozen=True, tag="provider_state", tag_field="type"):
    """Opaque provider state; ``payload`` is never interpreted or shown."""

    kind: str
    payload: Any
    origin: Affinity


ContentBlock = Text | Image | Reasoning | ToolCall | ProviderState


class Message(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    content: list[ContentBlock]
    tool_call_id: str | None = None
    status: ToolStatus | None = None
    extensions: dict[str, Any] = {}


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    extensions: dict[str, Any] = {}


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """A generation request. ``settings`` / ``output_constraints`` use each provider's option names
    (OpenAI and Anthropic: passed through; Google: the snake_case allow-list)."""

    model: str
    messages: list[Message]
    tools: list[ToolDefinition] = []
    settings: dict[str, Any] = {}
    output_constraints: dict[str, Any] = {}
    extensions: dict[str, Any] = {}


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """A token-usage snapshot (running or final totals, never deltas)."""

    source: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None

    def merged(self, newer: Usage) -> Usage:
        """Field by field, the newer value where it is known."""
        fields = {f: getattr(newer, f) for f in self.__struct_fields__ if getattr(newer, f) is not None}
        return msgspec.structs.replace(self, **fields)


class Response(msgspec.Struct, frozen=True, kw_only=True):
    output: list[ContentBlock]
    stop_reason: StopReason
    usage: Usage | None = None
    model: str | None = None


class TextDelta(msgspec.Struct, frozen=True, tag="text_delta", tag_field="type"):
    """Visible text. Deltas with the same ``index`` in a row form one block."""

    index: int
    text: str


class ReasoningDelta(msgspec.Struct, frozen=True, tag="reasoning_delta", tag_field="type"):
    index: int
    text: str


class BlockEvent(msgspec.Struct, frozen=True, tag="content", tag_field="type"):
    """A whole non-text block arriving in the stream (a Gemini inline image)."""

    index: int
    block: ContentBlock


class ToolCallStart(msgspec.Struct, frozen=True, tag="tool_call_start", tag_field="type"):
    index: int
    call_id: str
    name: str
    native_id: str | None = None


class ToolCallDelta(msgspec.Struct, frozen=True, tag="tool_call_delta", tag_field="type"):
    """A raw argument fragment; ``call_id`` and ``name`` are the values accumulated so far."""

    index: int
    call_id: str
    name: str
    arguments_delta: str
    native_id: str | None = None


class ToolCallDone(msgspec.Struct, frozen=True, tag="tool_call_done", tag_field="type"):
    """A complete call; ``call.arguments`` is the parsed object."""

    index: int
    call: ToolCall


class ProviderStateEvent(msgspec.Struct, frozen=True, tag="provider_state", tag_field="type"):
    index: int
    state: ProviderState


class UsageEvent(msgspec.Struct, frozen=True, tag="usage", tag_field="type"):
    usage: Usage


class Terminal(msgspec.Struct, frozen=True, tag="terminal", tag_field="type"):
    """The protocol-level end; exactly one per successful stream."""

    stop_reason: StopReason


StreamEvent = (
    TextDelta
    | ReasoningDelta
    | BlockEvent
    | ToolCallStart
    | ToolCallDelta
    | ToolCallDone
    | ProviderStateEvent
    | UsageEvent
    | Terminal
)
