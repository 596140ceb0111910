"""A burst with a client tool: does it answer in arrival order, over stdio and over TCP?

N NPCs (default 10,000) on one world, each with the client tool ``check_stock`` as its
``groundingTool`` and the script [toolCalls(check_stock), reply]. One connection pipelines one
``npc/talk`` per NPC; the client answers each ``tool/call`` as soon as it reads it: its writer
sends a waiting tool answer before the next piece of the burst (:data:`PIECE` talks), as a game
server with one socket does. Printed per transport: the burst's turns per second (first talk
written → last response read), the p50 / p99 latency, and when the median response arrived as a
share of the burst's time (goal: at most 60 %; 50 % is arrival order at a steady rate), with the
server's CPU time per turn and the load average. Two figures say why the median is where it is:
how many talks were answered before the talk written just before them (out of arrival order), and
when the server had read the whole burst (a ``ping`` written behind the last talk is answered as
soon as it is read): the client's tool answers queue behind whatever of the burst the pipe or the
socket already holds, so no turn can finish before the server has read that far.

Run: python3 benchmarks/bench_burst.py [--npcs 10000] [--transports stdio,tcp] [--repeat 1]
     [--max-running-turns N]
The server is pinned to one core with taskset when available (as in bench_stdio.py).
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import collections
import io
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from _profiling import cpu_seconds, load_average
import bench_crowd as crowd
from oam_actors.cli.runtime import DEFAULT_MAX_RUNNING_TURNS

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder().decode
PIECE = 50
"""Talks the client writes at once before it looks for tool answers to send."""
STOCK = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}


def create_params(n: int) -> dict[str, Any]:
    """bench_crowd's NPC, grounded by a client tool instead of the world's."""
    params = crowd.create_params(n)
    params["model"]["steps"][0] = {"toolCalls": [{"name": "check_stock", "arguments": {"item": "sword"}}]}
    params["tools"] = [{"name": "check_stock", "description": "Stock and price of an item.", "parameters": STOCK}]
    params["options"]["groundingTool"] = "check_stock"
    return params


def _line(request_id: Any, method: str, params: dict[str, Any]) -> bytes:
    return _encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + b"\n"


class Connection:
    """One server process and one connection to it: a reader thread that answers tool calls and
    records responses, a writer thread that sends tool answers ahead of the rest of a burst."""

    def __init__(self, command: list[str], connect: Callable[[subprocess.Popen[bytes]], tuple[Any, Any, Callable[[], None]]]) -> None:
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
            command = ["taskset", "-c", "0", *command]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._read_from, self._write_to, self._close = connect(self.proc)
        self.arrived: dict[Any, float] = {}
        self.results: dict[Any, Any] = {}
        self._cond = threading.Condition()
        self._answers: collections.deque[bytes] = collections.deque()
        self._pieces: collections.deque[bytes] = collections.deque()
        self._wake = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        for line in self._read_from:
            message = _decode(line)
            if message.get("method") == "tool/call":
                self._answers.append(_encode({"jsonrpc": "2.0", "id": message["id"],
                                              "result": {"output": {"stock": 3, "price": 45}}}) + b"\n")
                self._wake.set()
            elif "id" in message and "method" not in message:
                with self._cond:
                    self.arrived[message["id"]] = time.perf_counter()
                    self.results[message["id"]] = message.get("result", message.get("error"))
                    self._cond.notify_all()

    def _write(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while self._answers or self._pieces:
                answers = []
                while self._answers:
                    answers.append(self._answers.popleft())
                if answers:
                    self._write_to(b"".join(answers))
                elif self._pieces:
                    self._write_to(self._pieces.popleft())

    def send(self, requests: list[tuple[Any, str, dict[str, Any]]]) -> float:
        """Queue the requests in pieces of :data:`PIECE`; returns when the first was queued."""
        lines = [_line(*request) for request in requests]
        started = time.perf_counter()
        for start in range(0, len(lines), PIECE):
            self._pieces.append(b"".join(lines[start:start + PIECE]))
        self._wake.set()
        return started

    def wait(self, ids: list[Any]) -> None:
        with self._cond:
            while not all(i in self.arrived for i in ids):
                if not self._cond.wait(timeout=600):
                    raise TimeoutError("the server stopped answering")

    def close(self) -> None:
        self._close()
        self.proc.wait(60)


def _limits(npcs: int, max_running: int) -> list[str]:
    return ["--max-npcs", str(npcs), "--max-in-flight", str(2 * npcs),
            "--max-connection-bytes", str(max(32, npcs // 50) << 20), "--max-running-turns", str(max_running)]


def stdio(npcs: int, max_running: int) -> Connection:
    def connect(proc: subprocess.Popen[bytes]) -> tuple[Iterator[bytes], Callable[[bytes], None], Callable[[], None]]:
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def write(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        return io.BufferedReader(proc.stdout, buffer_size=1 << 20), write, stdin.close  # type: ignore[arg-type]

    return Connection([sys.executable, "-m", "oam_actors", "stdio", *_limits(npcs, max_running)], connect)


def tcp(npcs: int, max_running: int) -> Connection:
    def connect(proc: subprocess.Popen[bytes]) -> tuple[Iterator[bytes], Callable[[bytes], None], Callable[[], None]]:
        assert proc.stdout is not None
        host, port = proc.stdout.readline().decode().strip().removeprefix("tcp://").rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def close() -> None:
            sock.close()
            proc.terminate()

        return sock.makefile("rb", buffering=1 << 20), sock.sendall, close

    command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", *_limits(npcs, max_running)]
    return Connection(command, connect)


TRANSPORTS = {"stdio": stdio, "tcp": tcp}


class Burst(msgspec.Struct):
    seconds: float
    latencies: list[float]
    median_share: float  # when the median response arrived, as a share of the burst
    cpu: float  # the server's CPU seconds for the burst
    out_of_order: int  # talks answered before the talk written just before them
    read_share: float  # when the ping behind the burst was answered, as a share of the burst


def burst(transport: str, npcs: int, max_running: int) -> Burst:
    connection = TRANSPORTS[transport](npcs, max_running)
    try:
        connection.send([("world", "world/create", {"world": "village", "state": {}})])
        connection.wait(["world"])
        creates = [(f"c{n}", "npc/create", create_params(n)) for n in range(npcs)]
        connection.send(creates)
        connection.wait([i for i, _, _ in creates])
        pid = connection.proc.pid
        cpu_before = cpu_seconds(pid)
        talks = [(f"t{n}", "npc/talk", {"npc": f"n{n}", "line": "What does a sword cost?"}) for n in range(npcs)]
        started = connection.send([*talks, ("read", "ping", {})])
        connection.wait([*(i for i, _, _ in talks), "read"])
        cpu = cpu_seconds(pid) - cpu_before
        arrivals = sorted(connection.arrived[i] - started for i, _, _ in talks)
        result = connection.results["t0"]
        assert result["toolCalls"][0]["output"] == {"stock": 3, "price": 45}, result
    finally:
        connection.close()
    seconds = arrivals[-1]
    in_order = [connection.arrived[i] for i, _, _ in talks]
    late = sum(1 for before, after in itertools.pairwise(in_order) if after < before)
    read = (connection.arrived["read"] - started) / seconds
    return Burst(seconds, arrivals, crowd.percentile(arrivals, 0.5) / seconds, cpu, late, read)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--npcs", type=int, default=10_000)
    parser.add_argument("--transports", default="stdio,tcp", help="comma-separated: stdio, tcp")
    parser.add_argument("--repeat", type=int, default=1, help="bursts per transport (medians printed)")
    parser.add_argument("--max-running-turns", type=int, default=DEFAULT_MAX_RUNNING_TURNS, metavar="N",
                        help=f"turns running at once (default {DEFAULT_MAX_RUNNING_TURNS}, the CLI's)")
    args = parser.parse_args()
    for transport in args.transports.split(","):
        runs = [burst(transport, args.npcs, args.max_running_turns) for _ in range(args.repeat)]
        seconds = statistics.median(r.seconds for r in runs)
        share = statistics.median(r.median_share for r in runs)
        p50, p99 = (statistics.median(crowd.percentile(r.latencies, q) for r in runs) * 1000 for q in (0.5, 0.99))
        cpu = statistics.median(r.cpu for r in runs)
        late = statistics.median(r.out_of_order for r in runs)
        read = statistics.median(r.read_share for r in runs)
        print(f"burst over {transport}: {args.npcs:,} pipelined npc/talk with a client grounding tool, "
              f"at most {args.max_running_turns} turns at once ({load_average()}; median of {len(runs)})")
        print(f"  turns:   {args.npcs / seconds:>10,.0f} turns/s  ({seconds:.2f} s); "
              f"{cpu / args.npcs * 1e6:,.0f} µs server CPU per turn")
        print(f"  latency: p50 {p50:,.0f} ms, p99 {p99:,.0f} ms; the median response at {share:.0%} of the burst "
              "(goal <= 60%)")
        print(f"  order:   {late:,.0f} talks answered before the one written just before them; the whole burst read at {read:.0%} of it")


if __name__ == "__main__":
    main()
