"""What the system model keeps after many turns of sessions that have gone: the phones' quota
windows hold at most their limits (a window without one keeps nothing; the day-long battery window
used to keep every request's time), and the pool's per-owner tables stay bounded. Counts of live
entries, never timing or resident memory."""

from __future__ import annotations

from oam_actors.models.device import PhoneConfig
from oam_actors.models.device.protocol import GenerateRequest
from oam_actors.models.device.simulator import Admission, PhoneState
from oam_actors.models.pool._status import WaitSamples, summarize_waits

from test_pool_errors import ask, farm, generate, phone

REQUEST = GenerateRequest(prompt="User: Do you sell rope?\nAssistant:", system_instruction="You are Gorm.")


def test_a_window_without_a_limit_keeps_no_request_times() -> None:
    state = PhoneState(PhoneConfig(quota_requests=0, battery_requests=0), start=0.0)
    for n in range(1000):
        assert isinstance(state.admit(float(n), REQUEST), Admission)
    assert (state.statistics().admitted, state.statistics().remembered) == (1000, 0)


def test_a_window_with_a_limit_keeps_at_most_that_many() -> None:
    state = PhoneState(PhoneConfig(quota_requests=36, quota_window_s=60.0, battery_requests=100,
                                   battery_window_s=86_400.0), start=0.0)
    admitted = sum(isinstance(state.admit(n * 2.0, REQUEST), Admission) for n in range(1000))
    # The battery quota binds after 100 admissions; the minute's window never holds more than 36.
    assert (admitted, state.statistics().remembered) == (100, 30 + 100)


async def test_the_pool_keeps_bounded_state_after_many_sessions_have_gone() -> None:
    async with farm(phone(quota_requests=0), phone(quota_requests=0)) as f:
        for n in range(400):
            # One session name reused (session/create "f" … session/delete), and one per cycle.
            await generate(f.pool, ask(owner="f"))
            await generate(f.pool, ask(owner=f"s{n}"))
        stats = f.pool.statistics_nowait()
        remembered = [p.statistics().remembered for p in f.phones]
    assert sum(p.statistics().admitted for p in f.phones) == stats.steps_ok == 800
    assert remembered == [0, 0]


def test_queue_wait_samples_keep_the_latest_ones_up_to_their_size() -> None:
    samples = WaitSamples(3)
    for seconds in (1.0, 2.0):
        samples.append(seconds)
    assert sorted(samples) == [1.0, 2.0]
    for seconds in (3.0, 4.0, 5.0):
        samples.append(seconds)
    assert (len(samples), sorted(samples)) == (3, [3.0, 4.0, 5.0])
    assert summarize_waits(samples).count == 3
