"""``oam-actors simulate --routes``: a real run on a routed model (one simulated phone, and a
priced scripted backend with a spend cap behind it), its report's routing section (JSON and
the HTML page), and the route file's mistakes as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SIMULATE = [sys.executable, "-m", "oam_actors", "simulate", "--no-progress"]
ROUTES = """\
spill = 0.5
[backends.phones]
model = "farm:1"
[backends.backup]
model = "scripted"
price = {request = 0.01}
cap = {hour = 0.05}
[routes]
dialogue = ["phones", "backup"]
decision = ["phones", "backup"]
background = ["phones"]
"""


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SIMULATE, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_a_routed_run_reports_steps_and_spend_per_backend_within_the_cap(tmp_path: Path) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    done = simulate("--routes", str(routes), "--npcs", "40", "--sessions", "4", "--duration", "4",
                    "--deadline", "dialogue=2", "--deadline", "decision=2", "--report-dir", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    routing = report["routing"]
    phones, backup = routing["backends"]
    assert (report["config"]["backend"], phones["name"], backup["name"]) == ("routes", "phones", "backup")
    assert phones["served"] + backup["served"] == routing["served"] > 0
    assert backup["served"] >= 1 and phones["spilled"] >= backup["served"]  # only steps the phone did not admit
    assert backup["spend"] == round(0.01 * backup["served"], 6) <= 0.05  # never past its cap
    assert {s["priority"] for s in routing["steps"] if s["backend"] == "backup"} <= {"dialogue", "decision"}
    assert phones["quotaUsed"] is not None and 0 < phones["generating"] <= 1
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Routing and spend</h2>" in page and "share of the steps served" in page


def test_a_bad_route_file_exits_2_with_one_line(tmp_path: Path) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES.replace('["phones", "backup"]', '["phones", "cloud"]', 1))
    done = simulate("--routes", str(routes), "--report-dir", str(tmp_path / "r"))
    assert done.returncode == 2
    assert done.stderr == (f"oam-actors simulate: error: argument --routes: {routes}: routes.dialogue[1]: "
                           "unknown backend 'cloud'\n")
    done = simulate("--backend", "routes", "--report-dir", str(tmp_path / "r"))
    assert done.stderr == "oam-actors simulate: error: --backend routes needs --routes FILE\n"
