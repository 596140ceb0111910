"""Lenient JSON for model output (protocol-core §6.3 steps 1-2, §6.9).

Small models write *almost* JSON, wrapped in prose or Markdown fences, and sometimes cut off by a
token limit. This module reads such text without I/O and without raising on bad input:

- :func:`parse_value` reads exactly one value with the lenient grammar (single quotes, unquoted
  keys, ``=`` separators, extra commas, comments, BOM, ``True/False/None/nil``, bare words as
  strings, leading ``+``, raw newlines in strings, a copied union ``"a" | "b"`` keeps the first).
  Objects are ``dict`` in key order; numbers are ``int`` when written without fraction/exponent.
  It is the only function here that raises (``ValueError``).
- :func:`find_json` finds the first object (or array) in free text, truncation as a last resort.
- :func:`complete_prefix` gives the best-effort value of a JSON text that is still streaming.
- :func:`has_complete_value` tells a decide step it may stop reading the stream.
- :func:`candidate_texts` lists the texts searched: fenced blocks first, then the whole text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any, Final

import msgspec

__all__ = [
    "candidate_texts",
    "complete_prefix",
    "find_json",
    "has_complete_value",
    "parse_value",
]

# Deep enough for any real reply, shallow enough to stay clear of Python's recursion limit.
_MAX_DEPTH: Final = 200
_LITERALS: Final[dict[str, Any]] = {
    "true": True,
    "True": True,
    "false": False,
    "False": False,
    "null": None,
    "None": None,
    "nil": None,
}
_ESCAPES: Final = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN_RUN: Final = {'"': re.compile(r'[^"\\]+'), "'": re.compile(r"[^'\\]+")}
_INTEGER: Final = re.compile(r"-?[0-9]+")
_NUMBER_CHARS: Final = frozenset("0123456789.eE+-")
_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_CLOSERS: Final = {"{": "}", "[": "]"}
_BROKEN: Final = -1  # an opener closed by the wrong kind of bracket
# Where a value or key may start (`{ [ , :` per §6.3, plus this grammar's `=` and `|`).
_QUOTE_OPENS_AFTER: Final = "{[,:=|"
# A stream prefix tries this many unclosed openers at most (each costs a parse of the rest).
_MAX_TRUNCATED_TRIES: Final = 3
_FENCE: Final = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)


class _Missing:
    """Partial mode only: the text ended before a value (``None`` is JSON null)."""


_MISSING: Final = _Missing()


class _Parser:
    """Recursive-descent reader over ``text``; ``partial`` closes whatever the text leaves open."""

    def __init__(self, text: str, *, partial: bool) -> None:
        self.text = text
        self.pos = 0
        self.partial = partial
        self.depth = 0
        # Starts of the containers an error was raised inside: read from their own start, they
        # fail the same way (the grammar is context-free; text nested too deeply for one reader
        # is given up for all), so find_json need not try them.
        self.failed: list[int] = []

    def error(self, message: str) -> ValueError:
        return ValueError(f"{message} (at offset {self.pos})")

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_space(self) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char.isspace() or char == "\ufeff":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                self.pos = len(text) if end < 0 else end + 2
            else:
                return

    def skip_alternatives(self) -> None:
        """Skip ``| "b" | "c"`` after a value: a union copied from the prompt keeps its first value."""
        while True:
            save = self.pos
            self.skip_space()
            if self.at_end or self.text[self.pos] != "|":
                self.pos = save
                return
            self.pos += 1
            self.skip_space()
            if self.at_end:
                if not self.partial:
                    self.pos = save  # a dangling '|' is an error
                return
            try:
                self.value()
            except ValueError:
                self.pos = save
                return

    def value(self) -> Any:
        self.skip_space()
        if self.at_end:
            if self.partial:
                return _MISSING
            raise self.error("Unexpected end of input")
        char = self.text[self.pos]
        if char in "{[":
            return self.container(char)
        if char in "\"'":
            text, _closed = self.string(char)
            return text
        if char in "+-." or char in _DIGITS:
            return self.number()
        return self.word()

    def container(self, opener: str) -> Any:
        start = self.pos
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise self.error("JSON nested too deeply")
            return self.object() if opener == "{" else self.array()
        except ValueError:
            self.failed.append(start)
            raise
        finally:
            self.depth -= 1

    def unterminated(self, value: Any, what: str) -> Any:
        if self.partial:
            return value
        raise self.error(f"Unterminated {what}")

    def object(self) -> dict[str, Any]:
        self.pos += 1
        members: dict[str, Any] = {}
        while True:
            self.skip_space()
            if self.at_end:
                return self.unterminated(members, "object")
            char = self.text[self.pos]
            if char == "}":
                self.pos += 1
                return members
            if char == ",":
                self.pos += 1
                continue
            key = self.key()
            if key is _MISSING:
                return members
            self.skip_space()
            if self.at_end:
                return self.unterminated(members, "object")
            if self.text[self.pos] not in ":=":
                raise self.error(f"Expected ':' after key {key!r}")
            self.pos += 1
            value = self.value()
            if value is _MISSING:
                return members
            members[key] = value
            if not self.after_member("}"):
                return self.unterminated(members, "object")

    def array(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while True:
            self.skip_space()
            if self.at_end:
                return self.unterminated(items, "array")
            char = self.text[self.pos]
            if char == "]":
                self.pos += 1
                return items
            if char == ",":
                self.pos += 1
                continue
            value = self.value()
            if value is _MISSING:
                return items
            items.append(value)
            if not self.after_member("]"):
                return self.unterminated(items, "array")

    def after_member(self, closer: str) -> bool:
        """Step over the ``,`` after a member (a closer is left for the loop); False at the end."""
        self.skip_alternatives()
        self.skip_space()
        if self.at_end:
            return False
        char = self.text[self.pos]
        if char == ",":
            self.pos += 1
        elif char != closer:
            raise self.error(f"Expected ',' or '{closer}'")
        return True

    def key(self) -> str | _Missing:
        text = self.text
        char = text[self.pos]
        if char in "\"'":
            key, closed = self.string(char)
            return key if closed else _MISSING  # a key cut off mid-way is dropped
        start = self.pos
        while self.pos < len(text) and (text[self.pos].isalnum() or text[self.pos] in "_$-"):
            self.pos += 1
        if self.pos == start:
            raise self.error(f"Expected a property name, got {char!r}")
        if self.partial and self.at_end:
            return _MISSING
        return text[start : self.pos]

    def string(self, quote: str) -> tuple[str, bool]:
        """The string opened by ``quote`` and whether it was closed (False only in partial mode)."""
        text = self.text
        plain = _PLAIN_RUN[quote]
        parts: list[str] = []
        self.pos += 1
        while True:
            run = plain.match(text, self.pos)
            if run:
                parts.append(run.group())
                self.pos = run.end()
            if self.at_end:
                if self.partial:
                    return "".join(parts), False
                raise self.error("Unterminated string")
            char = text[self.pos]
            self.pos += 1
            if char == quote:
                return "".join(parts), True
            escaped = self.escape()
            if escaped is None:
                return "".join(parts), False
            parts.append(escaped)

    def escape(self) -> str | None:
        """The character after a backslash; None when a partial text ends inside the escape."""
        if self.at_end:
            if self.partial:
                return None
            raise self.error("Unterminated escape sequence")
        char = self.text[self.pos]
        self.pos += 1
        if char != "u":
            return _ESCAPES.get(char, char)
        code = self.hex4()
        if code is None:
            return None
        low = self.low_surrogate() if 0xD800 <= code < 0xDC00 else None
        if low is not None:
            return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
        return chr(code)

    def hex4(self) -> int | None:
        digits = self.text[self.pos : self.pos + 4]
        if len(digits) < 4:
            if self.partial:
                self.pos = len(self.text)
                return None
            raise self.error("Truncated \\u escape")
        if not set(digits) <= _HEX:
            raise self.error("Invalid \\u escape")
        self.pos += 4
        return int(digits, 16)

    def low_surrogate(self) -> int | None:
        """A ``\\uDC00``-``\\uDFFF`` escape right here (JSON writes astral characters as pairs)."""
        text, pos = self.text, self.pos
        digits = text[pos + 2 : pos + 6]
        if text.startswith("\\u", pos) and len(digits) == 4 and set(digits) <= _HEX:
            code = int(digits, 16)
            if 0xDC00 <= code <= 0xDFFF:
                self.pos += 6
                return code
        return None

    def number(self) -> int | float | _Missing:
        text = self.text
        start = self.pos
        if text[self.pos] in "+-":
            self.pos += 1
        while self.pos < len(text) and text[self.pos] in _NUMBER_CHARS:
            self.pos += 1
        literal = text[start : self.pos].removeprefix("+")
        if self.partial and self.at_end:
            literal = literal.rstrip(".eE+-")
        if literal in ("", "-"):
            if self.partial and self.at_end:
                return _MISSING
            raise self.error("Invalid number")
        if _INTEGER.fullmatch(literal):
            return int(literal)
        try:
            number = float(literal)
        except ValueError:
            self.pos = start
            raise self.error(f"Invalid number {literal!r}") from None
        if math.isinf(number):
            self.pos = start
            raise self.error(f"Number out of range {literal!r}")
        return number

    def word(self) -> Any:
        """A literal, or a bare word read as a string (``{action: respond}``)."""
        text = self.text
        start = self.pos
        while self.pos < len(text) and (text[self.pos].isalnum() or text[self.pos] in "_-."):
            self.pos += 1
        word = text[start : self.pos]
        if word in _LITERALS:
            return _LITERALS[word]
        if self.partial and self.at_end:
            return _MISSING  # maybe a literal still being written
        if not word:
            raise self.error(f"Unexpected {text[self.pos]!r}")
        return word


def _parse(text: str, *, partial: bool) -> Any:
    return _read_one(_Parser(text, partial=partial))


def _read_one(parser: _Parser) -> Any:
    text = parser.text
    value = parser.value()
    if value is _MISSING:
        raise parser.error("Expected a JSON value")
    parser.skip_alternatives()
    parser.skip_space()
    if not parser.at_end:
        raise parser.error(f"Unexpected {text[parser.pos]!r} after the JSON value")
    return value


def _try_parse(text: str, *, partial: bool = False) -> Any:
    try:
        return _parse(text, partial=partial)
    except ValueError:
        return _MISSING


def parse_value(text: str) -> Any:
    """One JSON value with the lenient grammar of §6.3 step 2; key order kept.

    Raises ``ValueError`` (with the offset) if the text, stripped of whitespace and comments, is
    not exactly one value, holds a number too large for a float, or nests deeper than 200.
    """
    return _parse(text, partial=False)


def candidate_texts(text: str) -> list[str]:
    """The texts to search, most likely first: each non-blank fenced block (language tag skipped,
    an unterminated fence runs to the end), then the whole text with the fences blanked. Without
    a fence, just the text."""
    if "```" not in text:
        return [text]
    fenced = [match.group(1) for match in _FENCE.finditer(text) if match.group(1).strip()]
    return [*fenced, text.replace("```", " ")]


def _previous_significant(text: str, index: int) -> str:
    index -= 1
    while index >= 0 and text[index].isspace():
        index -= 1
    return text[index] if index >= 0 else " "


class _Candidate:
    """The openers of one candidate text: their balanced ends and parsed values.

    One string-aware scan from an opener also settles every opener it meets outside a string
    (the scan's state there equals a fresh start), so most texts are scanned once, not once per
    opener. A closer of the wrong kind (``{…]``) breaks every bracket still open: none of them
    can parse. A failed parse likewise rules out the containers it failed inside. This keeps
    degenerate output (``{"a": {"a": …``) from costing a parse per opener.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.ends: dict[int, int | None] = {}
        self.failed: set[int] = set()

    def value_at(self, start: int) -> Any:
        """The parsed balanced slice at ``start``; _MISSING if unclosed, broken or not JSON."""
        end = self.end_of(start)
        if end is None or end == _BROKEN or start in self.failed:
            return _MISSING
        parser = _Parser(self.text[start : end + 1], partial=False)
        try:
            return _read_one(parser)
        except ValueError:
            inside = (start + offset for offset in parser.failed)
            self.failed.update(opener for opener in inside if self.closes_by(opener, end))
            return _MISSING

    def closes_by(self, opener: int, end: int) -> bool:
        """Whether the scan closed ``opener`` by ``end``: then its own slice fails alike."""
        inner_end = self.ends.get(opener)
        return inner_end is not None and 0 <= inner_end <= end

    def end_of(self, start: int) -> int | None:
        """Index of the bracket closing the one at ``start``, :data:`_BROKEN`, or None if the
        text ends first."""
        if start not in self.ends:
            self.scan(start)
        return self.ends[start]

    def scan(self, start: int) -> None:
        text = self.text
        open_at: list[int] = []
        quote: str | None = None
        index = start
        while index < len(text):
            char = text[index]
            if quote is not None:
                if char == "\\":
                    index += 2
                    continue
                if char == quote:
                    quote = None
            elif char == '"':
                quote = char
            elif char == "'":
                # An apostrophe in prose ("it's") must not swallow the rest of the text.
                if _previous_significant(text, index) in _QUOTE_OPENS_AFTER:
                    quote = char
            elif char in "{[":
                open_at.append(index)
                self.ends[index] = None
            elif char in "}]":
                if _CLOSERS[text[open_at[-1]]] != char:
                    self.ends.update(dict.fromkeys(open_at, _BROKEN))
                    return
                self.ends[open_at.pop()] = index
                if not open_at:
                    return
            index += 1


def _openers(text: str, allow_array: bool) -> Iterator[int]:
    opens = "{[" if allow_array else "{"
    return (index for index, char in enumerate(text) if char in opens)


_STRICT_DECODE = msgspec.json.Decoder().decode


def _strict(text: str, allow_array: bool) -> Any:
    """Fast path: the whole text is one strict JSON object (or array); else ``_MISSING``."""
    stripped = text.strip()
    if not stripped or stripped[0] not in ("{[" if allow_array else "{") or stripped[-1] not in "}]":
        return _MISSING  # not worth a failed decode (an exception) at every piece of a stream
    try:
        return _STRICT_DECODE(stripped)
    except (msgspec.DecodeError, RecursionError):
        return _MISSING


def find_json(text: str, *, allow_array: bool = False) -> Any | None:
    """The first JSON object (or array, with ``allow_array``) in free model output, or None.

    In each of :func:`candidate_texts`, every opener is tried in order: its balanced,
    string-aware end is found and the slice parsed leniently; the first success wins. Failing
    that, the first unbalanced opener of each candidate is read as truncated text (open strings
    and containers closed, an incomplete trailing key or value dropped). Never raises.
    """
    value = _strict(text, allow_array)
    if value is not _MISSING:
        return value
    truncated: list[str] = []
    for candidate in candidate_texts(text):
        openers = _Candidate(candidate)
        first_open: int | None = None
        for start in _openers(candidate, allow_array):
            if openers.end_of(start) is None:
                first_open = start if first_open is None else first_open
                continue
            value = openers.value_at(start)
            if value is not _MISSING:
                return value
        if first_open is not None:
            truncated.append(candidate[first_open:].rstrip())
    for rest in truncated:
        value = _try_parse(rest, partial=True)
        if value is not _MISSING:
            return value
    return None


def complete_prefix(text: str) -> Any | None:
    """Best-effort value of a JSON object or array still being streamed, or None.

    Unlike :func:`find_json`, an unclosed opener is read as truncated *at once*: a prefix such
    as ``{"line": "Hi", "tags": ["a"], "mo`` stands for the outer object, not the inner array.
    Openers that lead nowhere (prose braces) are skipped; at most three unclosed ones are tried
    per candidate text, which keeps a degenerate stream (``[[[[…``) cheap. Never raises.
    """
    for candidate in candidate_texts(text):
        openers = _Candidate(candidate)
        tries = 0
        for start in _openers(candidate, True):
            if openers.end_of(start) is not None:
                value = openers.value_at(start)
            elif tries < _MAX_TRUNCATED_TRIES:
                tries += 1
                value = _try_parse(candidate[start:].rstrip(), partial=True)
            else:
                continue
            if value is not _MISSING:
                return value
    return None


def has_complete_value(text: str, *, allow_array: bool = False) -> bool:
    """True once ``text`` holds a balanced JSON object (or array) that parses.

    Scanning stops at the first unclosed opener: an inner object that closes inside an
    unfinished outer one (``{"action": "x", "arguments": {}``) does not count. Never raises.
    """
    if _strict(text, allow_array) is not _MISSING:
        return True
    if "}" not in text and not (allow_array and "]" in text):
        return False  # nothing has closed yet: the usual case while a decision streams
    openers = _Candidate(text)
    for start in _openers(text, allow_array):
        if openers.end_of(start) is None:
            return False
        if openers.value_at(start) is not _MISSING:
            return True
    return False
