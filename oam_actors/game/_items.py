"""What a bark, a decision, a talk's reply (plain or structured) or a talk's tool choice says about itself for a coalescing backend
(:data:`~oam_actors.agent.model.BatchItem`): the essentials of its character and its situation,
in the few short lines a batch prompt gives each item. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from ..agent.model import BarkItem, DecisionItem, ItemOption, ReplyItem, StructuredReplyItem, ToolChoiceItem
from ..agent.tools import compact_json
from ._text import joined_list, sentence, trimmed_or_none
from .options import NPCOptions
from .persona import Persona

__all__ = ["bark_item", "decision_item", "reply_item", "structured_reply_item", "tool_choice_item"]

_CATALOG = "Available tools:"  # the decide task's catalog heading (agent.prompts.decide_task)
_RESPOND_OPTION = "- respond:"


def _character(persona: Persona, *, goals: bool, knowledge: bool = False) -> list[str]:
    lines = []
    if (role := trimmed_or_none(persona.role)) is not None:
        lines.append(f"Role: {sentence(role)}")
    for label, text in (("Personality", persona.personality), ("Speaking style", persona.speaking_style)):
        if (trimmed := trimmed_or_none(text)) is not None:
            lines.append(f"{label}: {sentence(trimmed)}")
    if goals and (joined := joined_list(persona.goals)) is not None:
        lines.append(f"Goals: {joined}")
    if knowledge:
        if (background := trimmed_or_none(persona.backstory)) is not None:
            lines.append(f"Background: {sentence(background)}")
        if (known := joined_list(persona.knowledge)) is not None:
            lines.append(f"Knows: {known}")
    return lines


def bark_item(persona: Persona, extra_instructions: str | None, situation: str | None,
              world_summary: str | None) -> BarkItem:
    """A bark of ``persona`` in ``situation`` (the game state folded in)."""
    lines = _character(persona, goals=False)
    if (extra := trimmed_or_none(extra_instructions)) is not None:
        lines.append(f"Note: {' '.join(extra.split())}")
    moment = trimmed_or_none(situation) or "An ordinary moment."
    if (summary := trimmed_or_none(world_summary)) is not None:
        moment = f"{moment} Game state: {' '.join(summary.split())}"
    return BarkItem(speaker=persona.name.strip(), character="\n".join(lines), situation=moment)


def decision_item(actor: Persona | None, situation: str, context: object,
                  options: Sequence[tuple[str, str]]) -> DecisionItem:
    """A decision for ``actor`` among ``options`` (id, description), ``context`` as facts."""
    moment = trimmed_or_none(situation) or "(none given)"
    if context is not None and context != {}:
        moment = f"{moment}\nFacts: {compact_json(context)}"
    return DecisionItem(
        actor=actor.name.strip() if actor is not None else "",
        character="\n".join(_character(actor, goals=True)) if actor is not None else "",
        situation=moment,
        options=tuple(ItemOption(option_id, description.strip()) for option_id, description in options),
    )


def reply_item(persona: Persona, extra_instructions: str | None, context_note: str | None,
               conversation: Sequence[str], tool_results: Sequence[str], line: str, user_label: str,
               private: Sequence[str] = ()) -> ReplyItem | None:
    """A plain-text reply of ``persona`` to ``line``, or ``None`` when it must run alone: a
    persona with secrets (their guarded rules are the solo instructions' to keep). ``private``:
    what of ``context_note`` only this NPC knows, which no other item's answer may carry."""
    if persona.secrets:
        return None
    lines = _character(persona, goals=True, knowledge=True)
    if (extra := trimmed_or_none(extra_instructions)) is not None:
        lines.append(f"Note: {' '.join(extra.split())}")
    if (note := trimmed_or_none(context_note)) is not None:
        lines.append(note)
    return ReplyItem(speaker=persona.name.strip(), character="\n".join(lines), conversation=tuple(conversation),
                     tool_results=tuple(tool_results), line=line, user_label=user_label,
                     sentences=persona.sentence_limit, private=tuple(private))


def structured_reply_item(reply: ReplyItem, options: NPCOptions) -> StructuredReplyItem:
    """The structured reply step of the talk ``reply`` describes, with what the NPC's reply
    schema (:func:`._prompting.reply_schema`) asks: its emotions, its player option count,
    whether it may end the conversation."""
    return StructuredReplyItem(talk=reply, emotions=tuple(e.value for e in options.allowed_emotions),
                               player_options=options.effective_player_option_count,
                               can_end=options.can_end_conversation)


def tool_choice_item(reply: ReplyItem, prompt: str, names: Sequence[str]) -> ToolChoiceItem | None:
    """The decide step of the talk ``reply`` describes (the same character and conversation):
    the tool catalog its ``prompt`` shows, for the tools ``names``; ``None`` (run alone) when
    the prompt shows none."""
    lines = prompt.splitlines()
    if _CATALOG not in lines or not names:
        return None
    catalog = []
    for line in lines[lines.index(_CATALOG) + 1:]:
        if not line.startswith("- "):
            break
        catalog.append(line)
    return ToolChoiceItem(talk=reply, tools=tuple(catalog), names=tuple(names),
                          allow_respond=any(line.startswith(_RESPOND_OPTION) for line in catalog))
