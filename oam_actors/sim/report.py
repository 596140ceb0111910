"""The simulation report: figures as JSON, and a self-contained HTML page with SVG charts."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import msgspec

from .driver import SimRun
from .stats import Outcomes, jain_index, summarize

__all__ = ["build_report", "render_html", "write_report"]


def build_report(run: SimRun) -> dict[str, Any]:
    outcomes = Outcomes()
    for sample in run.samples:
        outcomes.add(sample.outcome)
    ok = [s for s in run.samples if s.outcome == "ok"]
    elapsed = max(run.elapsed, 1e-9)
    per_owner = [c.turns_ok for c in run.conversations.values()]
    backend = dict(run.backend_stats)
    surfaced = outcomes.counts.get("rate_limited", 0)
    return {
        "config": msgspec.to_builtins(run.config),
        "elapsedSeconds": round(elapsed, 2),
        "turns": {
            "total": outcomes.total,
            "byOutcome": outcomes.as_dict(),
            "okPerSecond": round(len(ok) / elapsed, 2),
        },
        "latency": {
            "ok": msgspec.to_builtins(summarize(s.latency for s in ok)),
            "all": msgspec.to_builtins(summarize(s.latency for s in run.samples)),
        },
        "tools": {
            "callsInOkTurns": sum(s.tool_calls for s in ok),
            "errorsInOkTurns": sum(s.tool_errors for s in ok),
            "answeredByGame": run.tool_calls_answered,
            "leftUnanswered": run.tool_calls_ignored,
        },
        "cancels": {"sent": run.cancels_sent, "turnsCancelled": outcomes.counts.get("cancelled", 0)},
        "quota": {
            "surfacedToClients": surfaced,
            "absorbedByScheduler": backend.get("quotaEventsAbsorbed", 0),
        },
        "fairness": {
            "owners": len(per_owner),
            "jainIndex": round(jain_index(per_owner), 4),
            "okTurnsMin": min(per_owner, default=0),
            "okTurnsMax": max(per_owner, default=0),
        },
        "queueWait": backend.get("queueWait", {}),
        "throughputTimeline": _timeline(run),
        "backend": backend,
    }


def _timeline(run: SimRun) -> list[int]:
    """Ok turns finished per second of the run."""
    seconds = max(1, math.ceil(run.elapsed))
    buckets = [0] * seconds
    for sample in run.samples:
        if sample.outcome == "ok":
            index = min(seconds - 1, int(sample.started + sample.latency))
            buckets[index] += 1
    return buckets


def write_report(report: dict[str, Any], directory: str | Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html``; returns their paths."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / "report.json"
    html_path = folder / "report.html"
    json_path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path


# --- HTML ----------------------------------------------------------------------------------------

_PALETTE = ["#2f6f9f", "#d9822b", "#4e9a4e", "#b04a4a", "#7b5ea7", "#8c8c8c", "#c7a02b", "#3aa3a3"]


def render_html(report: dict[str, Any]) -> str:
    turns = report["turns"]
    latency = report["latency"]["ok"]
    fairness = report["fairness"]
    quota = report["quota"]
    cards = [
        ("turns ok / s", f"{turns['okPerSecond']:g}"),
        ("turns", f"{turns['total']}"),
        ("p50 latency", f"{latency['p50_ms']:.0f} ms"),
        ("p99 latency", f"{latency['p99_ms']:.0f} ms"),
        ("Jain's fairness", f"{fairness['jainIndex']:.3f}"),
        ("quota errors surfaced", f"{quota['surfacedToClients']}"),
        ("quota events absorbed", f"{quota['absorbedByScheduler']}"),
    ]
    sections = [
        _section("Throughput (ok turns per second)", _line_chart(report["throughputTimeline"])),
        _section("Turns by outcome", _bar_chart(list(turns["byOutcome"].items()))),
    ]
    devices = report["backend"].get("devices")
    if devices:
        sections.append(_section(
            "Device utilisation (share of the run spent generating)",
            _bar_chart([(d["name"], round(100 * d.get("utilisation", 0.0), 1)) for d in devices], unit="%"),
        ))
        sections.append(_section("Devices", _rows(
            ["device", "state", "ok", "busy", "errors", "utilisation"],
            [[d["name"], d["state"], d["ok"], d["busy"], d["errors"], f"{100 * d['utilisation']:.1f}%"]
             for d in devices],
        )))
    waits = report.get("queueWait") or {}
    if waits:
        sections.append(_section("Queue wait for a device, by priority (ms)", _rows(
            ["priority", "steps", "p50", "p90", "p99", "max"],
            [[name, w["count"], w["p50Ms"], w["p90Ms"], w["p99Ms"], w["maxMs"]] for name, w in waits.items()],
        )))
    sections.append(_section("Latency of ok turns", _table(report["latency"]["ok"])))
    sections.append(_section("Tools and cancels", _table({**report["tools"], **report["cancels"]})))
    config = report["config"]
    title = f"oam-actors simulate — {config['backend']} backend, {fairness['owners']} conversations, {report['elapsedSeconds']} s"
    card_html = "".join(
        f'<div class="card"><div class="v">{html.escape(v)}</div><div class="k">{html.escape(k)}</div></div>' for k, v in cards
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 15px/1.4 system-ui, sans-serif; margin: 2rem auto; max-width: 960px; color: #222; }}
h1 {{ font-size: 1.3rem; }} h2 {{ font-size: 1.05rem; margin-top: 2rem; }}
.cards {{ display: flex; flex-wrap: wrap; gap: .75rem; }}
.card {{ border: 1px solid #ddd; border-radius: 8px; padding: .6rem .9rem; min-width: 8rem; }}
.card .v {{ font-size: 1.4rem; font-weight: 600; }} .card .k {{ color: #666; font-size: .85rem; }}
table {{ border-collapse: collapse; }} td {{ padding: .2rem .8rem; border-bottom: 1px solid #eee; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #444; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<div class="cards">{card_html}</div>
{''.join(sections)}
</body></html>
"""


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n{body}\n"


def _table(values: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in values.items())
    return f"<table>{rows}</table>"


def _rows(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<td><b>{html.escape(h)}</b></td>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _bar_chart(items: list[tuple[str, float]], *, unit: str = "") -> str:
    if not items:
        return "<p>(none)</p>"
    width, bar_height, label_width = 860, 22, 180
    top = max(value for _, value in items) or 1
    rows = []
    for index, (label, value) in enumerate(items):
        y = index * (bar_height + 6)
        length = (width - label_width - 80) * value / top
        color = _PALETTE[0] if label == "ok" or index == 0 else _PALETTE[index % len(_PALETTE)]
        rows.append(
            f'<text x="{label_width - 8}" y="{y + 15}" text-anchor="end">{html.escape(str(label))}</text>'
            f'<rect x="{label_width}" y="{y}" width="{length:.1f}" height="{bar_height}" fill="{color}" rx="3"/>'
            f'<text x="{label_width + length + 6:.1f}" y="{y + 15}">{value:g}{unit}</text>'
        )
    height = len(items) * (bar_height + 6)
    return f'<svg width="{width}" height="{height}" role="img">{"".join(rows)}</svg>'


def _line_chart(values: list[int]) -> str:
    if not values:
        return "<p>(none)</p>"
    width, height, pad = 860, 220, 36
    top = max(values) or 1
    step = (width - 2 * pad) / max(1, len(values) - 1)
    points = " ".join(
        f"{pad + i * step:.1f},{height - pad - (height - 2 * pad) * v / top:.1f}" for i, v in enumerate(values)
    )
    ticks = "".join(
        f'<text x="{pad + i * step:.1f}" y="{height - 12}" text-anchor="middle">{i}s</text>'
        for i in range(0, len(values), max(1, len(values) // 10))
    )
    return (
        f'<svg width="{width}" height="{height}" role="img">'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#bbb"/>'
        f'<text x="{pad - 6}" y="{pad}" text-anchor="end">{top}</text>'
        f'<text x="{pad - 6}" y="{height - pad}" text-anchor="end">0</text>'
        f'<polyline fill="none" stroke="{_PALETTE[0]}" stroke-width="2" points="{points}"/>{ticks}</svg>'
    )

