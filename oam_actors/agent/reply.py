"""Reply cleaning for respond steps (protocol-core §6.8, Android ``ReplyCleaner``).

Small models like to start a reply with a speaker label (``Mira: …``, ``**Mira:** …``) and to
echo the tool records of the prompt (``[check_menu → {…}]``). :class:`ReplyCleaner` removes them:

- :meth:`ReplyCleaner.push` takes streamed chunks and returns the text that may be shown so far —
  leading whitespace and one leading label (the assistant's label or ``Assistant``, any case,
  optionally bold) removed; while the text could still become such a label, nothing is shown.
- :meth:`ReplyCleaner.final` returns the reply to keep: additionally without echoed tool records,
  with runs of spaces collapsed, and without one pair of wrapping double quotes when the text
  has exactly two.

Text that merely starts like the label (``Mirabelle is my cousin.``) is left alone. Pure; never
raises.
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["ReplyCleaner"]

_BOLD: Final = "*_"
_TOOL_RECORD: Final = re.compile(
    r"\[[A-Za-z_][\w.-]*"  # tool name
    r"(?: \{[^\n]*?\})?"  # its arguments, when it had any
    r" → (?:[^\[\]\n]|\[[^\[\]\n]*\])*\]"  # its output (one level of brackets inside)
)
_SPACE_RUN: Final = re.compile(r"[ \t]{2,}")


class ReplyCleaner:
    """Cleans one respond step's output; feed it with :meth:`push`, finish with :meth:`final`."""

    __slots__ = ("_markers", "_raw")

    def __init__(self, assistant_label: str = "Assistant") -> None:
        self._markers = _markers(assistant_label)
        self._raw = ""

    def push(self, chunk: str) -> str:
        """Feed streamed model text; returns the cleaned text visible so far."""
        self._raw += chunk
        return self._visible(complete=False)

    def add(self, text: str) -> None:
        """Feed model text nobody is shown before :meth:`final`."""
        self._raw += text

    def final(self) -> str:
        """The cleaned reply from everything pushed."""
        text = _TOOL_RECORD.sub(" ", self._visible(complete=True))
        text = _SPACE_RUN.sub(" ", text).strip()
        if len(text) >= 2 and text[0] == text[-1] == '"' and text.count('"') == 2:
            text = text[1:-1].strip()
        return text

    def _visible(self, *, complete: bool) -> str:
        text = self._raw.lstrip()
        bold = len(text) - len(text.lstrip(_BOLD))
        body = text[bold:]
        for marker in self._markers:
            if body[: len(marker)].lower() == marker:
                return _after_label(body[len(marker) :], bold)
        if not complete and self._could_become_label(body):
            return ""
        return text

    def _could_become_label(self, body: str) -> bool:
        lowered = body.lower()
        return any(marker.startswith(lowered) for marker in self._markers)


@functools.lru_cache(maxsize=1024)  # a session or NPC keeps its label: each reply step reuses it
def _markers(assistant_label: str) -> tuple[str, ...]:
    labels = dict.fromkeys(label.strip().lower() for label in (assistant_label, "Assistant"))
    # `Mira:` and `**Mira**:`; `**Mira:**` starts like the first.
    return tuple(marker for label in labels if label for marker in (f"{label}:", f"{label}**:", f"{label}__:"))


def _after_label(rest: str, bold: int) -> str:
    """The text after a label: the bold markers closing it (as many as opened it) and whitespace
    dropped, so ``**Mira:** Hi`` gives ``Hi`` while ``Mira: *waves*`` keeps its emphasis."""
    closing = len(rest) - len(rest.lstrip(_BOLD))
    return rest[min(closing, bold) :].lstrip()
