"""Run every benchmark of the project, one after another, and write ``benchmarks/RESULTS.md``.

Each benchmark is its own script (runnable alone); this entry point runs them in one session on
one machine so that the figures and the ratios they print are measured side by side. Benchmarks
that need something absent (a live model) are skipped and say so.

Run: python3 benchmarks/run_all.py [--quick] [--only NAME ...] [--output benchmarks/RESULTS.md]
     [--live [--base-url http://127.0.0.1:PORT/v1]]
The live-model benchmarks run only with ``--live`` (they start ``scripts/local_model.py`` unless
``--base-url`` names a running server; heavy: ~2 GB of memory, both cores, many minutes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# name, script, arguments (full run), arguments (--quick), what it measures
BENCHMARKS: list[tuple[str, str, list[str], list[str], str]] = [
    ("agent", "bench_agent.py", [], ["--turns", "1000"],
     "one scripted turn with one tool round; parse / validate / render per step"),
    ("jsonrpc", "bench_jsonrpc.py", [], [], "ping decode + encode in the JSON-RPC codec"),
    ("runtime", "bench_runtime.py", [], ["--asks", "20000"], "asks per second through LocalSystem actors"),
    ("stdio", "bench_stdio.py", [], ["--pings", "20000", "--sessions", "1,100", "--turns", "500"],
     "the real `oam-actors stdio` subprocess: pipelined pings, tool-round turns at 1/100/1000 sessions"),
    ("tcp", "bench_tcp.py", [], ["--pings", "20000", "--sessions", "1,100", "--turns", "500"],
     "the same over TCP, next to stdio"),
    ("crowd", "bench_crowd.py", [], [], "10,000 NPCs on one world, one grounded turn each"),
    ("cluster", "bench_cluster.py", [], ["--turns", "1000", "--latency-turns", "100", "--asks", "1000", "--naive", "4"],
     "LocalSystem vs RaySystem (1 and 2 shards), Ray boundary overhead, naive one-actor-per-object baseline"),
    ("scheduler", "bench_scheduler.py", [], ["--seconds", "1200"], "QuotaScheduler policy: admissions/s and the farm simulation"),
    ("farm", "bench_farm.py", [], [], "8 simulated phones, 1,000 NPCs, twice the quota offered"),
    ("crowd_quota", "bench_crowd_quota.py", [], ["--phones", "2", "--npcs", "250", "--seconds", "20"],
     "1,000 NPCs through the bridge at 3x a farm's quota: actions per generation, deadlines, fairness"),
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

# The same, on a real local model: opt-in (--live).
LIVE_BENCHMARKS: list[tuple[str, str, list[str], list[str], str]] = [
    ("live_model", "bench_live_model.py", [], ["--lines", "4", "--structured", "1"],
     "the live eval on Qwen2.5-Coder-1.5B (llama.cpp): right actions, valid envelopes and replies"),
    ("coalesce_live", "bench_coalesce_live.py", [], ["--bark-rounds", "2", "--decision-rounds", "1"],
     "coalesced barks and decisions on the same model: items valid and attributed to the right NPC"),
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (minutes instead of longer)")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    parser.add_argument("--live", action="store_true", help="also the benchmarks on a real local model")
    parser.add_argument("--base-url", help="--live: a running OpenAI-compatible …/v1 (default: start one)")
    args = parser.parse_args()
    sections = []
    live = [(n, s, f + _base(args), q + _base(args), w) for n, s, f, q, w in LIVE_BENCHMARKS]
    for name, script, full, quick, what in BENCHMARKS + live:
        if args.only and name not in args.only:
            continue
        if not args.live and name in {n for n, *_ in LIVE_BENCHMARKS}:
            sections.append(f"## {name}\n\n{what}\n\n(skipped: needs a live model; run with --live)\n")
            continue
        if not (HERE / script).exists():
            sections.append(f"## {name}\n\n{what}\n\n(not present in this checkout)\n")
            continue
        print(f"running {name} …", file=sys.stderr, flush=True)
        output, seconds, code = run_one(script, quick if args.quick else full, args.timeout)
        status = "" if code == 0 else f" — exit status {code}"
        sections.append(
            f"## {name}\n\n{what}. Command: `python3 benchmarks/{script} {' '.join(quick if args.quick else full)}`"
            f" ({seconds:.0f} s{status})\n\n```text\n{output}\n```\n"
        )
    header = (
        "# Benchmark results\n\n"
        f"Measured {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {machine()}, "
        f"all in one run of `python3 benchmarks/run_all.py{' --quick' if args.quick else ''}`. "
        "Shared machines are noisy: compare figures within this file, not across runs.\n"
    )
    Path(args.output).write_text(header + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)


def _base(args: argparse.Namespace) -> list[str]:
    return ["--base-url", args.base_url] if args.base_url else []


if __name__ == "__main__":
    main()
