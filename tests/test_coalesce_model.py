"""CoalescingModel in front of one scheduled backend, on a virtual clock: batches form only from
steps already waiting, are bounded, and a batch that answers badly or fails costs the affected
items one attempt alone each, never a wrong answer for another NPC. Cancellation and the opt-out.

The backend is the project's scripted model behind a real QuotaScheduler that admits one step
per virtual second: after a warm-up step every step queues, and ``clock.advance(1.0)`` lets the
next one start. Its answers are a function of the request (a batch, or one step alone)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from oam_actors import (
    GenerationRequest,
    ModelCapabilities,
    ScriptStep,
    ScriptStyle,
    ScriptedModel,
    StepKind,
    Usage,
)
from oam_actors.clock import Budget
from oam_actors.errors import AgentError, DeadlinePassed, ErrorCode
from oam_actors.game import NPC, BarkLine, DecisionEngine, DecisionOption, DecisionRequest, Persona
from oam_actors.agent.model import BarkItem
from oam_actors.models.coalesce import BARK_TASK, DECISION_TASK, CoalesceSettings, CoalescingModel
from oam_actors.models.pool import ScheduledModel
from oam_actors.models.scheduler import ManualClock, QuotaLimits, QuotaScheduler

GUARD = 20.0
NAMES = ("Gorm", "Mira", "Tobin", "Elsa", "Brann", "Hild", "Ulf")
_CHARACTER = re.compile(r"^Character (\d+): (.+)$", re.MULTILINE)
_DECISION = re.compile(r"^Decision (\d+), for (\w+)", re.MULTILINE)


def speakers(request: GenerationRequest) -> list[str]:
    return [name for _, name in _CHARACTER.findall(request.prompt)]


def good_barks(request: GenerationRequest) -> str:
    return "\n".join(f"{n}. {name}: {name} says hello." for n, name in enumerate(speakers(request), 1))


def alone_line(request: GenerationRequest) -> str:
    """A step run on its own: the bark's own line, or a decision's JSON."""
    if request.kind is StepKind.STRUCTURED:
        return json.dumps({"reasoning": "Alone.", "choice": "flee", "confidence": 60})
    name = re.match(r"You play (\w+)", request.system)
    return f"{name.group(1) if name else '?'} alone."


class Rig:
    """A scripted backend behind a paced scheduler, and the coalescing model over it."""

    def __init__(self, batch: Callable[[GenerationRequest], str | ScriptStep] = good_barks, *,
                 settings: CoalesceSettings | None = None, capabilities: ModelCapabilities | None = None) -> None:
        self.clock = ManualClock()
        self.batch_answer = batch

        def answer(request: GenerationRequest) -> ScriptStep:
            if request.owner == "warm-up":
                return ScriptStep.say("warm")
            if request.kind is StepKind.TEXT:
                made = self.batch_answer(request)
                return made if isinstance(made, ScriptStep) else ScriptStep.say(made)
            return ScriptStep.say(alone_line(request))

        self.backend = ScriptedModel(style=ScriptStyle.ENVELOPE, fallback=ScriptStep.from_function(answer),
                                     capabilities=capabilities)
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1, min_interval_seconds=1.0), clock=self.clock)
        self.model = CoalescingModel(ScheduledModel(self.backend, scheduler), settings, clock=self.clock)

    @property
    def batches(self) -> list[GenerationRequest]:
        return [r for r in self.backend.requests if r.kind is StepKind.TEXT and r.owner != "warm-up"]

    @property
    def alone(self) -> list[GenerationRequest]:
        return [r for r in self.backend.requests if r.kind is not StepKind.TEXT and r.owner != "warm-up"]

    async def warm_up(self) -> None:
        """One plain step: the scheduler's next admission is one virtual second away."""
        request = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="warm up", owner="warm-up")
        async for _ in self.model.stream(request):
            pass

    async def run(self, jobs: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        return await run_jobs(jobs, self.clock)


async def run_jobs(jobs: list[Callable[[], Awaitable[Any]]], clock: ManualClock, *,
                   settle: Callable[[], Awaitable[None]] | None = None) -> list[Any]:
    """Start every job (each queues before the next starts), then let one step start per
    virtual second until all are done; returns results (or errors) in job order. ``settle``
    waits for work outside this process (a reply on its way over loopback)."""
    results: list[Any] = [None] * len(jobs)

    async def run_one(index: int) -> None:
        try:
            results[index] = await jobs[index]()
        except AgentError as error:
            results[index] = error

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            for index in range(len(jobs)):
                group.start_soon(run_one, index)
                await anyio.wait_all_tasks_blocked()
            while any(r is None for r in results):
                clock.advance(1.0)
                await anyio.wait_all_tasks_blocked()
                if settle is not None:
                    await settle()
    return results


def crowd(model: Any, names: tuple[str, ...] = NAMES) -> list[NPC]:
    return [NPC(Persona(name=name, role="a villager"), model, owner=f"npc:{name}") for name in names]


async def said(bark: Awaitable[BarkLine]) -> str:
    return (await bark).line


def barking(npcs: list[NPC], **kwargs: Any) -> list[Callable[[], Awaitable[str]]]:
    return [lambda npc=npc: said(npc.bark("Dawn in the square.", **kwargs)) for npc in npcs]


async def test_barks_waiting_together_share_one_generation_and_each_gets_its_own_line() -> None:
    rig = Rig()
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model, NAMES[:5])))
    assert lines == [f"{name} says hello." for name in NAMES[:5]]
    assert [speakers(b) for b in rig.batches] == [list(NAMES[:5])] and rig.alone == []
    stats = rig.model.coalescing_statistics()
    assert (stats.items, stats.generations, stats.batches, stats.answered, stats.items_per_generation) == (5, 1, 1, 5, 5.0)


async def test_with_free_quota_a_bark_runs_at_once_as_its_own_request() -> None:
    rig = Rig()
    [npc] = crowd(rig.model, ("Gorm",))
    with anyio.fail_after(GUARD):
        assert (await npc.bark("Dawn.")).line == "Gorm alone."  # the clock never moved: no added delay
    [request] = rig.backend.requests
    assert request.kind is StepKind.RESPOND and request.item is not None and request.item.speaker == "Gorm"
    assert rig.model.coalescing_statistics().batches == 0


async def test_batches_are_bounded_by_the_batch_size() -> None:
    rig = Rig(settings=CoalesceSettings(max_items=3, linger_seconds=0.0))
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model)))
    assert lines == [f"{n} says hello." if i < 6 else f"{n} alone." for i, n in enumerate(NAMES)]
    assert [len(speakers(b)) for b in rig.batches] == [3, 3] and len(rig.alone) == 1  # the 7th led alone


async def test_batches_are_bounded_by_the_backends_context() -> None:
    rig = Rig(capabilities=ModelCapabilities(context_size=380, max_output_tokens=4096))
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model, NAMES[:6])))
    sizes = [len(speakers(b)) for b in rig.batches]
    assert all(line.startswith(name) for line, name in zip(lines, NAMES, strict=False))
    assert 1 < max(sizes) < 6 and sum(sizes) + len(rig.alone) == 6
    assert all(len(b.system + b.prompt) // 4 + (b.max_output_tokens or 0) <= 380 for b in rig.batches)


async def test_linger_lets_a_batch_wait_for_company_when_quota_is_free() -> None:
    rig = Rig(settings=CoalesceSettings(linger_seconds=0.5))
    lines = await rig.run(barking(crowd(rig.model, NAMES[:3])))  # no warm-up: quota is free
    assert lines == [f"{n} says hello." for n in NAMES[:3]] and len(rig.batches) == 1


async def test_a_players_dialogue_lingers_only_with_its_own_setting() -> None:
    def dialogue_bark(rig: Rig, name: str) -> Callable[[], Awaitable[str]]:
        request = GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt="Say something.",
                                    owner=f"npc:{name}", priority="dialogue", item=BarkItem(speaker=name))

        async def job() -> str:
            return "".join([p async for p in rig.model.stream(request) if isinstance(p, str)])
        return job

    npc_work = Rig(settings=CoalesceSettings(linger_seconds=0.5))  # barks and decisions linger
    assert await npc_work.run([dialogue_bark(npc_work, n) for n in NAMES[:2]]) == ["Gorm alone.", "Mira alone."]
    assert not npc_work.batches  # quota free: the first went at once, the second queued behind it alone
    both = Rig(settings=CoalesceSettings(linger_seconds=0.5, dialogue_linger_seconds=0.5))
    assert await both.run([dialogue_bark(both, n) for n in NAMES[:2]]) == ["Gorm says hello.", "Mira says hello."]
    assert len(both.batches) == 1 and speakers(both.batches[0]) == ["Gorm", "Mira"]
    with pytest.raises(ValueError, match="dialogue_linger_seconds"):
        CoalesceSettings(dialogue_linger_seconds=float("nan"))


def priority_bark(rig: Rig, name: str, priority: str) -> Callable[[], Awaitable[str]]:
    """A bark-like item at ``priority`` (``dialogue``: as a player's talk steps are)."""
    request = GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt="Say something.",
                                owner=f"npc:{name}", priority=priority, item=BarkItem(speaker=name))

    async def job() -> str:
        return "".join([p async for p in rig.model.stream(request) if isinstance(p, str)])
    return job


async def settled(rig: Rig, job: Callable[[], Awaitable[str]], group: anyio.abc.TaskGroup) -> list[str]:
    """Start ``job``; the list holds its line once it is done (the clock does not move)."""
    done: list[str] = []

    async def run() -> None:
        done.append(await job())
    group.start_soon(run)
    await anyio.wait_all_tasks_blocked()
    return done


async def test_the_adaptive_linger_gathers_company_only_after_steps_had_to_queue() -> None:
    rig = Rig()  # the default: adaptive, one backend second (the clock's: time scale 1)
    gorm, mira, tobin, elsa, brann, hild, ulf = crowd(rig.model)
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            assert await settled(rig, barking([gorm])[0], group) == ["Gorm alone."]  # free: at once, alone
            # Four barks queue behind it (one admission a second): Mira's admission takes the others.
            assert await run_jobs(barking([mira, tobin, elsa, brann]), rig.clock) == [
                f"{n} says hello." for n in ("Mira", "Tobin", "Elsa", "Brann")]
            rig.clock.advance(1.0)  # the next admission is free again, but steps just queued
            sent = len(rig.backend.requests)
            hild_said = await settled(rig, barking([hild])[0], group)
            assert not hild_said and len(rig.backend.requests) == sent  # Hild lingers for company
            rig.clock.advance(0.5)
            ulf_said = await settled(rig, barking([ulf])[0], group)
            rig.clock.advance(0.5)  # Hild's linger ends: admitted at once, she takes Ulf along
            await anyio.wait_all_tasks_blocked()
            assert (hild_said, ulf_said) == (["Hild says hello."], ["Ulf says hello."])
            assert speakers(rig.batches[-1]) == ["Hild", "Ulf"]
            # Idle: the share of steps that queued fades, but quota spent in the last half window
            # (30 backend seconds) is not back yet: a new NPC's first bark still lingers.
            rig.clock.advance(15.0)
            ida, jon = crowd(rig.model, ("Ida", "Jon"))
            ida_said = await settled(rig, barking([ida])[0], group)
            assert not ida_said
            rig.clock.advance(1.0)
            await anyio.wait_all_tasks_blocked()
            assert ida_said == ["Ida alone."]
            rig.clock.advance(30.0)  # half a window without steps queueing: free capacity
            assert await settled(rig, barking([jon])[0], group) == ["Jon alone."]
    assert rig.model.coalescing_statistics().lingered == 3


async def test_a_fixed_linger_of_zero_turns_the_adaptive_one_off() -> None:
    rig = Rig(settings=CoalesceSettings(linger_seconds=0.0))
    gorm, mira, tobin, elsa, brann = crowd(rig.model, NAMES[:5])
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            assert await settled(rig, barking([gorm])[0], group) == ["Gorm alone."]
            await run_jobs(barking([mira, tobin, elsa]), rig.clock)
            rig.clock.advance(1.0)
            assert await settled(rig, barking([brann])[0], group) == ["Brann alone."]  # queued or not: no linger
    assert rig.model.coalescing_statistics().lingered == 0


async def test_a_players_dialogue_never_lingers_even_while_dialogue_queues() -> None:
    rig = Rig()
    await rig.warm_up()
    lines = await rig.run([priority_bark(rig, name, "dialogue") for name in NAMES[:4]])
    assert lines == [f"{n} says hello." for n in NAMES[:4]]  # they queued: one batch took them
    rig.clock.advance(1.0)
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            assert await settled(rig, priority_bark(rig, "Hild", "dialogue"), group) == ["Hild alone."]
    assert rig.model.coalescing_statistics().lingered == 0


# --- bad batch output: one extra attempt per affected item ------------------------------------------


async def test_a_garbage_batch_answer_runs_each_item_alone() -> None:
    rig = Rig(lambda request: '[{"line": "Steel today.", "by": Gorm')
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model, NAMES[:4])))
    assert lines == [f"{n} alone." for n in NAMES[:4]]
    assert len(rig.batches) == 1 and len(rig.alone) == 4
    stats = rig.model.coalescing_statistics()
    assert (stats.generations, stats.missing, stats.retried_alone) == (5, 4, 4)
    assert all(r.follow_up for r in rig.alone)  # each NPC was charged for its bark once, by the batch
    assert stats.served == 4 and stats.items_per_generation == 0.8


async def test_a_cut_off_batch_answer_runs_the_items_it_lost_alone() -> None:
    def cut(request: GenerationRequest) -> str:
        return "1. Gorm: Steel today.\n2. Mira: " + "Fresh bread, " * 200  # far over its limit

    rig = Rig(cut)
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model, NAMES[:3])))
    assert lines == ["Steel today.", "Mira alone.", "Tobin alone."]
    assert rig.model.coalescing_statistics().missing == 2


async def test_ten_barks_cut_off_at_a_nano_phones_output_limit_lose_only_the_lines_it_cut() -> None:
    # Lines of ~30 tokens where packing counts fewer: the phone stops the answer at its 256
    # tokens (~4 characters a token), inside the ninth line.
    def long_lines(request: GenerationRequest) -> str:
        assert request.max_output_tokens == 256  # more than ten estimates, within the phone's limit
        text = "\n".join(f"{n}. {name}: {name} says the morning is long and the road is longer still, friend, so mind the deep puddles by the mill."
                         for n, name in enumerate(speakers(request), 1))
        return text[: request.max_output_tokens * 4]

    rig = Rig(long_lines, capabilities=ModelCapabilities(context_size=4000, max_output_tokens=256))
    await rig.warm_up()
    names = tuple(f"Villager{n}" for n in range(10))
    lines = await rig.run(barking(crowd(rig.model, names)))
    assert [len(speakers(b)) for b in rig.batches] == [10]
    assert lines == [f"{n} says the morning is long and the road is longer still, friend, so mind the deep puddles by the mill." for n in names[:8]] + [
        f"{n} alone." for n in names[8:]]
    stats = rig.model.coalescing_statistics()
    assert (stats.answered, stats.missing, stats.retried_alone, stats.invalid) == (8, 2, 2, 0)


async def test_a_mixed_up_batch_never_gives_one_npc_anothers_line() -> None:
    def swapped(request: GenerationRequest) -> str:
        return "1. Mira: Fresh bread!\n2. Gorm: Steel today.\n3. Tobin: Gorm, Mira, good morning.\n4. Elsa: Nice day."

    rig = Rig(swapped)
    await rig.warm_up()
    lines = await rig.run(barking(crowd(rig.model, NAMES[:4])))
    assert lines == ["Gorm alone.", "Mira alone.", "Tobin alone.", "Nice day."]
    stats = rig.model.coalescing_statistics()
    assert (stats.misattributed, stats.answered, stats.retried_alone, stats.generations) == (3, 1, 3, 4)


async def test_an_item_invalid_alone_too_gets_its_usual_failure() -> None:
    def empty_for_mira(request: GenerationRequest) -> str:
        return "1. Gorm: Steel today.\n2. Mira: \"\""

    rig = Rig(empty_for_mira)
    rig.backend.fallback = ScriptStep.from_function(
        lambda r: ScriptStep.say(empty_for_mira(r) if r.kind is StepKind.TEXT else ("" if "Mira" in r.system else "x")))
    await rig.warm_up()
    gorm, mira = await rig.run(barking(crowd(rig.model, NAMES[:2])))
    assert gorm == "Steel today."
    assert isinstance(mira, AgentError) and mira.code is ErrorCode.GENERATION_FAILED  # as alone: no neighbour's line


async def batch_step_errors(rig: Rig, count: int) -> list[Any]:
    """``count`` bark steps sent to the model directly (no agent retries)."""
    requests = [msgspec_bark(name) for name in NAMES[:count]]

    async def one(request: GenerationRequest) -> str:
        return "".join([p async for p in rig.model.stream(request) if not isinstance(p, Usage)])

    return await rig.run([lambda r=r: one(r) for r in requests])


def msgspec_bark(name: str) -> GenerationRequest:
    from oam_actors.agent.model import BarkItem

    return GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt="Situation: dawn.",
                             priority="background", owner=f"npc:{name}", item=BarkItem(speaker=name))


async def test_a_batch_failing_for_quota_gives_every_item_the_error() -> None:
    rig = Rig(lambda request: ScriptStep.fail(ErrorCode.RATE_LIMITED, "Slow down."))
    await rig.warm_up()
    results = await batch_step_errors(rig, 3)
    assert [(type(r), getattr(r, "code", None)) for r in results] == [(AgentError, ErrorCode.RATE_LIMITED)] * 3
    assert len(rig.batches) == 1 and rig.alone == []  # each item's own step retry decides what next
    assert rig.model.coalescing_statistics().failed == 3


async def test_a_batch_refused_for_its_content_runs_each_item_alone() -> None:
    rig = Rig(lambda request: ScriptStep.fail(ErrorCode.GUARDRAIL_VIOLATION, "Blocked."))
    await rig.warm_up()
    results = await batch_step_errors(rig, 3)
    assert results == [f"{n} alone." for n in NAMES[:3]]
    assert len(rig.batches) == 1 and len(rig.alone) == 3


# --- decisions ---------------------------------------------------------------------------------------


def decide(engine: DecisionEngine, actor: str, ids: tuple[str, ...], **fields: Any) -> Callable[[], Awaitable[Any]]:
    request = DecisionRequest(situation="A goblin blocks the road.", options=[DecisionOption(i) for i in ids],
                              actor=Persona(name=actor), **fields)
    return lambda: engine.decide(request)


def decision_lines(request: GenerationRequest) -> str:
    if BARK_TASK in request.prompt or DECISION_TASK not in request.prompt:
        return "?"
    lines = []
    for number, actor in _DECISION.findall(request.prompt):
        choice = {"Snik": "flee", "Grak": "shout", "Urd": "hide"}.get(actor, "attack")
        lines.append(f"{number}. {choice} | 80 | {actor} thinks so.")
    return "\n".join(lines)


async def three_decisions(rig: Rig, urd: tuple[str, ...]) -> list[Any]:
    engine = DecisionEngine(rig.model)
    await rig.warm_up()
    return await rig.run([decide(engine, "Snik", ("attack", "flee")), decide(engine, "Grak", ("hide", "shout")),
                          decide(engine, "Urd", urd)])


async def test_tool_free_decisions_share_a_generation_and_keep_their_own_options() -> None:
    rig = Rig(decision_lines)
    results = await three_decisions(rig, ("attack", "flee"))  # the batch says "hide": not Urd's, alone
    assert [(d.option_id, d.reasoning, d.confidence) for d in results[:2]] == [
        ("flee", "Snik thinks so.", 80), ("shout", "Grak thinks so.", 80)]
    assert (results[2].option_id, results[2].reasoning) == ("flee", "Alone.")
    assert len(rig.batches) == 1 and len(rig.alone) == 1


async def test_a_decision_that_cannot_be_combined_runs_alone() -> None:
    rig = Rig(decision_lines)
    results = await three_decisions(rig, ("run away", "flee"))  # an option id with a space
    assert [d.option_id for d in results] == ["flee", "shout", "flee"]
    assert [re.findall(r"for (\w+)", b.prompt) for b in rig.batches] == [["Snik", "Grak"]]
    assert rig.model.coalescing_statistics().passthrough == 2  # Urd's decision and the warm-up


# --- opting out and cancelling --------------------------------------------------------------------------


async def test_a_bark_that_opts_out_runs_alone_even_under_pressure() -> None:
    rig = Rig()
    await rig.warm_up()
    npcs = crowd(rig.model, NAMES[:3])
    lines = await rig.run([*barking(npcs[:2]), lambda: said(npcs[2].bark("Dawn.", coalesce=False))])
    assert lines == ["Gorm says hello.", "Mira says hello.", "Tobin alone."]
    assert [speakers(b) for b in rig.batches] == [["Gorm", "Mira"]]
    assert [r.item for r in rig.alone] == [None]


@pytest.mark.parametrize("who", ["follower", "leader"])
async def test_a_cancelled_waiting_bark_leaves_its_batch_and_every_other_gets_its_line(who: str) -> None:
    rig = Rig()
    await rig.warm_up()
    npcs = crowd(rig.model, NAMES[:4])
    lines: dict[str, str] = {}
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            scopes = []
            for npc in npcs:
                scope = anyio.CancelScope()
                scopes.append(scope)

                async def bark(npc: NPC = npc, scope: anyio.CancelScope = scope) -> None:
                    with scope:
                        lines[npc.persona.name] = (await npc.bark("Dawn.")).line

                group.start_soon(bark)
                await anyio.wait_all_tasks_blocked()
            scopes[0 if who == "leader" else 2].cancel()  # Gorm led (queued first); Tobin followed
            await anyio.wait_all_tasks_blocked()
            while len(lines) < 3:
                rig.clock.advance(1.0)
                await anyio.wait_all_tasks_blocked()
    left = "Gorm" if who == "leader" else "Tobin"
    assert lines == {n: f"{n} says hello." for n in NAMES[:4] if n != left}
    assert [speakers(b) for b in rig.batches] == [[n for n in NAMES[:4] if n != left]]


async def test_a_leader_cancelled_mid_batch_hands_its_followers_to_the_next_batch() -> None:
    first = []

    def slow_first(request: GenerationRequest) -> str | ScriptStep:
        first.append(request)  # batches only: the rig answers the warm-up itself
        return ScriptStep.say(good_barks(request), delay_ms=60_000) if len(first) == 1 else good_barks(request)

    rig = Rig(slow_first)
    await rig.warm_up()
    npcs = crowd(rig.model, NAMES[:3])
    lines: dict[str, str] = {}
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            leader = anyio.CancelScope()

            async def lead() -> None:
                with leader:
                    lines["Gorm"] = (await npcs[0].bark("Dawn.")).line

            group.start_soon(lead)
            await anyio.wait_all_tasks_blocked()
            for npc in npcs[1:]:
                group.start_soon(lambda npc=npc: _store(lines, npc))
                await anyio.wait_all_tasks_blocked()
            rig.clock.advance(1.0)
            await anyio.wait_all_tasks_blocked()
            assert len(first) == 1  # the batch of three is generating (slowly)
            leader.cancel()
            while len(lines) < 2:
                rig.clock.advance(1.0)
                await anyio.wait_all_tasks_blocked()
    assert lines == {"Mira": "Mira says hello.", "Tobin": "Tobin says hello."}
    assert [speakers(b) for b in rig.batches] == [["Gorm", "Mira", "Tobin"], ["Mira", "Tobin"]]


async def _store(lines: dict[str, str], npc: NPC) -> None:
    lines[npc.persona.name] = (await npc.bark("Dawn.")).line


async def test_a_waiting_bark_whose_deadline_passes_leaves_the_line_and_degrades_as_alone() -> None:
    rig = Rig()
    await rig.warm_up()
    gorm, mira, tobin = crowd(rig.model, NAMES[:3])
    results: dict[str, Any] = {}

    async def bark(npc: NPC, **kwargs: Any) -> None:
        try:
            results[npc.persona.name] = (await npc.bark("Dawn.", **kwargs)).line
        except AgentError as error:
            results[npc.persona.name] = error

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as group:
            for npc, kwargs in ((gorm, {}), (mira, {"budget": Budget(rig.clock, 0.5)}), (tobin, {})):
                group.start_soon(lambda npc=npc, kwargs=kwargs: bark(npc, **kwargs))
                await anyio.wait_all_tasks_blocked()
            rig.clock.advance(0.5)  # Mira's deadline: she has no earlier bark to repeat
            await anyio.wait_all_tasks_blocked()
            assert isinstance(results.get("Mira"), DeadlinePassed)
            while len(results) < 3:
                rig.clock.advance(1.0)
                await anyio.wait_all_tasks_blocked()
    assert (results["Gorm"], results["Tobin"]) == ("Gorm says hello.", "Tobin says hello.")
    assert [speakers(b) for b in rig.batches] == [["Gorm", "Tobin"]]


async def test_items_per_generation_counts_only_the_items_a_generation_answered() -> None:
    # Gorm's and Mira's barks expire in the queue; Tobin's and Elsa's share one generation.
    rig = Rig()
    await rig.warm_up()
    npcs = crowd(rig.model, NAMES[:4])
    results = await rig.run([*barking(npcs[:2], budget=Budget(rig.clock, 0.5)), *barking(npcs[2:])])
    assert [type(r) for r in results[:2]] == [DeadlinePassed] * 2 and results[2:] == ["Tobin says hello.", "Elsa says hello."]
    stats = rig.model.coalescing_statistics()
    assert (stats.items, stats.generations, stats.served, stats.items_per_generation) == (4, 1, 2, 2.0)


# --- fairness: every member queues on its own ticket, is charged, the least served go first ------


async def test_a_batch_charges_every_member_and_the_next_takes_the_least_served_first() -> None:
    rig = Rig(settings=CoalesceSettings(max_items=3, linger_seconds=0.0))
    scheduler = rig.model.backend.scheduler
    await rig.warm_up()
    await rig.run(barking(crowd(rig.model, NAMES[:3])))  # Gorm is admitted, Mira and Tobin ride along
    service = {name: scheduler.service(f"npc:{name}") for name in NAMES}
    assert service["Gorm"] == service["Mira"] == service["Tobin"] > service["Elsa"]  # each served once
    # Six wait now, three a batch. Elsa, unserved, is admitted first and takes the unserved
    # before the served ones.
    await rig.run(barking(crowd(rig.model, NAMES[:6])))
    assert [speakers(b) for b in rig.batches[1:]] == [["Elsa", "Brann", "Hild"], ["Gorm", "Mira", "Tobin"]]
    stats = scheduler.statistics()
    assert (stats.admitted, stats.taken) == (4, 6)  # the warm-up and three batches; six items rode along


async def test_each_member_queues_on_its_own_ticket_so_the_least_served_brings_its_batch_forward() -> None:
    # Gorm had two steps and Hild one. Then Gorm's bark comes, Hild's step, and the barks of Mira
    # and Tobin, never served. Mira's own ticket is the first the scheduler admits: her batch
    # takes Tobin's and Gorm's items out of their queues, all before Hild's step (with one ticket
    # per batch, the batch waited at Gorm's place, behind Hild).
    rig = Rig(settings=CoalesceSettings(max_items=3, linger_seconds=0.0))
    gorm, mira, tobin = crowd(rig.model, ("Gorm", "Mira", "Tobin"))
    await rig.warm_up()

    def step(owner: str) -> Callable[[], Awaitable[str]]:
        async def run() -> str:
            request = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="A step.", owner=f"npc:{owner}",
                                        priority="decision")
            return "".join([p async for p in rig.model.stream(request) if isinstance(p, str)])
        return run

    for owner in ("Gorm", "Gorm", "Hild"):
        await rig.run([step(owner)])
    before = len(rig.backend.requests)
    await rig.run([*barking([gorm]), step("Hild"), *barking([mira, tobin])])
    order = rig.backend.requests[before:]
    assert [speakers(r) if r.kind is StepKind.TEXT else r.owner for r in order] == [
        ["Mira", "Gorm", "Tobin"], "npc:Hild"]  # Mira leads; the others in the order they came
