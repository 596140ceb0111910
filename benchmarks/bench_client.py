"""What the Python client (``oam_actors.client``) costs, next to a raw JSON-lines client.

Against one ``oam-actors serve --tcp`` (pinned to one core with taskset when available, as in
bench_tcp.py), over one connection:
1. Pings: ``--pings`` pings through ``client.ping()`` from ``--concurrency`` tasks at once;
   pings per second, next to bench_tcp.py's pipelined pings written by a thread as raw bytes.
2. Turns: scripted session turns with one client tool round (the handler an ``async def``), every
   session busy at once, a task per session awaiting ``session.respond``; turns per second and
   p50 / p99 per turn, next to bench_tcp.py's raw client doing the same.

The ratios say how much of the server's throughput a Python program gets through the client on
this machine (the client and the server share its cores). At one session they compare a
conversation (the client sends a turn when the last one is answered) with a pipeline (the raw
client queues every turn at once): that line is the round trip, not the client's cost.

Run: python3 benchmarks/bench_client.py [--pings 20000] [--concurrency 64] [--sessions 1,100] [--turns 1000]
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import anyio
import bench_stdio
import bench_tcp

from oam_actors.client import Client, Session, connect

SCRIPT = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]


class Server:
    """``oam-actors serve --tcp 127.0.0.1:0`` with bench_tcp.py's limits."""

    def __init__(self) -> None:
        command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", "--max-sessions", "100000",
                   "--max-in-flight", "100000"]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
            command = ["taskset", "-c", "0", *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _pings(url: str, count: int, concurrency: int) -> float:
    async with connect(url) as client:
        await client.ping()
        left = count

        async def pinger() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await client.ping()

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(pinger)
        return count / (time.perf_counter() - started)


async def _turns(url: str, sessions: int, turns: int) -> dict[str, float]:
    per_session = max(1, turns // sessions)
    latencies: list[float] = []

    async def open_gate(gate: str) -> dict[str, bool]:
        return {"opened": True}

    async def converse(session: Session) -> None:
        for _ in range(per_session):
            sent = time.perf_counter()
            reply = await session.respond("Open the gate.")
            latencies.append(time.perf_counter() - sent)
            assert reply.tool_calls[0].output == {"opened": True}, reply

    async with connect(url, timeout=None) as client:
        client.add_tool("open_gate", open_gate)
        created = await _create(client, sessions, per_session)
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for session in created:
                group.start_soon(converse, session)
        elapsed = time.perf_counter() - started
    return bench_tcp.turn_figures(sessions, latencies, elapsed)


async def _create(client: Client, sessions: int, per_session: int) -> list[Session]:
    created: list[Session] = []

    async def create(index: int) -> None:
        created.append(await client.create_session(f"s{index}", tools=[bench_stdio.TOOL],
                                                   model={"type": "scripted", "steps": SCRIPT * per_session}))

    async with anyio.create_task_group() as group:
        for index in range(sessions):
            group.start_soon(create, index)
    return created


def through_client(run: object, *args: object) -> object:
    server = Server()
    try:
        return anyio.run(run, server.url, *args)  # type: ignore[arg-type]
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--pings", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64, help="tasks pinging at once")
    parser.add_argument("--sessions", default="1,100")
    parser.add_argument("--turns", type=int, default=1000)
    args = parser.parse_args()
    client_pings = through_client(_pings, args.pings, args.concurrency)
    raw_pings = bench_tcp.bench_pings(args.pings)
    print(f"pings  client: {client_pings:,.0f}/s ({args.concurrency} tasks); raw pipelined: {raw_pings:,.0f}/s; "
          f"client/raw {client_pings / raw_pings:.2f}")  # type: ignore[operator]
    for sessions in (int(s) for s in args.sessions.split(",")):
        turns = max(args.turns, sessions)
        client_turns = through_client(_turns, sessions, turns)
        raw_turns = bench_tcp.bench_turns(sessions, turns)
        ratio = client_turns["turns_per_s"] / raw_turns["turns_per_s"]  # type: ignore[index]
        print(f"turns client: {bench_tcp._rounded(client_turns)}")  # type: ignore[arg-type]
        print(f"turns    raw: {bench_tcp._rounded(raw_turns)}; client/raw {ratio:.2f}")
    print(json.dumps({"bench": "client", "pings": {"client": client_pings, "raw": raw_pings}}))


if __name__ == "__main__":
    main()
