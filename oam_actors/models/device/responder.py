"""The simulated phone's deterministic "model": answers the agent's prompts plausibly. Pure.

It reads the prompt the way a small instruction-following model would, using the shapes written
by :mod:`oam_actors.agent.prompts`:

- **decide** (``Available tools:``): a step envelope calling one tool (with arguments that fit
  the rendered schema where it can) or ``respond``; once this turn has a tool result it responds.
  A configurable share of first attempts is malformed (prose, cut-off JSON, an unknown action)
  to exercise repairs; repair prompts are always answered well.
- **toolArguments** / **structured** (key-per-line schemas): a JSON value for the rendered keys;
  structured answers also fill optional keys (NPC replies want ``player_options``).
- **summary** and **reply** steps: short plausible lines that mention the user's topic and this
  turn's tool results.
- **batches** (:mod:`oam_actors.models.coalesce`): one numbered line per character (a bark in
  its own name, or a reply to its own conversation's last player line, as a reply step would
  answer it, with its player options where it asks for them) or per decision (one of its own
  option ids, a confidence, a reason).

Everything random comes from the ``random.Random`` passed in, so a seeded phone replays exactly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from ..coalesce import BARK_TASK, DECISION_TASK, LINE_TASK, REPLY_TASK, STRUCTURED_REPLY_TASK, TOOL_CHOICE_TASK

__all__ = ["ResponderConfig", "respond", "sample_value"]

_REPAIR_MARK = "Your previous answer could not be used:"
_TOOLS_MARK = "Available tools:"
_MUST_USE_MARK = "You must use one of the tools now."
_ARGUMENTS_MARK = "Its arguments are a JSON object with these keys:"
_OBJECT_MARK = "Answer with one JSON object only, no other text, with these keys:"
_ARRAY_MARK = "Answer with a JSON array only, no other text. Its form:"
_LAST_MESSAGE = re.compile(r'^The user\'s last message: "(.*)"$', re.MULTILINE)
_REPLY_TASK = re.compile(r"^Write (.+)'s reply to the user's last message\.", re.MULTILINE)
_LABELLED = re.compile(r"^([^\[\s][^:\n]{0,40}): (.*)$")
_FIELD_START = re.compile(r', "(?:[^"\\]|\\.)*"\??: ')
_KEY_LINE = re.compile(r'^- ("(?:[^"\\]|\\.)*")( \(optional\))?: (.*)$')
_NUMBER = r"-?\d+(?:\.\d+)?"
_RANGE = re.compile(rf" ({_NUMBER})-({_NUMBER})")
_AT_LEAST = re.compile(rf" >= ({_NUMBER})")
_AT_MOST = re.compile(rf" <= ({_NUMBER})")
_ABOVE = re.compile(rf" > ({_NUMBER})")
_BELOW = re.compile(rf" < ({_NUMBER})")
_COUNT = re.compile(r" \((?:(\d+)-(\d+)|at least (\d+)|at most (\d+)|exactly (\d+)) (items|chars)\)")
_STOPWORDS = frozenset({
    "the", "a", "an", "and", "or", "but", "is", "are", "was", "were", "be", "to", "of", "in", "on",
    "at", "for", "with", "about", "what", "whats", "where", "when", "how", "who", "why", "do", "does",
    "did", "you", "your", "i", "me", "my", "we", "our", "it", "its", "this", "that", "there", "here",
    "can", "could", "would", "should", "will", "please", "tell", "give", "have", "has", "any", "some",
})
_OPENERS = ("Aye.", "Well now.", "Hm.", "Of course.", "Right.", "Ah.")
_CLOSERS = ("Anything else?", "That is all I know.", "Ask if you need more.", "Safe travels.")
_NAMES = ("Gorm", "Mira", "Tobin", "Elsa", "Brann")
_JSON_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ResponderConfig:
    """How often a first decide attempt calls a tool, and how often it is malformed."""

    tool_call_rate: float = 0.6
    malformed_rate: float = 0.0


def respond(system: str, prompt: str, rng: Random, config: ResponderConfig = ResponderConfig()) -> str:
    """The whole answer to one request."""
    if prompt.endswith(TOOL_CHOICE_TASK):
        return _tool_choices(prompt, rng, config)
    if _TOOLS_MARK in prompt:
        return _decide(prompt, rng, config)
    if _ARGUMENTS_MARK in prompt:
        return _dumps(_object_from_lines(_lines_after(prompt, _ARGUMENTS_MARK), rng, optional=False))
    if _OBJECT_MARK in prompt:
        return _dumps(_object_from_lines(_lines_after(prompt, _OBJECT_MARK), rng, optional=True, topic=_topic(prompt)))
    if _ARRAY_MARK in prompt:
        form = _lines_after(prompt, _ARRAY_MARK)
        return _dumps(sample_value(form[0] if form else "[]", rng, topic=_topic(prompt)))
    if prompt.endswith(BARK_TASK):
        return _barks(prompt, rng)
    if prompt.endswith(DECISION_TASK):
        return _decisions(prompt, rng)
    if prompt.endswith(REPLY_TASK):
        return _replies(prompt, rng)
    if prompt.endswith(LINE_TASK):
        return _replies(prompt, rng, labelled=False)
    if prompt.endswith(STRUCTURED_REPLY_TASK):
        return _replies(prompt, rng, structured=True)
    if "summar" in system.lower():
        return f"Summary: the user asked about {_topic(prompt)}, and the assistant answered."
    return _reply(prompt, rng)


# --- decide ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tool:
    name: str
    arguments: str  # the compact rendering of its parameters


def _decide(prompt: str, rng: Random, config: ResponderConfig) -> str:
    tools, allow_respond = _catalog(prompt)
    used = {_tool_name(line) for line in _turn_tool_lines(prompt.split(_TOOLS_MARK, 1)[0])}
    envelope = _step(tools, allow_respond and _MUST_USE_MARK not in prompt, used, _topic(prompt), rng, config)
    if _REPAIR_MARK not in prompt and rng.random() < config.malformed_rate:
        return _malformed(envelope, rng)
    return _dumps(envelope)


def _tool_choices(prompt: str, rng: Random, config: ResponderConfig) -> str:
    """Each numbered conversation's next step, from its own tool list, as the decide step
    would choose it alone."""
    lines = []
    for block in prompt.split("\n\n"):
        head, _, body = block.partition("\n")
        if (match := _CHOICE.match(head)) is None:
            continue
        conversation, _, catalog = body.partition("\nTools")
        heading, _, listed = catalog.partition("\n")
        tools, allow_respond = _catalog("\n".join([_TOOLS_MARK, *listed.splitlines()]))
        used = {_tool_name(line) for line in _turn_tool_lines(conversation)}
        said = [m.group(2) for m in map(_LABELLED.match, conversation.splitlines()) if m and m.group(1) != match.group(2)]
        step = _step(tools, allow_respond and "must" not in heading, used, _topic_of(said[-1] if said else ""), rng, config)
        lines.append(f"{match.group(1)}. {_dumps(step)}")
    return "\n".join(lines)


def _step(tools: list[_Tool], allow_respond: bool, used: set[str], topic: str, rng: Random,
          config: ResponderConfig) -> dict[str, Any]:
    """A step envelope: respond once this turn used a tool (where it may), else a tool at the
    tool-call rate (always when it must), a fresh one first."""
    if not tools or (allow_respond and used):
        action = None
    elif not allow_respond or rng.random() < config.tool_call_rate:
        fresh = [t for t in tools if t.name not in used]
        action = rng.choice(fresh or tools)
    else:
        action = None
    if action is None:
        return {"action": "respond", "arguments": {}}
    return {"action": action.name, "arguments": sample_value(action.arguments, rng, topic=topic)}


def _catalog(prompt: str) -> tuple[list[_Tool], bool]:
    tools: list[_Tool] = []
    allow_respond = False
    for line in _lines_after(prompt, _TOOLS_MARK):
        if not line.startswith("- "):
            break
        name, _, rest = line[2:].partition(": ")
        if name == "respond":
            allow_respond = True
            continue
        _, _, arguments = rest.partition(" Arguments: ")
        tools.append(_Tool(name, arguments or "{}"))
    return tools, allow_respond


def _turn_tool_lines(conversation: str) -> list[str]:
    """This turn's tool uses: the bracketed lines closing the conversation."""
    lines = conversation.rstrip().splitlines()
    count = 0
    while count < len(lines) and lines[-1 - count].startswith("["):
        count += 1
    return lines[len(lines) - count:]


def _tool_name(line: str) -> str:
    return re.split(r"[ \u2192\]]", line[1:], maxsplit=1)[0]


def _malformed(envelope: dict[str, Any], rng: Random) -> str:
    text = _dumps(envelope)
    match rng.randrange(3):
        case 0:
            return f"I think the best step is {envelope['action']}, so let me do that."
        case 1:  # cut off inside the action name, so even a lenient reader cannot use it
            name = envelope["action"]
            return text[: text.index(f'"{name}"') + 1 + max(1, len(name) // 2)]
    return _dumps({"action": "look_around", "arguments": {}})


# --- schemas -----------------------------------------------------------------------------------


def _object_from_lines(lines: Sequence[str], rng: Random, *, optional: bool, topic: str = "that") -> dict[str, Any]:
    """An object for a key-per-line rendering (``- "key" (optional): <type>, <description>``)."""
    value: dict[str, Any] = {}
    for line in lines:
        match = _KEY_LINE.match(line)
        if match is None:
            break
        if match.group(2) and not optional:
            continue
        key = json.loads(match.group(1))
        value[key] = sample_value(match.group(3), rng, hint=key, optional=optional, topic=topic)
    return value


def sample_value(
    rendered: str, rng: Random, *, hint: str = "", optional: bool = False, topic: str = "that"
) -> Any:
    """A value of the type a rendered schema describes (``render_compact`` text; the first
    alternative of an ``or``). Anything it cannot read becomes a short string."""
    return _Reader(rendered, rng, optional, topic).value(hint)


class _Reader:
    """A prefix reader of the renderer's type language; ``i`` moves past what it read."""

    def __init__(self, text: str, rng: Random, optional: bool, topic: str) -> None:
        self.text = text
        self.i = 0
        self.rng = rng
        self.optional = optional
        self.topic = topic

    def rest(self) -> str:
        return self.text[self.i:]

    def eat(self, prefix: str) -> bool:
        if self.text.startswith(prefix, self.i):
            self.i += len(prefix)
            return True
        return False

    def literal(self) -> Any:
        value, self.i = _JSON_DECODER.raw_decode(self.text, self.i)
        return value

    def value(self, hint: str) -> Any:
        if self.eat("exactly "):
            return self.literal()
        if self.eat("one of "):
            return self.rng.choice(self.choices())
        if self.eat("true or false"):
            return self.rng.random() < 0.5
        if self.eat("["):
            return self.array(hint)
        if self.eat("{"):
            return self.object()
        for name in ("integer", "number", "string"):
            if self.eat(name):
                return getattr(self, name)(hint)
        if self.eat("null") or self.eat("never"):
            return None
        return _phrase(hint, self.rng, self.topic)

    def choices(self) -> list[Any]:
        choices = [self.literal()]
        while self.rest().startswith(", ") and self.text[self.i + 2: self.i + 3] in '"-0123456789tfn[{':
            start = self.i
            self.i += 2
            try:
                choices.append(self.literal())
            except ValueError:  # a description after the list, not another choice
                self.i = start
                break
        return choices

    def integer(self, _hint: str) -> int:
        low, high = self.bounds()
        low = math.ceil(low) if low is not None else None
        high = math.floor(high) if high is not None else None
        if low is None:
            low = min(1, high) if high is not None else 1
        return self.rng.randint(low, max(low, high if high is not None else low + 4))

    def number(self, hint: str) -> float | int:
        return self.integer(hint)

    def bounds(self) -> tuple[float | None, float | None]:
        low = high = None
        if match := _RANGE.match(self.text, self.i):
            low, high = float(match.group(1)), float(match.group(2))
        elif match := _AT_LEAST.match(self.text, self.i):
            low = float(match.group(1))
        elif match := _AT_MOST.match(self.text, self.i):
            high = float(match.group(1))
        if match:
            self.i = match.end()
        if match := _ABOVE.match(self.text, self.i):
            low, self.i = math.floor(float(match.group(1))) + 1, match.end()
        if match := _BELOW.match(self.text, self.i):
            high, self.i = math.ceil(float(match.group(1))) - 1, match.end()
        return low, high

    def string(self, hint: str) -> str:
        if self.eat(" matching /"):
            self.i = self.text.find("/", self.i) + 1 or len(self.text)
        text = _phrase(hint, self.rng, self.topic)
        low, high = self.count("chars")
        if low is not None and len(text) < low:
            text += "." * (low - len(text))
        return text[:high] if high is not None else text

    def count(self, unit: str) -> tuple[int | None, int | None]:
        match = _COUNT.match(self.text, self.i)
        if match is None or match.group(6) != unit:
            return None, None
        self.i = match.end()
        pair, least, most, exact = match.group(1, 2), match.group(3), match.group(4), match.group(5)
        if exact is not None:
            return int(exact), int(exact)
        if pair[0] is not None:
            return int(pair[0]), int(pair[1])
        return (int(least), None) if least is not None else (None, int(most))

    def array(self, hint: str) -> list[Any]:
        start = self.i
        close = _matching(self.text, start - 1)
        items_text = self.text[start:close].removesuffix(", \u2026")
        self.i = close + 1
        low, high = self.count("items")
        size = self.rng.randint(low or 1, max(low or 1, min(high if high is not None else 3, 3)))
        singular = hint.removesuffix("s")
        return [_Reader(items_text, self.rng, self.optional, self.topic).value(singular) for _ in range(size)]

    def object(self) -> dict[str, Any]:
        close = _matching(self.text, self.i - 1)
        body = self.text[self.i:close]
        self.i = close + 1
        value: dict[str, Any] = {}
        for field in _fields(body):
            reader = _Reader(field, self.rng, self.optional, self.topic)
            key = reader.literal()
            is_optional = reader.eat("?")
            if not reader.eat(": ") or (is_optional and not self.optional):
                continue
            value[key] = reader.value(key)
        return value


def _matching(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at ``open_at`` (or the end of ``text``)."""
    depth = 0
    in_string = False
    i = open_at
    while i < len(text):
        char = text[i]
        if in_string:
            if char == "\\":
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


def _fields(body: str) -> list[str]:
    """The ``"key"?: type (description)`` parts of an object rendering, split at top level."""
    if not body.startswith('"'):
        return []  # "{}" or a map: no fixed keys
    fields: list[str] = []
    start = i = 0
    while i < len(body):
        if body[i] in '"[{(':
            i = (_string_end(body, i) if body[i] == '"' else _matching(body, i)) + 1
            continue
        if body[i] == "," and _FIELD_START.match(body, i):
            fields.append(body[start:i])
            start = i + 2
        i += 1
    fields.append(body[start:])
    return fields


def _string_end(text: str, at: int) -> int:
    i = at + 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i


# --- batches -------------------------------------------------------------------------------------

_CHARACTER = re.compile(r"^Character (\d+): (.+)$", re.MULTILINE)
_CHOICE = re.compile(r"^Conversation (\d+): (.+)$")
_CONVERSATION = re.compile(r"^Conversation (\d+): (.+?) \(at most \d+ sentences?(?:, (\d+|no) player options?)?[^)]*\)$")
_EMOTIONS = re.compile(r"\nEmotions: (.+)$")  # a structured reply's last line
_DECISION = re.compile(r"^Decision (\d+)\b.*?^Options: ([^\n]*)$", re.MULTILINE | re.DOTALL)


def _barks(prompt: str, rng: Random) -> str:
    return "\n".join(f"{number}. {name}: {rng.choice(_OPENERS)} {rng.choice(_CLOSERS)}"
                     for number, name in _CHARACTER.findall(prompt))


def _decisions(prompt: str, rng: Random) -> str:
    lines = []
    for number, options in _DECISION.findall(prompt):
        ids = [option.split(" = ", 1)[0].strip() for option in options.split("; ")]
        lines.append(f"{number}. {rng.choice(ids)} | {rng.randint(40, 95)} | It fits the situation best.")
    return "\n".join(lines)


# --- text ----------------------------------------------------------------------------------------


def _replies(prompt: str, rng: Random, *, structured: bool = False, labelled: bool = True) -> str:
    """Each numbered conversation's reply, to its own last player line and tool results;
    ``structured``: in one of its own emotions, with as many player options as it asks for;
    ``labelled``: after the speaker's name (conversation lines are not)."""
    lines = []
    for block in prompt.split("\n\n"):
        head, _, body = block.partition("\n")
        if (match := _CONVERSATION.match(head)) is None:
            continue
        name = match.group(2)
        emotions = _EMOTIONS.search(body)
        body = body[:emotions.start()] if emotions else body
        said = [m.group(2) for m in map(_LABELLED.match, body.splitlines()) if m and m.group(1) != name]
        topic = _topic_of(said[-1] if said else "")
        label = f"{name}: " if labelled else ""
        line = f"{match.group(1)}. {label}[neutral] {_reply_words(topic, body, rng)}"
        if structured:
            listed = emotions.group(1).split(", ") if emotions else ["neutral"]
            emotion = "neutral" if "neutral" in listed else listed[0]
            count = int(n) if (n := match.group(3)) and n.isdigit() else 0
            options: list[str] = []
            while len(options) < min(count, 3):  # different ones, of the three it knows
                if (option := _phrase("player_option", rng, topic)) not in options:
                    options.append(option)
            line = line.replace("[neutral]", f"[{emotion}]", 1) + (f" >> {' | '.join(options)}" if options else "")
        lines.append(line)
    return "\n".join(lines)


def _reply(prompt: str, rng: Random) -> str:
    return _reply_words(_topic(prompt), prompt.rsplit("\n\n", 1)[0], rng)


def _reply_words(topic: str, conversation: str, rng: Random) -> str:
    parts = [rng.choice(_OPENERS), f"About {topic}: I can help with that."]
    for line in _turn_tool_lines(conversation)[-2:]:
        output = line.partition("\u2192")[2].removesuffix("]").strip()
        parts.append(f"{_tool_name(line)} says {output}.")
    parts.append(rng.choice(_CLOSERS))
    return " ".join(parts)


def _phrase(hint: str, rng: Random, topic: str) -> str:
    key = hint.lower()
    if key in ("line", "text", "reply", "message", "dialogue", "say", "answer"):
        return f"{rng.choice(_OPENERS)} About {topic}: I can help with that."
    if key in ("name", "speaker", "npc"):
        return rng.choice(_NAMES)
    if key in ("player_option", "option", "choice"):
        return rng.choice(("Tell me more.", "Goodbye.", f"What about {topic}?"))
    return topic if topic != "that" else rng.choice(("ale", "the gate", "north road", "bread"))


def _topic(prompt: str) -> str:
    """The most telling word of the user's last message ("that" when there is none)."""
    return _topic_of(_last_message(prompt))


def _topic_of(message: str) -> str:
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", message)
    content = [w for w in words if w.lower().replace("'", "") not in _STOPWORDS]
    return max(content, key=len) if content else "that"


def _last_message(prompt: str) -> str:
    if match := _LAST_MESSAGE.search(prompt):
        return match.group(1)
    if not prompt.startswith("Conversation:"):
        return prompt.split("\n\n", 1)[0]  # the plain first request: the user's own text
    task = _REPLY_TASK.search(prompt)
    assistant = task.group(1) if task else "Assistant"
    conversation = prompt.split("\n\n", 1)[0].splitlines()[1:]
    for line in reversed(conversation):
        match = _LABELLED.match(line)
        if match and match.group(1) != assistant:
            return match.group(2)
    return ""


def _lines_after(prompt: str, mark: str) -> list[str]:
    return prompt.split(mark, 1)[1].lstrip("\n").splitlines()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
