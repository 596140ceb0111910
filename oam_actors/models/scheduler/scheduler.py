"""QuotaScheduler: the async shell over :class:`QuotaPolicy`, one per backend (phone, API key).

Contract
--------
- ``async with scheduler.admit(owner, priority, tokens=…, deadline_seconds=…, follow_up=…) as admission:``
  waits its turn, then runs the body holding one admission, which is released when the body
  exits (normally, by exception or by cancellation). Set ``admission.tokens_used`` in the body to
  correct the token estimate.
- A ticket still queued ``deadline_seconds`` after it was queued fails with
  :class:`~oam_actors.errors.DeadlinePassed` (``rate_limited``, ``retry_after=…``); nobody waits forever unless they ask to (no
  deadline). A request that needs more tokens than a window allows fails at once with
  ``AgentError(CONTEXT_SIZE_EXCEEDED)``.
- Cancelling a waiting task removes its ticket at once; the next ticket may start at once.
  Cancellation that lands just after admission releases the admission.
- A ``seat`` (:class:`Seat`) passed to ``admit`` is the waiting step's place while its ticket is
  queued: :meth:`Seat.take` takes it out as answered by another admission (a coalesced batch's
  generation, :meth:`QuotaPolicy.take`), and ``admit`` raises :class:`SeatTaken` instead of
  entering the body.
- :meth:`QuotaScheduler.throttled` and :meth:`QuotaScheduler.rate_limit_headers` feed the
  backend's answers back (BUSY, 429, headers); see :mod:`.policy` for how the policy adapts.
- No background task: every call re-runs the policy, and one of the waiting tasks (the
  *timekeeper*) sleeps until the policy's next wakeup on behalf of all of them.
- Time comes from a :class:`Clock`; :class:`ManualClock` lets tests and simulations move it.
- One event loop; not thread-safe.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import msgspec

from oam_actors.clock import Clock, ManualClock, MonotonicClock
from oam_actors.errors import AgentError, DeadlinePassed, ErrorCode, seconds_text

from .headroom import DialogueReserve, Headroom
from .ordering import Ledger
from .policy import PolicyStatistics, QuotaLimits, QuotaPolicy, QuotaState, TicketTooLarge
from .tickets import Priority, Ticket

__all__ = ["Admission", "Clock", "ManualClock", "MonotonicClock", "QuotaScheduler", "Seat", "SeatTaken"]


class Admission(msgspec.Struct):
    """The body's hold on the backend: its ticket, how long it queued, what it really used."""

    ticket: Ticket
    waited: float  # seconds between queueing and admission
    tokens_used: int | None = None  # set by the body to correct the estimate on release


class SeatTaken(Exception):  # noqa: N818 (an outcome, not an error: nothing went wrong)
    """Raised by ``admit`` for a step whose :class:`Seat` was taken: another admission answers it."""


class Seat:
    """A step's place in a scheduler's queue while its ticket waits there, for a batch that
    answers it to take it out (one seat per step; a step that moves to another backend takes
    its seat along)."""

    __slots__ = ("_scheduler", "_ticket")

    def __init__(self) -> None:
        self._scheduler: QuotaScheduler | None = None
        self._ticket = 0

    @property
    def queued(self) -> bool:
        """Whether the step's ticket waits in a queue now (so :meth:`take` would succeed)."""
        return self._scheduler is not None

    def take(self) -> bool:
        """Take the ticket out as answered by another admission; ``False`` when it is not queued."""
        scheduler = self._scheduler
        return scheduler is not None and scheduler._take(self._ticket)

    def _bind(self, scheduler: QuotaScheduler | None, ticket: int = 0) -> None:
        self._scheduler, self._ticket = scheduler, ticket


class _Outcome(enum.Enum):
    ADMITTED = "admitted"
    EXPIRED = "expired"
    TAKEN = "taken"


class _Waiter:
    __slots__ = ("outcome", "retry_after", "seat", "ticket", "wake")

    def __init__(self, ticket: Ticket, seat: Seat | None) -> None:
        self.ticket = ticket
        self.seat = seat
        self.wake = anyio.Event()
        self.outcome: _Outcome | None = None
        self.retry_after = 0.0


class QuotaScheduler:
    """Queues model requests for one backend and lets them start as its quota allows."""

    def __init__(self, limits: QuotaLimits, *, clock: Clock | None = None,
                 headroom: Headroom | None = None, ledger: Ledger | None = None,
                 reserve: DialogueReserve | None = None) -> None:
        self._policy = QuotaPolicy(limits, headroom=headroom, ledger=ledger, reserve=reserve)
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._ids = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._timekeeper: _Waiter | None = None
        self._alarm_at: float | None = None  # when the timekeeper's alarm rings; None: no alarm
        self._wakeup: float | None = None

    @asynccontextmanager
    async def admit(
        self,
        owner: str,
        priority: Priority,
        *,
        tokens: int = 0,
        deadline_seconds: float | None = None,
        seat: Seat | None = None,
        follow_up: bool = False,
    ) -> AsyncIterator[Admission]:
        """Wait for a turn at the backend, hold it for the body, release it on exit.

        Raises :class:`DeadlinePassed` (``rate_limited``) with ``retry_after`` when the deadline passes while
        queued, ``AgentError(CONTEXT_SIZE_EXCEEDED)`` when ``tokens`` exceed a whole window,
        :class:`SeatTaken` when ``seat`` was taken while queued.
        """
        waiter = self._enqueue(owner, priority, tokens, deadline_seconds, seat, follow_up)
        try:
            await self._wait_turn(waiter)
        except BaseException:
            self._abandon(waiter)
            if waiter.outcome is _Outcome.TAKEN:
                # Answered elsewhere: the step must not queue again (a device pool would, on a
                # cancellation that evicts it); a caller's cancellation comes back at its next wait.
                raise SeatTaken() from None
            raise
        if waiter.outcome is _Outcome.TAKEN:
            raise SeatTaken()
        if waiter.outcome is _Outcome.EXPIRED:
            raise DeadlinePassed(f"The model's quota had no room within {seconds_text(deadline_seconds)}.",
                                 retry_after=waiter.retry_after)
        admission = Admission(waiter.ticket, self._clock.now() - waiter.ticket.enqueued_at)
        try:
            yield admission
        finally:
            self._release(waiter.ticket.id, admission.tokens_used)

    def throttled(
        self, *, retry_after: float | None = None, observed_limit: int | None = None
    ) -> None:
        """The backend refused a request for quota (BUSY, 429): cool down and adapt."""
        now = self._clock.now()
        self._policy.on_throttled(now, retry_after=retry_after, observed_limit=observed_limit)
        self._pump()

    def rate_limit_headers(
        self,
        *,
        remaining_requests: int | None = None,
        remaining_tokens: int | None = None,
        reset_seconds: float,
        limit_requests: int | None = None,
        limit_tokens: int | None = None,
        reset_requests: float | None = None,
        reset_tokens: float | None = None,
    ) -> None:
        """The backend reported what is left of its quota until ``reset_seconds`` from now, and
        its limits with their resets where it said them (the policy learns its rate)."""
        self._policy.on_rate_limit_headers(
            self._clock.now(),
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            reset_seconds=reset_seconds,
            limit_requests=limit_requests,
            limit_tokens=limit_tokens,
            reset_requests=reset_requests,
            reset_tokens=reset_tokens,
        )
        self._pump()

    def admission_wait(self, tokens: int = 0) -> float:
        """Seconds from now before the quota could admit a step of ``tokens`` at the earliest
        (:meth:`QuotaPolicy.earliest_start`: concurrency and the queue aside)."""
        now = self._clock.now()
        return self._policy.earliest_start(tokens, now) - now

    def service(self, owner: str) -> float:
        """``owner``'s place in fair queuing (lower: less served)."""
        return self._policy.service(owner)

    def quota_state(self) -> QuotaState:
        """What the policy learned and spent, for a scheduler elsewhere to go on from."""
        return self._policy.quota_state(self._clock.now())

    def restore_quota_state(self, state: QuotaState) -> None:
        """Go on from ``state`` (see :meth:`QuotaPolicy.restore_quota_state`); before any admit."""
        self._policy.restore_quota_state(state, self._clock.now())
        self._pump()

    def statistics(self) -> PolicyStatistics:
        """The policy's counters and gauges now (its window slid to the clock's time)."""
        return self._policy.statistics(self._clock.now())

    # -- waiting ---------------------------------------------------------------------------

    def _enqueue(
        self, owner: str, priority: Priority, tokens: int, deadline_seconds: float | None, seat: Seat | None,
        follow_up: bool,
    ) -> _Waiter:
        now = self._clock.now()
        deadline = None if deadline_seconds is None else now + deadline_seconds
        ticket = Ticket(id=next(self._ids), owner=owner, priority=priority, tokens=tokens,
                        enqueued_at=now, deadline=deadline, follow_up=follow_up)
        try:
            self._policy.submit(ticket)
        except TicketTooLarge as exc:
            raise AgentError(ErrorCode.CONTEXT_SIZE_EXCEEDED, str(exc)) from exc
        waiter = self._waiters[ticket.id] = _Waiter(ticket, seat)
        if seat is not None:
            seat._bind(self, ticket.id)
        self._pump()
        return waiter

    async def _wait_turn(self, waiter: _Waiter) -> None:
        if waiter.outcome is not None:
            await anyio.lowlevel.checkpoint()
            return
        while waiter.outcome is None:
            if self._timekeeper is None:
                self._timekeeper = waiter
            if self._timekeeper is waiter and self._wakeup is not None:
                await self._sleep_as_timekeeper(waiter, self._wakeup)
            else:
                if self._timekeeper is waiter:
                    self._alarm_at = None
                await waiter.wake.wait()
            waiter.wake = anyio.Event()
            if waiter.outcome is None:
                self._pump()

    async def _sleep_as_timekeeper(self, waiter: _Waiter, at: float) -> None:
        self._alarm_at = at
        async with anyio.create_task_group() as group:
            group.start_soon(self._ring, at, waiter.wake)
            await waiter.wake.wait()
            group.cancel_scope.cancel()

    async def _ring(self, at: float, wake: anyio.Event) -> None:
        await self._clock.sleep_until(at)
        wake.set()

    def _abandon(self, waiter: _Waiter) -> None:
        """The waiting task is leaving (cancelled): drop its ticket, or its fresh admission."""
        if waiter.outcome is None:
            self._policy.cancel(waiter.ticket.id)
            del self._waiters[waiter.ticket.id]
            if waiter.seat is not None:
                waiter.seat._bind(None)
            if self._timekeeper is waiter:
                self._timekeeper = None
            self._pump()
        elif waiter.outcome is _Outcome.ADMITTED:
            self._release(waiter.ticket.id, None)

    def _take(self, ticket_id: int) -> bool:
        if not self._policy.take(ticket_id):
            return False
        self._settle(ticket_id, _Outcome.TAKEN, 0.0)
        # No poll: taking a ticket frees no quota, and an admission now would race the batch
        # that is taking its members (one of them must not start on its own meanwhile).
        self._mind_the_alarm()
        return True

    def _release(self, ticket_id: int, tokens_used: int | None) -> None:
        self._policy.release(ticket_id, self._clock.now(), tokens_used=tokens_used)
        self._pump()

    # -- the policy's decisions ------------------------------------------------------------

    def _pump(self) -> None:
        decision = self._policy.poll(self._clock.now())
        for ticket in decision.admitted:
            self._settle(ticket.id, _Outcome.ADMITTED, 0.0)
        for expiry in decision.expired:
            self._settle(expiry.ticket.id, _Outcome.EXPIRED, expiry.retry_after)
        self._wakeup = decision.next_wakeup
        self._mind_the_alarm()

    def _settle(self, ticket_id: int, outcome: _Outcome, retry_after: float) -> None:
        waiter = self._waiters.pop(ticket_id)
        if waiter.seat is not None:
            waiter.seat._bind(None)
        waiter.outcome = outcome
        waiter.retry_after = retry_after
        waiter.wake.set()
        if self._timekeeper is waiter:
            self._timekeeper = None

    def _mind_the_alarm(self) -> None:
        """Keep one waiter sleeping toward the next wakeup, no later than it."""
        if self._wakeup is None:
            return
        keeper = self._timekeeper
        if keeper is None and self._waiters:
            keeper = self._timekeeper = next(iter(self._waiters.values()))
            self._alarm_at = None
        if keeper is not None and (self._alarm_at is None or self._wakeup < self._alarm_at):
            keeper.wake.set()
