"""NPCActor: one game NPC — a :class:`~oam_actors.game.NPC` behind an ordered mailbox.

Contract
--------
- Ordered lane (arrival order, one at a time): :class:`Talk`, :class:`UpdateNPC`,
  :class:`ResetNPC`, :class:`SaveNPC` (``settle=True``), a conversation's :class:`Converse`
  (one line) and :class:`Hear` (what was said in its presence, a commit of its own), and the
  actor's own :class:`RunCompaction`. A conversation asks for one line at a time, so a talk
  with the player is never stuck behind a whole conversation (nor behind an ambient line: below).
  A talk commits when its turn is complete (it is then in the history);
  an update or reset commits right before it applies; a settled save never commits. Until its
  commit an item can be cancelled and leaves no trace (protocol-game §7).
- After a talk that makes compaction due, the actor queues :class:`RunCompaction` on its own
  ordered lane, so the summary runs in the background after the response. Work queued earlier
  still sees compaction first: the library runs a pending compaction before a talk or a settled
  save.
- An ambient conversation line in progress, or queued, gives way to a player's talk queued behind
  it (:class:`YieldLine`, control lane): it becomes the NPC's fallback line, marked ``degraded:
  "preempted"``, without a model step, and the talk runs next.
- Control lane (served at once): :class:`~oam_actors.objects.messages.ToolResult`,
  :class:`SaveNPC` with ``settle=False`` (completed turns only), :class:`Bark` (a one-off
  request beside any turn), :class:`DescribeNPC` and :class:`GetPersona`.
- Events and client tool calls of a talk go to the talk's outlet as ``npc/event`` /
  ``tool/call`` / ``tool/cancel`` with the head ``{"npc": id}``, all before the talk's reply.
- :class:`UpdateNPC` carries RFC 7386 merge patches, applied to the current JSON form when the
  update runs, all or nothing (errors are ``-32602 invalid_params``).
- Checkpoints (``snapshot``/``restore``, for runtimes with a state store): what ``npc/state``
  saves (persona, memory, complete turns) plus the current options and client tools, whether
  compaction is pending, and the model's own progress (a scripted model's position). A
  compaction that ran is a commit of its own. A restored NPC with compaction pending queues it
  as when its talk ended.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import msgspec

from ..agent import ToolChoice, parse_tool_definitions
from ..agent.tools import too_many_tools_warning
from ..clock import Budget
from ..game import NPC, NPCMemory, NPCOptions, NPCSaveState, Persona
from ..game.conversation import ConversationView, LineReply
from ..runtime import Actor, ActorStopped, MailboxFull
from .messages import ToolResult
from .outlet import Outlet, RequestId
from .relay import TurnRelay
from .session import model_progress, object_id, resume_model

__all__ = [
    "PREEMPTED",
    "Bark",
    "Converse",
    "DescribeNPC",
    "GetPersona",
    "Hear",
    "NPCActor",
    "NPCCheckpoint",
    "ResetNPC",
    "RunCompaction",
    "SaveNPC",
    "Talk",
    "UpdateNPC",
    "YieldLine",
    "merge_patch",
    "with_tool_timeout",
]


_ENCODE = msgspec.json.Encoder().encode
PREEMPTED = "preempted"
"""The ``degraded`` reason of an ambient conversation line that gave way to a player's talk."""


class Talk(msgspec.Struct, frozen=True, kw_only=True):
    """One ``npc/talk`` turn; ``outlet`` is the connection that asked (``None``: the NPC's own).
    Answered with the result as JSON (``msgspec.Raw``), which the bridge writes as it is: encoded
    where the turn ran, it crosses a shard boundary as bytes, and the driver, which every shard's
    turns go through, neither unpickles nor encodes it."""

    request_id: RequestId
    line: str
    context: Any = None
    stream: bool = False
    tool_choice: ToolChoice | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    outlet: Outlet | None = None
    budget: Budget | None = None  # its deadline from arrival (relative across processes)
    coalesce: bool = True  # its plain-text reply may share a generation with other NPCs' replies
    token: int = 0  # the YieldLine sent for it (increasing per namespace; 0: none)


class UpdateNPC(msgspec.Struct, frozen=True, kw_only=True):
    """Merge patches for persona, options and memory; ``tools`` (as sent) replaces the client
    tools when not ``None``. ``warnings`` are the request's own (unknown keys)."""

    persona: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    tools: list[Any] | None = None
    warnings: list[str] = msgspec.field(default_factory=list)


class ResetNPC(msgspec.Struct, frozen=True):
    clear_memory: bool = False


class SaveNPC(msgspec.Struct, frozen=True):
    """The ``npc/state`` result; ``settle`` (ordered lane) waits for pending compaction first."""

    settle: bool = True


class RunCompaction(msgspec.Struct, frozen=True):
    pass


class Bark(msgspec.Struct, frozen=True):
    situation: Any = None
    budget: Budget | None = None  # its deadline from arrival (relative across processes)
    coalesce: bool = True  # may share a generation with other barks (a coalescing backend)


class Converse(msgspec.Struct, frozen=True, kw_only=True):
    """One line of this NPC in a conversation (:meth:`~oam_actors.game.NPC.converse`); its
    streamed events go to ``outlet`` as ``conversation/event`` with ``head`` when ``stream``.
    Answered with a :class:`~oam_actors.game.conversation.LineReply`."""

    view: ConversationView
    head: dict[str, Any]
    request_id: RequestId
    outlet: Outlet | None = None
    stream: bool = False
    budget: Budget | None = None
    coalesce: bool = True


class YieldLine(msgspec.Struct, frozen=True):
    """The talk with this ``token`` has been queued: until it starts, ambient conversation lines
    in progress or starting give way (each becomes the NPC's fallback line, ``degraded:
    "preempted"``). Stale once that talk has started (it may arrive after). ``done``: that talk
    has been answered, or cancelled before it started: lines wait as usual again."""

    token: int
    done: bool = False


class Hear(msgspec.Struct, frozen=True):
    """Lines said in the NPC's presence, as it remembers them (notes)."""

    lines: tuple[str, ...]


class DescribeNPC(msgspec.Struct, frozen=True):
    """The ``npc/list`` entry as far as the NPC knows it (``npc`` … ``relationship``)."""


class GetPersona(msgspec.Struct, frozen=True):
    pass


class NPCCheckpoint(msgspec.Struct, frozen=True):
    """An NPC actor's checkpoint, as wire values."""

    state: dict[str, Any]
    options: dict[str, Any]
    tools: list[Any]
    compaction_pending: bool = False
    model: Any = None  # the model's progress (model_progress)


class NPCActor(Actor):
    """See the module docstring. ``tools_wire`` are the client tool definitions as sent (saved
    by ``npc/state``); ``default_tool_timeout`` replaces a ``toolTimeoutSeconds`` an update
    removes."""

    admitted_first = (Talk,)  # a talk's handler does nothing before its admission that cannot wait

    def __init__(
        self,
        npc: NPC,
        outlet: Outlet,
        *,
        model_name: str,
        world: str | None,
        tools_wire: list[Any],
        default_tool_timeout: float,
    ) -> None:
        self.npc = npc
        self.outlet = outlet
        self.model_name = model_name
        self.world = world
        self.tools_wire = tools_wire
        self.default_tool_timeout = default_tool_timeout
        self._options_wire: tuple[NPCOptions, dict[str, Any]] | None = None  # options seldom change
        self._ambient_line: anyio.CancelScope | None = None  # an ambient conversation line in progress
        self._talk_started = 0  # the token of the latest talk started
        self._yield_to = 0  # the token of a talk queued and not started: ambient lines give way

    @property
    def npc_id(self) -> str:
        return object_id(self.address)

    async def handle(self, message: Any) -> Any:
        match message:
            case Talk():
                return await self._talk(message)
            case SaveNPC():
                return self._state(await self.npc.settled_state())
            case Converse():
                return await self._converse(message)
            case Hear(lines=lines):
                self.commit()
                self.npc.hear(lines)
                return None
            case RunCompaction():
                if await self.npc.run_pending_compaction():
                    self.commit()  # checkpoint the compacted history and the summary
                return None
            case UpdateNPC():
                return self._update(message)
            case ResetNPC(clear_memory=clear_memory):
                self.commit()
                self.npc.reset(clear_memory=clear_memory)
                return {"npc": self.npc_id}
        raise TypeError(f"NPCActor cannot handle {type(message).__name__}")

    def snapshot(self) -> bytes:
        npc = self.npc
        options = npc.options
        if self._options_wire is None or self._options_wire[0] is not options:
            self._options_wire = (options, options.to_wire())
        return msgspec.json.encode(NPCCheckpoint(
            npc.save_state().to_wire(), self._options_wire[1], self.tools_wire, npc.compaction_pending,
            model_progress(npc.model),
        ))

    def restore(self, state: bytes) -> None:
        saved = msgspec.json.decode(state, type=NPCCheckpoint)
        tools, _ = parse_tool_definitions(saved.tools, path="checkpoint.tools")
        npc = self.npc
        self.npc = NPC.restore(
            NPCSaveState.from_wire(saved.state, "checkpoint.state"), npc.model, tools=tools, world=npc.world,
            options=NPCOptions.from_wire(saved.options, "checkpoint.options").value, owner=npc.owner,
            compaction_pending=saved.compaction_pending,
        )
        resume_model(self.npc.model, saved.model)
        self.tools_wire = list(saved.tools)

    async def on_start(self) -> None:
        if self.npc.compaction_pending:  # restored before its background compaction ran
            self._queue_compaction()

    async def handle_control(self, message: Any) -> Any:
        match message:
            case ToolResult(call_id=call_id, output=output):
                return self.npc.submit_tool_result(call_id, output)
            case SaveNPC():
                return self._state(self.npc.save_state())
            case Bark(situation=situation, budget=budget, coalesce=coalesce):
                said = await self.npc.bark(situation, budget=budget, coalesce=coalesce)
                return said.to_wire(self.npc_id)
            case YieldLine(token=token, done=True):
                self._talk_started = max(self._talk_started, token)
                if self._yield_to <= token:
                    self._yield_to = 0
                return None
            case YieldLine(token=token):
                if token > self._talk_started:
                    self._yield_to = max(self._yield_to, token)
                    if self._ambient_line is not None:
                        self._ambient_line.cancel()
                return None
            case DescribeNPC():
                return self._describe()
            case GetPersona():
                return self.npc.persona
        raise TypeError(f"NPCActor cannot handle {type(message).__name__} on the control lane")

    async def _talk(self, message: Talk) -> msgspec.Raw:
        self._talk_started = max(self._talk_started, message.token)
        if self._yield_to <= self._talk_started:
            self._yield_to = 0  # the talk lines gave way to has started: lines wait as usual
        async with self.admission() as admission:
            # A request that does not stream and has no client tool to call needs no events.
            follow = message.stream or any(tool.handler is None for tool in self.npc.client_tools)
            relay = TurnRelay(
                message.outlet if message.outlet is not None else self.outlet,
                head={"npc": self.npc_id},
                request_id=message.request_id,
                stream=message.stream,
                target=self.address,
                event_method="npc/event",
                admission=admission,
            ) if follow else None
            try:
                turn = await self.npc.talk(
                    message.line,
                    context=message.context,
                    tool_choice=message.tool_choice,
                    emit=relay,
                    on_commit=self.commit,
                    budget=message.budget,
                    partial_values=message.stream,
                    coalesce=message.coalesce,
                )
            finally:
                if relay is not None:
                    relay.close()
        if self.npc.compaction_pending:
            self._queue_compaction()
        return msgspec.Raw(_ENCODE(turn.to_wire(npc=self.npc_id, warnings=message.warnings)))

    async def _converse(self, message: Converse) -> LineReply:
        if self._yield_to and message.view.background:
            return self.npc.fallback_line(PREEMPTED)
        with anyio.CancelScope() as scope:
            if message.view.background:
                self._ambient_line = scope
            try:
                async with self.admission() as admission:
                    relay = TurnRelay(
                        message.outlet if message.outlet is not None else self.outlet, head=message.head,
                        request_id=message.request_id, stream=True, target=self.address,
                        event_method="conversation/event", admission=admission,
                    ) if message.stream else None
                    return await self.npc.converse(message.view, budget=message.budget, coalesce=message.coalesce,
                                                   emit=relay)
            finally:
                self._ambient_line = None
        return self.npc.fallback_line(PREEMPTED)  # it gave way to a player's talk (YieldLine)

    def _queue_compaction(self) -> None:
        ref = self.system.lookup(self.address)
        # A full or closing mailbox only delays it: the next talk or settled save runs it first.
        with contextlib.suppress(MailboxFull, ActorStopped):
            if ref is not None:
                ref.tell_nowait(RunCompaction())

    def _update(self, message: UpdateNPC) -> dict[str, Any]:
        npc = self.npc
        warnings = list(message.warnings)
        persona = options = memory = tools = None
        if message.persona is not None:
            decoded = Persona.from_wire(merge_patch(npc.persona.to_wire(), message.persona), "persona")
            persona = decoded.value
            warnings += decoded.warnings
        if message.options is not None:
            decoded_options = NPCOptions.from_wire(merge_patch(npc.options.to_wire(), message.options), "options")
            options = with_tool_timeout(decoded_options.value, self.default_tool_timeout)
            warnings += decoded_options.warnings
        if message.memory is not None:
            memory = NPCMemory.from_wire(merge_patch(npc.memory.to_wire(), message.memory), "memory")
        if message.tools is not None:
            tools, tool_warnings = parse_tool_definitions(message.tools, path="tools")
            warnings += tool_warnings
        self.commit()
        npc.reconfigure(persona=persona, options=options, tools=tools, memory=memory)
        if message.tools is not None:
            self.tools_wire = list(message.tools)
        if (many := too_many_tools_warning(len(npc.tool_names))) is not None:
            warnings.append(many)
        return {"npc": self.npc_id, "warnings": warnings}

    def _state(self, saved: NPCSaveState) -> dict[str, Any]:
        options = self.npc.options.to_wire()
        timeout = options.get("toolTimeoutSeconds")
        if isinstance(timeout, float) and timeout.is_integer():
            options["toolTimeoutSeconds"] = int(timeout)  # whole seconds are written without fraction
        state = saved.to_wire() | {
            "npc": self.npc_id,
            "options": options,
            "tools": list(self.tools_wire),
            "world": self.world,
        }
        return {"npc": self.npc_id, "state": state}

    def _describe(self) -> dict[str, Any]:
        npc = self.npc
        return {
            "npc": self.npc_id,
            "name": npc.persona.name,
            "role": npc.persona.role,
            "world": self.world,
            "model": self.model_name,
            "tools": [tool.name for tool in npc.client_tools],
            "turnCount": npc.turn_count,
            "relationship": npc.memory.relationship,
        }


def with_tool_timeout(options: NPCOptions, default: float) -> NPCOptions:
    """``options`` with ``toolTimeoutSeconds`` set to ``default`` when unset, so the engine's
    default is visible in ``npc/state`` and survives a restore."""
    if options.tool_timeout_seconds is not None:
        return options
    return msgspec.structs.replace(options, tool_timeout_seconds=default)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: object members merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged
