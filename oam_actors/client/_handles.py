"""Handles of the server's objects: sessions, NPCs, conversations, worlds and world subscriptions.

A handle is an id and the client it belongs to; its methods are the object's methods of the
protocol. Creating a handle sends nothing (``client.session("guard")``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._connection import EventStream, ToolHandler
from ._params import UNSET, params_of, pick
from ._results import Bark, ConversationReply, ConversationSaid, NpcReply, SessionReply, decode
from ._turn import Turn

if TYPE_CHECKING:
    from ._link import ClientLink

__all__ = ["Conversation", "Npc", "Owner", "Session", "Subscription", "World"]

R = TypeVar("R")


class Owner:
    """What the handles of sessions, NPCs and conversations share: an id the server knows them
    by (``kind`` is the param that carries it), turns cancelled with ``<kind>/cancel``, tools
    answered per owner. A handle for another family of objects subclasses it in a few lines."""

    kind = ""

    def __init__(self, client: ClientLink, owner: str, warnings: list[str] | None = None) -> None:
        self.client = client
        self.id = owner
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _params(self, **fields: Any) -> dict[str, Any]:
        return {self.kind: self.id, **params_of(**fields)}

    def _turn(self, method: str, result_type: type[R], params: dict[str, Any], timeout: float | None,
              *, stream: bool) -> Turn[R]:
        """A cancellable request of this owner (``<kind>/cancel`` when the awaiting task is cancelled)."""
        cancel = (f"{self.kind}/cancel", {self.kind: self.id})
        return Turn(self.client, method, {**params, "stream": True} if stream else params,
                    lambda result: decode(result, result_type, method), cancel=cancel, timeout=timeout, events=stream)

    def add_tool(self, name: str, handler: ToolHandler) -> None:
        """Answer this owner's ``tool/call`` for ``name`` with ``handler``."""
        self.client._add_owner_tools(self.kind, self.id, {name: handler})

    async def cancel(self) -> int:
        """``<kind>/cancel``: how many operations were cancelled."""
        return await self.client.member(f"{self.kind}/cancel", self._params(), "cancelled")

    async def delete(self) -> None:
        await self.client.call(f"{self.kind}/delete", self._params())


class Session(Owner):
    """A session's handle: ``id``, the create ``warnings``, and its methods."""

    kind = "session"

    async def respond(self, prompt: str, *, schema: Any = None, timeout: float | None = UNSET,
                      **extra: Any) -> SessionReply:
        """``session/respond`` (``extra``: ``tool_choice``, ``max_tool_rounds``,
        ``max_tool_calls``, ``enabled_tools``)."""
        params = self._params(prompt=prompt, schema=schema, **extra)
        return await self._turn("session/respond", SessionReply, params, timeout, stream=False)

    def respond_stream(self, prompt: str, *, schema: Any = None, timeout: float | None = UNSET,
                       **extra: Any) -> Turn[SessionReply]:
        """``session/respond`` streamed: iterate the :class:`Turn` for its ``session/event``
        events (``modelStep``, ``text``, ``partial``, ``toolCallStarted``, ``toolCallCompleted``),
        then ``await`` it for the :class:`SessionReply`."""
        params = self._params(prompt=prompt, schema=schema, **extra)
        return self._turn("session/respond", SessionReply, params, timeout, stream=True)

    async def reset(self) -> None:
        await self.client.call("session/reset", self._params())

    async def set_instructions(self, instructions: str | None) -> None:
        await self.client.call("session/setInstructions", {"session": self.id, "instructions": instructions})

    async def set_context_note(self, note: str | None) -> None:
        await self.client.call("session/setContextNote", {"session": self.id, "note": note})

    async def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[str]:
        """``session/setTools``: the warnings."""
        return await self.client.member("session/setTools", self._params(tools=list(tools)), "warnings")

    async def compact(self, *, keep_recent_turns: int | None = None,
                      summary_instructions: str | None = None) -> str | None:
        """``session/compact``: the summary (``None`` when there was nothing to compact)."""
        params = self._params(keep_recent_turns=keep_recent_turns, summary_instructions=summary_instructions)
        return await self.client.member("session/compact", params, "summary")

    async def transcript(self) -> dict[str, Any]:
        """``session/transcript``: the transcript document (pass it as ``history`` to restore)."""
        return await self.client.member("session/transcript", self._params(), "transcript")


class Npc(Owner):
    """An NPC's handle: ``id``, the create ``warnings`` and ``tools`` (the names the model
    sees), and its methods."""

    kind = "npc"

    def __init__(self, client: ClientLink, npc: str, warnings: list[str] | None = None,
                 tools: list[Any] | None = None) -> None:
        super().__init__(client, npc, warnings)
        self.tools = tools or []

    async def talk(self, line: str, *, context: Any = None, timeout: float | None = UNSET, **extra: Any) -> NpcReply:
        """``npc/talk`` (``extra``: ``tool_choice``, ``deadline_seconds``, ``coalesce``)."""
        return await self._turn("npc/talk", NpcReply, self._params(line=line, context=context, **extra), timeout,
                                stream=False)

    def talk_stream(self, line: str, *, context: Any = None, timeout: float | None = UNSET,
                    **extra: Any) -> Turn[NpcReply]:
        """``npc/talk`` streamed: its ``npc/event`` events (``emotion``, ``lineDelta``,
        ``lineReset``, ``toolCallStarted``, ``toolCallCompleted``), then the :class:`NpcReply`."""
        return self._turn("npc/talk", NpcReply, self._params(line=line, context=context, **extra), timeout,
                          stream=True)

    async def bark(self, situation: str | None = None, *, deadline_seconds: float | None = None,
                   timeout: float | None = UNSET, **extra: Any) -> Bark:
        """``npc/bark`` (not cancellable on the server: cancelling only stops waiting)."""
        params = self._params(situation=situation, deadline_seconds=deadline_seconds, **extra)
        return decode(await self.client.call("npc/bark", params, timeout=timeout), Bark, "npc/bark")

    async def state(self, *, settle: bool = True) -> dict[str, Any]:
        """``npc/state``: the saved state (pass it to :meth:`Client.restore_npc`)."""
        return await self.client.member("npc/state", self._params(settle=settle), "state")

    async def update(self, **fields: Any) -> list[str]:
        """``npc/update`` (``persona``, ``options``, ``memory``: merge patches; ``tools``): the
        warnings. A field given as ``None`` is sent as ``null`` (it removes or clears)."""
        return await self.client.member("npc/update", {"npc": self.id, **fields}, "warnings")

    async def reset(self, *, clear_memory: bool = False) -> None:
        await self.client.call("npc/reset", self._params(clear_memory=clear_memory))


class Conversation(Owner):
    """A conversation's handle: ``id``, the create ``warnings``, and its methods. Cancelling the
    task that awaits ``advance`` or ``run`` (or iterates their streams) sends
    ``conversation/cancel``: the request answers ``-32009`` and leaves no line."""

    kind = "conversation"

    def _lines(self, method: str, timeout: float | None, stream: bool, **fields: Any) -> Turn[ConversationReply]:
        return self._turn(method, ConversationReply, self._params(**fields), timeout, stream=stream)

    async def advance(self, *, speaker: str | None = None, deadline_seconds: float | None = None,
                      timeout: float | None = UNSET, **extra: Any) -> ConversationReply:
        """``conversation/advance``: one line (``speaker``: this member says it; ``extra``: ``coalesce``)."""
        return await self._lines("conversation/advance", timeout, False, speaker=speaker,
                                 deadline_seconds=deadline_seconds, **extra)

    def advance_stream(self, *, speaker: str | None = None, deadline_seconds: float | None = None,
                       timeout: float | None = UNSET, **extra: Any) -> Turn[ConversationReply]:
        """``conversation/advance`` streamed: its events (as :meth:`run_stream`), then the reply."""
        return self._lines("conversation/advance", timeout, True, speaker=speaker,
                           deadline_seconds=deadline_seconds, **extra)

    async def run(self, lines: int, *, speaker: str | None = None, deadline_seconds: float | None = None,
                  timeout: float | None = UNSET, **extra: Any) -> ConversationReply:
        """``conversation/run``: up to ``lines`` lines, fewer when it ends or it is the player's turn."""
        return await self._lines("conversation/run", timeout, False, lines=lines, speaker=speaker,
                                 deadline_seconds=deadline_seconds, **extra)

    def run_stream(self, lines: int, *, speaker: str | None = None, deadline_seconds: float | None = None,
                   timeout: float | None = UNSET, **extra: Any) -> Turn[ConversationReply]:
        """``conversation/run`` streamed: its ``conversation/event`` events (``speaker``,
        ``emotion``, ``lineDelta``, ``lineReset``, ``line``; then ``playerTurn`` or ``ended``),
        then the :class:`ConversationReply`."""
        return self._lines("conversation/run", timeout, True, lines=lines, speaker=speaker,
                           deadline_seconds=deadline_seconds, **extra)

    async def say(self, line: str, *, to: str | None = None, timeout: float | None = UNSET) -> ConversationSaid:
        """``conversation/say``: the player's line (``to``: the member addressed). Not cancellable
        on the server: cancelling only stops waiting."""
        result = await self.client.call("conversation/say", self._params(line=line, to=to), timeout=timeout)
        return decode(result, ConversationSaid, "conversation/say")

    async def _member_change(self, method: str, npc: str) -> ConversationReply:
        return decode(await self.client.call(method, self._params(npc=npc)), ConversationReply, method)

    async def join(self, npc: str) -> ConversationReply:
        """``conversation/join``: ``npc`` speaks last in the order from now on."""
        return await self._member_change("conversation/join", npc)

    async def leave(self, npc: str) -> ConversationReply:
        """``conversation/leave`` (fewer than 2 members left: the conversation has ended)."""
        return await self._member_change("conversation/leave", npc)

    async def state(self) -> dict[str, Any]:
        """``conversation/state``: the saved state, committed lines only (pass it to
        :meth:`Client.restore_conversation`)."""
        return await self.client.member("conversation/state", self._params(), "state")


class World:
    """A world's handle: ``id`` and its methods (results as the protocol sends them)."""

    def __init__(self, client: ClientLink, world: str) -> None:
        self.client = client
        self.id = world

    def __repr__(self) -> str:
        return f"World({self.id!r})"

    async def _call(self, method: str, **fields: Any) -> dict[str, Any]:
        return await self.client.call(method, {"world": self.id, **fields})

    async def _member(self, method: str, key: str, **fields: Any) -> Any:
        return await self.client.member(method, {"world": self.id, **fields}, key)

    async def get(self, path: str = "") -> Any:
        """``world/get``: the value at ``path`` (``None`` when absent; see ``exists`` in
        ``client.call("world/get", …)`` to tell a null from nothing)."""
        return await self._member("world/get", "value", path=path)

    async def set(self, path: str, value: Any) -> int:
        """``world/set``: the new version."""
        return await self._member("world/set", "version", path=path, value=value)

    async def merge(self, patch: Mapping[str, Any], *, path: str = "") -> int:
        """``world/merge`` (RFC 7386): the new version."""
        return await self._member("world/merge", "version", patch=patch, path=path)

    async def remove(self, path: str) -> dict[str, Any]:
        return await self._call("world/remove", path=path)

    async def snapshot(self) -> dict[str, Any]:
        """``world/snapshot``: the whole state document."""
        return await self._member("world/snapshot", "state")

    async def delete(self) -> None:
        await self._call("world/delete")

    async def subscribe(self, path: str = "") -> Subscription:
        """``world/subscribe``: iterate the :class:`Subscription` for its ``world/changed``."""
        connection = await self.client._live()
        result = await self._call("world/subscribe", path=path)
        subscription = pick(result, "subscription", "world/subscribe")
        return Subscription(self.client, subscription, connection.subscribe(subscription))


class Subscription:
    """``world/changed`` notifications of one subscription (``world``, ``subscription``,
    ``path``, ``oldValue``?, ``newValue``?), in arrival order, buffered from the moment the
    ``world/subscribe`` answer is read. Ends after :meth:`unsubscribe`; raises
    ``ConnectionLost`` when the connection ends."""

    def __init__(self, client: ClientLink, subscription: str, stream: EventStream) -> None:
        self.client = client
        self.id = subscription
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._stream

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.id)
