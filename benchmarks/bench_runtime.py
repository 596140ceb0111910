"""Asks per second through LocalSystem: one actor, and 1,000 actors asked round-robin.

Run: ``python3 benchmarks/bench_runtime.py [--asks N]``. Not a test. (LocalSystem runs on anyio's
asyncio backend: its fair yields are asyncio's.)
Each scenario keeps a window of asks in flight (as a bridge does), queued with ``ask_nowait``
and awaited in order.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import time
from collections import deque
from typing import Any

import anyio

from oam_actors.runtime import Actor, ActorRef, Address, LocalSystem, Reply


class Echo(Actor):
    async def handle(self, message: Any) -> Any:
        return message


async def pump(refs: list[ActorRef], asks: int, window: int) -> float:
    """Send ``asks`` messages round-robin over ``refs`` with ``window`` in flight; asks/s."""
    in_flight: deque[Reply] = deque()
    started = time.perf_counter()
    for n in range(asks):
        in_flight.append(refs[n % len(refs)].ask_nowait(n))
        if len(in_flight) >= window:
            await in_flight.popleft().wait()
    while in_flight:
        await in_flight.popleft().wait()
    return asks / (time.perf_counter() - started)


async def scenario(actors: int, asks: int, window: int) -> float:
    async with LocalSystem() as system:
        refs = [system.spawn(Address("bench", str(n)), Echo) for n in range(actors)]
        await pump(refs, min(asks, 1_000), window)  # warm-up: every actor has started
        return await pump(refs, asks, window)


async def sequential(asks: int) -> float:
    """One ask at a time (ask + wait): the latency-bound case."""
    async with LocalSystem() as system:
        ref = system.spawn(Address("bench", "seq"), Echo)
        started = time.perf_counter()
        for n in range(asks):
            await ref.ask(n)
        return asks / (time.perf_counter() - started)


async def main(asks: int) -> None:
    print(f"1 actor, ask+wait one at a time: {await sequential(asks):>10,.0f} asks/s")
    print(f"1 actor, 100 in flight:          {await scenario(1, asks, 100):>10,.0f} asks/s")
    print(f"1,000 actors, 1,000 in flight:   {await scenario(1_000, asks, 1_000):>10,.0f} asks/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    parser.add_argument("--asks", type=int, default=100_000)
    args = parser.parse_args()
    anyio.run(main, args.asks)
