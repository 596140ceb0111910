"""The decide step's envelope parser (protocol-core §6.2-§6.4, Android ``StepEnvelope``).

A decide step answers ``{"action": "<tool>" | "respond", "arguments": {…}}``. Small models drift
from that shape in predictable ways, so :func:`parse_envelope` finds the first JSON object in the
text (fences, prose, truncation tolerated), unwraps up to three wrapper keys, accepts the synonym
lists of §6.3 for the action and the arguments, reads ``{"take_order": {…}}`` as a call and
``{"respond": "…"}`` as a reply, and falls back to a bare action word. It is pure and never raises:
bad output becomes :class:`Invalid` with the exact problem text the repair prompt quotes.

Only the tools offered in the step can match; a declared tool always wins over a respond word.
"""

from __future__ import annotations

import functools

import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from .lenient_json import candidate_texts, find_json

__all__ = [
    "RESPOND",
    "Call",
    "Invalid",
    "Respond",
    "argument_candidates",
    "parse_envelope",
    "quote_answer",
    "resolve_action",
]

RESPOND: Final = "respond"

# Synonym lists exactly as in Android's StepEnvelope, in normalised form (see _normal_key).
_ACTION_KEYS: Final = (
    "action", "tool", "toolname", "name", "function", "functionname", "call", "nextaction", "next",
    "step", "command", "use", "choice", "decision", "tooltouse", "selectedtool",
)  # fmt: skip
_ARGUMENT_KEYS: Final = (
    "arguments", "args", "parameters", "params", "input", "inputs", "toolinput", "actioninput",
    "argument", "toolarguments", "toolargs", "functionarguments",
)  # fmt: skip
_ARGUMENT_KEY_SET: Final = frozenset(_ARGUMENT_KEYS)
_WRAPPER_KEYS: Final = frozenset(
    {"toolcall", "functioncall", "step", "decision", "nextstep", "envelope", "call", "action", "toolcalls"}
)
_RESPOND_WORDS: Final = frozenset({
    "respond", "respond_directly", "reply", "answer", "final", "final_answer", "none", "no_tool",
    "talk", "say", "speak", "chat", "response", "direct_response", "respond_to_user",
    "reply_to_user", "finish", "done", "no_action", "nothing", "direct_reply", "reply_directly",
    "answer_directly",
})  # fmt: skip
# Meta keys are compared lower-cased, not normalised (as in K).
_META_KEYS: Final = frozenset({
    "reason", "reasoning", "thought", "thoughts", "explanation", "why", "rationale", "comment", "note",
    "type",
})  # fmt: skip
_MAX_UNWRAP: Final = 3
_MAX_BARE_WORD: Final = 64
_QUOTE_LIMIT: Final = 240
_NAME_EDGES: Final = "`\"'. *"
_NAME_PREFIXES: Final = ("functions.", "tools.", "tool:")
_CAMEL_HUMP: Final = re.compile(r"([a-z0-9])([A-Z])")
_WORD_SEPARATORS: Final = re.compile(r"[\s_-]+")
_WHITESPACE: Final = re.compile(r"\s+")


class Call(msgspec.Struct, frozen=True):
    """The model chose ``tool``; ``candidates`` are argument objects, most likely first."""

    tool: str
    candidates: tuple[Any, ...]


class Respond(msgspec.Struct, frozen=True):
    """The model chose to reply; ``text`` is set when it already wrote one (``{"respond": "Hi"}``)."""

    text: str | None = None


class Invalid(msgspec.Struct, frozen=True):
    """Unusable output; ``problem`` is the text quoted in the repair prompt."""

    problem: str


class _Match(msgspec.Struct, frozen=True):
    """A resolved action name: a declared tool, or a respond word when ``tool`` is None."""

    tool: str | None


@functools.lru_cache(maxsize=4096)
def _normal_key(text: str) -> str:
    """``tool_name`` → ``toolname``: lower-case letters and digits only (memoised: the same
    few keys come back in every envelope)."""
    return "".join(char for char in text.lower() if char.isalnum())


@functools.lru_cache(maxsize=4096)
def _normal_words(text: str) -> str:
    """``takeOrder`` / ``Check Menu`` / ``TAKE-ORDER`` → ``take_order`` / ``check_menu``
    (memoised: every decide step compares the same tool names)."""
    split = _CAMEL_HUMP.sub(r"\1_\2", text).strip().lower()
    return _WORD_SEPARATORS.sub("_", split)


def _clean_name(raw: str) -> str:
    cleaned = raw.strip().strip(_NAME_EDGES).removesuffix("()").strip()
    for prefix in _NAME_PREFIXES:
        cleaned = cleaned.removeprefix(prefix)
    return cleaned.strip()


_RESPOND_KEYS: Final = frozenset(_normal_key(word) for word in _RESPOND_WORDS)


@functools.lru_cache(maxsize=4096)
def _resolve(raw: str, tools: tuple[str, ...]) -> _Match | None:
    """What ``raw`` names among ``tools`` (memoised: every decide step of a session resolves the
    same few names against the same tools, and this compares each tool's normal forms)."""
    name = _clean_name(raw)
    if not name:
        return None
    if name in tools:
        return _Match(name)
    words, key = _normal_words(name), _normal_key(name)
    for tool in tools:
        if _normal_words(tool) == words:
            return _Match(tool)
    for tool in tools:
        if _normal_key(tool) == key:
            return _Match(tool)
    if words in _RESPOND_WORDS or key in _RESPOND_KEYS:
        return _Match(None)
    return None


def resolve_action(name: str, tools: Sequence[str], *, allow_respond: bool) -> str | None:
    """§6.3 tool-name matching: the declared tool ``name`` stands for, :data:`RESPOND`, or None.

    Surrounding quotes/backticks/dots/stars, a trailing ``()`` and the prefixes ``functions.``,
    ``tools.``, ``tool:`` are ignored; then exact name, same words, same normalised key, and
    finally the respond words (only with ``allow_respond``) are tried, in that order.
    """
    match = _resolve(name, tuple(tools))
    if match is None:
        return None
    if match.tool is not None:
        return match.tool
    return RESPOND if allow_respond else None


def _fields(obj: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Each normalised key's first member: looked up for every synonym, the object's keys are
    normalised once instead of once per synonym."""
    fields: dict[str, tuple[str, Any]] = {}
    for key, value in obj.items():
        fields.setdefault(_normal_key(key), (key, value))
    return fields


def _first_argument_field(obj: dict[str, Any], *, skip: str | None = None) -> tuple[str, Any] | None:
    fields = _fields(obj)
    for normal in _ARGUMENT_KEYS:
        found = fields.get(normal)
        if found is not None and found[0] != skip:
            return found
    return None


def _to_object(value: Any) -> dict[str, Any] | None:
    """Arguments as an object: objects as is, JSON text parsed (blank ⇒ ``{}``), null ⇒ ``{}``."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        found = find_json(value) if value.strip() else {}
        return found if isinstance(found, dict) else None
    return {} if value is None else None


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """Descend through ``{"tool_call": {…}}``-style wrappers, at most three levels."""
    for _ in range(_MAX_UNWRAP):
        if len(obj) != 1:
            return obj
        key, inner = next(iter(obj.items()))
        if _normal_key(key) not in _WRAPPER_KEYS:
            return obj
        if isinstance(inner, list) and inner and isinstance(inner[0], dict):
            inner = inner[0]
        if not isinstance(inner, dict):
            return obj
        obj = inner
    return obj


def _action_name(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("name") if isinstance(value.get("name"), str) else value.get("tool")
    return value if isinstance(value, str) else None


def _options(tools: Sequence[str], allow_respond: bool) -> str:
    return ", ".join([*tools, RESPOND] if allow_respond else tools)


def _respond(tools: Sequence[str], allow_respond: bool, text: str | None = None) -> Respond | Invalid:
    if allow_respond:
        return Respond(text)
    return Invalid(f'"{RESPOND}" is not allowed now; you must call one of the tools: {", ".join(tools)}')


def _arguments(obj: dict[str, Any], action_key: str, action_value: Any) -> tuple[Any, ...]:
    """Argument candidates (a)-(d) of §6.3 'Interpretation'."""
    candidates: list[Any] = []
    nested = _first_argument_field(action_value) if isinstance(action_value, dict) else None
    top = _first_argument_field(obj, skip=action_key)
    for found in (nested, top):
        parsed = None if found is None else _to_object(found[1])
        if parsed is not None:
            candidates.append(parsed)
    rest = {
        key: value
        for key, value in obj.items()
        if key != action_key and _normal_key(key) not in _ARGUMENT_KEY_SET and key.lower() not in _META_KEYS
    }
    if rest:
        candidates.append(rest)
    return tuple(candidates) or ({},)


def _single_key(
    obj: dict[str, Any], tools: tuple[str, ...], allow_respond: bool
) -> Call | Respond | Invalid | None:
    """``{"take_order": {…}}`` is a call, ``{"respond": "Welcome!"}`` a reply."""
    if len(obj) != 1:
        return None
    key, value = next(iter(obj.items()))
    match = _resolve(key, tools)
    if match is None:
        return None
    if match.tool is None:
        text = value if isinstance(value, str) and value.strip() else None
        return _respond(tools, allow_respond, text)
    arguments = _to_object(value)
    return Call(match.tool, ({} if arguments is None else arguments,))


def _canonical(obj: dict[str, Any], tools: tuple[str, ...], allow_respond: bool) -> Call | Respond | Invalid | None:
    """The envelope exactly as the decide task asks for it, ``{"action": name, "arguments": {…}}``
    with a name that resolves: what :func:`_interpret` makes of it ("action" is its first action
    key and "arguments" its only argument candidate), without normalising every key twice.
    ``None`` for any other shape."""
    if len(obj) != 2:
        return None
    name, arguments = obj.get("action"), obj.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    match = _resolve(name, tools)
    if match is None:
        return None
    return _respond(tools, allow_respond) if match.tool is None else Call(match.tool, (arguments,))


def _interpret(obj: dict[str, Any], tools: tuple[str, ...], allow_respond: bool) -> Call | Respond | Invalid:
    first_name: str | None = None
    fields = _fields(obj)
    for normal in _ACTION_KEYS:
        found = fields.get(normal)
        name = None if found is None else _action_name(found[1])
        if found is None or name is None:
            continue
        match = _resolve(name, tools)
        if match is None:
            first_name = name if first_name is None else first_name
            continue
        if match.tool is None:
            return _respond(tools, allow_respond)
        return Call(match.tool, _arguments(obj, found[0], found[1]))
    single = _single_key(obj, tools, allow_respond)
    if single is not None:
        return single
    if first_name is None:
        return Invalid('the JSON object has no "action"')
    return Invalid(f'"{first_name}" is not an available action; use one of: {_options(tools, allow_respond)}')


def _bare_word(text: str, tools: tuple[str, ...], allow_respond: bool) -> Call | Respond | Invalid | None:
    """``check_menu``, ```check_menu()```, ``respond.`` written without any JSON."""
    word = candidate_texts(text)[0].strip().strip(_NAME_EDGES + "\n")
    if not word or len(word) > _MAX_BARE_WORD or "\n" in word:
        return None
    match = _resolve(word, tools)
    if match is None:
        return None
    if match.tool is None:
        return _respond(tools, allow_respond)
    return Call(match.tool, ({},))


def parse_envelope(text: str, tools: Sequence[str], *, allow_respond: bool) -> Call | Respond | Invalid:
    """Read a decide step's output (all of §6.3). ``tools`` are the names offered in this step,
    ``allow_respond`` whether ``respond`` was offered. Never raises."""
    tools = tuple(tools)
    found = find_json(text)
    if isinstance(found, dict):
        canonical = _canonical(found, tools, allow_respond)
        return canonical if canonical is not None else _interpret(_unwrap(found), tools, allow_respond)
    fallback = _bare_word(text, tools, allow_respond)
    return fallback if fallback is not None else Invalid("the answer was not a JSON object")


def argument_candidates(found: dict[str, Any], tool: str) -> tuple[Any, ...]:
    """Argument candidates for a ``toolArguments`` step of ``tool`` (the object the model wrote):
    the object itself, then those of an envelope around it, then its first argument-key field;
    duplicates dropped, order kept."""
    candidates: list[Any] = [found]
    parsed = _interpret(_unwrap(found), (tool,), allow_respond=False)
    if isinstance(parsed, Call):
        candidates.extend(parsed.candidates)
    field = _first_argument_field(found)
    inner = None if field is None else _to_object(field[1])
    if inner is not None:
        candidates.append(inner)
    unique: list[Any] = []
    for candidate in candidates:
        if candidate not in unique:
            unique.append(candidate)
    return tuple(unique)


def quote_answer(text: str) -> str:
    """The previous answer as quoted in a repair: whitespace collapsed, cut at 240 chars + ``…``."""
    collapsed = _WHITESPACE.sub(" ", text.strip())
    return collapsed if len(collapsed) <= _QUOTE_LIMIT else collapsed[:_QUOTE_LIMIT] + "…"
