"""Who the pool serves first, on a virtual clock: fair queuing across owners, priorities, queue
deadlines, cancellation of queued steps, and steps moving off a phone that stops serving.

Each pool here paces its phones at one admission per virtual second, so after one warm-up step
every other step queues, and each ``clock.advance(1.0)`` lets exactly one more start."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import msgspec
import pytest

from oam_actors import AgentError, ErrorCode
from oam_actors.models.pool import DeviceState
from oam_actors.models.scheduler import QuotaLimits

from test_pool_errors import CONFIG, Farm, ask, farm, generate, phone, until

PACED = msgspec.structs.replace(CONFIG, limits=QuotaLimits(max_concurrency=1, min_interval_seconds=1.0))


async def served_in_order(f: Farm, steps: Sequence[tuple[str, str, str]]) -> list[str]:
    """Queue ``(label, owner, priority)`` steps in this order behind a warm-up step, then let one
    start per virtual second; returns the labels in the order they finished."""
    await generate(f.pool)  # the warm-up: the next admission may start at t = 1
    send, receive = anyio.create_memory_object_stream[str](len(steps))

    async def step(label: str, owner: str, priority: str) -> None:
        await generate(f.pool, ask(owner=owner, priority=priority))
        await send.send(label)

    order = []
    async with anyio.create_task_group() as group:
        for label, owner, priority in steps:
            group.start_soon(step, label, owner, priority)
            await anyio.wait_all_tasks_blocked()  # queued before the next one arrives
        assert f.pool.statistics_nowait().queued == len(steps)
        for _ in steps:
            f.clock.advance(1.0)
            order.append(await receive.receive())
    return order


async def test_owners_take_turns_however_much_each_has_queued() -> None:
    steps = [("a1", "npc:a", "background"), ("a2", "npc:a", "background"), ("a3", "npc:a", "background"),
             ("a4", "npc:a", "background"), ("b1", "npc:b", "background"), ("b2", "npc:b", "background"),
             ("c1", "npc:c", "background")]
    async with farm(phone(), config=PACED) as f:
        order = await served_in_order(f, steps)
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]


async def test_dialogue_goes_before_decisions_before_background_work() -> None:
    steps = [("bark1", "npc:a", "background"), ("bark2", "npc:b", "background"), ("bark3", "npc:a", "background"),
             ("decide", "npc:c", "decision"), ("talk", "npc:d", "dialogue")]
    async with farm(phone(), config=PACED) as f:
        order = await served_in_order(f, steps)
        waits = f.pool.statistics_nowait().queue_wait
    assert order == ["talk", "decide", "bark1", "bark2", "bark3"]
    assert waits["dialogue"].p99_ms < waits["background"].p99_ms  # virtual seconds, as milliseconds
    assert (waits["dialogue"].count, waits["decision"].count, waits["background"].count) == (2, 1, 3)


async def test_a_step_that_cannot_start_within_its_queue_time_fails_rate_limited() -> None:
    config = msgspec.structs.replace(PACED, queue_seconds=(30.0, 30.0, 2.0),
                                     limits=QuotaLimits(max_concurrency=1, min_interval_seconds=5.0))
    async with farm(phone(), config=config) as f:
        await generate(f.pool)
        async with anyio.create_task_group() as group:
            errors: list[AgentError] = []

            async def bark() -> None:
                with pytest.raises(AgentError) as caught:
                    await generate(f.pool, ask(priority="background"))
                errors.append(caught.value)

            group.start_soon(bark)
            await anyio.wait_all_tasks_blocked()
            f.clock.advance(3.0)  # past its 2 s; the phone could take it only at t = 5
        stats = f.pool.statistics_nowait()
    [error] = errors
    assert error.code is ErrorCode.RATE_LIMITED and "within 2 s" in error.message
    assert error.retry_after is not None and error.retry_after >= 1.0
    assert (stats.quota_events_surfaced, stats.queued, f.admitted()) == (1, 0, [1])


async def test_cancelling_a_queued_step_removes_it_at_once_and_the_phone_never_sees_it() -> None:
    async with farm(phone(), config=PACED) as f:
        await generate(f.pool)
        async with anyio.create_task_group() as group:
            group.start_soon(generate, f.pool, ask(owner="npc:a"))
            await anyio.wait_all_tasks_blocked()
            assert f.pool.statistics_nowait().queued == 1
            group.cancel_scope.cancel()
        assert f.pool.statistics_nowait().queued == 0  # before any time passes
        f.clock.advance(5.0)
        assert await generate(f.pool, ask(owner="npc:b"))  # the slot it held is free
    assert f.admitted() == [2]


async def test_steps_queued_on_a_phone_that_stops_serving_move_to_another_and_it_recovers() -> None:
    async with farm(phone(), phone(), config=PACED) as f:
        await generate(f.pool, ask(owner="npc:w1"))  # warm-up on phone 1
        await generate(f.pool, ask(owner="npc:w2"))  # warm-up on phone 2
        async with anyio.create_task_group() as group:
            for owner in ("npc:a", "npc:b"):
                group.start_soon(generate, f.pool, ask(owner=owner))
                await anyio.wait_all_tasks_blocked()
            assert [d.queued for d in f.pool.statistics_nowait().devices] == [1, 1]
            f.phones[0].set_foreground(False)
            await f.pool.probe()  # phone 1 is in the background: its queue moves to phone 2
            await anyio.wait_all_tasks_blocked()
            assert [d.queued for d in f.pool.statistics_nowait().devices] == [0, 2]
            f.clock.advance(1.0)
            await anyio.wait_all_tasks_blocked()
            f.clock.advance(1.0)
        assert f.admitted() == [1, 3]
        assert f.pool.statistics_nowait().devices[0].state is DeviceState.COOLING
        f.phones[0].set_foreground(True)
        await f.pool.probe()
        assert f.pool.statistics_nowait().devices[0].state is DeviceState.READY


async def test_a_phone_whose_window_emptied_while_nobody_asked_it_takes_the_next_step() -> None:
    # The chooser reads each phone's window from its scheduler; a phone nobody polled must not
    # go on counting admissions that have left its window, or it looks full for good: no step
    # is sent to it, so nothing polls it, while the steps queue on phones that really are full.
    windowed = msgspec.structs.replace(CONFIG, limits=QuotaLimits(window_seconds=10.0, requests_per_window=2,
                                                                  max_concurrency=1))
    async with farm(phone(), phone(), config=windowed) as f:
        for _ in range(2):
            await generate(f.pool, ask(owner="npc:a"))  # phone 1's window: full from t = 0 to 10
        f.clock.advance(5.0)
        for _ in range(2):
            await generate(f.pool, ask(owner="npc:b"))  # phone 2's window: full from t = 5 to 15
        assert f.admitted() == [2, 2]
        f.clock.advance(7.0)  # t = 12: phone 1 is free again, phone 2 (npc:b's home) is not
        done = anyio.Event()

        async def step() -> None:
            await generate(f.pool, ask(owner="npc:b"))
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(step)
            await until(lambda: done.is_set() or f.pool.statistics_nowait().queued)
            served_at_once, queued = done.is_set(), [d.queued for d in f.pool.statistics_nowait().devices]
            f.clock.advance(3.0)  # lets a step wrongly queued on phone 2 finish (the test fails anyway)
    assert (served_at_once, queued, f.admitted()) == (True, [0, 0], [3, 2])


async def test_the_phones_time_generating_is_counted_by_the_priority_of_the_step() -> None:
    async def generate_for(seconds: float, priority: str) -> None:
        # The phone streams at once; the pool's clock moves while the step holds the phone.
        async for _ in f.pool.stream(ask(owner=f"npc:{priority}", priority=priority)):
            f.clock.advance(seconds)
            seconds = 0.0

    async with farm(phone(), phone()) as f:
        await generate_for(3.0, "dialogue")
        await generate_for(0.5, "background")
        await generate_for(1.5, "background")
        generating = f.pool.statistics_nowait().generating_by_priority
    assert generating == {"dialogue": 3.0, "decision": 0.0, "background": 2.0}


async def test_the_phones_keep_room_for_their_share_of_the_dialogue_the_whole_pool_sees() -> None:
    # Six lines, most of them on one NPC's home phone: the pool's dialogue is six a window, three
    # a phone. Each phone's window frees nothing for a minute, so each keeps three of its ten
    # slots free for those three lines. Counted per phone, the phone that got fewer lines would
    # fill with background work, and the next lines would find room only where the first went.
    windowed = msgspec.structs.replace(CONFIG, limits=QuotaLimits(window_seconds=60.0, requests_per_window=10,
                                                                  max_concurrency=1))
    async with farm(phone(), phone(), config=windowed) as f:
        await generate(f.pool, ask(owner="npc:warm", priority="background"))  # the first period starts
        f.clock.advance(61.0)  # and closes without dialogue; the warm-up has left the window
        for _ in range(6):
            await generate(f.pool, ask(owner="npc:a"))
        lines = [d.requests_in_window for d in f.pool.statistics_nowait().devices]
        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(generate, f.pool, ask(owner=f"npc:{n}", priority="background"))
            await until(lambda: f.pool.statistics_nowait().queued == 20 - 2 * 7 + 6)
            await anyio.wait_all_tasks_blocked()
            in_window = [d.requests_in_window for d in f.pool.statistics_nowait().devices]
            group.cancel_scope.cancel()
    assert sorted(lines) != [3, 3]  # the lines did not split evenly
    assert in_window == [7, 7]
