"""The simulation report: figures as JSON, and a self-contained HTML page with SVG charts.

The JSON (``build_report``) is the record; the page (``render_html``) is drawn from the JSON
alone, as a list of sections (:data:`SECTIONS`), each a function that returns its HTML or None
when it has nothing to show (no quota section for a backend without quota, no devices without a
device pool). A new figure is a new section function.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from .charts import Bar, Marker, Series, bar_chart, line_chart
from .driver import ACTIONS, BARK, PRIORITY_OF, SESSION, TALK, SimRun, TurnSample
from .stats import CANCELLED, FALLBACK, OK, jain_index, summarize

__all__ = ["SECTIONS", "build_report", "render_html", "write_report"]


def build_report(run: SimRun, *, startup_seconds: float = 0.0) -> dict[str, Any]:
    """The report of ``run``. Its seconds (``elapsedSeconds``, the timeline) count from the run's
    start, after the runtime and the backend were up; ``startup_seconds`` is how long getting
    there took (a Ray instance's start), reported apart as ``startupSeconds``."""
    outcomes = run.outcomes
    ok = [s for s in run.samples if s.outcome == OK]
    elapsed = max(run.elapsed, 1e-9)
    backend = dict(run.backend_stats)
    return {
        "config": msgspec.to_builtins(run.config),
        "interrupted": run.interrupted,
        "elapsedSeconds": round(elapsed, 2),
        "startupSeconds": round(startup_seconds, 2),
        "loadSeconds": round(_load_seconds(run), 2),
        "loadEndedAtSeconds": None if run.load_ended is None else round(run.load_ended, 2),
        "turns": {
            "total": outcomes.total,
            "ok": outcomes.ok,
            "fallback": outcomes.fallback,
            "cancelled": outcomes.cancelled,
            "failed": outcomes.failed,
            "failedByCode": outcomes.failures(),
            "byOutcome": outcomes.as_dict(),
            "abandoned": run.abandoned,
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
        "cancels": {"sent": run.cancels_sent, "turnsCancelled": outcomes.cancelled},
        "quota": _quota(backend, outcomes.counts.get("rate_limited", 0)),
        "fairness": _fairness([c.turns_ok for c in run.conversations.values()], _dialogue_ok(run)),
        "queueWait": backend.get("queueWait", {}),
        "throughputTimeline": _timeline(run),
        "actions": _actions(run.samples),
        "actionsPerGeneration": _per_generation(ok, backend),
        "expiry": _expiry(run.samples),
        "quotaUse": _quota_use(backend, _window_scale(run.config.backend == "farm", run.config)),
        "phoneTime": _phone_time(run.backend_at_load_end, backend),
        "routing": _routing(run.config, backend),
        "ambientConversations": _ambient(run, backend),
        "backend": backend,
    }


def _actions(samples: list[TurnSample]) -> dict[str, dict[str, Any]]:
    """Outcomes by kind of request: answered by the model, degraded at the deadline (of those, a
    bark's recent bark said again: ``repeated``; the rest got a fallback line, or a decision its
    fallback option), another fallback, cancelled, failed (by code)."""
    kinds: dict[str, dict[str, Any]] = {}
    for kind in (SESSION, *ACTIONS):
        mine = [s for s in samples if s.kind == kind]
        if not mine:
            continue
        failed: dict[str, int] = {}
        for s in mine:
            if s.outcome not in (OK, FALLBACK, CANCELLED):
                failed[s.outcome] = failed.get(s.outcome, 0) + 1
        kinds[kind] = {
            "total": len(mine),
            "ok": sum(s.outcome == OK for s in mine),
            "degraded": sum(s.degraded for s in mine),
            "repeated": sum(s.degraded and s.repeated for s in mine),
            "otherFallback": sum(s.outcome == FALLBACK and not s.degraded for s in mine),
            "cancelled": sum(s.outcome == CANCELLED for s in mine),
            "failed": sum(failed.values()),
            "failedByCode": failed,
        }
    return kinds


def _per_generation(ok: list[TurnSample], backend: dict[str, Any]) -> dict[str, Any] | None:
    """Requests answered by the model per generation the backend ran (a device pool's steps), and
    what coalescing did towards it (None when the system model was not coalesced)."""
    generations = backend.get("stepsOk")
    if not generations:
        return None
    npc = [s for s in ok if s.kind != SESSION]
    return {"generations": generations, "answered": len(ok), "npcActions": len(npc),
            "answeredPerGeneration": round(len(ok) / generations, 3), "coalescing": backend.get("coalescing")}


def _ambient(run: SimRun, backend: dict[str, Any]) -> dict[str, Any] | None:
    """Ambient conversations: lines, how many degraded, latency of a line, what coalescing
    managed per generation (all coalesced kinds together), and the opening the model answered most of."""
    log = run.ambient
    if not log.conversations:
        return None
    coalescing = backend.get("coalescing") or {}
    conversation, excerpt = log.excerpt()
    return {
        "conversations": log.conversations, "members": log.members, "requests": log.requests,
        "lines": log.lines, "degraded": log.degraded, "degradedBy": dict(log.degraded_by), "otherFallback": log.fallback, "failedByCode": dict(log.failed),
        "lineLatency": msgspec.to_builtins(summarize(log.latencies)),
        "coalescedItemsPerGeneration": coalescing.get("itemsPerGeneration"),
        "excerptConversation": conversation, "excerpt": excerpt,
    }


def _expiry(samples: list[TurnSample]) -> dict[str, dict[str, int]]:
    """By scheduling priority: requests, those degraded at their deadline, those failed for quota."""
    expiry: dict[str, dict[str, int]] = {}
    for s in samples:
        row = expiry.setdefault(PRIORITY_OF[s.kind], {"requests": 0, "degraded": 0, "rateLimited": 0})
        row["requests"] += 1
        row["degraded"] += s.degraded
        row["rateLimited"] += s.outcome == "rate_limited"
    return expiry


def _window_scale(farm: bool, config: Any) -> float:
    """Real seconds per phone second of a pool: a farm's time scale, 1 for real phones."""
    return config.time_scale if farm else 1.0


def _quota_use(backend: dict[str, Any], scale: float) -> list[dict[str, Any]] | None:
    """Per device: generations against what its quota windows allowed over the pool's life."""
    from ..models.pool import nano_limits

    devices = backend.get("devices")
    elapsed = backend.get("elapsedSeconds")
    if not devices or not elapsed:
        return None
    window = nano_limits(scale).window_seconds
    rows = []
    for d in devices:
        allowed = (d["requestsLimit"] or 0) * elapsed / window
        rows.append({"name": d["name"], "generations": d["ok"], "allowed": round(allowed, 1),
                     "share": round(min(1.0, d["ok"] / allowed), 4) if allowed else None,
                     "generating": d["utilisation"]})
    return rows


def _phone_time(at_load_end: dict[str, Any], backend: dict[str, Any]) -> dict[str, Any] | None:
    """Phone seconds spent generating each priority's steps (summed over the phones) while the
    load ran and over the whole run (the turns in flight at its end drain after it)."""
    run = backend.get("generatingByPriority")
    if not run:
        return None
    return {"load": at_load_end.get("generatingByPriority") or {}, "run": run}


def _routing(config: Any, backend: dict[str, Any]) -> dict[str, Any] | None:
    """A routed model's steps and spend per backend (with its share of the steps, and for a
    device pool its quota and decode use), per priority and kind, and per tenant."""
    routing = backend.get("routing")
    if not routing:
        return None
    served = sum(b["served"] for b in routing["backends"])
    rows = []
    for b in routing["backends"]:
        record = b.get("statistics") or {}
        use = _quota_use(record, _window_scale(b["model"].startswith("farm:"), config)) or []
        generations, allowed = sum(r["generations"] for r in use), sum(r["allowed"] for r in use)
        rows.append({
            "name": b["name"], "model": b["model"], "served": b["served"],
            "share": round(b["served"] / served, 4) if served else 0.0,
            "spilled": b["spilled"], "capped": b["capped"], "failed": b["failed"], "skipped": b["skipped"],
            "spend": round(b["spend"], 6), "capHour": b["capHour"], "capDay": b["capDay"],
            "quotaUsed": round(min(1.0, generations / allowed), 4) if allowed else None,
            "generating": round(sum(r["generating"] for r in use) / len(use), 4) if use else None,
        })
    return {"spill": routing["spill"], "unrouted": routing["unrouted"], "served": served,
            "spend": round(sum(b["spend"] for b in routing["backends"]), 6), "backends": rows,
            "steps": routing["steps"], "tenants": routing["tenants"]}


def _load_seconds(run: SimRun) -> float:
    if run.load_started is None:
        return 0.0
    end = run.load_ended if run.load_ended is not None else run.elapsed
    return max(0.0, end - run.load_started)


def _quota(backend: dict[str, Any], rate_limited_turns: int) -> dict[str, Any] | None:
    """Quota events, or None for a backend that has no quota (scripted). Three different figures,
    named apart (the live display and the summary line use the same words):

    - ``rateLimitedTurns``: turns whose client got a ``rate_limited`` error;
    - ``refusalsAbsorbedByPool``: quota refusals the pool rerouted or waited out (nobody saw them);
    - ``stepsGivenUpByPool``: model steps the pool gave up on when their queue time ran out; the
      request then degraded to its fallback or, without one, became a ``rate_limited`` turn.
    """
    if "quotaEventsAbsorbed" in backend:  # a device pool
        return {"rateLimitedTurns": rate_limited_turns, "refusalsAbsorbedByPool": backend["quotaEventsAbsorbed"],
                "stepsGivenUpByPool": backend.get("quotaEventsSurfaced", 0)}
    if "scheduler" in backend:  # one quota scheduler in front of a proxy
        return {"rateLimitedTurns": rate_limited_turns, "throttlesFromServer": backend["scheduler"].get("throttles", 0)}
    return None


def _dialogue_ok(run: SimRun) -> list[int]:
    """Each conversation's ok player dialogue (session turns and NPC talks)."""
    counts = dict.fromkeys(run.conversations, 0)
    for sample in run.samples:
        if sample.outcome == OK and sample.kind in (SESSION, TALK):
            counts[sample.owner] += 1
    return list(counts.values())


def _fairness(ok_turns: list[int], dialogue_ok: list[int]) -> dict[str, Any]:
    """Jain's index over conversations' ok turns; null (with the reason) when it is undefined.
    ``dialogueOkTurns``: how many conversations had how many ok player dialogue turns (which go
    before NPC work), by count."""
    index = jain_index(ok_turns)
    fairness: dict[str, Any] = {
        "owners": len(ok_turns),
        "jainIndex": None if index is None else round(index, 4),
        "okTurnsMin": min(ok_turns, default=0),
        "okTurnsMax": max(ok_turns, default=0),
        "dialogueOkTurns": {str(n): c for n, c in sorted(Counter(dialogue_ok).items())},
    }
    if index is None:
        fairness["reason"] = "no conversations ran" if not ok_turns else "no conversation completed a turn"
    return fairness


def _timeline(run: SimRun) -> list[int]:
    """Ok turns finished per second of the run."""
    seconds = max(1, math.ceil(run.elapsed))
    buckets = [0] * seconds
    for sample in run.samples:
        if sample.outcome == OK:
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

_BLUE, _AMBER, _GREY, _RED, _GREEN = "#2f6f9f", "#c7a02b", "#8c8c8c", "#b04a4a", "#4e9a4e"


def _ms(value: float) -> str:
    """A duration in milliseconds, for people: 850 ms, 4.46 s."""
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def _words(code: str) -> str:
    return code.replace("_", " ")


def _cards(report: dict[str, Any]) -> str:
    turns, latency, fairness, quota = report["turns"], report["latency"]["ok"], report["fairness"], report["quota"]
    jain = fairness["jainIndex"]
    cards = [
        ("ok turns per second", f"{turns['okPerSecond']:g}", ""),
        ("turns ok / all", f"{turns['ok']} / {turns['total']}", ""),
        ("median latency (ok turns)", _ms(latency["p50Ms"]) if latency["count"] else "—", ""),
        ("p99 latency (ok turns)", _ms(latency["p99Ms"]) if latency["count"] else "—", ""),
        ("Jain's fairness", "—" if jain is None else f"{jain:.3f}", fairness.get("reason", "")),
    ]
    if quota is not None:
        cards.append(("turns failed rate_limited", f"{quota['rateLimitedTurns']}", "rate_limited errors clients got"))
        if "refusalsAbsorbedByPool" in quota:
            cards.append(("steps given up by the pool", f"{quota['stepsGivenUpByPool']}",
                          "queue time ran out: the request degraded to its fallback or failed rate_limited"))
            cards.append(("quota refusals absorbed by the pool", f"{quota['refusalsAbsorbedByPool']}",
                          "refusals rerouted or waited out by the pool"))
        else:
            cards.append(("rate limits from the server", f"{quota['throttlesFromServer']}", ""))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{html.escape(v)}</div><div class="k">{html.escape(k)}</div>'
        + (f'<div class="why">{html.escape(why)}</div>' if why else "") + "</div>"
        for k, v, why in cards
    ) + "</div>"


def _throughput(report: dict[str, Any]) -> str | None:
    if not report["turns"]["ok"]:
        return _section("Throughput", "<p>No turn completed.</p>")
    ended = report["loadEndedAtSeconds"]
    markers = []
    if ended is not None and report["interrupted"]:
        markers.append(Marker(ended, "interrupted"))
    elif ended is not None and report["elapsedSeconds"] > ended + 0.5:
        markers.append(Marker(ended, "load ends; the turns in flight finish"))
    chart = line_chart(report["throughputTimeline"], x_label="seconds since the start of the run",
                       y_label="ok turns finished per second", markers=markers)
    return _section("Throughput", chart)


def _outcomes(report: dict[str, Any]) -> str | None:
    turns = report["turns"]
    if not turns["total"]:
        return _section("Turns by outcome", "<p>No turn ran.</p>")
    colors = {OK: _BLUE, FALLBACK: _AMBER, CANCELLED: _GREY}
    labels = {OK: "ok", FALLBACK: "fallback line", CANCELLED: "cancelled by the player"}
    bars = [Bar(labels.get(code, f"failed: {_words(code)}"), [count], colors.get(code, _RED))
            for code, count in turns["byOutcome"].items()]
    note = ""
    if turns["abandoned"]:
        note = f"<p>{turns['abandoned']} turns were still in flight when the run was interrupted (not counted).</p>"
    return _section("Turns by outcome", bar_chart(bars, axis_label="turns") + note)


def _degraded_cell(kind: str, actions: dict[str, Any]) -> int | str:
    """A kind's degraded count; for barks, how many were recent barks said again and how many
    fallback lines."""
    degraded, repeated = actions["degraded"], actions["repeated"]
    if kind != BARK or not degraded:
        return degraded
    return f"{degraded} ({repeated} recent barks said again, {degraded - repeated} fallback lines)"


def _utilisation(report: dict[str, Any]) -> str | None:
    devices = report["backend"].get("devices")
    if not devices:
        return None
    bars = [Bar(d["name"], [round(100 * d["utilisation"], 1)]) for d in devices]
    chart = bar_chart(bars, axis_label="time spent generating, % of the run", axis_max=100, unit="%",
                      value_format=lambda v: f"{v:.1f}")
    table = _rows(
        ["device", "state", "steps ok", "quota refusals", "errors", "refused by the model",
         "requests per window (learned)", "generating"],
        [[d["name"], d["state"], d["ok"], d["busy"], d["errors"], d["rejected"],
          "—" if d["requestsLimit"] is None else d["requestsLimit"], f"{100 * d['utilisation']:.1f}%"]
         for d in devices],
    )
    return _section("Device utilisation", chart + table)


def _queue_wait(report: dict[str, Any]) -> str | None:
    waits: dict[str, Any] = report.get("queueWait") or {}
    if not waits:
        return None
    used = {name: w for name, w in waits.items() if w["count"]}
    idle = [name for name, w in waits.items() if not w["count"]]
    series = [Series("p50", "#9ec3e0"), Series("p90", "#5b97c4"), Series("p99", _BLUE), Series("max", "#1d3f5c")]
    bars = [Bar(f"{name} ({w['count']} steps)", [w["p50Ms"], w["p90Ms"], w["p99Ms"], w["maxMs"]])
            for name, w in used.items()]
    body = bar_chart(bars, axis_label="wait for a device (ms)", series=series) if bars else ""
    if idle:
        body += f"<p>No steps at priority {', '.join(idle)}.</p>"
    return _section("Queue wait for a device, by priority", body)


def _latency(report: dict[str, Any]) -> str | None:
    rows = []
    for key, label in (("ok", "ok turns"), ("all", "all turns")):
        s = report["latency"][key]
        cells = [_ms(s[k]) if s["count"] else "—" for k in ("meanMs", "p50Ms", "p90Ms", "p99Ms", "maxMs")]
        rows.append([label, s["count"], *cells])
    return _section("Turn latency", _rows(["", "turns", "mean", "median", "p90", "p99", "max"], rows))


def _tools(report: dict[str, Any]) -> str | None:
    tools, cancels = report["tools"], report["cancels"]
    return _section("Tools and cancels", _pairs([
        ("tool calls in ok turns", tools["callsInOkTurns"]),
        ("tool errors in ok turns", tools["errorsInOkTurns"]),
        ("tool calls answered by the game", tools["answeredByGame"]),
        ("tool calls left unanswered (to time out)", tools["leftUnanswered"]),
        ("cancels sent", cancels["sent"]),
        ("turns cancelled", cancels["turnsCancelled"]),
    ]))


def _settings(report: dict[str, Any]) -> str | None:
    c = report["config"]
    pairs: list[tuple[str, str]] = [("backend", c["backend"])]
    if c["backend"] == "farm":
        pairs += [("simulated phones", str(c["phones"])), ("time scale", f"{c['timeScale']:g} real s per phone s")]
    if c["deviceUrls"]:
        pairs.append(("devices", ", ".join(c["deviceUrls"])))
    if c["proxy"]:
        pairs.append(("proxy", c["proxy"]))
    if c.get("routes"):
        pairs += [("route file", c["routes"]), ("time scale of its farms", f"{c['timeScale']:g} real s per phone s")]
    pairs += [
        ("runtime", c["runtime"]),
        ("player sessions", str(c["sessions"])),
        ("NPCs on the shared world", str(c["npcs"])),
        ("duration of load", f"{c['durationSeconds']:g} s"),
        ("mean think time between turns", f"{c['thinkSeconds']:g} s"),
        ("share of turns cancelled in flight", f"{100 * c['cancelRate']:g}%"),
        ("share of tool calls left unanswered", f"{100 * c['toolTimeoutRate']:g}%"),
        ("tool timeout", f"{c['toolTimeoutSeconds']:g} s"),
        ("NPC actions: talk / decide / bark", " / ".join(f"{share:g}" for share in c["npcMix"])),
        ("deadline of each bark", f"{c['barkDeadlineSeconds']:g} s"),
        ("server deadlines by priority", ", ".join(f"{p}={s:g} s" for p, s in c["deadlines"]) or "defaults"),
        ("seed", str(c["seed"])),
    ]
    return _section("Settings", _pairs(pairs))


def _kinds(report: dict[str, Any]) -> str | None:
    actions: dict[str, Any] = report.get("actions") or {}
    if not actions:
        return None
    # The share answered by the model per kind; the counts behind it are in the table.
    bars = [Bar(_KIND_LABELS[kind], [round(100 * a["ok"] / a["total"], 1)]) for kind, a in actions.items()]
    chart = bar_chart(bars, axis_label="answered by the model, % of requests", axis_max=100, unit="%",
                      value_format=lambda v: f"{v:.1f}")
    table = _rows(["request", "total", "answered", "degraded", "other fallback", "cancelled", "failed", "failed by code"],
                  [[_KIND_LABELS[kind], a["total"], a["ok"], _degraded_cell(kind, a), a["otherFallback"], a["cancelled"],
                    a["failed"], ", ".join(f"{_words(c)} {n}" for c, n in a["failedByCode"].items()) or "—"]
                   for kind, a in actions.items()])
    note = ("<p>Degraded: no generation could start before the request's deadline, so it got its protocol "
            "fallback (marked <code>degraded: \"deadline\"</code>): a talk its NPC's next fallback line, a "
            "decision its <code>fallbackOptionID</code>, a bark one of its NPC's recent barks (marked "
            "<code>repeated: true</code>) or, before it has barked, one of its fallback lines. Failed <code>rate_limited</code>: the same, with no "
            "fallback to give.</p>")
    return _section("Degraded and failed, by kind of request", chart + table + note)


_KIND_LABELS = {"session": "session turns", "talk": "NPC talks", "decide": "decisions", "bark": "barks"}


def _generations(report: dict[str, Any]) -> str | None:
    per = report.get("actionsPerGeneration")
    if per is None:
        return None
    return _section("Requests answered per generation", _pairs([
        ("generations the devices ran", per["generations"]),
        ("requests answered by the model", per["answered"]),
        ("of them NPC actions (talks, decisions, barks)", per["npcActions"]),
        ("answered per generation", per["answeredPerGeneration"]),
        *_coalescing_pairs(per.get("coalescing")),
    ]) + "<p>A talk with a tool takes two or three generations; a decision or a bark one, unless "
         "several share one generation.</p>")


def _coalescing_pairs(coalescing: dict[str, Any] | None) -> list[tuple[str, Any]]:
    if coalescing is None:
        return [("coalescing", "off")]
    return [
        ("coalescable steps (barks, tool-free decisions, talk steps)", coalescing["items"]),
        ("generations they used", coalescing["generations"]),
        ("steps answered from a batch", coalescing["answered"]),
        ("batches of two or more (steps in them)", f"{coalescing['batches']} ({coalescing['batchedItems']})"),
        ("retried alone / given their batch's error", f"{coalescing['retriedAlone']} / {coalescing['failed']}"),
    ]


def _ambient_section(report: dict[str, Any]) -> str | None:
    ambient = report.get("ambientConversations")
    if ambient is None:
        return None
    pairs = _pairs([
        ("conversations (members)", f"{ambient['conversations']} ({ambient['members']})"),
        ("lines spoken", ambient["lines"]),
        ("degraded at their deadline (the speaker's fallback line)", ambient["degradedBy"].get("deadline", 0)),
        ("gave way to a player's talk (the speaker's fallback line)", ambient["degradedBy"].get("preempted", 0)),
        ("other fallback lines", ambient["otherFallback"]),
        ("failed requests", sum(ambient["failedByCode"].values())),
        ("line latency p50 / p99", f"{_ms(ambient['lineLatency']['p50Ms'])} / {_ms(ambient['lineLatency']['p99Ms'])}"),
        ("coalesced items per generation (every kind)", ambient["coalescedItemsPerGeneration"] or "–"),
    ])
    excerpt = _rows(["speaker", "line", "to", "degraded"],
                    [[e["name"], e["line"], e["addressee"] or "everyone", e["degraded"] or ""]
                     for e in ambient["excerpt"]])
    title = (f"<p>The opening of <code>{html.escape(ambient['excerptConversation'])}</code>, the conversation whose "
             f"opening the model answered most of:</p>") if ambient.get("excerptConversation") else ""
    return _section("Ambient conversations", pairs + title + excerpt)


def _expiry_section(report: dict[str, Any]) -> str | None:
    expiry: dict[str, Any] = report.get("expiry") or {}
    if not expiry:
        return None
    rows = [[name, e["requests"], e["degraded"], e["rateLimited"],
             f"{100 * (e['degraded'] + e['rateLimited']) / e['requests']:.1f}%"]
            for name, e in sorted(expiry.items(), key=lambda item: _PRIORITY_ORDER.index(item[0]))]
    return _section("Deadlines by priority", _rows(
        ["priority", "requests", "degraded at the deadline", "failed rate_limited", "expired"], rows))


_PRIORITY_ORDER = ["dialogue", "decision", "background"]


def _quota_use_section(report: dict[str, Any]) -> str | None:
    rows: list[dict[str, Any]] = report.get("quotaUse") or []
    if not rows:
        return None
    series = [Series("share of the quota windows used", _GREEN), Series("time spent generating", _BLUE)]
    bars = [Bar(r["name"], [round(100 * (r["share"] or 0), 1), round(100 * r["generating"], 1)]) for r in rows]
    chart = bar_chart(bars, axis_label="% of the run", axis_max=100, unit="%", series=series,
                      value_format=lambda v: f"{v:.1f}")
    table = _rows(["device", "generations", "allowed by its quota", "quota used", "generating"],
                  [[r["name"], r["generations"], r["allowed"], "—" if r["share"] is None else f"{100 * r['share']:.1f}%",
                    f"{100 * r['generating']:.1f}%"] for r in rows])
    return _section("Quota utilisation per device", chart + table)


def _routing_section(report: dict[str, Any]) -> str | None:
    routing = report.get("routing")
    if not routing:
        return None
    bars = [Bar(b["name"], [round(100 * b["share"], 1)]) for b in routing["backends"]]
    chart = bar_chart(bars, axis_label="share of the steps served, %", axis_max=100, unit="%",
                      value_format=lambda v: f"{v:.1f}")

    def percent(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.1f}%"

    def cap(b: dict[str, Any]) -> str:
        caps = [f"{b[key]:g}/{window}" for key, window in (("capHour", "hour"), ("capDay", "day")) if b[key] is not None]
        return ", ".join(caps) or "—"

    table = _rows(
        ["backend", "model", "steps", "share", "spilled", "capped", "failed", "spend", "cap", "quota", "decoding"],
        [[b["name"], b["model"], b["served"], percent(b["share"]), b["spilled"], b["capped"], b["failed"],
          f"{b['spend']:.4f}", cap(b), percent(b["quotaUsed"]), percent(b["generating"])]
         for b in routing["backends"]],
    )
    steps = _rows(["backend", "priority", "step kind", "steps", "spend"],
                  [[s["backend"], s["priority"], s["kind"], s["served"], f"{s['spend']:.4f}"] for s in routing["steps"]])
    summary = (f"<p>{routing['served']} steps served, {routing['unrouted']} taken by no backend (degraded or "
               f"failed); spend {routing['spend']:.4f}. A tier that is not its row's last holds a step for "
               f"{100 * routing['spill']:g}% of the step's queue time left; <i>spilled</i>: steps it did not admit "
               "by then (passed to the next tier), <i>capped</i>: steps a spend cap kept from it, <i>quota</i> and "
               "<i>decoding</i>: a device pool's share of its quota windows used and of the run spent "
               "generating.</p>")
    return _section("Routing and spend", summary + chart + table + steps)


SECTIONS: list[Callable[[dict[str, Any]], str | None]] = [
    _throughput, _outcomes, _kinds, _generations, _ambient_section, _routing_section, _expiry_section,
    _quota_use_section, _utilisation, _queue_wait, _latency, _tools, _settings,
]
"""The page's sections in order; each returns its HTML, or None to leave itself out."""


def render_html(report: dict[str, Any]) -> str:
    config = report["config"]
    conversations = report["fairness"]["owners"]
    title = f"oam-actors simulate — {config['backend']} backend, {conversations} conversations"
    subtitle = (f"{report['loadSeconds']:g} s of load, {report['elapsedSeconds']:g} s in all "
                f"(setup and the turns in flight at the end included)")
    banner = ""
    if report["interrupted"]:
        banner = (f'<p class="banner">Interrupted after {report["elapsedSeconds"]:g} s: this report covers '
                  f"what ran until then.</p>")
    sections = [s for s in (section(report) for section in SECTIONS) if s]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 15px/1.4 system-ui, sans-serif; margin: 2rem auto; max-width: 900px; color: #222; }}
h1 {{ font-size: 1.3rem; margin-bottom: .2rem; }} h2 {{ font-size: 1.05rem; margin-top: 2rem; }}
.sub {{ color: #666; margin-top: 0; }}
.banner {{ background: #fdf0e0; border: 1px solid #e8b26a; border-radius: 6px; padding: .5rem .8rem; }}
.cards {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(160px, 1fr)); gap: .75rem; margin-top: 1rem; }}
.card {{ border: 1px solid #ddd; border-radius: 8px; padding: .6rem .9rem; }}
.card .v {{ font-size: 1.4rem; font-weight: 600; }} .card .k {{ color: #555; font-size: .85rem; }}
.card .why {{ color: #888; font-size: .75rem; margin-top: .2rem; }}
table {{ border-collapse: collapse; margin-top: .8rem; }}
th {{ text-align: left; font-weight: 600; }}
td, th {{ padding: .2rem .8rem; border-bottom: 1px solid #eee; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
svg {{ max-width: 100%; height: auto; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #333; }}
svg text.tick {{ fill: #666; font-size: 11px; }} svg text.axis {{ font-size: 12px; fill: #444; font-weight: 600; }}
svg text.marker {{ fill: #b04a4a; font-size: 11px; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
{banner}
{_cards(report)}
{''.join(sections)}
</body></html>
"""


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n{body}\n"


def _cell(value: Any) -> str:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f'<td class="n">{value}</td>' if numeric else f"<td>{html.escape(str(value))}</td>"


def _pairs(pairs: list[tuple[str, Any]]) -> str:
    return "<table>" + "".join(f"<tr><td>{html.escape(k)}</td>{_cell(v)}</tr>" for k, v in pairs) + "</table>"


def _rows(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
