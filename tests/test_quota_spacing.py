"""Even spacing of work below dialogue (``Headroom(even=True)``, a device pool's phones) on a
virtual clock: a flood of background work no longer fills a window in a burst, so dialogue that
comes in bursts of its own finds slots a spacing apart instead of waiting for the window to
slide."""

from __future__ import annotations

import random

from oam_actors.models.scheduler import Headroom, QuotaLimits, QuotaPolicy

from test_quota_policy import NANO, B, D, Phone, ticket

SPACING = NANO.window_seconds / 36  # the window's own rate: 60 s / 36


def flood_with_dialogue_bursts(headroom: Headroom) -> Phone:
    """Background work for many windows queued at once; talks of three dialogue steps each
    (submitted together, as a talk's steps come), at random moments, about six steps a window:
    well within capacity, but bursty."""
    phone = Phone(headroom=headroom)
    for n in range(800):
        phone.at(0.0, "submit", ticket(f"npc{n}", B))
    rng = random.Random(7)
    at = 5.0
    while at < 560.0:
        for step in range(3):
            phone.at(at, "submit", ticket(f"player{step}", D, at, deadline=at + 20.0))
        at += rng.expovariate(1 / 30.0)
    phone.run(600.0)
    return phone


def dialogue_waits(phone: Phone) -> list[float]:
    return [now - t.enqueued_at for now, t in phone.admitted if t.priority is D]


def background(phone: Phone) -> int:
    return sum(1 for _, t in phone.admitted if t.priority is B)


def test_spaced_work_leaves_bursty_dialogue_no_window_slide_to_wait_out() -> None:
    # Unspaced, the flood fills each window early at the minimum interval, and a burst that takes
    # the last slots leaves its next step waiting for the window to slide. Spaced, the window
    # frees a slot every spacing, and the burst's steps follow one another that often.
    spaced, unspaced = flood_with_dialogue_bursts(Headroom(even=True)), flood_with_dialogue_bursts(Headroom())
    assert not spaced.expired
    assert max(dialogue_waits(unspaced)) > 9 * SPACING
    assert max(dialogue_waits(spaced)) <= 0.5 * max(dialogue_waits(unspaced))
    # The flood loses little: the window allows 36 a window either way.
    assert background(spaced) >= 0.95 * background(unspaced)


def test_dialogue_is_never_spaced_and_work_below_it_keeps_the_spacing() -> None:
    policy = QuotaPolicy(NANO, headroom=Headroom(even=True))
    first = ticket("npc", B)
    policy.submit(first)
    assert policy.poll(0.0).admitted == (first,)
    policy.release(first.id, 0.5)
    background, line = ticket("npc2", B, 0.5), ticket("player", D, 0.5)
    policy.submit(background)
    decision = policy.poll(0.5)
    assert decision.admitted == ()
    assert decision.next_wakeup == SPACING  # a spacing after the previous admission
    policy.submit(line)
    # Dialogue starts at the minimum interval, not a spacing.
    assert policy.poll(NANO.min_interval_seconds).admitted == (line,)
    policy.release(line.id, 1.2)
    # The line moved the grid on by a step: work below it waits that step too.
    assert policy.poll(SPACING).admitted == ()
    assert policy.poll(2 * SPACING).admitted == (background,)


def test_spacing_follows_a_learned_limit_and_none_without_a_request_limit() -> None:
    policy = QuotaPolicy(QuotaLimits(window_seconds=10.0, max_concurrency=1), headroom=Headroom(even=True))
    for n in range(3):
        policy.submit(ticket(f"npc{n}", B))
    admitted = []
    for now in (0.0, 0.01, 0.02):
        decision = policy.poll(now)
        admitted += decision.admitted
        for t in decision.admitted:
            policy.release(t.id, now)
    assert len(admitted) == 3  # no request limit: nothing to space at
