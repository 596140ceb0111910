"""Durable conversations: ``conversation/*`` with ``--state-store`` on real ``oam-actors stdio``
processes, restarted (and killed with SIGKILL) on the same file, and ``oam-actors state``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from bridge_process import BridgeProcess, scripted
from oam_actors.errors import ErrorCode

WORLD = "tavern"
PEOPLE = {
    "bran": {"name": "Bran", "role": "a ferryman", "personality": "Worried."},
    "cora": {"name": "Cora", "role": "a baker", "personality": "Cheerful."},
    "dena": {"name": "Dena", "role": "a guard", "personality": "Stern."},
}


def _people(p: BridgeProcess, lines: int = 4, *npcs: str) -> None:
    p.call("world/create", {"world": WORLD, "state": {"weather": "rain"}})
    for npc in npcs or ("bran", "cora"):
        steps = [{"text": f"{PEOPLE[npc]['name']} line {i}."} for i in range(lines)]
        p.call("npc/create", {"npc": npc, "persona": PEOPLE[npc], "world": WORLD, "model": scripted(steps)})


def _said(p: BridgeProcess, conversation: str) -> list[tuple[str, str]]:
    state = p.call("conversation/state", {"conversation": conversation})["state"]
    return [(line["speaker"], line["line"]) for line in state["lines"]]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAM_")}
    return subprocess.run([sys.executable, "-m", "oam_actors", *args], input="", capture_output=True, text=True,
                          env=env, timeout=60)


def test_a_conversation_and_what_its_members_heard_outlive_the_process_until_deleted(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db]) as p:
        _people(p, 4, "bran", "cora", "dena")
        p.call("conversation/create", {"conversation": "c", "world": WORLD, "members": ["bran", "cora"],
                                       "audience": ["dena"], "player": "Ada", "situation": "Rain.", "lineBudget": 9})
        assert len(p.call("conversation/run", {"conversation": "c", "lines": 2})["lines"]) == 2
        assert p.call("conversation/say", {"conversation": "c", "line": "Hello, Bran."})["line"]["speaker"] == "player"
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        assert _said(p, "c") == [("bran", "Bran line 0."), ("cora", "Cora line 0."), ("player", "Hello, Bran.")]
        [listed] = p.call("conversation/list")["conversations"]
        assert (listed["conversation"], [m["npc"] for m in listed["members"]], listed["lineCount"]) == (
            "c", ["bran", "cora"], 3)
        heard = p.call("npc/state", {"npc": "cora"})["state"]["memory"]["heard"]
        assert heard == ["Bran: Bran line 0.", "You: Cora line 0.", "Ada to Bran: Hello, Bran."]
        overheard = p.call("npc/state", {"npc": "dena"})["state"]["memory"]["heard"]
        assert overheard[0] == "(overheard) Bran: Bran line 0." and len(overheard) == 3
        assert p.call("conversation/advance", {"conversation": "c"})["lineCount"] == 4  # members revived to speak
        assert p.call("conversation/leave", {"conversation": "c", "npc": "cora"})["members"] == ["bran"]
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        state = p.call("conversation/state", {"conversation": "c"})["state"]
        assert ([m["npc"] for m in state["members"]], len(state["lines"]), state["ended"]) == (["bran"], 4, True)
        assert p.call("conversation/delete", {"conversation": "c"})["deleted"] is True
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        assert p.call("conversation/list")["conversations"] == []
        assert p.error(p.request("conversation/state", {"conversation": "c"}))["data"]["code"] == ErrorCode.CONVERSATION_NOT_FOUND.wire
        assert p.close() == 0
    assert [line.split()[1] for line in _cli("state", db).stdout.splitlines()] == ["npc", "npc", "npc", "world"]


def test_sigkill_mid_run_keeps_every_answered_line_and_tears_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.db")
    answered: list[str] = []
    with BridgeProcess(["--state-store", db]) as p:
        _people(p, 40)
        p.call("conversation/create", {"conversation": "c", "world": WORLD, "members": ["bran", "cora"],
                                       "lineBudget": 100})
        ids = [p.request("conversation/run", {"conversation": "c", "lines": 2}) for _ in range(20)]
        p.wait_for(lambda m: m.get("id") == ids[4])
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait()
        for message in p.log:
            if message.get("id") in ids and "result" in message:
                answered += [line["line"] for line in message["result"]["lines"]]
    assert len(answered) >= 10
    with BridgeProcess(["--state-store", db]) as p:
        lines = _said(p, "c")
        assert len(lines) % 2 == 0  # whole requests only: each run of two lines is one commit
        assert [line for _, line in lines[: len(answered)]] == answered
        assert [speaker for speaker, _ in lines] == ["bran", "cora"] * (len(lines) // 2)
        heard = p.call("npc/state", {"npc": "bran"})["state"]["memory"]["heard"]
        assert len(heard) <= len(lines)  # no note of a line the conversation does not have
        assert p.close() == 0


def test_stored_conversations_count_against_the_limit_after_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db, "--max-conversations", "1"]) as p:
        _people(p)
        p.call("conversation/create", {"conversation": "a", "world": WORLD, "members": ["bran", "cora"]})
        assert p.close() == 0
    with BridgeProcess(["--state-store", db, "--max-conversations", "1"]) as p:
        error = p.error(p.request("conversation/create", {"conversation": "b", "world": WORLD,
                                                          "members": ["bran", "cora"]}))
        assert error["data"]["limit"] == 1
        assert [c["conversation"] for c in p.call("conversation/list")["conversations"]] == ["a"]
        assert p.close() == 0


def test_state_exports_and_imports_a_conversation(tmp_path: Path) -> None:
    db, copy = str(tmp_path / "s.db"), str(tmp_path / "copy.db")
    with BridgeProcess(["--state-store", db]) as p:
        _people(p)
        p.call("conversation/create", {"conversation": "c", "world": WORLD, "members": ["bran", "cora"],
                                       "location": "bar", "situation": "Rain."})
        p.call("conversation/run", {"conversation": "c", "lines": 2})
        expected: dict[str, Any] = p.call("conversation/state", {"conversation": "c"})
        assert p.close() == 0
    exported = _cli("state", db, "export")
    assert exported.returncode == 0
    [conversation] = [msgspec.json.decode(line) for line in exported.stdout.splitlines()
                      if msgspec.json.decode(line)["kind"] == "conversation"]
    assert (conversation["tenant"], conversation["conversation"]) == ("", "c")
    assert conversation["state"] == expected["state"]
    (tmp_path / "export.jsonl").write_text(exported.stdout)
    imported = _cli("state", copy, "import", str(tmp_path / "export.jsonl"))
    assert imported.returncode == 0 and "imported 4 objects" in imported.stdout
    assert _cli("state", copy, "export").stdout == exported.stdout
    with BridgeProcess(["--state-store", copy]) as p:
        assert p.call("conversation/state", {"conversation": "c"}) == expected
        assert p.close() == 0
    (tmp_path / "bad.jsonl").write_text('{"tenant": "", "kind": "conversation", "conversation": "x", '
                                        '"state": {"world": "w", "members": [{"npc": 1}]}}\n')
    bad = _cli("state", str(tmp_path / "other.db"), "import", str(tmp_path / "bad.jsonl"))
    assert bad.returncode == 2 and "line 1" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_a_restored_conversation_and_a_said_line_are_durable_once_answered(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db]) as p:
        _people(p)
        p.call("conversation/create", {"conversation": "c", "world": WORLD, "members": ["bran", "cora"],
                                       "player": "Ada"})
        p.call("conversation/advance", {"conversation": "c"})
        saved = p.call("conversation/state", {"conversation": "c"})
        created_at = p.call("conversation/list")["conversations"][0]["createdAt"]
        restored = p.call("conversation/restore", {"conversation": "copy", "state": saved})
        assert restored["conversation"] == "copy"
        assert p.call("conversation/say", {"conversation": "copy", "line": "Evening, Cora."})["lineCount"] == 2
        p.proc.send_signal(signal.SIGKILL)  # no orderly exit: only what each answer waited for
        p.proc.wait()
    with BridgeProcess(["--state-store", db]) as p:
        assert _said(p, "copy") == [("bran", "Bran line 0."), ("player", "Evening, Cora.")]
        assert _said(p, "c") == [("bran", "Bran line 0.")]
        listed = {c["conversation"]: c["createdAt"] for c in p.call("conversation/list")["conversations"]}
        assert listed["c"] == created_at and set(listed) == {"c", "copy"}
        assert p.close() == 0


def test_a_member_deleted_after_a_restart_leaves_the_stored_conversation(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db]) as p:
        _people(p, 4, "bran", "cora", "dena")
        p.call("conversation/create", {"conversation": "c", "world": WORLD, "members": ["bran", "cora", "dena"]})
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        assert p.call("npc/delete", {"npc": "dena"})["deleted"] is True
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        members = p.call("conversation/state", {"conversation": "c"})["state"]["members"]
        assert [m["npc"] for m in members] == ["bran", "cora"]
        assert p.close() == 0
