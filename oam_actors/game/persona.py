"""Who a character is: :class:`Persona`, :class:`Emotion`, and the instructions they render to.

Contract (protocol-game §6.1, §6.2):

- :meth:`Persona.from_wire` decodes the wire JSON under a parameter path (``persona``,
  ``actor``, ``state.persona``): only ``name`` is required and must not be blank; ``null`` means
  the default; unknown members become warnings; wrong types raise ``-32602 invalid_params``
  naming the member (``Parameter 'persona.goals' must be an array.``). An unknown
  ``defaultEmotion`` is rejected (Android), synonyms are accepted.
- :meth:`Persona.to_wire` writes all ten fields in wire order.
- :meth:`Persona.instructions` renders the compact system instructions for a small model.
- :meth:`Emotion.matching` reads model output leniently (case, surrounding punctuation,
  synonyms) and returns ``None`` when nothing fits; callers then use the persona's default.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from ..errors import invalid_params
from ._decode import WireObject
from ._text import joined_list, sentence, trimmed_or_none

__all__ = ["Decoded", "Emotion", "Persona", "SecretVisibility", "parse_emotion"]

T = TypeVar("T")


@dataclass(frozen=True)
class Decoded(Generic[T]):
    """A decoded wire value and its ``Unknown parameter '…' was ignored.`` warnings."""

    value: T
    warnings: tuple[str, ...] = ()


class Emotion(enum.StrEnum):
    """How a character feels saying a line; the value is the wire name."""

    NEUTRAL = "neutral"
    HAPPY = "happy"
    SAD = "sad"
    ANGRY = "angry"
    AFRAID = "afraid"
    SURPRISED = "surprised"
    SUSPICIOUS = "suspicious"
    AMUSED = "amused"
    DISGUSTED = "disgusted"
    EXCITED = "excited"
    CURIOUS = "curious"
    CONFUSED = "confused"
    WORRIED = "worried"
    GRATEFUL = "grateful"
    ANNOYED = "annoyed"
    PROUD = "proud"

    @classmethod
    def matching(cls, text: str) -> Emotion | None:
        """Lenient lookup: lowercase, non-letters stripped at both ends, then the exact name or a
        synonym (``mad`` → angry, ``scared`` → afraid, ``gruff`` → annoyed); ``None`` otherwise."""
        key = _strip_non_letters(text.lower())
        found = _BY_NAME.get(key)
        return found if found is not None else _SYNONYMS.get(key)

    @classmethod
    def from_wire(cls, name: str) -> Emotion | None:
        """The emotion whose wire name is exactly ``name`` (case-sensitive), or ``None``."""
        return _BY_NAME.get(name)


_BY_NAME = {e.value: e for e in Emotion}
_SYNONYM_GROUPS = {
    Emotion.NEUTRAL: "calm content indifferent bored",
    Emotion.HAPPY: "joyful glad cheerful pleased friendly warm",
    Emotion.SAD: "unhappy sorrowful melancholy grieving",
    Emotion.ANGRY: "mad furious enraged hostile",
    Emotion.AFRAID: "scared fearful frightened terrified",
    Emotion.WORRIED: "nervous anxious concerned",
    Emotion.SURPRISED: "shocked astonished startled",
    Emotion.SUSPICIOUS: "wary distrustful skeptical sceptical",
    Emotion.AMUSED: "amusement playful laughing",
    Emotion.DISGUSTED: "disgust revolted",
    Emotion.EXCITED: "eager thrilled enthusiastic",
    Emotion.CURIOUS: "interested intrigued",
    Emotion.CONFUSED: "puzzled uncertain",
    Emotion.GRATEFUL: "thankful",
    Emotion.ANNOYED: "irritated grumpy impatient gruff",
    Emotion.PROUD: "confident smug",
}
_SYNONYMS = {word: emotion for emotion, words in _SYNONYM_GROUPS.items() for word in words.split()}


def _strip_non_letters(text: str) -> str:
    start, end = 0, len(text)
    while start < end and not text[start].isalpha():
        start += 1
    while end > start and not text[end - 1].isalpha():
        end -= 1
    return text[start:end]


def parse_emotion(value: Any, path: str) -> Emotion:
    """A wire emotion (synonyms accepted); anything else is ``invalid_params`` naming ``path``."""
    if not isinstance(value, str):
        raise invalid_params(f"Parameter '{path}' must be a string.")
    emotion = Emotion.matching(value)
    if emotion is None:
        names = ", ".join(e.value for e in Emotion)
        raise invalid_params(f"Parameter '{path}' must be one of {names}; got '{value}'.")
    return emotion


class SecretVisibility(enum.StrEnum):
    """How a persona's secrets appear in its instructions."""

    GUARDED = "guarded"  # included, with a rule to keep them
    SHAREABLE = "shareable"  # included; trust is earned
    HIDDEN = "hidden"  # left out: the model cannot leak what it never sees


_WIRE_FIELDS = (
    "name", "role", "personality", "speakingStyle", "backstory",
    "goals", "secrets", "knowledge", "defaultEmotion", "maxSentences",
)


class Persona(msgspec.Struct, frozen=True, kw_only=True):
    """A character sheet. Keep fields short: a small model follows a few crisp lines best."""

    name: str
    role: str = ""
    personality: str = ""
    speaking_style: str = ""
    backstory: str = ""
    goals: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    knowledge: tuple[str, ...] = ()
    default_emotion: Emotion = Emotion.NEUTRAL
    max_sentences: int = 2

    @property
    def sentence_limit(self) -> int:
        """``max_sentences``, at least 1."""
        return max(1, self.max_sentences)

    def instructions(
        self,
        extra: str | None = None,
        *,
        uses_tools: bool = True,
        secret_visibility: SecretVisibility = SecretVisibility.GUARDED,
    ) -> str:
        """Compact system instructions: framing, the sheet, then short rules; ``extra`` last."""
        lines = [f"You play {self._who()}, a character in a video game."]
        lines += self._sheet_lines(secret_visibility)
        lines += self._rules(uses_tools, secret_visibility)
        if (more := trimmed_or_none(extra)) is not None:
            lines.append(more)
        return "\n".join(lines)

    def _who(self) -> str:
        role = trimmed_or_none(self.role)
        return f"{self.name}, {role}" if role else self.name

    def _sheet_lines(self, visibility: SecretVisibility) -> list[str]:
        lines = []
        for label, text in (
            ("Personality", self.personality),
            ("Speaking style", self.speaking_style),
            ("Background", self.backstory),
        ):
            if (trimmed := trimmed_or_none(text)) is not None:
                lines.append(f"{label}: {sentence(trimmed)}")
        if (goals := joined_list(self.goals)) is not None:
            lines.append(f"Goals: {goals}")
        if (knowledge := joined_list(self.knowledge)) is not None:
            lines.append(f"You know: {knowledge}")
        secrets = joined_list(self.secrets)
        if secrets is not None and visibility is not SecretVisibility.HIDDEN:
            lines.append(f"Your secret: {secrets}")
        return lines

    def _rules(self, uses_tools: bool, visibility: SecretVisibility) -> list[str]:
        limit = self.sentence_limit
        lines = [
            "Rules:",
            f"- Speak only as {self.name}. Never say you are an AI, a model or an assistant.",
            f"- Reply in at most {limit} short {'sentence' if limit == 1 else 'sentences'}.",
        ]
        if uses_tools:
            lines.append(
                "- Use your tools to check facts about the world, such as items, prices, people and places. "
                "Never invent them."
            )
            lines.append("- When a tool gives you facts, say the specific ones the player asked about (names, prices, numbers).")
        else:
            lines.append("- If you do not know a fact about the world, say so in character. Never invent it.")
        if joined_list(self.secrets) is not None:
            if visibility is SecretVisibility.GUARDED:
                lines.append("- Keep your secret unless the player has truly earned your trust.")
            elif visibility is SecretVisibility.SHAREABLE:
                lines.append("- The player has earned your trust. You may share your secret if asked.")
        return lines

    # --- wire form ---------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        """All ten fields, in wire order."""
        return {
            "name": self.name,
            "role": self.role,
            "personality": self.personality,
            "speakingStyle": self.speaking_style,
            "backstory": self.backstory,
            "goals": list(self.goals),
            "secrets": list(self.secrets),
            "knowledge": list(self.knowledge),
            "defaultEmotion": self.default_emotion.value,
            "maxSentences": self.max_sentences,
        }

    @classmethod
    def from_wire(cls, value: Any, path: str = "persona") -> Decoded[Persona]:
        """Decode a wire persona under ``path`` (see the module docstring for the rules)."""
        if not isinstance(value, dict):
            raise invalid_params(f"'{path}' must be an object with at least a 'name'.")
        wire = WireObject(value, path)
        name = wire.required_string("name")
        emotion = wire.raw("defaultEmotion")
        persona = cls(
            name=name,
            role=wire.string("role"),
            personality=wire.string("personality"),
            speaking_style=wire.string("speakingStyle"),
            backstory=wire.string("backstory"),
            goals=wire.string_list("goals", ()),
            secrets=wire.string_list("secrets", ()),
            knowledge=wire.string_list("knowledge", ()),
            default_emotion=Emotion.NEUTRAL if emotion is None else parse_emotion(emotion, wire.location("defaultEmotion")),
            max_sentences=wire.integer("maxSentences", 2),
        )
        if not name.strip():
            raise invalid_params(f"'{path}.name' must not be empty.")
        return Decoded(persona, tuple(wire.unknown(_WIRE_FIELDS)))
