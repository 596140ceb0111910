"""Learning a phone's quota on a virtual clock: the learned limit converges to the phone's and
stops costing refusals, a raised limit is still found, a lowered one is backed off to at once.

A :class:`RollingPhone` is a Pixel's rolling-window quota (BUSY with the delay until its oldest
generation leaves the window); :class:`Farmhand` keeps it saturated through a policy that knows
no limit and learns from each BUSY and the phone's count of successes, as the device pool does.
"""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from oam_actors.models.scheduler import Priority, QuotaLimits, QuotaPolicy, Ticket

WINDOW, LATENCY = 60.0, 1.2  # up to 50 generations a window, one at a time
LEARNING = QuotaLimits(window_seconds=WINDOW, max_concurrency=1, min_interval_seconds=1.0)


class RollingPhone:
    """BUSY once the last ``WINDOW`` seconds hold ``limit`` generations (the limit may change)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.starts: deque[float] = deque()

    def start(self, now: float) -> float | None:
        """``None`` when the generation starts, else BUSY's retry delay."""
        while self.starts and self.starts[0] + WINDOW <= now:
            self.starts.popleft()
        if len(self.starts) >= self.limit:
            return self.starts[0] + WINDOW - now
        self.starts.append(now)
        return None


class Farmhand:
    """Offers the phone more than it allows, one generation at a time, and counts the outcome."""

    def __init__(self, phone: RollingPhone, limits: QuotaLimits = LEARNING, *, counts: bool = True) -> None:
        self.phone = phone
        self.counts = counts  # the BUSY tells how many the phone's window holds (the pool's count)
        self.policy = QuotaPolicy(limits)
        self.now = 0.0
        self.ids = itertools.count()
        self.served: list[float] = []
        self.busy: list[float] = []

    def run(self, windows: float) -> None:
        until = self.now + windows * WINDOW
        while self.now < until:
            queued = sum(self.policy.statistics().queued)
            for _ in range(5 - queued):
                self.policy.submit(Ticket(id=next(self.ids), owner="npc", priority=Priority.BACKGROUND))
            decision = self.policy.poll(self.now)
            for ticket in decision.admitted:
                retry_after = self.phone.start(self.now)
                if retry_after is None:
                    self.served.append(self.now)
                    self.now += LATENCY
                else:
                    self.busy.append(self.now)
                    observed = len(self.phone.starts) if self.counts else None
                    self.policy.on_throttled(self.now, retry_after=retry_after, observed_limit=observed)
                self.policy.release(ticket.id, self.now)
            if not decision.admitted:
                assert decision.next_wakeup is not None and decision.next_wakeup > self.now
                self.now = decision.next_wakeup

    def busy_in(self, first: float, last: float) -> int:
        """BUSY answers in windows ``first`` up to (not including) ``last``."""
        return sum(first * WINDOW <= at < last * WINDOW for at in self.busy)

    def served_in(self, index: int) -> int:
        return sum(index * WINDOW <= at < (index + 1) * WINDOW for at in self.served)

    @property
    def limit(self) -> int | None:
        return self.policy.statistics().requests_limit


def test_a_fixed_limit_is_learned_and_then_refuses_ever_more_rarely() -> None:
    hand = Farmhand(RollingPhone(36))
    hand.run(40)
    assert hand.limit == 36
    # The first refusal teaches the limit; probes above it come 1, 2, 4, 8, 16 windows apart
    # (plain AIMD probes once a window: 40 refusals here).
    assert len(hand.busy) <= 6
    assert hand.busy_in(20, 40) <= 1
    assert sum(hand.served_in(w) for w in range(2, 40)) >= 0.97 * 36 * 38


def test_a_raised_limit_is_discovered_within_the_longest_probe_wait() -> None:
    hand = Farmhand(RollingPhone(36))
    hand.run(20)
    assert hand.limit == 36
    hand.phone.limit = 44  # the phone now allows more (e.g. a newer AICore)
    hand.run(16 + 8 + 4)  # at most 16 windows to the next probe, then one step a window
    assert hand.limit == 44
    assert hand.served_in(int(hand.now // WINDOW) - 1) >= 43


def test_a_lowered_limit_is_backed_off_to_as_the_phone_refuses() -> None:
    hand = Farmhand(RollingPhone(36))
    hand.run(20)
    hand.phone.limit = 24
    before = len(hand.busy)
    hand.run(2)
    assert hand.limit == 24
    # Each BUSY while the phone's window drains from 36 to 24 teaches a lower count at once
    # (a lowered limit is no probe to back off from); then one probe a window later.
    assert len(hand.busy) - before <= 8
    hand.run(19)
    assert hand.limit == 24
    assert hand.busy_in(22, 41) <= 4  # probing the new ceiling backs off just the same
    assert all(hand.served_in(w) >= 23 for w in range(22, 41))


def test_without_a_reported_count_the_refused_limit_is_probed_with_back_off() -> None:
    # No observed count: a refusal below the ceiling multiplies the limit by 0.8, a refused
    # probe only steps back below the ceiling; probes then come ever further apart.
    limits = QuotaLimits(window_seconds=WINDOW, requests_per_window=30, max_concurrency=1, min_interval_seconds=1.0)
    hand = Farmhand(RollingPhone(20), limits, counts=False)
    hand.run(60)
    assert hand.limit == 20
    assert hand.busy_in(20, 60) <= 3


@pytest.mark.parametrize("windows", [0.5, 3.0])
def test_what_was_learned_about_the_ceiling_survives_a_checkpoint(windows: float) -> None:
    hand = Farmhand(RollingPhone(36))
    hand.run(10)
    taken = hand.policy.quota_state(hand.now)
    fresh = QuotaPolicy(LEARNING)
    fresh.restore_quota_state(taken.aged(windows * WINDOW), 1_000.0)
    restored = fresh.quota_state(1_000.0)
    assert (restored.ceiling, restored.probe_windows) == (37, taken.probe_windows)
    assert taken.probe_in is not None and restored.probe_in == pytest.approx(taken.probe_in - windows * WINDOW)
