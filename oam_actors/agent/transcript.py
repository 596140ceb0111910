"""Transcripts: the committed history of a conversation, and its save / restore format.

The wire format is Android's ``open-android-models.Transcript`` version ``1.0``::

    {"type":"open-android-models.Transcript","version":"1.0",
     "transcript":{"instructions":…,"contextNote":…,"tools":[…],"entries":[…]}}

Entries are ``prompt``, ``toolUse`` (call + output) and ``response``; one turn is a prompt, zero or
more tool uses and a response. Failed and cancelled turns never appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import ProtocolError, invalid_params
from .tools import ToolCall, ToolOutput

__all__ = [
    "Entry",
    "PromptEntry",
    "ResponseEntry",
    "TRANSCRIPT_TYPE",
    "TRANSCRIPT_VERSION",
    "ToolUseEntry",
    "Transcript",
    "split_turns",
]

TRANSCRIPT_TYPE = "open-android-models.Transcript"
TRANSCRIPT_VERSION = "1.0"


class PromptEntry(msgspec.Struct, frozen=True, tag="prompt", tag_field="type"):
    text: str


class ToolUseEntry(msgspec.Struct, frozen=True, tag="toolUse", tag_field="type"):
    call: ToolCall
    output: ToolOutput


class ResponseEntry(msgspec.Struct, frozen=True, tag="response", tag_field="type", omit_defaults=True):
    text: str
    structured: Any = None


Entry = PromptEntry | ToolUseEntry | ResponseEntry


class _WireTool(msgspec.Struct, frozen=True):
    name: str
    description: str = ""
    parameters: Any = None


class Transcript(msgspec.Struct, frozen=True, omit_defaults=True):
    """Everything needed to resume a session: instructions, context note, tools, entries."""

    instructions: str | None = None
    contextNote: str | None = None
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    entries: list[Entry] = msgspec.field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """The wrapped JSON value (``type``, ``version``, ``transcript``)."""
        inner = msgspec.to_builtins(self)
        inner.setdefault("tools", [])
        inner.setdefault("entries", [])
        return {"type": TRANSCRIPT_TYPE, "version": TRANSCRIPT_VERSION, "transcript": inner}

    def encode(self) -> bytes:
        return msgspec.json.encode(self.to_wire())

    @classmethod
    def from_wire(cls, value: Any, *, path: str = "history") -> Transcript:
        """Decode the wrapper, the bare inner object, or a whole ``session/transcript`` result.

        Raises ``invalid_params`` naming ``path`` for anything else.
        """
        unwrapped = _unwrap(value)
        if unwrapped is None:
            raise invalid_params(f"Parameter '{path}' is not a transcript.")
        inner, inner_path = unwrapped
        try:
            transcript = msgspec.convert(inner, cls)
        except msgspec.ValidationError as exc:
            raise _not_valid(path, exc, path + inner_path) from exc
        for index, tool in enumerate(transcript.tools):
            try:
                msgspec.convert(tool, _WireTool)
            except msgspec.ValidationError as exc:
                raise _not_valid(path, exc, f"{path}{inner_path}.tools[{index}]") from exc
        return transcript

    @classmethod
    def decode(cls, data: bytes | str, *, path: str = "history") -> Transcript:
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise invalid_params(f"Parameter '{path}' is not valid JSON.") from exc
        return cls.from_wire(value, path=path)


def _unwrap(value: Any) -> tuple[dict[str, Any], str] | None:
    """The transcript object inside ``value`` and its path below the parameter."""
    if not isinstance(value, dict):
        return None
    inner = value.get("transcript")
    if isinstance(inner, dict):
        # Either the wrapper or a whole ``session/transcript`` result whose member is the wrapper.
        nested = inner.get("transcript")
        if isinstance(nested, dict) and "type" in inner:
            return nested, ".transcript.transcript"
        return inner, ".transcript"
    if "entries" in value:
        return value, ""
    return None


def _not_valid(path: str, exc: msgspec.ValidationError, at: str) -> ProtocolError:
    """``-32602`` naming the member msgspec found wrong, its ``$`` path read from ``at``:
    ``… Expected `str`, got `int` at 'history.entries[0].text'.``"""
    message, _, where = str(exc).partition(" - at `$")
    return invalid_params(f"Parameter '{path}' is not a valid transcript: {message} at '{at}{where.removesuffix('`')}'.")


def split_turns(entries: Sequence[Entry]) -> list[list[Entry]]:
    """Group entries into turns; a turn starts at each prompt entry."""
    turns: list[list[Entry]] = []
    for entry in entries:
        if isinstance(entry, PromptEntry) or not turns:
            turns.append([entry])
        else:
            turns[-1].append(entry)
    return turns
