"""Two front doors, one provider quota: how much of a stated limit they use, and how often the
provider refuses.

A loopback OpenAI-compatible provider (``tests/provider_servers.py``'s ``WindowedProvider``)
allows ``--limit`` requests per fixed ``--window`` seconds and answers 429 beyond. Two real
``oam-actors serve`` processes, each told the provider's rate (``--rpm``), get turns from
sessions that name the provider, at ``--load`` times that rate in total, for ``--seconds``:

1. **Ray**: both doors on one local Ray cluster (``cluster/start.sh local 1 PORT``), so both
   reach the backend's one named model actor.
2. **LocalSystem** (the LiteLLM-without-Redis baseline): two independent servers, each enforcing
   the limit on its own.

Each door first answers one warm-up turn: on Ray the first step starts the backend's model actor
(a Ray worker process, a few seconds, once per cluster), a cold start that would otherwise fall
in the first measured window of a short run; it is printed as ``warm-up``. Then the timed load
starts on both doors at once. Per run: the provider's 429s (goal 0 on Ray), the requests it
accepted as a share of its limit over the windows wholly inside the timed load (goal at least
95 % on Ray; a paced scheduler feeds a provider 2 % below its rate), and what the clients got
(answered, refused with -32005 after their queue time, other errors).

Run: ``python3 benchmarks/bench_quota_frontdoors.py [--seconds 60] [--limit 15] [--window 5]
[--load 3]``. Not a test: it prints a table and a JSON line.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from provider_servers import WindowedProvider  # noqa: E402

from oam_actors.client import Session, connect  # noqa: E402
from oam_actors.errors import OamError  # noqa: E402

SESSIONS_PER_DOOR = 48


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Barrier:
    """Lets ``parties`` tasks on; each waits until all have arrived."""

    def __init__(self, parties: int) -> None:
        self._left = parties
        self._all = anyio.Event()

    async def wait(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._all.set()
        await self._all.wait()


class Door:
    """One ``oam-actors serve`` process and an :mod:`oam_actors.client` connection to its TCP port."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()
        self.outcomes: dict[str, int] = {}
        self.warm_up = self.started = 0.0  # the warm-up turn's seconds; when the timed load began

    async def run(self, provider_url: str, rate: float, seconds: float, ready: Barrier) -> None:
        """Create the sessions and answer one warm-up turn, wait for the other doors at
        ``ready``, then offer ``rate`` turns a second, each to an idle session, for ``seconds``."""
        async with connect(self.url, timeout=None) as client:
            model = {"type": "openai", "baseUrl": f"{provider_url}/v1", "model": "bench"}
            sessions = [await client.create_session(f"s{n}", model=model) for n in range(SESSIONS_PER_DOOR)]
            # The first step starts the backend (on Ray: the model actor's process, seconds, once
            # per cluster): a cold start, measured here and kept out of the share of the limit.
            began = time.monotonic()
            try:
                await sessions[0].respond("Hello?")
            except OamError as exc:
                raise RuntimeError(f"the warm-up turn failed: {exc.to_wire()}") from exc
            self.warm_up = time.monotonic() - began
            await ready.wait()
            idle = list(sessions)
            started = self.started = time.monotonic()
            turns = 0
            async with anyio.create_task_group() as turns_group:
                while time.monotonic() - started < seconds:
                    await anyio.sleep(max(0.0, started + turns / rate - time.monotonic()))
                    turns += 1
                    if not idle:
                        self._count("not offered (every session busy)")
                        continue
                    turns_group.start_soon(self._turn, idle, idle.pop())

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    async def _turn(self, idle: list[Session], session: Session) -> None:
        try:
            await session.respond("Hello?")
            self._count("answered")
        except OamError as error:
            self._count(f"{error.code.number} {error.code.wire}")
        idle.append(session)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def one_run(label: str, door_args: list[str], options: argparse.Namespace) -> dict[str, Any]:
    with WindowedProvider(options.limit, options.window) as provider:
        doors = [Door(door_args), Door(door_args)]
        try:
            rate = options.load * options.limit / options.window / len(doors)

            async def both() -> None:
                ready = Barrier(len(doors))
                async with anyio.create_task_group() as group:
                    for door in doors:
                        group.start_soon(door.run, provider.url, rate, options.seconds, ready)

            anyio.run(both)
            began = min(door.started for door in doors)  # the timed load, after the warm-up turns
            ended = began + options.seconds
        finally:
            for door in doors:
                door.stop()
        origin = provider._started  # noqa: SLF001 - the provider's window origin
        first = int((began - origin) // options.window) + 1  # windows wholly inside the load
        last = int((ended - origin) // options.window) - 1
        windows = range(first, last + 1)
        accepted = sum(provider.accepted.get(w, 0) for w in windows)
        outcomes: dict[str, int] = {}
        for door in doors:
            for key, count in door.outcomes.items():
                outcomes[key] = outcomes.get(key, 0) + count
        return {
            "run": label,
            "provider429s": sum(provider.refused.values()),
            "shareOfLimit": accepted / (options.limit * len(windows)) if windows else 0.0,
            "windows": len(windows),
            "mostInAWindow": provider.most_in_a_window(),
            "warmUpSeconds": max(door.warm_up for door in doors),
            "clients": outcomes,
        }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of load per run")
    parser.add_argument("--limit", type=int, default=15, help="requests the provider allows per window")
    parser.add_argument("--window", type=float, default=5.0, help="the provider's window, seconds")
    parser.add_argument("--load", type=float, default=3.0, help="turns offered, in multiples of the limit")
    options = parser.parse_args()
    rpm = str(round(options.limit * 60 / options.window))
    port = free_port()
    start = ROOT / "cluster" / "start.sh"
    # start.sh runs `ray` and `python3` from PATH: put this interpreter's first, so the cluster
    # runs in the environment the benchmark was started with (activated or not).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = subprocess.run([str(start), "local", "1", str(port)], capture_output=True, text=True,
                             timeout=180, env=env)
    if started.returncode != 0:
        sys.exit(f"cluster/start.sh local 1 {port} failed: {(started.stderr.strip().splitlines() or ['no output'])[-1]}")
    try:
        ray_run = one_run("Ray: 2 doors, 1 model actor",
                          ["--runtime", "ray", "--address", f"127.0.0.1:{port}", "--rpm", rpm], options)
    finally:
        subprocess.run([str(start), "stop", str(port)], capture_output=True, timeout=120, env=env)
    local_run = one_run("LocalSystem: 2 independent doors", ["--rpm", rpm], options)
    print(f"provider: {options.limit} requests per {options.window:g} s window ({rpm} RPM), offered "
          f"{options.load:g}x for {options.seconds:g} s through 2 front doors")
    print(f"{'run':34} {'429s':>6} {'share of limit':>15} {'most/window':>12} {'warm-up':>8}  clients")
    for run in (ray_run, local_run):
        clients = ", ".join(f"{k}: {v}" for k, v in sorted(run["clients"].items()))
        print(f"{run['run']:34} {run['provider429s']:>6} {run['shareOfLimit']:>14.1%} {run['mostInAWindow']:>12} "
              f"{run['warmUpSeconds']:>7.1f}s  {clients}")
    print(json.dumps({"bench": "quota_frontdoors", "runs": [ray_run, local_run]}))


if __name__ == "__main__":
    main()
