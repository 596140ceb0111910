"""Throughput and latency of `oam-actors serve --tcp`, next to the same figures for `oam-actors stdio`.

The measurements are bench_stdio.py's, over one TCP connection instead of a pipe:
1. Pipelined pings: N pings written as fast as possible; pings per second until the last answer.
2. Scripted session turns with one client tool round (script [toolCalls(open_gate), template]), the
   client answering every tool/call at once; turns per second and p50 / p99 latency per turn.

Run: python3 benchmarks/bench_tcp.py [--pings 50000] [--sessions 1,100,1000] [--turns 2000] [--no-stdio]
The server is pinned to one core with taskset when available, as in bench_stdio.py.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import bench_stdio
import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class TcpServer:
    """`oam-actors serve --tcp 127.0.0.1:0` and one client socket to it."""

    def __init__(self) -> None:
        command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", "--max-sessions", "100000", "--max-in-flight", "100000"]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
            command = ["taskset", "-c", "0", *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        host, port = self.proc.stdout.readline().decode().strip().removeprefix("tcp://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._write_lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._write_lock:
            self.sock.sendall(data)

    def chunks(self) -> Iterator[bytes]:
        while chunk := self.sock.recv(1 << 20):
            yield chunk

    def lines(self) -> Iterator[bytes]:
        buffer = b""
        for chunk in self.chunks():
            *complete, buffer = (buffer + chunk).split(b"\n")
            yield from complete

    def close(self) -> None:
        self.sock.close()
        self.proc.terminate()
        self.proc.wait(30)


def bench_pings(count: int) -> float:
    server = TcpServer()
    payload = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(count))
    done = threading.Event()
    seen = 0

    def read() -> None:
        nonlocal seen
        for chunk in server.chunks():
            seen += chunk.count(b"\n")
            if seen >= count:
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    start = time.perf_counter()
    server.write(payload)
    done.wait(120)
    elapsed = time.perf_counter() - start
    server.close()
    return seen / elapsed


def bench_turns(sessions: int, turns: int) -> dict[str, float]:
    """``turns`` turns spread over ``sessions`` sessions, all sessions busy at once."""
    server = TcpServer()
    per_session = max(1, turns // sessions)
    total = per_session * sessions
    script = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    created, finished = threading.Event(), threading.Event()
    pending_creates = sessions

    def on_message(message: dict) -> None:
        nonlocal pending_creates
        request_id = message.get("id")
        if message.get("method") == "tool/call":
            server.write(b'{"jsonrpc":"2.0","id":"%s","result":{"output":{"opened":true}}}\n' % request_id.encode())
        elif isinstance(request_id, int) and request_id < 0:
            pending_creates -= 1
            if pending_creates == 0:
                created.set()
        elif isinstance(request_id, int):
            with lock:
                latencies.append(time.perf_counter() - sent_at.pop(request_id))
                if len(latencies) == total:
                    finished.set()

    threading.Thread(target=_read_all, args=(server, on_message, finished), daemon=True).start()
    server.write(b"".join(
        _encode({"jsonrpc": "2.0", "id": -(i + 1), "method": "session/create",
                 "params": {"session": f"s{i}", "tools": [bench_stdio.TOOL],
                            "model": {"type": "scripted", "steps": script * per_session}}}) + b"\n"
        for i in range(sessions)
    ))
    created.wait(120)
    start = time.perf_counter()
    request_id = 0
    for _ in range(per_session):
        for i in range(sessions):
            request_id += 1
            with lock:
                sent_at[request_id] = time.perf_counter()
            server.write(b'{"jsonrpc":"2.0","id":%d,"method":"session/respond","params":{"session":"s%d","prompt":"Open the gate."}}\n' % (request_id, i))
    finished.wait(300)
    elapsed = time.perf_counter() - start
    server.close()
    return turn_figures(sessions, latencies, elapsed)


def turn_figures(sessions: int, latencies: list[float], elapsed: float) -> dict[str, float]:
    """Turns per second and p50 / p99 per turn of a run of ``elapsed`` seconds."""
    ordered = sorted(latencies)
    return {
        "sessions": sessions,
        "turns": len(latencies),
        "turns_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


def _read_all(server: TcpServer, on_message: Callable[[dict], None], finished: threading.Event) -> None:
    for line in server.lines():
        on_message(_decode(line))
        if finished.is_set():
            return


def _rounded(figures: dict[str, float]) -> str:
    return json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()})


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--pings", type=int, default=50_000)
    parser.add_argument("--sessions", default="1,100,1000")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--no-stdio", action="store_true", help="skip the stdio figures")
    args = parser.parse_args()
    print(f"pipelined pings  tcp: {bench_pings(args.pings):,.0f}/s")
    if not args.no_stdio:
        print(f"pipelined pings stdio: {bench_stdio.bench_pings(args.pings):,.0f}/s")
    for sessions in (int(s) for s in args.sessions.split(",")):
        turns = max(args.turns, sessions)
        print(f"turns  tcp: {_rounded(bench_turns(sessions, turns))}")
        if not args.no_stdio:
            print(f"turns stdio: {_rounded(bench_stdio.bench_turns(sessions, turns))}")


if __name__ == "__main__":
    main()
