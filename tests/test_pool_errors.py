"""The device pool against real simulated phones on loopback: every ML Kit error path, fail-over,
cool-down, dead devices and probing back. The pool runs on a virtual clock and each phone on its
own, so quotas and cool-downs move only when a test says so."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from oam_actors import AgentError, ErrorCode, GenerationRequest, StepKind
from oam_actors.models.device import DeviceTimeouts, ManualClock, MlKitCode, PhoneConfig, SimulatedPhone
from oam_actors.models.device.protocol import ModelStatus
from oam_actors.models.pool import DevicePool, DeviceState, PoolConfig
from oam_actors.models.scheduler import ManualClock as PoolClock
from oam_actors.models.scheduler import QuotaLimits

GUARD = 20.0  # seconds; only so that a broken test fails instead of hanging the suite
FAST = {"time_scale": 0.001, "first_token_latency_s": 0.0, "tokens_per_s": 0.0, "busy_latency_s": 0.0}
CONFIG = PoolConfig(limits=QuotaLimits(max_concurrency=1), queue_seconds=(20.0, 20.0, 20.0),
                    probe_interval_seconds=1000.0, timeouts=DeviceTimeouts(read=2.0))


def phone(**fields: Any) -> PhoneConfig:
    return PhoneConfig(**{**FAST, **fields})


def ask(prompt: str = "User: Hello there.\nAssistant:", *, owner: str = "npc:gorm",
        priority: str = "dialogue") -> GenerationRequest:
    return GenerationRequest(kind=StepKind.RESPOND, system="You are Gorm, the smith.", prompt=prompt,
                             owner=owner, priority=priority)


class Farm:
    """Phones with their own manual clocks, and the pool over them."""

    def __init__(self, pool: DevicePool, phones: list[SimulatedPhone], clocks: list[ManualClock],
                 clock: PoolClock) -> None:
        self.pool = pool
        self.phones = phones
        self.phone_clocks = clocks
        self.clock = clock

    def device(self, index: int) -> Any:
        return self.pool.statistics_nowait().devices[index]

    def admitted(self) -> list[int]:
        return [p.statistics().admitted for p in self.phones]


@asynccontextmanager
async def farm(*configs: PhoneConfig, config: PoolConfig = CONFIG,
               extra_urls: Sequence[str] = ()) -> AsyncIterator[Farm]:
    with anyio.fail_after(GUARD):
        async with AsyncExitStack() as stack:
            clocks = [ManualClock() for _ in configs]
            phones = [await stack.enter_async_context(SimulatedPhone(c, clock=k))
                      for c, k in zip(configs, clocks, strict=True)]
            clock = PoolClock()
            pool = await stack.enter_async_context(
                DevicePool([p.url for p in phones] + list(extra_urls), config=config, clock=clock))
            yield Farm(pool, phones, clocks, clock)


async def generate(pool: DevicePool, request: GenerationRequest | None = None) -> str:
    return "".join([p async for p in pool.stream(request or ask()) if isinstance(p, str)])


async def failure(pool: DevicePool, request: GenerationRequest | None = None) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await generate(pool, request)
    return caught.value


async def until(condition: Any) -> None:
    """Wait (with the test's hang guard) for a condition another task brings about."""
    while not condition():
        await anyio.sleep(0.002)


# --- quota refusals: the step moves to another phone ------------------------------------------


async def test_busy_cools_the_phone_down_and_the_step_goes_to_another() -> None:
    async with farm(phone(quota_requests=1), phone()) as f:
        # Gorm's steps stay on phone 1 (his home) until it refuses: the second moves to phone 2.
        assert all([await generate(f.pool) for _ in range(2)])
        first, second = f.device(0), f.device(1)
        stats = f.pool.statistics_nowait()
    assert (first.state, first.reason, first.busy, first.ok) == (DeviceState.COOLING, "BUSY (9)", 1, 1)
    assert (second.ok, stats.quota_events_absorbed, stats.quota_events_surfaced, stats.rerouted) == (1, 1, 0, 1)
    assert first.requests_limit == 1  # learned from what its window held when it refused


@pytest.mark.parametrize("code", [MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED,
                                  MlKitCode.PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED])
async def test_battery_quotas_are_absorbed_by_another_phone(code: int) -> None:
    async with farm(phone(battery_requests=1, battery_code=code), phone()) as f:
        texts = [await generate(f.pool) for _ in range(2)]  # phone 1, then it refuses: phone 2
        first = f.device(0)
    assert all(texts) and first.state is DeviceState.COOLING and first.busy == 1
    assert first.reason == f"{MlKitCode(code).name} ({code})"


async def test_background_use_reroutes_until_a_probe_sees_the_app_in_front_again() -> None:
    async with farm(phone(), phone()) as f:
        f.phones[0].set_foreground(False)
        assert await generate(f.pool)
        assert (f.device(0).state, f.device(0).reason) == (DeviceState.COOLING, "BACKGROUND_USE_BLOCKED (30)")
        f.phones[0].set_foreground(True)
        await f.pool.probe()
        assert f.device(0).state is DeviceState.READY
    assert f.admitted() == [0, 1]


async def test_one_phone_busy_with_queue_time_left_waits_out_the_cool_down() -> None:
    config = msgspec.structs.replace(CONFIG, queue_seconds=(120.0, 120.0, 120.0))
    async with farm(phone(quota_requests=1), config=config) as f:
        await generate(f.pool)
        async with anyio.create_task_group() as group:
            results: list[str] = []

            async def second() -> None:
                results.append(await generate(f.pool))

            group.start_soon(second)
            await until(lambda: f.device(0).busy == 1)
            f.phone_clocks[0].advance(60.0)  # the phone's window frees
            # The pool learned from the BUSY that the phone allows one per window: it waits for its
            # own window (60 s) to free, not just the 0.06 s retry delay.
            f.clock.advance(59.0)
            await anyio.wait_all_tasks_blocked()
            assert not results and f.device(0).queued == 1
            f.clock.advance(1.0)
        stats = f.pool.statistics_nowait()
    assert results[0] and (stats.quota_events_absorbed, stats.quota_events_surfaced) == (1, 0)
    assert stats.devices[0].requests_limit == 2  # learned 1, then one more after a window without BUSY


async def test_every_phone_busy_past_the_queue_time_surfaces_rate_limited_with_retry_after() -> None:
    config = msgspec.structs.replace(CONFIG, queue_seconds=(5.0, 5.0, 5.0))
    async with farm(phone(quota_requests=1), config=config) as f:
        await generate(f.pool)
        async with anyio.create_task_group() as group:
            errors: list[AgentError] = []

            async def second() -> None:
                errors.append(await failure(f.pool))

            group.start_soon(second)
            await until(lambda: f.device(0).busy == 1)
            f.clock.advance(6.0)  # past the queue time; the phone's window is still full
        stats = f.pool.statistics_nowait()
    [error] = errors
    assert error.code is ErrorCode.RATE_LIMITED and error.extra["retryAfterSeconds"] >= 1
    assert stats.quota_events_surfaced == 1 and stats.steps_failed == 1


# --- refusals of the request itself: surfaced, never rerouted --------------------------------


@pytest.mark.parametrize(("code", "expected"), [
    (MlKitCode.REQUEST_PROCESSING_ERROR, ErrorCode.GUARDRAIL_VIOLATION),   # before any text
    (MlKitCode.RESPONSE_GENERATION_ERROR, ErrorCode.GUARDRAIL_VIOLATION),  # mid-stream
    (MlKitCode.RESPONSE_PROCESSING_ERROR, ErrorCode.GUARDRAIL_VIOLATION),  # after the text
])
async def test_safety_blocks_reach_the_caller_and_the_other_phone_is_not_asked(code: int, expected: ErrorCode) -> None:
    blocked = phone(blocked_words={"troll": code})
    async with farm(blocked, blocked) as f:
        error = await failure(f.pool, ask("User: Tell me about the troll in the long valley.\nAssistant:"))
        device = f.device(0)
    assert (error.code, error.mlkit_code) == (expected, code)  # type: ignore[attr-defined]
    assert f.admitted()[1] == 0 and (device.state, device.rejected, device.errors) == (DeviceState.READY, 1, 0)


async def test_a_prompt_over_the_input_limit_fails_context_size_exceeded() -> None:
    async with farm(phone(input_token_limit=50), phone(input_token_limit=50)) as f:
        error = await failure(f.pool, ask("User: " + "very long story " * 40 + "\nAssistant:"))
        stats = f.pool.statistics_nowait()
    assert error.code is ErrorCode.CONTEXT_SIZE_EXCEEDED and "limit is 50" in error.message
    assert stats.rerouted == 0 and stats.devices[0].rejected == 1


async def test_an_empty_prompt_fails_invalid_request() -> None:
    async with farm(phone()) as f:
        error = await failure(f.pool, ask("   "))
    assert (error.code, error.mlkit_code) == (ErrorCode.INVALID_REQUEST, MlKitCode.REQUEST_TOO_SMALL)  # type: ignore[attr-defined]


# --- device failures: rerouted, counted, dead, probed back ----------------------------------


async def test_an_unknown_ml_kit_error_before_any_text_is_rerouted() -> None:
    async with farm(phone(fault_unknown=1.0), phone()) as f:
        text = await generate(f.pool)
        first = f.device(0)
    assert text and f.admitted() == [1, 1]
    assert (first.state, first.reason, first.errors) == (DeviceState.COOLING, "UNKNOWN (0)", 1)


async def test_repeated_failures_mark_a_phone_dead_until_a_probe_finds_it_serving() -> None:
    config = msgspec.structs.replace(CONFIG, dead_after_failures=2)
    async with farm(phone(fault_unknown=1.0), phone(), config=config) as f:
        await generate(f.pool, ask(owner="npc:a"))  # phone 1 fails, phone 2 serves
        f.clock.advance(2.0)  # phone 1's cool-down ends; it is its turn again
        await generate(f.pool, ask(owner="npc:b"))
        assert f.device(0).state is DeviceState.DEAD and "2 failures in a row" in f.device(0).reason
        await generate(f.pool, ask(owner="npc:c"))  # a dead phone is not asked
        assert f.admitted() == [2, 3]
        await f.pool.probe()  # its status endpoint answers: back in service
        assert f.device(0).state is DeviceState.READY


async def test_a_phone_that_breaks_mid_stream_fails_the_step_for_the_agent_to_retry() -> None:
    async with farm(phone(fault_disconnect=1.0), phone()) as f:
        error = await failure(f.pool, ask("User: What news from the capital, and what of the mine?\nAssistant:"))
        stats = f.pool.statistics_nowait()
    assert error.code is ErrorCode.GENERATION_FAILED and stats.rerouted == 0  # text had streamed
    assert stats.devices[0].errors == 1 and f.admitted() == [1, 0]


async def test_a_phone_that_hangs_mid_stream_times_out_and_the_pool_keeps_serving() -> None:
    config = msgspec.structs.replace(CONFIG, timeouts=DeviceTimeouts(read=0.2))
    async with farm(phone(fault_hang=1.0), phone(), config=config) as f:
        error = await failure(f.pool, ask("User: What news from the capital, and what of the mine?\nAssistant:"))
        assert error.code is ErrorCode.GENERATION_FAILED and "stopped responding" in error.message
        assert await generate(f.pool)  # the other phone serves the next step
        assert f.device(0).state is DeviceState.COOLING


async def test_garbage_mid_stream_fails_the_step_as_generation_failed() -> None:
    async with farm(phone(fault_garbage=1.0)) as f:
        error = await failure(f.pool, ask("User: What news from the capital, and what of the mine?\nAssistant:"))
    assert error.code is ErrorCode.GENERATION_FAILED and "invalid stream line" in error.message


async def test_an_unreachable_phone_is_dead_from_the_start_and_the_others_serve() -> None:
    closed = SimulatedPhone(phone())
    async with closed:
        url = closed.url
    async with farm(phone(), extra_urls=[url]) as f:
        assert f.device(1).state is DeviceState.DEAD and "status check failed" in f.device(1).reason
        assert all([await generate(f.pool) for _ in range(3)])
        availability = await f.pool.availability()
    assert f.admitted() == [3]
    assert availability.available and availability.detail == "1 of 2 devices ready, 0 cooling down, 1 dead."


async def test_a_dead_phone_comes_back_when_the_background_probe_reaches_it() -> None:
    first = SimulatedPhone(phone())
    async with first:
        port = first.port
    async with farm(phone(), extra_urls=[f"http://127.0.0.1:{port}"]) as f:
        assert f.device(1).state is DeviceState.DEAD
        async with SimulatedPhone(phone(), port=port) as revived:
            f.clock.advance(1000.0)  # the probe interval
            await until(lambda: f.device(1).state is DeviceState.READY)
            # Two new owners: the phones take turns.
            assert all([await generate(f.pool, ask(owner=owner)) for owner in ("npc:a", "npc:b")])
            assert revived.statistics().admitted == 1


async def test_a_phone_whose_model_is_unavailable_is_dead_and_every_step_fails_model_unavailable() -> None:
    async with farm(phone(status=ModelStatus.UNAVAILABLE)) as f:
        error = await failure(f.pool)
        availability = await f.pool.availability()
    assert error.code is ErrorCode.MODEL_UNAVAILABLE and "device1: model unavailable" in error.message
    assert (availability.available, availability.reason) == (False, "device_not_eligible")


async def test_availability_takes_the_smallest_context_of_the_serving_phones() -> None:
    async with farm(phone(input_token_limit=4000), phone(input_token_limit=2000, max_output_tokens=128)) as f:
        availability = await f.pool.availability()
        capabilities = f.pool.capabilities
    assert (availability.available, availability.contextSize, availability.maxOutputTokens) == (True, 2000, 128)
    assert (capabilities.context_size, capabilities.max_output_tokens) == (2000, 128)
