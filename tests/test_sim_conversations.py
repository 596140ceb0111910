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
    excerpt, conversation = ambient["excerpt"], ambient["excerptConversation"]
    members = {"ambient1": range(1, 5), "ambient2": range(5, 9)}[conversation]
    assert excerpt and {e["name"] for e in excerpt} <= {f"Villager {n}" for n in members}
    page = (tmp_path / "report.html").read_text()
    assert "Ambient conversations" in page and excerpt[0]["name"] in page and conversation in page


def test_the_excerpt_is_the_opening_the_model_answered_most_of() -> None:
    from oam_actors.sim.conversations import EXCERPT_LINES, AmbientLog

    def line(name: str, fallback: bool) -> dict[str, object]:
        return {"name": name, "line": "…", "addressee": None, "isFallback": fallback,
                "degraded": "deadline" if fallback else None}

    log = AmbientLog()
    assert log.excerpt() == (None, [])
    log.record({"lines": [line("Ann", True)] * (EXCERPT_LINES - 1) + [line("Bo", False)]}, 0.1, "first")
    log.record({"lines": [line("Cy", False), line("Di", True), line("Cy", False)]}, 0.1, "second")
    log.record({"lines": [line("Ann", False)] * 3}, 0.1, "first")  # beyond its opening: not counted
    conversation, excerpt = log.excerpt()
    assert conversation == "second" and [e["name"] for e in excerpt] == ["Cy", "Di", "Cy"]
    assert len(log.openings["first"]) == EXCERPT_LINES and log.lines == EXCERPT_LINES + 6
