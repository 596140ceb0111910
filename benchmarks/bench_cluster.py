"""LocalSystem against RaySystem (1 and 2 shards), and against one Ray actor per object.

1. Crowd: S sessions (scripted, one client tool round per turn, answered at once by the client)
   driven through an in-process bridge with every session busy; turns per second per runtime.
   Goal: RaySystem with 2 shards at least 1.6x RaySystem with 1 shard.
2. Turn latency: one session, one turn at a time; p50 / p99 per runtime and what the Ray
   boundary adds at p50 (Ray p50 - Local p50). Goal: under 2 ms.
3. Per message across the boundary: an echo actor asked one message at a time (round trip) and
   pipelined (asks per second), LocalSystem against RaySystem.
4. Naive baseline: one Ray actor per object (what placement in shards avoids): time and memory to
   create N of them, and the crowd's turns per second with each turn a Ray call.

Run: ``python3 benchmarks/bench_cluster.py [--sessions 200] [--turns 4000] [--naive 8]``.
Starts a private local Ray instance (2 CPUs). Not a test: it prints a table and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import ray

from oam_actors.bridge import Bridge, BridgeConfig
from oam_actors.cluster import LOCAL_RAY_OPTIONS, RaySystem
from oam_actors.runtime import Actor, ActorSystem, Address, LocalSystem

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder().decode

TOOL = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
SCRIPT_TURN = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]


class Client:
    """Drives one bridge in process: answers every tool/call at once, times every request."""

    def __init__(self) -> None:
        self.bridge: Bridge | None = None
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []
        self.expected = 0
        self.done = anyio.Event()
        self._ids = 0

    async def write(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            message = _decode(line)
            if message.get("method") == "tool/call":
                reply = b'{"jsonrpc":"2.0","id":"%s","result":{"output":{"opened":true}}}' % message["id"].encode()
                assert self.bridge is not None
                await self.bridge.receive(reply)
            elif "method" not in message:
                assert "result" in message, message
                self.latencies.append(time.perf_counter() - self.sent.pop(message["id"]))
                if len(self.latencies) == self.expected:
                    self.done.set()

    async def request(self, method: str, params: dict[str, Any]) -> None:
        assert self.bridge is not None
        self._ids += 1
        self.sent[self._ids] = time.perf_counter()
        await self.bridge.receive(_encode({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}))

    async def run(self, requests: list[tuple[str, dict[str, Any]]]) -> float:
        """Send every request (pipelined); seconds until the last answer."""
        self.expected, self.done, self.latencies = len(requests), anyio.Event(), []
        started = time.perf_counter()
        for method, params in requests:
            await self.request(method, params)
        await self.done.wait()
        return time.perf_counter() - started


async def with_bridge(make_system: Callable[[], ActorSystem], body: Callable[[Client], Any]) -> Any:
    async with make_system() as system:
        client = Client()
        client.bridge = Bridge(system, client.write, config=BridgeConfig(max_sessions=100_000))
        async with client.bridge:
            return await body(client)


def crowd(sessions: int, turns: int) -> Callable[[Client], Any]:
    per_session = max(1, turns // sessions)

    async def body(client: Client) -> float:
        await client.run([
            ("session/create", {"session": f"s{i}", "tools": [TOOL],
                                "model": {"type": "scripted", "steps": SCRIPT_TURN * per_session}})
            for i in range(sessions)
        ])
        requests = [("session/respond", {"session": f"s{i}", "prompt": "Open the gate."})
                    for _ in range(per_session) for i in range(sessions)]
        return len(requests) / await client.run(requests)

    return body


def latency(turns: int) -> Callable[[Client], Any]:
    async def body(client: Client) -> list[float]:
        model = {"type": "scripted", "steps": SCRIPT_TURN * (turns + 20)}
        await client.run([("session/create", {"session": "solo", "tools": [TOOL], "model": model})])
        samples: list[float] = []
        for n in range(turns + 20):
            await client.run([("session/respond", {"session": "solo", "prompt": "Open the gate."})])
            if n >= 20:  # warm-up
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
        import anyio as local_anyio

        from oam_actors.agent import TextOutput, ToolCallStarted

        async def answer(event: Any) -> None:
            if isinstance(event, ToolCallStarted):
                # The client's answer, as the shards' sessions get it, but with no bridge between.
                self.agent.submit_tool_result(event.call.id, TextOutput('{"opened":true}'))
                await local_anyio.lowlevel.checkpoint()

        return (await self.agent.respond(prompt, emit=answer)).text


async def naive(objects: int, turns: int) -> tuple[float, float, float]:
    """(seconds to create ``objects`` actors, MiB of memory each, turns per second)."""
    per_session = max(1, turns // objects)
    started = time.perf_counter()
    actors = [NaiveSession.remote(per_session) for _ in range(objects)]
    await anyio.sleep(0)
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
    report: dict[str, Any] = {"crowd_turns_per_s": {}, "turn_ms": {}, "message": {}}
    for name, make in runtimes.items():
        report["crowd_turns_per_s"][name] = round(await with_bridge(make, crowd(args.sessions, args.turns)))
        samples = await with_bridge(make, latency(args.latency_turns))
        report["turn_ms"][name] = {"p50": round(percentile(samples, 0.5), 3), "p99": round(percentile(samples, 0.99), 3)}
        if name != "ray-2":
            p50, rate = await per_message(make, args.asks)
            report["message"][name] = {"round_trip_p50_ms": round(p50, 3), "pipelined_per_s": round(rate)}
    turns = report["crowd_turns_per_s"]
    report["scaling_2_vs_1"] = round(turns["ray-2"] / turns["ray-1"], 2)
    report["boundary_adds_p50_ms"] = round(report["turn_ms"]["ray-1"]["p50"] - report["turn_ms"]["local"]["p50"], 3)
    if args.naive:
        created, memory, rate = await naive(args.naive, args.naive * 20)
        report["naive"] = {"objects": args.naive, "create_s": round(created, 2), "mib_each": round(memory),
                           "turns_per_s": round(rate)}
    ray.shutdown()
    return report


def show(report: dict[str, Any]) -> None:
    print(f"{'runtime':<8} {'crowd turns/s':>14} {'turn p50 ms':>12} {'turn p99 ms':>12}")
    for name, rate in report["crowd_turns_per_s"].items():
        turn = report["turn_ms"][name]
        print(f"{name:<8} {rate:>14} {turn['p50']:>12} {turn['p99']:>12}")
    print(f"2 shards / 1 shard: {report['scaling_2_vs_1']}x (goal >= 1.6)")
    print(f"Ray boundary adds at p50: {report['boundary_adds_p50_ms']} ms per turn (goal < 2)")
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=4000)
    parser.add_argument("--latency-turns", type=int, default=300)
    parser.add_argument("--asks", type=int, default=5000)
    parser.add_argument("--naive", type=int, default=8, help="objects in the naive baseline (0: skip)")
    show(anyio.run(main, parser.parse_args()))
