"""Where a Ray crossing's time goes: py-spy on the driver and on every shard process.

Runs ``bench_cluster``'s crowd (``--shards`` shards) and its plain-turn latency loop (one shard)
with ``py-spy record`` attached to this process and to each shard (the shards are Ray workers,
not our children, so each is attached by pid), and prints, per process, the functions holding
the most samples (self time) and the share of samples in each part of a crossing (frame
encode/decode, value pickling, socket, checkpoint store, event loop, actor work).

With ``--cprofile`` it uses cProfile instead, in the driver and inside every shard (a shard
actor with two more calls, started and stopped around the burst of turns), on CPU time
(``time.thread_time``: a process descheduled by the other is not charged), and prints per turn
each process's function calls and the functions with the most cumulative time, then the same
plain-turn loop on a ``LocalSystem`` and the boundary's function calls per plain turn (Ray's
driver and shard together minus LocalSystem's one process). Call counts are
the evidence to compare versions by on a shared machine (they do not move with the load);
cProfile's own cost inflates the times, mostly of code that makes many small calls.

Run: ``python3 benchmarks/profile_cluster.py [--npcs 96] [--turns 1920] [--latency-turns 300]
[--shards 2] [--out DIR] [--cprofile]``. Without ``--cprofile`` it needs py-spy (``pip install py-spy``; attaching needs ptrace rights:
root, or ``kernel.yama.ptrace_scope=0``). The raw collapsed stacks stay in ``DIR`` (default a
temporary directory) for ``flamegraph.pl`` or speedscope. Sampling slows the processes a little:
figures printed here are not the benchmark's. py-spy samples wall time: most samples in "socket
send" are the writer descheduled in favour of the process its write woke (on this 2-core
machine a send cost ~30 µs of thread CPU against ~450 µs of wall time), not CPU spent sending.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import cProfile
import collections
import marshal
import pstats
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import ray

import bench_cluster
from bench_cluster import Client, crowd, latency, with_bridge
from oam_actors.cluster import LOCAL_RAY_OPTIONS, RaySystem
from oam_actors.cluster import system as cluster_system
from oam_actors.cluster.shard import ShardHost
from oam_actors.runtime import LocalSystem

# The part of a crossing a sample belongs to: the innermost frame of its stack that one of these
# names (event-loop frames count only when no other frame is named).
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("checkpoint store (sqlite)", ("store.py", "sqlite3")),
    ("checkpoint snapshot", ("_crossing.py", "snapshot (")),
    ("frame encode/decode", ("frames.py", "encode_ops", "decode_ops", "encode_items", "decode_items")),
    ("value pickle/unpickle", ("dumps_value", "loads_value", "dumps_actor", "loads_actor", "pickle")),
    ("socket send/recv", ("socket.py", "_sockets.py", "selector_events.py", "sock_send", "sock_recv")),
    ("actor work (agent, bridge, game, models)", ("oam_actors/agent", "oam_actors/bridge", "oam_actors/game",
                                                 "oam_actors/objects", "oam_actors/models", "bench_cluster")),
    ("runtime (mailboxes, links)", ("oam_actors/runtime", "oam_actors/cluster")),
]
EVENT_LOOP = ("asyncio", "anyio", "selectors.py")
IDLE = ".select (selectors.py"  # py-spy cannot always tell a thread blocked in epoll from a busy one


def part_of(innermost_first: list[str]) -> str:
    if IDLE in innermost_first[0]:
        return "idle (waiting for input)"
    for frame in innermost_first:
        for part, needles in PARTS:
            if any(needle in frame for needle in needles):
                return part
    return "event loop" if any(n in f for f in innermost_first for n in EVENT_LOOP) else "other (Ray, threads)"


class Spies:
    """``py-spy record`` on some processes, raw (collapsed) output, stopped together."""

    def __init__(self, out: Path, name: str) -> None:
        self.out, self.name = out, name
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def attach(self, label: str, pid: int) -> None:
        path = self.out / f"{self.name}-{label}.txt"
        command = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "500",
                   "--nonblocking", "--output", str(path)]
        self._procs.append((label, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))

    def stop(self) -> dict[str, Path]:
        for _, proc in self._procs:
            proc.send_signal(signal.SIGINT)
        for _, proc in self._procs:
            proc.wait(timeout=30)
        return {label: self.out / f"{self.name}-{label}.txt" for label, _ in self._procs}


async def profiled_run(shards: int, body: Callable[[Client], Awaitable[Any]], spies: Spies) -> Any:
    async def measured(client: Client) -> Any:
        system = client.bridge.system
        assert isinstance(system, RaySystem)
        spies.attach("driver", os.getpid())
        for info in await system.shard_info():
            spies.attach(f"shard{info.index}", info.pid)
        await anyio.sleep(0.5)  # py-spy needs a moment to attach
        started = time.perf_counter()
        result = await body(client)
        return result, time.perf_counter() - started

    return await with_bridge(lambda: RaySystem(shards=shards), measured)


def summarize(label: str, path: Path, top: int) -> None:
    """Self-time leaders and the share of each part of a crossing, from collapsed stacks."""
    if not path.exists():
        print(f"  {label}: no samples (py-spy could not attach?)")
        return
    leaf: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf[frames[-1]] += count
        parts[part_of(frames[::-1])] += count
    print(f"  {label}: {total} samples")
    for part, count in parts.most_common():
        print(f"    {count / total:6.1%}  {part}")
    print("    top self time:")
    for frame, count in leaf.most_common(top):
        print(f"    {count / total:6.1%}  {frame}")


class ProfiledShardHost(ShardHost):
    """A shard that can profile its own event loop's thread (where all its work runs)."""

    async def profile_start(self) -> None:
        self._profile = cProfile.Profile(time.thread_time)
        self._profile.enable()

    async def profile_stop(self) -> bytes:
        self._profile.disable()
        self._profile.create_stats()
        return marshal.dumps(self._profile.stats)  # type: ignore[attr-defined]  # what pstats reads


Metered = Callable[[Awaitable[Any]], Awaitable[Any]]


async def cprofiled_run(shards: int, body: Callable[[Client, Metered], Awaitable[Any]], out: Path,
                        name: str) -> dict[str, Path]:
    """``body`` (which wraps its measured part in the callable it is given) under cProfile in the
    driver and each shard (``shards`` 0: on a ``LocalSystem``, the driver alone); the profiles
    written to ``out``."""
    paths: dict[str, Path] = {}

    async def measured(client: Client) -> None:
        system = client.bridge.system
        links = system._links if isinstance(system, RaySystem) else []
        profile = cProfile.Profile(time.thread_time)

        async def metered(part: Awaitable[Any]) -> Any:
            for link in links:
                await link.handle.profile_start.remote()
            profile.enable()
            result = await part
            profile.disable()
            paths["driver"] = out / f"{name}-driver.prof"
            profile.dump_stats(paths["driver"])
            for link in links:
                paths[f"shard{link.index}"] = out / f"{name}-shard{link.index}.prof"
                paths[f"shard{link.index}"].write_bytes(await link.handle.profile_stop.remote())
            return result

        await body(client, metered)

    plain = cluster_system._ShardActor
    cluster_system._ShardActor = ray.remote(ProfiledShardHost)
    try:
        await with_bridge(lambda: RaySystem(shards=shards) if shards else LocalSystem(), measured)
    finally:
        cluster_system._ShardActor = plain
    return paths


def summarize_calls(label: str, path: Path, per: int, top: int) -> float:
    """Print a profile's calls and top entries per turn; returns its function calls per turn."""
    stats = pstats.Stats(str(path))
    stats.strip_dirs()
    print(f"  {label}: {stats.total_calls / per:.1f} function calls per turn, {stats.total_tt * 1e6 / per:.0f} µs CPU "
          "per turn under cProfile")
    print("    calls/turn  self µs   cum µs  function")
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][3])  # type: ignore[attr-defined]
    for (file, line, function), (_, calls, own, cumulative, _) in rows[:top]:
        print(f"    {calls / per:10.2f} {own * 1e6 / per:8.1f} {cumulative * 1e6 / per:8.1f}  {file}:{line}({function})")
    return stats.total_calls / per  # type: ignore[attr-defined]


async def main_cprofile(args: argparse.Namespace, out: Path) -> None:
    ray.init(address="local", **LOCAL_RAY_OPTIONS, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(bench_cluster)  # shards cannot import the benchmark
    per_npc = max(1, args.turns // args.npcs)
    runs: list[tuple[str, int, Callable[[Client, Metered], Awaitable[Any]], int]] = [
        (f"crowd, {args.shards} shard(s), {args.npcs} NPCs, {args.npcs * per_npc} turns", args.shards,
         lambda client, metered: crowd(args.npcs, args.turns, metered)(client), args.npcs * per_npc),
        (f"plain-turn latency, 1 shard, {args.latency_turns} turns one at a time", 1,
         lambda client, metered: metered(latency(args.latency_turns, tools=False)(client)), args.latency_turns + 20),
        (f"plain-turn latency, LocalSystem, {args.latency_turns} turns one at a time", 0,
         lambda client, metered: metered(latency(args.latency_turns, tools=False)(client)), args.latency_turns + 20),
    ]
    calls: dict[int, float] = {}  # run -> function calls per plain turn, every process together
    for index, (title, shards, body, turns) in enumerate(runs):
        paths = await cprofiled_run(shards, body, out, f"run{index}")
        print(f"{title}:")
        for label, path in paths.items():
            per = turns if label == "driver" else max(1, turns // max(1, shards))
            calls[index] = calls.get(index, 0.0) + summarize_calls(label, path, per, args.top)
    print(f"the Ray boundary: {calls[1] - calls[2]:.1f} function calls per plain turn (driver and shard on Ray, "
          f"{calls[1]:.1f}, minus LocalSystem, {calls[2]:.1f})")
    ray.shutdown()


async def main(args: argparse.Namespace, out: Path) -> None:
    ray.init(address="local", **LOCAL_RAY_OPTIONS, log_to_driver=False)
    crowd_spies = Spies(out, "crowd")
    _, seconds = await profiled_run(args.shards, crowd(args.npcs, args.turns), crowd_spies)
    files = crowd_spies.stop()
    print(f"crowd, {args.shards} shard(s), {args.npcs} NPCs, {args.turns} turns ({seconds:.2f} s with creation):")
    for label, path in files.items():
        summarize(label, path, args.top)
    latency_spies = Spies(out, "latency")
    samples, seconds = await profiled_run(1, latency(args.latency_turns, tools=False), latency_spies)
    files = latency_spies.stop()
    print(f"plain-turn latency, 1 shard, {len(samples)} turns one at a time ({seconds:.2f} s):")
    for label, path in files.items():
        summarize(label, path, args.top)
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--npcs", type=int, default=96)
    parser.add_argument("--turns", type=int, default=1920)
    parser.add_argument("--latency-turns", type=int, default=300)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", metavar="DIR", help="keep the collapsed stacks (or profiles) here (default: a temporary directory)")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the driver and the shards (call counts per turn)")
    arguments = parser.parse_args()
    if not arguments.cprofile and shutil.which("py-spy") is None:
        parser.error("py-spy is not installed (pip install py-spy)")
    directory = Path(arguments.out or tempfile.mkdtemp(prefix="oam-profile-"))
    directory.mkdir(parents=True, exist_ok=True)
    anyio.run(main_cprofile if arguments.cprofile else main, arguments, directory)
    print(f"{'profiles' if arguments.cprofile else 'collapsed stacks'} in {directory}", file=sys.stderr)
