"""A real ``oam-actors stdio`` subprocess driven line by line (used by the bridge tests).

Reading happens on a thread that parses every stdout line into a queue, so a test can wait for a
message with a hang guard (never a timing assertion) and check that stdout carries protocol
messages only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

HANG_GUARD = 20.0  # seconds; only to fail a hung test instead of blocking the suite
# A Ray-backed bridge starts a Ray instance, shards and model actors on its first requests: on a
# loaded 2-core machine that alone can take tens of seconds, which is slowness, not a hang.
RAY_HANG_GUARD = 90.0
UNPARSED = "$unparsed"  # key of the log entry standing for a stdout line that is not JSON


class BridgeProcess:
    def __init__(self, args: Sequence[str] = (), *, env: dict[str, str] | None = None) -> None:
        self.hang_guard = RAY_HANG_GUARD if "ray" in args else HANG_GUARD
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oam_actors", "stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # The bridge's own settings come from the arguments only, not from this environment.
            env={**{k: v for k, v in os.environ.items() if not k.startswith("OAM_")}, **(env or {})},
        )
        self.log: list[dict[str, Any]] = []
        self.raw_lines: list[bytes] = []
        self.eof = False
        self.cursor = 0
        self._cond = threading.Condition()
        self._taken_tool_calls: set[str] = set()
        self._next_id = 1000
        self._stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:  # kept, so a test can fail on a non-protocol stdout line
                message = {UNPARSED: line.decode(errors="replace")}
            with self._cond:
                self.raw_lines.append(line)
                self.log.append(message)
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")

    # --- sending ----------------------------------------------------------------------------

    def send_raw(self, data: bytes | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data.encode() if isinstance(data, str) else data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message, separators=(",", ":")) + "\n")

    def request(self, method: str, params: Any = None, *, id: Any = None) -> Any:
        """Send a request; returns its id."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return id

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def reply(self, tool_id: str, result: Any = None, *, error: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": tool_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        self.send(message)

    def close_input(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    # --- receiving --------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], start: int = 0) -> int:
        """Index in ``log`` of the first message at or after ``start`` that matches."""
        with self._cond:
            index = start
            while True:
                while index < len(self.log):
                    if predicate(self.log[index]):
                        return index
                    index += 1
                if self.eof:
                    raise EOFError(f"the bridge closed stdout; stderr:\n{self.stderr}")
                if not self._cond.wait(timeout=self.hang_guard):
                    raise TimeoutError(f"no matching message; log tail: {self.log[-5:]}")

    def next(self) -> dict[str, Any]:
        """The next message in arrival order (a cursor over ``log``)."""
        index = self.wait_for(lambda m: True, self.cursor)
        self.cursor = index + 1
        return self.log[index]

    def response(self, id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The response to request ``id`` and, in order, the messages about that request
        (``params.requestId == id``) that came before it."""
        index = self.wait_for(lambda m: m.get("id") == id and ("result" in m or "error" in m))
        related = [m for m in self.log[:index] if isinstance(m.get("params"), dict) and m["params"].get("requestId") == id]
        return self.log[index], related

    def result(self, id: Any) -> Any:
        message, _ = self.response(id)
        assert "result" in message, message
        return message["result"]

    def error(self, id: Any) -> dict[str, Any]:
        message, _ = self.response(id)
        assert "error" in message, message
        return message["error"]

    def call(self, method: str, params: Any = None) -> Any:
        return self.result(self.request(method, params))

    def tool_call(self, request_id: Any = None) -> dict[str, Any]:
        """The next ``tool/call`` not yet taken (of request ``request_id`` when given)."""
        index = self.wait_for(
            lambda m: m.get("method") == "tool/call"
            and m["id"] not in self._taken_tool_calls
            and (request_id is None or m["params"]["requestId"] == request_id)
        )
        message = self.log[index]
        self._taken_tool_calls.add(message["id"])
        return message

    def wait_until(self, condition: Callable[[list[dict[str, Any]]], bool]) -> None:
        """Block until ``condition(log)`` holds (checked after every new message)."""
        with self._cond:
            while not condition(self.log):
                if self.eof:
                    raise EOFError(f"the bridge closed stdout; stderr:\n{self.stderr}")
                if not self._cond.wait(timeout=self.hang_guard):
                    raise TimeoutError(f"condition not reached; log tail: {self.log[-5:]}")

    def since(self, start: int) -> list[dict[str, Any]]:
        """A copy of the messages logged at index ``start`` and later."""
        with self._cond:
            return list(self.log[start:])

    def wait_exit(self) -> int:
        """The exit status, once the process has ended by itself (stdin left open)."""
        return self.proc.wait(timeout=self.hang_guard)

    def exchange(self, *lines: bytes | str) -> list[dict[str, Any]]:
        """Send ``lines`` (each gets its newline) and a ``ping``; the messages written in between.

        Only for immediate methods: the ping's answer comes after every answer they cause.
        """
        start = self.count()
        self._next_id += 1
        sync = f"sync-{self._next_id}"
        ping = json.dumps({"jsonrpc": "2.0", "id": sync, "method": "ping"})
        payload = [line.encode() if isinstance(line, str) else line for line in (*lines, ping)]
        self.send_raw(b"".join(line + b"\n" for line in payload))
        end = self.wait_for(lambda m: m.get("id") == sync and is_response(m), start)
        return self.since(start)[: end - start]

    def index_of(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        return self.wait_for(predicate)

    def count(self) -> int:
        with self._cond:
            return len(self.log)

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout=self.hang_guard)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def __enter__(self) -> BridgeProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def is_response(message: dict[str, Any]) -> bool:
    """A response to a client request (not a bridge request or notification)."""
    return "method" not in message and ("result" in message or "error" in message)


def check_order(log: list[dict[str, Any]]) -> None:
    """Over a whole run with unique request ids: at most one response per id, and nothing about a
    request (events, ``tool/call``, ``tool/cancel``: ``params.requestId``) after its response.
    Answers with ``id: null`` (lines that were never requests) are not counted."""
    answered: set[Any] = set()
    for message in log:
        if is_response(message) and message["id"] is not None:
            assert message["id"] not in answered, f"two responses for id {message['id']!r}"
            answered.add(message["id"])
        elif isinstance(message.get("params"), dict) and "requestId" in message["params"]:
            assert message["params"]["requestId"] not in answered, f"{message} came after its response"


def scripted(steps: list[Any], **extra: Any) -> dict[str, Any]:
    return {"type": "scripted", "steps": steps, **extra}


OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
