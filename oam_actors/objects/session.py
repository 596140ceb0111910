"""SessionActor: one protocol session — an :class:`~oam_actors.agent.Agent` behind an ordered mailbox.

Ordered lane (in arrival order, one at a time): ``Respond``, ``Reset``, ``SetInstructions``,
``SetContextNote``, ``SetTools``, ``Compact``. Settings commit as soon as they start; a turn commits
when it is appended to the history; a compaction right before it replaces the history. After the
commit an operation can no longer be cancelled, so a response always agrees with the history.

Control lane (served at once): ``ToolResult``, ``Describe``, ``GetTranscript``.

Checkpoints (``snapshot``/``restore``, used by runtimes with a state store): the committed
conversation and settings — instructions, context note, tools, history — and the model's own
progress when it has one (:class:`~oam_actors.agent.Resumable`: a scripted model's position in its
script), as of the last commit.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from ..agent import Agent, LanguageModel, Resumable, ToolChoiceKind, ToolDefinition, parse_tool_definitions
from ..agent.transcript import Entry
from ..clock import wire_instant
from ..errors import invalid_params
from ..runtime import Actor, Address
from .messages import (
    Compact,
    Describe,
    GetTranscript,
    Reset,
    Respond,
    SetContextNote,
    SetInstructions,
    SetTools,
    ToolResult,
)
from .outlet import Outlet
from .relay import TurnRelay

__all__ = ["NAMESPACE_SEPARATOR", "SessionActor", "SessionState", "model_progress", "object_id", "resume_model"]

NAMESPACE_SEPARATOR = "\x1f"
"""Ends a non-empty address namespace (U+001F, unit separator): an address id is
``<namespace><separator><id>``. Protocol ids never contain control characters, so the part after
the last separator is the id the client chose."""


def object_id(address: Address) -> str:
    """The id the client knows the object at ``address`` by: its namespace left out."""
    return address.id.rpartition(NAMESPACE_SEPARATOR)[2]


def model_progress(model: LanguageModel) -> Any:
    """What a checkpoint keeps of ``model``'s own progress (``None``: it has none)."""
    return model.progress() if _resumable(model) else None


def resume_model(model: LanguageModel, progress: Any) -> None:
    """Bring a freshly built ``model`` to the ``progress`` a checkpoint kept."""
    if progress is not None and _resumable(model):
        model.resume(progress)


_RESUMABLE: dict[type, bool] = {}


def _resumable(model: LanguageModel) -> bool:
    # isinstance of a runtime-checkable protocol looks up each of its members every time (tens
    # of microseconds, on every checkpoint); models get their methods from their class.
    cls = type(model)
    known = _RESUMABLE.get(cls)
    if known is None:
        known = _RESUMABLE[cls] = isinstance(model, Resumable)
    return known


class SessionState(msgspec.Struct, frozen=True):
    """A session's checkpoint: what its ordered operations commit."""

    instructions: str | None
    context_note: str | None
    tools: list[dict[str, Any]]  # wire definitions, with their timeouts
    history: list[Entry]
    model: Any = None  # the model's progress (model_progress)


class _EncodedState(msgspec.Struct, frozen=True):
    """A :class:`SessionState` as a snapshot writes it: the same fields, the history encoded."""

    instructions: str | None
    context_note: str | None
    tools: list[dict[str, Any]]
    history: msgspec.Raw
    model: Any = None


class _HistoryJSON:
    """A history's JSON array, extended as the history grows: a checkpoint after every turn does
    not encode the whole conversation again (80 µs at 640 entries here, more as it grows)."""

    __slots__ = ("_entries", "_json")

    def __init__(self) -> None:
        self._entries: list[Entry] = []  # what _json holds (entries are frozen)
        self._json = bytearray(b"[")  # without its closing bracket

    def encode(self, history: list[Entry]) -> msgspec.Raw:
        done = len(self._entries)
        if len(history) < done or history[:done] != self._entries:  # reset, compacted, restored
            self._entries, self._json, done = [], bytearray(b"["), 0
        for entry in history[done:]:
            if len(self._json) > 1:
                self._json += b","
            self._json += msgspec.json.encode(entry)
        self._entries.extend(history[done:])
        return msgspec.Raw(self._json + b"]")


class SessionActor(Actor):
    """See the module docstring. ``model_name`` is what ``session/list`` shows."""

    def __init__(self, agent: Agent, outlet: Outlet, *, model_name: str) -> None:
        self.agent = agent
        self.outlet = outlet
        self.model_name = model_name
        self.created_at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        self._history_json = _HistoryJSON()

    @property
    def session_id(self) -> str:
        return object_id(self.address)

    async def handle(self, message: Any) -> Any:
        match message:
            case Respond():
                return await self._respond(message)
            case Compact(keep_recent_turns=keep, summary_instructions=instructions):
                summary = await self.agent.compact(
                    keep_recent_turns=keep, summary_instructions=instructions, on_commit=self.commit
                )
                return {"session": self.session_id, "summary": summary}
        # Settings: committed before they apply.
        self.commit()
        match message:
            case Reset():
                self.agent.reset()
            case SetInstructions(instructions=instructions):
                self.agent.instructions = instructions
            case SetContextNote(note=note):
                self.agent.context_note = note
            case SetTools(tools=tools, warnings=warnings):
                self.agent.tools = list(tools)
                return {"session": self.session_id, "warnings": warnings}
            case _:
                raise TypeError(f"SessionActor cannot handle {type(message).__name__}")
        return {"session": self.session_id}

    def snapshot(self) -> bytes:
        agent = self.agent
        state = _EncodedState(
            agent.instructions, agent.context_note, [_tool_wire(t) for t in agent.tools],
            self._history_json.encode(agent.history), model_progress(agent.model),
        )
        return msgspec.json.encode(state)  # as SessionState encodes, which restore decodes

    def restore(self, state: bytes) -> None:
        saved = msgspec.json.decode(state, type=SessionState)
        tools, _ = parse_tool_definitions(saved.tools, path="checkpoint.tools")
        # Local handlers are code, not state: the rebuilt actor still has them, by tool name.
        handlers = {tool.name: tool.handler for tool in self.agent.tools}
        self.agent.instructions = saved.instructions
        self.agent.context_note = saved.context_note
        self.agent.tools = [
            ToolDefinition(t.name, t.description, t.schema, t.timeout, handlers.get(t.name)) for t in tools
        ]
        self.agent.history = list(saved.history)
        resume_model(self.agent.model, saved.model)

    async def handle_control(self, message: Any) -> Any:
        match message:
            case ToolResult(call_id=call_id, output=output):
                return self.agent.submit_tool_result(call_id, output)
            case Describe():
                return self._describe()
            case GetTranscript():
                return {"session": self.session_id, "transcript": self.agent.transcript().to_wire()}
        raise TypeError(f"SessionActor cannot handle {type(message).__name__} on the control lane")

    async def _respond(self, message: Respond) -> dict[str, Any]:
        overrides = message.overrides
        if overrides is not None and overrides.tool_choice is not None:
            choice = overrides.tool_choice
            if choice.kind is ToolChoiceKind.TOOL and choice.tool not in {t.name for t in self.agent.tools}:
                raise invalid_params(f"Parameter 'toolChoice' names '{choice.tool}', which is not a tool of this session.")
        async with self.admission() as admission:
            # A request that does not stream and has no client tool to call needs no events.
            follow = message.stream or any(tool.handler is None for tool in self.agent.tools)
            relay = TurnRelay(
                message.outlet if message.outlet is not None else self.outlet,
                head={"session": self.session_id},
                request_id=message.request_id,
                stream=message.stream,
                target=self.address,
                admission=admission,
            ) if follow else None
            try:
                result = await self.agent.respond(
                    message.prompt,
                    schema=message.schema,
                    overrides=overrides,
                    emit=relay,
                    on_commit=self.commit,
                    partial_values=message.stream,
                    text_deltas=message.stream,
                    step_events=message.stream,  # the relay streams nothing else of them
                )
            finally:
                if relay is not None:
                    relay.close()
        wire = result.to_wire(session=self.session_id)
        if message.warnings:
            wire["warnings"] = [*message.warnings, *wire.get("warnings", [])]
        return wire

    def _describe(self) -> dict[str, Any]:
        ref = self.system.lookup(self.address)
        stats = ref.statistics() if ref is not None else None
        pending = stats.queued + stats.running if stats is not None else 0
        entry: dict[str, Any] = {"session": self.session_id, "model": self.model_name}
        if self.agent.instructions is not None:
            entry["instructions"] = self.agent.instructions
        entry["tools"] = [t.name for t in self.agent.tools]
        entry["busy"] = pending > 0
        entry["pendingOperations"] = pending
        entry["entries"] = len(self.agent.history)
        entry["createdAt"] = wire_instant(self.created_at)
        return entry


def _tool_wire(tool: ToolDefinition) -> dict[str, Any]:
    wire = tool.to_wire()
    if tool.timeout is not None:
        wire["timeoutSeconds"] = tool.timeout
    return wire
