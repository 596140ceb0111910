"""Routing benchmark: phones first, cloud when it must. 1,000 NPCs through the real bridge over a
routed system model: a farm of simulated phones offered three times its quota, and a fake paid
provider on loopback (rate-limited, with a price and a spend cap) behind it for player dialogue.

Run: ``PYTHONPATH=. python3 benchmarks/bench_routing.py [--phones 8] [--npcs 1000] [--seconds 60]
[--load 3] [--time-scale 0.1] [--cap 200] [--mix 25,25,50] [--spill 0.25]``. Not a test.

The system model is what ``oam-actors serve --routes FILE`` builds from this route table (farm and
provider built by :func:`~oam_actors.models.setup.create_model_setup`)::

    spill = 0.25                                      (--spill)
    [backends.phones]  model = "farm:8"
    [backends.cloud]   model = "openai:http://127.0.0.1:PORT/v1#paid", rpm, price, cap = {hour = CAP}
    [routes]           dialogue = ["phones", "cloud"], decision = ["phones"], background = ["phones"]

The NPCs act as in ``bench_crowd_quota.py``, each pacing its own actions so that together they
offer ``--load`` times the farm's quota capacity, but with more talk: 25% ``npc/talk``, 25%
``decision/decide``, 50% ``npc/bark`` (``--mix``). With ``bench_crowd_quota``'s 10/25/65 the
phones admit every dialogue step within its spill deadline (dialogue goes first), so nothing
spills and the cloud tier has nothing to do; at 25% talk, dialogue alone outgrows the farm.
Deadlines are 20 (dialogue), 30 (decisions) and 10 (barks) phone seconds.
The provider (``tests/provider_servers.py``'s ``WindowedProvider``, answering as the simulated
phones do) allows ``--cloud-limit`` requests a second and reports usage (42 tokens in, 7 out).

Printed, with the goals of issue 34, for the routed run and the same run without the cloud tier:
player-dialogue (``npc/talk``) degraded and failed (goal 0 with the cloud), the farm's quota use
and decode time (goal >= 95 % for one of them), cloud spend against its cap (goal: never above)
and that it went only to steps the phones did not admit by their spill deadline (every cloud step
was a dialogue step the phones passed on), and the share of steps per backend.
Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio

from oam_actors.bridge import Bridge
from oam_actors.game_methods import GameExtension
from oam_actors.models.coalesce import CoalesceSettings
from oam_actors.models.device.responder import respond
from oam_actors.models.pool import NANO_QUOTA, nano_limits
from oam_actors.models.routing import parse_routes
from oam_actors.models.setup import ModelConfig, create_model_setup
from oam_actors.runtime import LocalSystem
from oam_actors.client import InProcessEndpoint, connect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import bench_crowd_quota  # noqa: E402
from bench_crowd_quota import Tally, add_load_arguments, drive, most_admissions  # noqa: E402
from provider_servers import Recorded, Reply, WindowedProvider, openai_text  # noqa: E402

PRICE = {"request": 0.0005, "input_per_1k": 0.15, "output_per_1k": 0.6}


class PaidProvider(WindowedProvider):
    """The windowed provider answering each prompt as a simulated phone would (so every step
    kind gets an answer its agent can use)."""

    def __init__(self, limit: int, window: float, seed: int) -> None:
        super().__init__(limit, window)
        self._rng = random.Random(seed)

    def next_reply(self, recorded: Recorded) -> Reply:
        reply = super().next_reply(recorded)
        if reply.status != 200:
            return reply
        messages = recorded.body["messages"]
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        with self._lock:
            text = respond(system, messages[-1]["content"], self._rng)
        return Reply(200, reply.headers, [openai_text(text)])


def route_table(args: argparse.Namespace, cloud_url: str | None) -> Any:
    backends: dict[str, Any] = {"phones": {"model": f"farm:{args.phones}"}}
    dialogue = ["phones"]
    if cloud_url is not None:
        backends["cloud"] = {"model": f"openai:{cloud_url}/v1#paid", "rpm": int(args.cloud_limit * 60 * 0.95),
                             "price": PRICE, "cap": {"hour": args.cap}, "reserve_output_tokens": 256}
        dialogue.append("cloud")
    return parse_routes({"spill": args.spill, "backends": backends,
                         "routes": {"dialogue": dialogue, "decision": ["phones"], "background": ["phones"]}},
                        "bench")


async def run(args: argparse.Namespace, cloud_url: str | None) -> dict[str, Any]:
    scale = args.time_scale
    limits = nano_limits(scale)
    capacity_rate = args.phones * NANO_QUOTA / limits.window_seconds  # generations per real second
    period = args.npcs / (args.load * capacity_rate)
    config = ModelConfig(routes=route_table(args, cloud_url), farm_time_scale=scale,
                         queue_seconds=(20.0 * scale, 30.0 * scale, 10.0 * scale),
                         coalesce=CoalesceSettings(time_scale=scale))
    setup = create_model_setup(config)
    router = setup.router
    assert router is not None and setup.system_model is not None
    tally = Tally()
    rng = random.Random(args.seed)
    async with setup.backends, setup.resources, LocalSystem() as system:
        pool = setup.routed_pools[0].model()
        extension = GameExtension(max_npcs=args.npcs)
        make = lambda write: Bridge(system, write, system_model=setup.system_model, extensions=[extension])  # noqa: E731
        async with connect(InProcessEndpoint(make)) as client:
            before, load = await drive(client, pool, period, args, tally, rng)
        routing = router.statistics_nowait()
    allowed = sum(most_admissions(args.seconds, limits.window_seconds, d.requests_limit or NANO_QUOTA,
                                  limits.min_interval_seconds) for d in load.devices)
    generating = sum(d.utilisation for d in load.devices) / len(load.devices)
    return {"tally": tally, "routing": routing, "quota_use": (load.steps_ok - before.steps_ok) / allowed,
            "generating": generating, "offered_rate": args.npcs / period, "capacity_rate": capacity_rate}


def report(label: str, args: argparse.Namespace, result: dict[str, Any], provider: PaidProvider | None) -> bool:
    tally: Tally = result["tally"]
    routing = result["routing"]
    talk_failed = sum(n for (kind, _), n in tally.failed.items() if kind == "talk")
    print(f"\n[{label}: {args.phones} phones, {args.npcs} NPCs, {args.seconds:g} s at time scale {args.time_scale:g}, "
          f"spill {args.spill:g}; "
          f"offered {result['offered_rate']:.0f} requests/s against {result['capacity_rate']:.1f} generations/s "
          f"({args.load:g}x)]")
    for kind in ("talk", "decide", "bark"):
        failed = sum(n for (k, _), n in tally.failed.items() if k == kind)
        print(f"  {kind:<7} sent {tally.sent[kind]:6d}  answered by a model {tally.answered[kind]:6d}  "
              f"degraded {tally.degraded[kind]:6d}  failed {failed:5d}")
    print(f"  player dialogue (npc/talk): degraded {tally.degraded['talk']}, failed {talk_failed}")
    farm_ok = max(result["quota_use"], result["generating"]) >= 0.95
    print(f"  farm: quota used {result['quota_use']:.1%} of what its windows and pacing allowed, decoding "
          f"{result['generating']:.1%} of the time   (goal >= 95% for one: {'met' if farm_ok else 'missed'})")
    served = sum(b.served for b in routing.backends) or 1
    print("  steps per backend: " + ", ".join(f"{b.name} {b.served} ({b.served / served:.1%})"
                                              for b in routing.backends)
          + f"; taken by no backend {routing.unrouted}")
    backends = {b.name: b for b in routing.backends}
    ok = farm_ok
    if "cloud" in backends:
        cloud, phones = backends["cloud"], backends["phones"]
        kinds = {(s.priority, s.kind): s.served for s in routing.steps if s.backend == "cloud"}
        only_spilled = set(p for p, _ in kinds) <= {"dialogue"} and cloud.served <= phones.spilled
        within = cloud.spend <= args.cap + 1e-9
        print(f"  cloud: spend {cloud.spend:.4f} of a {args.cap:g}/hour cap ({'within' if within else 'ABOVE'}); "
              f"{cloud.served} steps, all dialogue the phones passed on ({phones.spilled} passed on): "
              f"{'yes' if only_spilled else 'NO'}; {cloud.capped} kept back by the cap; by kind "
              + ", ".join(f"{k} {n}" for (_, k), n in sorted(kinds.items())))
        if provider is not None:
            print(f"  provider: {sum(provider.accepted.values())} requests answered, {sum(provider.refused.values())} "
                  f"refused 429")
        ok = ok and within and only_spilled and tally.degraded["talk"] == 0 and talk_failed == 0
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)  # --seconds: of each run
    parser.add_argument("--cloud-limit", type=int, default=40, help="requests a second the provider allows")
    parser.add_argument("--cap", type=float, default=200.0, help="the cloud's spend cap per hour")
    parser.add_argument("--spill", type=float, default=0.25,
                        help="the route table's spill share (default 0.25: a talk's steps share its deadline, so "
                        "each is held on the phones for a quarter of what is left)")
    parser.add_argument("--mix", default="25,25,50", metavar="TALK,DECIDE,BARK",
                        help="percent of the NPCs' actions that are talks, decisions and barks (default 25,25,50)")
    args = parser.parse_args()
    talk, decide, bark = (int(share) for share in args.mix.split(","))
    bench_crowd_quota.MIX = ["talk"] * talk + ["decide"] * decide + ["bark"] * bark  # each NPC shuffles its own
    args.reply_format = "automatic"
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    with PaidProvider(args.cloud_limit, 1.0, args.seed) as provider:
        routed = anyio.run(run, args, provider.url)
    alone = anyio.run(run, args, None)
    ok = report("phones, then the cloud", args, routed, provider)
    report("phones only (no cloud tier)", args, alone, None)
    talk = lambda r: r["tally"].degraded["talk"] + sum(n for (k, _), n in r["tally"].failed.items() if k == "talk")  # noqa: E731
    print(f"\nplayer dialogue degraded or failed: {talk(routed)} with the cloud tier, {talk(alone)} without")
    print("\nall goals met" if ok else "\nGOALS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
