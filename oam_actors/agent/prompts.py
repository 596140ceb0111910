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
    "HistoryLines",
    "Labels",
    "TOOL_OUTPUT_LIMIT",
    "build_prompt",
    "decide_task",
    "decide_task_parts",
    "decide_task_with",
    "plain_prompt",
    "prompt_body",
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
    history_text: str | None = None,
    tool_lines: Sequence[str] | None = None,
) -> str:
    """The step prompt.

    ``plain_task`` (reply steps only) allows the plain-first-request form: with no history, no tool
    use and a non-blank prompt, the prompt is the user's text followed by ``plain_task`` if any.
    ``history_text`` and ``tool_lines``, when the caller has them, are ``history`` and
    ``turn_tool_uses`` already rendered (:meth:`HistoryLines.text`, :meth:`HistoryLines.line`).
    """
    if plain_task is not None and not history and not turn_tool_uses and prompt.strip():
        return plain_prompt(prompt, plain_task)
    if history_text is None:
        history_text = "\n".join(render_entries(history, labels, render_response))
    lines = tool_lines if tool_lines is not None else list(map(_tool_line, turn_tool_uses))
    return prompt_body(history_text=history_text, prompt=prompt, labels=labels, tool_lines=lines) + task


def plain_prompt(prompt: str, plain_task: str) -> str:
    """The plain-first-request form of a reply step (see :func:`build_prompt`)."""
    return f"{prompt}\n\n{plain_task}" if plain_task else prompt


def prompt_body(*, history_text: str, prompt: str, labels: Labels, tool_lines: Sequence[str]) -> str:
    """A step prompt up to its task: the conversation (``history_text``, the history's lines
    joined), this turn's prompt and tool lines, then the blank line before the task. The same
    for every step of a turn that shows the same entries, so a turn joins it once."""
    # No line is ever empty, so an empty text means no history lines.
    lines = ["Conversation:", history_text] if history_text else ["Conversation:"]
    if prompt.strip():
        lines.append(f"{labels.user}: {prompt}")
    lines.extend(tool_lines)
    return "\n".join(lines) + "\n\n"


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
    shown = HistoryLines(labels, render_response)
    shown.sync(history)
    return shown.hidden(fixed_tokens=fixed_tokens, budget=budget, minimum_recent_turns=minimum_recent_turns)


class HistoryLines:
    """One conversation's history as the steps show it, rendered as it grows.

    :meth:`hidden` is :func:`trim_history`, :meth:`text` the lines after the hidden entries.
    Every step of every turn shows the history again, and a history only grows between turns (a
    turn's entries are appended at its commit), so an agent keeps one of these: :meth:`sync`
    renders the entries appended since it last looked (each entry once) and counts their turns'
    sizes, so a step costs what its own turn adds, not the length of the conversation. Another
    list (reset, compaction, restore) or a shorter one starts over.
    """

    __slots__ = (
        "_chars", "_count", "_history", "_joined", "_last", "_line_count", "_line_offsets", "_line_starts",
        "_rendered", "_sizes", "_texts", "_total", "_turn_entries", "labels", "render_response",
    )

    def __init__(self, labels: Labels, render_response: ResponseRenderer | None = None) -> None:
        self.labels = labels
        self.render_response = render_response
        self._start_over(None)

    def _start_over(self, history: Sequence[Entry] | None) -> None:
        self._history = history
        self._count = 0  # entries rendered
        self._last: Entry | None = None  # the last of them, to notice a history rewritten in place
        # The rendered lines (blank prompts show none) joined by newlines, extended as the history
        # grows: a step's history text is a slice of it, not a join of every line at every turn.
        self._joined = ""
        self._line_offsets: list[int] = []  # per line: where it starts in the joined text
        self._line_starts: list[int] = []  # per entry: its index in the lines
        self._sizes: list[int] = []  # per turn: tokens of its lines joined, plus one newline
        self._turn_entries: list[int] = []  # per turn: its number of entries
        self._total = 0  # sum of the sizes
        self._chars = self._line_count = 0  # the last turn's so far
        self._texts: dict[int, str] = {}
        # Lines :meth:`line` rendered since the last sync (a turn's tool uses, which it commits).
        self._rendered: dict[int, tuple[Entry, str | None]] = {}

    @property
    def count(self) -> int:
        """How many entries the history has (as of the last :meth:`sync`)."""
        return self._count

    def sync(self, history: Sequence[Entry]) -> None:
        """Catch up with ``history``: render what was appended since the last call."""
        count = self._count
        if history is not self._history or len(history) < count or (count and history[count - 1] is not self._last):
            self._start_over(history)
            count = 0
        rendered = self._rendered
        if len(history) == count:
            rendered.clear()
            return
        self._texts.clear()
        offsets, starts, sizes, entries = self._line_offsets, self._line_starts, self._sizes, self._turn_entries
        labels, render = self.labels, self.render_response
        added: list[str] = []
        end = len(self._joined)  # where the next line starts, less its newline
        for index in range(count, len(history)):
            entry = history[index]
            if isinstance(entry, PromptEntry) or not entries:
                sizes.append(0)
                entries.append(0)
                self._chars = self._line_count = 0
            entries[-1] += 1
            starts.append(len(offsets))
            kept = rendered.get(id(entry))
            line = kept[1] if kept is not None and kept[0] is entry else _entry_line(entry, labels, render)
            if line is not None:
                if offsets:
                    end += 1
                offsets.append(end)
                end += len(line)
                added.append(line)
                self._chars += len(line)
                self._line_count += 1
            size = estimate_tokens_of_length(self._chars + max(self._line_count - 1, 0)) + 1
            self._total += size - sizes[-1]
            sizes[-1] = size
        if added:
            text = "\n".join(added)
            self._joined = f"{self._joined}\n{text}" if self._joined else text
        self._count = len(history)
        self._last = history[-1]
        rendered.clear()

    def line(self, entry: Entry) -> str | None:
        """Any entry's line as these labels show it (``None`` for a blank prompt); kept until
        the next :meth:`sync`, which shows the entry with it once it is in the history."""
        kept = self._rendered.get(id(entry))
        if kept is not None and kept[0] is entry:
            return kept[1]
        line = _entry_line(entry, self.labels, self.render_response)
        self._rendered[id(entry)] = (entry, line)
        return line

    def hidden(self, *, fixed_tokens: int, budget: int, minimum_recent_turns: int = 1) -> int:
        """How many of the oldest entries to hide (see :func:`trim_history`)."""
        if not self._count:
            return 0
        sizes, counts = self._sizes, self._turn_entries
        total = fixed_tokens + self._total
        if total <= budget * 0.6:
            return 0
        hidden = 0
        dropped = 0
        while total > budget and len(sizes) - dropped > minimum_recent_turns:
            total -= sizes[dropped]
            hidden += counts[dropped]
            dropped += 1
        return hidden

    def text(self, hidden: int = 0) -> str:
        """The lines of the entries after the first ``hidden``, joined by newlines."""
        if not hidden:
            return self._joined
        text = self._texts.get(hidden)
        if text is None:
            offsets = self._line_offsets
            first = self._line_starts[hidden] if hidden < self._count else len(offsets)
            text = self._texts[hidden] = self._joined[offsets[first]:] if first < len(offsets) else ""
        return text


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
    return decide_task_with(decide_task_parts(tools, allow_respond=allow_respond), last_message)


def decide_task_parts(tools: Sequence[ToolDefinition], *, allow_respond: bool) -> tuple[str, str]:
    """The decide task before and after the user's message: they depend on the tools only, so
    an agent renders them once for its tools (:func:`decide_task_with` adds the message)."""
    head = ["Available tools:", *_catalog(tools)]
    if allow_respond:
        head.append('- respond: answer the user directly, without a tool. Arguments: {}')
    tail = []
    if allow_respond:
        tail.append(
            "Decide the next step. If a tool does what the user asks, or looks up what they want to know, "
            "call it: the tools know things you do not. If no tool fits, or the conversation already has "
            "what you need, choose respond."
        )
    else:
        tail.append("You must use one of the tools now.")
    tail.append("Answer with one JSON object only, no other text. The possible answers:")
    if allow_respond:
        tail.append('{"action": "respond", "arguments": {}}')
    tail += [f'{{"action": "{tool.name}", "arguments": {_example_arguments(tool)}}}' for tool in tools]
    return "\n".join(head), "\n".join(tail)


def decide_task_with(parts: tuple[str, str], last_message: str) -> str:
    """The decide task from its :func:`decide_task_parts` and the user's last message."""
    head, tail = parts
    if last_message.strip():
        return f'{head}\n\nThe user\'s last message: "{_quote(last_message)}"\n\n{tail}'
    return f"{head}\n\n{tail}"


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
