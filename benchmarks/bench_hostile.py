"""Clients that do not read, next to one that does: the server's memory and the good client's latency.

A real `oam-actors serve --tcp` on loopback with its default per-connection limits (32 MiB bound,
backpressure) and a short `--write-timeout`. Phases:

1. before: a well-behaved client measures ping and scripted-turn latency (sequential calls);
2. during: N clients (default 8) each create 20 sessions, then pipeline streamed turns and never
   read; the good client measures again while they flood; the server's resident memory (VmRSS) is
   sampled throughout;
3. after: how long until the server had closed every flooder (write timeout), and its memory then.

Prints p50 / p99 latency before and during with their ratio, and the memory before, at its peak
and after, next to N x the bound. Fair sharing (issue 15) aims at a good client's p50 during the
flood within GOAL_RATIO x of before; the last line says how far each p50 is from that. Loopback
only; every loop is bounded.

Run: python3 benchmarks/bench_hostile.py [--flooders 8] [--samples 200] [--turns 40000] [--write-timeout 5]
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
BOUND = 32 * MIB  # the server's default --max-connection-bytes
GOAL_RATIO = 5.0  # a good client's p50 during the flood, at most this many times its p50 before


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Client:
    """A blocking JSON-lines client that reads its answers."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.answers = self.sock.makefile("rb")
        self.next_id = 0

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.sock.sendall(json.dumps(message).encode() + b"\n")
        while True:
            answer = json.loads(self.answers.readline())
            if answer.get("id") == self.next_id and "method" not in answer:
                return answer.get("result", answer.get("error"))


class Flooder:
    """Creates sessions, then pipelines streamed turns without ever reading again."""

    def __init__(self, address: tuple[str, int], turns: int, sessions: int = 20) -> None:
        client = Client(address)
        for n in range(sessions):
            client.call("session/create", {"session": f"s{n}", "model": {"type": "scripted", "steps": [{"text": "z" * 400}]}})
        self.sock = client.sock
        self.payload = b"".join(
            b'{"jsonrpc":"2.0","id":%d,"method":"session/respond","params":{"session":"s%d","prompt":"Go.","stream":true}}\n'
            % (n, n % sessions)
            for n in range(turns)
        )
        threading.Thread(target=self._flood, daemon=True).start()

    def _flood(self) -> None:
        try:
            self.sock.sendall(self.payload)
        except OSError:
            pass  # closed by the server


def latencies(client: Client, samples: int) -> dict[str, list[float]]:
    pings, turns = [], []
    for _ in range(samples):
        started = time.perf_counter()
        client.call("ping")
        pings.append(time.perf_counter() - started)
    for _ in range(max(1, samples // 4)):
        started = time.perf_counter()
        client.call("session/respond", {"session": "good", "prompt": "Hi"})
        turns.append(time.perf_counter() - started)
    return {"ping": pings, "turn": turns}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--flooders", type=int, default=8)
    parser.add_argument("--samples", type=int, default=200, help="pings per phase (a quarter as many turns)")
    parser.add_argument("--turns", type=int, default=40_000, help="turns each flooder pipelines")
    parser.add_argument("--write-timeout", type=float, default=5.0)
    parser.add_argument("--server-args", default="", help="more options for the server (e.g. '--max-in-flight 256')")
    args = parser.parse_args()
    command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", "--max-sessions", "100",
               "--write-timeout", str(args.write_timeout), *args.server_args.split()]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        host, port = proc.stdout.readline().strip().removeprefix("tcp://").rsplit(":", 1)
        address = (host, int(port))
        good = Client(address)
        good.call("session/create", {"session": "good", "model": {"type": "scripted", "steps": []}})
        latencies(good, 20)  # warm up
        before = latencies(good, args.samples)
        rss_before = peak = rss(proc.pid)
        stop_sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop_sampling.wait(0.05):
                peak = max(peak, rss(proc.pid))

        threading.Thread(target=sample, daemon=True).start()
        flood_started = time.perf_counter()
        flooders = [Flooder(address, args.turns) for _ in range(args.flooders)]
        during = latencies(good, args.samples)
        deadline = time.monotonic() + 10 * args.write_timeout + 120
        while sum(" closed: " in line for line in stderr) < len(flooders) and time.monotonic() < deadline:
            time.sleep(0.05)
        closed_after = time.perf_counter() - flood_started
        stop_sampling.set()
        closed = sum(" closed: " in line for line in stderr)
        rss_after = rss(proc.pid)
        del flooders
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{args.flooders} clients that do not read, each pipelining {args.turns} streamed turns over 20 sessions; "
          f"write timeout {args.write_timeout:g} s, bound {BOUND // MIB} MiB per connection")
    print(f"server RSS: before {rss_before / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB (+{(peak - rss_before) / MIB:.0f} MiB; "
          f"{args.flooders} x bound = {args.flooders * BOUND // MIB} MiB), after {rss_after / MIB:.0f} MiB")
    print(f"flooders closed by the server: {closed}/{args.flooders}, the last {closed_after:.1f} s after the flood began")
    verdicts = []
    for kind in ("ping", "turn"):
        b50, b99 = percentile(before[kind], 0.5), percentile(before[kind], 0.99)
        d50, d99 = percentile(during[kind], 0.5), percentile(during[kind], 0.99)
        print(f"good client {kind:4}: p50 {1000 * b50:.2f} ms -> {1000 * d50:.2f} ms (x{d50 / b50:.1f}), "
              f"p99 {1000 * b99:.2f} ms -> {1000 * d99:.2f} ms (x{d99 / b99:.1f})")
        verdicts.append(f"{kind} x{d50 / b50:.1f} {'met' if d50 <= GOAL_RATIO * b50 else 'missed'}")
    print(f"fair sharing goal (p50 during <= {GOAL_RATIO:g} x before): {', '.join(verdicts)}")


if __name__ == "__main__":
    main()
