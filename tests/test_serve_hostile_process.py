"""Hostile clients against real ``oam-actors serve`` and ``stdio`` subprocesses: the server's
resident memory (``VmRSS`` in ``/proc/PID/status``) stays within the connections' bounds while
eight clients flood it without reading, each is closed with one log line, a well-behaved client
meanwhile gets the same answers, and stdio applies the same backpressure without losing a line.
Real time here: tiny timeouts, and only outcomes are asserted (the clock-exact rules are in
``test_serve_hostile.py``). The same on ``--runtime ray`` (slow)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serve_process import HANG_GUARD, OPEN_GATE, TOOL_ROUND, ServeProcess, TcpPeer, scripted

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")

BOUND = 1024 * 1024
LINE = 64 * 1024
FLOODERS = 8
SLACK = 48 * 1024 * 1024  # the interpreter's own growth: sessions, allocator arenas, buffers
LIMITS = ["--max-connection-bytes", str(BOUND), "--max-line-bytes", str(LINE)]


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def wait_until(condition: Callable[[], bool], *, sample: Callable[[], None] = lambda: None) -> None:
    """Poll ``condition`` (calling ``sample`` each round); hang-guarded, never a timing assertion."""
    deadline = time.monotonic() + 3 * HANG_GUARD
    while not condition():
        sample()
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


class Flooder:
    """A TCP client that creates sessions, then pipelines streamed turns and never reads again."""

    def __init__(self, address: tuple[str, int], sessions: int = 20, turns: int = 40_000) -> None:
        # A small receive buffer (set before connecting, so the window is small from the start):
        # the kernel holds less of what it does not read, and the server feels it sooner.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        self.sock.settimeout(HANG_GUARD)
        self.sock.connect(address)
        answers = self.sock.makefile("rb")
        for n in range(sessions):
            create = {"jsonrpc": "2.0", "id": n, "method": "session/create",
                      "params": {"session": f"s{n}", "model": scripted([{"text": "z" * 4000}])}}
            self.sock.sendall(json.dumps(create).encode() + b"\n")
            assert json.loads(answers.readline())["id"] == n
        flood = b"".join(STREAMED_TURN % (n, n % sessions) for n in range(turns))
        threading.Thread(target=send_until_closed, args=(self.sock, flood), daemon=True).start()


STREAMED_TURN = b'{"jsonrpc":"2.0","id":%d,"method":"session/respond","params":{"session":"s%d","prompt":"Go.","stream":true}}\n'


def send_until_closed(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the server closes it
        sock.sendall(data)


def answers(peer: TcpPeer) -> list[Any]:
    """A well-behaved client's ping and turn (compared with and without the flood)."""
    peer.call("session/create", {"session": "good", "model": scripted([{"text": "Hello."}])})
    turn = peer.call("session/respond", {"session": "good", "prompt": "Hi"})
    peer.call("session/delete", {"session": "good"})
    return [peer.call("ping"), turn["text"]]


def closed_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " closed: " in line]


def flood_and_measure(server: ServeProcess, flooders: int) -> None:
    """Flood with clients that do not read; the memory stays bounded and each is closed once."""
    assert server.tcp_address is not None
    with server.tcp() as good:
        baseline = answers(good)
        before = rss(server.proc.pid)
        peak = before

        def sample() -> None:
            nonlocal peak
            peak = max(peak, rss(server.proc.pid))

        crowd = [Flooder(server.tcp_address) for _ in range(flooders)]
        assert answers(good) == baseline  # during the flood: the same answers
        wait_until(lambda: len(closed_lines(server.stderr)) >= flooders, sample=sample)
        sample()
        assert answers(good) == baseline
        assert peak - before < flooders * BOUND + SLACK, (before, peak)
        lines = closed_lines(server.stderr)
        assert len(lines) == flooders, lines
        assert all("it has not read its output for 0.5 s" in line or "memory bound" in line for line in lines), lines
        assert "Traceback" not in server.stderr and "ExceptionGroup" not in server.stderr, server.stderr[-3000:]
        for flooder in crowd:
            flooder.sock.close()


def test_clients_that_do_not_read_cost_only_their_bound() -> None:
    args = ["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", *LIMITS, "--write-timeout", "0.5", "--max-sessions", "100"]
    with ServeProcess(args) as server:
        flood_and_measure(server, FLOODERS)
        # The server sees the last client's close a moment after the client makes it.
        wait_until(lambda: json.loads(server.get("/health")[2])["connections"] == 0)
        assert server.stop() == 0


def test_stdio_stops_reading_while_its_output_is_not_read_and_loses_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "oam_actors", "stdio", *LIMITS],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        create = {"jsonrpc": "2.0", "id": "c", "method": "session/create",
                  "params": {"session": "big", "instructions": "x" * 3000, "model": scripted([])}}
        proc.stdin.write(json.dumps(create).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == "c"
        before = rss(proc.pid)
        count = 10_000  # answered with 3 KB each: 30 MB of output nobody reads for now
        request = b'{"jsonrpc":"2.0","id":%d,"method":"session/transcript","params":{"session":"big"}}\n'
        written = 0

        def write() -> None:
            nonlocal written
            for n in range(count):
                proc.stdin.write(request % n)  # type: ignore[union-attr]
                written += 1
            proc.stdin.close()  # type: ignore[union-attr]

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        settle(lambda: written)
        assert written < count  # the bridge stopped reading: the writer is stalled
        assert rss(proc.pid) - before < BOUND + SLACK // 2
        ids = [json.loads(line)["id"] for line in proc.stdout]  # now read: everything arrives, in order
        assert ids == list(range(count))
        assert proc.wait(HANG_GUARD) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def settle(fingerprint: Callable[[], object]) -> None:
    """Until ``fingerprint()`` stays the same for half a second of polls; hang-guarded."""
    deadline = time.monotonic() + 3 * HANG_GUARD
    last, same = fingerprint(), 0
    while same < 25:
        time.sleep(0.02)
        now = fingerprint()
        same = same + 1 if now == last else 0
        last = now
        if time.monotonic() > deadline:
            raise AssertionError("never settled")


@pytest.mark.slow
def test_the_same_guarantees_on_ray() -> None:
    args = ["--tcp", "127.0.0.1:0", *LIMITS, "--write-timeout", "0.5", "--max-in-flight", "4",
            "--runtime", "ray", "--shards", "1"]
    with ServeProcess(args) as server:
        flood_and_measure(server, 2)
        with server.tcp() as client:
            client.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted(TOOL_ROUND[:1] * 5)})
            for _ in range(4):
                client.request("session/respond", {"session": "g", "prompt": "Open!"})
            refused = client.error(client.request("session/respond", {"session": "g", "prompt": "Open!"}))
            assert refused["data"] == {"code": "busy", "limit": 4}
            assert client.call("session/cancel", {"session": "g"}) == {"session": "g", "cancelled": 4}
        assert server.stop() == 0
