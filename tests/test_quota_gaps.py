"""Reserved headroom across a gap in the rolling window, on a virtual clock: work below dialogue
leaves the slots the dialogue expected before each of the window's next frees needs, not only the
next one, so a window that frees one slot soon and then nothing for half a minute keeps room for
the dialogue of that half minute."""

from __future__ import annotations

import math

import msgspec

from oam_actors.models.scheduler import Headroom, QuotaPolicy
from oam_actors.models.scheduler.headroom import DialogueReserve

from test_quota_policy import NANO, B, D, Phone, ticket

DIALOGUE_EXPECTED = 6  # lines a window: one every 10 s


def phone_before_a_gap() -> Phone:
    """A backend that learned six dialogue lines a window (from its checkpoint), six lines at
    0-5 s into a window that frees one slot at 6.5 s and then none until 40 s; a background flood
    queued at 6 s."""
    phone = Phone()
    state = QuotaPolicy(NANO).quota_state(0.0)
    left = [6.5] + [40.0 + 0.5 * n for n in range(26)]
    learned = msgspec.structs.replace(state, window=[(s, 0, False) for s in left], dialogue_demand=DIALOGUE_EXPECTED)
    phone.policy.restore_quota_state(learned, 0.0)
    for n in range(DIALOGUE_EXPECTED):
        phone.at(0.0, "submit", ticket(f"player{n}", D, 0.0, deadline=30.0))
    for n in range(20):
        phone.at(6.0, "submit", ticket(f"npc{n}", B))
    return phone


def test_a_slot_before_a_gap_is_held_for_the_dialogue_expected_in_it() -> None:
    phone = phone_before_a_gap()
    phone.run(6.01)
    assert [t.priority for _, t in phone.admitted] == [D] * DIALOGUE_EXPECTED
    # Three slots are free and one more frees at 6.5 s, yet background work does not take one:
    # the next free after that is 40 s away, and six lines a window come in those 34 s.
    assert phone.policy.statistics(6.0).requests_in_window == 33
    phone.run(8.0)
    assert [t.priority for _, t in phone.admitted] == [D] * DIALOGUE_EXPECTED


def test_dialogue_of_the_gap_finds_the_held_slots_and_background_gets_the_rest() -> None:
    phone = phone_before_a_gap()
    for at in (12.0, 20.0, 21.0):  # a talk, then two more steps close together
        phone.at(at, "submit", ticket("player", D, at, deadline=at + 20.0))
    phone.run(40.0)
    lines = [(now, t) for now, t in phone.admitted[DIALOGUE_EXPECTED:] if t.priority is D]
    assert [now - t.enqueued_at for now, t in lines] == [0.0, 0.0, 0.0]  # none waited for the gap to end
    # The slots not needed went to background work before the gap ended, as the lines came.
    assert any(t.priority is B for now, t in phone.admitted if now < 40.0)
    assert phone.policy.statistics(39.9).requests_in_window <= 36


def test_without_a_gap_background_takes_the_free_slots_at_once() -> None:
    phone = Phone()
    state = QuotaPolicy(NANO).quota_state(0.0)
    left = [6.5 + 1.5 * n for n in range(27)]  # frees every 1.5 s: no gap to keep slots for
    learned = msgspec.structs.replace(state, window=[(s, 0, False) for s in left], dialogue_demand=DIALOGUE_EXPECTED)
    phone.policy.restore_quota_state(learned, 0.0)
    for n in range(DIALOGUE_EXPECTED):
        phone.at(0.0, "submit", ticket(f"player{n}", D, 0.0, deadline=30.0))
    for n in range(20):
        phone.at(6.0, "submit", ticket(f"npc{n}", B))
    phone.run(6.01)
    assert [t.priority for _, t in phone.admitted] == [D] * DIALOGUE_EXPECTED + [B]


def test_take_at_binds_at_the_free_after_the_gap() -> None:
    reserve = DialogueReserve(Headroom(), period_seconds=60.0)
    reserve.restore(DIALOGUE_EXPECTED, 0.0)  # learned: one line every 10 s
    frees = [6.5] + [40.0 + 0.5 * n for n in range(26)]
    # One line every 10 s: two slots left cover 20 s, so the free at 6.5 s binds nothing; three
    # (those two and the one freed at 6.5 s) cover 30 s, so the free at 40 s binds: not before 10 s.
    assert reserve.take_at(6.0, frees, 2, 36) == 10.0
    assert reserve.take_at(6.0, frees, 6, 36) == -math.inf  # six left: a window of dialogue
    assert reserve.take_at(6.0, frees, 2, None) == -math.inf  # no request limit: nothing kept
    idle = DialogueReserve(Headroom(), period_seconds=60.0)
    assert idle.take_at(6.0, frees, 0, 36) == -math.inf  # no dialogue expected
