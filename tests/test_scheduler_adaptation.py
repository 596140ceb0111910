"""The quota policy's adaptation on a virtual clock: a stated rate paced evenly, a provider's
limit and window learned from its headers, and a 429 that costs its cool-down and no more.

A :class:`FixedWindowProvider` stands for a provider that counts requests per fixed window
(30 per 10 s), answers with OpenAI-style rate-limit facts, and refuses what is over.
"""

from __future__ import annotations

import math

import pytest

from oam_actors.models.scheduler import Priority, QuotaLimits, QuotaPolicy, QuotaState, Ticket
from oam_actors.models.scheduler._pacing import Grid, ReportedRate

LIMIT, WINDOW = 30, 10.0


class FixedWindowProvider:
    """``limit`` requests per fixed ``window`` from ``phase``; refused requests do not count."""

    def __init__(self, limit: int = LIMIT, window: float = WINDOW, phase: float = 0.0) -> None:
        self.limit, self.window, self.phase = limit, window, phase
        self.accepted: dict[int, int] = {}
        self.refused: dict[int, int] = {}

    def request(self, now: float) -> tuple[bool, dict]:
        index = math.floor((now - self.phase) / self.window)
        used = self.accepted.get(index, 0)
        ok = used < self.limit
        book = self.accepted if ok else self.refused
        book[index] = book.get(index, 0) + 1
        reset = self.phase + (index + 1) * self.window - now
        remaining = self.limit - self.accepted.get(index, 0)
        return ok, {"remaining_requests": remaining, "reset_seconds": reset, "limit_requests": self.limit,
                    "reset_requests": reset}


def drive(policy: QuotaPolicy, provider: FixedWindowProvider, seconds: float, *, headers: bool = True,
          backlog: int = 90) -> list[float]:
    """Keep ``backlog`` tickets queued (a 3x load) for ``seconds``; every admitted one goes to
    the provider at once and is released at once. Returns the admission times."""
    now, serial, admitted = 0.0, 0, []
    queued = 0
    while now < seconds:
        while queued < backlog:
            policy.submit(Ticket(id=serial, owner=f"npc{serial % 5}", priority=Priority.DECISION, enqueued_at=now))
            serial, queued = serial + 1, queued + 1
        decision = policy.poll(now)
        for ticket in decision.admitted:
            queued -= 1
            admitted.append(now)
            ok, facts = provider.request(now)
            if headers:
                policy.on_rate_limit_headers(now, **facts)
            if not ok:
                policy.on_throttled(now, retry_after=facts["reset_seconds"])
            policy.release(ticket.id, now)
        if not decision.admitted:
            assert decision.next_wakeup is not None and decision.next_wakeup > now
            now = decision.next_wakeup
    return admitted


def per_window(times: list[float], window: float, phase: float) -> dict[int, int]:
    counts: dict[int, int] = {}
    for at in times:
        index = math.floor((at - phase) / window)
        counts[index] = counts.get(index, 0) + 1
    return counts


# --- a stated rate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", [0.0, 0.05, 3.3, 9.99])
def test_a_stated_rate_is_paced_evenly_so_no_shorter_window_of_the_provider_overflows(phase: float) -> None:
    # The operator bought 180 RPM; the provider enforces it as 30 per 10 s.
    policy = QuotaPolicy(QuotaLimits(requests_per_window=180, window_seconds=60.0, pace_evenly=True))
    provider = FixedWindowProvider(phase=phase)
    times = drive(policy, provider, 60.0, headers=False)
    assert provider.refused == {}
    assert max(per_window(times, WINDOW, phase).values()) <= LIMIT
    assert len(times) >= 0.95 * 180  # the whole stated rate, less the pacing margin
    assert policy.statistics().pace_seconds == pytest.approx(60 / 180 * 1.02)


def test_without_even_pacing_a_stated_rate_is_a_rolling_cap_that_admits_a_burst() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=180, window_seconds=60.0))
    provider = FixedWindowProvider()
    drive(policy, provider, 1.0, headers=False)
    assert provider.refused  # what even pacing is for


# --- learning the provider's rate from its headers -------------------------------------------------


def test_the_providers_limit_and_window_are_learned_from_its_headers_not_assumed_a_minute() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.on_rate_limit_headers(0.3, remaining_requests=29, reset_seconds=9.7, limit_requests=30, reset_requests=9.7)
    policy.on_rate_limit_headers(10.01, remaining_requests=29, reset_seconds=9.99, limit_requests=30,
                                 reset_requests=9.99)
    stats = policy.statistics()
    assert (stats.reported_limit, stats.reported_window) == (30, 9.99)
    assert stats.pace_seconds == pytest.approx(9.99 / 30 * 1.02)
    assert stats.requests_limit is None  # nothing to decrease: the provider said what it allows


@pytest.mark.parametrize("phase", [0.0, 4.2])
def test_after_the_first_window_a_learned_rate_sees_no_429_and_uses_its_capacity(phase: float) -> None:
    policy = QuotaPolicy(QuotaLimits())
    provider = FixedWindowProvider(phase=phase)
    times = drive(policy, provider, 60.0 + phase)
    first = min(provider.accepted)
    assert set(provider.refused) <= {first}  # only the burst before anything was known
    later = {i: n for i, n in provider.accepted.items() if first < i < first + 6}
    assert len(later) == 5 and min(later.values()) >= 0.95 * LIMIT
    assert policy.statistics().requests_limit is None
    assert times


# --- what a 429 costs ------------------------------------------------------------------------------


def test_with_a_reported_limit_one_429_costs_its_retry_after_and_no_more() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.on_rate_limit_headers(0.0, remaining_requests=10, reset_seconds=9.0, limit_requests=30, reset_requests=9.0)
    policy.on_throttled(1.0, retry_after=2.0)
    for n in range(3):
        policy.submit(Ticket(id=n, owner="a", priority=Priority.DECISION))
    assert policy.poll(1.0).admitted == ()
    assert policy.statistics().cooling_down_until == 3.0
    decision = policy.poll(3.0)
    assert [t.id for t in decision.admitted] == [0]  # at the cool-down's end, then at the learned pace
    assert decision.next_wakeup == pytest.approx(3.0 + 9.0 / 30 * 1.02)
    assert policy.statistics().requests_limit is None


def test_without_any_known_limit_a_429_is_no_stall_of_a_whole_window() -> None:
    # One 429 after a burst of 40, with nothing known but its retry-after: the learned limit (32 per minute)
    # is paced from the cool-down's end, not a cap the minute must shed down to. (Work below
    # dialogue still leaves the dialogue's reserve of the learned window free.)
    policy = QuotaPolicy(QuotaLimits(window_seconds=60.0))
    for n in range(40):
        policy.submit(Ticket(id=n, owner="a", priority=Priority.DIALOGUE))
    burst = policy.poll(0.0).admitted
    for ticket in burst:
        policy.release(ticket.id, 0.5)
    policy.on_throttled(1.0, retry_after=9.0)
    assert policy.statistics().requests_limit == 32  # 0.8 of the 40 it had sent
    for n in range(40, 45):
        policy.submit(Ticket(id=n, owner="a", priority=Priority.DIALOGUE))
    assert policy.poll(9.9).admitted == ()
    assert len(policy.poll(10.0).admitted) == 1
    assert policy.poll(10.0).next_wakeup == pytest.approx(10.0 + 60 / 32)


# --- checkpoints -----------------------------------------------------------------------------------


def test_quota_state_carries_window_pace_and_cool_down_to_a_policy_on_another_clock() -> None:
    limits = QuotaLimits(requests_per_window=6, window_seconds=60.0, pace_evenly=True)
    policy = QuotaPolicy(limits)
    policy.on_rate_limit_headers(0.0, remaining_requests=20, reset_seconds=8.0, limit_requests=30, reset_requests=8.0)
    for n in range(3):
        policy.submit(Ticket(id=n, owner="a", priority=Priority.DECISION))
        for ticket in policy.poll(n * 10.2).admitted:
            policy.release(ticket.id, n * 10.2)
    policy.on_throttled(21.0, retry_after=5.0)
    state = policy.quota_state(22.0)
    assert isinstance(state, QuotaState)
    # A fresh policy whose clock reads 1000 s where the first read 22 s.
    restored = QuotaPolicy(limits)
    restored.restore_quota_state(state, 1000.0)
    stats, before = restored.statistics(), policy.statistics()
    assert stats.requests_in_window == before.requests_in_window == 3
    assert stats.cooling_down_until == pytest.approx(1004.0)
    assert (stats.reported_limit, stats.reported_window, stats.pace_seconds) == (30, 8.0, before.pace_seconds)
    restored.submit(Ticket(id=9, owner="a", priority=Priority.DECISION))
    # Pacing goes on from the saved slot: 60/6 s after the third admission (at 20.4 s then).
    assert restored.poll(1004.0).next_wakeup == pytest.approx(1000.0 + 20.4 + 60 / 6 * 1.02 - 22.0)
    # Three more fit the configured 6 per minute before the restored admissions leave the window.
    assert restored.quota_state(1004.0).window == [(pytest.approx(left - 4.0), 0, False) for left, _, _ in state.window]


# --- the pieces ------------------------------------------------------------------------------------


def test_a_grid_keeps_its_phase_through_late_admissions_and_restarts_after_idle() -> None:
    grid = Grid()
    grid.set_pace(1.0, 30.0, 0.02)
    grid.take(0.0)
    grid.take(1.1)  # 0.1 s late: the next slot stays at 2.0
    assert grid.free_at() == 2.0
    grid.take(7.0)  # idle: the grid starts again from now
    assert grid.free_at() == 8.0


def test_a_reported_rate_keeps_the_longest_reset_as_its_window() -> None:
    rate = ReportedRate()
    assert not rate.known and rate.interval() == 0.0
    assert rate.observe(30, 4.0) and rate.observe(None, 9.5) and not rate.observe(30, 2.0)
    assert (rate.limit, rate.window, rate.known) == (30, 9.5, True)


def test_the_proxy_hook_learns_from_a_429s_headers_before_cooling_down_for_its_reset() -> None:
    from oam_actors.clock import ManualClock
    from oam_actors.models.codecs import parse_rate_limit_headers
    from oam_actors.models.proxy import RateLimitReport, scheduler_hook
    from oam_actors.models.scheduler import QuotaScheduler

    clock = ManualClock(100.0)
    scheduler = QuotaScheduler(QuotaLimits(), clock=clock)
    info = parse_rate_limit_headers({"x-ratelimit-limit-requests": "30", "x-ratelimit-remaining-requests": "0",
                                     "x-ratelimit-reset-requests": "6.5s"})
    scheduler_hook(scheduler)(RateLimitReport(429, info))
    stats = scheduler.statistics()
    assert (stats.reported_limit, stats.reported_window, stats.cooling_down_until) == (30, 6.5, 106.5)
    assert stats.requests_limit is None  # the provider's limit stands: one refusal does not lower it
