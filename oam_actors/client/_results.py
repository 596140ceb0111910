"""Typed results of the methods whose answers a program reads field by field.

Each is decoded from the server's answer as it is sent (protocol/PROTOCOL.md); a key the server
adds later is ignored, so an older client keeps working. Methods whose answers are documents
(``npc/state``, ``world/snapshot``, transcripts, ``model/status``) return the JSON as it came.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._errors import UnexpectedResult

__all__ = [
    "Bark",
    "ConversationLine",
    "ConversationReply",
    "ConversationSaid",
    "Created",
    "Decision",
    "NpcReply",
    "SessionReply",
    "TokenUsage",
    "ToolRecord",
    "ToolRequest",
    "decode",
]


class _Wire(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    pass


class ToolRequest(_Wire):
    """A tool call as the model made it: ``call`` in ``tool/call`` and in records."""

    id: str
    name: str
    arguments: dict[str, Any] = {}


class ToolRecord(_Wire):
    """One completed tool call of a turn (``toolCalls[]``)."""

    call: ToolRequest
    output: Any
    is_error: bool = False
    duration_seconds: float = 0.0


class TokenUsage(_Wire):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Created(_Wire):
    """``session/create`` / ``npc/create`` / ``npc/restore``: the id and the warnings; ``tools``
    (NPCs) lists the tools the model sees."""

    id: str
    warnings: list[str] = []
    tools: list[dict[str, Any]] = []


class SessionReply(_Wire):
    """``session/respond``."""

    session: str
    text: str
    structured: Any = None
    tool_calls: list[ToolRecord] = []
    usage: TokenUsage = TokenUsage()
    steps: list[dict[str, Any]] = []
    warnings: list[str] = []


class NpcReply(_Wire):
    """``npc/talk``; ``degraded`` is ``"deadline"`` when a fallback line stands in for a turn the
    quota could not take in time."""

    npc: str
    line: str
    emotion: str
    player_options: list[str] = []
    ends_conversation: bool = False
    tool_calls: list[ToolRecord] = []
    relationship: int = 0
    is_fallback: bool = False
    usage: TokenUsage = TokenUsage()
    degraded: str | None = None
    warnings: list[str] = []


class Bark(_Wire):
    """``npc/bark``; ``repeated``: a recent bark said again after a spent deadline."""

    npc: str
    line: str
    is_fallback: bool = False
    degraded: str | None = None
    repeated: bool = False


class Decision(_Wire):
    """``decision/decide`` (and each successful element of ``decision/decideMany``)."""

    option_id: str = msgspec.field(name="optionID")
    reasoning: str = ""
    confidence: int = 0
    tool_calls: list[ToolRecord] = []
    usage: TokenUsage = TokenUsage()
    is_fallback: bool = False
    degraded: str | None = None
    warnings: list[str] = []


class ConversationLine(_Wire):
    """One line of a conversation (``lines[]``, a ``line`` event, ``conversation/say``'s
    ``line``): ``speaker`` a member id or ``"player"``; ``addressee`` the member id (or
    ``"player"``) the line names first, ``None`` for the group; ``emotion`` is ``None`` for the
    player's lines; ``degraded`` as in :class:`NpcReply` (``"preempted"``: an ambient line gave
    way to a talk)."""

    speaker: str
    name: str
    line: str
    emotion: str | None = None
    addressee: str | None = None
    is_fallback: bool = False
    degraded: str | None = None


class _Standing(_Wire):
    """Where a conversation stands after a request: ``next`` is who speaks next (``"player"`` on
    the player's turn, ``None`` once ended); ``line_count`` counts every line so far."""

    conversation: str
    members: list[str] = []
    next: str | None = None
    player_turn: bool = False
    ended: bool = False
    line_count: int = 0


class ConversationReply(_Standing):
    """``conversation/advance`` and ``run`` (the ``lines`` said), ``join`` and ``leave`` (no
    ``lines``); ``unheard``: the listeners that missed the lines (deleted meanwhile, a full
    queue, a failure), every other one has them in its memory."""

    lines: list[ConversationLine] = []
    unheard: list[str] = []


class ConversationSaid(_Standing, kw_only=True):
    """``conversation/say``: the player's ``line``, once committed; ``unheard`` as in
    :class:`ConversationReply`."""

    line: ConversationLine
    unheard: list[str] = []


def decode(result: Any, kind: type[Any], method: str) -> Any:
    """``result`` of ``method`` as ``kind``; :class:`UnexpectedResult` names what is missing or wrong."""
    try:
        return msgspec.convert(result, kind)
    except msgspec.ValidationError as exc:
        raise UnexpectedResult(method, str(exc), result) from exc
