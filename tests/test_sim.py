"""The simulator: its statistics, its report, and a short real run of `oam-actors simulate`."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest

from oam_actors.sim import SimConfig
from oam_actors.sim.stats import jain_index, percentile, summarize


def test_jain_index_is_one_for_equal_shares_one_over_n_at_worst_and_undefined_for_nothing() -> None:
    assert jain_index([5, 5, 5, 5]) == 1.0
    assert jain_index([10, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([3, 1]) == pytest.approx(16 / 20)
    assert jain_index([]) is None
    assert jain_index([0, 0]) is None


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_summarize_reports_milliseconds() -> None:
    summary = summarize([0.1, 0.2, 0.3, 0.4])
    assert summary.count == 4
    assert summary.p50_ms == 200.0
    assert summary.max_ms == 400.0
    assert summary.mean_ms == 250.0
    assert msgspec.to_builtins(summary)["p50Ms"] == 200.0


def test_simulate_scripted_run_writes_a_consistent_report(tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "oam_actors", "simulate", "--backend", "scripted", "--duration", "3",
         "--sessions", "8", "--think", "0.2", "--cancel-rate", "0.2", "--tool-timeout-rate", "0",
         "--report-dir", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    turns = report["turns"]
    assert turns["total"] == sum(turns["byOutcome"].values())
    assert turns["byOutcome"].get("ok", 0) > 0
    # Only cancellation can fail a turn here: no quota, no unanswered tools.
    assert set(turns["byOutcome"]) <= {"ok", "cancelled"}
    assert report["cancels"]["turnsCancelled"] <= report["cancels"]["sent"]
    assert report["fairness"]["owners"] == 8
    assert 0 < report["fairness"]["jainIndex"] <= 1
    assert report["tools"]["leftUnanswered"] == 0
    html = (tmp_path / "report.html").read_text()
    assert "<svg" in html and "Turns by outcome" in html
    assert "report.json" in completed.stdout


@pytest.mark.parametrize("coalesce", [True, False])
async def test_a_farm_backends_system_model_is_coalesced_unless_turned_off(coalesce: bool) -> None:
    from oam_actors.models.coalesce import CoalescingModel
    from oam_actors.sim.backends import make_backend

    async with make_backend(SimConfig(phones=1, coalesce=coalesce)) as backend:
        factory = backend.system_model()
        assert factory is not None
        assert isinstance(factory(), CoalescingModel) is coalesce
        stats = await backend.statistics()
    assert (stats.get("coalescing") is not None) is coalesce
