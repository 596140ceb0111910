"""Property: whatever subset of queued messages is cancelled, replies resolve in queue order,
cancelled messages never run, and the others run in arrival order."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors.runtime import Actor, Address, LocalSystem, MessageCancelled, Reply


class Checker(Actor):
    """Records each message it runs and which replies were already done at that moment."""

    def __init__(self, gate: anyio.Event, entered: anyio.Event) -> None:
        self.gate = gate
        self.entered = entered
        self.replies: list[Reply] = []
        self.ran: list[int] = []
        self.done_when_run: list[list[bool]] = []

    async def handle(self, message: Any) -> Any:
        self.ran.append(message)
        self.done_when_run.append([reply.done() for reply in self.replies])
        if message == 0:
            self.entered.set()
            await self.gate.wait()
        return message


async def run_scenario(count: int, cancelled: set[int]) -> None:
    gate, entered = anyio.Event(), anyio.Event()
    checker = Checker(gate, entered)
    async with LocalSystem() as system:
        ref = system.spawn(Address("npc", "checker"), lambda: checker)
        checker.replies = [ref.ask_nowait(n) for n in range(count)]
        await entered.wait()  # message 0 runs; 1..count-1 are queued
        assert [checker.replies[n].cancel() for n in sorted(cancelled)] == [True] * len(cancelled)
        gate.set()
        outcomes = []
        for reply in checker.replies:
            try:
                outcomes.append(await reply.wait())
            except MessageCancelled:
                outcomes.append("cancelled")
    kept = [n for n in range(count) if n not in cancelled]
    assert checker.ran == kept
    assert outcomes == [("cancelled" if n in cancelled else n) for n in range(count)]
    for position, n in enumerate(checker.ran):
        # Every reply ahead of a running message is done; none behind it is.
        assert checker.done_when_run[position] == [m < n for m in range(count)]


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, set[int]]:
    """A message count, and which of the queued ones (never message 0, the running one) to cancel."""
    count = draw(st.integers(min_value=1, max_value=12))
    cancelled = draw(st.sets(st.integers(min_value=1, max_value=count - 1))) if count > 1 else set()
    return count, cancelled


@settings(max_examples=60, deadline=None)
@given(cases())
def test_cancelled_replies_keep_queue_order(case: tuple[int, set[int]]) -> None:
    anyio.run(run_scenario, *case)
