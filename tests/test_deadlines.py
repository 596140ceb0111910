"""Deadlines: the external tool waits' timeouts on one event-loop timer."""

from __future__ import annotations

import asyncio

from oam_actors.agent.deadlines import Deadlines


async def test_each_wait_is_woken_at_its_timeout_unless_answered_first() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    answered, short, long, other = (loop.create_future() for _ in range(4))
    deadlines.wake_after(answered, 0.01)
    deadlines.wake_after(short, 0.01)
    deadlines.wake_after(long, 0.05)
    deadlines.wake_after(other, 0.03)  # an earlier deadline than the armed one re-arms the timer
    answered.set_result("answer")
    await short
    assert answered.result() == "answer"  # an answered wait is left alone
    await other
    assert not long.done()  # each timeout wakes only its own waits
    await long
    assert long.result() is None


async def test_a_cancelled_wait_is_passed_over() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    gone = loop.create_future()
    deadlines.wake_after(gone, 0.01)
    gone.cancel()
    kept = loop.create_future()
    deadlines.wake_after(kept, 0.01)
    await kept
    assert gone.cancelled()


async def test_answered_waits_behind_one_that_is_never_answered_do_not_pile_up() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    never = loop.create_future()  # its client never answers: it stays at the head until its deadline
    deadlines.wake_after(never, 0.05)
    pending = []
    for n in range(10_000):
        future = loop.create_future()
        deadlines.wake_after(future, 0.05)
        if n % 1000 == 0:
            pending.append(future)  # a few others are still waiting too
        else:
            future.set_result(None)  # answered in time
    assert len(pending) + 1 <= len(deadlines) <= 64  # 10 001 before: every answered wait was kept
    await asyncio.gather(never, *pending)  # the waits still pending were kept, and wake at their deadline
    assert never.result() is None and all(future.result() is None for future in pending)
    assert len(deadlines) == 0
