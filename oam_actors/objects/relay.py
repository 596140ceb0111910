"""Relays one turn's agent events to the client: streamed events, ``tool/call`` and ``tool/cancel``.

Order kept (Android): a ``toolCallStarted`` event precedes its ``tool/call``; on a timeout the
``toolCallCompleted`` event precedes the ``tool/cancel``; when the turn ends (done, failed or
cancelled) every call still outstanding gets a ``tool/cancel`` before the turn's response.

A turn admitted at its system's gate (``admission``) gives its slot up while it waits for a
client's tool answer and takes one again (with its arrival ticket) when the call completes: a slow
client keeps nobody else's turns waiting.
"""

from __future__ import annotations

from typing import Any

from ..agent import ToolCallAbandoned, ToolCallCompleted, ToolCallStarted, TurnEvent
from ..game import NPCEvent
from ..runtime import Address, Admission
from .outlet import Outlet, RequestId

__all__ = ["TURN_ENDED_REASON", "TurnRelay"]

TURN_ENDED_REASON = "The turn ended before the tool finished."


class TurnRelay:
    """The event sink of one turn. ``head`` is the object's context (``{"session": id}`` or
    ``{"npc": id}``); ``event_method`` is ``session/event`` or ``npc/event``. ``abandon_reason``,
    when set, is the one ``tool/cancel`` reason for every abandoned call (forwarded tools of
    decisions and content say the same thing whether they timed out or their request ended)."""

    def __init__(
        self,
        outlet: Outlet,
        *,
        head: dict[str, Any],
        request_id: RequestId,
        stream: bool,
        target: Address,
        event_method: str = "session/event",
        abandon_reason: str | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._outlet = outlet
        self._head = head
        self._request_id = request_id
        self._stream = stream
        self._target = target
        self._event_method = event_method
        self._abandon_reason = abandon_reason
        self._admission = admission
        self._tool_ids: dict[str, str] = {}   # call id -> tool/call JSON-RPC id
        self._open: set[str] = set()          # calls started and not completed

    async def __call__(self, event: TurnEvent | NPCEvent) -> None:
        if isinstance(event, ToolCallAbandoned):
            self._cancel(event.call.id, self._abandon_reason or event.reason)
            return
        if self._stream:
            self._outlet.notify(
                self._event_method, {**self._head, "requestId": self._request_id, "event": event.to_wire()}
            )
        if isinstance(event, ToolCallStarted) and event.execution == "client":
            tool_id = self._outlet.call_tool(self._head, self._request_id, event.call, target=self._target)
            self._tool_ids[event.call.id] = tool_id
            self._open.add(event.call.id)
            if self._admission is not None:
                self._admission.pause()
        elif isinstance(event, ToolCallCompleted):
            call_id = event.record.call.id
            self._open.discard(call_id)
            if call_id in self._tool_ids:
                self._outlet.release_tool(self._tool_ids[call_id])
                if self._admission is not None:
                    await self._admission.resume()

    def close(self) -> None:
        """The turn is over: cancel whatever is still outstanding."""
        for call_id in list(self._open):
            self._cancel(call_id, self._abandon_reason or TURN_ENDED_REASON)
        self._open.clear()

    def _cancel(self, call_id: str, reason: str) -> None:
        tool_id = self._tool_ids.get(call_id)
        if tool_id is None:
            return
        # Notify before releasing: a relaying outlet (RaySystem) still knows the id it maps.
        self._outlet.notify(
            "tool/cancel",
            {**self._head, "requestId": self._request_id, "id": tool_id, "callId": call_id, "reason": reason},
        )
        self._outlet.release_tool(tool_id)
