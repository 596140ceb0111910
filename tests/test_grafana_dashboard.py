"""cluster/grafana/oam-actors.json imports as it is and asks only for what ``/metrics`` exports:
every metric an expression names is one of :class:`ServerMetrics`' (histograms with their
``_bucket``/``_sum``/``_count``), every label it groups or filters by is one of that metric's, and
every panel reads the Prometheus data source chosen in the dashboard's ``datasource`` variable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from oam_actors.observability.metrics import ServerMetrics

DASHBOARD = Path(__file__).parent.parent / "cluster" / "grafana" / "oam-actors.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_ALWAYS = {"instance", "job"}  # labels Prometheus adds to every scraped series


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _exported() -> dict[str, set[str]]:
    """Series names /metrics can carry, with their label names."""
    names: dict[str, set[str]] = {}
    for name, (kind, labels) in ServerMetrics().registry.describe().items():
        if kind == "histogram":
            for suffix in _HISTOGRAM_SUFFIXES:
                names[name + suffix] = set(labels) | ({"le"} if suffix == "_bucket" else set())
        else:
            names[name] = set(labels)
    return names


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [(panel["title"], target) for panel in _dashboard()["panels"] for target in panel.get("targets", [])]


def test_the_dashboard_has_what_grafana_imports() -> None:
    board = _dashboard()
    assert board["id"] is None and board["uid"] and board["title"] == "oam-actors"
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert "__inputs" not in board  # nothing to map at import: the data source is a variable
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] >= 1 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        if panel["type"] != "row":
            assert panel["datasource"] == DATASOURCE and panel["targets"], panel["title"]


@pytest.mark.parametrize(("title", "target"), _targets(), ids=lambda value: value if isinstance(value, str) else "")
def test_every_expression_names_metrics_and_labels_we_export(title: str, target: dict[str, Any]) -> None:
    expr = target["expr"]
    assert target["datasource"] == DATASOURCE
    assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
    exported = _exported()
    metrics = set(re.findall(r"\boam_[a-z0-9_]+", expr))
    assert metrics and metrics <= set(exported), f"not exported: {metrics - set(exported)}"
    labels = set().union(*(exported[m] for m in metrics)) | _ALWAYS
    grouped = {label.strip() for group in re.findall(r"\bby \(([^)]*)\)", expr) for label in group.split(",")}
    filtered = set(re.findall(r"[{,]\s*([a-z_]+)\s*[!=]~?", expr))
    assert grouped | filtered <= labels, f"unknown labels {(grouped | filtered) - labels}"
    legend = set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]))
    assert legend <= grouped, f"the legend names labels the expression drops: {legend - grouped}"
