"""A crowd: N NPCs (default 10,000) on one world, each taking one grounded scripted turn, all at once.

Each NPC has the world tool ``read_world_state`` as its ``groundingTool`` and the script
[toolCalls(read_world_state), reply]: one tool round, two model steps per turn. Phases:

1. create the world, then the N NPCs (pipelined ``npc/create``): creations per second, and the
   memory an idle NPC costs (RSS growth / N; with ``--tracemalloc`` also Python allocations / N);
2. one ``npc/talk`` per NPC, all sent at once: turns per second until the last answer, and the
   p50 / p99 latency of a turn (request written → response read).

In process (default) the client drives a :class:`~oam_actors.bridge.Bridge` through memory, as
the simulator does; ``--stdio`` runs the same lines through the real ``oam-actors stdio``
subprocess (pinned to one core with taskset when available; memory is that process's RSS).
Both admit turns as ``oam-actors`` does (``--max-running-turns``, default the CLI's): at most that
many run at once, started in arrival order, so the first requests of the burst answer first. The
burst's fairness figure is when the median response arrived, as a share of the burst's time.

Goals over stdio: the whole crowd (create + turns) in under 8 s, under 20 KB per idle NPC, the
median response before 60 % of the burst. Each figure is printed with the load average.

Run: python3 benchmarks/bench_crowd.py [--npcs 10000] [--stdio] [--stdio-only] [--tracemalloc]
     [--max-running-turns N] [--profile PATH] (profiles the stdio server with --stdio, else this
     process's run). Not a test.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import gc
import io
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from _profiling import cpu_seconds, load_average, print_top, profiled, python_command
from oam_actors.cli.runtime import DEFAULT_MAX_RUNNING_TURNS
from oam_actors.runtime import tune_gc_for_servers
from oam_actors.bridge import Bridge
from oam_actors.game_methods import GameExtension
from oam_actors.runtime import LocalSystem
from oam_actors.client import InProcessEndpoint, connect

WORLD = {"market": {"price": 45, "stock": 3}, "weather": "rain"}
_encode = msgspec.json.encode
_decode = msgspec.json.Decoder().decode


def create_params(n: int) -> dict[str, Any]:
    steps = [
        {"toolCalls": [{"name": "read_world_state", "arguments": {"path": "market.price"}}]},
        {"json": {"emotion": "neutral", "line": f"Forty-five gold, friend {n}.", "player_options": [],
                  "ends_conversation": False}},
    ]
    return {
        "npc": f"n{n}",
        "persona": {"name": f"Villager {n}", "role": "a trader"},
        "world": "village",
        "options": {"groundingTool": "read_world_state", "playerOptionCount": 0},
        "model": {"type": "scripted", "steps": steps},
    }


def talk_params(n: int) -> dict[str, Any]:
    return {"npc": f"n{n}", "line": "What does a sword cost?"}


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory now (Linux /proc), else the peak."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Report(msgspec.Struct):
    npcs: int
    create_seconds: float
    rss_per_npc: float
    traced_per_npc: float | None
    turn_seconds: float
    latencies: list[float]
    create_cpu: float
    """CPU seconds the server spent creating the crowd (user + system)."""
    turn_cpu: float
    """CPU seconds the server spent on the burst of turns."""

    def print(self, label: str, max_running: int) -> None:
        n = self.npcs
        print(f"{label}: {n:,} NPCs on one world, one grounded turn each, at most {max_running} turns at once "
              f"({load_average()})")
        print(f"  create:  {n / self.create_seconds:>10,.0f} NPCs/s   ({self.create_seconds:.2f} s)")
        print(f"  memory:  {self.rss_per_npc / 1024:>10,.1f} KB RSS per idle NPC (goal < 20 KB)")
        if self.traced_per_npc is not None:
            print(f"           {self.traced_per_npc / 1024:>10,.1f} KB Python allocations per idle NPC (tracemalloc)")
        print(f"  turns:   {n / self.turn_seconds:>10,.0f} turns/s  ({self.turn_seconds:.2f} s)")
        print(f"  cpu:     {self.create_cpu / n * 1e6:>10,.0f} µs per create, {self.turn_cpu / n * 1e6:,.0f} µs "
              "per turn (the server's CPU: steadier than the times on a shared machine)")
        p50, p99 = (percentile(self.latencies, q) * 1000 for q in (0.5, 0.99))
        share = percentile(self.latencies, 0.5) / self.turn_seconds
        print(f"  latency: p50 {p50:,.0f} ms, p99 {p99:,.0f} ms; the median response at {share:.0%} of the burst "
              "(goal < 60%)")
        print(f"  whole crowd (create + turns): {self.create_seconds + self.turn_seconds:.2f} s (goal < 8 s)")


# --- in process -------------------------------------------------------------------------------------


async def in_process(npcs: int, trace: bool, max_running: int) -> Report:
    async with LocalSystem(max_running=max_running) as system:

        def make(write: Callable[[bytes], Awaitable[None]]) -> Bridge:
            extension = GameExtension(max_npcs=npcs)
            return Bridge(system, write, extensions=[extension])

        async with connect(InProcessEndpoint(make)) as client:
            await client.call("world/create", {"world": "village", "state": WORLD})
            gc.collect()
            rss_before = rss_bytes()
            if trace:
                tracemalloc.start()
            traced_before = tracemalloc.get_traced_memory()[0] if trace else 0
            started, cpu_started = time.perf_counter(), cpu_seconds()
            await _all(npcs, lambda n: client.call("npc/create", create_params(n)))
            create_seconds, create_cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
            gc.collect()
            traced = (tracemalloc.get_traced_memory()[0] - traced_before) / npcs if trace else None
            if trace:
                tracemalloc.stop()
            rss_per_npc = (rss_bytes() - rss_before) / npcs
            latencies: list[float] = []

            async def talk(n: int) -> None:
                sent = time.perf_counter()
                result = await client.call("npc/talk", talk_params(n))
                latencies.append(time.perf_counter() - sent)
                assert result["toolCalls"][0]["output"] == 45, result

            started, cpu_started = time.perf_counter(), cpu_seconds()
            await _all(npcs, talk)
            turn_seconds, turn_cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
            await client.call("shutdown")
    return Report(npcs, create_seconds, rss_per_npc, traced, turn_seconds, latencies, create_cpu, turn_cpu)


async def _all(count: int, run: Callable[[int], Awaitable[Any]]) -> None:
    async with anyio.create_task_group() as group:
        for n in range(count):
            group.start_soon(run, n)


# --- over stdio ---------------------------------------------------------------------------------------


class StdioBridge:
    """The subprocess, a reader thread recording when each response arrived."""

    def __init__(self, npcs: int, max_running: int, profile: str | None = None, extra: list[str] | None = None) -> None:
        # Every talk is in flight at once: the connection's caps are raised to fit them.
        command = [*python_command(profile), "-m", "oam_actors", "stdio", "--max-npcs", str(npcs),
                   "--max-in-flight", str(2 * npcs), "--max-connection-bytes", str(max(32, npcs // 50) << 20),
                   "--max-running-turns", str(max_running), *(extra or [])]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
            command = ["taskset", "-c", "0", *command]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.arrived: dict[Any, float] = {}
        self.results: dict[Any, Any] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        # Big reads: iterating the unbuffered pipe line by line would read a byte per system call
        # and throttle the bridge's writes.
        stdout = io.BufferedReader(self.proc.stdout, buffer_size=1 << 20)  # type: ignore[arg-type]
        for line in stdout:
            message = _decode(line)
            if "id" in message and "method" not in message:
                with self._cond:
                    self.arrived[message["id"]] = time.perf_counter()
                    self.results[message["id"]] = message.get("result", message.get("error"))
                    self._cond.notify_all()

    def send(self, requests: list[tuple[Any, str, dict[str, Any]]]) -> dict[Any, float]:
        """Write every request in one go; returns when each was written (all: now)."""
        assert self.proc.stdin is not None
        payload = b"".join(
            _encode({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + b"\n"
            for i, method, params in requests
        )
        sent = time.perf_counter()
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()
        return {i: sent for i, _, _ in requests}

    def wait(self, ids: list[Any]) -> None:
        with self._cond:
            while not all(i in self.arrived for i in ids):
                if not self._cond.wait(timeout=600):
                    raise TimeoutError("the bridge stopped answering")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


def over_stdio(npcs: int, max_running: int, profile: str | None = None, extra: list[str] | None = None) -> Report:
    """The crowd through the real subprocess; ``extra``: more ``oam-actors stdio`` options."""
    bridge = StdioBridge(npcs, max_running, profile, extra)
    try:
        bridge.send([("world", "world/create", {"world": "village", "state": WORLD})])
        bridge.wait(["world"])
        pid = bridge.proc.pid
        rss_before = rss_bytes(pid)
        creates = [(f"c{n}", "npc/create", create_params(n)) for n in range(npcs)]
        cpu_started = cpu_seconds(pid)
        started = time.perf_counter()
        bridge.send(creates)
        bridge.wait([i for i, _, _ in creates])
        create_seconds = time.perf_counter() - started
        cpu_created = cpu_seconds(pid)
        rss_per_npc = (rss_bytes(pid) - rss_before) / npcs
        talks = [(f"t{n}", "npc/talk", talk_params(n)) for n in range(npcs)]
        sent = bridge.send(talks)
        bridge.wait([i for i, _, _ in talks])
        cpu_talked = cpu_seconds(pid)
        turn_seconds = max(bridge.arrived[i] for i in sent) - min(sent.values())
        latencies = [bridge.arrived[i] - at for i, at in sent.items()]
        assert bridge.results["t0"]["toolCalls"][0]["output"] == 45, bridge.results["t0"]
    finally:
        bridge.close()
    return Report(npcs, create_seconds, rss_per_npc, None, turn_seconds, latencies,
                  cpu_created - cpu_started, cpu_talked - cpu_created)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--npcs", type=int, default=10_000)
    parser.add_argument("--stdio", action="store_true", help="also run through the `oam-actors stdio` subprocess")
    parser.add_argument("--tracemalloc", action="store_true", help="count Python allocations per NPC (slower create)")
    parser.add_argument("--default-gc", action="store_true",
                        help="keep CPython's default collector settings instead of the servers' tuning")
    parser.add_argument("--stdio-only", action="store_true", help="only the run through the subprocess")
    parser.add_argument("--max-running-turns", type=int, default=DEFAULT_MAX_RUNNING_TURNS, metavar="N",
                        help=f"turns running at once (default {DEFAULT_MAX_RUNNING_TURNS}, the CLI's)")
    parser.add_argument("--profile", metavar="PATH", help="write a cProfile of the measured server to PATH")
    args = parser.parse_args()
    if not args.default_gc:
        tune_gc_for_servers()  # what `oam-actors` does at start-up
    stdio = args.stdio or args.stdio_only
    if not args.stdio_only:
        with profiled(None if stdio else args.profile):
            report = anyio.run(in_process, args.npcs, args.tracemalloc, args.max_running_turns)
        report.print("in process", args.max_running_turns)
    if stdio:
        over_stdio(args.npcs, args.max_running_turns, args.profile).print("over stdio", args.max_running_turns)
    if args.profile:
        print_top(args.profile)


if __name__ == "__main__":
    main()
