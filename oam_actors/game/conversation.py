"""Conversations among NPCs: whose turn it is, how a line is prompted and checked, what each
member and bystander hears. Pure: no actors, no I/O (the conversation actor in
:mod:`oam_actors.objects.conversation` orders the lines; each member's :class:`~.npc.NPC` speaks
its own through :meth:`~.npc.NPC.converse`).

Contract:

- :class:`ConversationState` is an immutable value: the members (NPC id and persona name, in
  the order given), the optional player, the situation, the turn order, the line budget and the
  lines spoken so far. :func:`next_speaker` says who speaks next (a member's id, or
  :data:`PLAYER` when it is the player's turn); :func:`spoken` records a line.
- Turn orders: ``roundRobin`` (members in order, then the player when there is one),
  ``sequence`` (the given ids, repeated), ``model`` (the member, or the player, that the previous
  line addressed; when it addressed nobody in particular, the member who has been silent longest).
  The model chooses by whom its line addresses: no generation is spent on choosing.
- :func:`check_line` is the attribution check of one generated line: it must be spoken by its
  speaker, never as or for another member (a line that goes on as another member is cut there;
  one that begins as another member, or is empty, is rejected and asked again alone).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ..agent.words import whole_word
from ..errors import invalid_params
from ._text import sentence, split_emotion_tag, spoken_line, trimmed_or_none, without_stage_directions
from .memory import HEARD_LINES, OVERHEARD

__all__ = [
    "LINE_REASKS",
    "LINE_SENTENCES",
    "MAX_LINES_SHOWN",
    "MAX_MEMBERS",
    "MIN_MEMBERS",
    "PLAYER",
    "ConversationLine",
    "ConversationState",
    "ConversationView",
    "LineProblem",
    "LineReply",
    "Member",
    "RepairedLine",
    "TurnOrder",
    "addressee_of",
    "check_line",
    "heard_note",
    "judged_line",
    "line_prompt",
    "located_at",
    "lines_from_wire",
    "next_speaker",
    "repair_note",
    "reask_prompt",
    "repaired_line",
    "repeats",
    "spoken",
    "view_for",
]

PLAYER = "player"
"""The speaker id of the player (never an NPC id: an NPC's own id cannot be it in a conversation)."""
MIN_MEMBERS = 2
MAX_MEMBERS = 8
LINE_REASKS = 3
"""How many times a line whose answer cannot be said is asked again alone before the speaker's
fallback line stands in (the first time told what was wrong, then in other words:
:func:`reask_prompt`). Each costs a generation, and only a line that went wrong spends them: a
small model's answer alone fails often enough (about two in five on Qwen2.5-Coder-1.5B replaying
logged conversations) that two re-asks still left about one line in ten a fallback."""
LINE_SENTENCES = 1
"""A conversation line is one sentence: lines come and go quickly, and a short line's reserved answer
lets more of them share a generation."""
MAX_LINES_SHOWN = 12
"""The latest lines a speaker's prompt shows; older ones are in its memory already."""

_LABEL = re.compile(r"^\s*[\"'“*_<(]*([^:\n<>()]{1,40}?)[\"'”*_>)]*\s*:\s*")


class TurnOrder(enum.Enum):
    MODEL = "model"
    ROUND_ROBIN = "roundRobin"
    SEQUENCE = "sequence"


class Member(msgspec.Struct, frozen=True):
    npc: str
    name: str


class ConversationLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line: ``speaker`` is a member's id or :data:`PLAYER`; ``addressee`` likewise, or
    ``None`` (the group)."""

    speaker: str
    name: str
    line: str
    emotion: str | None = None
    addressee: str | None = None
    is_fallback: bool = False
    degraded: str | None = None

    def to_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {
            "speaker": self.speaker, "name": self.name, "line": self.line, "emotion": self.emotion,
            "addressee": self.addressee, "isFallback": self.is_fallback,
        }
        if self.degraded is not None:
            wire["degraded"] = self.degraded
        return wire


def lines_from_wire(values: Sequence[object], path: str) -> list[ConversationLine]:
    """Lines as ``conversation/state`` gives them back; ``-32602`` naming the first bad one."""
    lines = []
    for index, value in enumerate(values):
        if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in ("speaker", "name", "line")):
            raise invalid_params(f"Parameter '{path}[{index}]' must be a line of a conversation/state result.")
        addressee, emotion, degraded = (value.get(k) for k in ("addressee", "emotion", "degraded"))
        lines.append(ConversationLine(
            speaker=value["speaker"], name=value["name"], line=value["line"],
            emotion=emotion if isinstance(emotion, str) else None,
            addressee=addressee if isinstance(addressee, str) else None,
            is_fallback=value.get("isFallback") is True, degraded=degraded if isinstance(degraded, str) else None,
        ))
    return lines


class ConversationState(msgspec.Struct, frozen=True, kw_only=True):
    world: str
    members: tuple[Member, ...]
    situation: str | None = None
    player: str | None = None  # the player's name when the player takes part
    audience: tuple[str, ...] = ()  # bystanders' NPC ids
    location: str | None = None  # NPCs the world state puts here overhear too (located_at)
    order: TurnOrder = TurnOrder.ROUND_ROBIN
    sequence: tuple[str, ...] = ()
    line_budget: int = 20
    lines: tuple[ConversationLine, ...] = ()
    position: int = 0  # turns taken (roundRobin and sequence count on from here)

    @property
    def ids(self) -> list[str]:
        return [m.npc for m in self.members]

    @property
    def ended(self) -> bool:
        return len(self.lines) >= self.line_budget or len(self.members) < MIN_MEMBERS

    @property
    def ambient(self) -> bool:
        """No player: its lines are background work."""
        return self.player is None

    def name_of(self, speaker: str) -> str:
        if speaker == PLAYER:
            return self.player or "Player"
        return next((m.name for m in self.members if m.npc == speaker), speaker)

    def to_wire(self) -> dict[str, object]:
        return {
            "world": self.world,
            "members": [{"npc": m.npc, "name": m.name} for m in self.members],
            "player": self.player,
            "audience": list(self.audience),
            "location": self.location,
            "situation": self.situation,
            "turnOrder": self.order.value,
            "sequence": list(self.sequence),
            "lineBudget": self.line_budget,
            "lines": [line.to_wire() for line in self.lines],
            "position": self.position,
            "ended": self.ended,
        }

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ConversationState:
        """The state ``to_wire`` gave (``ended`` is derived, so ignored); ``ValueError`` or
        ``TypeError`` if it is not one. Checks the shape only: whether its members exist is
        the caller's to check."""
        members = tuple(Member(m["npc"], m["name"]) for m in wire["members"])
        if not all(isinstance(text, str) for m in members for text in (m.npc, m.name)):
            raise ValueError("members must be objects with string 'npc' and 'name'")
        optional = {key: wire.get(key) for key in ("situation", "player", "location")}
        if not isinstance(wire["world"], str) or any(v is not None and not isinstance(v, str) for v in optional.values()):
            raise ValueError("world, situation, player and location must be strings")
        return cls(
            world=wire["world"], members=members, audience=tuple(_strings(wire.get("audience") or [], "audience")),
            order=TurnOrder(wire.get("turnOrder", TurnOrder.ROUND_ROBIN.value)),
            sequence=tuple(_strings(wire.get("sequence") or [], "sequence")),
            line_budget=int(wire.get("lineBudget", 20)), lines=tuple(lines_from_wire(wire.get("lines") or [], "lines")),
            position=int(wire.get("position", 0)), **optional,
        )


def _strings(values: Sequence[object], name: str) -> list[str]:
    if not all(isinstance(value, str) for value in values):
        raise ValueError(f"{name} must hold strings")
    return [str(value) for value in values]


class ConversationView(msgspec.Struct, frozen=True, kw_only=True):
    """What a speaker is shown to say its line: the others by name, the situation, the latest lines
    (``Name: words``, at most :data:`MAX_LINES_SHOWN`), and the line before (the one it answers)."""

    others: tuple[str, ...]
    situation: str | None
    earlier: tuple[str, ...]
    last_label: str
    last_line: str
    background: bool
    said: tuple[str, ...] = ()  # the words of its latest lines (as many as a memory keeps heard)

    @property
    def opening(self) -> bool:
        """No line was said yet: the speaker opens the conversation (its last line is the situation)."""
        return not self.said


class LineReply(msgspec.Struct, frozen=True, kw_only=True):
    """A member's line as its NPC said it (:meth:`~.npc.NPC.converse`): checked, or its fallback."""

    line: str
    emotion: str
    is_fallback: bool = False
    degraded: str | None = None
    retried: bool = False  # the first answer failed the attribution check and was asked again alone


def next_speaker(state: ConversationState) -> str:
    """Who speaks next: a member's id, or :data:`PLAYER`."""
    ids = state.ids
    turn_takers = [*ids, PLAYER] if state.player is not None else ids
    if state.order is TurnOrder.SEQUENCE:
        present = [s for s in state.sequence if s in turn_takers]
        if present:
            return present[state.position % len(present)]
        return ids[state.position % len(ids)]
    if state.order is TurnOrder.ROUND_ROBIN or not state.lines:
        return turn_takers[state.position % len(turn_takers)]
    last = state.lines[-1]
    if last.addressee is not None and last.addressee != last.speaker and last.addressee in turn_takers:
        return last.addressee
    silent = {npc: -1 for npc in ids if npc != last.speaker}
    for index, line in enumerate(state.lines):
        if line.speaker in silent:
            silent[line.speaker] = index
    return min(silent, key=lambda npc: silent[npc]) if silent else ids[0]


def spoken(state: ConversationState, line: ConversationLine) -> ConversationState:
    return msgspec.structs.replace(state, lines=(*state.lines, line), position=state.position + 1)


def view_for(state: ConversationState, speaker: str) -> ConversationView:
    """What ``speaker`` is shown for its next line."""
    labelled = [f"{line.name}: {line.line}" for line in state.lines[-MAX_LINES_SHOWN:]]
    said = tuple(line.line for line in state.lines[-HEARD_LINES:])
    names = [m.name for m in state.members if m.npc != speaker]
    if state.player is not None:
        names.append(state.player)
    if labelled:
        last = state.lines[-1]
        return ConversationView(others=tuple(names), situation=state.situation, earlier=tuple(labelled[:-1]),
                                last_label=last.name, last_line=last.line, background=state.ambient, said=said)
    return ConversationView(others=tuple(names), situation=state.situation, earlier=(), last_label="Situation",
                            last_line=trimmed_or_none(state.situation) or "The conversation begins.",
                            background=state.ambient)


def line_prompt(view: ConversationView, speaker: str) -> str:
    """The prompt of a speaker's line when it runs alone (a coalesced one shows the same)."""
    lines = [f"A conversation between you ({speaker}) and {', '.join(view.others)}."]
    lines.extend(view.earlier)
    lines.append(f"{view.last_label}: {view.last_line}")
    lines.append(f"Say your next line as {speaker} only, in one sentence: only the words {speaker} says aloud, "
                 "in the first person, with no narration.")
    return "\n".join(lines)


class RepairedLine(msgspec.Struct, frozen=True):
    """A generated line in the shape a conversation line has: its emotion tag (``None`` when it
    had none) and its words."""

    tag: str | None
    line: str


_REFUSAL = re.compile(
    r"\bas an ai\b|\b(?:ai )?language model\b|\bi(?:'m| am) (?:just |only )?an? (?:ai|assistant|virtual assistant)\b"
    r"|\bi (?:cannot|can'?t|am unable to|'m unable to) (?:assist|comply|fulfil+)\b"
    r"|\bi (?:cannot|can'?t) help (?:you )?with (?:that|this|your request)\b"
    r"|\bi(?:'m| am) (?:just |only )?here to (?:help|assist)(?: you)?\s*[.!]?\s*$"
    # an apology and a bare "I can't help." (nothing said of what): an assistant declining
    r"|\b(?:sorry|apologi[sz]e)\b[^.!?]{0,40}\bi (?:cannot|can'?t|am unable to|'m unable to) "
    r"(?:help|assist|participate|provide|engage|comply|continue)(?: you)?(?: (?:in|with) (?:that|this))?\s*(?:[.!]|$)",
    re.IGNORECASE)
_ECHOED = re.compile(r"\b(?:says? aloud|in the first person|with no narration|the spoken words only|"
                     r"(?:next|one) (?:line|sentence) as)\b", re.IGNORECASE)
"""Words of a line's own prompt (:func:`line_prompt`, :func:`reask_prompt`), which a line never says."""
_BRACKETED_LABEL = re.compile(r"^\[(?=[^\[\]:\n]{1,40}:)")
"""An opening bracket before a speaker label (``[Gorm: Well, …``): the label is what follows it."""
_ANGLE_TAG = re.compile(r"^<\s*([A-Za-z][A-Za-z -]{0,20}?)\s*>(?!\s*:)\s*")
_WRAPPER = re.compile(r"^<([^<>]+)>\s*(?:$|<)")
_NARRATED = re.compile(r"^(?P<who>[^\"“”<>\[\].!?:]{1,80}?)\s*[,:]\s*[\"“](?P<quote>[^\"“”]+)(?:[\"”]|$)")
_QUOTE_THEN_NARRATION = re.compile(r"^[\"“](?P<quote>[^\"“”]+)[\"”]\s*,?\s*(?P<who>[^\"“”]{1,60})$")
_NARRATOR_START = re.compile(r"^(?:the|a|an|he|she|they|his|her)\b", re.IGNORECASE)
_NARRATION_WORDS = 5
"""Words after another member's name that a narration of it has at most (``Odo nods slowly at Gorm.``)."""
_GESTURE = re.compile(r"\s*,\s*\w+ing\b|\s+and\s+\w+(?:s|ed)\b|\s+\w+ing\b", re.IGNORECASE)
"""What goes on after the verb of a narration: a participle (``, looking down``, ``starts
laughing``) or a second verb (``and shrugs``)."""
_PARTICIPLE = re.compile(r",\s*\w+(?:ing|ed)\b|\s+and\s+(?:then\s+)?\w+(?:s|ed)\b", re.IGNORECASE)
"""A participle after a comma, or a second verb, later in a narration (``Elsa looks thoughtful,
pondering …``, ``Ulf sighs, relieved …``, ``Elsa rolled her eyes and continued …``)."""
_QUOTED_PART = re.compile(r"[\"“][^\"“”]*(?:[\"”]|$)")
_SPEAKING_WORDS = frozenset({"i", "i'm", "i've", "i'll", "i'd", "me", "my", "mine", "we", "we're", "us", "our",
                             "you", "you're", "your", "yours", "let's"})
_NOT_VERBS = frozenset({"is", "was", "has", "this", "us", "yes", "his", "its", "as", "thus", "always", "perhaps"})


class LineProblem(enum.Enum):
    """Why a generated line cannot be said as it is (it is asked again alone, told so:
    :func:`repair_note`); the value says what the answer did."""

    REFUSAL = "spoke as an assistant, out of character"
    WORDLESS = "had no words, only an emotion tag or a stage direction"
    NARRATED = "narrated what someone does instead of giving spoken words"
    MISATTRIBUTED = "was spoken as another character"
    REPEATED = "repeated the line before it word for word"
    ECHOED = "repeated the instructions instead of saying a line"


def repair_note(problem: LineProblem, speaker: str) -> str:
    """What the prompt of a line asked again adds: what was wrong, and what to say instead."""
    return f"Your last answer {problem.value}. Now say, in words, only what {speaker} says aloud, in the first person."


_OTHER_WORDS = {
    LineProblem.REFUSAL: "This is a scene of a story in a video game, and {speaker} is one of its characters.",
    LineProblem.WORDLESS: "{speaker} must say something aloud this time: words, not a feeling or a gesture.",
    LineProblem.NARRATED: "Write what {speaker} says, not what anyone does: the words {speaker} speaks, as {speaker}.",
    LineProblem.MISATTRIBUTED: "Write {speaker}'s words only, with no name before them: the others have spoken.",
    LineProblem.REPEATED: "{speaker} says something new, in other words than the lines above.",
    LineProblem.ECHOED: "{speaker} talks about the conversation above, in character.",
}


def reask_prompt(view: ConversationView, speaker: str, problem: LineProblem, *, other_words: bool = False) -> str:
    """The prompt of a line asked again because its answer had ``problem``: the line's prompt
    and the :func:`repair_note`; ``other_words`` (each time after the first), only the
    line it answers (a small model copies a line it is shown, and the earlier ones are what it
    copied) and a different instruction, one that names what went wrong in other words (a small
    model that ignored one wording often follows another)."""
    if not other_words:
        return f"{line_prompt(view, speaker)}\n{repair_note(problem, speaker)}"
    lines = [f"{speaker} is talking with {', '.join(view.others)}.", f"{view.last_label}: {view.last_line}",
             _OTHER_WORDS[problem].format(speaker=speaker),
             f"What does {speaker} say first? One sentence, the spoken words only." if view.opening else
             f"What does {speaker} answer {view.last_label}? One sentence, the spoken words only."]
    return "\n".join(lines)


def repaired_line(text: str, speaker: str, role: str | None = None, others: Sequence[str] = ()) -> RepairedLine | LineProblem:
    """The line a speaker's generated ``text`` holds, in a conversation line's shape, or the
    :class:`LineProblem` no deterministic repair undoes (then it is asked again alone): a refusal
    or assistant-speak, no words left, or third-person narration of the speaker, or of one of
    ``others`` (the other members' names), without a quote (``Gorm nods.``, ``Odo smiles at
    her.``). Repaired: the first non-blank line only; a leading ``<happy>`` tag read as
    ``[happy]``; a line wrapped in ``<…>`` (the first wrapped part is the line, a second one is
    another line copied); narration wrapping a quote (``The village blacksmith grunted, "…"``,
    ``"…," Gorm said.``, ``Odo smiles, "…"``) gives the quote; stage directions (``[laughing]``,
    ``*sighs*``, a leading ``(…)``) and quotes around the whole line go; the speaker's own name
    spoken to itself (``I'm sorry, Ulf.`` said by Ulf) goes. The attribution check
    (:func:`check_line`) comes after (:func:`judged_line` does both)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if _REFUSAL.search(line):
        return LineProblem.REFUSAL
    if _ECHOED.search(line):
        return LineProblem.ECHOED
    if _BRACKETED_LABEL.match(line):
        line = line[1:].removesuffix("]")
    tag = None
    if (angle := _ANGLE_TAG.match(line)) is not None:
        tag, line = angle.group(1).strip(), line[angle.end():]
    split = split_emotion_tag(line)
    if split.tag is not None:
        tag, line = tag or split.tag.strip(), split.rest
    if (wrapped := _WRAPPER.match(line)) is not None:
        line = wrapped.group(1)
    for name in (speaker, *others):  # a member's name in brackets is a label (``… [Odo] Let's go.``)
        line = _bracketed_name(name).sub(lambda found: f" {found.group(1)}: ", line).strip()
    line = _quoted(line.strip(), speaker, role, others)
    line = spoken_line(without_stage_directions(line), speaker)
    line = _unaddressed(line, speaker)
    if not any(c.isalnum() for c in line):
        return LineProblem.WORDLESS
    if _narrates(line, speaker, role) or any(_narrates_other(line, other, speaker) for other in others):
        return LineProblem.NARRATED
    return RepairedLine(tag, line)


def judged_line(text: str, speaker: str, role: str | None, view: ConversationView) -> RepairedLine | LineProblem:
    """``text`` as the line ``speaker`` says next in ``view``'s conversation: repaired
    (:func:`repaired_line`), checked (:func:`check_line`) and not the line it answers again
    (:func:`repeats`); else what is wrong with it. (An earlier line said again is let be: a
    crowd's canned lines repeat, and asking again for each costs generations a batch saves.)"""
    repaired = repaired_line(text, speaker, role, view.others)
    if isinstance(repaired, LineProblem):
        return repaired
    line = check_line(repaired.line, speaker, view.others)
    if line is None:
        return LineProblem.MISATTRIBUTED
    if repeats(line, (view.last_line,)):
        return LineProblem.REPEATED
    return RepairedLine(repaired.tag, line)


def _narrator(words: str, speaker: str, role: str | None, others: Sequence[str] = ()) -> bool:
    """Whether ``words`` (before or after a quote) narrate who speaks: the speaker, another
    member, a pronoun, an article or a word of its role as subject, and a verb of saying (``The
    village blacksmith grunted``, ``Gorm said``, ``Odo smiles``)."""
    parts = [part.casefold() for part in words.strip(" ,.").split()]
    if not parts or len(parts) > 8:
        return False
    names = (speaker, *others)
    subjects = {*(n.casefold() for n in names), *(w.casefold() for n in names for w in n.split()),
                *(role or "").casefold().split()}
    subject = parts[0] in subjects or _NARRATOR_START.match(words.strip()) is not None
    return subject and any(_saying(part) for part in parts[1:] or parts)


def _saying(word: str) -> bool:
    """A verb, as narration has it: ``said``, ``grunted``, ``mutters``."""
    return word not in _NOT_VERBS and (word in {"say", "said"} or word.endswith(("ed", "s")))


def _quoted(line: str, speaker: str, role: str | None, others: Sequence[str]) -> str:
    """The quote that third-person narration wraps, else ``line``."""
    if (narrated := _NARRATED.match(line)) is not None and _narrator(narrated.group("who"), speaker, role, others):
        return narrated.group("quote").strip()
    if (after := _QUOTE_THEN_NARRATION.match(line)) is not None and _narrator(after.group("who"), speaker, role,
                                                                                others):
        return sentence(after.group("quote").strip().rstrip(",").strip())
    return line


def _unaddressed(line: str, speaker: str) -> str:
    """``line`` without the speaker's own name spoken to itself (``I'm sorry, Ulf.``, ``Ulf, I…``)."""
    if not speaker.strip():
        return line
    after, before = _addressing(speaker.strip())
    text = after.sub("", line)
    text = before.sub(lambda m: m.group(1) + m.group(2).upper(), text)
    return text.strip()


def _narrates(line: str, speaker: str, role: str | None) -> bool:
    """Whether ``line`` narrates its speaker in the third person: its name, or "the" and its
    role's last word, as the subject of a verb (``Gorm nods.``, ``The blacksmith is pleased.``,
    ``Gorm's heart sinks.``)."""
    noun = role.split()[-1] if role is not None and role.split() else None
    return _narrator_subject(speaker.strip(), noun).match(line) is not None


def _narrates_other(line: str, name: str, speaker: str) -> bool:
    """Whether ``line`` narrates another member: its name as the subject of a verb, a few words
    at most, a gesture going on (``, looking down``, ``starts laughing``, a participle after a
    later comma or a second verb: ``Elsa looks thoughtful, pondering …``, ``Elsa rolled her eyes
    and continued …``) or the speaker named in the third person
    (``Ulf looks at Sela, who smiles back.`` said by Sela), and no one speaking in the first or
    second person outside quotes (``Odo nods.``, ``Odo sighs, looking down at the empty
    barrel.``, ``Gorm starts laughing, thinking "I've …"``; not ``Odo says the road is closed,
    and I believe him.``)."""
    subject = _narrator_subject(name.strip(), None).match(line) if name.strip() else None
    if subject is None or (subject.group(1) or "").casefold() in _NOT_VERBS:
        return False
    unquoted = _QUOTED_PART.sub(" ", line)  # a thought in quotes is not the line speaking
    words = re.findall(r"[\w']+", unquoted.casefold())
    short = len(words) <= len(name.split()) + _NARRATION_WORDS
    gesture = (_GESTURE.match(unquoted, subject.end()) is not None
               or _PARTICIPLE.search(unquoted, subject.end()) is not None
               or bool(speaker.strip()) and whole_word(speaker.strip()).search(unquoted, subject.end()) is not None)
    return (short or gesture) and _SPEAKING_WORDS.isdisjoint(words)


def repeats(line: str, said: Sequence[str]) -> bool:
    """Whether ``line`` says again, word for word (case and punctuation aside), a line of the
    conversation: a small model copies the line it answers."""
    key = _words(line)
    return bool(key) and any(_words(earlier) == key for earlier in said)


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def check_line(line: str, speaker: str, others: Sequence[str]) -> str | None:
    """The line as ``speaker`` may say it, or ``None`` when it must be asked again: it begins as
    another member (``Other: …``) or is empty. A line that goes on as another member (``… Other:
    …``), or as its speaker again (a second line, ``… Gorm: …`` said by Gorm), is cut there."""
    text = line.strip()
    label = _LABEL.match(text)
    if label is not None:
        name = label.group(1).strip()
        if any(name.casefold() == other.casefold() for other in others):
            return None
        if name.casefold() == speaker.casefold():
            text = text[label.end():]
    for name in (*others, speaker):
        found = _label_of(name).search(text)
        if found is not None:
            text = text[:found.start(1)].rstrip()
    return text.strip() or None


# A crowd's names are many more than ``re``'s own cache holds: each name's patterns are kept here.
@functools.lru_cache(maxsize=8192)
def _label_of(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?:^|[\s\"'“])({re.escape(name)})\s*:", re.IGNORECASE)


@functools.lru_cache(maxsize=8192)
def _bracketed_name(name: str) -> re.Pattern[str]:
    return re.compile(rf"\[\s*({re.escape(name.strip())})\s*\]", re.IGNORECASE)


@functools.lru_cache(maxsize=8192)
def _addressing(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """``name`` spoken to after a comma (``I'm sorry, Ulf.``) and before one at a sentence's start
    (``Ulf, I…``: the next word's letter is capitalised in its place)."""
    escaped = re.escape(name)
    return (re.compile(rf",\s*{escaped}(?=\s*[.!?,;]|\s*$)", re.IGNORECASE),
            re.compile(rf"(^|[.!?]\s+){escaped},\s*(\w)", re.IGNORECASE))


@functools.lru_cache(maxsize=8192)
def _narrator_subject(name: str, noun: str | None) -> re.Pattern[str]:
    """``name`` (or "the" and a role's ``noun``) as the subject of a verb at a line's start; the
    verb is group 1 (``Gorm nods``, ``The old blacksmith is``, ``Gorm's heart``)."""
    names = [re.escape(name)] + ([rf"the\s+(?:[\w-]+\s+){{0,3}}{re.escape(noun)}"] if noun else [])
    return re.compile(rf"\W*(?:{'|'.join(names)})(?:'s\s+\w|\s+(\w+(?:s|ed))\b)", re.IGNORECASE)


def addressee_of(line: str, speaker: str, state: ConversationState) -> str | None:
    """Whom ``line`` addresses: the first other member (or the player) it names, else ``None``."""
    best: tuple[int, str] | None = None
    candidates = [(m.npc, m.name) for m in state.members if m.npc != speaker]
    if state.player is not None and speaker != PLAYER:
        candidates.append((PLAYER, state.player))
    for npc, name in candidates:
        found = whole_word(name).search(line)
        if found is not None and (best is None or found.start() < best[0]):
            best = (found.start(), npc)
    return best[1] if best is not None else None


def located_at(npcs: object, location: str) -> list[str]:
    """The NPC ids the world state's ``npcs`` object puts at ``location`` (``npcs.<id>.location``)."""
    if not isinstance(npcs, dict):
        return []
    return [npc for npc, where in npcs.items() if isinstance(where, dict) and where.get("location") == location]


def heard_note(state: ConversationState, line: ConversationLine, listener: str, *, overheard: bool) -> str:
    """One line as ``listener`` (an NPC id) remembers it: who said what, to whom."""
    speaker = "You" if line.speaker == listener else line.name
    if line.addressee is None:
        target = ""
    elif line.addressee == listener:
        target = " to you"
    else:
        target = f" to {state.name_of(line.addressee)}"
    prefix = OVERHEARD if overheard else ""
    return f"{prefix}{speaker}{target}: {line.line}"
