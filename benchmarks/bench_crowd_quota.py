"""Quota-first crowd benchmark: 1,000 NPCs on one world through the real bridge, over a farm of
simulated phones offered three times its quota.

Run: ``PYTHONPATH=. python3 benchmarks/bench_crowd_quota.py [--phones 8] [--npcs 1000]
[--seconds 60] [--load 3] [--time-scale 0.1] [--no-coalesce] [--linger S] [--reply-format text]``. Not a test.

Every NPC is created with ``npc/create`` on the world ``village`` and acts through the game
methods of an in-process bridge (the same one ``oam-actors stdio`` runs), whose system model is a
:class:`~oam_actors.models.pool.DevicePool` over simulated Pixels on loopback HTTP (36 generations
per rolling 60 phone seconds, ``--time-scale`` real seconds per phone second), coalesced as the
servers coalesce it (:class:`~oam_actors.models.coalesce.CoalescingModel` with the default
:class:`~oam_actors.models.coalesce.CoalesceSettings` in phone time, as ``--model farm:N`` has it:
barks and decisions linger a phone second while their steps queue; ``--linger S`` fixes their
linger at S phone seconds, 0 never, as ``--coalesce-linger`` does; ``--no-coalesce`` for an A/B). Each NPC paces its
own actions (never two outstanding) so that together they offer ``--load`` times the farm's quota
capacity in generations, drawn from 10% ``npc/talk``, 25% ``decision/decide`` (with a
``fallbackOptionID``) and 65% ``npc/bark``. Barks carry a ``deadlineSeconds`` of
``--bark-deadline`` phone seconds, decisions ``--decision-deadline``; talks have the server's
dialogue queue time; the NPCs' ``replyFormat`` is ``--reply-format`` (``text`` lets their plain replies
share generations too). A request not admitted in time degrades (a repeated bark, the fallback
option, a fallback line) or fails ``rate_limited`` where there is no fallback.

Printed (with the goals of issue 13):

- NPC actions answered by the model per generation (goal >= 3; a generation serves one action
  unless the model actor coalesces several into one), and the generations talks took (every
  dialogue-priority generation: decide steps, replies, reply batches) per talk;
- barks answered or degraded within their deadline (latency in phone seconds);
- player-dialogue (``npc/talk``) failures, goal 0; requests without a response, goal 0;
- Jain's index over NPCs of actions answered by the model (goal >= 0.95), and of actions answered
  at all (model or fallback); beside it the most any order of service could reach with that many
  actions answered (whole actions per NPC: with fewer than two an NPC, some get one and some two);
- quota utilisation: generations over the most the phones' limits allowed during the load, each
  phone admitting as early as its rolling window and its pacing (one a phone second) let it (goal
  >= 90%, while there is demand to spend it on: the goal is met too when the model answered every
  request, no demand left unserved, and the report says which). The earlier measure, a full window at the start and then the window's rate, is printed
  beside it: a paced phone takes 36 phone seconds to spend a window, so that bound is out of reach
  in a short run (about 81% of it is the most a 20-second run can use).

Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import random
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from oam_actors.bridge import Bridge
from oam_actors.game_methods import GameExtension
from oam_actors.models.coalesce import ADAPTIVE_LINGER, CoalesceSettings, CoalescingModel
from oam_actors.models.pool import NANO_QUOTA, DevicePool, SimulatedFarm, farm_phone_config, nano_limits, scaled_config
from oam_actors.runtime import LocalSystem
from oam_actors.client import Client, InProcessEndpoint, connect
from oam_actors.errors import OamError
from oam_actors.sim.stats import jain_index, percentile

MIX = ["talk"] * 2 + ["decide"] * 5 + ["bark"] * 13  # 10% / 25% / 65%, each NPC its own shuffle
SITUATIONS = ("A cart rattles past.", "It starts to rain.", "The church bell rings.", "A dog barks.")
OPTIONS = [{"id": "work", "description": "Get back to work."}, {"id": "rest", "description": "Take a break."}]
ROLES = ("the village blacksmith", "the innkeeper", "a gate guard", "the herbalist", "a merchant")


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)  # by the model
    degraded: Counter[str] = field(default_factory=Counter)
    failed: Counter[tuple[str, str]] = field(default_factory=Counter)
    served_by_npc: Counter[int] = field(default_factory=Counter)  # answered by the model
    answered_by_npc: Counter[int] = field(default_factory=Counter)  # by the model or a fallback
    bark_latency: list[float] = field(default_factory=list)  # real seconds, answered or degraded

    @property
    def responses(self) -> int:
        return sum(self.answered.values()) + sum(self.degraded.values()) + sum(self.failed.values())


def params_for(kind: str, npc: str, rng: random.Random, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    scale = args.time_scale
    if kind == "talk":
        return "npc/talk", {"npc": npc, "line": "Any news today?"}
    if kind == "decide":
        return "decision/decide", {"situation": rng.choice(SITUATIONS), "options": OPTIONS, "actor": npc,
                                   "fallbackOptionID": "work", "deadlineSeconds": args.decision_deadline * scale}
    return "npc/bark", {"npc": npc, "situation": rng.choice(SITUATIONS), "deadlineSeconds": args.bark_deadline * scale}


async def act(client: Client, index: int, kind: str, rng: random.Random, args: argparse.Namespace,
              tally: Tally) -> None:
    method, params = params_for(kind, f"villager{index}", rng, args)
    tally.sent[kind] += 1
    started = time.monotonic()
    try:
        result = await client.call(method, params)
    except OamError as error:
        tally.failed[(kind, error.code.wire)] += 1
        return
    if kind == "bark":
        tally.bark_latency.append(time.monotonic() - started)
    tally.answered_by_npc[index] += 1
    if result.get("degraded") is not None:
        tally.degraded[kind] += 1
    else:
        tally.answered[kind] += 1
        tally.served_by_npc[index] += 1


async def npc_loop(client: Client, index: int, period: float, until: float, rng: random.Random,
                   args: argparse.Namespace, tally: Tally) -> None:
    mix = MIX[:]
    rng.shuffle(mix)
    turn = rng.randrange(len(mix))
    at = time.monotonic() + rng.uniform(0, period)
    while True:
        await anyio.sleep(max(0.0, at - time.monotonic()))
        if time.monotonic() >= until:
            return
        await act(client, index, mix[turn % len(mix)], rng, args, tally)
        turn += 1
        at = max(at + period * rng.uniform(0.9, 1.1), time.monotonic())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    scale = args.time_scale
    limits = nano_limits(scale)
    capacity_rate = args.phones * NANO_QUOTA / limits.window_seconds  # generations per real second
    period = args.npcs / (args.load * capacity_rate)
    # Server deadlines in phone seconds: a player waits up to 20, decisions 30, barks 10.
    config = scaled_config(scale, queue_seconds=(20.0 * scale, 30.0 * scale, 10.0 * scale))
    # Generation is instant (as in bench_farm): the quota, not the phones' speed, is what binds.
    phone = farm_phone_config(scale, tokens_per_s=0.0, seed=args.seed)
    tally = Tally()
    rng = random.Random(args.seed)
    async with SimulatedFarm(args.phones, phone) as farm, DevicePool(farm.urls, config=config) as pool, \
            LocalSystem() as system:
        extension = GameExtension(max_npcs=args.npcs)
        # The server's default (models/setup.py): one coalescing model over the shared pool.
        linger = None if args.linger is None else args.linger * scale  # None: adaptive
        model = pool if args.no_coalesce else CoalescingModel(pool, CoalesceSettings(linger_seconds=linger,
                                                                                     time_scale=scale))
        make = lambda write: Bridge(system, write, system_model=lambda: model, extensions=[extension])  # noqa: E731
        async with connect(InProcessEndpoint(make)) as client:
            before, at_end = await drive(client, pool, period, args, tally, rng)
            after = pool.statistics_nowait()  # the requests in flight at the end have finished
    generations = at_end.steps_ok - before.steps_ok  # within the load
    # The earlier bound: a full window at the start of the load, then the window's rate.
    windows = args.seconds / limits.window_seconds + 1
    burst = sum((d.requests_limit or NANO_QUOTA) for d in after.devices) * windows
    allowed = sum(most_admissions(args.seconds, limits.window_seconds, d.requests_limit or NANO_QUOTA,
                                  limits.min_interval_seconds) for d in after.devices)
    dialogue = after.queue_wait["dialogue"].count - before.queue_wait["dialogue"].count
    return {"tally": tally, "generations": after.steps_ok - before.steps_ok, "allowed": allowed, "burst": burst,
            "dialogue_generations": dialogue,
            "generations_in_load": generations, "offered_rate": args.npcs / period,
            "capacity_rate": capacity_rate, "stats": after,
            "coalescing": model.coalescing_statistics() if isinstance(model, CoalescingModel) else None}


async def drive(client: Client, pool: DevicePool, period: float, args: argparse.Namespace, tally: Tally,
                rng: random.Random) -> tuple[Any, Any]:
    """Create the world and the NPCs (``replyFormat`` ``args.reply_format``), then let them act
    for ``args.seconds``; the pool's statistics before the load and at its end."""
    await client.call("world/create", {"world": "village", "state": {"time": "morning"}})
    for n in range(args.npcs):
        persona = {"name": f"Villager {n}", "role": ROLES[n % len(ROLES)], "personality": "Friendly."}
        await client.call("npc/create", {"npc": f"villager{n}", "persona": persona, "world": "village",
                                         "options": {"replyFormat": args.reply_format}})
    before = pool.statistics_nowait()
    until = time.monotonic() + args.seconds
    during: list[Any] = []

    async def at_the_end() -> None:
        await anyio.sleep(args.seconds)
        during.append(pool.statistics_nowait())

    async with anyio.create_task_group() as group:
        group.start_soon(at_the_end)
        for n in range(args.npcs):
            group.start_soon(npc_loop, client, n, period, until, random.Random(rng.random()), args, tally)
    return before, during[0]


def most_admissions(seconds: float, window: float, limit: int, interval: float) -> int:
    """Admissions one phone allows in ``seconds``, each as early as its rolling window of ``limit``
    per ``window`` and its ``interval`` between admissions let it (greedy is optimal here)."""
    starts: deque[float] = deque()
    at, count = 0.0, 0
    while at < seconds:
        while starts and starts[0] + window <= at:
            starts.popleft()
        if len(starts) < limit:
            starts.append(at)
            count += 1
            at += interval
        else:
            at = max(at, starts[0] + window)
    return count


def best_jain(served: int, npcs: int) -> float:
    """Jain's index of ``served`` whole actions spread as evenly as possible over ``npcs``."""
    each, more = divmod(served, npcs)
    squares = more * (each + 1) ** 2 + (npcs - more) * each**2
    return served * served / (npcs * squares) if squares else 1.0


def report(args: argparse.Namespace, result: dict[str, Any]) -> bool:
    tally: Tally = result["tally"]
    scale = args.time_scale
    generations = result["generations"]
    served = sum(tally.answered.values())
    npc_served = [tally.served_by_npc[n] for n in range(args.npcs)]
    npc_answered = [tally.answered_by_npc[n] for n in range(args.npcs)]
    per_generation = served / generations if generations else 0.0
    latency = sorted(s / scale for s in tally.bark_latency)  # phone seconds
    within = sum(1 for s in latency if s <= args.bark_deadline * 1.1) / len(latency) if latency else 1.0
    talk_failures = sum(n for (kind, _), n in tally.failed.items() if kind == "talk")
    missing = sum(tally.sent.values()) - tally.responses
    jain_served = jain_index(npc_served) or 0.0
    jain_answered = jain_index(npc_answered) or 0.0
    utilisation = result["generations_in_load"] / result["allowed"] if result["allowed"] else 0.0
    of_burst = result["generations_in_load"] / result["burst"] if result["burst"] else 0.0
    linger = (f"linger {ADAPTIVE_LINGER:g} phone s while they queue" if args.linger is None
              else f"linger {args.linger:g} phone s")
    print(f"\n[{args.phones} phones, {args.npcs} NPCs, {args.seconds:g} s of load at time scale {scale:g}; "
          f"offered {result['offered_rate']:.0f} requests/s against {result['capacity_rate']:.1f} generations/s "
          f"({args.load:g}x); barks and decisions {linger}, dialogue 0]")
    for kind in ("talk", "decide", "bark"):
        failed = {code: n for (k, code), n in tally.failed.items() if k == kind}
        print(f"  {kind:<7} sent {tally.sent[kind]:6d}  answered by the model {tally.answered[kind]:6d}  "
              f"degraded {tally.degraded[kind]:6d}  failed {sum(failed.values()):5d} {failed or ''}")
    print(f"  generations {generations}; NPC actions answered by the model per generation "
          f"{per_generation:.2f}   (goal >= 3)")
    talks = tally.answered["talk"] + tally.degraded["talk"]
    print(f"  generations for talks {result['dialogue_generations']} ({result['dialogue_generations'] / (talks or 1):.2f} "
          f"per talk, replyFormat {args.reply_format})")
    if latency:
        print(f"  bark latency (answered or degraded): p50 {percentile(latency, 50):.1f}, p99 "
              f"{percentile(latency, 99):.1f}, max {latency[-1]:.1f} phone s; within the {args.bark_deadline:g} s "
              f"deadline (+10%): {within:.1%}")
    print(f"  player-dialogue failures {talk_failures}   (goal 0); requests without a response {missing}   (goal 0)")
    print(f"  Jain's index over NPCs: actions answered by the model {jain_served:.4f}   (goal >= 0.95; at most "
          f"{best_jain(served, args.npcs):.4f} for {served} actions over {args.npcs} NPCs); "
          f"answered at all {jain_answered:.4f}")
    unserved = sum(tally.sent.values()) - served  # degraded, failed or without a response
    quota_met = utilisation >= 0.9 or unserved == 0
    why = ("met: at least 90%" if utilisation >= 0.9 else "met: the model answered every request, no demand left "
           "to spend the rest on" if quota_met else f"missed: under 90% with {unserved} requests not answered by the model")
    print(f"  quota utilisation {utilisation:.1%} of what the phones' windows and pacing allowed   (goal >= 90% "
          f"while demand is left: {why}); {of_burst:.1%} of a full window at the start plus the window's rate")
    if result["coalescing"] is not None:
        c = result["coalescing"]
        print(f"  coalescing: {c.items} items in {c.generations} generations ({c.items_per_generation:.2f} per "
              f"generation), {c.lingered} lingered, {c.batches} batches, {c.retried_alone} retried alone, {c.failed} failed, "
              f"{c.passthrough} passthrough")
    print("  devices: " + ", ".join(f"{d.name} {d.ok} ok / {d.busy} busy" for d in result["stats"].devices))
    return (per_generation >= 3 and within >= 0.99 and talk_failures == 0 and missing == 0
            and jain_served >= 0.95 and quota_met)


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The farm, the crowd and its load (shared with ``bench_routing.py``)."""
    parser.add_argument("--phones", type=int, default=8)
    parser.add_argument("--npcs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="real seconds of load")
    parser.add_argument("--load", type=float, default=3.0, help="offered requests over the farm's generation capacity")
    parser.add_argument("--time-scale", type=float, default=0.1, help="real seconds per phone second")
    parser.add_argument("--bark-deadline", type=float, default=10.0, help="phone seconds")
    parser.add_argument("--decision-deadline", type=float, default=30.0, help="phone seconds")
    parser.add_argument("--seed", type=int, default=1)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    parser.add_argument("--no-coalesce", action="store_true", help="the pool alone, each action its own generation")
    parser.add_argument("--linger", type=float, default=None, metavar="S",
                        help="phone seconds a new batch of barks or decisions always waits for company, 0 never "
                        f"(default: the servers' adaptive linger, {ADAPTIVE_LINGER:g} phone s while their steps queue)")
    parser.add_argument("--reply-format", choices=("automatic", "structured", "text"), default="automatic",
                        help="the NPCs' replyFormat (text: their replies may be coalesced)")
    args = parser.parse_args()
    ok = report(args, anyio.run(run, args))
    print("\nall goals met" if ok else "\nGOALS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
