"""Run every benchmark of the project, one after another, and write ``benchmarks/RESULTS.md``.

Each benchmark is its own script (runnable alone); this entry point runs them in one session on
one machine so that the figures and the ratios they print are measured side by side. Benchmarks
that need something absent (a live model) are skipped and say so.

Each benchmark runs several times (3 unless its entry says fewer: the cluster benchmark repeats
its own rounds, the live ones are long) so that one quiet or one busy moment cannot make a
headline: every number of its output is the median over the runs, next to the machine's 1-minute
load average at the start of each run. A line whose words differ between runs (not only its
numbers) is shown from every run. The full run (without --live) takes about 35 minutes on 2 cores;
``--quick`` (about 12 minutes) measures the goals of the issues at their sizes where that is cheap
(10,000 NPCs, 100 sessions x 10 turns, 8 phones) and runs the few minute-long simulations once.

Run: python3 benchmarks/run_all.py [--quick] [--repeat N] [--only NAME ...] [--output benchmarks/RESULTS.md]
     [--no-live | --base-url http://127.0.0.1:PORT/v1]
The live-model benchmarks (Qwen2.5-Coder-1.5B on llama.cpp; heavy: ~2 GB of memory, both cores,
up to 15 minutes each, once) run when ``scripts/local_model.py`` has its model ready in its cache
(``scripts/local_model.py --prepare-only`` makes it so: ~1.1 GB downloaded) or ``--base-url``
names a running server; otherwise, or with ``--no-live``, they are skipped and keep the figures
of the file being replaced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _live import local_model_ready  # noqa: E402

# name, script, arguments (full run), arguments (--quick), what it measures[, runs in the full run]
Entry = tuple[str, str, list[str], list[str], str] | tuple[str, str, list[str], list[str], str, int]
BENCHMARKS: list[Entry] = [
    ("agent", "bench_agent.py", [], ["--turns", "1000"],
     "one scripted turn with one tool round; parse / validate / render per step"),
    ("jsonrpc", "bench_jsonrpc.py", [], [], "ping decode + encode in the JSON-RPC codec"),
    ("runtime", "bench_runtime.py", [], ["--asks", "20000"], "asks per second through LocalSystem actors"),
    ("stdio", "bench_stdio.py", [], ["--pings", "20000", "--sessions", "1,100", "--turns", "1000"],
     "the real `oam-actors stdio` subprocess: pipelined pings, tool-round turns at 1/100/1000 sessions"),
    ("tcp", "bench_tcp.py", [], ["--pings", "20000", "--sessions", "1,100", "--turns", "500"],
     "the same over TCP, next to stdio"),
    ("client", "bench_client.py", [], ["--pings", "10000", "--sessions", "100", "--turns", "500"],
     "the Python client (oam_actors.client) over TCP, next to a raw JSON-lines client"),
    ("crowd", "bench_crowd.py", ["--stdio"], ["--npcs", "10000", "--stdio"],
     "10,000 NPCs on one world, one grounded turn each, in process and over stdio"),
    ("durability", "bench_durability.py", [], ["--kills", "20", "--npcs", "10000"],
     "--state-store: SIGKILLs under load (acknowledged vs recovered commits), tool-round turns with vs without a "
     "store (100 sessions x 10), a 10,000-NPC crowd with a store"),
    ("burst", "bench_burst.py", [], ["--npcs", "10000"],
     "10,000 pipelined npc/talk with a client grounding tool over stdio and TCP: when the median response arrives"),
    ("cluster", "bench_cluster.py", [], ["--latency-turns", "100", "--asks", "1000", "--naive", "4"],
     "LocalSystem vs RaySystem (1 and 2 shards), Ray boundary overhead, naive one-actor-per-object baseline", 1),
    ("scheduler", "bench_scheduler.py", [], ["--seconds", "1200"], "QuotaScheduler policy: admissions/s and the farm simulation"),
    ("farm", "bench_farm.py", [], [], "8 simulated phones, 1,000 NPCs, twice the quota offered"),
    ("crowd_quota", "bench_crowd_quota.py", [], ["--phones", "8", "--npcs", "1000", "--seconds", "60"],
     "1,000 NPCs through the bridge at 3x a farm's quota: actions per generation, deadlines, fairness"),
    ("crowd_quota_text", "bench_crowd_quota.py", ["--reply-format", "text"],
     ["--phones", "8", "--npcs", "1000", "--seconds", "60", "--reply-format", "text"],
     "the same with plain-text NPC replies (`replyFormat: \"text\"`), whose reply steps coalesce too"),
    ("crowd_quota_linger", "bench_crowd_quota.py", ["--linger", "1"],
     ["--phones", "8", "--npcs", "1000", "--seconds", "60", "--linger", "1"],
     "the same with `--coalesce-linger` of one phone second for barks and decisions (player dialogue never lingers)"),
    ("routing", "bench_routing.py", [], ["--seconds", "20"],
     "8 phones and a paid provider behind a router, 1,000 NPCs at 3x the farm's quota: player dialogue degraded "
     "with and without the cloud tier, farm use, cloud spend against its cap, share of steps per backend"),
    ("fair_phones", "bench_fair_phones.py", [], [],
     "simulate on 8 decode-bound phones, 3,000 NPCs, mix 0.1,0.25,0.65, 40 s (--quick: 1,000 NPCs, 20 s): "
     "Jain over conversations and the dialogue's queue wait p99"),
    ("conversations", "bench_conversations.py", ["--repeat", "3"],
     ["--npcs", "400", "--seconds", "20", "--players", "20", "--repeat", "3"],
     "ambient conversations of 4 NPCs on a farm beside player talks and barks: lines per generation, output "
     "tokens per line, player dialogue p99 with and without them, wrong speakers, Jain over NPCs"),
    ("codecs", "bench_codecs.py", [], ["--mb", "2"], "SSE decoding per provider (MB/s)"),
    ("proxy", "bench_proxy.py", [], ["--steps", "100"], "proxy layer overhead per step vs the openai SDK"),
    ("openai", "bench_openai.py", [], ["--turns", "200", "--clients", "1,10", "--requests", "10"],
     "the OpenAI front door vs the bridge over TCP for the same scripted turn; concurrent streaming clients"),
    ("quota_frontdoors", "bench_quota_frontdoors.py", [], ["--seconds", "20"],
     "two serve front doors at 3x a windowed provider's limit: provider 429s and share of the limit, Ray (one "
     "model actor) next to two independent LocalSystem servers"),
    ("hostile", "bench_hostile.py", [], ["--samples", "100", "--turns", "20000"],
     "8 clients that do not read next to a well-behaved one: server memory, ping / turn latency before and during"),
]

# Minutes of simulated load each even at --quick sizes: one run there (three in the full run).
ONCE_WHEN_QUICK = {"cluster", "farm", "fair_phones", "crowd_quota", "crowd_quota_text", "crowd_quota_linger",
                   "quota_frontdoors", "routing", "conversations"}

# The same, on a real local model: when it is ready (or --base-url), one run each.
# coalesce_live starts no round after 400 s: a round of 6 items takes 1-3 minutes on 2 cores, up to 9
# (a structured one) when other work holds them, so a run ends within run_one's 15 minutes.
_COALESCE_LIVE = ["--batch", "6", "--bark-rounds", "3", "--decision-rounds", "3", "--structured-rounds", "2",
                  "--talk-rounds", "1", "--talks", "3", "--seconds", "400"]
LIVE_BENCHMARKS: list[tuple[str, str, list[str], list[str], str]] = [
    ("live_model", "bench_live_model.py", [], ["--lines", "4", "--structured", "1"],
     "the live eval on Qwen2.5-Coder-1.5B (llama.cpp): right actions, valid envelopes and replies"),
    ("coalesce_live", "bench_coalesce_live.py", _COALESCE_LIVE, _COALESCE_LIVE,
     "coalesced barks, decisions, structured replies and a talk's tool choices and replies on the same model: "
     "per kind, items valid and attributed to the right NPC (goal of issue 13: 95 % of barks and decisions)"),
    # ~6 minutes on 2 quiet cores; 16.5 at a load average of 5 (beyond --timeout's 900 s: raise it then).
    ("conversations_live", "bench_conversations_live.py", [], [],
     "ambient conversations among NPCs through the bridge on the same model, coalesced: lines valid, spoken by the "
     "right member and in character (goal 95 %); overheard facts used by a bystander and unknown to an absent NPC "
     "(goal 9 of 10 probes each)"),
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def run_one(script: str, arguments: list[str], timeout: float) -> tuple[str, float, int]:
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            [sys.executable, str(HERE / script), *arguments],
            cwd=ROOT, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        output = completed.stdout.strip() or completed.stderr.strip()[-2000:]
        code = completed.returncode
    except subprocess.TimeoutExpired as exc:
        output = f"(timed out after {timeout:.0f} s)\n{(exc.stdout or b'')[-2000:]!r}"
        code = -1
    return output, time.perf_counter() - started, code


# thousands commas only in groups of three ("1,000"), so "1, 2" in a list stays two numbers
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def merged(outputs: list[str]) -> str:
    """One output whose every number is the median of that number over ``outputs``; lines whose
    words differ between the runs are given from each run, marked ``[run i]``."""
    if len(outputs) == 1:
        return outputs[0]
    split = [output.splitlines() for output in outputs]
    if len({len(lines) for lines in split}) != 1:
        return "\n".join(f"[run {i + 1}]\n{output}" for i, output in enumerate(outputs))
    lines = []
    for versions in zip(*split, strict=True):
        if len({" ".join(_NUMBER.sub("#", line).split()) for line in versions}) != 1:
            lines.extend(f"[run {i + 1}] {line}" for i, line in enumerate(versions))
            continue
        numbers = [_NUMBER.findall(line) for line in versions]
        medians = iter([_median(column) for column in zip(*numbers, strict=True)])
        lines.append(_NUMBER.sub(lambda _: next(medians), versions[0]))
    return "\n".join(lines)


def _median(tokens: tuple[str, ...]) -> str:
    """The median of number tokens, written as the first one is (thousands commas, decimals)."""
    value = statistics.median(float(token.replace(",", "")) for token in tokens)
    first = tokens[0]
    decimals = len(first.rsplit(".", 1)[1]) if "." in first else 0
    return f"{value:,.{decimals}f}" if "," in first else f"{value:.{decimals}f}"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (minutes instead of longer)")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark run")
    parser.add_argument("--repeat", type=int, help="runs of every benchmark (default: 3, or its own count; the longest run once with --quick)")
    live_choice = parser.add_mutually_exclusive_group()
    live_choice.add_argument("--no-live", action="store_true", help="skip the benchmarks on a real local model")
    live_choice.add_argument("--base-url", help="a running OpenAI-compatible …/v1 for the live benchmarks "
                             "(default: start scripts/local_model.py when its model is ready)")
    args = parser.parse_args()
    sections = []
    started = time.perf_counter()
    live: list[Entry] = [(n, s, f + _base(args), q + _base(args), w, 1) for n, s, f, q, w in LIVE_BENCHMARKS]
    skip_live = _skip_live(args)
    for name, script, full, quick, what, *own in BENCHMARKS + live:
        if args.only and name not in args.only:
            continue
        if skip_live is not None and name in {n for n, *_ in LIVE_BENCHMARKS}:
            print(f"skipping {name}: {skip_live}", file=sys.stderr, flush=True)
            sections.append(_earlier_live(name, what, args.output, skip_live))
            continue
        if not (HERE / script).exists():
            sections.append(f"## {name}\n\n{what}\n\n(not present in this checkout)\n")
            continue
        runs = args.repeat or (1 if args.quick and name in ONCE_WHEN_QUICK else (own[0] if own else 3))
        arguments = quick if args.quick else full
        outputs, loads, seconds, codes = [], [], 0.0, []
        for run in range(runs):
            print(f"running {name} ({run + 1}/{runs}) …", file=sys.stderr, flush=True)
            loads.append(f"{os.getloadavg()[0]:.2f}")
            output, took, code = run_one(script, arguments, args.timeout)
            outputs.append(output)
            seconds += took
            codes.append(code)
        failed = [code for code in codes if code != 0]
        status = "" if not failed else f" — exit status {failed[0]} in {len(failed)} of {runs} runs"
        shown = merged([o for o, c in zip(outputs, codes, strict=True) if c == 0] or outputs)
        sections.append(
            f"## {name}\n\n{what}. Command: `python3 benchmarks/{script} {' '.join(arguments)}`"
            f" ({runs} run{'s' if runs > 1 else ''}, {seconds:.0f} s{status}; load average at the start of each run: "
            f"{', '.join(loads)} on {os.cpu_count()} cores){'; medians of the runs' if runs > 1 else ''}"
            f"\n\n```text\n{shown}\n```\n"
        )
    print(f"all benchmarks: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    header = (
        "# Benchmark results\n\n"
        f"Measured {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {machine()}, "
        f"all in one run of `python3 benchmarks/run_all.py{' --quick' if args.quick else ''}`. "
        "Each figure is the median of the benchmark's runs, with the load average at the start of each run; "
        "shared machines are noisy: compare figures within this file, not across runs.\n"
    )
    Path(args.output).write_text(header + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)


def _skip_live(args: argparse.Namespace) -> str | None:
    """Why the live benchmarks do not run, or ``None`` when they do."""
    if args.no_live:
        return "--no-live"
    if args.base_url is None and not local_model_ready():
        return "no local model ready (scripts/local_model.py --prepare-only downloads it, ~1.1 GB)"
    return None


def _earlier_live(name: str, what: str, output: str, why: str) -> str:
    """A skipped live benchmark keeps its figures from the file being replaced (a live run takes a
    real model and many minutes of CPU), marked as such; none there: says why it was skipped."""
    try:
        previous = Path(output).read_text(encoding="utf-8")
    except OSError:
        previous = ""
    start = previous.find(f"## {name}\n")
    if start >= 0 and "(skipped" not in previous[start:previous.find("\n## ", start + 1)]:
        end = previous.find("\n## ", start + 1)
        body = previous[start:] if end < 0 else previous[start:end + 1]
        marker = "(kept from an earlier `--live` run: not measured in this one)\n\n"
        return body if marker in body else body.replace("\n\n", "\n\n" + marker, 1)
    return f"## {name}\n\n{what}\n\n(skipped: {why})\n"


def _base(args: argparse.Namespace) -> list[str]:
    return ["--base-url", args.base_url] if args.base_url else []


if __name__ == "__main__":
    main()
