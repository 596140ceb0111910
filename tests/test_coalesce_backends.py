"""Coalescing over the real shared backends on loopback: a device pool of simulated phones, and a
proxy (OpenAI wire format) behind its quota scheduler. Barks and decisions of many NPCs waiting
for one backend take fewer generations than there are NPCs (counted where they are spent: the
phones' admissions, the provider's requests), and each NPC gets its own answer."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from provider_servers import ProviderServer, openai_text, stream

from oam_actors.game import NPC, DecisionEngine, DecisionOption, DecisionRequest, Persona
from oam_actors.models.coalesce import CoalescingModel
from oam_actors.models.pool import ScheduledModel
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig
from oam_actors.models.scheduler import ManualClock, QuotaLimits, QuotaScheduler

from test_coalesce_model import run_jobs, said
from test_pool_errors import ask, farm, generate, phone
from test_pool_scheduling import PACED

NAMES = ("Gorm", "Mira", "Tobin", "Elsa", "Brann", "Hild", "Ulf")


def crowd(model: Any, names: tuple[str, ...] = NAMES) -> list[NPC]:
    return [NPC(Persona(name=name, role="a villager"), model, owner=f"npc:{name}") for name in names]


async def loopback() -> None:
    await anyio.sleep(0.002)  # a reply on its way over loopback


async def all_done(jobs: list[Callable[[], Awaitable[Any]]], clock: ManualClock) -> list[Any]:
    return await run_jobs(jobs, clock, settle=loopback)


# --- the device pool ----------------------------------------------------------------------------


async def test_barks_of_many_npcs_on_one_phone_share_its_generations() -> None:
    async with farm(phone(), config=PACED) as f:
        model = CoalescingModel(f.pool)
        await generate(f.pool)  # the phone's next admission is a virtual second away
        npcs = crowd(model, (*NAMES, "Sela", "Bram", "Odo", "Wynn"))
        lines = await all_done([lambda npc=npc: said(npc.bark("Dawn in the square.")) for npc in npcs], f.clock)
        stats = model.coalescing_statistics()
        generations = f.admitted()[0] - 1
    assert all(isinstance(line, str) and line for line in lines)
    assert generations == 2 == stats.generations  # a batch of ten (a Nano phone's 256 tokens), then the 11th alone
    assert (stats.items, stats.batches, stats.answered, stats.retried_alone) == (11, 1, 10, 0)


async def test_barks_spread_over_a_farm_take_fewer_generations_than_barks() -> None:
    async with farm(phone(), phone(), phone(), config=PACED) as f:
        model = CoalescingModel(f.pool)
        for n in range(3):  # one warm-up per phone: every phone's next admission is a second away
            await generate(f.pool, ask(owner=f"warm-up{n}"))
        names = tuple(f"Villager{n}" for n in range(18))
        lines = await all_done([lambda npc=npc: said(npc.bark("Rain.")) for npc in crowd(model, names)], f.clock)
        generations = sum(f.admitted()) - 3
        stats = model.coalescing_statistics()
    assert all(lines) and len(lines) == 18
    assert generations == stats.generations <= 6 and stats.retried_alone == 0


async def test_decisions_on_the_pool_share_generations_and_choose_among_their_own_options() -> None:
    async with farm(phone(), config=PACED) as f:
        engine = DecisionEngine(CoalescingModel(f.pool))
        await generate(f.pool)
        options = [("attack", "flee"), ("hide", "shout"), ("trade", "steal"), ("wait", "leave")]
        requests = [DecisionRequest(situation="A stranger arrives.", options=[DecisionOption(i) for i in ids],
                                    actor=Persona(name=f"Goblin{n}")) for n, ids in enumerate(options)]
        decisions = await all_done([lambda r=r: engine.decide(r) for r in requests], f.clock)
        generations = f.admitted()[0] - 1
    assert [d.option_id in ids for d, ids in zip(decisions, options, strict=True)] == [True] * 4
    assert all(not d.is_fallback and 0 <= d.confidence <= 100 for d in decisions)
    assert generations == 1  # all four waited behind the warm-up: one batch


async def test_a_phone_with_a_short_output_limit_gets_no_batch_it_could_not_finish() -> None:
    # A phone that writes at most 60 tokens: the pool reports it, and no two answers fit.
    async with farm(phone(max_output_tokens=60), config=PACED) as f:
        model = CoalescingModel(f.pool)
        await generate(f.pool)
        await f.pool.probe()
        lines = await all_done([lambda npc=npc: said(npc.bark("Dawn.")) for npc in crowd(model, NAMES[:4])], f.clock)
        stats = model.coalescing_statistics()
    assert all(lines)
    assert model.capabilities.max_output_tokens == 60 and stats.batches == 0  # nothing fit two answers


# --- a proxy backend ----------------------------------------------------------------------------


def proxied(backends: ProxyBackends, server: ProviderServer, clock: ManualClock) -> CoalescingModel:
    config = ProxyConfig(provider=Provider.OPENAI, model="m1", base_url=server.url + "/v1")
    scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1, min_interval_seconds=1.0), clock=clock)
    return CoalescingModel(ScheduledModel(backends.model(config), scheduler))


def prompts(server: ProviderServer) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests]


async def test_barks_over_a_proxy_share_one_request_and_a_misattributed_line_is_asked_again() -> None:
    clock = ManualClock()
    with ProviderServer() as server:
        server.push(
            stream(openai_text("Fine morning.")),  # Gorm: quota free, alone
            stream(openai_text("1. Mira: Fresh bread!\n", "2. Tobin: Mira, your bread burns.\n",
                               "3. Elsa: Lovely day.")),  # the batch: Tobin's line names Mira
            stream(openai_text("My knees ache.")),  # Tobin alone
        )
        async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
            model = proxied(backends, server, clock)
            npcs = crowd(model, NAMES[:4])
            lines = await all_done([lambda npc=npc: said(npc.bark("Dawn.")) for npc in npcs], clock)
        sent = prompts(server)
    assert lines == ["Fine morning.", "Fresh bread!", "My knees ache.", "Lovely day."]
    assert len(sent) == 3 and "Character 3: Elsa" in sent[1] and "Character" not in sent[2]
    stats = model.coalescing_statistics()
    assert (stats.generations, stats.batches, stats.misattributed, stats.items_per_generation) == (3, 1, 1, 1.333)


async def test_decisions_over_a_proxy_return_the_decision_result() -> None:
    clock = ManualClock()
    with ProviderServer() as server:
        server.push(
            stream(openai_text('{"reasoning": "Cautious.", "choice": "flee", "confidence": 70}')),
            stream(openai_text("1. shout | 85 | Grak wants friends near.\n2. trade | 60 | Urd likes coin.")),
        )
        async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
            engine = DecisionEngine(proxied(backends, server, clock))
            requests = [DecisionRequest(situation="A stranger.", options=[DecisionOption(i) for i in ids],
                                        actor=Persona(name=name))
                        for name, ids in (("Snik", ("attack", "flee")), ("Grak", ("hide", "shout")),
                                          ("Urd", ("trade", "steal")))]
            decisions = await all_done([lambda r=r: engine.decide(r) for r in requests], clock)
        bodies = [r.body for r in server.requests]
    assert [msgspec.to_builtins(d.to_wire())["optionID"] for d in decisions] == ["flee", "shout", "trade"]
    assert [(d.reasoning, d.confidence) for d in decisions[1:]] == [("Grak wants friends near.", 85),
                                                                    ("Urd likes coin.", 60)]
    assert len(bodies) == 2 and "response_format" not in bodies[1]  # a batch is lines, not JSON
    assert json.loads(json.dumps(bodies[1]["messages"]))[0]["role"] == "system"



async def test_a_batch_on_the_pool_charges_every_member_in_the_pools_ledger() -> None:
    async with farm(phone(), config=PACED) as f:
        model = CoalescingModel(f.pool)
        await generate(f.pool, ask(owner="warm-up"))
        lines = await all_done([lambda npc=npc: said(npc.bark("Dawn.")) for npc in crowd(model, NAMES[:4])], f.clock)
        service = {name: f.pool.service(f"npc:{name}") for name in (*NAMES[:4], "Ulf")}
    assert all(lines) and f.admitted()[0] == 2  # the warm-up, then one batch of four
    assert service["Gorm"] == service["Mira"] == service["Tobin"] == service["Elsa"] > service["Ulf"]


async def test_a_batch_over_a_proxy_charges_every_member_in_its_scheduler() -> None:
    clock = ManualClock()
    with ProviderServer() as server:
        server.push(stream(openai_text("Fine morning.")),  # Gorm: quota free, alone
                    stream(openai_text("1. Mira: Fresh bread!\n2. Tobin: My knees ache.\n3. Elsa: Lovely day.")))
        async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
            model = proxied(backends, server, clock)
            lines = await all_done([lambda npc=npc: said(npc.bark("Dawn.")) for npc in crowd(model, NAMES[:4])], clock)
    scheduler = model.backend.scheduler
    service = {name: scheduler.service(f"npc:{name}") for name in (*NAMES[:4], "Ulf")}
    assert lines == ["Fine morning.", "Fresh bread!", "My knees ache.", "Lovely day."] and len(server.requests) == 2
    assert service["Mira"] == service["Tobin"] == service["Elsa"] > service["Ulf"]
