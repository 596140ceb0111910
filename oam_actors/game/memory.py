"""What an NPC remembers: :class:`NPCMemory`, turn-staged changes, the memory tools, secrets.

Contract (protocol-game §6.4, §6.7, §6.8):

- :class:`NPCMemory` is an immutable value: facts (oldest first), a relationship clamped to
  -100…100 and an optional summary of compacted conversation. Facts compare ignoring case and
  everything but letters and digits; blank facts are ignored.
- :class:`MemoryStore` holds the committed memory plus the changes memory tools stage during a
  turn; :meth:`MemoryStore.commit` applies them when the turn succeeds, :meth:`MemoryStore.discard`
  drops them on fallback, failure or cancellation.
- :func:`memory_tools` builds the local ``remember_fact`` / ``change_relationship`` tools.
- :func:`secret_visibility` decides per turn whether secrets are guarded, shareable or hidden.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from ..agent.schema import Schema
from ..agent.tools import ErrorOutput, TextOutput, ToolDefinition, ToolOutput
from ..agent.words import distinctive_words
from ..errors import invalid_params
from ._decode import WireObject
from ._text import joined_list, trimmed_or_none
from .options import MemoryTool, NPCOptions
from .persona import SecretVisibility

__all__ = [
    "RELATIONSHIP_MAX",
    "RELATIONSHIP_MIN",
    "MemoryStore",
    "NPCMemory",
    "attitude",
    "draws_on",
    "heard_how",
    "memory_tools",
    "secret_visibility",
]

OVERHEARD = "(overheard) "
"""The prefix of a heard note of a line the NPC overheard as a bystander."""
HEARD_HEADING = ("What you know because you heard or overheard it (who said what, to whom); "
                 "tell it when you are asked about it:")
HEARD_LINES = 24
"""Conversation lines an NPC keeps verbatim (:attr:`NPCMemory.heard`); compaction folds them
into its summary, and beyond this many the oldest go."""

RELATIONSHIP_MIN = -100
RELATIONSHIP_MAX = 100


def attitude(value: int) -> str:
    """The one-word attitude for a relationship value."""
    if value < -60:
        return "hostile"
    if value < -20:
        return "unfriendly"
    if value <= 20:
        return "neutral"
    if value <= 60:
        return "friendly"
    return "trusting"


def _clamp(value: int) -> int:
    return min(max(value, RELATIONSHIP_MIN), RELATIONSHIP_MAX)


def _fact_key(fact: str) -> str:
    return "".join(c for c in fact.lower() if c.isalnum())


@dataclasses.dataclass(frozen=True)
class NPCMemory:
    """Facts (oldest first), the relationship (clamped on construction), a summary, and the
    conversation lines heard among other NPCs (oldest first, at most ``HEARD_LINES``) and the
    relationships toward other characters by name (each clamped like the player's)."""

    facts: tuple[str, ...] = ()
    relationship: int = 0
    summary: str | None = None
    heard: tuple[str, ...] = ()
    others: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", tuple(self.facts))
        object.__setattr__(self, "heard", tuple(self.heard)[-HEARD_LINES:])
        object.__setattr__(self, "others", tuple((name, _clamp(value)) for name, value in self.others))
        object.__setattr__(self, "relationship", _clamp(self.relationship))

    @property
    def attitude(self) -> str:
        return attitude(self.relationship)

    def knows(self, fact: str) -> bool:
        key = _fact_key(fact)
        return any(_fact_key(known) == key for known in self.facts)

    def remembering(self, fact: str, limit: int | None = None) -> NPCMemory:
        """With ``fact`` added unless blank or known; beyond ``limit`` the oldest facts go."""
        cleaned = trimmed_or_none(fact)
        if cleaned is None or self.knows(cleaned):
            return self
        facts = (*self.facts, cleaned)
        if limit is not None and limit >= 0 and len(facts) > limit:
            facts = facts[len(facts) - limit :]
        return dataclasses.replace(self, facts=facts)

    def hearing(self, lines: tuple[str, ...]) -> NPCMemory:
        """With ``lines`` heard (the oldest beyond ``HEARD_LINES`` go)."""
        return dataclasses.replace(self, heard=(*self.heard, *lines))

    def compaction_seed(self) -> str | None:
        """What the summarizer starts from: the summary and the lines heard since."""
        parts = [s for s in (trimmed_or_none(self.summary),) if s is not None]
        if self.heard:
            parts.append("Heard in conversations among others:\n" + "\n".join(self.heard))
        return "\n".join(parts) or None

    def adjusting_relationship(self, delta: int) -> NPCMemory:
        return dataclasses.replace(self, relationship=self.relationship + delta)

    def toward(self, name: str) -> int:
        """The relationship toward the character ``name`` (0 when none)."""
        key = name.strip().casefold()
        return next((value for other, value in self.others if other.casefold() == key), 0)

    def adjusting_toward(self, name: str, delta: int) -> NPCMemory:
        """With the relationship toward the character ``name`` changed by ``delta``."""
        key = name.strip().casefold()
        kept = tuple((other, value) for other, value in self.others if other.casefold() != key)
        return dataclasses.replace(self, others=(*kept, (name.strip(), self.toward(name) + delta)))

    def note(self, *, include_relationship: bool) -> str | None:
        """The ``Memory:`` block of the system text, or ``None`` when there is nothing to say."""
        lines = []
        if include_relationship or self.relationship != 0:
            lines.append(
                f"- You feel {self.attitude} toward the player ({self.relationship} on a scale from -100 to 100)."
            )
        if (facts := joined_list(self.facts)) is not None:
            lines.append(f"- You remember: {facts}")
        if (summary := trimmed_or_none(self.summary)) is not None:
            lines.append(f"- Earlier conversation: {summary}")
        for name, value in self.others:
            lines.append(f"- You feel {attitude(value)} toward {name} ({value} on a scale from -100 to 100).")
        return "Memory:\n" + "\n".join(lines) if lines else None

    def heard_section(self) -> str | None:
        """The lines heard in conversations among NPCs as a section of their own, for the end of
        the system text (next to the question: a small model overlooks them inside ``Memory:``);
        ``None`` when none was heard."""
        if not self.heard:
            return None
        notes = "\n".join(f"- {h.removeprefix(OVERHEARD)}" for h in self.heard)
        return f"{HEARD_HEADING}\n{notes}"

    def heard_note_about(self, question: str) -> str | None:
        """The heard note (as :attr:`heard` holds it) that ``question`` asks about: of the notes
        sharing a distinctive word with ``question`` (three letters or more, not a common one),
        the one sharing most, the latest on a tie; ``None`` when none shares one."""
        asked = distinctive_words(question)
        best: tuple[int, str] | None = None
        for note in self.heard if asked else ():
            shared = len(asked & distinctive_words(note.removeprefix(OVERHEARD)))
            if shared and (best is None or shared >= best[0]):
                best = (shared, note)
        return None if best is None else best[1]

    def heard_about(self, question: str) -> str | None:
        """The heard note that ``question`` asks about (:meth:`heard_note_about`), as a sentence
        of what the NPC knows (``You know this because you overheard it: Gorm to Odo: …``)."""
        note = self.heard_note_about(question)
        if note is None:
            return None
        how, said = heard_how(note)
        return f"You know this because you {how} it, and you are asked about it now: {said}"

    def private_knowledge(self, said: Collection[str] = ()) -> bool:
        """Whether this memory holds knowledge another NPC must not see: facts, a summary,
        feelings toward other characters, or a heard line that is not one of ``said`` (the
        words of the conversation being continued, which its batch item shows anyway). The
        relationship toward the player is a number, not knowledge."""
        rest = self.without_heard(said)
        return bool(rest.facts or trimmed_or_none(rest.summary) is not None or rest.others or rest.heard)

    def private_texts(self) -> tuple[str, ...]:
        """What this memory holds that only this NPC knows: facts, summary, the characters it
        feels about, heard lines."""
        summary = trimmed_or_none(self.summary)
        return (*self.facts, *((summary,) if summary is not None else ()), *(name for name, _ in self.others),
                *self.heard)

    def without_heard(self, said: Collection[str]) -> NPCMemory:
        """Without the heard notes of lines whose words are among ``said`` (a conversation's
        own lines, which its prompt shows already)."""
        if not said or not self.heard:
            return self
        endings = tuple(f": {words}" for words in said)
        return dataclasses.replace(self, heard=tuple(note for note in self.heard if not note.endswith(endings)))

    def to_wire(self) -> dict[str, Any]:
        """``{"facts", "relationship", "summary"?}``."""
        wire: dict[str, Any] = {"facts": list(self.facts), "relationship": self.relationship}
        if self.summary is not None:
            wire["summary"] = self.summary
        if self.heard:
            wire["heard"] = list(self.heard)
        if self.others:
            wire["others"] = dict(self.others)
        return wire

    @classmethod
    def from_wire(cls, value: Any, path: str = "memory") -> NPCMemory:
        """Decode ``{"facts"?, "relationship"?, "summary"?, "heard"?}``; ``None`` is empty memory."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise invalid_params(f"'{path}' must be an object.")
        wire = WireObject(value, path)
        return cls(
            facts=wire.string_list("facts", ()),
            relationship=wire.integer("relationship", 0),
            summary=wire.optional_string("summary"),
            heard=wire.string_list("heard", ()),
            others=_others(value.get("others"), f"{path}.others"),
        )


def heard_how(note: str) -> tuple[str, str]:
    """How the NPC came by a heard ``note`` (``"heard"`` or ``"overheard"``) and what it says."""
    return ("overheard" if note.startswith(OVERHEARD) else "heard"), note.removeprefix(OVERHEARD)


def draws_on(reply: str, note: str, question: str) -> bool:
    """Whether ``reply`` to ``question`` draws on the heard ``note`` it asks about: it holds a
    distinctive word of the note's words that the question does not hold (the names of who
    said it to whom aside: ``I heard it from Gorm`` tells nothing). True when the note tells
    nothing beyond the question."""
    header, _, words = heard_how(note)[1].partition(": ")
    told = distinctive_words(words) - distinctive_words(question) - distinctive_words(header)
    return not told or bool(told & distinctive_words(reply))


def _others(value: Any, path: str) -> tuple[tuple[str, int], ...]:
    """``{"Bran": 20, …}``: relationships toward other characters by name."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
        isinstance(name, str) and name.strip() and isinstance(v, int) and not isinstance(v, bool)
        for name, v in value.items()
    ):
        raise invalid_params(f"'{path}' must be an object of character names to integers.")
    return tuple((name.strip(), v) for name, v in value.items())


class MemoryStore:
    """The committed memory and the changes staged by the running turn's memory tools."""

    __slots__ = ("_delta", "_facts", "_toward", "memory")

    def __init__(self, memory: NPCMemory) -> None:
        self.memory = memory
        self._facts: list[str] = []
        self._delta = 0
        self._toward: dict[str, int] = {}

    def stage_fact(self, fact: str) -> bool:
        """Stage ``fact``; ``False`` when it is already known or staged."""
        probe = self.memory
        for staged in self._facts:
            probe = probe.remembering(staged)
        if probe.remembering(fact) is probe:
            return False
        self._facts.append(fact.strip())
        return True

    def stage_relationship(self, delta: int) -> int:
        """Stage a change; returns the value committing now would give."""
        self._delta += delta
        return self.memory.adjusting_relationship(self._delta).relationship

    def stage_toward(self, name: str, delta: int) -> int:
        """Stage a change toward the character ``name``; returns the value committing now would give."""
        self._toward[name] = self._toward.get(name, 0) + delta
        return self.memory.adjusting_toward(name, self._toward[name]).toward(name)

    def commit(self, max_facts: int) -> NPCMemory:
        """Apply the staged changes (oldest facts beyond ``max_facts`` dropped); returns the memory."""
        memory = self.memory
        for fact in self._facts:
            memory = memory.remembering(fact, limit=max_facts)
        for name, delta in self._toward.items():
            memory = memory.adjusting_toward(name, delta)
        self.memory = memory.adjusting_relationship(self._delta) if self._delta else memory
        self.discard()
        return self.memory

    def discard(self) -> None:
        self._facts = []
        self._delta = 0
        self._toward = {}


def secret_visibility(threshold: int | None, relationship: int) -> SecretVisibility:
    """No threshold: guarded; at or above it: shareable; below: hidden."""
    if threshold is None:
        return SecretVisibility.GUARDED
    return SecretVisibility.SHAREABLE if relationship >= threshold else SecretVisibility.HIDDEN


def memory_tools(options: NPCOptions, store: MemoryStore) -> list[ToolDefinition]:
    """The enabled memory tools, in protocol order, bound to ``store``."""
    tools = []
    if MemoryTool.REMEMBER_FACT in options.memory_tools:
        tools.append(_remember_fact(store))
    if MemoryTool.CHANGE_RELATIONSHIP in options.memory_tools:
        tools.append(_change_relationship(store, max(1, options.max_relationship_change)))
    return tools


def _object_schema(properties: dict[str, Any]) -> Schema:
    return Schema.compile({"type": "object", "properties": properties, "required": list(properties)})


def _remember_fact(store: MemoryStore) -> ToolDefinition:
    async def handler(arguments: dict[str, Any]) -> ToolOutput:
        fact = arguments.get("fact")
        if not isinstance(fact, str) or not fact.strip():
            return ErrorOutput("The fact is empty.")
        return TextOutput("Remembered." if store.stage_fact(fact) else "You already know that.")

    schema = _object_schema(
        {"fact": {"type": "string", "description": "One short fact, for example 'The player's name is Aria.'"}}
    )
    return ToolDefinition(
        MemoryTool.REMEMBER_FACT.tool_name,
        "Remember an important fact about the player or the world for later conversations.",
        schema,
        handler=handler,
    )


def _change_relationship(store: MemoryStore, limit: int) -> ToolDefinition:
    async def handler(arguments: dict[str, Any]) -> ToolOutput:
        delta = min(max(int(arguments.get("delta", 0)), -limit), limit)
        toward = arguments.get("toward")
        if isinstance(toward, str) and toward.strip() and toward.strip().casefold() != "player":
            value = store.stage_toward(toward.strip(), delta)
            return TextOutput(f"You now feel {attitude(value)} toward {toward.strip()} ({value}).")
        value = store.stage_relationship(delta)
        return TextOutput(f"You now feel {attitude(value)} toward the player ({value}).")

    # The range is described, not enforced: a small model overshoots ("-50"), and the intent is
    # clear, so the handler clamps instead of spending a repair step.
    properties = {
        "reason": {"type": "string", "description": "Why your feelings changed, in a few words."},
        "delta": {
            "type": "integer",
            "description": f"From -{limit} (they upset you) to {limit} (they pleased you).",
        },
        "toward": {"type": "string", "description": "Another character's name; leave it out for the player."},
    }
    schema = Schema.compile({"type": "object", "properties": properties, "required": ["reason", "delta"]})
    return ToolDefinition(
        MemoryTool.CHANGE_RELATIONSHIP.tool_name,
        "Change how much you like the player, or another character, when they clearly please or offend you.",
        schema,
        handler=handler,
    )

