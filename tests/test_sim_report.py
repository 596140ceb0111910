"""The simulation report built from small synthetic runs: what the JSON says and what the page
draws (scales, axes, which sections appear)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from oam_actors.sim import SimConfig, SimRun, build_report
from oam_actors.sim.charts import nice_ticks
from oam_actors.sim.driver import Conversation, TurnSample
from oam_actors.sim.report import render_html

SVG = "{http://www.w3.org/2000/svg}"


def _run(config: SimConfig, outcomes: dict[str, list[str]], backend_stats: dict[str, Any] | None = None,
         *, interrupted: bool = False) -> SimRun:
    """A finished 10-second run: each owner's turns, one per second, 0.5 s each."""
    run = SimRun(config, started=0.0, finished=10.0, load_started=0.2, load_ended=9.0, interrupted=interrupted)
    for owner, turns in outcomes.items():
        run.conversations[owner] = Conversation(owner)
        for second, outcome in enumerate(turns):
            run.record(TurnSample(owner, float(second), 0.5, outcome))
    run.backend_stats = backend_stats or {"backend": config.backend}
    return run


def _pool_stats(utilisations: list[float]) -> dict[str, Any]:
    devices = [{"name": f"phone{n + 1}", "state": "ready", "ok": 10, "busy": 1, "errors": 0, "rejected": 0,
                "requestsLimit": 36, "utilisation": u} for n, u in enumerate(utilisations)]
    wait = {"count": 20, "p50Ms": 100.0, "p90Ms": 400.0, "p99Ms": 900.0, "maxMs": 1200.0}
    idle = {"count": 0, "p50Ms": 0.0, "p90Ms": 0.0, "p99Ms": 0.0, "maxMs": 0.0}
    return {"backend": "farm", "devices": devices, "quotaEventsAbsorbed": 3, "quotaEventsSurfaced": 2,
            "queueWait": {"dialogue": wait, "decision": idle, "background": idle}}


def _section(page: str, title: str) -> str:
    match = re.search(rf"<h2>{re.escape(title)}</h2>\n(.*?)(?=<h2>|</body>)", page, re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def _svg(section: str) -> ET.Element:
    match = re.search(r"<svg.*?</svg>", section, re.S)
    assert match, "no chart in the section"
    return ET.fromstring(match.group(0).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


def _texts(svg: ET.Element) -> dict[str, float]:
    """Each text of a chart and its x position."""
    return {t.text or "": float(t.get("x", "0")) for t in svg.iter(f"{SVG}text")}


def test_utilisation_is_a_share_of_the_run_on_a_0_to_100_axis() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok"]}, _pool_stats([0.25, 0.5])))
    svg = _svg(_section(render_html(report), "Device utilisation"))
    texts = _texts(svg)
    zero, hundred = texts["0%"], texts["100%"]
    widths = [float(r.get("width", "0")) for r in svg.iter(f"{SVG}rect")]
    # The busiest phone (50 %) fills half the axis, not all of it.
    assert widths == [pytest.approx((hundred - zero) * 0.25, abs=0.2), pytest.approx((hundred - zero) * 0.5, abs=0.2)]
    assert "25.0%" in texts and "50.0%" in texts
    assert "time spent generating, % of the run" in texts


def test_charts_have_labelled_axes_and_gridlines() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok"] * 8, "b": ["ok", "cancelled", "rate_limited"]},
                               _pool_stats([0.4])))
    page = render_html(report)
    throughput = _svg(_section(page, "Throughput"))
    texts = _texts(throughput)
    assert "seconds since the start of the run" in texts and "ok turns finished per second" in texts
    assert "load ends; the turns in flight finish" in texts
    # Gridlines at round numbers on both axes, each labelled.
    assert len([line for line in throughput.iter(f"{SVG}line")]) >= 8
    assert {"0", "1", "2"} <= set(texts)
    outcomes = _texts(_svg(_section(page, "Turns by outcome")))
    assert "turns" in outcomes
    assert {"ok", "cancelled by the player", "failed: rate limited"} <= set(outcomes)


def test_queue_wait_by_priority_is_a_chart_with_human_labels() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok"]}, _pool_stats([0.4])))
    page = render_html(report)
    section = _section(page, "Queue wait for a device, by priority")
    assert "<table" not in section
    texts = _texts(_svg(section))
    assert {"p50", "p90", "p99", "max", "dialogue (20 steps)", "wait for a device (ms)", "1,200"} <= set(texts)
    assert "No steps at priority decision, background." in section
    for raw in ("mean_ms", "meanMs", "p50Ms", "p50_ms", "okPerSecond", "callsInOkTurns"):
        assert raw not in page


def test_cancelled_turns_are_counted_apart_from_failed_ones() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok", "cancelled", "cancelled"], "b": ["rate_limited", "fallback"]}))
    turns = report["turns"]
    assert (turns["total"], turns["ok"], turns["cancelled"], turns["failed"], turns["fallback"]) == (5, 1, 2, 1, 1)
    assert turns["failedByCode"] == {"rate_limited": 1}
    assert report["cancels"]["turnsCancelled"] == 2


def test_scripted_backend_has_no_quota_figures() -> None:
    report = build_report(_run(SimConfig(backend="scripted"), {"a": ["ok", "ok"]}))
    assert report["quota"] is None
    page = render_html(report)
    assert "quota" not in page.lower()
    assert "Device utilisation" not in page and "Queue wait" not in page


def test_pool_backend_reports_its_three_quota_figures_apart() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok", "rate_limited", "fallback"]}, _pool_stats([0.3])))
    assert report["quota"] == {"rateLimitedTurns": 1, "refusalsAbsorbedByPool": 3, "stepsGivenUpByPool": 2}
    page = render_html(report)
    for card in ("turns failed rate_limited", "quota refusals absorbed by the pool", "steps given up by the pool"):
        assert card in page
    assert "surfaced" not in page


@pytest.mark.parametrize(("config", "npcs"), [
    (SimConfig(), 16), (SimConfig(backend="scripted"), 0), (SimConfig(backend="scripted", npcs=3), 3),
])
def test_config_says_how_many_npcs_ran(config: SimConfig, npcs: int) -> None:
    report = build_report(_run(config, {}))
    assert report["config"]["npcs"] == npcs
    assert f"<td>NPCs on the shared world</td><td>{npcs}</td>" in render_html(report)


def test_no_fairness_figure_when_no_turn_completed() -> None:
    report = build_report(_run(SimConfig(backend="scripted"), {"a": [], "b": ["cancelled"]}))
    assert report["fairness"]["jainIndex"] is None
    assert report["fairness"]["reason"] == "no conversation completed a turn"
    page = render_html(report)
    assert re.search(r'<div class="v">—</div><div class="k">Jain&#x27;s fairness</div>', page)
    assert "1.000" not in page
    assert "No turn completed." in _section(page, "Throughput")

    nothing = build_report(_run(SimConfig(backend="scripted"), {}))
    assert nothing["fairness"]["jainIndex"] is None
    assert nothing["fairness"]["reason"] == "no conversations ran"
    assert "No turn ran." in _section(render_html(nothing), "Turns by outcome")


def test_interrupted_run_says_so_and_marks_the_moment() -> None:
    report = build_report(_run(SimConfig(), {"a": ["ok", "ok"]}, _pool_stats([0.2]), interrupted=True))
    assert report["interrupted"] is True and report["loadEndedAtSeconds"] == 9.0
    page = render_html(report)
    assert "Interrupted after 10 s" in page
    texts = _texts(_svg(_section(page, "Throughput")))
    assert "interrupted" in texts


@pytest.mark.parametrize(("top", "integer", "ticks"), [
    (15, False, [0, 5, 10, 15]), (59.6, False, [0, 20, 40, 60]), (100, False, [0, 20, 40, 60, 80, 100]),
    (0.7, False, [0, 0.2, 0.4, 0.6, 0.8]), (3, True, [0, 1, 2, 3]), (0, False, [0, 1]),
])
def test_nice_ticks_are_round_and_cover_the_top(top: float, integer: bool, ticks: list[float]) -> None:
    assert nice_ticks(top, integer=integer) == pytest.approx(ticks)


def test_phone_time_by_priority_is_reported_for_the_load_and_for_the_whole_run() -> None:
    stats = {**_pool_stats([0.9]), "generatingByPriority": {"dialogue": 30.0, "decision": 12.0, "background": 2.0}}
    run = _run(SimConfig(phones=1), {"npc1": ["ok"]}, stats)
    run.backend_at_load_end = {**stats, "generatingByPriority": {"dialogue": 28.0, "decision": 1.0, "background": 1.5}}
    report = build_report(run)
    assert report["phoneTime"] == {"load": {"dialogue": 28.0, "decision": 1.0, "background": 1.5},
                                   "run": {"dialogue": 30.0, "decision": 12.0, "background": 2.0}}
    assert build_report(_run(SimConfig(backend="scripted"), {"s": ["ok"]}))["phoneTime"] is None


def test_fairness_counts_the_conversations_by_their_ok_player_dialogue() -> None:
    run = _run(SimConfig(), {})
    for owner, kinds in {"npc1": ["talk", "talk", "bark"], "npc2": ["decide"], "npc3": ["talk"], "npc4": []}.items():
        run.conversations[owner] = Conversation(owner)
        for second, kind in enumerate(kinds):
            run.record(TurnSample(owner, float(second), 0.5, "ok", kind=kind))
    run.record(TurnSample("npc4", 1.0, 0.5, "fallback", kind="talk"))
    assert build_report(run)["fairness"]["dialogueOkTurns"] == {"0": 2, "1": 1, "2": 1}
