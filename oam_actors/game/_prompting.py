"""What an NPC's model requests say: instructions, the per-turn context note, the reply schema.

Pure functions of persona, options, memory and tool names (protocol-game §6.1, §6.4, §6.5, §6.9,
§6.10). The instructions are byte-stable for a given persona, options, tool set and secret
visibility, so backends can cache the prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..agent.schema import Schema
from ..agent.tools import ToolCallRecord, compact_json
from ..agent.transcript import ResponseEntry
from ..errors import ErrorCode
from ._dialogue import PLAYER_LABEL
from ._text import trimmed_or_none
from .memory import NPCMemory, heard_how, secret_visibility
from .options import MemoryTool, NPCOptions
from .persona import Emotion, Persona

__all__ = [
    "SILENT_LINE",
    "DEADLINE",
    "UNUSABLE",
    "WORDLESS_REPAIR",
    "bark_prompt",
    "context_note",
    "facts_note",
    "heard_repair",
    "instructions",
    "memory_note",
    "reply_schema",
    "spoken_response",
    "summary_instructions",
    "turn_prompt",
]

SILENT_LINE = "(The player says nothing.)"
UNUSABLE = frozenset({ErrorCode.GUARDRAIL_VIOLATION, ErrorCode.REFUSAL, ErrorCode.GENERATION_FAILED})
"""Codes meaning "the model answered, but the answer cannot be used" (Android's superset)."""
DEADLINE = "deadline"
"""The ``degraded`` reason of a fallback that stands in because the request's deadline passed
before the model's quota could take a step (:class:`~oam_actors.errors.DeadlinePassed`)."""

WORDLESS_REPAIR = ("Your last reply had no words, only an emotion tag or a stage direction. "
                   "Answer the player in words this time: what you say aloud, in one or two sentences.")
"""The note of a reply asked again because it had no words (:meth:`~.npc.NPC.talk`)."""


def heard_repair(note: str) -> str:
    """The note of a reply asked again because it drew nothing on the heard ``note`` the
    player asked about (:func:`~.memory.draws_on`, :meth:`~.npc.NPC.talk`)."""
    how, said = heard_how(note)
    return (f"Your last reply did not say what you {how}, and the player asks about it: "
            f"{said} Answer the player with what you {how}, in your own words.")


_MAX_RETRY_FACTS = 6
_MAX_FACT_CHARS = 400
_MEMORY_TOOL_NAMES = frozenset(tool.tool_name for tool in MemoryTool)


def instructions(
    persona: Persona, options: NPCOptions, tool_names: Sequence[str], memory: NPCMemory, *, text_reply: bool
) -> str:
    """The persona's instructions plus memory-tool hints and, for text replies, the tag rule."""
    extra = []
    if (more := trimmed_or_none(options.extra_instructions)) is not None:
        extra.append(more)
    if MemoryTool.REMEMBER_FACT.tool_name in tool_names:
        extra.append("- When the player tells you something worth remembering, call remember_fact.")
    if MemoryTool.CHANGE_RELATIONSHIP.tool_name in tool_names:
        extra.append("- When the player clearly pleases or offends you, call change_relationship.")
    if text_reply:
        extra.append("- Begin every spoken reply with your current emotion in square brackets, such as [happy] or [angry].")
    return persona.instructions(
        "\n".join(extra) or None,
        uses_tools=any(name not in _MEMORY_TOOL_NAMES for name in tool_names),
        secret_visibility=secret_visibility(options.secrets_unlock_at_relationship, memory.relationship),
    )


def memory_note(memory: NPCMemory, options: NPCOptions) -> str | None:
    """The ``Memory:`` block, then what the NPC heard in conversations (its own section, last)."""
    parts = [_memory_block(memory, options), memory.heard_section()]
    return "\n".join(p for p in parts if p is not None) or None


def _memory_block(memory: NPCMemory, options: NPCOptions) -> str | None:
    """The ``Memory:`` block, with the relationship when the NPC may change it."""
    return memory.note(include_relationship=MemoryTool.CHANGE_RELATIONSHIP in options.memory_tools)


def context_note(
    memory: NPCMemory,
    options: NPCOptions,
    world_summary: str | None,
    situation: str | None,
    facts: Sequence[ToolCallRecord] = (),
    question: str | None = None,
) -> str | None:
    """Memory, ``Game state:``, ``Situation:`` (this turn only), for a text retry the facts
    tools already returned, and last, next to the player's words, what the NPC heard in
    conversations among NPCs, then the heard line the player's ``question`` asks about, said
    again as what the NPC knows (:meth:`~.memory.NPCMemory.heard_about`). The player's words
    stay the prompt on their own."""
    parts = []
    if (note := _memory_block(memory, options)) is not None:
        parts.append(note)
    if (summary := trimmed_or_none(world_summary)) is not None:
        parts.append(f"Game state:\n{summary}")
    if (now := trimmed_or_none(situation)) is not None:
        parts.append(f"Situation: {now}")
    if (looked_up := facts_note(facts)) is not None:
        parts.append(looked_up)
    if (heard := memory.heard_section()) is not None:
        parts.append(heard)
        if question is not None and (asked := memory.heard_about(question)) is not None:
            parts.append(asked)
    return "\n".join(parts) or None


def facts_note(records: Sequence[ToolCallRecord]) -> str | None:
    """Successful tool results of the failed attempt, so a text retry stays grounded without
    running the tools again."""
    results = [r for r in records if not r.output.is_error][:_MAX_RETRY_FACTS]
    if not results:
        return None
    lines = ["Facts you just looked up:"]
    for record in results:
        arguments = f" {compact_json(record.call.arguments)}" if record.call.arguments else ""
        output = record.output.model_text().strip()[:_MAX_FACT_CHARS]
        lines.append(f"- {record.call.name}{arguments} gave: {output}")
    return "\n".join(lines)


def summary_instructions(persona: Persona) -> str:
    name = persona.name
    return (
        f"You keep {name}'s memory of talking with the player in a video game. "
        f"Merge the new conversation into the summary so far. When {name}'s turns list fields, "
        'only the "line" was spoken aloud. '
        f"Keep names, promises, deals, items, prices, facts learned and how {name} feels about the player. "
        "Write at most 100 words of plain prose in the third person."
    )


def turn_prompt(player_line: str) -> str:
    """The player's words, or the silent-turn marker."""
    return trimmed_or_none(player_line) or SILENT_LINE


def bark_prompt(situation: str | None, world_summary: str | None) -> str:
    """A silent dialogue moment (framed like a turn: commands trip safety filters more often)."""
    lines = []
    if (summary := trimmed_or_none(world_summary)) is not None:
        lines.append(f"Game state:\n{summary}")
    lines.append(f"Situation: {trimmed_or_none(situation) or 'An ordinary moment.'}")
    lines.append(f"{PLAYER_LABEL}: {SILENT_LINE}")
    return "\n".join(lines)


def reply_schema(persona: Persona, options: NPCOptions) -> Schema:
    """Emotion first (it sets the tone), then the line, then the suggestions. Counts are
    described, not enforced: two suggestions instead of three is not worth a repair step."""
    sentences, count = persona.sentence_limit, options.effective_player_option_count
    can_end = options.can_end_conversation
    shape = _reply_shape(sentences, options.allowed_emotions, count, can_end)
    return shape.described(_reply_descriptions(persona.name.strip(), sentences, count, can_end))


@functools.lru_cache(maxsize=64)
def _reply_shape(sentences: int, emotions: tuple[Emotion, ...], count: int, can_end: bool) -> Schema:
    """The reply schema without a name: compiled once, and every persona's is this one with its
    descriptions (:meth:`Schema.described`)."""
    descriptions = iter(_reply_descriptions("", sentences, count, can_end))
    properties: dict[str, Any] = {
        "emotion": {"type": "string", "description": next(descriptions), "enum": [e.value for e in emotions]},
        "line": {"type": "string", "description": next(descriptions)},
    }
    if count > 0:
        properties["player_options"] = {"type": "array", "items": {"type": "string"}, "description": next(descriptions)}
    if can_end:
        properties["ends_conversation"] = {"type": "boolean", "description": next(descriptions)}
    return Schema.compile(
        {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    )


def _reply_descriptions(name: str, sentences: int, count: int, can_end: bool) -> list[str]:
    """The reply schema's descriptions, in document order."""
    descriptions = [
        f"How {name} feels right now, given their personality and what the player just said. "
        "Use neutral only when no feeling fits.",
        f"What {name} says out loud, in character. At most {sentences} short "
        f"{'sentence' if sentences == 1 else 'sentences'}. If {name} looked something up for this "
        "message, name the specific facts found (items, prices, numbers).",
    ]
    if count > 0:
        replies = "reply" if count == 1 else "replies"
        descriptions.append(f"{count} short, different {replies} the player could say next.")
    if can_end:
        descriptions.append(f"true only if {name} says goodbye or refuses to talk any more; otherwise false.")
    return descriptions


def spoken_response(entry: ResponseEntry) -> str:
    """How an earlier reply appears in the conversation: only the line that was spoken."""
    structured = entry.structured
    if isinstance(structured, dict) and isinstance(structured.get("line"), str):
        return structured["line"]
    return entry.text
