"""The Agent: a conversation with tools on top of any :class:`LanguageModel`.

An agent owns instructions, a context note, tools, a policy and the committed history. It runs
one turn at a time (the caller serialises turns; a session actor does). ``respond`` is cancellable
by cancelling the task that awaits it: until the commit at the end of the turn nothing changes, so
a cancelled turn leaves no trace. External (client) tools make the turn wait for
:meth:`submit_tool_result`. Waits between retries of a model step sleep on ``clock`` (pass a
:class:`~oam_actors.clock.ManualClock` to move time yourself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from ..clock import Clock, MonotonicClock
from ..errors import AgentError, ErrorCode
from . import prompts
from .cancellation import checkpoint_if_cancelled
from .events import EventSink, TurnResult
from .external import ExternalCalls
from .model import GenerationRequest, LanguageModel, StepKind, Usage
from .policy import AgentOptions, TurnOverrides
from .schema import Schema
from .tools import ToolDefinition, ToolOutput
from .transcript import Entry, PromptEntry, ResponseEntry, ToolUseEntry, Transcript, split_turns
from .turn import Turn

__all__ = ["Agent", "DEFAULT_SUMMARY_INSTRUCTIONS"]

DEFAULT_SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below for your own later use: keep names, facts, decisions, "
    "promises and open questions; write short plain sentences; no preamble."
)


class Agent:
    """A conversation with tools. See the module docstring for the contract."""

    def __init__(
        self,
        model: LanguageModel,
        *,
        instructions: str | None = None,
        context_note: str | None = None,
        tools: Sequence[ToolDefinition] = (),
        options: AgentOptions | None = None,
        history: Sequence[Entry] = (),
        render_response: Callable[[ResponseEntry], str] | None = None,
        owner: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.context_note = context_note
        self.tools: list[ToolDefinition] = list(tools)
        self.options = options or AgentOptions()
        self.history: list[Entry] = list(history)
        self.render_response = render_response
        self.owner = owner
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.external_calls = ExternalCalls()
        self._turn: Turn | None = None
        self._history_lines: prompts.HistoryLines | None = None

    # --- settings ----------------------------------------------------------------------------

    @property
    def system_text(self) -> str:
        return prompts.system_text(self.instructions, self.context_note)

    def history_lines(self, labels: prompts.Labels) -> prompts.HistoryLines:
        """The history as steps show it with ``labels``, caught up with :attr:`history` and kept
        across turns (each entry is rendered once)."""
        return self._synced_lines(labels.user, labels.assistant, labels)

    def step_lines(self, options: AgentOptions) -> prompts.HistoryLines:
        """:meth:`history_lines` with the labels of ``options`` (no new labels per turn)."""
        return self._synced_lines(options.user_label, options.assistant_label, None)

    def _synced_lines(self, user: str, assistant: str, labels: prompts.Labels | None) -> prompts.HistoryLines:
        lines = self._history_lines
        if (
            lines is None or lines.labels.user != user or lines.labels.assistant != assistant
            or lines.render_response is not self.render_response
        ):
            labels = labels or prompts.Labels(user, assistant)
            lines = self._history_lines = prompts.HistoryLines(labels, self.render_response)
        lines.sync(self.history)
        return lines

    @property
    def turn_entries(self) -> list[Entry]:
        """The running turn's entries so far: its prompt, then its tool uses (empty between turns)."""
        turn = self._turn
        return [] if turn is None else [PromptEntry(turn.prompt), *turn.tool_uses]

    def reset(self) -> None:
        """Forget the conversation and the context note; keep instructions, tools and policy."""
        self.history = []
        self.context_note = None

    def transcript(self, *, include_in_progress: bool = True) -> Transcript:
        """The saveable state; during a turn it includes that turn's entries so far."""
        entries = list(self.history)
        if include_in_progress:
            entries += self.turn_entries
        return Transcript(
            instructions=self.instructions,
            contextNote=self.context_note,
            tools=[t.to_wire() for t in self.tools],
            entries=entries,
        )

    # --- turns -------------------------------------------------------------------------------

    async def respond(
        self,
        prompt: str,
        *,
        schema: Schema | None = None,
        overrides: TurnOverrides | None = None,
        emit: EventSink | None = None,
        on_commit: Callable[[], None] | None = None,
        tool_uses: Sequence[ToolUseEntry] = (),
        partial_values: bool = True,
        text_deltas: bool = True,
        step_events: bool = True,
    ) -> TurnResult:
        """Run one turn and commit it to the history.

        ``tool_uses`` are this turn's tool rounds already made (a stateless client such as the
        OpenAI front door resumes the turn with their results); they are committed with it.
        ``emit`` receives the turn's events in order (awaited: a slow sink slows the turn).
        ``partial_values=False`` leaves out the ``partialValue`` events of a structured step while
        it streams (its final value is still emitted): a sink that shows nothing until the end
        saves a parse of the growing text at every piece. ``text_deltas=False`` likewise leaves
        out the ``text`` events of the reply step (the reply is cleaned once, at its end), and
        ``step_events=False`` the ``modelStep`` events (a sink that streams nothing ignores them).
        ``on_commit`` runs synchronously at the commit point, after which the turn can no longer
        be cancelled. Raises :class:`AgentError`; cancellation propagates as usual and leaves the
        history unchanged.
        """
        # A turn cancelled before it starts must not consume a model step. Only the check: the
        # caller has just yielded (an actor's mailbox does before each message), and the model
        # step yields anyway, so one more hop of the event loop would buy nothing.
        await checkpoint_if_cancelled()
        options = overrides.apply(self.options) if overrides is not None else self.options
        turn = self._turn = Turn(self, prompt, schema, options, emit, partial_values, text_deltas, step_events)
        if tool_uses:
            turn.resume(tool_uses)
        try:
            result, entries = await turn.run()
        finally:
            self._turn = None
        # Commit point: no await between here and the return.
        self.history.extend(entries)
        if on_commit is not None:
            on_commit()
        return result

    def submit_tool_result(self, call_id: str, output: ToolOutput) -> bool:
        """Deliver an external tool's output. False if no call with that id is waiting."""
        return self.external_calls.submit(call_id, output)

    @property
    def pending_tool_calls(self) -> list[str]:
        """Ids of external calls the running turn is waiting for."""
        return self.external_calls.pending

    # --- compaction --------------------------------------------------------------------------

    async def compact(
        self,
        *,
        keep_recent_turns: int = 2,
        summary_instructions: str | None = None,
        on_commit: Callable[[], None] | None = None,
    ) -> str | None:
        """Summarise older turns into the context note; returns the summary or ``None`` when
        there is nothing to compact. One model call, no retries. Raises ``generation_failed`` for
        an empty summary."""
        await anyio.lowlevel.checkpoint()
        turns = split_turns(self.history)
        if not turns or len(turns) <= keep_recent_turns:
            return None
        older_turns = turns[: len(turns) - keep_recent_turns]
        older = [entry for turn in older_turns for entry in turn]
        labels = prompts.Labels(self.options.user_label, self.options.assistant_label)
        request = GenerationRequest(
            kind=StepKind.SUMMARY,
            system=(summary_instructions or DEFAULT_SUMMARY_INSTRUCTIONS).strip(),
            prompt=prompts.summary_input(self.context_note, older, labels),
            temperature=0.0,
            max_output_tokens=400,
            sampling=self.options.sampling,
            owner=self.owner,
            priority="background",
        )
        pieces: list[str] = []
        async for piece in self.model.stream(request):
            if not isinstance(piece, Usage):
                pieces.append(piece)
        summary = "".join(pieces).strip()
        if not summary:
            raise AgentError(ErrorCode.GENERATION_FAILED, "The model returned an empty summary.")
        # Commit point: no await between here and the return.
        self.context_note = summary
        self.history = self.history[len(older):]
        if on_commit is not None:
            on_commit()
        return summary

    def __repr__(self) -> str:
        return f"Agent(model={type(self.model).__name__}, tools={[t.name for t in self.tools]}, entries={len(self.history)})"
