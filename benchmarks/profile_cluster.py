"""Where a Ray crossing's time goes: py-spy on the driver and on every shard process.

Runs ``bench_cluster``'s crowd (``--shards`` shards) and its plain-turn latency loop (one shard)
with ``py-spy record`` attached to this process and to each shard (the shards are Ray workers,
not our children, so each is attached by pid), and prints, per process, the functions holding
the most samples (self time) and the share of samples in each part of a crossing (frame
encode/decode, value pickling, socket, checkpoint store, event loop, actor work).

Run: ``python3 benchmarks/profile_cluster.py [--npcs 96] [--turns 1920] [--latency-turns 300]
[--shards 2] [--out DIR]``. Needs py-spy (``pip install py-spy``; attaching needs ptrace rights:
root, or ``kernel.yama.ptrace_scope=0``). The raw collapsed stacks stay in ``DIR`` (default a
temporary directory) for ``flamegraph.pl`` or speedscope. Sampling slows the processes a little:
figures printed here are not the benchmark's. py-spy samples wall time: most samples in "socket
send" are the writer descheduled in favour of the process its write woke (on this 2-core
machine a send cost ~30 µs of thread CPU against ~450 µs of wall time), not CPU spent sending.
"""

from __future__ import annotations

import argparse
import collections
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

from bench_cluster import Client, crowd, latency, with_bridge
from oam_actors.cluster import LOCAL_RAY_OPTIONS, RaySystem

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npcs", type=int, default=96)
    parser.add_argument("--turns", type=int, default=1920)
    parser.add_argument("--latency-turns", type=int, default=300)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", metavar="DIR", help="keep the collapsed stacks here (default: a temporary directory)")
    arguments = parser.parse_args()
    if shutil.which("py-spy") is None:
        parser.error("py-spy is not installed (pip install py-spy)")
    directory = Path(arguments.out or tempfile.mkdtemp(prefix="oam-profile-"))
    directory.mkdir(parents=True, exist_ok=True)
    anyio.run(main, arguments, directory)
    print(f"collapsed stacks in {directory}", file=sys.stderr)
