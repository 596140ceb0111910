"""Dialogue values: the turn result, its streamed events, reply parsing and the line tracker.

Pure: nothing here awaits or does I/O. The NPC feeds model output in and sends out the events
:class:`LineTracker` returns (protocol-game §3.3, §6.5 parsing, §6.6 streaming).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ..agent.events import (
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallStarted,
    TurnUsage,
)
from ..agent.tools import ToolCallRecord
from ._text import split_emotion_tag, spoken_line, streaming_line
from .options import NPCOptions
from .persona import Emotion, Persona

__all__ = [
    "PLAYER_LABEL",
    "DialogueTurn",
    "EmotionEvent",
    "LineDelta",
    "LineReset",
    "LineTracker",
    "NPCEvent",
    "NPCEventSink",
    "Reply",
    "parse_reply",
    "parse_text_reply",
    "partial_text_reply",
]

PLAYER_LABEL = "Player"
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")


class EmotionEvent(msgspec.Struct, frozen=True):
    """The emotion of the turn, sent as soon as it is known; a later one supersedes."""

    emotion: Emotion

    def to_wire(self) -> dict[str, Any]:
        return {"type": "emotion", "emotion": self.emotion.value}


class LineDelta(msgspec.Struct, frozen=True):
    """Text to append to the displayed line."""

    delta: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": "lineDelta", "delta": self.delta}


class LineReset(msgspec.Struct, frozen=True):
    """Replace the displayed line with ``line``."""

    line: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": "lineReset", "line": self.line}


NPCEvent = EmotionEvent | LineDelta | LineReset | ToolCallStarted | ToolCallCompleted | ToolCallAbandoned
"""What a talk reports while it runs. All but :class:`ToolCallAbandoned` are ``npc/event``
payloads (``to_wire()``); an abandoned client call means "send ``tool/cancel``"."""

NPCEventSink = Callable[[NPCEvent], Awaitable[None]]


class DialogueTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One NPC reply (the ``npc/talk`` result)."""

    line: str
    emotion: Emotion = Emotion.NEUTRAL
    player_options: tuple[str, ...] = ()
    ends_conversation: bool = False
    tool_calls: tuple[ToolCallRecord, ...] = ()
    relationship: int = 0
    is_fallback: bool = False
    usage: TurnUsage = msgspec.field(default_factory=TurnUsage)
    degraded: str | None = None  # why a fallback line stands in ("deadline"); an extension key

    def to_wire(self, npc: str | None = None, warnings: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
        """The ``npc/talk`` result in protocol key order; ``npc`` first when given, then
        ``degraded`` and ``warnings`` only when there are any."""
        wire: dict[str, Any] = {} if npc is None else {"npc": npc}
        wire |= {
            "line": self.line,
            "emotion": self.emotion.value,
            "playerOptions": list(self.player_options),
            "endsConversation": self.ends_conversation,
            "toolCalls": [record.to_wire() for record in self.tool_calls],
            "relationship": self.relationship,
            "isFallback": self.is_fallback,
            "usage": self.usage.to_wire(),
        }
        if self.degraded is not None:
            wire["degraded"] = self.degraded
        if warnings:
            wire["warnings"] = list(warnings)
        return wire


class Reply(msgspec.Struct, frozen=True):
    """A parsed reply, before it becomes a :class:`DialogueTurn`."""

    line: str
    emotion: Emotion
    player_options: tuple[str, ...] = ()
    ends_conversation: bool = False


def parse_reply(value: Any, persona: Persona, options: NPCOptions) -> Reply:
    """Read a structured reply defensively: any field may be missing or odd."""
    reply = value if isinstance(value, dict) else {}
    emotion = reply.get("emotion")
    matched = Emotion.matching(emotion) if isinstance(emotion, str) else None
    line = reply.get("line")
    return Reply(
        line=spoken_line(line if isinstance(line, str) else "", persona.name.strip()),
        emotion=matched or persona.default_emotion,
        player_options=_player_options(reply.get("player_options"), options.effective_player_option_count),
        ends_conversation=options.can_end_conversation and reply.get("ends_conversation") is True,
    )


def _player_options(value: Any, count: int) -> tuple[str, ...]:
    options: list[str] = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, str):
            continue
        cleaned = spoken_line(_LIST_MARKER.sub("", item, count=1), PLAYER_LABEL)
        if cleaned and all(cleaned.lower() != known.lower() for known in options):
            options.append(cleaned)
    return tuple(options[:count])


def parse_text_reply(text: str, persona: Persona) -> Reply:
    """A ``[emotion] line`` reply; no player options, never ends the conversation."""
    split = split_emotion_tag(text)
    matched = Emotion.matching(split.tag) if split.tag is not None else None
    return Reply(spoken_line(split.rest, persona.name.strip()), matched or persona.default_emotion)


def partial_text_reply(text: str) -> dict[str, Any] | None:
    """Streamed text shaped like a partial structured reply; ``None`` while a tag is incomplete."""
    split = split_emotion_tag(text)
    if split.pending:
        return None
    partial: dict[str, Any] = {} if split.tag is None else {"emotion": split.tag}
    partial["line"] = split.rest
    return partial


class LineTracker:
    """Turns partial replies into emotion and line events so that, folded in order, the line
    events always give exactly the line shown last. Persists across a turn's text retry."""

    __slots__ = ("_sent_emotion", "_speaker", "shown")

    def __init__(self, speaker: str) -> None:
        self._speaker = speaker
        self._sent_emotion: Emotion | None = None
        self.shown = ""

    def consume(self, partial: Any) -> list[NPCEvent]:
        """Events for a partial reply ``{"emotion"?, "line"?}``."""
        if not isinstance(partial, dict):
            return []
        events: list[NPCEvent] = []
        # The emotion is complete once the model has moved on to the line.
        emotion = partial.get("emotion")
        if self._sent_emotion is None and "line" in partial and isinstance(emotion, str):
            matched = Emotion.matching(emotion)
            if matched is not None:
                self._sent_emotion = matched
                events.append(EmotionEvent(matched))
        raw = partial.get("line")
        if isinstance(raw, str) and (visible := streaming_line(raw, self._speaker)) is not None:
            events += self._show(visible)
        return events

    def finish(self, line: str, emotion: Emotion) -> list[NPCEvent]:
        """Events that make the display equal the final ``line`` and ``emotion``."""
        events: list[NPCEvent] = []
        if self._sent_emotion is not emotion:
            self._sent_emotion = emotion
            events.append(EmotionEvent(emotion))
        return events + self._show(line)

    def _show(self, text: str) -> list[NPCEvent]:
        if text == self.shown:
            return []
        event: NPCEvent = LineDelta(text[len(self.shown) :]) if text.startswith(self.shown) else LineReset(text)
        self.shown = text
        return [event]
