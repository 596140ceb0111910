"""The coalescing policy: which waiting steps may share one generation, the batch prompt,
reading the batch's answer back per item, and how long NPC work lingers for company. Pure: no
I/O, no actors, no clock (:class:`QueuePressure` is given the time).

- :class:`CoalesceSettings` says how long a new batch lingers; by default only while its
  priority's steps had to queue at the backend, or did within the last half quota window
  (:class:`QueuePressure`), one backend second (:data:`ADAPTIVE_LINGER`, scaled by
  ``time_scale``), never for a player's dialogue.
- :func:`batch_key` says what may be combined: steps carrying a combinable
  :data:`~oam_actors.agent.model.BatchItem` of the same kind, priority and sampling. ``None``
  means "run it alone" (no item, a repair, tools offered to a step that is not a talk's tool
  choice, or an item whose answer could not be read back from one line or would crowd the
  batch: a decision with an option id holding spaces or ``|``, too many options or tools, a
  reply or tool choice whose conversation is over :data:`REPLY_ITEM_TOKENS`).
- :func:`apart` says which items of one key must still not share a generation (lines of
  conversations whose characters share a name: the check for content carried across could not
  tell them apart).
- :func:`pack` counts how many of the waiting steps fit one generation: at most ``max_items``,
  the prompt plus the reserved answer within the backend's context, the answers within its
  output limit.
- :func:`batch_request` is the one generation: one shared instruction block (system), the items
  numbered (prompt). Lines of conversations among NPCs (unlabelled reply items) have a form of
  their own, ``3. [emotion] words``: the item's heading names its speaker, so the answer does not
  repeat it (the output per line is then the line, its tag and its number); read back as a
  reply is (a label, if the model writes one anyway, must be the item's own speaker), and the
  other members of every other conversation of the batch count as its other characters: a
  line naming one carries content across conversations and runs alone.
- :func:`read_batch` splits the answer: numbered lines, read leniently (``3. …``, ``3: …``,
  ``[3] …``, ``Item 3 - …``), never one JSON document (a small model breaks JSON arrays of lines
  with unescaped quotes). Each item is checked on its own: a bark must be one non-empty line
  that neither speaks as nor names another character of the batch (a talk's reply keeps its
  ``[emotion]`` tag); a decision must name one of its own option ids; a talk's tool choice must
  be a step envelope naming one of its own tools (or respond where it may); a structured reply
  must fit its own NPC's reply schema (below). The result per item is
  :class:`Answer` (the text the step itself would have received: the line, the reply, or the
  decision's or structured reply's JSON object) or :class:`Unanswered` with the
  reason, and the caller runs that step alone.

Structured replies (:class:`~oam_actors.agent.model.StructuredReplyItem`) are answered in a
compact line, not JSON: ``3. Name: [emotion] reply words [end] >> option one | option two``
(``[end]`` only where the NPC may end the conversation and does; ``>>`` and the options only
where it has player options). Why not one JSON object per line: a small model breaks JSON
written inline (unescaped quotes in spoken lines, the problem that ruled out a JSON array for
barks), and the keys and quotes of ``{"emotion": …, "line": …, "player_options": […],
"ends_conversation": …}`` cost about 20 tokens an item: in a phone's 256-token answer, three
items' keys take most of the room of a fourth item. The compact line extends the text reply's form (the same label and
``[emotion]`` tag, read by the same checks) with two markers a reply's words never hold. Read
back, each field is checked by that NPC's own schema (an emotion of its own list, at least one
player option where it has some), no part speaks as or names another character of the batch,
and the line becomes the JSON object the structured step alone would have written, keys as its
schema has them: as from that step's own JSON, options past its count and what its schema has
no field for (options, ``[end]``) are dropped (Qwen2.5-Coder-1.5B copies the first item's form
to the others: three options and ``[end]`` for an NPC with none).
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ...agent.envelope import Call, Respond, parse_envelope
from ...agent.lenient_json import find_json
from ...agent.words import distinctive_words, whole_word
from ...agent.model import (
    BarkItem,
    BatchItem,
    DecisionItem,
    GenerationRequest,
    ModelCapabilities,
    ReplyItem,
    StepKind,
    StructuredReplyItem,
    ToolChoiceItem,
    estimate_tokens,
)

__all__ = [
    "ADAPTIVE_LINGER",
    "BARK_TASK",
    "DECISION_TASK",
    "LINE_TASK",
    "PRESSURE_HOLD",
    "REPLY_ITEM_TOKENS",
    "REPLY_TASK",
    "STRUCTURED_REPLY_TASK",
    "TOOL_CHOICE_TASK",
    "Answer",
    "CoalesceSettings",
    "QueuePressure",
    "Unanswered",
    "Why",
    "apart",
    "batch_key",
    "batch_request",
    "combinable",
    "pack",
    "read_batch",
]

MAX_OPTIONS = 12
"""A decision with more options runs alone: its option list would crowd the batch."""
# What packing counts per item against the backend's output limit, from Qwen2.5-Coder-1.5B's
# coalesced answers (its tokenizer, newline included). Bark lines: 19-27 tokens (mean 22) when
# asked for 15 words; 16.2 and 18.9 per item in two batches of ten asked for 12. Decision lines:
# 17-20 (mean 18.5) for a 12-word reason, then 29-32 (mean 29.3, a batch of ten) for an 8-word one
# (the model named the character and wrote two sentences). A cut-off item costs a whole generation,
# so each estimate sits at the top of what was seen: ten barks or eight decisions fit a Nano
# phone's 256 output tokens. A batch may still write up to half as much again (_OUTPUT_HEADROOM,
# within the backend's limits); an answer cut off at its limit costs only the items it lost a
# retry alone (read_batch's ``truncated``).
_BARK_ANSWER_TOKENS = 24  # "10. Name: " (6) + 12 words in quotes (~16) + newline
_DECISION_ANSWER_TOKENS = 30  # "10. option_id | 80 | " (~10) + a reason (~19) + newline
_ANSWER_OVERHEAD_TOKENS = 16
_OUTPUT_HEADROOM = 1.5
_REPLY_LABEL_TOKENS = 12  # "3. Name: [emotion] "
_LINE_LABEL_TOKENS = 6  # "3. [emotion] "
_REPLY_SENTENCE_TOKENS = 24
_PLAYER_OPTION_TOKENS = 5  # " | Tell me more."
_MARK_TOKENS = 1  # " >>" before the options, " [end]"
_TOOL_CHOICE_ANSWER_TOKENS = 40  # '3. {"action": "check_menu", "arguments": {"item": "ale"}}': six fit 256
REPLY_ITEM_TOKENS = 900
"""A reply whose item (character, whole conversation, tool results) is larger runs alone: a
batch never shortens an NPC's context."""

BARK_TASK = "Write one line for each character above."
DECISION_TASK = "Make each decision above."
REPLY_TASK = "Write the reply of each character above."
LINE_TASK = "Write the next line of each conversation above."
STRUCTURED_REPLY_TASK = "Write the reply and the player options of each character above."
TOOL_CHOICE_TASK = "Choose the next step of each character above."
"""The last line of a batch prompt (the simulated phone recognises a batch by it)."""

_BARK_SYSTEM = """\
You write short ambient lines for characters in a video game.
Each numbered character below is a different person in a different moment.
For each character, write the one short sentence that character says aloud right now, in their own voice.
Rules:
- One sentence of at most 12 words per character.
- Every line belongs to its own character only: never speak as another character of the list and never name them.
- No narration, no actions, no quotation marks. Never say you are an AI.
- Answer with exactly {count} lines, in the order given, one per character, each written as: <number>. <name>: <line>
Example of the form:
{example}"""

_DECISION_SYSTEM = """\
You make decisions for characters in a video game.
Each numbered decision below is separate, for its own character and situation.
For each decision, pick the option that best fits that character and situation.
Rules:
- Use only an option id listed under that same decision.
- The reason is at most 8 words about that decision's own character.
- Answer with exactly {count} lines, in the order given, one per decision, each written as: <number>. <option id> | <confidence from 0 to 100> | <one short reason>
Example of the form:
{example}"""

_REPLY_SYSTEM = """\
You write what characters in a video game say to the player.
Each numbered conversation below is separate: a different character, talking with the player somewhere else.
For each conversation, write that character's reply to the player's last line, in their own voice, using what that conversation says and its tool results where they matter.
Rules:
- Keep each reply within the number of sentences given for it, on one line.
- Begin each reply with the character's current emotion in square brackets, such as [happy] or [angry].
- Every reply belongs to its own character only: never speak as another character of the list and never name them.
- No narration, no quotation marks, no tool results in brackets. Never say you are an AI.
- Answer with exactly {count} lines, in the order given, one per conversation, each written as: <number>. <name>: [<emotion>] <reply>
Example of the form:
{example}"""

_LINE_SYSTEM = """\
You write the next line of conversations among characters in a video game.
Each numbered conversation below is separate, somewhere else; its heading names the character who speaks next.
For each conversation, write the words that character says aloud next, in the first person and in their own voice, answering what was said last.
Rules:
- One sentence per line.
- Begin each line with the character's current emotion in square brackets, such as [happy] or [angry].
- Every line belongs to the character its heading names: never speak as anyone else, and do not write the speaker's name.
- The conversations know nothing of each other: a line never mentions anyone or anything from another conversation.
- Only the spoken words: never describe the character (no "The blacksmith nods", no "she says"), no actions, no quotation marks, no angle brackets. Never say you are an AI.
- Answer with exactly {count} lines, in the order given, one per conversation, each written as: number. [emotion] spoken words
Example of the form:
{example}"""

_STRUCTURED_REPLY_SYSTEM = """\
You write what characters in a video game say to the player, and what the player could say next.
Each numbered conversation below is separate: a different character, talking with the player somewhere else.
For each conversation, write that character's reply to the player's last line, in their own voice, using what that conversation says and its tool results where they matter.
Rules:
- Keep each reply within the number of sentences given for it, on one line.
- Begin each reply with the character's current emotion in square brackets, one of that conversation's Emotions.
- Where a conversation asks for player options, write >> after the reply, then that many short, different things the player could say next, separated by |. Where it asks for none, write no >>.
- Only where a conversation says the character may end it: write [end] right after the reply if the character says goodbye or refuses to talk any more.
- Every reply belongs to its own character only: never speak as another character of the list and never name them.
- No narration, no quotation marks, no tool results in brackets. Never say you are an AI.
- Answer with exactly {count} lines, in the order given, one per conversation, each written as: <number>. <name>: [<emotion>] <reply> >> <player option> | <player option>
Example of the form:
{example}"""

_TOOL_CHOICE_SYSTEM = """\
You decide what characters in a video game do next while they talk with the player.
Each numbered conversation below is separate: a different character, talking with the player somewhere else, with its own tools.
For each conversation, pick that character's next step: a tool of its own list when it does what the player asks or looks up what they want to know, or respond when no tool fits or the conversation already has what is needed.
Rules:
- Use only a tool listed under that same conversation, with arguments that fit its Arguments.
- Answer with exactly {count} lines, in the order given, one per conversation, each written as: <number>. {{"action": "<tool name or respond>", "arguments": {{...}}}}
Example of the form:
{example}"""


ADAPTIVE_LINGER = 1.0
"""Backend seconds a new batch of NPC work lingers while its priority queues at the backend: one
phone second on a pool (a phone admits at most one step a phone second, so a bark lingers no
longer than two of one phone's steps stand apart); one real second on a proxy, which runs in real
time: short beside what a step queueing for a per-minute quota waits anyway, or a bark's deadline."""
QUEUED_AFTER = 0.5
"""Backend seconds a step waited for admission that count as having queued: free capacity admits
at once; a pool's phones pace their steps a phone second apart."""
PRESSURE_HALF_LIFE = 2.0
"""Backend seconds over which a step's having queued (or not) counts half as much."""
PRESSURE_HOLD = 30.0
"""Backend seconds NPC work keeps lingering after its steps last had to queue: half a rolling
quota window (Nano's 60 phone seconds, a proxy's minute), by when on average half of what a burst
spent is back. Lingering removes its own evidence (a batch that lingered is admitted at once, so
within a few half-lives its steps look unqueued), but what the phones spent in a burst of small
batches comes back only over the next window: without the hold, NPC work stops lingering while
quota is still short, spends it a step a generation, and queues again."""


class CoalesceSettings(msgspec.Struct, frozen=True, kw_only=True):
    """``max_items`` per generation (1 turns coalescing off). How long a new batch of NPC work
    (barks, decisions: every priority below dialogue) waits for company before it queues at the
    backend: ``linger_seconds`` always, 0 never; ``None`` (the default) adapts: while steps of its
    priority had to queue recently, or did within the last :data:`PRESSURE_HOLD` backend seconds
    (:class:`QueuePressure`), :data:`ADAPTIVE_LINGER` backend seconds, and not at all while the
    backend has had free capacity that long. ``time_scale`` is real seconds
    per backend second (a simulated farm's ``farm_time_scale``; 1 for real phones and proxies).
    ``dialogue_linger_seconds`` is the same for a player's dialogue (a talk's tool choices and
    reply), which by default never waits, quota short or not."""

    max_items: int = 10
    linger_seconds: float | None = None
    dialogue_linger_seconds: float = 0.0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ValueError("max_items must be at least 1")
        for name in ("linger_seconds", "dialogue_linger_seconds"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number of at least 0")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError("time_scale must be a number greater than 0")

    @property
    def adaptive(self) -> bool:
        """Whether NPC work lingers only while its priority queues."""
        return self.linger_seconds is None

    def linger_for(self, priority: str, *, queueing: bool = False) -> float:
        """How long a new batch of ``priority`` waits for company; ``queueing``: its priority's
        recent steps had to queue at the backend (what the adaptive linger goes by)."""
        if priority == "dialogue":
            return self.dialogue_linger_seconds
        if self.linger_seconds is not None:
            return self.linger_seconds
        return ADAPTIVE_LINGER * self.time_scale if queueing else 0.0

    def queued(self, waited: float) -> bool:
        """Whether a step that waited ``waited`` real seconds for admission had to queue."""
        return waited >= QUEUED_AFTER * self.time_scale

    def pressure(self) -> QueuePressure:
        """A fresh record of whether one priority's steps queue, in this backend's time."""
        return QueuePressure(PRESSURE_HALF_LIFE * self.time_scale, hold=PRESSURE_HOLD * self.time_scale)


class QueuePressure:
    """Whether one priority's recent steps had to queue at the backend: the share of them that
    did, each counting half as much every ``half_life`` seconds, held against one more step that
    did not queue, so the share fades when steps stop coming (an idle backend has free capacity):
    it takes about a step's worth of queueing within the last ``half_life``, and at least half of
    the steps since, to linger. Once lingering, it stays so for ``hold`` seconds after that last
    held (:data:`PRESSURE_HOLD`). Pure: the caller gives the time."""

    __slots__ = ("_at", "_half_life", "_hold", "_queued", "_steps", "_until")

    def __init__(self, half_life: float, *, hold: float = 0.0) -> None:
        self._half_life = half_life
        self._hold = hold
        self._at = -math.inf
        self._until = -math.inf  # lingering until then, whatever the share
        self._queued = self._steps = 0.0

    def record(self, now: float, *, queued: bool) -> None:
        """A step was admitted (or taken, or expired) at ``now``, having queued or not."""
        self._decay(now)
        self._steps += 1.0
        self._queued += queued

    def queueing(self, now: float) -> bool:
        """Whether at least half of the recent steps (and the one more) queued, now or within
        the last ``hold`` seconds."""
        self._decay(now)
        if self._queued > 0 and 2 * self._queued >= self._steps + 1:
            self._until = now + self._hold
            return True
        return now < self._until

    def _decay(self, now: float) -> None:
        if now > self._at:
            if self._steps:
                kept = 0.5 ** ((now - self._at) / self._half_life)
                self._queued *= kept
                self._steps *= kept
            self._at = now


class Why(enum.StrEnum):
    """Why an item of a batch was not answered from it."""

    MISSING = "missing"  # no line for it (or the answer was cut off before it)
    INVALID = "invalid"  # a line, but not a usable answer
    MISATTRIBUTED = "misattributed"  # speaks as, or names, another character of the batch


class Answer(msgspec.Struct, frozen=True):
    """The text the item's own step receives, as if it had run alone."""

    text: str


class Unanswered(msgspec.Struct, frozen=True):
    """The item must run alone; ``detail`` says what was wrong (for logs and tests)."""

    why: Why
    detail: str = ""


ItemResult = Answer | Unanswered


# --- what may be combined ------------------------------------------------------------------------

_OPTION_ID = re.compile(r"[^\s|,;=()\[\]]+")
_EMOTION_WORD = re.compile(r"[A-Za-z][A-Za-z _-]{0,29}")  # written inside [...] and read back


def combinable(item: BatchItem) -> bool:
    """Whether an answer to ``item`` can be written, and read back, as one numbered line."""
    match item:
        case BarkItem(speaker=speaker):
            return bool(speaker.strip()) and "\n" not in speaker and ":" not in speaker
        case ReplyItem(speaker=speaker):
            return (bool(speaker.strip()) and "\n" not in speaker and ":" not in speaker
                    and _reply_tokens(item) <= REPLY_ITEM_TOKENS)
        case StructuredReplyItem(talk=talk, emotions=emotions):
            return (combinable(talk) and bool(emotions) and all(_EMOTION_WORD.fullmatch(e) for e in emotions)
                    and _reply_tokens(item) <= REPLY_ITEM_TOKENS)
        case ToolChoiceItem(talk=talk, names=names, tools=tools):
            speaker = talk.speaker
            return (bool(speaker.strip()) and "\n" not in speaker and ":" not in speaker and bool(names)
                    and len(tools) <= MAX_OPTIONS and all(_OPTION_ID.fullmatch(n) for n in names)
                    and "respond" not in {n.casefold() for n in names}
                    and _reply_tokens(item) <= REPLY_ITEM_TOKENS)
        case DecisionItem(options=options):
            ids = [o.id for o in options]
            return (2 <= len(ids) <= MAX_OPTIONS and len({i.casefold() for i in ids}) == len(ids)
                    and all(_OPTION_ID.fullmatch(i) for i in ids))
    return False


def batch_key(request: GenerationRequest) -> Hashable | None:
    """What ``request`` may share a generation with, or ``None`` to run it alone."""
    item = request.item
    if item is None or request.is_repair or not combinable(item):
        return None
    if request.tools and not isinstance(item, ToolChoiceItem):
        return None  # only a tool choice offers tools: the batch answers with its envelope
    # Unlabelled reply items (conversation lines) are answered in a form of their own.
    kind = "line" if isinstance(item, ReplyItem) and item.unlabelled else type(item).__name__
    return (kind, request.priority, request.temperature, request.sampling)


def apart(item: BatchItem | None, other: BatchItem | None) -> bool:
    """Whether two items must not share a generation: lines of conversations among NPCs whose
    characters share a name. A line naming another conversation's character is what tells
    content carried across a batch (:func:`read_batch`); with a name in common, that check could
    not tell the two conversations apart."""
    if not (isinstance(item, ReplyItem) and item.unlabelled and isinstance(other, ReplyItem) and other.unlabelled):
        return False
    mine = {name.casefold() for name in _characters(item) if name}
    return any(name.casefold() in mine for name in _characters(other) if name)


# --- packing -------------------------------------------------------------------------------------


def _answer_tokens(item: BatchItem) -> int:
    if isinstance(item, ToolChoiceItem):
        return _TOOL_CHOICE_ANSWER_TOKENS
    if isinstance(item, StructuredReplyItem):
        count = item.player_options
        return _answer_tokens(item.talk) + _PLAYER_OPTION_TOKENS * count + _MARK_TOKENS * (bool(count) + item.can_end)
    if isinstance(item, ReplyItem):
        label = _LINE_LABEL_TOKENS if item.unlabelled else _REPLY_LABEL_TOKENS
        return label + _REPLY_SENTENCE_TOKENS * max(1, item.sentences)
    return _BARK_ANSWER_TOKENS if isinstance(item, BarkItem) else _DECISION_ANSWER_TOKENS


def _reply_tokens(item: ReplyItem | StructuredReplyItem | ToolChoiceItem) -> int:
    return estimate_tokens(_form(item).block(0, item))


def pack(requests: Sequence[GenerationRequest], capabilities: ModelCapabilities, max_items: int) -> int:
    """How many of ``requests`` (in order, all of one :func:`batch_key`) one generation takes:
    at least 1 (the first always goes, alone if need be)."""
    count = 1
    for n in range(2, min(len(requests), max_items) + 1):
        batch = requests[:n]
        output = _output_tokens(batch)
        request = batch_request(batch, max_output_tokens=output)
        used = estimate_tokens(request.system) + estimate_tokens(request.prompt) + output
        if used > capabilities.context_size or output > capabilities.max_output_tokens:
            break
        count = n
    return count


def _output_tokens(requests: Sequence[GenerationRequest]) -> int:
    return sum(_answer_tokens(r.item) for r in requests if r.item is not None) + _ANSWER_OVERHEAD_TOKENS


# --- the batch prompt ----------------------------------------------------------------------------


def batch_request(requests: Sequence[GenerationRequest], *, max_output_tokens: int | None = None,
                  capabilities: ModelCapabilities | None = None) -> GenerationRequest:
    """One generation answering every item of ``requests`` (two or more, one batch key). Its
    output limit, unless given: the items' estimate and half as much again, within the limits of
    ``capabilities`` (the backend's output limit and what its context leaves), never below the
    estimate (what :func:`pack` checked)."""
    first = requests[0]
    items = [r.item for r in requests]
    assert all(item is not None for item in items)
    form = _form(first.item)  # one batch key: every item is of one kind
    example = "\n".join(form.example(n, item, items) for n, item in enumerate(items[:2], 1))
    system = form.system.format(count=len(items), example=example)
    blocks = [form.block(n, item) for n, item in enumerate(items, 1)]
    prompt = "\n\n".join([*blocks, form.task])
    if max_output_tokens is None:
        estimate = _output_tokens(requests)
        max_output_tokens = math.ceil(estimate * _OUTPUT_HEADROOM)
        if capabilities is not None:
            room = capabilities.context_size - estimate_tokens(system) - estimate_tokens(prompt)
            max_output_tokens = max(estimate, min(max_output_tokens, capabilities.max_output_tokens, room))
    return GenerationRequest(
        kind=StepKind.TEXT,
        system=system,
        prompt=prompt,
        temperature=first.temperature,
        max_output_tokens=max_output_tokens,
        sampling=first.sampling,
        owner=first.owner,
        priority=first.priority,
    )


def _bark_block(number: int, item: BarkItem) -> str:
    lines = [f"Character {number}: {item.speaker.strip()}"]
    if item.character.strip():
        lines.append(item.character.strip())
    lines.append(f"Situation: {item.situation.strip() or 'An ordinary moment.'}")
    return "\n".join(lines)


def _reply_block(number: int, item: ReplyItem) -> str:
    return "\n".join(_talk_lines(f"{number}: {item.speaker.strip()} ({_sentences(item)})", item))


def _sentences(item: ReplyItem) -> str:
    limit = max(1, item.sentences)
    return f"at most {limit} {'sentence' if limit == 1 else 'sentences'}"


def _talk_lines(head: str, item: ReplyItem) -> list[str]:
    """A talk as its own steps show it: the NPC, the whole conversation, this turn's line and
    tool results."""
    lines = [f"Conversation {head}"]
    if item.character.strip():
        lines.append(item.character.strip())
    lines.extend(item.conversation)
    lines.append(f"{item.user_label}: {item.line}")
    lines.extend(item.tool_results)
    return lines


def _structured_reply_block(number: int, item: StructuredReplyItem) -> str:
    talk = item.talk
    asks = [_sentences(talk)]
    count = item.player_options
    asks.append(f"{count} player {'option' if count == 1 else 'options'}" if count else "no player options")
    if item.can_end:
        asks.append("may end the conversation")
    lines = _talk_lines(f"{number}: {talk.speaker.strip()} ({', '.join(asks)})", talk)
    lines.append(f"Emotions: {', '.join(item.emotions)}")
    return "\n".join(lines)


def _structured_example(number: int, item: StructuredReplyItem) -> str:
    emotion = next((e for e in (("happy", "neutral")[number - 1], "neutral") if e in item.emotions), item.emotions[0])
    # Qwen2.5-Coder-1.5B copies these dots as options at times; named placeholders ("<reply>")
    # were worse (copied into every item): the reader takes neither for words.
    options = f" >> {' | '.join(['...'] * item.player_options)}" if item.player_options else ""
    return f"{number}. {item.talk.speaker.strip()}: [{emotion}] ...{options}"


def _tool_choice_block(number: int, item: ToolChoiceItem) -> str:
    lines = _talk_lines(f"{number}: {item.talk.speaker.strip()}", item.talk)
    lines.append("Tools:" if item.allow_respond else "Tools (one must be used now):")
    lines.extend(item.tools)
    return "\n".join(lines)


def _decision_block(number: int, item: DecisionItem) -> str:
    actor = item.actor.strip()
    lines = [f"Decision {number}, for {actor}" if actor else f"Decision {number}"]
    if item.character.strip():
        lines.append(item.character.strip())
    lines.append(f"Situation: {item.situation.strip() or '(none given)'}")
    options = "; ".join(f"{o.id} = {o.description.strip()}" if o.description.strip() else o.id for o in item.options)
    lines.append(f"Options: {options}")
    return "\n".join(lines)


# --- reading the answer back ---------------------------------------------------------------------

_NUMBERED = re.compile(
    r"""^\s*[*_#>\-]*\s*                 # list or markdown decoration
        (?:(?:item|character|decision|line)\s*)?  # "Item 3", "Character 3"
        (?:\[(\d{1,3})\]|\((\d{1,3})\)|(\d{1,3})(?=\s*[.:)\]\-–—]))  # [3]  (3)  3.  3:  3)  3 -
        \s*[.:)\]\-–—]*\s*[*_]*\s*(.*)$""",
    re.IGNORECASE | re.VERBOSE,
)
_LABEL = re.compile(r"^[*_\"']*([^:\n\"]{1,60}?)[*_\"']*\s*:\s*(.*)$")
_QUOTES = "\"'“”‘’«»`"
_INTEGER = re.compile(r"(?<![\w.])(\d{1,3})(?:\s*%)?(?!\w|\.\d)")
_NAME_STOPWORDS = frozenset({"the", "old", "young", "sir", "lady", "lord", "master", "mister", "mr", "mrs",
                             "miss", "dame", "big", "little", "captain", "guard"})


@dataclass(frozen=True)
class _Form:
    """How a batch of one kind reads: its system text, the example lines it shows (the first two
    items'), each item's block and the closing task."""

    system: str
    example: Callable[[int, Any, Sequence[Any]], str]
    block: Callable[[int, Any], str]
    task: str


_FORMS: dict[type, _Form] = {
    BarkItem: _Form(_BARK_SYSTEM, lambda n, b, _: f"{n}. {b.speaker.strip()}: ...", _bark_block, BARK_TASK),
    ToolChoiceItem: _Form(
        _TOOL_CHOICE_SYSTEM,
        lambda n, _, choices: f'{n}. {{"action": "{("respond", choices[0].names[0])[n - 1]}", "arguments": {{}}}}',
        _tool_choice_block, TOOL_CHOICE_TASK),
    ReplyItem: _Form(_REPLY_SYSTEM, lambda n, r, _: f"{n}. {r.speaker.strip()}: [{('happy', 'neutral')[n - 1]}] ...",
                     _reply_block, REPLY_TASK),
    StructuredReplyItem: _Form(_STRUCTURED_REPLY_SYSTEM, lambda n, r, _: _structured_example(n, r),
                               _structured_reply_block, STRUCTURED_REPLY_TASK),
    DecisionItem: _Form(_DECISION_SYSTEM, lambda n, d, _: f"{n}. {d.options[0].id} | {(85, 40)[n - 1]} | ...",
                        _decision_block, DECISION_TASK),
}


_LINE_FORM = _Form(_LINE_SYSTEM, lambda n, _, __: f"{n}. [{('happy', 'neutral')[n - 1]}] ...", _reply_block,
                   LINE_TASK)


def _form(item: BatchItem | None) -> _Form:
    if isinstance(item, ReplyItem) and item.unlabelled:
        return _LINE_FORM
    return _FORMS[type(item)]


def read_batch(text: str, requests: Sequence[GenerationRequest], *, truncated: bool = False) -> list[ItemResult]:
    """Each request's result from the batch answer ``text``. ``truncated``: the answer stopped at
    its token limit, so its last numbered line may be cut and is not trusted."""
    lines = _numbered_lines(text, len(requests))
    if truncated and lines:
        del lines[max(lines)]
    items = [r.item for r in requests]
    names = [_characters(item) for item in items]
    private = [_private_words(item) for item in items]
    results: list[ItemResult] = []
    for number, item in enumerate(items, 1):
        assert item is not None
        if number not in lines:
            results.append(Unanswered(Why.MISSING, "cut off" if truncated else "no line"))
            continue
        line = lines[number]
        if line is None:
            results.append(Unanswered(Why.INVALID, "answered more than once"))
            continue
        own = _own_text(item)
        others = [n for i, group in enumerate(names, 1) if i != number for n in group if n and not _names(own, n)]
        if isinstance(item, BarkItem):
            results.append(_read_bark(line, item, others))
        elif isinstance(item, ReplyItem):
            results.append(_read_reply(line, item, others))
        elif isinstance(item, ToolChoiceItem):
            results.append(_read_tool_choice(line, item, others))
        elif isinstance(item, StructuredReplyItem):
            results.append(_read_structured_reply(line, item, others))
        else:
            assert isinstance(item, DecisionItem)
            results.append(_read_decision(line, item, others))
        results[-1] = _unless_carried(results[-1], own, [words for i, words in enumerate(private, 1) if i != number])
    return results


_ANSWER_WORDS = distinctive_words("action arguments respond reasoning choice confidence emotion line player_options "
                                  "ends_conversation true false")
"""The keys and values of the JSON answers a batch's reader writes back: every answer may hold them."""


def _telling(text: str) -> frozenset[str]:
    """The telling words of ``text``: distinctive, four letters or more, no answer key."""
    return distinctive_words(text, min_length=4, ignore=_ANSWER_WORDS)


def _private_words(item: BatchItem | None) -> frozenset[str]:
    """The telling words of what only the item's NPC knows."""
    talk = item.talk if isinstance(item, ToolChoiceItem | StructuredReplyItem) else item
    if not isinstance(talk, ReplyItem) or not talk.private:
        return frozenset()
    return _telling(" ".join(talk.private))


def _unless_carried(result: ItemResult, own: str, private: list[frozenset[str]]) -> ItemResult:
    """``result``, unless its answer carries a telling word of another item's private knowledge
    that its own item does not hold: then it runs alone (the batch showed it what only another
    NPC knows)."""
    if not isinstance(result, Answer) or not any(private):
        return result
    said = _telling(result.text) - _telling(own)
    carried = next((word for words in private for word in sorted(words & said)), None)
    if carried is None:
        return result
    return Unanswered(Why.MISATTRIBUTED, f"carries another's private knowledge: {carried}")


def _numbered_lines(text: str, count: int) -> dict[int, str | None]:
    """Item number → its text (``None`` when numbered twice); an empty numbered line takes the
    next unnumbered line (``3.`` then the line below it)."""
    found: dict[int, str | None] = {}
    waiting: int | None = None
    for raw in text.splitlines():
        match = _NUMBERED.match(raw)
        number = next((int(g) for g in match.groups()[:3] if g), None) if match else None
        if match is None or number is None or not 1 <= number <= count:
            if waiting is not None and raw.strip():
                found[waiting] = raw.strip()
                waiting = None
            continue
        rest = match.group(4).strip()
        waiting = None
        if number in found:
            found[number] = None
        elif rest:
            found[number] = rest
        else:
            found[number] = ""
            waiting = number
    return {n: t for n, t in found.items() if t != ""}


def _speaker(item: BatchItem | None) -> str:
    if isinstance(item, ToolChoiceItem | StructuredReplyItem):
        return item.talk.speaker.strip()
    if isinstance(item, BarkItem | ReplyItem):
        return item.speaker.strip()
    if isinstance(item, DecisionItem):
        return item.actor.strip()
    return ""


def _characters(item: BatchItem | None) -> list[str]:
    """The characters of an item that no other item's answer may name: its speaker and, for a
    line of a conversation among NPCs, the conversation's other members."""
    if isinstance(item, ReplyItem):
        return [item.speaker.strip(), *(m.strip() for m in item.members)]
    return [_speaker(item)]


def _own_text(item: BatchItem) -> str:
    if isinstance(item, BarkItem):
        return f"{item.speaker}\n{item.character}\n{item.situation}"
    if isinstance(item, ToolChoiceItem | StructuredReplyItem):
        return _own_text(item.talk)
    if isinstance(item, ReplyItem):
        return "\n".join([item.speaker, *item.members, item.character, *item.conversation, item.line,
                          *item.tool_results])
    assert isinstance(item, DecisionItem)
    options = " ".join(f"{o.id} {o.description}" for o in item.options)
    return f"{item.actor}\n{item.character}\n{item.situation}\n{options}"


def _short_names(name: str) -> list[str]:
    """The words of a name of several words that name the character on their own ("Tobin" of
    "Old Tobin"): capitalised, three letters or more, not a title."""
    words = name.split()
    if len(words) < 2:
        return []
    return [w for w in words if len(w) >= 3 and w[0].isupper() and w.casefold() not in _NAME_STOPWORDS]


def _names(text: str, name: str) -> bool:
    """Whether ``text`` names ``name``: the whole name in any case, or a short name as written."""
    if whole_word(name).search(text):
        return True
    return any(whole_word(word, ignore_case=False).search(text) for word in _short_names(name))


def _same_name(label: str, name: str) -> bool:
    label = label.strip(_QUOTES + "*_<>[]() ")
    return bool(label) and (label.casefold() == name.casefold() or label in _short_names(name))


def _read_bark(line: str, item: BarkItem, others: list[str]) -> ItemResult:
    speaker = item.speaker.strip()
    text = line
    if (label := _LABEL.match(line)) is not None:
        said_by, rest = label.group(1).strip(), label.group(2).strip().lstrip("*_ ")
        if _same_name(said_by, speaker) or said_by.casefold().startswith(speaker.casefold()):
            text = rest
        elif any(_same_name(said_by, other) or _names(said_by, other) for other in others):
            return Unanswered(Why.MISATTRIBUTED, f"written for {said_by}")
        elif _EMOTION_TAG.match(rest) is not None:  # "Someone: [happy] …": a line of a character not in the batch
            return Unanswered(Why.MISATTRIBUTED, f"written for {said_by}")
    text = text.strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    if not text:
        return Unanswered(Why.INVALID, "an empty line")
    if (named := next((o for o in others if _names(text, o)), None)) is not None:
        return Unanswered(Why.MISATTRIBUTED, f"names {named}")
    return Answer(text)


_EMOTION_TAG = re.compile(r"^\s*(\[[^\]\n]{1,30}\])\s*(.*)$")
_TRAILING_TAG = re.compile(r"\s*(\[[^\]\n]{1,30}\])\s*$")


def _read_reply(line: str, item: ReplyItem, others: list[str]) -> ItemResult:
    """A bark's checks (own label or none, names no other character), the emotion tag kept in
    front as the step alone would write it (``[happy] words``), before or after the label."""
    tag = ""
    if (tagged := _EMOTION_TAG.match(line)) is not None:
        tag, line = tagged.group(1), tagged.group(2)
    read = _read_bark(line, BarkItem(speaker=item.speaker), others)
    if not isinstance(read, Answer):
        return read
    text = read.text
    if not tag and (tagged := _EMOTION_TAG.match(text)) is not None:
        tag, text = tagged.group(1), tagged.group(2).strip()
    if (trailing := _TRAILING_TAG.search(text)) is not None:  # "… safe now. [happy]": the tag goes in front
        tag, text = tag or trailing.group(1), text[:trailing.start()]
    if not text:
        return Unanswered(Why.INVALID, "an emotion without a reply")
    return Answer(f"{tag} {text}" if tag else text)


_END_MARK = re.compile(r"\s*[\[(<]\s*end(?:s|ed)?(?:\s+conversation)?\s*[\])>]\s*", re.IGNORECASE)
_OPTIONS_MARK = re.compile(r"\s*(?:>>|»)\s*")
_LIST_MARKER = re.compile(r"^(?:[-*•]|\d{1,2}[.)])\s+")


def _read_structured_reply(line: str, item: StructuredReplyItem, others: list[str]) -> ItemResult:
    """A text reply's checks on the words before ``>>`` (its label, its ``[emotion]``, naming no
    other character), then its own schema's: an emotion of its list, at least one player option
    where it has some, no option naming another character. The answer is the structured step's
    JSON object, keys as that schema has them: its first options up to its count, and neither
    options nor ``[end]`` where the schema has no field for them (as the step alone's extra
    keys and options are dropped)."""
    ends = _END_MARK.search(line) is not None  # right after the reply, or at the very end
    said, *listed = _OPTIONS_MARK.split(_END_MARK.sub(" ", line).strip(), maxsplit=1)
    read = _read_reply(said.strip(), item.talk, others)
    if not isinstance(read, Answer):
        return read
    tagged = _EMOTION_TAG.match(read.text)
    if tagged is None:
        return Unanswered(Why.INVALID, "no emotion")
    emotion = tagged.group(1)[1:-1].strip().casefold()
    words = tagged.group(2).strip()
    found = next((e for e in item.emotions if e.casefold() == emotion), None)
    if found is None:
        return Unanswered(Why.INVALID, f"emotion {emotion!r} is not one of its own")
    if _placeholder(words):
        return Unanswered(Why.INVALID, "an emotion without a reply")
    parts = listed[0].split("|") if listed else []
    cleaned = (_LIST_MARKER.sub("", p.strip()).strip(_QUOTES + " ") for p in parts)
    options = [o for o in cleaned if not _placeholder(o)]
    count = item.player_options
    if count and not options:
        return Unanswered(Why.INVALID, "no player options")
    # Every option written is checked, kept or not: one naming another character shows a mix-up.
    if (named := next((o for o in others for option in options if _names(option, o)), None)) is not None:
        return Unanswered(Why.MISATTRIBUTED, f"names {named}")
    answer: dict[str, Any] = {"emotion": found, "line": words}
    if count:
        answer["player_options"] = options[:count]
    if item.can_end:
        answer["ends_conversation"] = ends
    return Answer(msgspec.json.encode(answer).decode())


_NAMED_PLACEHOLDER = re.compile(r"<[^<>]*>")


def _placeholder(text: str) -> bool:
    """Whether ``text`` is only the example's placeholders (``...``, ``<player option>``): no words."""
    return not any(c.isalnum() for c in _NAMED_PLACEHOLDER.sub("", text))


def _read_tool_choice(line: str, item: ToolChoiceItem, others: list[str]) -> ItemResult:
    """The step envelope of one of the item's own tools (or respond, where it may), read as the
    decide step reads it; its arguments must not name another character of the batch."""
    choice = parse_envelope(line, item.names, allow_respond=item.allow_respond)
    if isinstance(choice, Respond):
        return Answer('{"action":"respond","arguments":{}}')
    if not isinstance(choice, Call):
        return Unanswered(Why.INVALID, choice.problem)
    found = find_json(line)
    arguments = msgspec.json.encode(found if isinstance(found, dict) else {}).decode()
    if (named := next((o for o in others if _names(arguments, o)), None)) is not None:
        return Unanswered(Why.MISATTRIBUTED, f"names {named}")
    if not isinstance(found, dict):  # a bare tool name: no arguments (the step repairs it if it needs some)
        return Answer(msgspec.json.encode({"action": choice.tool, "arguments": {}}).decode())
    return Answer(msgspec.json.encode(found).decode())


def _read_decision(line: str, item: DecisionItem, others: list[str]) -> ItemResult:
    fields = [f.strip() for f in line.split("|")]
    choice = _option(fields[0], item)
    if choice is None:
        mentioned = {o.id for o in item.options if _mentions_id(line, o.id)}
        if len(mentioned) != 1:
            return Unanswered(Why.INVALID, "no option id of its own" if not mentioned else "several option ids")
        choice = mentioned.pop()
    if len(fields) >= 3:
        confidence, reason = _confidence(fields[1]), " | ".join(fields[2:])
    else:
        rest = _option_id(choice).sub(" ", line, count=1)
        confidence = _confidence(rest)
        reason = _INTEGER.sub(" ", rest, count=1) if confidence is not None else rest
    reason = re.sub(r"\(\s*\)|\[\s*\]", " ", reason.replace("|", " "))  # where the confidence was
    reason = re.sub(r"\s+([,.;:!?])", r"\1", " ".join(reason.split())).strip(_QUOTES + " -–—:,;()")
    if not any(c.isalnum() for c in reason):
        reason = ""  # "…" copied from the example is no reason
    if (named := next((o for o in others if _names(reason, o)), None)) is not None:
        return Unanswered(Why.MISATTRIBUTED, f"names {named}")
    answer = {"reasoning": reason, "choice": choice, "confidence": 50 if confidence is None else confidence}
    return Answer(msgspec.json.encode(answer).decode())


def _mentions_id(text: str, option_id: str) -> bool:
    return _option_id(option_id).search(text) is not None


# Kept here, not in ``re``'s own cache, which a crowd's names overflow.
@functools.lru_cache(maxsize=8192)
def _option_id(option_id: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(option_id)}(?![\w-])", re.IGNORECASE)


def _option(text: str, item: DecisionItem) -> str | None:
    word = text.strip(_QUOTES + "*_[](). ").removeprefix("option").strip(_QUOTES + "*_[](): ")
    return next((o.id for o in item.options if o.id.casefold() == word.casefold()), None)


def _confidence(text: str) -> int | None:
    match = _INTEGER.search(text)
    if match is None:
        return None
    return min(int(match.group(1)), 100)
