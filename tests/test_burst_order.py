"""A pipelined burst of NPC talks with a client grounding tool answers in arrival order, over a
real stdio pipe and a real TCP socket (issue 31 item 4; the figures are bench_burst.py's).

The client is the one game servers write: one connection, every talk written before any answer,
each ``tool/call`` answered as soon as it is read, the answers written ahead of the rest of the
burst but behind whatever the pipe or the socket already holds. The server runs two turns at once
(``--max-running-turns 2``), so a connection keeps at most ``4 x 2`` turns open (started and not
finished, paused at their tool call included). Order, never timing: from the wire log alone, the
p-th response (from 0) is of one of the first ``p + 8`` talks, and the k-th tool call (from 1) is
written once ``k - 8`` talks have answered.
"""

from __future__ import annotations

import itertools
import queue
import socket
import subprocess
import sys
import threading
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest

HANG_GUARD = 120.0  # seconds; only to fail a hung test instead of blocking the suite
TALKS = 240
PIECE = 20  # talks written at once before the writer looks for tool answers to send
MAX_RUNNING = 2
OPEN_LIMIT = 4 * MAX_RUNNING  # runtime.OPEN_PER_SLOT per slot
STOCK = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
LIMITS = ["--max-npcs", str(TALKS), "--max-in-flight", str(2 * TALKS), "--max-running-turns", str(MAX_RUNNING)]


def npc(n: int) -> dict[str, Any]:
    steps = [{"toolCalls": [{"name": "check_stock", "arguments": {"item": "sword"}}]},
             {"template": "In stock: {toolOutput}"}]
    return {"npc": f"n{n}", "persona": {"name": f"Trader {n}", "role": "a trader"}, "world": "village",
            "tools": [{"name": "check_stock", "description": "Stock of an item.", "parameters": STOCK}],
            "options": {"groundingTool": "check_stock", "playerOptionCount": 0, "replyFormat": "text"},
            "model": {"type": "scripted", "steps": steps}}


class Client:
    """One connection: a reader thread logs every message and queues an answer to each
    ``tool/call`` as it arrives; a writer thread writes what is queued, answers first, then the
    burst a piece at a time (a piece being written is finished first: a game server with one
    socket)."""

    ANSWER, PIECE = 0, 1  # what the writer takes first

    def __init__(self, transport: type[Stdio | Tcp]) -> None:
        self.proc = subprocess.Popen(transport.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self._transport = transport(self.proc)
        self.log: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._out: queue.PriorityQueue[tuple[int, int, bytes]] = queue.PriorityQueue()
        self._order = itertools.count()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._send, daemon=True).start()

    def _read(self) -> None:
        for line in self._transport.lines:
            message = msgspec.json.decode(line)
            if message.get("method") == "tool/call":
                answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"output": {"stock": 3}}}
                self._out.put((self.ANSWER, next(self._order), msgspec.json.encode(answer) + b"\n"))
            with self._cond:
                self.log.append(message)
                self._cond.notify_all()

    def _send(self) -> None:
        while True:
            self._transport.write(self._out.get()[2])

    def send(self, requests: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Queue ``(id, method, params)`` requests, :data:`PIECE` lines a write."""
        lines = [msgspec.json.encode({"jsonrpc": "2.0", "id": i, "method": m, "params": p}) + b"\n"
                 for i, m, p in requests]
        for start in range(0, len(lines), PIECE):
            self._out.put((self.PIECE, next(self._order), b"".join(lines[start:start + PIECE])))

    def wait(self, ids: list[str]) -> None:
        wanted = set(ids)
        with self._cond:
            answered = lambda: wanted <= {m.get("id") for m in self.log if "method" not in m}  # noqa: E731
            assert self._cond.wait_for(answered, timeout=HANG_GUARD), "the server stopped answering"

    def close(self) -> None:
        self._transport.close()
        self.proc.wait(HANG_GUARD)


class Stdio:
    """``oam-actors stdio``: the burst goes down its stdin pipe."""

    command = [sys.executable, "-m", "oam_actors", "stdio", *LIMITS]

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.lines, self._stdin = iter(proc.stdout), proc.stdin

    def write(self, data: bytes) -> None:
        self._stdin.write(data)
        self._stdin.flush()

    def close(self) -> None:
        self._stdin.close()


class Tcp:
    """``oam-actors serve --tcp``: the burst goes through one socket."""

    command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", *LIMITS]

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        address = urlsplit(proc.stdout.readline().decode().strip())
        assert address.hostname is not None and address.port is not None, address
        self._proc = proc
        self._sock = socket.create_connection((address.hostname, address.port))
        self.lines, self.write = iter(self._sock.makefile("rb")), self._sock.sendall

    def close(self) -> None:
        self._sock.close()
        self._proc.terminate()


@pytest.mark.parametrize("transport", [Stdio, Tcp], ids=["stdio", "tcp"])
def test_a_pipelined_burst_with_client_tools_answers_in_arrival_order(transport: type[Stdio | Tcp]) -> None:
    client = Client(transport)
    try:
        client.send([("world", "world/create", {"world": "village", "state": {}})])
        client.wait(["world"])
        creates = [(f"c{n}", "npc/create", npc(n)) for n in range(TALKS)]
        client.send(creates)
        client.wait([i for i, _, _ in creates])
        start = len(client.log)
        talks = [(f"t{n}", "npc/talk", {"npc": f"n{n}", "line": "A sword?"}) for n in range(TALKS)]
        client.send(talks)
        client.wait([i for i, _, _ in talks])
    finally:
        client.close()
    arrival = {i: position for position, (i, _, _) in enumerate(talks)}
    answered: list[int] = []
    tool_calls = 0
    for message in client.log[start:]:
        if message.get("method") == "tool/call":
            tool_calls += 1
            # A talk starts (and calls its tool) only once all but OPEN_LIMIT earlier talks have answered.
            assert len(answered) >= tool_calls - OPEN_LIMIT, (tool_calls, len(answered))
        elif message.get("id") in arrival:
            assert message["result"]["line"] == 'In stock: {"stock":3}', message
            answered.append(arrival[message["id"]])
    assert (tool_calls, sorted(answered)) == (TALKS, list(range(TALKS)))
    # Completion follows arrival: the p-th answer is of one of the first p + OPEN_LIMIT talks.
    assert all(talk < position + OPEN_LIMIT for position, talk in enumerate(answered)), answered
