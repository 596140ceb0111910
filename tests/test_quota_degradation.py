"""Deadlines through the real bridge: a request whose model step cannot be admitted in time
degrades to the protocol's own fallback (a fallback line, ``fallbackOptionID``, a recent bark or,
before the first, the NPC's own fallback line),
marked ``isFallback: true, degraded: "deadline"``; without a fallback it is ``-32005`` with
``retryAfter``; a bad ``deadlineSeconds`` is ``-32602`` naming it.

Deadlines count from a request's arrival at the bridge: time spent before its step reaches the
model (held here at a door in front of the backend) is spent from the deadline.

Two backends whose quota is spent: the device pool over a simulated phone on loopback, and a
proxy (an OpenAI-compatible server on loopback answering 429) behind one quota scheduler. Both
schedulers run on a virtual clock: a deadline passes when the test moves it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pickle

import anyio
import pytest

from oam_actors import Bridge, GameExtension, LocalSystem
from oam_actors.agent.model import DelegatingModel, GenerationRequest, LanguageModel, Usage
from oam_actors.clock import Budget
from oam_actors.models.device import ManualClock as PhoneClock
from oam_actors.models.device import SimulatedPhone
from oam_actors.models.pool import DevicePool, PoolConfig, ScheduledModel
from oam_actors.models.proxy import Provider, ProxyConfig, ProxyModel
from oam_actors.models.scheduler import ManualClock, QuotaLimits, QuotaScheduler
from oam_actors.client import Client, InProcessEndpoint, connect
from oam_actors.errors import OamError

from provider_servers import ProviderServer, fixture, openai_text, stream
from test_pool_errors import phone

GUARD = 20.0  # seconds; only so that a broken test fails instead of hanging the suite
TALK_KEYS = ["npc", "line", "emotion", "playerOptions", "endsConversation", "toolCalls", "relationship",
             "isFallback", "usage", "degraded"]
DECISION_KEYS = ["optionID", "reasoning", "confidence", "toolCalls", "usage", "isFallback", "degraded"]
GORM = {"name": "Gorm", "role": "the village blacksmith", "defaultEmotion": "annoyed"}
FLEE = {"situation": "A dragon lands in the square.", "options": ["fight", "flee"], "actor": "gorm"}


class Door(DelegatingModel):
    """Steps wait here, before the backend, while the door is shut (a busy mailbox or actor turn)."""

    def __init__(self, model: LanguageModel) -> None:
        super().__init__(model)
        self.opened = anyio.Event()
        self.opened.set()
        self.waiting = 0

    def shut(self) -> None:
        self.opened = anyio.Event()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:  # type: ignore[override]
        self.waiting += 1
        await self.opened.wait()
        self.waiting -= 1
        async for piece in self._model.stream(request):
            yield piece


@dataclass
class Crowd:
    """A bridge over a backend whose quota is spent after its first generation."""

    client: Client
    clock: ManualClock
    queued: Callable[[], int]  # model steps waiting for quota
    door: Door

    async def send(self, method: str, params: dict[str, Any], answer: list[Any]) -> None:
        """Send a request; its result or its error object goes into ``answer``."""
        try:
            answer.append(await self.client.call(method, params))
        except OamError as error:
            answer.append(error.to_wire())

    async def late(self, method: str, params: dict[str, Any], seconds: float) -> Any:
        """Send a request, hold it before the model for ``seconds``; its answer, which must come
        without the step ever queueing for quota."""
        answer: list[Any] = []
        self.door.shut()
        async with anyio.create_task_group() as group:
            group.start_soon(self.send, method, params, answer)
            while not self.door.waiting:
                await anyio.sleep(0.002)
            self.clock.advance(seconds)
            self.door.opened.set()
            while not answer and not self.queued():
                await anyio.sleep(0.002)
            assert not self.queued(), "the step queued for quota with its deadline already spent"
        return answer[0]

    async def degrade(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request, wait until its step queues, move time past its deadline; its answer."""
        answer: list[Any] = []
        async with anyio.create_task_group() as group:
            group.start_soon(self.send, method, params, answer)
            while not self.queued():
                await anyio.sleep(0.002)
            self.clock.advance(params.get("deadlineSeconds", 60.0) + 1.0)
        return answer[0]


def bridge_over(system: LocalSystem, model: Any, clock: ManualClock) -> Callable[[Any], Bridge]:
    return lambda write: Bridge(system, write, system_model=lambda: model, extensions=[GameExtension(clock=clock)])


@asynccontextmanager
async def pool_crowd() -> AsyncIterator[Crowd]:
    """One simulated phone that allows one generation in a window far longer than any test."""
    limits = QuotaLimits(requests_per_window=1, window_seconds=10_000.0, max_concurrency=1)
    config = PoolConfig(limits=limits, queue_seconds=(60.0, 60.0, 60.0), probe_interval_seconds=1000.0)
    with anyio.fail_after(GUARD):
        async with AsyncExitStack() as stack:
            device = await stack.enter_async_context(SimulatedPhone(phone(), clock=PhoneClock()))
            clock = ManualClock()
            pool = await stack.enter_async_context(DevicePool([device.url], config=config, clock=clock))
            system = await stack.enter_async_context(LocalSystem())
            door = Door(pool)
            client = await stack.enter_async_context(connect(InProcessEndpoint(bridge_over(system, door, clock))))
            yield Crowd(client, clock, lambda: sum(d.queued for d in pool.statistics_nowait().devices), door)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@asynccontextmanager
async def proxy_crowd(server: ProviderServer) -> AsyncIterator[Crowd]:
    """An OpenAI-compatible server that answers once, then 429 with a retry delay of minutes."""
    server.push(stream(openai_text("Hot iron waits for no one.")))
    server.always = fixture("openai", "rate_limited_headers_only_429")
    config = ProxyConfig(provider=Provider("openai"), model="m1", base_url=server.url + "/v1")
    clock = ManualClock()
    scheduler = QuotaScheduler(QuotaLimits(), clock=clock)
    with anyio.fail_after(GUARD):
        async with AsyncExitStack() as stack:
            proxy = await stack.enter_async_context(ProxyModel(config, environ={"OPENAI_API_KEY": "sk-test-0P3N41"}))
            model = ScheduledModel(proxy, scheduler, queue_seconds=(60.0, 60.0, 60.0))
            system = await stack.enter_async_context(LocalSystem())
            door = Door(model)
            client = await stack.enter_async_context(connect(InProcessEndpoint(bridge_over(system, door, clock))))
            yield Crowd(client, clock, lambda: sum(scheduler.statistics().queued), door)


async def spend_the_quota(crowd: Crowd) -> str:
    """Create Gorm and let him bark once: the backend's last generation. Returns the bark."""
    await crowd.client.call("npc/create", {"npc": "gorm", "persona": GORM})
    await crowd.client.call("npc/create", {"npc": "snik", "persona": {"name": "Snik"}})
    first = await crowd.client.call("npc/bark", {"npc": "gorm", "situation": "Morning."})
    assert list(first) == ["npc", "line"] and first["line"]
    return str(first["line"])


async def check_each_degradation(crowd: Crowd, first_bark: str) -> None:
    bark = await crowd.degrade("npc/bark", {"npc": "gorm", "situation": "Noon.", "deadlineSeconds": 5})
    assert bark == {"npc": "gorm", "line": first_bark, "isFallback": True, "degraded": "deadline",
                    "repeated": True}

    talk = await crowd.degrade("npc/talk", {"npc": "gorm", "line": "Is my sword ready?", "deadlineSeconds": 5})
    assert list(talk) == TALK_KEYS
    assert (talk["line"], talk["emotion"], talk["isFallback"], talk["degraded"]) == (
        "Let's talk about something else.", "annoyed", True, "deadline")
    assert talk["usage"]["totalTokens"] == 0
    listed = await crowd.client.call("npc/list")
    assert [entry["turnCount"] for entry in listed["npcs"]] == [0, 0]  # the history is unchanged

    decision = await crowd.degrade("decision/decide", {**FLEE, "fallbackOptionID": "flee", "deadlineSeconds": 5})
    assert list(decision) == DECISION_KEYS
    assert (decision["optionID"], decision["confidence"], decision["isFallback"]) == ("flee", 0, True)

    many = await crowd.degrade("decision/decideMany", {
        "requests": [{**FLEE, "fallbackOptionID": "fight"}, FLEE], "deadlineSeconds": 5, "maxConcurrency": 2})
    first, second = many["results"]
    assert (first["optionID"], first["degraded"]) == ("fight", "deadline")
    assert second["error"]["data"]["code"] == "rate_limited" and "retryAfter" in second["error"]["data"]


async def check_no_fallback_is_rate_limited(crowd: Crowd) -> None:
    # Snik has never barked: nothing to say again.
    bark = await crowd.degrade("npc/bark", {"npc": "snik", "deadlineSeconds": 5})
    assert (bark["code"], bark["data"]["code"]) == (-32005, "rate_limited")
    assert bark["data"]["retryAfterSeconds"] >= 1 and "retryAfter" in bark["data"]
    decision = await crowd.degrade("decision/decide", {**FLEE, "deadlineSeconds": 5})
    assert decision["data"]["code"] == "rate_limited"


async def test_each_request_degrades_at_its_deadline_over_the_device_pool() -> None:
    async with pool_crowd() as crowd:
        first_bark = await spend_the_quota(crowd)
        await check_each_degradation(crowd, first_bark)
        await check_no_fallback_is_rate_limited(crowd)


async def test_the_servers_queue_time_is_the_default_deadline() -> None:
    # No deadlineSeconds: the pool's 60 s queue time for the priority applies, and degrades alike.
    async with pool_crowd() as crowd:
        first_bark = await spend_the_quota(crowd)
        bark = await crowd.degrade("npc/bark", {"npc": "gorm"})
        assert bark == {"npc": "gorm", "line": first_bark, "isFallback": True, "degraded": "deadline",
                        "repeated": True}


async def test_each_request_degrades_at_its_deadline_over_a_proxy_whose_quota_is_spent(
    server: ProviderServer,
) -> None:
    async with proxy_crowd(server) as crowd:
        first_bark = await spend_the_quota(crowd)
        assert first_bark == "Hot iron waits for no one."
        # The next request meets the 429: its retry delay (six minutes) outlasts the decision's
        # deadline, so it degrades at once, and the scheduler cools down for the delay.
        refused = await crowd.client.call("decision/decide", {**FLEE, "fallbackOptionID": "flee"})
        assert (refused["optionID"], refused["degraded"]) == ("flee", "deadline")
        assert server.requests[-1].path.endswith("/chat/completions")
        await check_each_degradation(crowd, first_bark)
        await check_no_fallback_is_rate_limited(crowd)


async def test_a_talk_degrades_only_when_the_npc_allows_fallback_lines() -> None:
    async with pool_crowd() as crowd:
        await spend_the_quota(crowd)
        await crowd.client.call("npc/create", {"npc": "raw", "persona": {"name": "Raw"},
                                                  "options": {"fallbackOnGuardrail": False}})
        talk = await crowd.degrade("npc/talk", {"npc": "raw", "line": "Hello?", "deadlineSeconds": 5})
        assert talk["data"]["code"] == "rate_limited"


async def test_a_first_bark_degrades_to_the_npcs_own_fallback_lines() -> None:
    async with pool_crowd() as crowd:
        await spend_the_quota(crowd)
        await crowd.client.call("npc/create", {"npc": "brenna", "persona": {"name": "Brenna"}, "options": {
            "fallbackLines": ["  ", "Busy day at the well.", "Mind the bucket."]}})
        # Brenna has never barked: her first bark says her first fallback line, not an error.
        bark = await crowd.degrade("npc/bark", {"npc": "brenna", "situation": "Noon.", "deadlineSeconds": 5})
        assert bark == {"npc": "brenna", "line": "Busy day at the well.", "isFallback": True, "degraded": "deadline"}
        # A talk's fallback goes on with the same rotation.
        talk = await crowd.degrade("npc/talk", {"npc": "brenna", "line": "Hello?", "deadlineSeconds": 5})
        assert (talk["line"], talk["degraded"]) == ("Mind the bucket.", "deadline")


@pytest.mark.parametrize(("method", "params", "field", "says"), [
    ("npc/talk", {"npc": "gorm", "line": "Hi", "deadlineSeconds": -1}, "deadlineSeconds", "a deadline in the past"),
    ("npc/talk", {"npc": "gorm", "line": "Hi", "deadlineSeconds": 0}, "deadlineSeconds", "greater than 0"),
    ("npc/bark", {"npc": "gorm", "deadlineSeconds": "soon"}, "deadlineSeconds", "must be a number"),
    ("npc/bark", {"npc": "gorm", "deadlineSeconds": True}, "deadlineSeconds", "must be a number"),
    ("decision/decide", {**FLEE, "deadlineSeconds": 1e9}, "deadlineSeconds", "at most 86400"),
    ("decision/decideMany", {"requests": [FLEE, {**FLEE, "deadlineSeconds": -5}]}, "requests[1].deadlineSeconds",
     "a deadline in the past"),
    ("decision/decideMany", {"requests": [FLEE], "deadlineSeconds": None}, None, None),
])
async def test_a_bad_deadline_is_invalid_params_naming_the_field(
    method: str, params: dict[str, Any], field: str | None, says: str | None,
) -> None:
    async with pool_crowd() as crowd:
        await crowd.client.call("npc/create", {"npc": "gorm", "persona": GORM})
        if field is None:  # null is absent: the request runs (here: on the phone's one generation)
            result = await crowd.client.call(method, params)
            assert "results" in result
            return
        with pytest.raises(OamError) as caught:
            await crowd.client.call(method, params)
        error = caught.value.to_wire()
        assert error["code"] == -32602 and f"'{field}'" in error["message"] and says in error["message"]
        assert not crowd.queued()


async def check_time_before_the_model_counts(crowd: Crowd, first_bark: str) -> None:
    # Each request is held 6 s before the model: its 5 s deadline has passed when its step would
    # queue, so it degrades at once, never waiting a whole deadline more for quota.
    bark = await crowd.late("npc/bark", {"npc": "gorm", "situation": "Noon.", "deadlineSeconds": 5}, 6.0)
    assert bark == {"npc": "gorm", "line": first_bark, "isFallback": True, "degraded": "deadline",
                    "repeated": True}
    talk = await crowd.late("npc/talk", {"npc": "gorm", "line": "Is my sword ready?", "deadlineSeconds": 5}, 6.0)
    assert (talk["isFallback"], talk["degraded"]) == (True, "deadline")
    decision = await crowd.late("decision/decide", {**FLEE, "fallbackOptionID": "flee", "deadlineSeconds": 5}, 6.0)
    assert (decision["optionID"], decision["isFallback"], decision["degraded"]) == ("flee", True, "deadline")
    many = await crowd.late("decision/decideMany", {
        "requests": [{**FLEE, "fallbackOptionID": "fight"}, FLEE], "deadlineSeconds": 5, "maxConcurrency": 2}, 6.0)
    first, second = many["results"]
    assert (first["optionID"], first["degraded"]) == ("fight", "deadline")
    assert second["error"]["data"]["code"] == "rate_limited" and "retryAfter" in second["error"]["data"]
    # Snik has no bark to say again: -32005 at once.
    refused = await crowd.late("npc/bark", {"npc": "snik", "deadlineSeconds": 5}, 6.0)
    assert (refused["code"], refused["data"]["code"]) == (-32005, "rate_limited") and "retryAfter" in refused["data"]
    # No deadlineSeconds: the server's 60 s queue time for the priority counts from arrival too.
    default = await crowd.late("npc/bark", {"npc": "gorm"}, 61.0)
    assert default == {"npc": "gorm", "line": first_bark, "isFallback": True, "degraded": "deadline",
                       "repeated": True}
    default_talk = await crowd.late("npc/talk", {"npc": "gorm", "line": "Well?"}, 61.0)
    assert default_talk["degraded"] == "deadline"


async def test_time_before_the_model_counts_against_the_deadline_over_the_device_pool() -> None:
    async with pool_crowd() as crowd:
        await check_time_before_the_model_counts(crowd, await spend_the_quota(crowd))


async def test_time_before_the_model_counts_against_the_deadline_over_a_proxy(server: ProviderServer) -> None:
    async with proxy_crowd(server) as crowd:
        await check_time_before_the_model_counts(crowd, await spend_the_quota(crowd))


def test_a_budget_crosses_a_process_boundary_as_time_spent_not_an_instant() -> None:
    # Pickled into a Ray shard, a budget keeps what was spent and re-anchors on the shard's own
    # monotonic clock (whose zero differs from the driver's).
    clock = ManualClock(start=1_000_000.0)
    budget = Budget(clock, 5.0)
    clock.advance(2.0)
    shipped = pickle.loads(pickle.dumps(budget))
    assert shipped.seconds == 5.0 and shipped.spent() >= 2.0
    left = shipped.left()
    assert left is not None and 0.0 <= left <= 3.0
    unbounded = pickle.loads(pickle.dumps(Budget(clock, None)))
    assert unbounded.left() is None
