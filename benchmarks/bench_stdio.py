"""Throughput and latency of `oam-actors stdio`, measured over the real subprocess.

1. Pipelined pings: N pings written as fast as possible; pings per second until the last answer.
2. Scripted session turns with one client tool round, at several concurrency levels: each session's
   script is [toolCalls(open_gate), template]; the client answers every tool/call at once. Reports
   turns per second and p50 / p99 latency per turn (respond sent → response read).

Run: python3 benchmarks/bench_stdio.py [--pings 50000] [--sessions 1,100,1000] [--turns 2000]
The client runs in this process (a reader thread and a writer thread); the bridge process is pinned
to one core with taskset when available so the figure is "one core of this machine".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def start_bridge() -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "oam_actors", "stdio", "--max-sessions", "100000", "--max-in-flight", "100000"]
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "0", *command]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)


def bench_pings(count: int) -> float:
    proc = start_bridge()
    assert proc.stdin and proc.stdout
    payload = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(count))
    done = threading.Event()
    seen = 0

    def read() -> None:
        nonlocal seen
        while seen < count:
            chunk = os.read(proc.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
            if not chunk:
                break
            seen += chunk.count(b"\n")
        done.set()

    threading.Thread(target=read, daemon=True).start()
    start = time.perf_counter()
    proc.stdin.write(payload)
    proc.stdin.flush()
    done.wait(120)
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(30)
    return seen / elapsed


TOOL = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}


def bench_turns(sessions: int, turns: int) -> dict[str, float]:
    """``turns`` turns spread over ``sessions`` sessions, all sessions busy at once."""
    proc = start_bridge()
    assert proc.stdin and proc.stdout
    per_session = max(1, turns // sessions)
    total = per_session * sessions
    script = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]
    lock = threading.Lock()
    write_lock = threading.Lock()
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    created = threading.Event()
    finished = threading.Event()
    pending_creates = sessions

    def write(data: bytes) -> None:
        with write_lock:
            proc.stdin.write(data)  # type: ignore[union-attr]

    def lines():
        buffer = b""
        while True:
            chunk = os.read(proc.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
            if not chunk:
                return
            *complete, buffer = (buffer + chunk).split(b"\n")
            yield from complete

    def read() -> None:
        nonlocal pending_creates
        for line in lines():
            message = _decode(line)
            if message.get("method") == "tool/call":
                write(b'{"jsonrpc":"2.0","id":"%s","result":{"output":{"opened":true}}}\n' % message["id"].encode())
                continue
            request_id = message.get("id")
            if isinstance(request_id, int) and request_id < 0:
                pending_creates -= 1
                if pending_creates == 0:
                    created.set()
                continue
            if isinstance(request_id, int):
                with lock:
                    latencies.append(time.perf_counter() - sent_at.pop(request_id))
                    if len(latencies) == total:
                        finished.set()
                        return

    threading.Thread(target=read, daemon=True).start()
    creates = b"".join(
        _encode({"jsonrpc": "2.0", "id": -(i + 1), "method": "session/create",
                 "params": {"session": f"s{i}", "tools": [TOOL],
                            "model": {"type": "scripted", "steps": script * per_session}}}) + b"\n"
        for i in range(sessions)
    )
    write(creates)
    created.wait(120)
    requests = []
    request_id = 0
    for _ in range(per_session):
        for i in range(sessions):
            request_id += 1
            requests.append((request_id, b'{"jsonrpc":"2.0","id":%d,"method":"session/respond","params":{"session":"s%d","prompt":"Open the gate."}}\n' % (request_id, i)))
    start = time.perf_counter()
    for rid, line in requests:
        with lock:
            sent_at[rid] = time.perf_counter()
        write(line)
    finished.wait(300)
    elapsed = time.perf_counter() - start
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait(60)
    ordered = sorted(latencies)
    return {
        "sessions": sessions,
        "turns": len(latencies),
        "turns_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pings", type=int, default=50_000)
    parser.add_argument("--sessions", default="1,100,1000")
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    print(f"pipelined pings: {bench_pings(args.pings):,.0f}/s")
    for sessions in (int(s) for s in args.sessions.split(",")):
        figures = bench_turns(sessions, max(args.turns, sessions))
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
