"""LocalSystem against RaySystem (1 and 2 shards), and against one Ray actor per object.

1. Crowd: N NPCs on 8 shared worlds, each talking T times (a world read as grounding, then a
   reply), all busy at once, through an in-process bridge; turns per second per runtime, with the
   CPU seconds per turn of the driver, of the shards and of the rest of the machine (other
   users' load), all over the burst of turns alone (creating the crowd is not counted). After one uncounted warm-up round each,
   the runtimes take turns for ``--rounds`` rounds (the order rotating each round), each round a
   fresh system doing the same work; the medians are reported, and the scaling is the median of
   the rounds' 2-vs-1 ratios (printed with LocalSystem's spread over the rounds: the machine's own
   drift, which a single round's ratio moves with). Goal: 2 shards at least 1.85x 1 shard. The ceiling printed next to
   it is what the CPU per turn allows on this machine's cores: the driver (bridge, and this
   benchmark's client) shares them with the shards, so 1 shard already has a core of its own
   while 2 shards and the driver share two; a second ceiling counts only the cores other load
   left. On 2 cores 1.85x needs the driver's CPU per turn at most 8% of the shards' and the shards'
   CPU per turn no higher at 2 shards than at 1; the table says why the ceiling is what it is.
2. Turn latency: one session, one turn at a time, plain and with one client tool round; p50 / p99
   per runtime and what the Ray boundary adds at p50 (Ray p50 - Local p50), the runtimes taking
   turns in ``--rounds`` blocks of ``--latency-turns`` turns each (samples pooled). Goal: under 0.5 ms plain.
3. Per message across the boundary: an echo actor asked one message at a time (round trip) and
   pipelined (asks per second), LocalSystem against RaySystem.
4. Naive baseline: one Ray actor per object (what placement in shards avoids): time and memory to
   create N of them (sessions with one tool), and their turns per second, each turn a Ray call.

Run: ``python3 benchmarks/bench_cluster.py [--npcs 96] [--turns 1920] [--rounds 5] [--naive 8]
[--profile PATH]``. Starts a private local Ray instance (2 CPUs). Not a test: it prints a table and
a JSON line. On a shared machine the crowd figures move with other load: the load average is
printed with them. Goals: 2 shards at least 1.85x one; the boundary under 0.5 ms per plain turn at
p50. ``--profile`` writes a cProfile of this process (the driver: bridge, client and the links'
ends of the boundary) and prints its top entries; the shards' CPU per turn is in the table.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import ray
from anyio.abc import TaskGroup

from _profiling import print_top, profiled
from oam_actors.bridge import Bridge, BridgeConfig
from oam_actors.cluster import LOCAL_RAY_OPTIONS, RaySystem
from oam_actors.game_methods import GameExtension
from oam_actors.runtime import Actor, ActorSystem, Address, LocalSystem

class _Line(msgspec.Struct):
    """What the client reads of a line: the rest (events, results) is left undecoded, so the
    client, which shares the driver's process and cores, costs that process little."""

    id: Any = None
    method: str | None = None
    result: msgspec.Raw = msgspec.Raw()  # empty: the line has none


_encode = msgspec.json.encode
_decode_line = msgspec.json.Decoder(_Line).decode

TOOL = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
SCRIPT_TURN = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]


class Client:
    """A client in this process: hands requests to the bridge a burst at a time (as a transport
    does with a chunk of lines), answers each tool/call at once from a task of its own (as a game
    engine would, without holding up the bridge's output), and times every request."""

    def __init__(self, bridge: Callable[[Callable[[bytes], Awaitable[None]]], Bridge], tasks: TaskGroup) -> None:
        self.bridge = bridge(self.write)
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []
        self.expected = 0
        self.done = anyio.Event()
        self._ids = 0
        self._tasks = tasks

    async def write(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            message = _decode_line(line)
            if message.method == "tool/call":
                reply = b'{"jsonrpc":"2.0","id":"%s","result":{"output":{"opened":true}}}' % str(message.id).encode()
                self._tasks.start_soon(self.bridge.receive, reply)
            elif message.method is None:
                assert len(message.result) > 0, line
                self.latencies.append(time.perf_counter() - self.sent.pop(message.id))
                if len(self.latencies) == self.expected:
                    self.done.set()

    async def run(self, requests: list[tuple[str, dict[str, Any]]]) -> float:
        """Send every request (pipelined); seconds until the last answer."""
        self.expected, self.done, self.latencies = len(requests), anyio.Event(), []
        started = time.perf_counter()
        for method, params in requests:
            self._ids += 1
            self.sent[self._ids] = time.perf_counter()
            await self.bridge.receive(_encode({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}))
        await self.done.wait()
        return time.perf_counter() - started


async def with_bridge(make_system: Callable[[], ActorSystem], body: Callable[[Client], Any]) -> Any:
    async with make_system() as system, anyio.create_task_group() as tasks:
        game = GameExtension(max_npcs=100_000, max_worlds=1000)
        config = BridgeConfig(max_sessions=100_000)
        client = Client(lambda write: Bridge(system, write, config=config, extensions=[game]), tasks)
        async with client.bridge:
            return await body(client)


async def crowd_round(make_system: Callable[[], ActorSystem], npcs: int, turns: int) -> dict[str, float]:
    """Turns per second, and CPU ms per turn of this process, of the shard processes and of
    everything else on the machine (other users' load), over the burst of turns only."""

    async def measured(client: Client) -> dict[str, float]:
        system = client.bridge.system
        shards = [shard.pid for shard in await system.shard_info()] if isinstance(system, RaySystem) else []

        async def metered(burst: Awaitable[float]) -> dict[str, float]:
            before = [_cpu_seconds(pid) for pid in shards]
            machine, driver = _machine_busy_seconds(), time.process_time()
            rate = await burst
            driver_cpu = time.process_time() - driver
            shard_cpu = sum(_cpu_seconds(pid) - start for pid, start in zip(shards, before, strict=True))
            others = max(0.0, _machine_busy_seconds() - machine - driver_cpu - shard_cpu)
            per_turn = 1000 / (npcs * max(1, turns // npcs))
            return {"turns_per_s": rate, "driver_ms": driver_cpu * per_turn, "shards_ms": shard_cpu * per_turn,
                    "others_ms": others * per_turn}

        return await crowd(npcs, turns, metered)(client)

    return await with_bridge(make_system, measured)


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every core; Linux /proc/stat: all but idle
    and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


REPLY = {"json": {"emotion": "neutral", "line": "Aye, the gate is open and the market is busy today.",
                  "player_options": ["Thanks.", "Where is the inn?"], "ends_conversation": False}}
GROUNDING = {"toolCalls": [{"name": "read_world_state", "arguments": {"path": "town"}}]}
PERSONA = {"name": "Guard", "role": "gate guard", "personality": "gruff but fair",
           "backstory": "Has guarded the north gate for twenty years and knows every merchant by name.",
           "goals": ["keep the peace"], "speechStyle": "short sentences"}
TOWN = {"town": {"gate": "open", "market": "busy", "weather": "rain", "mayor": "Odo"}}
WORLDS = 8


def crowd(npcs: int, turns: int, metered: Callable[[Awaitable[float]], Awaitable[Any]] | None = None
          ) -> Callable[[Client], Any]:
    """The crowd's body: create the worlds and NPCs, then the burst of talks (turns per second);
    ``metered`` wraps the burst alone (what it measures excludes creating the crowd)."""
    per_npc = max(1, turns // npcs)

    async def talks(client: Client) -> float:
        requests = [("npc/talk", {"npc": f"n{i}", "line": "Is the gate open?"}) for _ in range(per_npc) for i in range(npcs)]
        return len(requests) / await client.run(requests)

    async def body(client: Client) -> Any:
        await client.run([("world/create", {"world": f"w{k}", "state": TOWN}) for k in range(WORLDS)])
        await client.run([
            ("npc/create", {"npc": f"n{i}", "world": f"w{i % WORLDS}", "persona": PERSONA,
                            "options": {"groundingTool": "read_world_state"},
                            "model": {"type": "scripted", "steps": [GROUNDING, REPLY] * per_npc}})
            for i in range(npcs)
        ])
        return await (talks(client) if metered is None else metered(talks(client)))

    return body


def latency(turns: int, *, tools: bool) -> Callable[[Client], Any]:
    """Seconds per turn of one session, one turn at a time (after 20 warm-up turns); with
    ``tools`` each turn also has a client tool round (a second crossing each way)."""
    steps = SCRIPT_TURN if tools else [{"text": "The gate is open."}]

    async def body(client: Client) -> list[float]:
        model = {"type": "scripted", "steps": steps * (turns + 20)}
        await client.run([("session/create", {"session": "solo", "tools": [TOOL], "model": model})])
        samples: list[float] = []
        for n in range(turns + 20):
            await client.run([("session/respond", {"session": "solo", "prompt": "Open the gate."})])
            if n >= 20:
                samples.extend(client.latencies)
        return samples

    return body


class Echo(Actor):
    async def handle(self, message: Any) -> Any:
        return message


async def per_message(make_system: Callable[[], ActorSystem], asks: int) -> tuple[float, float]:
    """(p50 round trip in ms, pipelined asks per second) for one echo actor."""
    async with make_system() as system:
        ref = system.spawn(Address("echo", "e"), Echo, max_queue=asks)
        samples = []
        for n in range(asks // 10 + 20):
            started = time.perf_counter()
            await ref.ask(n)
            samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        replies = [ref.ask_nowait(n) for n in range(asks)]
        for reply in replies:
            await reply.wait()
        return statistics.median(samples[20:]) * 1000, asks / (time.perf_counter() - started)


@ray.remote(num_cpus=0)
class NaiveSession:
    """One object, one Ray actor (one process): the baseline shards avoid."""

    def __init__(self, per_session: int) -> None:
        from oam_actors.agent import Agent, parse_tool_definitions
        from oam_actors.models import ScriptedModel

        tools, _ = parse_tool_definitions([TOOL])
        model = ScriptedModel.from_wire({"type": "scripted", "steps": SCRIPT_TURN * per_session})
        self.agent = Agent(model, tools=tools)

    async def turn(self, prompt: str) -> str:
        from oam_actors.agent import TextOutput, ToolCallStarted

        async def answer(event: Any) -> None:
            if isinstance(event, ToolCallStarted):
                # The client's answer, as the shards' sessions get it, but with no bridge between.
                self.agent.submit_tool_result(event.call.id, TextOutput('{"opened":true}'))

        return (await self.agent.respond(prompt, emit=answer)).text


async def naive(objects: int, turns: int) -> tuple[float, float, float]:
    """(seconds to create ``objects`` actors, MiB of memory each, turns per second)."""
    per_session = max(1, turns // objects)
    started = time.perf_counter()
    actors = [NaiveSession.remote(per_session) for _ in range(objects)]
    for actor in actors:
        await actor.turn.remote("warm-up")
    created = time.perf_counter() - started
    memory = _ray_worker_rss_mib() / max(objects, 1)
    started = time.perf_counter()
    calls = [actor.turn.remote("Open the gate.") for _ in range(per_session - 1) for actor in actors]
    for call in calls:
        await call
    rate = len(calls) / (time.perf_counter() - started)
    for actor in actors:
        ray.kill(actor)
    return created, memory, rate


def _ray_worker_rss_mib() -> float:
    """Resident memory of the NaiveSession processes (Linux /proc)."""
    total_kib = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"NaiveSession" in (entry / "cmdline").read_bytes():
                status = (entry / "status").read_text()
                total_kib += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
        except (OSError, StopIteration, ValueError):
            continue
    return total_kib / 1024


def scaling_ceiling(one: dict[str, float], two: dict[str, float], cores: int | None = None, *,
                    others: bool = False) -> float:
    """The most 2 shards can give over 1 on this machine, from the CPU ms each turn took: n shards
    run at most at n cores for the shards' work, one core for the driver's, and the machine's
    cores for both together (shards' work split evenly); with ``others``, only the cores other
    load left them in that round.

    With one shard on a core of its own and the same CPU per turn at either size, this is
    ``2 / (1 + driver/shards)`` on 2 cores: 1.85x needs the driver's CPU per turn at most 8% of
    the shards' (``2 / 1.85 - 1``)."""
    cores = cores or os.cpu_count() or 1

    def most(figures: dict[str, float], shards: int) -> float:
        taken = figures.get("others_ms", 0.0) * figures["turns_per_s"] / 1000 if others else 0.0
        left = max(cores - taken, 0.1)
        return min(left / (figures["shards_ms"] + figures["driver_ms"]), min(shards, left) / figures["shards_ms"],
                   min(1, left) / figures["driver_ms"])

    return most(two, 2) / most(one, 1)


def ceiling_terms(one: dict[str, float], two: dict[str, float]) -> dict[str, float]:
    """Why the ceiling is what it is, in the usual case (1 shard bound by its own core, 2 shards and
    the driver by the machine's two): ``ceiling = 2 x shard_cpu_kept / (1 + driver_share)``, where
    ``driver_share`` is the driver's CPU per turn over the shards' (2 shards) and ``shard_cpu_kept``
    the shards' CPU per turn at 1 shard over that at 2 (below 1 when the same turns cost more CPU
    with both cores busy: the calls per turn are the same, profile_cluster.py --cprofile shows it).
    ``free_driver`` is the most 2 shards could give with a driver costing nothing."""
    kept = one["shards_ms"] / two["shards_ms"]
    share = two["driver_ms"] / two["shards_ms"]
    return {"driver_share": round(share, 3), "shard_cpu_kept": round(kept, 3),
            "two_cores_estimate": round(2 * kept / (1 + share), 2), "free_driver": round(min(2.0, 2 * kept), 2)}


def driver_feeds(two: dict[str, float]) -> dict[str, float]:
    """How far one driver (a front door: its transports and bridges) carries a cluster: its core
    saturates at ``1 / driver CPU per turn`` turns a second; ``shards``: how many busy shards'
    cores that is, at this machine's shard CPU per turn."""
    return {"turns_per_s": round(1000 / two["driver_ms"]), "shards": round(two["shards_ms"] / two["driver_ms"], 1)}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main(args: argparse.Namespace) -> dict[str, Any]:
    ray.init(address="local", **LOCAL_RAY_OPTIONS, log_to_driver=False)
    runtimes: dict[str, Callable[[], ActorSystem]] = {
        "local": LocalSystem,
        "ray-1": lambda: RaySystem(shards=1),
        "ray-2": lambda: RaySystem(shards=2),
    }
    report: dict[str, Any] = {"load_average": os.getloadavg()[0], "crowd": {}, "turn_ms": {}, "message": {}}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in runtimes}
    for name, make in runtimes.items():  # warm-up, not counted: first imports, first shard processes
        await crowd_round(make, args.npcs, min(args.turns, args.npcs))
    names = list(runtimes)
    for index in range(args.rounds):
        # The order turns each round, so no runtime always runs right after the same one.
        for name in names[index % len(names):] + names[:index % len(names)]:
            rounds[name].append(await crowd_round(runtimes[name], args.npcs, args.turns))
    for name, results in rounds.items():
        report["crowd"][name] = {key: round(statistics.median(r[key] for r in results), 3) for key in results[0]}
    ratios = [two["turns_per_s"] / one["turns_per_s"] for one, two in zip(rounds["ray-1"], rounds["ray-2"], strict=True)]
    report["scaling_2_vs_1"] = round(statistics.median(ratios), 2)
    report["scaling_rounds"] = [round(ratio, 2) for ratio in ratios]
    # LocalSystem runs no shard: how much its rate moves over the rounds is the machine's own drift
    # (neighbours on shared hosts slow every core), which a round's ratio moves with.
    local_rates = [r["turns_per_s"] for r in rounds["local"]]
    report["local_rounds"] = {"min": round(min(local_rates)), "max": round(max(local_rates))}
    one, two = report["crowd"]["ray-1"], report["crowd"]["ray-2"]
    report["scaling_ceiling"] = round(scaling_ceiling(one, two), 2)
    report["scaling_ceiling_under_load"] = round(scaling_ceiling(one, two, others=True), 2)
    report["driver_share_of_shards"] = round(two["driver_ms"] / two["shards_ms"], 3)
    report["ceiling_terms"] = ceiling_terms(one, two)
    report["driver_feeds"] = driver_feeds(two)
    # The latency loops take turns in blocks (the order alternating), so a change in the machine's
    # load between the local and the Ray measurement moves both alike.
    blocks = max(1, args.rounds)
    turn_samples: dict[str, list[float]] = {}
    for block in range(blocks):
        for name in ("local", "ray-1")[::1 if block % 2 == 0 else -1]:
            for kind, tools in (("plain", False), ("tool", True)):
                samples = await with_bridge(runtimes[name], latency(args.latency_turns, tools=tools))
                turn_samples.setdefault(f"{name} {kind}", []).extend(samples)
    for key in ("local plain", "local tool", "ray-1 plain", "ray-1 tool"):
        samples = turn_samples[key]
        report["turn_ms"][key] = {"p50": round(percentile(samples, 0.5), 3), "p99": round(percentile(samples, 0.99), 3)}
    for name in ("local", "ray-1"):
        p50, rate = await per_message(runtimes[name], args.asks)
        report["message"][name] = {"round_trip_p50_ms": round(p50, 3), "pipelined_per_s": round(rate)}
    turn = report["turn_ms"]
    report["boundary_adds_p50_ms"] = {
        kind: round(turn[f"ray-1 {kind}"]["p50"] - turn[f"local {kind}"]["p50"], 3) for kind in ("plain", "tool")
    }
    if args.naive:
        created, memory, rate = await naive(args.naive, args.naive * 20)
        report["naive"] = {"objects": args.naive, "create_s": round(created, 2), "mib_each": round(memory),
                           "turns_per_s": round(rate)}
    ray.shutdown()
    return report


def show(report: dict[str, Any]) -> None:
    print(f"load average at start: {report['load_average']:.2f} (2 cores)")
    print("CPU ms per turn over the burst of turns (creating the crowd excluded); others: the rest of the machine (other users, Ray's own processes)")
    print(f"{'runtime':<8} {'crowd turns/s':>14} {'driver ms/turn':>15} {'shards ms/turn':>15} {'others ms/turn':>15}")
    for name, crowd_report in report["crowd"].items():
        print(f"{name:<8} {crowd_report['turns_per_s']:>14.0f} {crowd_report['driver_ms']:>15.3f} "
              f"{crowd_report['shards_ms']:>15.3f} {crowd_report['others_ms']:>15.3f}")
    print(f"2 shards / 1 shard: {report['scaling_2_vs_1']}x, rounds {report['scaling_rounds']} (goal >= 1.85); "
          f"ceiling from the CPU per turn on {os.cpu_count()} idle cores: {report['scaling_ceiling']}x, on the "
          f"cores other load left: {report['scaling_ceiling_under_load']}x")
    drift = report["local_rounds"]
    print(f"machine drift over the rounds: LocalSystem (no shards) ran at {drift['min']:,}-{drift['max']:,} turns/s "
          f"({drift['max'] / drift['min'] - 1:.0%} apart); a round's 2-vs-1 ratio moves with it, hence the median")
    terms = report["ceiling_terms"]
    print(f"why: 2 shards and the driver share {os.cpu_count()} cores, 1 shard has one of its own: ceiling ~ 2 x "
          f"{terms['shard_cpu_kept']} (shards' CPU per turn, 1 shard / 2 shards) / (1 + {terms['driver_share']:.1%} "
          f"(driver's CPU per turn / shards')) = {terms['two_cores_estimate']}x")
    print(f"  1.85x on 2 cores needs the driver at most 8.1% of the shards' CPU AND the same CPU per turn at 2 shards "
          f"as at 1; with this machine's shard CPU at 2 shards even a driver costing nothing allows "
          f"{terms['free_driver']}x")
    feeds = report["driver_feeds"]
    print(f"one driver process saturates its core at {feeds['turns_per_s']:,} turns/s: about {feeds['shards']} "
          f"busy shards' worth at this CPU per turn (beyond that, more front doors: "
          f"`serve --runtime ray --address ...`, each with shards of its own)")
    for name, turn in report["turn_ms"].items():
        print(f"session turn, {name}: p50 {turn['p50']} ms, p99 {turn['p99']} ms")
    adds = report["boundary_adds_p50_ms"]
    print(f"Ray boundary adds at p50: {adds['plain']} ms per turn (goal < 0.5); "
          f"{adds['tool']} ms with a client tool round (two crossings)")
    for name, message in report["message"].items():
        print(f"echo on {name}: round trip p50 {message['round_trip_p50_ms']} ms, "
              f"pipelined {message['pipelined_per_s']} asks/s")
    if "naive" in report:
        naive_report = report["naive"]
        print(f"naive (one Ray actor per object, {naive_report['objects']} objects): "
              f"{naive_report['create_s']} s to create, ~{naive_report['mib_each']} MiB each, "
              f"{naive_report['turns_per_s']} turns/s")
    print(json.dumps(report))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--npcs", type=int, default=96)
    parser.add_argument("--turns", type=int, default=1920)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-turns", type=int, default=300)
    parser.add_argument("--asks", type=int, default=5000)
    parser.add_argument("--naive", type=int, default=8, help="objects in the naive baseline (0: skip)")
    parser.add_argument("--profile", metavar="PATH", help="write a cProfile of the driver process to PATH")
    arguments = parser.parse_args()
    with profiled(arguments.profile):
        figures = anyio.run(main, arguments)
    show(figures)
    if arguments.profile:
        print_top(arguments.profile)
