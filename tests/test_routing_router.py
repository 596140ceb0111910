"""The router over real backends on a virtual clock: a device pool of simulated phones and an
OpenAI-compatible provider on loopback. Spill by deadline, caps (with concurrent steps at the
cap), settlement from the provider's usage, cooldown skipping, and turns kept on a native
tool-calling backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
from provider_servers import ProviderServer, Reply, openai_text, stream

from oam_actors import AgentError, ErrorCode, GenerationRequest, StepKind
from oam_actors.models.pool import PoolConfig
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig
from oam_actors.models.routing import RouterModel, parse_routes
from oam_actors.models.scheduler import ManualClock, Priority, QuotaLimits, QuotaScheduler

from test_coalesce_backends import loopback
from test_coalesce_model import run_jobs
from test_pool_errors import CONFIG, Farm, farm, generate, phone

# One generation per virtual minute: after one step the phone has no room for 60 s.
ONE_A_MINUTE = msgspec.structs.replace(CONFIG, limits=QuotaLimits(
    requests_per_window=1, window_seconds=60.0, max_concurrency=1), queue_seconds=(20.0, 60.0, 120.0))


def table(cloud: dict[str, Any] | None = None, **routes: Any) -> Any:
    return parse_routes({
        "spill": 0.5,
        "backends": {"phones": {"model": "farm:1"}, "cloud": {"model": "openai#m", **(cloud or {})}},
        "routes": {"dialogue": ["phones", "cloud"], "decision": ["phones", "cloud"], "background": ["phones"],
                   **routes},
        "tenants": {"alice": {"owners": ["npc:alice"], "cap": {"day": 0.2}}},
    })


def ask(owner: str = "npc:gorm", priority: str = "dialogue", kind: StepKind = StepKind.RESPOND,
        **fields: Any) -> GenerationRequest:
    return GenerationRequest(kind=kind, system="You are Gorm, the smith.",
                             prompt="User: Hello there.\nAssistant:", owner=owner, priority=priority, **fields)


class Setup:
    def __init__(self, f: Farm, server: ProviderServer, router: RouterModel) -> None:
        self.farm, self.server, self.router, self.clock = f, server, router, f.clock
        self.cloud_reached: list[float] = []  # the virtual moments the router turned to the cloud

    async def run(self, *requests: GenerationRequest) -> list[str | AgentError]:
        """Every request at once; the virtual clock moves a second at a time until all end."""
        return await run_jobs([lambda r=r: generate(self.router, r) for r in requests], self.clock,  # type: ignore[arg-type]
                              settle=loopback)

    async def backend(self, name: str) -> Any:
        stats = await self.router.statistics()
        return next(b for b in stats.backends if b.name == name)


@asynccontextmanager
async def routed(routes: Any, config: PoolConfig = ONE_A_MINUTE, **phone_fields: Any) -> AsyncIterator[Setup]:
    async with farm(phone(**phone_fields), config=config) as f:
        with ProviderServer() as server:
            async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
                cloud = backends.model(ProxyConfig(provider=Provider.OPENAI, model="m", base_url=server.url + "/v1"))
                def reach_cloud() -> Any:
                    setup.cloud_reached.append(f.clock.now())
                    return cloud

                router = RouterModel(routes, {"phones": lambda: f.pool, "cloud": reach_cloud}, clock=f.clock,
                                     queue_seconds=(20.0, 60.0, 120.0))
                setup = Setup(f, server, router)
                yield setup


async def test_a_step_the_phones_quota_cannot_admit_by_its_spill_deadline_goes_to_the_cloud_at_once() -> None:
    async with routed(table()) as s:
        assert await generate(s.router, ask()) != ""  # the phones' one generation this minute
        s.server.push(stream(openai_text("From the cloud.")))
        [line] = await s.run(ask())
        spilled_at = s.cloud_reached[0]
        phones, cloud = await s.backend("phones"), await s.backend("cloud")
    assert line == "From the cloud."
    assert (phones.served, phones.spilled, cloud.served) == (1, 1, 1)
    assert spilled_at == 0.0  # the phones' window frees a slot in 60 s, past the 10 s it may hold the step


async def test_a_busy_phone_holds_a_step_until_its_spill_deadline_then_the_cloud_takes_it() -> None:
    # The phone's quota has room, but its one generation at a time is taken (the phone's own
    # clock never moves: the first step generates until the test ends).
    async with routed(table(), CONFIG, first_token_latency_s=1000.0) as s, anyio.create_task_group() as group:
        group.start_soon(generate, s.router, ask(owner="npc:holder"))
        await anyio.wait_all_tasks_blocked()
        s.server.push(stream(openai_text("From the cloud.")))
        [line] = await s.run(ask())
        spilled_at = s.cloud_reached[0]
        phones = await s.backend("phones")
        group.cancel_scope.cancel()
    assert line == "From the cloud."
    assert phones.spilled == 1 and spilled_at == 10.0  # half of the dialogue's 20 s on the phone, not a second more


async def test_background_work_stays_on_the_phones_and_waits_its_whole_time_there() -> None:
    async with routed(table()) as s:
        await generate(s.router, ask())
        [line] = await s.run(ask(priority="background"))
        served_at = s.clock.now()
    assert isinstance(line, str) and line and not s.server.requests
    assert 60.0 <= served_at < 120.0  # the phones' next window, within background's 120 s


async def test_a_step_no_tier_admits_in_time_degrades_as_today() -> None:
    async with routed(table(dialogue=["phones"])) as s:
        await generate(s.router, ask())
        [failure] = await s.run(ask())
        stats = await s.router.statistics()
        failed_at = s.clock.now()
    assert isinstance(failure, AgentError) and failure.code is ErrorCode.RATE_LIMITED
    assert stats.unrouted == 1 and failed_at == 20.0 and not s.server.requests


async def test_spend_is_settled_from_the_usage_the_provider_reports() -> None:
    price = {"request": 0.01, "input_per_1k": 1.0, "output_per_1k": 2.0}
    async with routed(table(cloud={"price": price}, dialogue=["cloud"])) as s:
        s.server.push(stream(openai_text("Paid for.")))
        [line] = await s.run(ask())
        cloud = await s.backend("cloud")
        stats = await s.router.statistics()
    assert line == "Paid for."
    assert cloud.spend == pytest.approx(0.01 + 42 / 1000 * 1.0 + 7 / 1000 * 2.0)  # the provider's 42 in, 7 out
    assert cloud.reserved == 0.0
    assert [(u.backend, u.priority, u.kind, u.served) for u in stats.steps] == [("cloud", "dialogue", "respond", 1)]


async def test_concurrent_steps_at_a_backend_cap_never_overshoot_it_and_the_rest_go_to_the_next_tier() -> None:
    async with routed(table(cloud={"price": {"request": 1.0}, "cap": {"hour": 2.0}},
                            dialogue=["cloud", "phones"])) as s:
        s.server.always = stream(openai_text("Cloud."))
        lines = await s.run(*(ask(owner=f"npc:{n}") for n in range(3)))
        cloud, phones = await s.backend("cloud"), await s.backend("phones")
    assert sorted(lines, key=str) == sorted(["Cloud.", "Cloud.", lines[-1]], key=str) and lines.count("Cloud.") == 2
    assert (cloud.served, cloud.capped, cloud.spend, phones.served) == (2, 1, 2.0, 1)
    assert len(s.server.requests) == 2


async def test_a_tenants_cap_holds_across_backends() -> None:
    async with routed(table(cloud={"price": {"request": 0.15}}, dialogue=["cloud"])) as s:
        s.server.always = stream(openai_text("Cloud."))
        alice = await s.run(ask(owner="npc:alice"), ask(owner="npc:alice-too"))
        other = await s.run(ask(owner="npc:bob"))
        stats = await s.router.statistics()
    assert sorted(map(str, alice)) == sorted(["Cloud.", str(next(a for a in alice if a != "Cloud."))])
    refused = next(a for a in alice if isinstance(a, AgentError))
    assert refused.code is ErrorCode.RATE_LIMITED  # degrades as today: no tier had room under her cap
    assert other == ["Cloud."]
    [tenant] = stats.tenants
    assert (tenant.name, tenant.served, tenant.spend, tenant.cap_day) == ("alice", 1, 0.15, 0.2)


async def test_a_backend_that_fails_is_skipped_for_its_cooldown_then_tried_again() -> None:
    async with routed(table(cloud={"cooldown": 30}, dialogue=["cloud", "phones"]), CONFIG) as s:
        s.server.push(Reply(status=404, headers={"content-type": "application/json"},
                            chunks=[b'{"error": {"message": "no such model", "code": "model_not_found"}}']))
        [first] = await s.run(ask())  # the cloud fails; the phones answer
        [second] = await s.run(ask(owner="npc:mira"))  # cooling: straight to the phones
        cloud = await s.backend("cloud")
        asked_while_cooling = len(s.server.requests)
        s.clock.advance(30.0)
        s.server.push(stream(openai_text("Back.")))
        [third] = await s.run(ask(owner="npc:ulf"))
    assert isinstance(first, str) and isinstance(second, str)
    assert (cloud.failed, cloud.skipped, asked_while_cooling) == (1, 1, 1)
    assert third == "Back."


@pytest.mark.parametrize("native", [True, False])
async def test_a_turn_on_a_native_tool_calling_backend_stays_there_and_envelope_steps_may_move(native: bool) -> None:
    routes = table(dialogue={"default": ["phones"], "decide": ["cloud"]})
    async with farm(phone(), config=CONFIG) as f:
        with ProviderServer() as server:
            server.always = stream(openai_text('{"action": "respond", "arguments": {}}'))
            async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
                cloud = backends.model(ProxyConfig(provider=Provider.OPENAI, model="m", base_url=server.url + "/v1",
                                                   native_tools=native))
                router = RouterModel(routes, {"phones": lambda: f.pool, "cloud": lambda: cloud}, clock=f.clock)
                decide = ask(kind=StepKind.DECIDE)
                await generate(router, decide)
                await generate(router, msgspec.structs.replace(decide, kind=StepKind.RESPOND, follow_up=True))
                await generate(router, ask(owner="npc:mira"))  # another owner's first step: its own row
                stats = await router.statistics()
    served = {b.name: b.served for b in stats.backends}
    assert served == ({"cloud": 2, "phones": 1} if native else {"cloud": 1, "phones": 2})


async def test_a_tier_before_a_cooling_one_is_the_last_and_holds_the_step_its_whole_time() -> None:
    async with routed(table(cloud={"cooldown": 300}, decision=["cloud"])) as s:
        s.server.push(Reply(status=404, headers={"content-type": "application/json"},
                            chunks=[b'{"error": {"message": "no such model", "code": "model_not_found"}}']))
        with pytest.raises(AgentError):
            await generate(s.router, ask(priority="decision"))  # the cloud fails: it cools down
        await generate(s.router, ask())  # the phones' one generation this minute
        [line] = await s.run(ask(owner="npc:mira"))
        phones = await s.backend("phones")
    assert isinstance(line, AgentError) and line.code is ErrorCode.RATE_LIMITED
    assert s.clock.now() == 20.0 and phones.spilled == 0  # all its 20 s on the phones
    assert len(s.server.requests) == 1  # only the failed decision: the cooling cloud was not asked


async def test_a_scheduler_says_how_long_its_quota_keeps_a_step_out() -> None:
    clock = ManualClock()
    scheduler = QuotaScheduler(QuotaLimits(requests_per_window=1, window_seconds=60.0, max_concurrency=1), clock=clock)
    assert scheduler.admission_wait() == 0.0
    async with scheduler.admit("npc:gorm", Priority.DIALOGUE):
        assert scheduler.admission_wait() == 60.0  # the window's one slot is taken (concurrency aside)
    clock.advance(45.0)
    assert scheduler.admission_wait() == 15.0
    scheduler.throttled(retry_after=100.0)
    assert scheduler.admission_wait() == 100.0  # cooling down after the backend's refusal
