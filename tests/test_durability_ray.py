"""``oam-actors stdio --runtime ray --state-store`` (a private Ray instance of its own), its front
door killed with SIGKILL under load and started again on the same file: every answered turn and
world change is there, nothing torn (the same store and the same rules as on LocalSystem)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_process import BridgeProcess, scripted
from test_cluster_stdio import descendants

pytestmark = pytest.mark.slow


def kill_all(pids: set[int]) -> None:
    """The killed front door's Ray processes that outlived it (its raylet and shards share its
    fate; Ray's dashboard and runtime-env agents are left to their parent, init)."""
    deadline = time.monotonic() + 5
    while (alive := {pid for pid in pids if Path(f"/proc/{pid}").exists()}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_front_door(door: BridgeProcess) -> None:
    """SIGKILL the front door, then whatever of its Ray outlived it."""
    processes = set(descendants(door.proc.pid))
    door.proc.send_signal(signal.SIGKILL)
    door.proc.wait()
    kill_all(processes)


@contextlib.contextmanager
def front_door(args: list[str]) -> Iterator[BridgeProcess]:
    """``oam-actors stdio ARGS``, killed with its Ray if still running at the end."""
    with BridgeProcess(args) as door:
        try:
            yield door
        finally:
            if door.proc.poll() is None:
                kill_front_door(door)


def test_a_front_door_on_ray_killed_mid_load_comes_back_with_every_answered_commit(tmp_path: Path) -> None:
    db = str(tmp_path / "ray.db")
    args = ["--runtime", "ray", "--shards", "2", "--state-store", db]
    with front_door(args) as door:
        door.call("session/create", {"session": "guard", "model": scripted([{"text": f"r{i}"} for i in range(40)])})
        door.call("world/create", {"world": "village", "state": {"n": "start"}})
        ids = []
        for i in range(15):
            ids.append(door.request("session/respond", {"session": "guard", "prompt": f"p{i}"}))
            ids.append(door.request("world/set", {"world": "village", "path": "n", "value": f"v{i}"}))
        door.wait_for(lambda m: m.get("id") == ids[9])
        kill_front_door(door)
    turns = sum(1 for m in door.log if m.get("id") in ids[::2] and "result" in m)
    versions = [m["result"]["version"] for m in door.log if m.get("id") in ids[1::2] and "result" in m]
    with front_door(args) as door:
        entries = door.call("session/transcript", {"session": "guard"})["transcript"]["transcript"]["entries"]
        assert [e["type"] for e in entries] == ["prompt", "response"] * (len(entries) // 2)
        assert len(entries) // 2 >= turns >= 1
        assert door.call("world/list")["worlds"][0]["version"] >= max(versions)
        reply = door.call("session/respond", {"session": "guard", "prompt": "again"})
        assert reply["text"] == f"r{len(entries) // 2}"  # the script goes on where the store left it
        assert door.close() == 0


def test_a_conversation_on_ray_comes_back_with_its_lines_after_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "ray.db")
    args = ["--runtime", "ray", "--shards", "2", "--state-store", db]
    people = {"bran": "Bran", "cora": "Cora"}
    with front_door(args) as door:
        door.call("world/create", {"world": "tavern"})
        for npc, name in people.items():
            steps = [{"text": f"{name} line {i}."} for i in range(4)]
            door.call("npc/create", {"npc": npc, "persona": {"name": name, "role": "a villager"}, "world": "tavern",
                                     "model": scripted(steps)})
        door.call("conversation/create", {"conversation": "c", "world": "tavern", "members": list(people)})
        assert len(door.call("conversation/run", {"conversation": "c", "lines": 2})["lines"]) == 2
        assert door.close() == 0
    with front_door(args) as door:
        lines = door.call("conversation/state", {"conversation": "c"})["state"]["lines"]
        assert [line["line"] for line in lines] == ["Bran line 0.", "Cora line 0."]
        assert door.call("conversation/advance", {"conversation": "c"})["lines"][0]["line"] == "Bran line 1."
        heard = door.call("npc/state", {"npc": "cora"})["state"]["memory"]["heard"]
        assert heard[:2] == ["Bran: Bran line 0.", "You: Cora line 0."]
        assert door.close() == 0
