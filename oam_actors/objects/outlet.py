"""The seam between object actors and the connection that created them.

An object actor (a session, an NPC, a world) never writes bytes. It hands notifications and
client tool calls to its connection's :class:`Outlet`, which writes them in order to the one
outbox. Everything an actor hands over before its reply resolves is written before the response.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..agent import ToolCall
from ..runtime import Address

__all__ = ["Outlet", "RequestId"]

RequestId = int | float | str


class Outlet(Protocol):
    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Write a notification (``session/event``, ``tool/cancel``, …) now, in order."""

    def call_tool(self, params_head: dict[str, Any], request_id: RequestId, call: ToolCall, *, target: Address) -> str:
        """Send a ``tool/call`` request; returns its JSON-RPC id (``t-<n>``). The client's reply
        is delivered to ``target``'s control lane as :class:`~oam_actors.objects.messages.ToolResult`."""

    def release_tool(self, tool_request_id: str) -> None:
        """Forget a ``tool/call``: replies to it are ignored from now on."""
