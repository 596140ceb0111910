"""Prompt layout: what the model sees at each step. Pure text functions, no I/O.

Layout of one step (the system text travels separately, byte-stable across steps and turns)::

    Conversation:
    User: …                      ← history turns as labelled lines (oldest trimmed first)
    [tool {"a":1} → output]
    Assistant: …
    User: <this turn's prompt>
    [this turn's tool lines]
                                 ← blank line
    <the step's task>

A plain first request (no history, no tool use, a reply step) is just the user's text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .model import estimate_tokens_of_length
from .schema import Schema
from .tools import ToolDefinition, compact_json
from .transcript import Entry, PromptEntry, ResponseEntry, ToolUseEntry

__all__ = [
    "EntryLines",
    "Labels",
    "ShownHistory",
    "TOOL_OUTPUT_LIMIT",
    "build_prompt",
    "decide_task",
    "render_entries",
    "render_structured",
    "repair_task",
    "respond_task",
    "structured_task",
    "summary_input",
    "system_text",
    "tool_arguments_task",
    "trim_history",
]

TOOL_OUTPUT_LIMIT = 1500
_QUOTE_LIMIT = 300

ResponseRenderer = Callable[[ResponseEntry], str]


@dataclass(frozen=True)
class Labels:
    user: str = "User"
    assistant: str = "Assistant"


def system_text(instructions: str | None, context_note: str | None) -> str:
    """Instructions + blank line + context note, each trimmed, empty parts left out."""
    parts = [p.strip() for p in (instructions, context_note) if p and p.strip()]
    return "\n\n".join(parts)


def render_structured(value: Any) -> str:
    """A structured reply as history shows it: ``key: value; key: value`` (never JSON)."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    return _plain(value)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else compact_json(value)


def _tool_line(entry: ToolUseEntry) -> str:
    args = entry.call.arguments
    head = entry.call.name + (" " + compact_json(args) if args else "")
    output = entry.output.model_text()
    if len(output) > TOOL_OUTPUT_LIMIT:
        output = output[:TOOL_OUTPUT_LIMIT] + "… (truncated)"
    return f"[{head} → {output}]"


def _entry_line(entry: Entry, labels: Labels, render_response: ResponseRenderer | None) -> str | None:
    """One entry's labelled line; ``None`` for a blank prompt, which shows nothing."""
    if isinstance(entry, PromptEntry):
        return f"{labels.user}: {entry.text}" if entry.text.strip() else None
    if isinstance(entry, ToolUseEntry):
        return _tool_line(entry)
    if render_response is not None:
        return f"{labels.assistant}: {render_response(entry)}"
    if entry.structured is not None:
        return f"{labels.assistant}: {render_structured(entry.structured)}"
    return f"{labels.assistant}: {entry.text}"


class EntryLines:
    """History entries as labelled lines, each entry rendered once.

    Entries are immutable and every step of every turn shows the history again, so an agent keeps
    one of these across turns. It holds the entries it has rendered (an ``id`` is therefore never
    reused while remembered) and forgets those no longer shown once they outnumber the shown ones.
    """

    __slots__ = ("_memo", "labels", "render_response")

    def __init__(self, labels: Labels, render_response: ResponseRenderer | None = None) -> None:
        self.labels = labels
        self.render_response = render_response
        self._memo: dict[int, tuple[Entry, str | None]] = {}

    def line(self, entry: Entry) -> str | None:
        """``entry``'s line; ``None`` for a blank prompt."""
        known = self._memo.get(id(entry))
        if known is not None:
            return known[1]
        line = _entry_line(entry, self.labels, self.render_response)
        self._memo[id(entry)] = (entry, line)
        return line

    def lines(self, entries: Sequence[Entry]) -> list[str]:
        """The lines of ``entries``, in order (blank prompts left out)."""
        if len(self._memo) > 2 * len(entries) + 64:
            shown = {id(entry) for entry in entries}
            self._memo = {key: known for key, known in self._memo.items() if key in shown}
        line = self.line
        return [text for entry in entries if (text := line(entry)) is not None]


def render_entries(
    entries: Sequence[Entry], labels: Labels, render_response: ResponseRenderer | None = None
) -> list[str]:
    """History entries as labelled lines."""
    return [line for entry in entries if (line := _entry_line(entry, labels, render_response)) is not None]


def build_prompt(
    *,
    history: Sequence[Entry],
    prompt: str,
    turn_tool_uses: Sequence[ToolUseEntry],
    task: str,
    labels: Labels,
    plain_task: str | None = None,
    render_response: ResponseRenderer | None = None,
    history_lines: Sequence[str] | None = None,
) -> str:
    """The step prompt.

    ``plain_task`` (reply steps only) allows the plain-first-request form: with no history, no tool
    use and a non-blank prompt, the prompt is the user's text followed by ``plain_task`` if any.
    ``history_lines``, when the caller has them, are ``history`` already rendered
    (:meth:`ShownHistory.lines`).
    """
    if plain_task is not None and not history and not turn_tool_uses and prompt.strip():
        return f"{prompt}\n\n{plain_task}" if plain_task else prompt
    if history_lines is None:
        history_lines = render_entries(history, labels, render_response)
    lines = ["Conversation:", *history_lines]
    if prompt.strip():
        lines.append(f"{labels.user}: {prompt}")
    lines.extend(_tool_line(use) for use in turn_tool_uses)
    return "\n".join(lines) + "\n\n" + task


def trim_history(
    history: Sequence[Entry],
    *,
    fixed_tokens: int,
    budget: int,
    minimum_recent_turns: int = 1,
    labels: Labels = Labels(),
    render_response: ResponseRenderer | None = None,
) -> int:
    """How many of the oldest entries to hide so the prompt fits ``budget`` tokens.

    ``fixed_tokens`` is what the step needs besides history (system, prompt, tools, task). Whole
    turns are dropped, oldest first, always keeping ``minimum_recent_turns``. Small conversations
    (under 60 % of the budget) are never measured turn by turn.
    """
    shown = ShownHistory(history, EntryLines(labels, render_response))
    return shown.hidden(fixed_tokens=fixed_tokens, budget=budget, minimum_recent_turns=minimum_recent_turns)


class ShownHistory:
    """One history as the steps of one turn show it: :meth:`hidden` is :func:`trim_history`,
    :meth:`lines` the rendered entries after the hidden ones.

    A history does not change while a turn runs, so the sizes of its turns and its lines are
    computed once for all of the turn's steps (and each entry once per ``entry_lines``)."""

    __slots__ = ("_lines", "_sizes", "entry_lines", "history")

    def __init__(self, history: Sequence[Entry], entry_lines: EntryLines) -> None:
        self.history = history
        self.entry_lines = entry_lines
        self._sizes: tuple[list[int], list[int]] | None = None
        self._lines: dict[int, list[str]] = {}

    def hidden(self, *, fixed_tokens: int, budget: int, minimum_recent_turns: int = 1) -> int:
        """How many of the oldest entries to hide (see :func:`trim_history`)."""
        if not self.history:
            return 0
        if self._sizes is None:
            self._sizes = self._turn_sizes()
        sizes, counts = self._sizes
        total = fixed_tokens + sum(sizes)
        if total <= budget * 0.6:
            return 0
        hidden = 0
        dropped = 0
        while total > budget and len(sizes) - dropped > minimum_recent_turns:
            total -= sizes[dropped]
            hidden += counts[dropped]
            dropped += 1
        return hidden

    def lines(self, hidden: int = 0) -> list[str]:
        """The lines of the entries after the first ``hidden``."""
        lines = self._lines.get(hidden)
        if lines is None:
            lines = self._lines[hidden] = self.entry_lines.lines(self.history[hidden:])
        return lines

    def _turn_sizes(self) -> tuple[list[int], list[int]]:
        """Per turn (a turn starts at each prompt entry): the tokens of its lines joined by
        newlines, plus one for the newline before it; and its number of entries."""
        sizes: list[int] = []
        counts: list[int] = []
        chars = lines = 0
        line_of = self.entry_lines.line
        for entry in self.history:
            if isinstance(entry, PromptEntry) or not counts:
                if counts:
                    sizes.append(estimate_tokens_of_length(chars + max(lines - 1, 0)) + 1)
                counts.append(0)
                chars = lines = 0
            counts[-1] += 1
            if (line := line_of(entry)) is not None:
                chars += len(line)
                lines += 1
        sizes.append(estimate_tokens_of_length(chars + max(lines - 1, 0)) + 1)
        return sizes, counts


# --- task texts ------------------------------------------------------------------------------


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 1] + "…"


def _catalog(tools: Sequence[ToolDefinition]) -> list[str]:
    lines = []
    for tool in tools:
        description = tool.description.strip() or "(no description)"
        lines.append(f"- {tool.name}: {description} Arguments: {tool.schema.render_compact()}")
    return lines


def _example_arguments(tool: ToolDefinition) -> str:
    """A concrete, valid arguments object to show in the example envelope: small models copy
    the example's shape, so a placeholder such as ``{…}`` would be copied literally."""
    schema = tool.schema
    return schema.derived("example_json", lambda _: compact_json(schema.example()))


def decide_task(
    tools: Sequence[ToolDefinition], *, allow_respond: bool, last_message: str
) -> str:
    """The decide step: pick one tool (or respond) and answer with one JSON step envelope.

    Every option is shown as a complete envelope, respond first: small models copy the example they
    see, and one example biased them toward respond (Qwen2.5-Coder-1.5B, ten player lines: 5/10
    right actions with one example, 1 of 6 tool lines; 10/10 with every option shown).
    """
    lines = ["Available tools:", *_catalog(tools)]
    if allow_respond:
        lines.append('- respond: answer the user directly, without a tool. Arguments: {}')
    if last_message.strip():
        lines += ["", f'The user\'s last message: "{_quote(last_message)}"']
    lines.append("")
    if allow_respond:
        lines.append(
            "Decide the next step. If a tool does what the user asks, or looks up what they want to know, "
            "call it: the tools know things you do not. If no tool fits, or the conversation already has "
            "what you need, choose respond."
        )
    else:
        lines.append("You must use one of the tools now.")
    lines.append("Answer with one JSON object only, no other text. The possible answers:")
    if allow_respond:
        lines.append('{"action": "respond", "arguments": {}}')
    lines += [f'{{"action": "{tool.name}", "arguments": {_example_arguments(tool)}}}' for tool in tools]
    return "\n".join(lines)


def tool_arguments_task(tool: ToolDefinition) -> str:
    """The toolArguments step: write only the arguments of the named tool."""
    lines = [f"You are calling the tool {tool.name}: {tool.description.strip() or '(no description)'}"]
    lines.append("Its arguments are a JSON object with these keys:")
    lines.append(tool.schema.render_lines())
    lines.append("Answer with the JSON object of arguments only, no other text.")
    return "\n".join(lines)


def respond_task(*, used_tools: bool, assistant_label: str) -> str:
    """The reply step."""
    text = f"Write {assistant_label}'s reply to the user's last message."
    if used_tools:
        text += " Use the tool results above where they matter; do not show them as brackets."
    return text + " Reply in plain text, without a speaker label."


def structured_task(schema: Schema, *, last_message: str, later_turn: bool) -> str:
    """The structured step: a JSON value of the required form."""
    lines = []
    if later_turn and last_message.strip():
        lines.append(f'Write a new reply to the user\'s last message: "{_quote(last_message)}"')
    if schema.root_is_array:
        lines.append("Answer with a JSON array only, no other text. Its form:")
        lines.append(schema.render_compact())
    else:
        lines.append("Answer with one JSON object only, no other text, with these keys:")
        lines.append(schema.render_lines())
    return "\n".join(lines)


def repair_task(task: str, *, problem: str, previous_answer: str) -> str:
    """A repair: the original task plus the problem and the quoted previous answer."""
    return (
        f"{task}\n\nYour previous answer could not be used: {problem}.\n"
        f"Previous answer: {previous_answer}\nAnswer again, correctly."
    )


def summary_input(previous_note: str | None, entries: Sequence[Entry], labels: Labels) -> str:
    """The compaction prompt: the summary so far plus the older entries as labelled lines."""
    parts = []
    if previous_note and previous_note.strip():
        parts.append(f"Summary so far:\n{previous_note.strip()}")
    parts.append("Conversation:\n" + "\n".join(render_entries(entries, labels)))
    return "\n\n".join(parts)
