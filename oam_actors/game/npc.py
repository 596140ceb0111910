"""The NPC: a persona-driven conversation on the agent engine (protocol-game §6.5–§6.11).

Contract:

- One NPC owns an :class:`~oam_actors.agent.Agent` (its history), a memory store and its
  settings. The caller serialises :meth:`NPC.talk`, :meth:`NPC.reconfigure`, :meth:`NPC.reset`,
  :meth:`NPC.compact` and :meth:`NPC.settled_state` (an NPC actor's ordered lane does);
  :meth:`NPC.bark` and the read-only properties may run at any time.
- A talk is cancellable by cancelling the task awaiting it until its commit point; a cancelled or
  failed talk leaves history and memory unchanged. ``on_commit`` runs synchronously at the commit
  point; the final emotion/line events are sent after it, shielded from cancellation.
- Client tools are :class:`~oam_actors.agent.ToolDefinition` values without a handler: their
  calls are announced as ``ToolCallStarted(execution="client")`` and answered through
  :meth:`NPC.submit_tool_result`. Local tools (world, memory, host handlers) run in place.
- After a successful turn that reaches ``compactAfterTurns``, compaction becomes *pending*: the
  host runs :meth:`NPC.run_pending_compaction` as the next job (background: failures swallowed);
  otherwise the next talk or settled save runs it first, so it always precedes later work.
- Configuration errors (blank name, duplicate tool names, unknown grounding tool, bad budgets)
  raise ``-32602 invalid_params``; a per-turn ``toolChoice`` naming a missing tool raises
  ``-32011 invalid_request`` before any model call.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import msgspec

from ..agent.agent import Agent
from ..agent.batch import ItemModel, may_coalesce
from ..agent.events import (
    PartialValue,
    TextDelta,
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
)
from ..agent.model import BatchItem, GenerationRequest, LanguageModel, StepKind
from ..agent.policy import AgentOptions, ToolChoice, ToolChoiceKind
from ..agent.prompts import Labels
from ..agent.schema import Schema
from ..agent.tools import (
    ErrorOutput,
    JsonOutput,
    TextOutput,
    ToolCallRecord,
    ToolDefinition,
    ToolOutput,
)
from ..agent.transcript import Entry, PromptEntry, ResponseEntry, Transcript
from ..clock import Budget
from ..errors import AgentError, DeadlinePassed, ErrorCode, OamError, invalid_params
from . import _prompting as prompting
from ._decode import WireObject
from ._dialogue import (
    PLAYER_LABEL,
    DialogueTurn,
    LineTracker,
    NPCEvent,
    NPCEventSink,
    Reply,
    parse_reply,
    parse_text_reply,
    partial_text_reply,
)
from ._items import bark_item, reply_item, structured_reply_item, tool_choice_item
from ._text import says_nothing, single_line, situation_text
from .conversation import (
    LINE_REASKS,
    LINE_SENTENCES,
    ConversationView,
    LineProblem,
    LineReply,
    judged_line,
    line_prompt,
    reask_prompt,
)
from .memory import MemoryStore, NPCMemory, draws_on, memory_tools, secret_visibility
from .options import NPCOptions, ReplyFormat, check_configuration
from .persona import Emotion, Persona, SecretVisibility
from .world import WorldState
from .world_tools import (
    OutputKind,
    WorldToolOutput,
    read_tool_definition,
    read_world_state,
    update_tool_definition,
    update_world_state,
)

__all__ = ["NPC", "RECENT_BARKS", "SAVE_STATE_VERSION", "BarkLine", "NPCSaveState"]

_log = logging.getLogger(__name__)

SAVE_STATE_VERSION = 1
_NONE = ToolChoice(ToolChoiceKind.NONE)
_DESCRIBED_STEPS = frozenset({StepKind.RESPOND, StepKind.STRUCTURED, StepKind.DECIDE})
RECENT_BARKS = 4
"""Barks an NPC remembers (not saved), to say one again when the quota has no room in time."""


class BarkLine(msgspec.Struct, frozen=True):
    """An ``npc/bark`` result: the line, why it is a fallback when it is (``"deadline"``), and
    whether that fallback is one of the NPC's recent barks said again (else a fallbackLines line)."""

    line: str
    degraded: str | None = None
    repeated: bool = False

    def to_wire(self, npc: str) -> dict[str, Any]:
        """``{npc, line}``; a degraded bark adds ``isFallback: true, degraded``, and
        ``repeated: true`` when it is a recent bark said again."""
        wire: dict[str, Any] = {"npc": npc, "line": self.line}
        if self.degraded is not None:
            wire |= {"isFallback": True, "degraded": self.degraded}
            if self.repeated:
                wire["repeated"] = True
        return wire


class NPCSaveState(msgspec.Struct, frozen=True, kw_only=True):
    """What the library saves: persona, memory and the transcript of complete turns. Tools, the
    world and options are not part of it (the bridge adds them to ``npc/state``)."""

    persona: Persona
    memory: NPCMemory = msgspec.field(default_factory=NPCMemory)
    transcript: Transcript = msgspec.field(default_factory=Transcript)
    version: int = SAVE_STATE_VERSION

    def to_wire(self) -> dict[str, Any]:
        """``{"version", "persona", "memory", "transcript"}``."""
        return {
            "version": self.version,
            "persona": self.persona.to_wire(),
            "memory": self.memory.to_wire(),
            "transcript": self.transcript.to_wire(),
        }

    @classmethod
    def from_wire(cls, value: Any, path: str = "state") -> NPCSaveState:
        """Decode a save state, or a whole ``npc/state`` result (detected by a missing
        ``persona`` beside an object ``state``). Only the persona is required."""
        if not isinstance(value, dict):
            raise invalid_params(f"'{path}' must be a save state object from npc/state.")
        if "persona" not in value and isinstance(value.get("state"), dict):
            return cls.from_wire(value["state"], f"{path}.state")
        wire = WireObject(value, path)
        persona = wire.raw("persona")
        if persona is None:
            raise invalid_params(f"Missing required parameter '{wire.location('persona')}'.")
        transcript = wire.raw("transcript")
        return cls(
            version=wire.integer("version", SAVE_STATE_VERSION),
            persona=Persona.from_wire(persona, wire.location("persona")).value,
            memory=NPCMemory.from_wire(wire.raw("memory"), wire.location("memory")),
            transcript=_complete_turns(
                Transcript() if transcript is None else Transcript.from_wire(transcript, path=wire.location("transcript"))
            ),
        )


@dataclasses.dataclass(frozen=True)
class _Attempt:
    """One model run of a turn (the first, or its text retry)."""

    prompt: str
    schema: Schema | None
    agent_options: AgentOptions
    instructions: str
    note: str | None
    persona: Persona
    options: NPCOptions
    world_summary: str | None
    situation: str | None
    coalesce: bool = False  # its decide steps and reply step may be answered in a batch

    @property
    def may_retry_as_text(self) -> bool:
        return self.schema is not None and self.options.reply_format is ReplyFormat.AUTOMATIC


class NPC:
    """A conversational character. See the module docstring for the contract."""

    def __init__(
        self,
        persona: Persona,
        model: LanguageModel,
        *,
        tools: Sequence[ToolDefinition] = (),
        world: WorldState | None = None,
        options: NPCOptions | None = None,
        memory: NPCMemory | None = None,
        history: Sequence[Entry] = (),
        owner: str | None = None,
    ) -> None:
        _require_name(persona)
        self.model = model
        self.world = world
        self.owner = owner
        self._persona = persona
        self._options = options or NPCOptions()
        self._client_tools = list(tools)
        self._store = MemoryStore(memory or NPCMemory())
        composed = self._compose(self._client_tools, self._options)
        # The instructions of the inputs they were rendered from: rendered at the first turn,
        # then again only when one of those changes, not at every turn.
        self._instructions: tuple[tuple[Any, ...], str] | None = None
        # Until a turn sets them, the instructions are those of creation, rendered only when a
        # save asks for them: most NPCs of a crowd are saved or talk much later, or never.
        self._creation: tuple[Persona, NPCOptions, list[str], NPCMemory] | None = (
            persona, self._options, [t.name for t in composed], self._store.memory,
        )
        self._agent = Agent(
            model,
            context_note=prompting.memory_note(self._store.memory, self._options),
            tools=composed,
            history=history,
            render_response=prompting.spoken_response,
            owner=owner,
        )
        self._fallbacks = 0
        self._compaction_due = False
        self._recent_barks: deque[str] = deque(maxlen=RECENT_BARKS)
        # The reply schema of the persona and options it was made for (both immutable): compiled
        # once, not at every turn.
        self._reply_schema: tuple[Persona, NPCOptions, Schema] | None = None

    @classmethod
    def restore(
        cls,
        saved: NPCSaveState,
        model: LanguageModel,
        *,
        tools: Sequence[ToolDefinition] = (),
        world: WorldState | None = None,
        options: NPCOptions | None = None,
        owner: str | None = None,
        compaction_pending: bool = False,
    ) -> NPC:
        """An NPC from a save; tools, world and options are passed again (they are code).
        ``compaction_pending``: the saved NPC had compaction pending (a host's checkpoint)."""
        npc = cls(
            saved.persona, model, tools=tools, world=world, options=options,
            memory=saved.memory, history=saved.transcript.entries, owner=owner,
        )
        npc._compaction_due = compaction_pending
        return npc

    # --- state ---------------------------------------------------------------------------------

    @property
    def persona(self) -> Persona:
        return self._persona

    @property
    def options(self) -> NPCOptions:
        return self._options

    @property
    def memory(self) -> NPCMemory:
        """The committed memory (changes staged by a running turn are not included)."""
        return self._store.memory

    @property
    def client_tools(self) -> list[ToolDefinition]:
        """The tools given at creation or by :meth:`reconfigure` (without built-ins)."""
        return list(self._client_tools)

    @property
    def tool_names(self) -> list[str]:
        """The tools the model sees: client tools, then world tools, then memory tools."""
        return [t.name for t in self._agent.tools]

    @property
    def turn_count(self) -> int:
        """Turns kept verbatim in the history (compacted turns are not counted)."""
        return sum(map(isinstance, self._agent.history, itertools.repeat(PromptEntry)))

    @property
    def compaction_pending(self) -> bool:
        return self._compaction_due

    @property
    def pending_tool_calls(self) -> list[str]:
        """Ids of client tool calls the running turn waits for."""
        return self._agent.pending_tool_calls

    def submit_tool_result(self, call_id: str, output: ToolOutput) -> bool:
        """Deliver a client tool's output; ``False`` if no call with that id is waiting."""
        return self._agent.submit_tool_result(call_id, output)

    def reconfigure(
        self,
        *,
        persona: Persona | None = None,
        options: NPCOptions | None = None,
        tools: Sequence[ToolDefinition] | None = None,
        memory: NPCMemory | None = None,
    ) -> None:
        """Replace any of persona, options, client tools and memory, all or nothing: every part
        is checked (options against the new tool set) before anything changes. Applies from
        the next turn."""
        if persona is not None:
            _require_name(persona)
        new_options = options if options is not None else self._options
        new_tools = list(tools) if tools is not None else self._client_tools
        composed = self._compose(new_tools, new_options)
        self._persona = persona if persona is not None else self._persona
        self._options = new_options
        self._client_tools = new_tools
        self._agent.tools = composed
        if memory is not None:
            self._store.memory = memory

    def reset(self, *, clear_memory: bool = False) -> None:
        """Forget the conversation (and, with ``clear_memory``, facts, relationship and summary)."""
        self._agent.reset()
        self._store.discard()
        self._compaction_due = False
        if clear_memory:
            self._store.memory = NPCMemory()

    def save_state(self) -> NPCSaveState:
        """A snapshot of complete turns; a turn in progress and pending compaction are left out."""
        if self._creation is not None:
            persona, options, names, memory = self._creation
            self._agent.instructions = self._instructions_for(
                persona, options, names, memory, text_reply=options.reply_format is ReplyFormat.TEXT)
        transcript = self._agent.transcript(include_in_progress=False)
        return NPCSaveState(persona=self._persona, memory=self._store.memory, transcript=_complete_turns(transcript))

    async def settled_state(self) -> NPCSaveState:
        """:meth:`save_state` after any pending compaction has run."""
        await self.run_pending_compaction()
        return self.save_state()

    # --- talking -------------------------------------------------------------------------------

    async def talk(
        self,
        line: str,
        *,
        context: Any = None,
        tool_choice: ToolChoice | None = None,
        emit: NPCEventSink | None = None,
        on_commit: Callable[[], None] | None = None,
        budget: Budget | None = None,
        partial_values: bool = True,
        coalesce: bool = True,
    ) -> DialogueTurn:
        """Run one turn. ``context`` (text or JSON) is this turn's situation; ``tool_choice``
        overrides the NPC's policy for the first step; ``emit`` receives the turn's events (without
        one, nothing follows the line as it streams); ``budget`` (its deadline, counted from the
        request's arrival) caps each model step's wait for quota (when it runs out the turn is a fallback line marked ``degraded``, as far
        as ``fallbackOnGuardrail`` allows). ``partial_values=False``: the line is not followed
        while the reply streams (``Agent.respond``), only its end is emitted. ``coalesce``: a
        coalescing backend may answer its decide steps and its reply step (plain or structured)
        together with other NPCs' (:func:`~._items.reply_item` says when it may; the text retry
        runs alone; a batch answer of another NPC's step that carries what this NPC privately
        knows, :meth:`~.memory.NPCMemory.private_texts`, runs that step alone; a talk whose
        ``line`` asks about a line the NPC heard, :meth:`~.memory.NPCMemory.heard_note_about`,
        runs alone). A reply with no words, or one that draws nothing on the heard line asked
        about (:func:`~.memory.draws_on`), is asked again once, alone, as text, told what was
        wrong. Raises :class:`AgentError` for errors no fallback covers; see the module docstring
        for events and commit."""
        await self.run_pending_compaction()
        heard = self._store.memory.heard_note_about(line)  # what the player asks about, if it heard it
        # A reply about what only this NPC heard runs alone: in a batch a small model answers
        # from the persona and overlooks the note among the other items (and another item's
        # answer could only carry it away, to be run again alone).
        attempt = self._prepare(line, situation_text(context), tool_choice, budget=budget,
                                coalesce=coalesce and heard is None)
        self._creation = None  # the attempt's instructions are the agent's from now on
        self._store.discard()
        tracker = LineTracker(attempt.persona.name.strip())
        records: list[ToolCallRecord] = []
        retried = reasked = False
        while True:
            before = len(self._agent.history)
            try:
                result = await self._run(attempt, tracker, records, emit, partial_values)
            except DeadlinePassed:
                # No step could start in time: a text retry would not either.
                self._store.discard()
                if not attempt.options.fallback_on_guardrail:
                    raise
                turn = self._fallback_turn(attempt, records, degraded=prompting.DEADLINE)
            except AgentError as error:
                unusable = error.code in prompting.UNUSABLE
                if unusable and attempt.may_retry_as_text and not retried:
                    # Tools already ran: keep their staged memory and pass their results as facts.
                    retried = True
                    attempt = self._text_retry(attempt, records)
                    continue
                self._store.discard()
                if not (unusable and attempt.options.fallback_on_guardrail):
                    raise
                turn = self._fallback_turn(attempt, records)
            except BaseException:
                self._store.discard()
                raise
            else:
                said = self._reply_of(result, attempt).line
                # Only an emotion tag or a stage direction, or nothing of what the player asks
                # about and the NPC heard: asked once more, alone, told what was wrong (before a
                # fallback line stands in, for a wordless one). The reply is taken back out of
                # the history (nothing else of the turn is committed yet).
                repair = None
                if says_nothing(said):
                    repair = prompting.WORDLESS_REPAIR
                elif heard is not None and not draws_on(said, heard, line):
                    repair = prompting.heard_repair(heard)
                if not reasked and repair is not None:
                    reasked = retried = True
                    self._agent.history = self._agent.history[:before]
                    attempt = self._text_retry(attempt, records, repair=repair)
                    continue
                turn = self._completed_turn(result, attempt, records)
            break
        if on_commit is not None:
            on_commit()
        if emit is not None:
            with anyio.CancelScope(shield=True):
                await _send(emit, tracker.finish(turn.line, turn.emotion))
        return turn

    def _prepare(
        self, line: str, situation: str | None, tool_choice: ToolChoice | None, *, budget: Budget | None,
        coalesce: bool,
    ) -> _Attempt:
        persona, options = self._persona, self._options
        names = self.tool_names
        choice = tool_choice or (
            ToolChoice(ToolChoiceKind.TOOL, options.grounding_tool) if options.grounding_tool else options.tool_choice
        )
        if not names:
            choice = _NONE
        if choice.kind is ToolChoiceKind.TOOL and choice.tool not in names:
            raise AgentError(ErrorCode.INVALID_REQUEST, f"Tool '{choice.tool}' is not available to {persona.name}.")
        text_reply = options.reply_format is ReplyFormat.TEXT
        world_summary = self.world.summary(options.world_context_paths) if self.world is not None else None
        memory = self._store.memory
        return _Attempt(
            prompt=prompting.turn_prompt(line),
            schema=None if text_reply else self._schema_for(persona, options),
            agent_options=_agent_options(options, persona, choice, budget),
            instructions=self._instructions_for(persona, options, names, memory, text_reply=text_reply),
            note=prompting.context_note(memory, options, world_summary, situation, question=line),
            persona=persona,
            options=options,
            world_summary=world_summary,
            situation=situation,
            coalesce=may_coalesce(self.model, coalesce),
        )

    def _schema_for(self, persona: Persona, options: NPCOptions) -> Schema:
        known = self._reply_schema
        if known is None or known[0] is not persona or known[1] is not options:
            known = self._reply_schema = (persona, options, prompting.reply_schema(persona, options))
        return known[2]

    def _instructions_for(
        self, persona: Persona, options: NPCOptions, names: list[str], memory: NPCMemory, *, text_reply: bool
    ) -> str:
        """``prompting.instructions``, rendered again only when what it reads has changed (of
        the memory, only whether secrets may be shared)."""
        visibility = secret_visibility(options.secrets_unlock_at_relationship, memory.relationship)
        key = (persona, options, tuple(names), visibility, text_reply)
        known = self._instructions
        if known is None or known[0] != key:
            known = self._instructions = (key, prompting.instructions(persona, options, names, memory, text_reply=text_reply))
        return known[1]

    def _text_retry(self, attempt: _Attempt, records: list[ToolCallRecord], *, repair: str | None = None) -> _Attempt:
        """The attempt again as a text reply, alone, with the facts its tools returned and
        ``repair`` (what was wrong with the first answer) last in its note."""
        memory = self._store.memory
        options = attempt.options
        note = prompting.context_note(memory, options, attempt.world_summary, attempt.situation, records,
                                      question=attempt.prompt)
        return dataclasses.replace(
            attempt,
            coalesce=False,  # the retry of a reply that failed once: alone, as its own repair
            schema=None,
            agent_options=msgspec.structs.replace(attempt.agent_options, tool_choice=_NONE),
            instructions=prompting.instructions(attempt.persona, options, self.tool_names, memory, text_reply=True),
            note="\n".join(part for part in (note, repair) if part) or None,
        )

    async def _run(
        self,
        attempt: _Attempt,
        tracker: LineTracker,
        records: list[ToolCallRecord],
        emit: NPCEventSink | None,
        partial_values: bool,
    ) -> TurnResult:
        agent = self._agent
        agent.instructions = attempt.instructions
        agent.context_note = attempt.note
        agent.options = attempt.agent_options
        agent.model = ItemModel(self.model, functools.partial(self._reply_item, attempt)) if attempt.coalesce \
            else self.model

        async def forward(event: TurnEvent) -> None:
            if isinstance(event, ToolCallCompleted):
                records.append(event.record)
            if emit is None:
                return  # nobody follows the turn: the line is not tracked as it streams
            if isinstance(event, PartialValue):
                await _send(emit, tracker.consume(event.value))
            elif isinstance(event, TextDelta):
                await _send(emit, tracker.consume(partial_text_reply(event.text)))
            elif isinstance(event, ToolCallStarted | ToolCallCompleted | ToolCallAbandoned):
                await _send(emit, [event])

        try:
            # ``forward`` passes no ``modelStep`` on: the agent need not build them.
            return await agent.respond(
                attempt.prompt, schema=attempt.schema, emit=forward, partial_values=partial_values, step_events=False,
            )
        finally:
            agent.model = self.model

    def _reply_item(self, attempt: _Attempt, request: GenerationRequest) -> BatchItem | None:
        """The reply step's item: the whole conversation and this turn's tool results as the step
        shows them (an item too large for a batch runs alone: the policy's budget); a structured
        reply step's: the same, with what the NPC's reply schema asks; a decide step's: the same,
        with the tools it offers. ``None`` for any other step."""
        if request.kind not in _DESCRIBED_STEPS:
            return None
        agent = self._agent
        options = agent.options
        history = agent.history_lines(Labels(options.user_label, options.assistant_label))
        conversation = history.text().splitlines()
        tools = [line for entry in agent.turn_entries[1:] if (line := history.line(entry)) is not None]
        # What only this NPC knows goes with its item, so that no other item's answer carries it.
        reply = reply_item(attempt.persona, attempt.options.extra_instructions, attempt.note,
                           conversation, tools, request.user_prompt, options.user_label,
                           self._store.memory.private_texts())
        if reply is None:
            return None
        if request.kind is StepKind.DECIDE:
            return tool_choice_item(reply, request.prompt, [t.name for t in request.tools])
        if request.kind is StepKind.STRUCTURED:
            return structured_reply_item(reply, attempt.options)
        return reply

    def _completed_turn(self, result: TurnResult, attempt: _Attempt, records: list[ToolCallRecord]) -> DialogueTurn:
        # Synchronous from the agent's commit to here, so the turn cannot be half-committed.
        memory = self._store.commit(attempt.options.max_facts)
        reply = self._reply_of(result, attempt)
        turn = DialogueTurn(
            line=reply.line,
            emotion=reply.emotion,
            player_options=reply.player_options,
            ends_conversation=reply.ends_conversation,
            tool_calls=tuple(records),
            relationship=memory.relationship,
            usage=result.usage,
        )
        if says_nothing(turn.line):
            turn = msgspec.structs.replace(turn, line=self._next_fallback_line(attempt.options), is_fallback=True)
        self._schedule_compaction(attempt.options)
        return turn

    @staticmethod
    def _reply_of(result: TurnResult, attempt: _Attempt) -> Reply:
        if attempt.schema is None:
            return parse_text_reply(result.text, attempt.persona)
        return parse_reply(result.structured, attempt.persona, attempt.options)

    def _fallback_turn(self, attempt: _Attempt, records: list[ToolCallRecord], *,
                       degraded: str | None = None) -> DialogueTurn:
        return DialogueTurn(
            line=self._next_fallback_line(attempt.options),
            emotion=attempt.persona.default_emotion,
            tool_calls=tuple(records),
            relationship=self._store.memory.relationship,
            is_fallback=True,
            degraded=degraded,
        )

    def _next_fallback_line(self, options: NPCOptions) -> str:
        pool = options.fallback_pool
        line = pool[self._fallbacks % len(pool)]
        self._fallbacks += 1
        return line

    # --- compaction ----------------------------------------------------------------------------

    def _schedule_compaction(self, options: NPCOptions) -> None:
        keep = max(options.keep_recent_turns, 0)
        if options.compact_after_turns > 0 and self.turn_count >= max(options.compact_after_turns, keep + 1):
            self._compaction_due = True

    async def run_pending_compaction(self) -> bool:
        """Run compaction if it is pending; returns whether it ran. Background work: a model
        error changes nothing and is logged, not raised (nobody waits for it); any other
        exception is a bug and propagates. Cancelled, it stays pending."""
        if not self._compaction_due:
            return False
        try:
            await self._compact()
        except OamError as error:  # the history stays as it was; the next turn schedules it again
            # A model error is an expected, handled fault (a farm's phones fail on purpose): one
            # line, its traceback only at DEBUG.
            _log.warning("background compaction of NPC %s failed: %s", self._persona.name, error.message)
            _log.debug("background compaction of NPC %s failed", self._persona.name, exc_info=error)
        self._compaction_due = False
        return True

    async def compact(self) -> str | None:
        """Summarise all but ``keepRecentTurns`` turns into ``memory.summary`` now; ``None`` with
        too little history. Raises :class:`AgentError` on model errors, changing nothing."""
        return await self._compact()

    async def _compact(self) -> str | None:
        persona, options = self._persona, self._options
        agent = self._agent
        agent.options = _agent_options(options, persona, _NONE)
        # The summarizer is seeded with the previous summary only, not the whole memory block.
        # Lines heard in conversations among NPCs are folded into the summary with the turns.
        seed = self._store.memory
        agent.context_note = seed.compaction_seed()
        try:
            summary = await agent.compact(
                keep_recent_turns=max(options.keep_recent_turns, 0),
                summary_instructions=prompting.summary_instructions(persona),
            )
            if summary is not None and summary.strip():
                current = self._store.memory
                folded = len(seed.heard) if current.heard[:len(seed.heard)] == seed.heard else 0
                self._store.memory = dataclasses.replace(current, summary=summary.strip(), heard=current.heard[folded:])
            return summary
        finally:
            agent.context_note = prompting.memory_note(self._store.memory, options)

    # --- barks ---------------------------------------------------------------------------------

    async def bark(self, situation: Any = None, *, budget: Budget | None = None,
                   coalesce: bool = True) -> BarkLine:
        """A one-line ambient remark: a one-off request with no history, memory, secrets or tools.
        Raises :class:`AgentError` as is (the protocol has no fallback); an empty line is
        ``generation_failed``. One exception: when ``budget`` (its deadline from the request's
        arrival, or the backend's own queue time, also from arrival) runs out before the model can take the bark, one of this NPC's last
        :data:`RECENT_BARKS` barks is said again (the least recently repeated), marked
        ``degraded``; with none yet, the next of its own ``fallbackLines`` (the rotation talks
        use; never the default lines, which answer a player), and without those the error stands
        (so such a bark queues at decision priority, ahead of barks that can degrade).
        ``coalesce``: a coalescing backend may answer it together with other barks."""
        persona, options = self._persona, self._options
        speaker = persona.name.strip()
        instructions = msgspec.structs.replace(persona, max_sentences=1).instructions(
            options.extra_instructions, uses_tools=False, secret_visibility=SecretVisibility.HIDDEN
        )
        world_summary = self.world.summary(options.world_context_paths) if self.world is not None else None
        agent_options = AgentOptions(
            tool_choice=_NONE,
            temperature=options.temperature,
            max_response_tokens=options.bark_maximum_tokens,
            user_label=PLAYER_LABEL,
            assistant_label=speaker,
            # A bark with nothing to say instead fails at its deadline: it queues as a decision
            # (which degrades to its fallback) rather than behind barks that can degrade.
            priority="background" if self._recent_barks or options.own_fallback_lines else "decision",
            budget=budget,
        )
        moment = situation_text(situation)
        model = ItemModel(self.model, bark_item(persona, options.extra_instructions, moment, world_summary)) \
            if may_coalesce(self.model, coalesce) else self.model
        one_off = Agent(model, instructions=instructions, options=agent_options, owner=self.owner)
        try:
            result = await one_off.respond(prompting.bark_prompt(moment, world_summary))
        except DeadlinePassed:
            if self._recent_barks:
                again = self._recent_barks.popleft()  # the oldest goes round to the back
                self._recent_barks.append(again)
                return BarkLine(again, degraded=prompting.DEADLINE, repeated=True)
            if not options.own_fallback_lines:
                raise
            return BarkLine(self._next_fallback_line(options), degraded=prompting.DEADLINE)
        line = single_line(result.text, speaker)
        if not line:
            raise AgentError(ErrorCode.GENERATION_FAILED, "The model produced an empty bark.")
        if line not in self._recent_barks:
            self._recent_barks.append(line)
        return BarkLine(line)

    # --- conversations among NPCs ---------------------------------------------------------------

    async def converse(self, view: ConversationView, *, budget: Budget | None = None, coalesce: bool = True,
                       emit: NPCEventSink | None = None) -> LineReply:
        """This NPC's next line in a conversation among NPCs (``view``: what it is shown). A
        one-off step, like a bark, but with its memory: history and memory are not changed (the
        conversation tells every member what was said, :meth:`hear`). The line is checked
        (:func:`~.conversation.check_line`): one that speaks as another member is asked again alone,
        up to :data:`~.conversation.LINE_REASKS` times, then replaced by the next fallback line.
        ``view.background``: background priority
        (an ambient conversation), else dialogue. When ``budget`` runs out before the model takes
        the step, the next fallback line stands in, marked ``degraded``. ``coalesce``: a
        coalescing backend may answer it together with other conversations' lines (its item
        shows the persona's essentials, the situation and this conversation only; a speaker whose
        memory holds more than this conversation's lines says it alone). A line is repaired
        into shape first (:func:`~.conversation.repaired_line`); one that cannot be, or that
        repeats the line it answers word for word, is asked again alone, as a
        misattributed one is, afresh (no failed answer in its history), its prompt saying what
        was wrong, then in other words (:func:`~.conversation.reask_prompt`); so is one whose
        batch failed with an error a fallback covers. Raises
        :class:`AgentError` for errors no fallback covers."""
        persona, options = self._persona, self._options
        speaker = persona.name.strip()
        memory = self._store.memory
        world_summary = self.world.summary(options.world_context_paths) if self.world is not None else None
        # This conversation's lines are in the prompt: its notes would only be shown twice; so
        # would the situation, which is the opening line's prompt.
        situation = None if view.opening else view.situation
        note = prompting.context_note(memory.without_heard(view.said), options, world_summary, situation)
        one_off = Agent(
            self.model,
            instructions=prompting.instructions(persona, options, [], memory, text_reply=True),
            context_note=note,
            options=AgentOptions(
                tool_choice=_NONE, temperature=options.temperature,
                max_response_tokens=options.maximum_response_tokens, user_label=view.last_label,
                assistant_label=speaker, priority="background" if view.background else "dialogue", budget=budget,
            ),
            owner=self.owner,
        )
        # A batch shows every item to the model: the line's item carries only the persona's
        # essentials, the situation and its own conversation, and a speaker whose memory holds
        # more (what it heard elsewhere, facts, a summary) says its line alone.
        item = None
        if may_coalesce(self.model, coalesce) and not memory.private_knowledge(view.said):
            shared = prompting.context_note(NPCMemory(relationship=memory.relationship), options, world_summary,
                                            situation)
            item = reply_item(persona, options.extra_instructions, shared, view.earlier, (), view.last_line,
                              view.last_label)
        if item is not None:
            item = msgspec.structs.replace(item, sentences=LINE_SENTENCES, unlabelled=True, members=view.others)
        tracker = LineTracker(speaker)

        async def forward(event: TurnEvent) -> None:
            if isinstance(event, TextDelta):
                await _send(emit, tracker.consume(partial_text_reply(event.text)))

        prompt = line_prompt(view, speaker)
        reply: LineReply | None = None
        problem: LineProblem | None = None
        for attempt, together in enumerate((item is not None, *(False,) * LINE_REASKS)):
            one_off.model = ItemModel(self.model, item) if together and item is not None else self.model
            # Every attempt starts afresh: a failed answer left in the history is copied (and its
            # prompt would be shown as the last speaker's line). Asked again, the line is told
            # what was wrong with the last answer; after that, in other words.
            one_off.history = []
            asked = prompt if problem is None else reask_prompt(view, speaker, problem, other_words=attempt >= 2)
            try:
                result = await one_off.respond(asked, emit=forward if emit is not None else None, step_events=False)
            except DeadlinePassed:
                reply = self.fallback_line(prompting.DEADLINE)
                break
            except AgentError as error:
                if error.code not in prompting.UNUSABLE or not options.fallback_on_guardrail:
                    raise
                if together:
                    continue  # its batch failed, not necessarily this line: asked again alone
                break
            judged = judged_line(result.text, speaker, persona.role, view)
            if isinstance(judged, LineProblem):
                problem = judged
                continue
            tagged = Emotion.matching(judged.tag) if judged.tag is not None else None
            emotion = tagged or persona.default_emotion
            reply = LineReply(line=judged.line, emotion=emotion.value, retried=attempt > 0)
            break
        if reply is None:
            reply = self.fallback_line()
        if emit is not None:
            with anyio.CancelScope(shield=True):
                await _send(emit, tracker.finish(reply.line, Emotion(reply.emotion)))
        return reply

    def fallback_line(self, degraded: str | None = None) -> LineReply:
        """The NPC's next fallback line as a conversation line (``degraded``: why it stands in)."""
        return LineReply(line=self._next_fallback_line(self._options), emotion=self._persona.default_emotion.value,
                         is_fallback=True, degraded=degraded)

    def hear(self, lines: Sequence[str]) -> None:
        """Remember conversation lines said in this NPC's presence (or overheard), as notes."""
        self._store.memory = self._store.memory.hearing(tuple(lines))

    # --- tools ---------------------------------------------------------------------------------

    def _compose(self, client_tools: list[ToolDefinition], options: NPCOptions) -> list[ToolDefinition]:
        """Client tools, world tools, memory tools, checked against ``options``."""
        tools = [*client_tools, *self._world_tools(options), *memory_tools(options, self._store)]
        check_configuration(options, [t.name for t in tools])
        return tools

    def _world_tools(self, options: NPCOptions) -> list[ToolDefinition]:
        world = self.world
        if world is None:
            return []
        # A crowd on one world shares them: they hold nothing of an NPC (their handlers close
        # over the document and the paths only) and are immutable.
        readable, writable = tuple(options.world_readable), tuple(options.world_writable)
        tools: list[ToolDefinition] = world.derived(
            ("world tools", readable, writable), lambda: _world_tools(world, readable, writable)
        )
        return tools

    def __repr__(self) -> str:
        return f"NPC({self._persona.name!r}, tools={self.tool_names}, turns={self.turn_count})"


def _world_tools(world: WorldState, readable: Sequence[str], writable: Sequence[str]) -> list[ToolDefinition]:
    """The read and update tools of ``world`` for these paths (either absent when no path is
    given), as of its version (the read tool lists the top-level keys)."""

    async def read(arguments: dict[str, Any]) -> ToolOutput:
        return _tool_output(read_world_state(world, _path_argument(arguments), readable))

    async def update(arguments: dict[str, Any]) -> ToolOutput:
        output, _changes = update_world_state(world, _path_argument(arguments), arguments.get("value"), writable)
        return _tool_output(output)

    tools = []
    for definition, handler in (
        (read_tool_definition(world, readable), read),
        (update_tool_definition(writable), update),
    ):
        if definition is not None:
            schema = _tool_schema(definition["name"], msgspec.json.encode(definition["parameters"]).decode())
            tools.append(ToolDefinition(definition["name"], definition["description"], schema, handler=handler))
    return tools


@functools.lru_cache(maxsize=16)
def _tool_schema(name: str, parameters: str) -> Schema:
    """The world tools' parameters are the same for every NPC: a crowd compiles (and keeps) each
    shape once. Compiled schemas are immutable, so NPCs can share them."""
    return Schema.compile(parameters, path=f"{name}.parameters")


def _require_name(persona: Persona) -> None:
    if not persona.name.strip():
        raise invalid_params("A persona needs a name.")


def _agent_options(
    options: NPCOptions, persona: Persona, choice: ToolChoice, budget: Budget | None = None
) -> AgentOptions:
    extra: dict[str, Any] = {}
    if budget is not None:
        extra["budget"] = budget
    if options.tool_timeout_seconds is not None:
        extra["tool_timeout"] = float(options.tool_timeout_seconds)
    return AgentOptions(
        tool_choice=choice,
        max_tool_rounds=options.max_tool_rounds,
        max_tool_calls=options.max_tool_calls,
        temperature=options.temperature,
        max_response_tokens=options.maximum_response_tokens,
        user_label=PLAYER_LABEL,
        assistant_label=persona.name.strip(),
        priority="dialogue",
        **extra,
    )


def _complete_turns(transcript: Transcript) -> Transcript:
    """Without a trailing prompt that has no response yet."""
    entries = transcript.entries
    if not entries or isinstance(entries[-1], ResponseEntry):
        return transcript  # the usual case: the last turn has its response
    last_prompt = max((i for i, e in enumerate(entries) if isinstance(e, PromptEntry)), default=-1)
    if last_prompt < 0 or any(isinstance(e, ResponseEntry) for e in entries[last_prompt:]):
        return transcript
    return msgspec.structs.replace(transcript, entries=list(entries[:last_prompt]))


def _path_argument(arguments: dict[str, Any]) -> str:
    path = arguments.get("path")
    return path if isinstance(path, str) else ""


def _tool_output(output: WorldToolOutput) -> ToolOutput:
    if output.kind is OutputKind.TEXT:
        return TextOutput(output.value)
    if output.kind is OutputKind.JSON:
        return JsonOutput(output.value)
    return ErrorOutput(output.value)


async def _send(emit: NPCEventSink | None, events: Sequence[NPCEvent]) -> None:
    if emit is None:
        return
    for event in events:
        await emit(event)
