"""Conversations among NPCs on a farm: 1,000 NPCs in 250 ambient conversations of 4, with player
talks and barks beside them, through the real bridge, over simulated phones offered beyond their
quota.

Run: ``PYTHONPATH=. python3 benchmarks/bench_conversations.py [--phones 8] [--npcs 1000]
[--size 4] [--seconds 60] [--time-scale 0.1] [--players 40] [--repeat 1]``. Not a test.

Two runs of ``--seconds`` each (``--repeat`` pairs of them, alternating, their figures pooled: a
p99 of a few hundred talks is the third-worst of them, and moves by a third between runs) on a fresh farm (``farm:N`` as the servers build it: a device pool
of simulated Pixels, coalesced): with the ambient conversations (``roundRobin``, each advanced
one line after another, ``--line-pause`` phone seconds apart (the time to say a line), with a
``deadlineSeconds`` of ``--line-deadline`` phone seconds: together far more lines than the farm
can generate), and
without them, the same player talks and barks in both. ``--players`` players each talk to a
random NPC (``npc/talk``), then think ``--think`` phone seconds; every NPC barks every
``--bark-period`` phone seconds (deadline 10 phone s).

Printed (with the goals of issue 32):

- conversation lines answered by the model per generation that answered conversation lines
  (goal >= 4), counted at the backend: a generation is a conversation one when it is a batch of
  conversation lines or one line asked alone;
- output tokens those generations wrote per delivered line, over the line's own tokens (goal
  <= 1.3x: no verbose wrappers);
- player dialogue (``npc/talk``) p99 latency with conversations over without (goal <= 1.2x);
- lines attributed to the wrong speaker: a speaker not the member whose turn it was, or a line
  that speaks as another member (goal 0);
- Jain's index over NPCs of their actions answered by the model: conversation lines, talks and
  barks (goal >= 0.95; with ``--repeat``, the median of the runs'). Fairness counts all of an
  NPC's actions (docs/conversations.md): an NPC the players talk to says fewer ambient lines.
  Jain over the lines alone is printed beside it.

Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import logging
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from oam_actors.agent.model import DelegatingModel, GenerationRequest, Usage, estimate_tokens
from oam_actors.bridge import Bridge
from oam_actors.game.conversation import check_line
from oam_actors.game_methods import GameExtension
from oam_actors.models.coalesce import LINE_TASK, CoalesceSettings, CoalescingModel
from oam_actors.models.pool import DevicePool, SimulatedFarm, farm_phone_config, scaled_config
from oam_actors.runtime import LocalSystem
from oam_actors.client import Client, InProcessEndpoint, connect
from oam_actors.errors import OamError
from oam_actors.sim.stats import jain_index, percentile

ROLES = ("the village blacksmith", "the innkeeper", "a gate guard", "the herbalist", "a merchant")
SETTINGS = ("Gossip by the well.", "A quarrel about grain prices.", "Waiting out the rain.")
_ALONE_LINE = "Say your next line as"  # game.conversation.line_prompt


def conversation_step(request: GenerationRequest) -> bool:
    """A batch of conversation lines, or one line asked alone."""
    return request.prompt.endswith(LINE_TASK) or _ALONE_LINE in request.prompt


class Meter(DelegatingModel):
    """The pool, counting the generations that answered conversation lines and what they wrote."""

    def __init__(self, pool: DevicePool) -> None:
        super().__init__(pool)
        self.pool = pool
        self.generations = 0
        self.output_tokens = 0

    def service(self, owner: str) -> float:
        return self.pool.service(owner)

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        return self._metered(self.pool.stream(request), lambda: request)

    def stream_when_admitted(self, request: GenerationRequest, build: Callable[[], GenerationRequest],
                             seat: Any) -> AsyncIterator[str | Usage]:
        built: list[GenerationRequest] = []

        def metered_build() -> GenerationRequest:
            built.append(build())
            return built[-1]

        return self._metered(self.pool.stream_when_admitted(request, metered_build, seat),
                             lambda: built[-1] if built else request)

    async def _metered(self, pieces: AsyncIterator[str | Usage],
                       request: Callable[[], GenerationRequest]) -> AsyncIterator[str | Usage]:
        text: list[str] = []
        async for piece in pieces:
            if isinstance(piece, str):
                text.append(piece)
            yield piece
        if conversation_step(request()):
            self.generations += 1
            self.output_tokens += estimate_tokens("".join(text))


@dataclass
class Tally:
    lines: int = 0  # answered by the model
    degraded: Counter[str] = field(default_factory=Counter)  # by reason: deadline, preempted
    fallback: int = 0
    # Characters, not tokens rounded up line by line (which would add half a token a line to
    # what the output is measured against): the output is counted on whole generations.
    line_chars: int = 0  # the delivered lines' own
    answer_chars: int = 0  # what each line's step alone writes: "[emotion] line"
    wrong_speaker: int = 0
    conversation_errors: Counter[str] = field(default_factory=Counter)
    lines_by_npc: Counter[str] = field(default_factory=Counter)  # answered by the model
    spoken_by_npc: Counter[str] = field(default_factory=Counter)  # lines at all: the model's or a fallback
    actions_by_npc: Counter[str] = field(default_factory=Counter)  # lines, talks and barks answered by the model
    talk_latency: list[float] = field(default_factory=list)
    talk_errors: Counter[str] = field(default_factory=Counter)
    barks: int = 0
    dialogue_wait: list[Any] = field(default_factory=list)  # the pool's queue wait of dialogue steps, each run's
    loop_lag: list[float] = field(default_factory=list)  # how late a 10 ms sleep wakes: the event loop's load


def pooled(tallies: list[Tally]) -> Tally:
    """The figures of several runs together."""
    total = Tally()
    for tally in tallies:
        for name, value in vars(tally).items():
            mine = getattr(total, name)
            if isinstance(value, Counter):
                mine.update(value)
            elif isinstance(value, list):
                mine.extend(value)
            else:
                setattr(total, name, mine + value)
    return total


async def converse(client: Client, conversation: str, members: list[tuple[str, str]], until: float,
                   args: argparse.Namespace, tally: Tally) -> None:
    turn = 0
    pause = args.line_pause * args.time_scale
    await anyio.sleep(random.Random(conversation).uniform(0, pause))  # not all in step
    while time.monotonic() < until:
        expected = members[turn % len(members)]
        try:
            result = await client.call("conversation/advance", {
                "conversation": conversation, "deadlineSeconds": args.line_deadline * args.time_scale})
        except OamError as error:
            tally.conversation_errors[error.code.wire] += 1
            await anyio.sleep(pause)
            continue
        for line in result["lines"]:
            turn += 1
            tally.spoken_by_npc[line["speaker"]] += 1
            others = [name for npc, name in members if npc != line["speaker"]]
            if line["speaker"] != expected[0] or check_line(line["line"], line["name"], others) != line["line"]:
                tally.wrong_speaker += 1
            if line.get("degraded") is not None:
                tally.degraded[line["degraded"]] += 1
            elif line["isFallback"]:
                tally.fallback += 1
            else:
                tally.lines += 1
                tally.line_chars += len(line["line"])
                tally.answer_chars += len(f"[{line['emotion']}] {line['line']}")
                tally.lines_by_npc[line["speaker"]] += 1
                tally.actions_by_npc[line["speaker"]] += 1
        await anyio.sleep(pause)  # the line is said (shown, spoken) before the next is asked for


async def player(client: Client, npcs: int, until: float, rng: random.Random, args: argparse.Namespace,
                 tally: Tally) -> None:
    await anyio.sleep(rng.uniform(0, args.think * args.time_scale))
    while time.monotonic() < until:
        started = time.monotonic()
        npc = f"villager{rng.randrange(npcs)}"
        try:
            result = await client.call("npc/talk", {"npc": npc, "line": "Any news today?"})
            tally.talk_latency.append(time.monotonic() - started)
            if not result.get("isFallback"):
                tally.actions_by_npc[npc] += 1
        except OamError as error:
            tally.talk_errors[error.code.wire] += 1
        await anyio.sleep(rng.expovariate(1 / (args.think * args.time_scale)))


async def barker(client: Client, npc: str, until: float, rng: random.Random, args: argparse.Namespace,
                 tally: Tally) -> None:
    period = args.bark_period * args.time_scale
    await anyio.sleep(rng.uniform(0, period))
    while time.monotonic() < until:
        try:
            result = await client.call("npc/bark", {"npc": npc, "situation": "A cart rattles past.",
                                                       "deadlineSeconds": 10 * args.time_scale})
            tally.barks += 1
            if not result.get("isFallback"):
                tally.actions_by_npc[npc] += 1
        except OamError:
            pass
        await anyio.sleep(period * rng.uniform(0.9, 1.1))


async def lag(until: float, tally: Tally) -> None:
    while time.monotonic() < until:
        started = time.monotonic()
        await anyio.sleep(0.01)
        tally.loop_lag.append(time.monotonic() - started - 0.01)


async def run(args: argparse.Namespace, conversations: bool) -> tuple[Tally, Meter]:
    scale = args.time_scale
    config = scaled_config(scale, queue_seconds=(20.0 * scale, 30.0 * scale, 10.0 * scale))
    phone = farm_phone_config(scale, tokens_per_s=0.0, seed=args.seed)
    tally = Tally()
    rng = random.Random(args.seed)
    groups = args.npcs // args.size if conversations else 0
    async with SimulatedFarm(args.phones, phone) as farm, DevicePool(farm.urls, config=config) as pool, \
            LocalSystem() as system:
        meter = Meter(pool)
        model = CoalescingModel(meter, CoalesceSettings(time_scale=scale))
        extension = GameExtension(max_npcs=args.npcs, max_conversations=max(1, groups))
        make = lambda write: Bridge(system, write, system_model=lambda: model, extensions=[extension])  # noqa: E731
        async with connect(InProcessEndpoint(make), timeout=None) as client:
            await client.call("world/create", {"world": "village"})
            names = []
            for n in range(args.npcs):
                names.append(f"Villager {n}")
                await client.call("npc/create", {"npc": f"villager{n}", "world": "village", "persona": {
                    "name": names[-1], "role": ROLES[n % len(ROLES)], "personality": "Friendly, a little gossipy."}})
            members = [[(f"villager{n}", names[n]) for n in range(g * args.size, (g + 1) * args.size)]
                       for g in range(groups)]
            for g, group in enumerate(members):
                await client.call("conversation/create", {
                    "conversation": f"c{g}", "world": "village", "members": [npc for npc, _ in group],
                    "situation": SETTINGS[g % len(SETTINGS)], "lineBudget": 10_000})
            until = time.monotonic() + args.seconds
            async with anyio.create_task_group() as group_tasks:
                group_tasks.start_soon(lag, until, tally)
                for g, group in enumerate(members):
                    group_tasks.start_soon(converse, client, f"c{g}", group, until, args, tally)
                for p in range(args.players):
                    group_tasks.start_soon(player, client, args.npcs, until, random.Random(rng.random()), args, tally)
                for n in range(args.npcs):
                    group_tasks.start_soon(barker, client, f"villager{n}", until, random.Random(rng.random()), args,
                                           tally)
        tally.dialogue_wait.append(pool.statistics_nowait().queue_wait["dialogue"])
    return tally, meter


def report(args: argparse.Namespace, runs: list[Tally], generations: int, output_tokens: int,
           without: Tally) -> bool:
    """The figures of ``runs`` (with conversations) pooled, Jain's index each run's, their median."""
    t = pooled(runs)
    per_generation = t.lines / generations if generations else 0.0
    line_tokens, answer_tokens = t.line_chars / 4, t.answer_chars / 4  # estimate_tokens' four characters a token
    tokens_ratio = output_tokens / line_tokens if line_tokens else 0.0
    p99_with = percentile(sorted(t.talk_latency), 99) if t.talk_latency else 0.0
    p99_without = percentile(sorted(without.talk_latency), 99) if without.talk_latency else 0.0
    dialogue_ratio = p99_with / p99_without if p99_without else 0.0
    groups = args.npcs // args.size
    jain, jain_spoken, jain_actions = (statistics.median(
        jain_index([getattr(run, counts)[f"villager{n}"] for n in range(groups * args.size)]) or 0.0 for run in runs)
        for counts in ("lines_by_npc", "spoken_by_npc", "actions_by_npc"))
    print(f"\n[{args.phones} phones, {args.npcs} NPCs in {groups} conversations of {args.size}, {args.players} players, "
          f"barks every {args.bark_period:g} phone s; {args.seconds:g} s at time scale {args.time_scale:g}"
          f"{f'; {args.repeat} pairs of runs, pooled' if args.repeat > 1 else ''}]")
    print(f"  conversation lines: answered by the model {t.lines}, degraded {dict(t.degraded)}, other fallback "
          f"{t.fallback}, failed requests {sum(t.conversation_errors.values())} {dict(t.conversation_errors) or ''}")
    print(f"  conversation lines per generation {per_generation:.2f} ({generations} generations)   (goal >= 4)")
    print(f"  output tokens per delivered line {output_tokens / max(1, t.lines):.1f}, the line's own "
          f"{line_tokens / max(1, t.lines):.1f}: {tokens_ratio:.2f}x   (goal <= 1.3x); over what the line's "
          f"step alone writes ([emotion] line, {answer_tokens / max(1, t.lines):.1f}): "
          f"{output_tokens / max(1.0, answer_tokens):.2f}x")
    print(f"  player dialogue p99 {p99_with * 1000:.0f} ms with conversations, {p99_without * 1000:.0f} ms without: "
          f"{dialogue_ratio:.2f}x   (goal <= 1.2x); talks {len(t.talk_latency)} / {len(without.talk_latency)}, "
          f"failed {sum(t.talk_errors.values())} / {sum(without.talk_errors.values())}")
    waits = lambda tally: ", ".join(f"{w.p99_ms:.0f}" for w in tally.dialogue_wait)  # noqa: E731
    print(f"  dialogue steps' wait for quota, p99 of each run: {waits(t)} ms with conversations, {waits(without)} ms "
          f"without")
    print(f"  event loop lag p50 / p99: {percentile(sorted(t.loop_lag), 50) * 1000:.0f} / "
          f"{percentile(sorted(t.loop_lag), 99) * 1000:.0f} ms with conversations, "
          f"{percentile(sorted(without.loop_lag), 50) * 1000:.0f} / {percentile(sorted(without.loop_lag), 99) * 1000:.0f} "
          f"ms without (one process: bridge, pool and phones share it)")
    print(f"  lines attributed to the wrong speaker {t.wrong_speaker}   (goal 0)")
    print(f"  Jain's index over NPCs of actions answered by the model (lines, talks, barks) {jain_actions:.4f}   "
          f"(goal >= 0.95); of lines answered by the model {jain:.4f}, of lines spoken at all (the model's or a "
          f"fallback) {jain_spoken:.4f}")
    print(f"  barks answered {t.barks} / {without.barks} (with / without conversations)")
    return (per_generation >= 4 and 0 < tokens_ratio <= 1.3 and dialogue_ratio <= 1.2 and t.wrong_speaker == 0
            and jain_actions >= 0.95)


def main() -> int:
    # An NPC's background compaction that finds no quota in time is logged with its traceback:
    # expected on a farm offered beyond its quota, and not what this benchmark measures.
    logging.getLogger("oam_actors.game.npc").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--phones", type=int, default=8)
    parser.add_argument("--npcs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=4, help="members per conversation")
    parser.add_argument("--seconds", type=float, default=60.0, help="real seconds of load, each run")
    parser.add_argument("--time-scale", type=float, default=0.1, help="real seconds per phone second")
    parser.add_argument("--players", type=int, default=40)
    parser.add_argument("--think", type=float, default=10.0, help="a player's mean pause, phone seconds")
    parser.add_argument("--bark-period", type=float, default=300.0, help="phone seconds between an NPC's barks")
    parser.add_argument("--line-pause", type=float, default=3.0,
                        help="phone seconds a conversation waits after a line before asking for the next")
    parser.add_argument("--line-deadline", type=float, default=20.0, help="a line's deadlineSeconds, phone seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="pairs of runs (with, without; the next seed each pair), their figures pooled")
    args = parser.parse_args()
    withs, withouts, generations, output_tokens = [], [], 0, 0
    for k in range(args.repeat):
        pair = argparse.Namespace(**{**vars(args), "seed": args.seed + k})  # the same players and barks in both
        tally, meter = anyio.run(run, pair, True)
        withs.append(tally)
        generations, output_tokens = generations + meter.generations, output_tokens + meter.output_tokens
        withouts.append(anyio.run(run, pair, False)[0])
    ok = report(args, withs, generations, output_tokens, pooled(withouts))
    print("\nall goals met" if ok else "\nGOALS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
