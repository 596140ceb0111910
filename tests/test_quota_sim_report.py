"""The simulation report's quota figures, from a small synthetic run: outcomes by kind of request
(degraded vs failed), requests answered per generation, deadlines by priority and each device's
share of its quota windows; and simulate's new options refused clearly on the command line."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import msgspec
import pytest

from oam_actors.models.pool import nano_limits
from oam_actors.sim import SimConfig, SimRun, build_report
from oam_actors.sim.driver import BARK, DECIDE, SESSION, TALK, Conversation, TurnSample
from oam_actors.sim.report import render_html

SAMPLES = [  # (kind, outcome, degraded)
    (SESSION, "ok", False), (SESSION, "cancelled", False),
    (TALK, "ok", False), (TALK, "fallback", True),
    (DECIDE, "ok", False), (DECIDE, "fallback", True), (DECIDE, "fallback", False),
    (BARK, "ok", False), (BARK, "fallback", True), (BARK, "rate_limited", False), (BARK, "rate_limited", False),
]


def run_with(backend: dict[str, Any]) -> SimRun:
    run = SimRun(SimConfig(time_scale=0.1), started=0.0, finished=10.0, load_started=0.2, load_ended=9.0)
    run.conversations["villager1"] = Conversation("villager1")
    for second, (kind, outcome, degraded) in enumerate(SAMPLES):
        run.record(TurnSample("villager1", float(second), 0.5, outcome, kind=kind, degraded=degraded))
    run.backend_stats = backend
    return run


def farm(ok: list[int], elapsed: float) -> dict[str, Any]:
    devices = [{"name": f"phone{n + 1}", "state": "ready", "ok": count, "busy": 0, "errors": 0, "rejected": 0,
                "requestsLimit": 36, "utilisation": 0.5} for n, count in enumerate(ok)]
    return {"backend": "farm", "devices": devices, "stepsOk": sum(ok), "elapsedSeconds": elapsed,
            "quotaEventsAbsorbed": 0, "queueWait": {}}


def section(page: str, title: str) -> str:
    match = re.search(rf"<h2>{re.escape(title)}</h2>\n(.*?)(?=<h2>|</body>)", page, re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_outcomes_by_kind_tell_degraded_from_failed() -> None:
    report = build_report(run_with(farm([5], 6.12)))
    assert report["actions"][BARK] == {"total": 4, "ok": 1, "degraded": 1, "repeated": 0, "otherFallback": 0,
                                       "cancelled": 0, "failed": 2, "failedByCode": {"rate_limited": 2}}
    assert report["actions"][DECIDE]["degraded"] == 1 and report["actions"][DECIDE]["otherFallback"] == 1
    assert report["expiry"] == {
        "dialogue": {"requests": 4, "degraded": 1, "rateLimited": 0},
        "decision": {"requests": 3, "degraded": 1, "rateLimited": 0},
        "background": {"requests": 4, "degraded": 1, "rateLimited": 2},
    }
    page = render_html(report)
    table = section(page, "Degraded and failed, by kind of request")
    assert "rate limited 2" in table and "25.0%" in table  # barks: one in four answered by the model
    # The table says what a degraded bark was given, and why one failed.
    assert "before it has barked, one of its fallback lines" in table and "with no fallback to give" in table
    assert "75.0%" in section(page, "Deadlines by priority")  # background: 1 degraded + 2 failed of 4


def test_degraded_barks_are_counted_as_recent_barks_said_again_or_fallback_lines() -> None:
    run = run_with(farm([5], 6.12))
    for second, repeated in ((20.0, True), (21.0, True), (22.0, False)):
        run.record(TurnSample("villager1", second, 0.5, "fallback", kind=BARK, degraded=True, repeated=repeated))
    report = build_report(run)
    bark = report["actions"][BARK]
    assert (bark["degraded"], bark["repeated"]) == (4, 2)  # with SAMPLES' one, a fallback line
    table = section(render_html(report), "Degraded and failed, by kind of request")
    assert "4 (2 recent barks said again, 2 fallback lines)" in table


def test_answered_per_generation_and_each_devices_share_of_its_quota() -> None:
    window = nano_limits(0.1).window_seconds  # 6.12 s: one window of the farm at time scale 0.1
    report = build_report(run_with(farm([36, 18], 2 * window)))
    assert report["actionsPerGeneration"] == {"generations": 54, "answered": 4, "npcActions": 3,
                                              "answeredPerGeneration": round(4 / 54, 3), "coalescing": None}
    assert [(d["name"], d["generations"], d["allowed"], d["share"]) for d in report["quotaUse"]] == [
        ("phone1", 36, 72.0, 0.5), ("phone2", 18, 72.0, 0.25)]
    page = render_html(report)
    assert "50.0%" in section(page, "Quota utilisation per device")
    assert "0.074" in section(page, "Requests answered per generation")
    assert "<td>coalescing</td><td>off</td>" in section(page, "Requests answered per generation")


def test_the_generations_section_shows_what_coalescing_did() -> None:
    from oam_actors.models.coalesce import CoalescingStatistics

    coalescing = msgspec.to_builtins(CoalescingStatistics(items=9, generations=3, items_per_generation=3.0,
                                                          batches=2, batched_items=7, answered=7, retried_alone=1))
    report = build_report(run_with({**farm([36, 18], 12.24), "coalescing": coalescing}))
    assert report["actionsPerGeneration"]["coalescing"] == coalescing
    generations = section(render_html(report), "Requests answered per generation")
    assert "2 (7)" in generations and "1 / 0" in generations


def test_a_backend_without_devices_leaves_the_quota_sections_out() -> None:
    report = build_report(run_with({"backend": "scripted"}))
    assert report["quotaUse"] is None and report["actionsPerGeneration"] is None
    page = render_html(report)
    assert "Quota utilisation per device" not in page and "Requests answered per generation" not in page
    assert "Degraded and failed, by kind of request" in page


@pytest.mark.parametrize(("args", "says"), [
    (["--npc-mix", "1,2"], "argument --npc-mix: expected three shares"),
    (["--npc-mix", "0,0,0"], "argument --npc-mix: expected three shares"),
    (["--deadline", "barks=3"], "argument --deadline: expected PRIORITY=SECONDS"),
    (["--deadline", "background=0"], "argument --deadline: expected a number greater than 0"),
    (["--bark-deadline", "-1"], "argument --bark-deadline"),
])
def test_simulate_refuses_bad_quota_options_with_one_line(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "oam_actors", "simulate", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
