"""``oam-actors stdio --runtime ray`` as a user runs it (a private Ray instance of its own): a
shard process killed under live sessions and a world subscription. stdout carries JSON-RPC
messages only, Ray's report of the dead worker included (it goes to stderr), and every script,
and the subscription, goes on after the restart.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bridge_process import UNPARSED, BridgeProcess
from test_cluster_ray import HANG_GUARD

from oam_actors.cluster import shard_of
from oam_actors import Address

pytestmark = pytest.mark.slow


def descendants(root: int) -> dict[int, bytes]:
    """Every process under process ``root``, each with its command line."""
    children: dict[int, list[int]] = {}
    titles: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            titles[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            found[child] = titles[child]
    return found


def shard_processes(root: int) -> set[int]:
    """Pids of the shard processes under process ``root`` (its private Ray's workers)."""
    return {pid for pid, title in descendants(root).items() if title.startswith(b"ray::ShardHost")}


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + HANG_GUARD
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def respond_until_answered(process: BridgeProcess, session: str, prompt: str) -> dict[str, Any]:
    """A turn's result; a turn the dying shard had received fails -32603 and is sent again."""
    while True:
        message, _ = process.response(process.request("session/respond", {"session": session, "prompt": prompt}))
        if "result" in message:
            return message["result"]
        assert message["error"]["code"] == -32603, message


def test_stdio_on_ray_keeps_stdout_json_and_everything_a_killed_shard_held() -> None:
    sessions = [f"s{n}" for n in range(6)]
    assert {shard_of(Address("session", s), 2) for s in sessions} == {0, 1}
    with BridgeProcess(["--runtime", "ray", "--shards", "2"]) as process:
        process.call("initialize", {"protocolVersion": "1.0"})
        for session in sessions:
            process.call("session/create", {"session": session,
                                            "model": {"type": "scripted", "steps": [{"text": f"reply {n}"} for n in range(3)]}})
            assert respond_until_answered(process, session, "one")["text"] == "reply 0"
        world = next(w for w in (f"w{n}" for n in range(50)) if shard_of(Address("world", w), 2) == 0)
        process.call("world/create", {"world": world, "state": {"gate": "closed"}})
        subscription = process.call("world/subscribe", {"world": world, "path": "gate"})["subscription"]
        shards = wait_for(lambda: shard_processes(process.proc.pid), "two shard processes")
        assert len(shards) == 2
        victim = max(shards)
        os.kill(victim, signal.SIGKILL)
        # Ray reports the death on the driver; it must land in the log, not in the protocol.
        wait_for(lambda: "worker died" in process.stderr, "Ray's report of the dead worker")
        for session in sessions:  # every script goes on where it was, on both shards
            assert respond_until_answered(process, session, "two")["text"] == "reply 1"
        wait_for(lambda: len(shard_processes(process.proc.pid) - shards) == 1, "the restarted shard")
        start = process.count()
        process.call("world/set", {"world": world, "path": "gate", "value": "open"})
        changed = [m for m in process.since(start) if m.get("method") == "world/changed"]
        assert [(m["params"]["subscription"], m["params"]["newValue"]) for m in changed] == [(subscription, "open")]
        assert process.close() == 0
    assert [line for line in process.log if UNPARSED in line] == []
