"""QuotaPolicy: unit tests with concrete timelines, then property tests over random operations."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors.models import scheduler as scheduler_package
from oam_actors.models.scheduler import (
    NO_HEADROOM,
    Decision,
    Headroom,
    Priority,
    QuotaLimits,
    QuotaPolicy,
    Ticket,
    TicketTooLarge,
)

D, M, B = Priority.DIALOGUE, Priority.DECISION, Priority.BACKGROUND
_ids = itertools.count(1000)


def ticket(owner: str = "a", priority: Priority = M, *, id: int | None = None, tokens: int = 0,
           deadline: float | None = None, at: float = 0.0) -> Ticket:
    return Ticket(id=next(_ids) if id is None else id, owner=owner, priority=priority, tokens=tokens,
                  enqueued_at=at, deadline=deadline)


def owners_of(decision: Decision) -> list[str]:
    return [t.owner for t in decision.admitted]


def test_exports_match_all() -> None:
    exported = {n for n in dir(scheduler_package) if not n.startswith("_")} - {"policy", "scheduler", "ordering", "headroom", "tickets"}
    assert exported == set(scheduler_package.__all__)


# -- limits -------------------------------------------------------------------------------------


def test_request_window_admits_up_to_the_limit_then_waits_for_the_oldest_to_leave() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=3, window_seconds=10.0), headroom=NO_HEADROOM)
    for n in range(5):
        policy.submit(ticket(id=n))
    first = policy.poll(0.0)
    assert [t.id for t in first.admitted] == [0, 1, 2]
    assert first.next_wakeup == 10.0
    assert policy.poll(9.999).admitted == ()
    assert [t.id for t in policy.poll(10.0).admitted] == [3, 4]


def test_rolling_window_frees_one_slot_per_old_admission() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=2, window_seconds=10.0), headroom=NO_HEADROOM)
    policy.submit(ticket(id=1))
    policy.poll(0.0)
    policy.submit(ticket(id=2))
    policy.poll(4.0)
    policy.submit(ticket(id=3))
    policy.submit(ticket(id=4))
    assert policy.poll(4.0).next_wakeup == 10.0
    assert [t.id for t in policy.poll(10.0).admitted] == [3]
    assert policy.poll(10.0).next_wakeup == 14.0


def test_token_budget_holds_a_ticket_until_enough_tokens_leave_the_window() -> None:
    policy = QuotaPolicy(QuotaLimits(tokens_per_window=100, window_seconds=10.0))
    policy.submit(ticket(id=1, tokens=60))
    policy.submit(ticket(id=2, tokens=50))
    decision = policy.poll(0.0)
    assert [t.id for t in decision.admitted] == [1]
    assert decision.next_wakeup == 10.0
    assert [t.id for t in policy.poll(10.0).admitted] == [2]
    assert policy.statistics().tokens_in_window == 50


def test_token_wakeup_is_when_just_enough_tokens_have_left_the_window() -> None:
    policy = QuotaPolicy(QuotaLimits(tokens_per_window=100, window_seconds=10.0))
    for n, (at, tokens) in enumerate([(0.0, 20), (2.0, 30), (4.0, 40)]):
        policy.submit(ticket(id=n, tokens=tokens))
        policy.poll(at)
    policy.submit(ticket(id=9, tokens=30))  # 90 + 30: the first 20 tokens must leave
    assert policy.poll(5.0).next_wakeup == 10.0
    policy.submit(ticket(id=10, tokens=40))  # then 30 + 40 + 30 + 40 - 100: two more must leave
    assert [t.id for t in policy.poll(10.0).admitted] == [9]
    assert policy.poll(10.0).next_wakeup == 14.0


def test_release_with_tokens_used_corrects_the_charge() -> None:
    policy = QuotaPolicy(QuotaLimits(tokens_per_window=100, window_seconds=10.0))
    policy.submit(ticket(id=1, tokens=80))
    policy.poll(0.0)
    policy.submit(ticket(id=2, tokens=70))
    assert policy.poll(1.0).admitted == ()
    policy.release(1, 2.0, tokens_used=20)
    assert [t.id for t in policy.poll(2.0).admitted] == [2]
    assert policy.statistics().tokens_in_window == 90


def test_ticket_larger_than_a_window_is_refused_at_submit() -> None:
    policy = QuotaPolicy(QuotaLimits(tokens_per_window=100))
    with pytest.raises(TicketTooLarge, match="101 tokens"):
        policy.submit(ticket(tokens=101))
    assert policy.statistics().queued == (0, 0, 0)


def test_duplicate_live_id_and_negative_tokens_are_refused() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.submit(ticket(id=7))
    with pytest.raises(ValueError, match="already"):
        policy.submit(ticket(id=7))
    policy.poll(0.0)
    with pytest.raises(ValueError, match="already"):
        policy.submit(ticket(id=7))  # running
    policy.release(7, 1.0)
    policy.submit(ticket(id=7))  # ended ids may be reused
    with pytest.raises(ValueError, match="negative"):
        policy.submit(ticket(tokens=-1))


def test_concurrency_cap_waits_for_a_release_not_for_time() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=2))
    for n in range(3):
        policy.submit(ticket(id=n))
    decision = policy.poll(0.0)
    assert [t.id for t in decision.admitted] == [0, 1]
    assert decision.next_wakeup is None
    policy.release(0, 5.0)
    assert [t.id for t in policy.poll(5.0).admitted] == [2]
    assert policy.statistics().running == 2


def test_release_of_a_ticket_that_is_not_running_raises() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.submit(ticket(id=1))
    with pytest.raises(KeyError):
        policy.release(1, 0.0)
    with pytest.raises(KeyError):
        policy.release(99, 0.0)


def test_min_interval_paces_admissions() -> None:
    policy = QuotaPolicy(QuotaLimits(min_interval_seconds=1.0))
    for n in range(3):
        policy.submit(ticket(id=n))
    times = []
    now = 0.0
    for _ in range(3):
        decision = policy.poll(now)
        times += [now] * len(decision.admitted)
        now = decision.next_wakeup if decision.next_wakeup is not None else now
    assert times == [0.0, 1.0, 2.0]


def test_time_going_backwards_is_read_as_the_latest_time() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=1, window_seconds=10.0))
    policy.submit(ticket(id=1))
    policy.poll(5.0)
    policy.submit(ticket(id=2))
    assert policy.poll(1.0).next_wakeup == 15.0


@pytest.mark.parametrize(
    "kwargs",
    [{"window_seconds": 0.0}, {"requests_per_window": 0}, {"max_concurrency": 0},
     {"min_interval_seconds": -1.0}, {"decrease_factor": 1.0},
     {"backoff_seconds": 5.0, "max_backoff_seconds": 1.0}],
)
def test_limits_reject_nonsense(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        QuotaLimits(**kwargs)


# -- priority and fairness ----------------------------------------------------------------------


def test_priorities_are_strict_when_capacity_is_scarce() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    policy.submit(ticket("bark", B, id=1))
    policy.submit(ticket("plan", M, id=2))
    policy.submit(ticket("talk", D, id=3))
    order = []
    for now in (0.0, 1.0, 2.0):
        (admitted,) = policy.poll(now).admitted
        order.append(admitted.owner)
        policy.release(admitted.id, now)
    assert order == ["talk", "plan", "bark"]


def test_a_smaller_lower_priority_ticket_never_passes_a_blocked_head() -> None:
    policy = QuotaPolicy(QuotaLimits(tokens_per_window=100, window_seconds=10.0))
    policy.submit(ticket(id=1, tokens=90))
    policy.poll(0.0)
    policy.submit(ticket("talk", D, id=2, tokens=50))
    policy.submit(ticket("bark", B, id=3, tokens=5))
    assert policy.poll(1.0).admitted == ()
    assert [t.id for t in policy.poll(10.0).admitted] == [2, 3]


def test_owners_share_a_class_round_robin() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    for n in range(4):
        policy.submit(ticket("greedy", id=n))
    policy.submit(ticket("modest", id=10))
    policy.submit(ticket("modest", id=11))
    served = []
    for step in range(6):
        (admitted,) = policy.poll(float(step)).admitted
        served.append(admitted.owner)
        policy.release(admitted.id, float(step))
    assert served == ["greedy", "modest", "greedy", "modest", "greedy", "greedy"]


def test_an_owner_arriving_late_gets_bounded_credit_for_idle_time() -> None:
    # "a" has been served 5 times (finish tag 5, virtual time 4); "b" arrives fresh, at most
    # IDLE_CREDIT (3) requests behind virtual time: it catches up by four, then they alternate,
    # however long it was away.
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    for n in range(20):
        policy.submit(ticket("a", id=n))
    served = []

    def step(now: float) -> None:
        (admitted,) = policy.poll(now).admitted
        served.append(admitted.owner)
        policy.release(admitted.id, now)

    for now in range(5):
        step(float(now))
    for n in range(7):
        policy.submit(ticket("b", id=100 + n, at=1000.0))
    for now in range(1000, 1010):
        step(float(now))
    assert served == ["a"] * 5 + ["b"] * 4 + ["a", "b"] * 3


def test_among_owners_served_alike_the_ticket_that_can_wait_least_goes_first() -> None:
    # Three NPCs served alike: a bark that must start within 5 s goes before decisions that may
    # wait 60 s (and one with no deadline last), whatever their classes; then the decisions.
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    policy.submit(ticket("weaver", M, id=1, deadline=60.0))
    policy.submit(ticket("smith", M, id=2))
    policy.submit(ticket("baker", B, id=3, deadline=5.0))
    served = []
    for now in range(3):
        (admitted,) = policy.poll(float(now)).admitted
        served.append(admitted.id)
        policy.release(admitted.id, float(now))
    assert served == [3, 1, 2]


def test_an_owner_served_more_waits_even_with_the_shorter_deadline() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    for n in range(3):
        policy.submit(ticket("busy", B, id=n, deadline=100.0))
    for now in range(3):
        (admitted,) = policy.poll(float(now)).admitted
        policy.release(admitted.id, float(now))
    policy.submit(ticket("busy", B, id=10, at=3.0, deadline=3.0 + 5.0))
    policy.submit(ticket("fresh", M, id=11, at=3.0, deadline=3.0 + 60.0))
    assert [t.id for t in policy.poll(3.0).admitted] == [11]


def test_a_follow_up_step_goes_before_owners_served_less() -> None:
    # "talker" was served three times (its own turn's first step among them); the next step of
    # that turn (a follow-up) goes before a fresh owner's decision: half an action serves nobody.
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    for n in range(3):
        policy.submit(ticket("talker", M, id=n))
    for now in range(3):
        (admitted,) = policy.poll(float(now)).admitted
        policy.release(admitted.id, float(now))
    policy.submit(ticket("fresh", M, id=10, at=3.0))
    policy.submit(Ticket(id=11, owner="talker", priority=M, tokens=0, enqueued_at=3.0, follow_up=True))
    served = []
    for now in (3.0, 4.0):
        (admitted,) = policy.poll(now).admitted
        served.append(admitted.id)
        policy.release(admitted.id, now)
    assert served == [11, 10]


def test_many_owners_come_and_go_and_each_ticket_is_served_once() -> None:
    # Enough idle owners pile up that the next new owner triggers a sweep of idle owners.
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    for n in range(300):
        policy.submit(ticket(f"npc{n}", id=n))
    served = []
    for step in range(300 + 20):
        if step == 250:
            for n in range(20):
                policy.submit(ticket(f"late{n}", id=1000 + n))
        (admitted,) = policy.poll(float(step)).admitted
        served.append(admitted.id)
        policy.release(admitted.id, float(step))
    assert sorted(served) == list(range(300)) + [1000 + n for n in range(20)]
    assert policy.statistics().queued == (0, 0, 0)


def test_token_heavy_owner_pays_by_its_dominant_share() -> None:
    # 10 requests and 1000 tokens per window: a request equivalent is 100 tokens.
    policy = QuotaPolicy(QuotaLimits(requests_per_window=10, tokens_per_window=1000,
                                     window_seconds=1e9, max_concurrency=1))
    for n in range(3):
        policy.submit(ticket("heavy", id=n, tokens=300))
    for n in range(7):
        policy.submit(ticket("light", id=10 + n, tokens=10))
    served = []
    for step in range(10):
        decision = policy.poll(float(step))
        served += owners_of(decision)
        for t in decision.admitted:
            policy.release(t.id, float(step))
    # heavy costs 3 per ticket, light 1: heavy's second ticket starts at tag 3, its third at 6.
    assert served[:9] == ["heavy", "light", "light", "light", "heavy", "light", "light", "light", "heavy"]


# -- deadlines and cancellation -----------------------------------------------------------------


def test_deadline_expires_a_queued_ticket_with_retry_after() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=1, window_seconds=10.0))
    policy.submit(ticket(id=1))
    policy.poll(0.0)
    policy.submit(ticket(id=2, deadline=5.0))
    assert policy.poll(0.0).next_wakeup == 5.0
    decision = policy.poll(5.0)
    assert [e.ticket.id for e in decision.expired] == [2]
    assert decision.expired[0].retry_after == 5.0
    assert policy.statistics().expired == 1
    assert policy.poll(10.0).admitted == ()


def test_deadline_is_inclusive_when_capacity_frees_exactly_then() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=1, window_seconds=10.0))
    policy.submit(ticket(id=1))
    policy.poll(0.0)
    policy.submit(ticket(id=2, deadline=10.0))
    decision = policy.poll(10.0)
    assert [t.id for t in decision.admitted] == [2] and decision.expired == ()


def test_a_late_poll_never_admits_past_the_deadline() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=1, window_seconds=10.0))
    policy.submit(ticket(id=1))
    policy.poll(0.0)
    policy.submit(ticket(id=2, deadline=6.0))
    policy.submit(ticket(id=3))
    decision = policy.poll(20.0)
    assert [e.ticket.id for e in decision.expired] == [2]
    assert [t.id for t in decision.admitted] == [3]


def test_retry_after_counts_the_work_queued_ahead() -> None:
    # The reserve at most half the window: what this counts is the work ahead, not the room kept.
    policy = QuotaPolicy(QuotaLimits(requests_per_window=10, window_seconds=60.0),  # 6 s apart
                         headroom=Headroom(cap=0.5))
    for n in range(10):
        policy.submit(ticket(id=n))
    policy.poll(0.0)
    for n in range(4):
        policy.submit(ticket("talk", D, id=20 + n))
    policy.submit(ticket("bark", B, id=30, deadline=30.0))
    decision = policy.poll(30.0)
    # The window frees in 30 s; the four dialogue tickets ahead need only 4 x 6 s.
    assert decision.expired[0].retry_after == 30.0
    policy.submit(ticket("bark", B, id=31, deadline=31.0))
    for n in range(4):
        policy.submit(ticket("talk", D, id=40 + n))
    # Now eight tickets are ahead: 8 x 6 s is more than the 29 s until the window frees.
    assert policy.poll(31.0).expired[0].retry_after == 8 * 6.0


def test_cancel_removes_queued_work_at_once() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    policy.submit(ticket("a", id=1))
    policy.submit(ticket("b", id=2))
    policy.submit(ticket("c", id=3))
    policy.poll(0.0)
    assert policy.cancel(2) is True
    assert policy.statistics().queued == (0, 1, 0)
    assert policy.statistics().cancelled == 1
    assert policy.cancel(2) is False
    assert policy.cancel(1) is False  # running: release it instead
    policy.release(1, 1.0)
    assert [t.id for t in policy.poll(1.0).admitted] == [3]


def test_cancelled_head_does_not_expire_later() -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    policy.submit(ticket(id=1))
    policy.poll(0.0)
    policy.submit(ticket(id=2, deadline=5.0))
    policy.cancel(2)
    decision = policy.poll(5.0)
    assert decision.expired == () and decision.next_wakeup is None


# -- feedback from the backend ------------------------------------------------------------------


def test_throttle_cools_down_for_retry_after() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.on_throttled(0.0, retry_after=30.0)
    policy.submit(ticket(id=1))
    decision = policy.poll(0.0)
    assert decision.admitted == () and decision.next_wakeup == 30.0
    assert policy.statistics().cooling_down_until == 30.0
    assert [t.id for t in policy.poll(30.0).admitted] == [1]
    assert policy.statistics().cooling_down_until is None


def test_throttle_without_retry_after_backs_off_exponentially() -> None:
    policy = QuotaPolicy(QuotaLimits(backoff_seconds=1.0, max_backoff_seconds=5.0))
    pauses = []
    now = 0.0
    for _ in range(5):
        policy.on_throttled(now)
        until = policy.statistics().cooling_down_until
        pauses.append(until - now)
        now = until
    assert pauses == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_throttles_during_one_cool_down_decrease_the_limit_once() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=10, window_seconds=60.0, decrease_factor=0.8))
    policy.on_throttled(0.0, retry_after=5.0)
    policy.on_throttled(1.0, retry_after=5.0)
    policy.on_throttled(2.0)
    stats = policy.statistics()
    assert stats.requests_limit == 8
    assert stats.throttles == 3
    assert stats.cooling_down_until == 6.0


def test_learned_limit_grows_back_one_step_per_throttle_free_window() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=10, window_seconds=60.0, decrease_factor=0.8))
    policy.on_throttled(0.0, retry_after=1.0)
    limits_seen = []
    for n, now in enumerate([30.0, 60.0, 90.0, 120.0, 180.0, 240.0]):
        policy.submit(ticket(id=n))
        policy.poll(now)
        limits_seen.append(policy.statistics().requests_limit)
    assert limits_seen == [8, 9, 9, 10, 10, 10]


def test_observed_limit_replaces_the_learned_limit() -> None:
    policy = QuotaPolicy(QuotaLimits(requests_per_window=50, window_seconds=60.0))
    policy.on_throttled(0.0, retry_after=1.0, observed_limit=38)
    assert policy.statistics().requests_limit == 38
    policy.on_throttled(0.5, observed_limit=80)
    assert policy.statistics().requests_limit == 50  # never above the configured limit


def test_unknown_limit_is_learned_from_the_window_at_the_first_throttle() -> None:
    policy = QuotaPolicy(QuotaLimits(window_seconds=60.0, decrease_factor=0.9))
    for n in range(41):
        policy.submit(ticket(id=n))
    policy.poll(0.0)
    policy.on_throttled(1.0, retry_after=2.0)
    assert policy.statistics().requests_limit == 36


def test_rate_limit_headers_hold_admissions_until_reset() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.on_rate_limit_headers(0.0, remaining_requests=1, reset_seconds=5.0)
    policy.submit(ticket(id=1))
    policy.submit(ticket(id=2))
    decision = policy.poll(0.0)
    assert [t.id for t in decision.admitted] == [1]
    assert decision.next_wakeup == 5.0
    assert [t.id for t in policy.poll(5.0).admitted] == [2]


def test_rate_limit_header_tokens_hold_a_ticket_that_does_not_fit() -> None:
    policy = QuotaPolicy(QuotaLimits())
    policy.on_rate_limit_headers(0.0, remaining_tokens=100, reset_seconds=3.0)
    policy.submit(ticket(id=1, tokens=60))
    policy.submit(ticket(id=2, tokens=60))
    assert [t.id for t in policy.poll(0.0).admitted] == [1]
    assert [t.id for t in policy.poll(3.0).admitted] == [2]


def test_nano_farm_phone_never_sees_more_than_its_window_allows() -> None:
    # A Pixel on nano-v3: BUSY after ~36 generations in its rolling minute; paced 1 s apart.
    # (No dialogue, no headroom: decisions may use the whole window.)
    limits = QuotaLimits(requests_per_window=36, window_seconds=60.0, max_concurrency=1,
                         min_interval_seconds=1.0)
    policy = QuotaPolicy(limits, headroom=NO_HEADROOM)
    for n in range(100):
        policy.submit(ticket(f"npc{n % 7}", id=n))
    starts, now = [], 0.0
    while len(starts) < 100:
        decision = policy.poll(now)
        for t in decision.admitted:
            starts.append(now)
            policy.release(t.id, now + 1.5)  # a generation takes ~1.5 s
        now = max(now + 1.5, decision.next_wakeup or now)
    assert max(sum(1 for s in starts if a <= s < a + 60.0) for a in starts) == 36
    assert starts[35] == 52.5 and starts[36] == 60.0


# -- properties ---------------------------------------------------------------------------------

LIMITS = st.builds(
    QuotaLimits,
    window_seconds=st.sampled_from([1.0, 5.0, 10.0]),
    requests_per_window=st.none() | st.integers(1, 6),
    tokens_per_window=st.none() | st.integers(10, 100),
    max_concurrency=st.none() | st.integers(1, 4),
    min_interval_seconds=st.sampled_from([0.0, 0.0, 0.5, 2.0]),
    backoff_seconds=st.just(1.0),
    max_backoff_seconds=st.just(8.0),
    decrease_factor=st.sampled_from([0.5, 0.8]),
)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from("abcd"), st.sampled_from(list(Priority)),
                  st.integers(0, 100), st.none() | st.floats(0.0, 20.0)),
        st.tuples(st.just("advance"), st.floats(0.0, 6.0)),
        st.tuples(st.just("wake")),
        st.tuples(st.just("cancel"), st.integers(0, 40)),
        st.tuples(st.just("release"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("throttle"), st.none() | st.floats(0.0, 10.0), st.none() | st.integers(1, 5)),
        st.tuples(st.just("headers"), st.none() | st.integers(0, 3), st.none() | st.integers(0, 80),
                  st.floats(0.0, 10.0)),
    ),
    max_size=60,
)


class Recorder:
    """Drives a policy with random operations and records everything it decides."""

    def __init__(self, limits: QuotaLimits) -> None:
        self.limits = limits
        self.policy = QuotaPolicy(limits)
        self.now = 0.0
        self.tickets: dict[int, Ticket] = {}
        self.ends: Counter[int] = Counter()
        self.admissions: list[tuple[float, Ticket]] = []
        self.running: dict[int, Ticket] = {}
        self.charges: dict[int, int] = {}
        self.cooldowns: list[tuple[float, float]] = []
        self.wakeup: float | None = None

    def run(self, op: tuple) -> None:
        kind, *args = op
        getattr(self, kind)(*args)
        self.poll()

    def submit(self, owner: str, priority: Priority, tokens: int, deadline_in: float | None) -> None:
        if self.limits.tokens_per_window is not None:
            tokens = min(tokens, self.limits.tokens_per_window)
        t = Ticket(id=len(self.tickets), owner=owner, priority=priority, tokens=tokens,
                   enqueued_at=self.now, deadline=None if deadline_in is None else self.now + deadline_in)
        self.tickets[t.id] = t
        self.policy.submit(t)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wake(self) -> None:
        if self.wakeup is not None:
            self.now = max(self.now, self.wakeup)

    def cancel(self, n: int) -> None:
        if self.policy.cancel(n):
            self.ends[n] += 1

    def release(self, n: int, report_usage: bool) -> None:
        if n in self.running:
            t = self.running.pop(n)
            used = t.tokens // 2 if report_usage else None  # usage at most the estimate
            self.policy.release(n, self.now, tokens_used=used)
            if used is not None:
                self.charges[n] = used

    def throttle(self, retry_after: float | None, observed: int | None) -> None:
        before = self.policy.statistics().cooling_down_until
        self.policy.on_throttled(self.now, retry_after=retry_after, observed_limit=observed)
        after = self.policy.statistics().cooling_down_until
        cooled_until = after if after is not None else self.now
        if retry_after is not None:
            assert cooled_until >= self.now + retry_after
        assert before is None or cooled_until >= before
        # Admissions recorded from here on must not start before the cool-down ends.
        self.cooldowns.append((len(self.admissions), cooled_until))

    def headers(self, requests: int | None, tokens: int | None, reset: float) -> None:
        self.policy.on_rate_limit_headers(self.now, remaining_requests=requests, remaining_tokens=tokens,
                                          reset_seconds=reset)

    def poll(self) -> None:
        decision = self.policy.poll(self.now)
        for t in decision.admitted:
            assert t.deadline is None or self.now <= t.deadline
            self.ends[t.id] += 1
            self.admissions.append((self.now, t))
            self.running[t.id] = t
            self.charges[t.id] = t.tokens
        for e in decision.expired:
            assert e.ticket.deadline is not None and e.ticket.deadline <= self.now
            assert e.retry_after >= 1.0
            self.ends[e.ticket.id] += 1
        self.check_now(decision)
        self.wakeup = decision.next_wakeup
        assert self.wakeup is None or self.wakeup > self.now

    def check_now(self, decision: Decision) -> None:
        cap = self.limits.max_concurrency
        assert cap is None or len(self.running) <= cap
        waiting = [t for n, t in self.tickets.items() if not self.ends[n]]
        for t in decision.admitted:
            # Dialogue is strict; an owner's own work goes in priority order.
            if t.priority is not D:
                assert not any(w.priority is D for w in waiting)
            assert not any(w.owner == t.owner and w.priority < t.priority for w in waiting)
        limit = self.policy.statistics().requests_limit
        configured = self.limits.requests_per_window
        assert limit is None or limit >= 1
        assert configured is None or (limit is not None and limit <= configured)

    def drain(self) -> None:
        """Release everything and follow the wakeups until the queue is empty."""
        for _ in range(10_000):
            for n in list(self.running):
                self.release(n, False)
            self.poll()
            if not any(self.policy.statistics().queued) and not self.running:
                return
            if self.wakeup is not None:
                self.now = self.wakeup
        raise AssertionError("the queue never drained")


@settings(max_examples=150, deadline=None)
@given(LIMITS, OPS)
def test_budgets_hold_and_every_ticket_ends_exactly_once(limits: QuotaLimits, ops: list[tuple]) -> None:
    rec = Recorder(limits)
    for op in ops:
        rec.run(op)
    rec.drain()
    # Every ticket ended exactly once.
    assert set(rec.ends) == set(rec.tickets)
    assert all(count == 1 for count in rec.ends.values())
    stats = rec.policy.statistics()
    assert stats.admitted + stats.expired + stats.cancelled == len(rec.tickets)
    # No window of window_seconds ever held more than the budget.
    w = limits.window_seconds
    times = [at for at, _ in rec.admissions]
    for x in times:
        inside = [(at, t) for at, t in rec.admissions if at <= x < at + w]
        if limits.requests_per_window is not None:
            assert len(inside) <= limits.requests_per_window
        if limits.tokens_per_window is not None:
            assert sum(rec.charges[t.id] for _, t in inside) <= limits.tokens_per_window
    # Pacing and cool-downs.
    assert all(b - a >= limits.min_interval_seconds - 1e-9 for a, b in itertools.pairwise(times))
    for first, end in rec.cooldowns:
        assert all(at >= end for at in times[first:])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 500), min_size=1, max_size=8), min_size=2, max_size=5),
    st.randoms(use_true_random=False),
)
def test_backlogged_owners_get_service_within_one_largest_cost_of_each_other(
    queues: list[list[int]], rnd
) -> None:
    limits = QuotaLimits(requests_per_window=10_000, tokens_per_window=1_000_000, max_concurrency=1)
    policy = QuotaPolicy(limits)
    unit = 100.0  # tokens per request equivalent
    owners = [f"o{n}" for n in range(len(queues))]
    # Interleave submissions randomly, keeping each owner's own order.
    pending = {o: list(q) for o, q in zip(owners, queues, strict=True)}
    ids = itertools.count()
    while any(pending.values()):
        owner = rnd.choice([o for o in owners if pending[o]])
        policy.submit(Ticket(id=next(ids), owner=owner, priority=M, tokens=pending[owner].pop(0)))
    served: list[Ticket] = []
    for step in range(sum(len(q) for q in queues)):
        (t,) = policy.poll(float(step)).admitted
        served.append(t)
        policy.release(t.id, float(step))
    cost = {o: [max(1.0, tok / unit) for tok in q] for o, q in zip(owners, queues, strict=True)}
    max_cost = {o: max(c) for o, c in cost.items()}
    done = Counter()
    service = Counter()
    for t in served:
        done[t.owner] += 1
        service[t.owner] += max(1.0, t.tokens / unit)
        backlogged = [o for o in owners if done[o] < len(cost[o])]
        for a, b in itertools.combinations(backlogged, 2):
            assert abs(service[a] - service[b]) <= max_cost[a] + max_cost[b] + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Priority)), st.sampled_from("xyz")), min_size=1, max_size=30))
def test_scarce_capacity_serves_dialogue_first_and_each_owner_in_priority_order(
    tickets: list[tuple[Priority, str]]
) -> None:
    policy = QuotaPolicy(QuotaLimits(max_concurrency=1))
    policy.submit(ticket("holder", B, id=-1))
    (holder,) = policy.poll(0.0).admitted
    for n, (priority, owner) in enumerate(tickets):
        policy.submit(ticket(owner, priority, id=n))
    served = []
    policy.release(holder.id, 1.0)
    for step in range(len(tickets)):
        (t,) = policy.poll(1.0 + step).admitted
        served.append((t.priority, t.owner))
        policy.release(t.id, 1.0 + step)
    dialogue = sum(1 for p, _ in tickets if p is D)
    assert all(p is D for p, _ in served[:dialogue])
    for owner in "xyz":
        mine = [p for p, o in served if o == owner]
        assert mine == sorted(mine)
