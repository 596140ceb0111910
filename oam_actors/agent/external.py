"""The external (client) tool calls a running turn waits for, by call id.

A turn opens a slot before the host hears of the call, so an answer that arrives at once is not
lost; the host delivers the output with :meth:`ExternalCalls.submit`; the turn closes the slot
when it stops waiting (answered, timed out or cancelled).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .tools import ToolOutput

__all__ = ["ExternalCall", "ExternalCalls"]


@dataclass(slots=True)
class ExternalCall:
    """An external call's answer. ``answered`` is a bare future of the running loop (the
    runtimes run on asyncio): a turn waits on it with one timer, no event or cancel scope."""

    answered: asyncio.Future[None]
    output: ToolOutput | None = None


class ExternalCalls:
    """The open external calls of one agent."""

    def __init__(self) -> None:
        self._calls: dict[str, ExternalCall] = {}

    def open(self, call_id: str) -> ExternalCall:
        call = ExternalCall(asyncio.get_running_loop().create_future())
        self._calls[call_id] = call
        return call

    def close(self, call_id: str) -> None:
        self._calls.pop(call_id, None)

    def submit(self, call_id: str, output: ToolOutput) -> bool:
        """Deliver an output. False if no call with that id is waiting."""
        call = self._calls.get(call_id)
        if call is None or call.output is not None:
            return False
        call.output = output
        if not call.answered.done():  # a timeout may have woken the turn first
            call.answered.set_result(None)
        return True

    @property
    def pending(self) -> list[str]:
        """Ids of the calls still waiting for their output."""
        return [call_id for call_id, call in self._calls.items() if call.output is None]
