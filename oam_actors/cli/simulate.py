"""``oam-actors simulate``: run the embedded demo (or a configured load) and write a report.

On the defaults it starts a simulated farm of four phones behind a device pool, a shared world with
16 NPCs and 40 sessions, drives their conversations (client tools, cancels and tool timeouts at
small rates) for 60 s with a live display, and ends with a report (JSON and an HTML page with
charts) under ``reports/``: turns by outcome, latency, queue waits by priority, quota events
absorbed and surfaced, per-device utilisation and Jain's fairness across conversations.
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from ..bridge import Bridge, BridgeConfig
from ..game_methods import GameExtension
from ..runtime import LocalSystem
from ..sim import SimConfig, SimRun, build_report, run_simulation, write_report
from ..sim.backends import Backend, make_backend
from ..sim.client import BridgeClient
from .runtime import SystemFactory, add_runtime_arguments, system_from_args

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = SimConfig()
    parser.add_argument("--backend", default=defaults.backend, choices=["farm", "scripted", "devices", "proxy"],
                        help="what the conversations run on (default: a simulated farm of phones)")
    parser.add_argument("--phones", type=int, default=defaults.phones, help="simulated phones in the farm")
    parser.add_argument("--device", action="append", default=[], metavar="URL", help="a real device URL (repeatable)")
    parser.add_argument("--proxy", metavar="URL[#MODEL]", help="an OpenAI-compatible base URL for --backend proxy")
    parser.add_argument("--time-scale", type=float, default=defaults.time_scale,
                        help="farm: real seconds per phone second (default 0.1: the 60 s quota window lasts 6 s)")
    parser.add_argument("--sessions", type=int, default=defaults.sessions, help="concurrent session conversations")
    parser.add_argument("--npcs", type=int, default=None,
                        help="NPCs on one shared world, each in its own conversation (default: 16 on the farm, else 0)")
    parser.add_argument("--duration", type=float, default=defaults.duration_seconds, help="seconds of load")
    parser.add_argument("--think", type=float, default=defaults.think_seconds, help="mean pause between turns (s)")
    parser.add_argument("--cancel-rate", type=float, default=defaults.cancel_rate)
    parser.add_argument("--tool-timeout-rate", type=float, default=defaults.tool_timeout_rate)
    parser.add_argument("--tool-timeout", type=float, default=defaults.tool_timeout_seconds, help="seconds")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--report-dir", default=defaults.report_dir)
    parser.add_argument("--no-progress", action="store_true", help="no live display")
    add_runtime_arguments(parser)


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        backend=args.backend, phones=args.phones, device_urls=args.device, proxy=args.proxy,
        time_scale=args.time_scale, sessions=args.sessions, npcs=args.npcs,
        duration_seconds=args.duration, think_seconds=args.think,
        cancel_rate=args.cancel_rate, tool_timeout_rate=args.tool_timeout_rate,
        tool_timeout_seconds=args.tool_timeout, seed=args.seed, report_dir=args.report_dir,
        runtime=args.runtime,
    )


async def _main(config: SimConfig, progress: bool, runtime: SystemFactory = LocalSystem) -> dict:
    display = None
    try:
        # The actor system first: on Ray, a pool backend hosts its model actor on the cluster.
        async with runtime() as system, make_backend(config) as backend:
            display = _Progress(config, backend) if progress else None

            def make_client() -> BridgeClient:
                npcs = max(128, config.npc_count)
                return BridgeClient(lambda write: Bridge(
                    system, write,
                    config=BridgeConfig(max_sessions=max(64, config.sessions)),
                    system_model=backend.system_model(),
                    extensions=[GameExtension(max_npcs=npcs, max_subscriptions=npcs)],
                ))

            run = await run_simulation(config, backend, make_client, on_tick=display.update if display else None)
    finally:
        if display is not None:
            display.stop()
    return build_report(run)


class _Progress:
    """A live rich display of the run (stderr, so stdout stays clean for the summary)."""

    def __init__(self, config: SimConfig, backend: Backend) -> None:
        from rich.console import Console
        from rich.live import Live

        self.config = config
        self.backend = backend
        self.live = Live(console=Console(stderr=True), refresh_per_second=4, transient=False)
        self.live.start()

    def update(self, run: SimRun) -> None:
        from rich.table import Table

        ok = sum(1 for s in run.samples if s.outcome == "ok")
        failed = len(run.samples) - ok
        elapsed = run.elapsed
        table = Table(title=f"oam-actors simulate — {self.config.backend}", show_header=False)
        table.add_row("elapsed", f"{min(elapsed, self.config.duration_seconds):.0f} / {self.config.duration_seconds:.0f} s")
        table.add_row("turns ok", f"{ok}  ({ok / max(elapsed, 1e-9):.1f}/s)")
        table.add_row("turns failed", str(failed))
        table.add_row("tool calls answered / left unanswered", f"{run.tool_calls_answered} / {run.tool_calls_ignored}")
        table.add_row("cancels sent", str(run.cancels_sent))
        for key, value in self.backend.snapshot().items():
            table.add_row(f"model: {key}", str(value))
        self.live.update(table)

    def stop(self) -> None:
        self.live.stop()


def run(args: argparse.Namespace) -> int:
    config = _config(args)
    started = time.monotonic()
    report = anyio.run(_main, config, not args.no_progress and sys.stderr.isatty(), system_from_args(args))
    json_path, html_path = write_report(report, config.report_dir)
    turns = report["turns"]
    latency = report["latency"]["ok"]
    quota = report["quota"]
    print(
        f"{turns['total']} turns in {time.monotonic() - started:.0f} s: {turns['byOutcome']}; "
        f"p50 {latency['p50_ms']:.0f} ms, p99 {latency['p99_ms']:.0f} ms; "
        f"Jain's fairness {report['fairness']['jainIndex']:.3f}; quota events absorbed "
        f"{quota['absorbedByScheduler']}, surfaced {quota['surfacedToClients']}"
    )
    print(f"report: {json_path} and {html_path}")
    return 0
