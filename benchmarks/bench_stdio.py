"""Throughput and latency of `oam-actors stdio`, measured over the real subprocess.

1. Pipelined pings: N pings written as fast as possible, once a first ping is answered (the
   server's start-up is not counted); pings per second until the last answer.
2. Scripted session turns with one client tool round, at several concurrency levels: each session's
   script is [toolCalls(open_gate), template]; the client answers every tool/call at once. Reports
   turns per second, p50 / p99 latency per turn (respond sent → response read) and the server's
   CPU time per turn (user + system, less sensitive to other load than the rate).

Every figure is printed next to the same measurement against the floor, ``floor_server.py`` (a
bare msgspec line server sending the same messages), with the ratio, and next to the load average.
Goal: tool-round turns at 100 sessions >= 5,000/s.

Run: python3 benchmarks/bench_stdio.py [--pings 50000] [--sessions 1,100,1000] [--turns 2000]
     [--no-floor] [--profile stdio.prof]
The client runs in this process (a reader thread and one writer thread, so reading never waits on a
write: the deadlock a full pipe both ways would make); the server process is pinned
to one core with taskset when available so the figure is "one core of this machine". With
``--profile`` the bridge runs under cProfile (one run of the turns at the first sessions figure)
and the top entries are printed.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

import msgspec
from _profiling import cpu_seconds, load_average, print_top, python_command

_encode = msgspec.json.encode
_decode = msgspec.json.decode


FLOOR = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_server.py")]
GOAL_TURNS = 5000


def bridge_command(profile: str | None = None) -> list[str]:
    return [*python_command(profile), "-m", "oam_actors", "stdio", "--max-sessions", "100000", "--max-in-flight", "100000"]


def start_bridge(command: list[str] | None = None) -> subprocess.Popen[bytes]:
    command = command or bridge_command()
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "0", *command]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)


def bench_pings(count: int, command: list[str] | None = None) -> float:
    """Pings per second once the server answers (its start-up is not counted: a first ping is
    answered before the clock starts)."""
    proc = start_bridge(command)
    assert proc.stdin and proc.stdout
    payload = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(count))
    ready, done = threading.Event(), threading.Event()
    seen = -1  # the warm-up ping's answer brings it to 0

    def read() -> None:
        nonlocal seen
        while seen < count:
            chunk = os.read(proc.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
            if not chunk:
                break
            seen += chunk.count(b"\n")
            ready.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    proc.stdin.write(b'{"jsonrpc":"2.0","id":-1,"method":"ping"}\n')
    proc.stdin.flush()
    ready.wait(120)
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


def bench_turns(sessions: int, turns: int, command: list[str] | None = None) -> dict[str, float]:
    """``turns`` turns spread over ``sessions`` sessions, all sessions busy at once."""
    proc = start_bridge(command)
    assert proc.stdin and proc.stdout
    per_session = max(1, turns // sessions)
    total = per_session * sessions
    script = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]
    lock = threading.Lock()
    outgoing: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    errors: list[int | None] = []
    created = threading.Event()
    finished = threading.Event()
    pending_creates = sessions

    def write(data: bytes) -> None:
        outgoing.put(data)

    def send() -> None:
        # The only writer, so the reader never waits on a write: were it to block behind a write
        # to a full pipe, the server (the floor's one thread, or the bridge holding back input
        # while its output is unread) would block writing to us, and neither side would move.
        while True:
            chunks = [outgoing.get()]
            while len(chunks) < 256 and not outgoing.empty():  # whatever else is queued, in one write
                chunks.append(outgoing.get())
            try:
                proc.stdin.write(b"".join(filter(None, chunks)))  # type: ignore[union-attr]
            except BrokenPipeError:
                return
            if chunks[-1] is None:  # the last put: nothing is written after it
                return

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
                    latency = time.perf_counter() - sent_at.pop(request_id)
                    if "error" in message:  # refused (e.g. the connection's byte limit): not a turn
                        errors.append(message["error"].get("code"))
                    else:
                        latencies.append(latency)
                    if len(latencies) + len(errors) == total:
                        finished.set()
                        return

    threading.Thread(target=read, daemon=True).start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
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
    cpu_before = cpu_seconds(proc.pid)
    start = time.perf_counter()
    for rid, line in requests:
        with lock:
            sent_at[rid] = time.perf_counter()
        write(line)
    finished.wait(300)
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(proc.pid) - cpu_before
    outgoing.put(None)
    sender.join(30)
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait(60)
    ordered = sorted(latencies) or [float("nan")]
    if errors:
        print(f"  warning: {len(errors)} of {total} turns answered with an error "
              f"(codes {sorted(set(errors), key=str)}); only the others count", file=sys.stderr)
    turned = len(latencies)
    return {
        "sessions": sessions,
        "turns": turned,
        "turns_per_s": turned / elapsed,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "server_cpu_us_per_turn": 1e6 * cpu / max(1, turned),
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--pings", type=int, default=50_000)
    parser.add_argument("--sessions", default="1,100,1000")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--no-floor", action="store_true", help="skip the floor server's figures")
    parser.add_argument("--profile", metavar="PATH", help="profile the bridge (one turns run) into PATH")
    args = parser.parse_args()
    sessions_list = [int(s) for s in args.sessions.split(",")]
    if args.profile:
        figures = bench_turns(sessions_list[0], max(args.turns, sessions_list[0]), bridge_command(args.profile))
        print(f"profiled run ({load_average()}): {_rounded(figures)}")
        print_top(args.profile)
        return
    pings = bench_pings(args.pings)
    floor = None if args.no_floor else bench_pings(args.pings, FLOOR)
    print(f"pipelined pings: {pings:,.0f}/s{_versus(pings, floor)} ({load_average()})")
    for sessions in sessions_list:
        turns = max(args.turns, sessions)
        figures = bench_turns(sessions, turns)
        floor_figures = None if args.no_floor else bench_turns(sessions, turns, FLOOR)
        rate = figures["turns_per_s"]
        goal = f"; goal >= {GOAL_TURNS:,}/s" if sessions == 100 else ""
        print(f"tool-round turns, {sessions} sessions: {rate:,.0f}/s"
              f"{_versus(rate, floor_figures and floor_figures['turns_per_s'])}{goal} ({load_average()})")
        print(f"  bridge: {_rounded(figures)}")
        if floor_figures is not None:
            print(f"  floor:  {_rounded(floor_figures)}")


def _versus(value: float, floor: float | None) -> str:
    # Three significant digits: a turn is a hundred times a floor turn, and 0.00 says nothing.
    return "" if floor is None else f", floor {floor:,.0f}/s, ratio {value / floor:.3g}"


def _rounded(figures: dict[str, float]) -> str:
    return json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()})


if __name__ == "__main__":
    main()
