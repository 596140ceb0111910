"""The device pool's pure parts: fault classes, device choice, pool availability, start-up checks,
and ``ScheduledModel`` (a backend behind one quota scheduler)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from oam_actors import (
    AgentError,
    Availability,
    ErrorCode,
    GenerationRequest,
    ModelCapabilities,
    StepKind,
    Usage,
)
from oam_actors.models.device import DeviceError, FailureKind, MlKitCode
from oam_actors.models.pool import (
    Candidate,
    DevicePool,
    DeviceState,
    Fault,
    PoolConfig,
    PoolConfigError,
    ScheduledModel,
    choose,
    classify,
    nano_limits,
    normalize_urls,
    pool_availability,
    scaled_config,
)
from oam_actors.models.scheduler import ManualClock, QuotaLimits, QuotaScheduler


def mlkit(code: int) -> DeviceError:
    return DeviceError(ErrorCode.GENERATION_FAILED, "x", kind=FailureKind.MLKIT, mlkit_code=code)


@pytest.mark.parametrize(("code", "fault"), [
    (MlKitCode.BUSY, Fault.QUOTA),
    (MlKitCode.PER_APP_BATTERY_USE_QUOTA_EXCEEDED, Fault.QUOTA),
    (MlKitCode.PER_DEVICE_BATTERY_USE_QUOTA_EXCEEDED, Fault.QUOTA),
    (MlKitCode.BACKGROUND_USE_BLOCKED, Fault.QUOTA),
    (MlKitCode.UNKNOWN, Fault.TRANSIENT),
    (MlKitCode.CACHE_PROCESSING_ERROR, Fault.TRANSIENT),
    (MlKitCode.CANCELLED, Fault.TRANSIENT),
    (1234, Fault.TRANSIENT),
    (MlKitCode.NOT_AVAILABLE, Fault.UNAVAILABLE),
    (MlKitCode.NEEDS_SYSTEM_UPDATE, Fault.UNAVAILABLE),
    (MlKitCode.AICORE_INCOMPATIBLE, Fault.UNAVAILABLE),
    (MlKitCode.REQUEST_PROCESSING_ERROR, Fault.REQUEST),
    (MlKitCode.RESPONSE_GENERATION_ERROR, Fault.REQUEST),
    (MlKitCode.REQUEST_TOO_LARGE, Fault.REQUEST),
    (MlKitCode.REQUEST_TOO_SMALL, Fault.REQUEST),
    (MlKitCode.STRUCTURED_OUTPUT_REQUEST_ERROR, Fault.REQUEST),
])
def test_ml_kit_codes_map_to_fault_classes(code: int, fault: Fault) -> None:
    assert classify(mlkit(code)) is fault


@pytest.mark.parametrize(("kind", "status", "fault"), [
    (FailureKind.UNREACHABLE, None, Fault.UNREACHABLE),
    (FailureKind.TIMEOUT, None, Fault.TRANSIENT),
    (FailureKind.DISCONNECTED, None, Fault.TRANSIENT),
    (FailureKind.MALFORMED, 200, Fault.TRANSIENT),
    (FailureKind.REJECTED, 429, Fault.QUOTA),
    (FailureKind.REJECTED, 503, Fault.QUOTA),
    (FailureKind.REJECTED, 401, Fault.UNAVAILABLE),
    (FailureKind.REJECTED, 400, Fault.REQUEST),
    (FailureKind.REJECTED, 502, Fault.TRANSIENT),
])
def test_transport_and_http_failures_map_to_fault_classes(kind: FailureKind, status: int | None, fault: Fault) -> None:
    error = DeviceError(ErrorCode.GENERATION_FAILED, "x", kind=kind, http_status=status)
    assert classify(error) is fault


def candidate(index: int, state: DeviceState = DeviceState.READY, *, load: int = 0, room: int | None = 10,
              cool_until: float = 0.0, tried: bool = False, frees_in: float = 0.0) -> Candidate:
    return Candidate(index, state, cool_until, load, room, tried, frees_in)


def test_choose_prefers_untried_ready_devices_with_room_then_the_least_loaded() -> None:
    assert choose([candidate(0, load=3), candidate(1, load=1), candidate(2, load=2)]) == 1
    assert choose([candidate(0, room=0), candidate(1, load=5)]) == 1  # a full window waits longest
    assert choose([candidate(0, tried=True), candidate(1, load=4)]) == 1
    assert choose([candidate(0, DeviceState.COOLING), candidate(1, load=9)]) == 1
    assert choose([candidate(0, DeviceState.DEAD), candidate(1, DeviceState.DEAD)]) is None


def test_choose_waits_for_the_soonest_cool_down_when_every_device_cools() -> None:
    devices = [candidate(0, DeviceState.COOLING, cool_until=9.0), candidate(1, DeviceState.COOLING, cool_until=4.0),
               candidate(2, DeviceState.DEAD)]
    assert choose(devices) == 1
    assert choose([candidate(0, tried=True), candidate(1, DeviceState.DEAD)]) == 0  # tried, but the only one


def test_choose_takes_turns_among_equal_devices() -> None:
    equal = [candidate(0), candidate(1), candidate(2)]
    assert [choose(equal, turn) for turn in range(4)] == [0, 1, 2, 0]


def test_an_owner_stays_on_its_home_device_unless_it_is_much_busier_or_not_ready() -> None:
    devices = [candidate(0, load=4), candidate(1, load=3), candidate(2, load=9)]
    assert choose(devices, home=0) == 0  # one step busier than the best: stays
    assert choose(devices, home=2) == 1  # much busier: leaves
    assert choose([candidate(0, DeviceState.COOLING), candidate(1)], home=0) == 1
    assert choose([candidate(0, tried=True), candidate(1)], home=0) == 1
    assert choose([candidate(0, room=0), candidate(1, load=3)], home=0) == 1  # its window is full


def test_with_every_window_full_a_step_waits_where_one_frees_first() -> None:
    full = [candidate(0, room=0, frees_in=9.0), candidate(1, room=0, load=2, frees_in=0.5),
            candidate(2, room=0, frees_in=4.0)]
    assert choose(full) == 1  # busier, but its window frees first
    assert choose(full, home=2) == 1  # the home device's window frees later: the step leaves it
    assert choose([candidate(0, room=0, frees_in=2.0), candidate(1, room=0, frees_in=2.0, load=1)], home=1) == 1
    assert choose([candidate(0, room=0, frees_in=0.5), candidate(1, load=6)]) == 1  # room now beats any wait


def available(context: int = 4000, output: int | None = 256) -> Availability:
    return Availability(available=True, contextSize=context, variant="nano-v3", status="available",
                        maxOutputTokens=output)


def test_pool_availability_is_available_if_any_live_device_is_with_the_smallest_limits() -> None:
    result = pool_availability([
        (DeviceState.READY, available(4000, 256)),
        (DeviceState.COOLING, available(2000, 512)),
        (DeviceState.DEAD, available(1000, 64)),  # dead: it does not count
    ])
    assert (result.available, result.contextSize, result.maxOutputTokens) == (True, 2000, 256)
    assert result.detail == "1 of 3 devices ready, 1 cooling down, 1 dead."


def test_pool_availability_speaks_for_the_most_hopeful_device_when_none_serves() -> None:
    downloading = Availability(available=False, reason="model_not_ready", status="downloading",
                               detail="The model is downloading.", bytesDownloaded=5, totalBytes=10)
    unavailable = Availability(available=False, reason="device_not_eligible", status="unavailable")
    result = pool_availability([(DeviceState.DEAD, unavailable), (DeviceState.DEAD, downloading)])
    assert (result.available, result.reason, result.status, result.bytesDownloaded) == (
        False, "model_not_ready", "downloading", 5)
    assert result.detail == "0 of 2 devices ready, 0 cooling down, 2 dead.; The model is downloading."
    unknown = pool_availability([(DeviceState.DEAD, None)])
    assert (unknown.available, unknown.reason, unknown.contextSize) == (False, "unknown", 4000)


def test_device_urls_are_checked_at_start_up() -> None:
    assert normalize_urls(["http://127.0.0.1:8765/", "http://10.0.0.2:8765"]) == [
        "http://127.0.0.1:8765", "http://10.0.0.2:8765"]
    with pytest.raises(PoolConfigError, match="at least one device"):
        normalize_urls([])
    with pytest.raises(PoolConfigError, match="listed twice"):
        normalize_urls(["http://Phone.local:80", "http://phone.local/"])
    for bad in ("phone:8765", "ftp://phone", "http://:80", "http://phone:99999", "http://phone?x=1"):
        with pytest.raises(PoolConfigError):
            normalize_urls([bad])
    with pytest.raises(PoolConfigError, match="names must be unique"):
        DevicePool(["http://a:1", "http://b:1"], names=["x", "x"])


def test_impossible_settings_are_refused() -> None:
    for fields in ({"queue_seconds": (1.0, -1.0, 1.0)}, {"queue_seconds": (1.0, 2.0)}, {"max_attempts": 0},
                   {"dead_after_failures": 0}, {"probe_interval_seconds": 0.0},
                   {"transient_cooldown_seconds": float("nan")}):
        with pytest.raises(PoolConfigError):
            PoolConfig(**fields)  # type: ignore[arg-type]
    with pytest.raises(PoolConfigError, match="time_scale"):
        nano_limits(0.0)


def test_nano_limits_follow_the_phone_clock() -> None:
    real, fast = nano_limits(), scaled_config(0.1)
    assert (real.requests_per_window, real.max_concurrency, real.min_interval_seconds) == (36, 1, 1.0)
    assert real.window_seconds > 60.0  # a margin over the phone's window: never ahead of it
    assert fast.limits.window_seconds == pytest.approx(real.window_seconds * 0.1)
    assert (fast.probe_interval_seconds, fast.queue_seconds) == (1.0, PoolConfig().queue_seconds)


class Backend:
    """A backend that answers or refuses as told."""

    def __init__(self, refuse: AgentError | None = None) -> None:
        self.refuse = refuse
        self.requests: list[str] = []

    @property
    def capabilities(self) -> ModelCapabilities:
        return ModelCapabilities(context_size=8192)

    async def availability(self) -> Availability:
        return available(8192)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        self.requests.append(request.owner or "")
        if self.refuse is not None:
            raise self.refuse
        yield "Hello."
        yield Usage(10, 0, 2)


def step(owner: str, priority: str = "dialogue") -> GenerationRequest:
    return GenerationRequest(kind=StepKind.RESPOND, system="s", prompt="p", owner=owner, priority=priority)


async def test_a_scheduled_model_admits_by_priority_and_cools_down_on_rate_limits() -> None:
    clock = ManualClock()
    scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1, min_interval_seconds=1.0), clock=clock)
    backend = Backend()
    model = ScheduledModel(backend, scheduler)
    assert model.capabilities.context_size == 8192 and (await model.availability()).contextSize == 8192
    assert [p async for p in model.stream(step("a"))] == ["Hello.", Usage(10, 0, 2)]
    async with anyio.create_task_group() as group:
        for owner, priority in (("bark", "background"), ("talk", "dialogue")):
            group.start_soon(_drain, model.stream(step(owner, priority)))
            await anyio.wait_all_tasks_blocked()
        clock.advance(1.0)
        await anyio.wait_all_tasks_blocked()
        clock.advance(1.0)
    assert backend.requests == ["a", "talk", "bark"]
    backend.refuse = AgentError(ErrorCode.RATE_LIMITED, "429", retry_after=30.0)
    clock.advance(1.0)
    with pytest.raises(AgentError):
        await _drain(model.stream(step("a")))
    assert scheduler.statistics().cooling_down_until == pytest.approx(clock.now() + 30.0)
    assert (await model.statistics()).queued == (0, 0, 0)


async def _drain(stream: AsyncIterator[object]) -> None:
    async for _ in stream:
        pass
