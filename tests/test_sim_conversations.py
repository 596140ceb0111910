"""``oam-actors simulate`` with ambient conversations among its NPCs: the report counts them, their
lines and degraded lines, and shows an excerpt of one conversation, in JSON and on the page."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_simulation_with_ambient_conversations_reports_them(tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "oam_actors", "simulate", "--backend", "scripted", "--duration", "3",
         "--sessions", "0", "--npcs", "8", "--conversations", "2", "--think", "0.1", "--cancel-rate", "0",
         "--tool-timeout-rate", "0", "--report-dir", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    ambient = json.loads((tmp_path / "report.json").read_text())["ambientConversations"]
    assert (ambient["conversations"], ambient["members"]) == (2, 8)
    assert ambient["lines"] == ambient["requests"] > 0 and ambient["failedByCode"] == {}
    # No quota on the scripted backend: no line misses its deadline; some give way to players' talks.
    assert set(ambient["degradedBy"]) <= {"preempted"} and ambient["degraded"] == sum(ambient["degradedBy"].values())
    excerpt = ambient["excerpt"]
    assert excerpt and {e["name"] for e in excerpt} <= {f"Villager {n}" for n in range(1, 5)}
    page = (tmp_path / "report.html").read_text()
    assert "Ambient conversations" in page and excerpt[0]["name"] in page


def test_one_conversation_per_eight_npcs_by_default() -> None:
    from oam_actors.sim.config import SimConfig

    assert [SimConfig(npcs=n).conversation_count for n in (0, 7, 16, 1000)] == [0, 0, 2, 125]
    assert SimConfig(npcs=16, conversations=0).conversation_count == 0
