"""QuotaScheduler on a ManualClock: time moves only when a test advances it; no real sleeps."""

from __future__ import annotations

import anyio
import pytest

from oam_actors import AgentError, ErrorCode
from oam_actors.models.scheduler import (
    NO_HEADROOM,
    Headroom,
    ManualClock,
    Priority,
    QuotaLimits,
    QuotaScheduler,
    Seat,
    SeatTaken,
)

D, M, B = Priority.DIALOGUE, Priority.DECISION, Priority.BACKGROUND


class Farm:
    """A scheduler, its clock, and a log of (owner, start time) as bodies run."""

    def __init__(self, headroom: Headroom | None = None, **limits: object) -> None:
        self.clock = ManualClock()
        self.scheduler = QuotaScheduler(QuotaLimits(**limits), clock=self.clock, headroom=headroom)
        self.log: list[tuple[str, float]] = []
        self.errors: list[tuple[str, AgentError]] = []
        self.hold = anyio.Event()

    async def call(self, owner: str, priority: Priority = M, *, hold: bool = False, **kwargs: object) -> None:
        try:
            async with self.scheduler.admit(owner, priority, **kwargs):
                self.log.append((owner, self.clock.now()))
                if hold:
                    await self.hold.wait()
        except AgentError as exc:
            self.errors.append((owner, exc))

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await anyio.wait_all_tasks_blocked()


async def test_admits_at_once_and_releases_on_exit() -> None:
    farm = Farm()
    async with farm.scheduler.admit("gorm", D, tokens=5) as admission:
        assert admission.ticket.owner == "gorm" and admission.waited == 0.0
        assert farm.scheduler.statistics().running == 1
    stats = farm.scheduler.statistics()
    assert stats.running == 0 and stats.admitted == 1 and stats.tokens_in_window == 5


async def test_waiters_start_as_the_window_frees() -> None:
    farm = Farm(NO_HEADROOM, requests_per_window=2, window_seconds=10.0)
    async with anyio.create_task_group() as tg:
        for owner in ("a", "b", "c", "d", "e"):
            tg.start_soon(farm.call, owner)
            await anyio.wait_all_tasks_blocked()
        assert farm.log == [("a", 0.0), ("b", 0.0)]
        await farm.advance(9.0)
        assert len(farm.log) == 2
        await farm.advance(1.0)
        assert farm.log[2:] == [("c", 10.0), ("d", 10.0)]
        await farm.advance(10.0)
    assert farm.log[4:] == [("e", 20.0)]


async def test_deadline_fails_with_rate_limited_and_retry_after() -> None:
    farm = Farm(requests_per_window=1, window_seconds=60.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(farm.call, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(farm.call, "late", B)  # no deadline: waits for the window
        tg.start_soon(lambda: farm.call("impatient", D, deadline_seconds=4.999936))
        await anyio.wait_all_tasks_blocked()
        await farm.advance(5.0)
        ((owner, error),) = farm.errors
        assert owner == "impatient"
        assert error.code is ErrorCode.RATE_LIMITED
        assert error.message == "The model's quota had no room within 5 s."  # not 4.99994 s
        assert error.retry_after == 55.0
        assert error.data()["retryAfterSeconds"] == 55
        await farm.advance(55.0)
    assert farm.log == [("first", 0.0), ("late", 60.0)]


async def test_cancelling_a_waiting_task_removes_its_ticket_at_once() -> None:
    farm = Farm(max_concurrency=1)
    scope = anyio.CancelScope()

    async def quitter() -> None:
        with scope:
            await farm.call("quitter", D)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: farm.call("holder", hold=True))
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(farm.call, "next")
        tg.start_soon(quitter)
        await anyio.wait_all_tasks_blocked()
        assert farm.scheduler.statistics().queued == (1, 1, 0)
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        stats = farm.scheduler.statistics()
        assert stats.queued == (0, 1, 0) and stats.cancelled == 1
        farm.hold.set()
    assert farm.log == [("holder", 0.0), ("next", 0.0)]
    assert farm.scheduler.statistics().running == 0


async def test_cancelled_timekeeper_hands_the_alarm_to_another_waiter() -> None:
    farm = Farm(requests_per_window=1, window_seconds=10.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(farm.call, "first")
        await anyio.wait_all_tasks_blocked()
        scopes = []
        for owner in ("keeper", "second", "third"):
            scope = anyio.CancelScope()
            scopes.append(scope)

            async def waiter(owner: str = owner, scope: anyio.CancelScope = scope) -> None:
                with scope:
                    await farm.call(owner)

            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
        scopes[0].cancel()  # the first waiter holds the alarm
        await anyio.wait_all_tasks_blocked()
        await farm.advance(10.0)
        assert farm.log == [("first", 0.0), ("second", 10.0)]
        await farm.advance(10.0)
    assert farm.log[2:] == [("third", 20.0)]


async def test_priorities_decide_who_goes_when_the_holder_leaves() -> None:
    farm = Farm(max_concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: farm.call("holder", hold=True))
        await anyio.wait_all_tasks_blocked()
        for owner, priority in (("bark", B), ("plan", M), ("talk", D)):
            tg.start_soon(farm.call, owner, priority)
            await anyio.wait_all_tasks_blocked()
        farm.hold.set()
    assert [owner for owner, _ in farm.log] == ["holder", "talk", "plan", "bark"]


async def test_throttle_pauses_admissions_until_retry_after() -> None:
    farm = Farm()
    farm.scheduler.throttled(retry_after=30.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(farm.call, "npc")
        await farm.advance(29.0)
        assert farm.log == []
        await farm.advance(1.0)
    assert farm.log == [("npc", 30.0)]
    assert farm.scheduler.statistics().throttles == 1


async def test_headers_that_say_the_quota_is_spent_hold_until_reset() -> None:
    farm = Farm()
    farm.scheduler.rate_limit_headers(remaining_requests=0, reset_seconds=4.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(farm.call, "npc")
        await farm.advance(4.0)
    assert farm.log == [("npc", 4.0)]


async def test_tokens_used_corrects_the_window() -> None:
    farm = Farm(tokens_per_window=100, window_seconds=60.0)
    async with farm.scheduler.admit("gorm", D, tokens=90) as admission:
        admission.tokens_used = 10
    async with farm.scheduler.admit("gorm", D, tokens=90) as admission:
        assert admission.waited == 0.0
    assert farm.scheduler.statistics().tokens_in_window == 100


async def test_a_request_larger_than_a_window_fails_at_once() -> None:
    farm = Farm(tokens_per_window=100)
    with pytest.raises(AgentError) as caught:
        async with farm.scheduler.admit("gorm", D, tokens=500):
            pass
    assert caught.value.code is ErrorCode.CONTEXT_SIZE_EXCEEDED
    assert farm.scheduler.statistics().queued == (0, 0, 0)


async def test_body_exception_releases_the_admission() -> None:
    farm = Farm(max_concurrency=1)
    with pytest.raises(RuntimeError):
        async with farm.scheduler.admit("gorm", D):
            raise RuntimeError("backend exploded")
    assert farm.scheduler.statistics().running == 0
    async with farm.scheduler.admit("gorm", D) as admission:
        assert admission.waited == 0.0


async def test_cancellation_at_the_admission_checkpoint_releases_it() -> None:
    farm = Farm(max_concurrency=1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with farm.scheduler.admit("gorm", D):
            farm.log.append(("gorm", farm.clock.now()))  # never runs: admit checkpoints first
    assert farm.log == []
    stats = farm.scheduler.statistics()
    assert stats.admitted == 1 and stats.running == 0


@pytest.mark.parametrize("evicted", [False, True])
async def test_a_taken_seat_ends_its_wait_without_an_admission_even_if_its_wait_is_cancelled_too(
        evicted: bool) -> None:
    # A batch took the rider's item out of the queue. Its wait ends with SeatTaken, never with an
    # admission, and not with a cancellation either when its waiting was cancelled at the same
    # moment (a device pool evicting it would otherwise queue it again elsewhere).
    scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1), clock=ManualClock())
    seat = Seat()
    outcome: list[str] = []

    async def ride() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            try:
                async with scheduler.admit("rider", Priority.BACKGROUND, seat=seat):
                    outcome.append("admitted")
            except SeatTaken:
                outcome.append("taken")

    scopes: list[anyio.CancelScope] = []
    async with scheduler.admit("lead", Priority.BACKGROUND), anyio.create_task_group() as group:
        group.start_soon(ride)
        await anyio.wait_all_tasks_blocked()
        assert seat.queued and seat.take()
        assert not seat.queued and not seat.take()
        if evicted:
            scopes[0].cancel()
    stats = scheduler.statistics()
    assert outcome == ["taken"] and (stats.admitted, stats.taken, stats.cancelled) == (1, 1, 0)
