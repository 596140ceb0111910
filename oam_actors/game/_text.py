"""Text cleanup for small models' dialogue output (protocol-game §6.1, §6.5, §6.6). Pure, never raises.

- :func:`sentence` / :func:`joined_list`: the persona sheet's punctuation rules.
- :func:`spoken_line` / :func:`single_line`: a finished line without speaker label or wrapping quotes.
- :func:`streaming_line`: the visible prefix of a line still being generated (``None`` while the
  text could still turn into a speaker label, so nothing shown has to be taken back).
- :func:`split_emotion_tag`: the leading ``[emotion]`` tag of a plain-text reply.
- :func:`says_nothing`: whether a reply is only emotion tags and actions.
- :func:`without_stage_directions`: the words of a line without ``[laughing]``, ``*sighs*``, a leading ``(…)``.
- :func:`situation_text`: a free-form ``context``/``situation`` value as prompt text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "MAX_TAG_CHARS",
    "TagSplit",
    "joined_list",
    "sentence",
    "says_nothing",
    "single_line",
    "situation_text",
    "speaker_labels",
    "split_emotion_tag",
    "spoken_line",
    "streaming_line",
    "trimmed_or_none",
    "without_stage_directions",
]

MAX_TAG_CHARS = 24
"""An unclosed ``[`` longer than this is text, not a tag still streaming."""

_OPENING_QUOTES = frozenset('"“\'‘«')
_CLOSING_QUOTES = frozenset('"”\'’»')
_DOUBLE_QUOTES = frozenset('"“”')
_TERMINAL = frozenset(".!?\"'")
_TAGS = r"\[[^\[\]\n]{0,60}\]|\*[^*\n]{1,60}\*"  # [laughing], *sighs*
_STAGE = re.compile(_TAGS + r"|^\s*\([^()\n]{1,60}\)")
_ONLY_TAGS = re.compile(_TAGS)


def trimmed_or_none(text: str | None) -> str | None:
    """The trimmed text, or ``None`` when it is absent or blank."""
    if text is None:
        return None
    trimmed = text.strip()
    return trimmed or None


def sentence(text: str) -> str:
    """``text`` ending in terminal punctuation (``.`` added when it has none)."""
    if not text or text[-1] in _TERMINAL:
        return text
    return text + "."


def joined_list(items: Sequence[str]) -> str | None:
    """Non-blank items, trimmed, without trailing periods, joined ``a; b.``; ``None`` when empty."""
    cleaned = [t for item in items if (t := trimmed_or_none(item)) is not None]
    if not cleaned:
        return None
    return sentence("; ".join(item.removesuffix(".") for item in cleaned))


def speaker_labels(speaker: str) -> tuple[str, ...]:
    """The speaker labels small models put before a line, longest forms first."""
    if not speaker:
        return ()
    return (f"{speaker} says:", f"**{speaker}**:", f"**{speaker}:**", f"*{speaker}*:", f"{speaker}:")


def _strip_label(text: str, speaker: str) -> str:
    if ":" not in text:
        return text  # every label holds a colon: most lines have none to strip
    lowered = text.lower()
    for label in speaker_labels(speaker):
        if lowered.startswith(label.lower()):
            return text[len(label) :].strip()
    return text


def spoken_line(raw: str, speaker: str) -> str:
    """Trimmed, one leading speaker label removed, and quotes enclosing the whole line unwrapped
    (only when no double quote remains inside, so ``"A" and "B"`` stays)."""
    text = _strip_label(raw.strip(), speaker)
    if len(text) >= 2 and text[0] in _OPENING_QUOTES and text[-1] in _CLOSING_QUOTES:
        inner = text[1:-1]
        if not any(c in _DOUBLE_QUOTES for c in inner):
            text = inner.strip()
    return text


def streaming_line(raw: str, speaker: str) -> str | None:
    """The displayable prefix of a streaming line, or ``None`` while it may become a label."""
    text = raw.lstrip()
    lowered = text.lower()
    if text and any(len(label) > len(text) and label.lower().startswith(lowered) for label in speaker_labels(speaker)):
        return None
    result = _strip_label(text, speaker)
    # An apostrophe may open a word ('Tis), so only real opening quotes are dropped.
    if result and result[0] in _OPENING_QUOTES and result[0] != "'":
        result = result[1:].lstrip()
    return result


def single_line(text: str, speaker: str) -> str:
    """The first non-empty line of ``text``, cleaned as a spoken line."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return spoken_line(first, speaker)


class TagSplit(msgspec.Struct, frozen=True):
    """A plain-text reply split into its tag (``None`` if none) and the rest; ``pending`` while
    an opening tag is still streaming."""

    tag: str | None
    rest: str
    pending: bool = False


def split_emotion_tag(text: str) -> TagSplit:
    """Split ``[tag] rest``; leading whitespace is ignored and the rest is left-trimmed."""
    trimmed = text.lstrip()
    if not trimmed.startswith("["):
        return TagSplit(None, trimmed)
    close = trimmed.find("]")
    if close < 0:
        if len(trimmed) > MAX_TAG_CHARS:
            return TagSplit(None, trimmed)
        return TagSplit(None, "", pending=True)
    return TagSplit(trimmed[1:close], trimmed[close + 1 :].lstrip())


def situation_text(value: Any) -> str | None:
    """A ``context``/``situation`` value as text: strings as they are, other JSON compactly,
    ``None`` for absent or ``null``."""
    if value is None or value is msgspec.UNSET:
        return None
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def says_nothing(text: str) -> bool:
    """Whether a reply says nothing aloud: empty, or only ``[tags]`` and ``*actions*``. A line
    wholly in parentheses counts as said: it is shown as it is (a scripted model's
    ``(script exhausted)`` tells the client why it has no line)."""
    return not any(c.isalnum() for c in _ONLY_TAGS.sub(" ", text))


def without_stage_directions(text: str) -> str:
    """``text`` without stage directions (``[laughing]``, ``*sighs*``, a leading ``(…)``), its
    spaces collapsed: empty, or without a letter or digit, when it held nothing to say aloud."""
    return " ".join(_STAGE.sub(" ", text).split())
