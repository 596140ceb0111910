"""``oam-actors simulate``: run the embedded demo (or a configured load) and write a report.

On the defaults it starts a simulated farm of four phones behind a device pool, a shared world with
16 NPCs and 16 sessions, drives their conversations (client tools, cancels and tool timeouts at
small rates) for 60 s, and ends with a report (JSON and an HTML page with charts) under
``reports/``: turns by outcome, latency, queue waits by priority, quota events absorbed and
surfaced, per-device utilisation and Jain's fairness across conversations.

Progress goes to stderr (stdout carries only the summary; ``reserve_stdout`` sends whatever else
writes there to stderr): a live table on a terminal, otherwise one plain line every
``--progress-interval`` seconds (and at each change of phase). Ctrl-C stops the load, prints one
line, writes the report of what ran so far and exits 130; a second Ctrl-C stops without a report.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from ..bridge import Bridge, BridgeConfig
from ..client import Connecting, InProcessEndpoint, connect
from ..game_methods import GameExtension
from ..sim import SimConfig, SimRun, build_report, run_simulation, write_report
from ..sim.backends import Backend, make_backend
from ..transports.stdio import reserve_stdout
from .argtypes import (
    UsageError,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    priority_deadline,
    shares,
    unit_interval,
)
from .models import add_quota_arguments
from .runtime import SystemFactory, add_runtime_arguments, opened_store, system_from_args

__all__ = ["EXIT_INTERRUPTED", "add_arguments", "run"]

EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it), with or without a report."""

PROGRESS_INTERVAL = 5.0
"""Default seconds between plain progress lines when stderr is not a terminal."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = SimConfig()
    parser.add_argument("--backend", default=None, choices=["farm", "scripted", "devices", "proxy", "routes"],
                        help="what the conversations run on (default: a simulated farm of phones; routes with "
                        "--routes)")
    parser.add_argument("--routes", metavar="FILE",
                        help="routes: a route file (TOML or JSON, see docs/routing.md); the conversations' model "
                        "routes each step between its backends (farms run at --time-scale)")
    parser.add_argument("--phones", metavar="N", type=positive_int, default=defaults.phones,
                        help=f"farm: simulated phones (default {defaults.phones})")
    parser.add_argument("--device", action="append", default=[], metavar="URL",
                        help="devices: a real device URL (repeatable; needed by --backend devices)")
    parser.add_argument("--proxy", metavar="URL[#MODEL]",
                        help="proxy: an OpenAI-compatible base URL (needed by --backend proxy)")
    parser.add_argument("--time-scale", metavar="S", type=positive_float, default=defaults.time_scale,
                        help="farm: real seconds per phone second (default 0.1: the 60 s quota window lasts 6 s)")
    parser.add_argument("--sessions", metavar="N", type=non_negative_int, default=defaults.sessions,
                        help=f"concurrent player sessions (default {defaults.sessions})")
    parser.add_argument("--npcs", metavar="N", type=non_negative_int, default=None,
                        help="NPCs on one shared world, each in its own conversation (default: 16 on the farm, else 0)")
    parser.add_argument("--conversations", metavar="N", type=non_negative_int, default=None,
                        help="ambient conversations of 4 NPCs among themselves (default: one per 8 NPCs)")
    parser.add_argument("--duration", metavar="S", type=positive_float, default=defaults.duration_seconds,
                        help=f"seconds of load (default {defaults.duration_seconds:g})")
    parser.add_argument("--think", metavar="S", type=non_negative_float, default=defaults.think_seconds,
                        help=f"mean pause between a conversation's turns, seconds (default {defaults.think_seconds:g})")
    parser.add_argument("--cancel-rate", metavar="R", type=unit_interval, default=defaults.cancel_rate,
                        help=f"share of turns cancelled in flight, 0-1 (default {defaults.cancel_rate:g})")
    parser.add_argument("--tool-timeout-rate", metavar="R", type=unit_interval, default=defaults.tool_timeout_rate,
                        help=f"share of tool calls the game never answers, 0-1 (default {defaults.tool_timeout_rate:g})")
    parser.add_argument("--tool-timeout", metavar="S", type=positive_float, default=defaults.tool_timeout_seconds,
                        help=f"seconds a turn waits for a tool result (default {defaults.tool_timeout_seconds:g})")
    parser.add_argument("--npc-mix", metavar="TALK,DECIDE,BARK", type=shares, default=defaults.npc_mix,
                        help="shares of an NPC's actions: npc/talk, decision/decide, npc/bark "
                             "(default {:g},{:g},{:g})".format(*defaults.npc_mix))
    parser.add_argument("--bark-deadline", metavar="S", type=positive_float, default=defaults.bark_deadline_seconds,
                        help=f"each bark's deadlineSeconds (default {defaults.bark_deadline_seconds:g}: 10 phone "
                             "seconds on the default farm); a bark not admitted in time repeats a recent one")
    parser.add_argument("--deadline", action="append", type=priority_deadline, metavar="PRIORITY=SECONDS",
                        help="the server's default deadline of a priority, as for stdio (repeatable)")
    parser.add_argument("--coalesce", action=argparse.BooleanOptionalAction, default=defaults.coalesce,
                        help="farm, devices, proxy: barks, tool-free decisions and talk steps share generations, as on "
                             "the servers (default on)")
    parser.add_argument("--seed", metavar="N", type=int, default=defaults.seed, help=f"random seed (default {defaults.seed})")
    parser.add_argument("--report-dir", default=defaults.report_dir, metavar="DIR",
                        help=f"where report.json and report.html go (default {defaults.report_dir})")
    parser.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    parser.add_argument("--progress-interval", type=positive_float, default=PROGRESS_INTERVAL, metavar="S",
                        help=f"seconds between plain progress lines when stderr is not a terminal "
                        f"(default {PROGRESS_INTERVAL:g})")
    add_quota_arguments(parser)
    add_runtime_arguments(parser)


def _check(args: argparse.Namespace) -> None:
    """Raises :class:`UsageError` for options that are each fine alone but do not fit together,
    before anything starts."""
    if args.backend is None:
        args.backend = "routes" if args.routes else SimConfig().backend
    if (args.backend == "routes") != bool(args.routes):
        raise UsageError("--routes FILE and --backend routes go together" if args.routes
                         else "--backend routes needs --routes FILE")
    if args.routes:
        _check_routes(args)
    if args.backend == "proxy":
        if not args.proxy:
            raise UsageError("--backend proxy needs --proxy URL[#MODEL]")
        from ..models.proxy import parse_model_spec

        try:
            parse_model_spec(f"openai:{args.proxy}", model="default")
        except ValueError as exc:
            raise UsageError(f"--proxy: {exc}") from exc
    elif args.proxy:
        raise UsageError("--proxy needs --backend proxy")
    stated = [option for option, value in (("--rpm", args.rpm), ("--tpm", args.tpm),
                                            ("--max-concurrency", args.max_concurrency)) if value is not None]
    if stated and args.backend != "proxy":
        raise UsageError(f"{', '.join(stated)} need --backend proxy (a proxy backend's stated limits)")
    if args.backend == "devices":
        if not args.device:
            raise UsageError("--backend devices needs at least one --device URL")
        from ..models.pool import PoolConfigError, normalize_urls

        try:
            normalize_urls(args.device)
        except PoolConfigError as exc:
            raise UsageError(f"--device: {exc}") from exc
    elif args.device:
        raise UsageError("--device needs --backend devices")
    if args.sessions == 0 and _config(args).npc_count == 0:
        raise UsageError("nothing to run: --sessions and --npcs are both 0 (give at least one conversation)")
    try:
        Path(args.report_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report-dir {args.report_dir}: cannot create the directory ({exc.strerror or exc})") from exc


def _check_routes(args: argparse.Namespace) -> None:
    from ..models.errors import ModelConfigError
    from ..models.setup import create_model_setup
    from ..sim.backends import routed_model_config

    try:
        create_model_setup(routed_model_config(_config(args)))  # checks the backends; starts nothing
    except ModelConfigError as exc:
        raise UsageError(f"argument --routes: {exc}") from exc


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        backend=args.backend, phones=args.phones, device_urls=args.device, proxy=args.proxy,
        time_scale=args.time_scale, sessions=args.sessions, npcs=args.npcs, conversations=args.conversations,
        duration_seconds=args.duration, think_seconds=args.think,
        cancel_rate=args.cancel_rate, tool_timeout_rate=args.tool_timeout_rate,
        tool_timeout_seconds=args.tool_timeout, seed=args.seed, report_dir=args.report_dir,
        runtime=args.runtime, npc_mix=args.npc_mix, bark_deadline_seconds=args.bark_deadline,
        deadlines=list(args.deadline or ()), coalesce=args.coalesce,
        rpm=args.rpm, tpm=args.tpm, max_concurrency=args.max_concurrency, routes=args.routes,
    )


# --- progress on stderr ----------------------------------------------------------------------------


class _Progress(Protocol):
    def update(self, run: SimRun, backend: Backend) -> None: ...

    def note(self, line: str) -> None: ...

    def stop(self) -> None: ...


def _phase(run: SimRun) -> str:
    if run.finished is not None:
        return "interrupted" if run.interrupted else "done"
    if run.interrupted:
        return "interrupted, stopping"
    if run.load_started is None:
        return "starting"
    if run.load_ended is None:
        return "running"
    return "finishing the turns in flight"


def _figures(run: SimRun, backend: Backend) -> list[tuple[str, str]]:
    """What the display shows, as (label, value) rows: the same for the live table and the lines."""
    outcomes = run.outcomes
    elapsed = run.elapsed
    failures = outcomes.failures()
    failed = str(outcomes.failed)
    if failures:
        failed += " (" + ", ".join(f"{code} {count}" for code, count in failures.items()) + ")"
    rows = [
        ("phase", _phase(run)),
        ("elapsed", f"{elapsed:.0f} s (load {run.config.duration_seconds:g} s)"),
        ("turns ok", f"{outcomes.ok} ({outcomes.ok / max(elapsed, 1e-9):.1f}/s)"),
    ]
    if outcomes.fallback:
        rows.append(("fallback lines", str(outcomes.fallback)))
    rows += [
        ("cancelled", str(outcomes.cancelled)),
        ("failed", failed),
        ("in flight", str(run.in_flight)),
        *([("abandoned when interrupted", str(run.abandoned))] if run.abandoned else []),
        ("tool calls answered / unanswered", f"{run.tool_calls_answered} / {run.tool_calls_ignored}"),
        ("cancels sent", str(run.cancels_sent)),
    ]
    if snapshot := backend.snapshot():  # a backend with a quota
        rows.append(("turns failed rate_limited", str(outcomes.counts.get("rate_limited", 0))))
        rows += [(key, str(value)) for key, value in snapshot.items()]
    return rows


class _LiveProgress:
    """A live rich table on a terminal; the last frame is drawn from the final numbers."""

    def __init__(self, config: SimConfig) -> None:
        from rich.console import Console
        from rich.live import Live

        self.title = f"oam-actors simulate — {config.backend}"
        self.live = Live(console=Console(stderr=True), refresh_per_second=4, transient=False)
        self.live.start()

    def update(self, run: SimRun, backend: Backend) -> None:
        from rich.table import Table

        table = Table(title=self.title, show_header=False)
        for label, value in _figures(run, backend):
            table.add_row(label, value)
        self.live.update(table, refresh=run.finished is not None)

    def note(self, line: str) -> None:
        self.live.console.print(line, markup=False, highlight=False)

    def stop(self) -> None:
        self.live.stop()


class _PlainProgress:
    """One plain line every ``interval`` seconds, and whenever the phase changes."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.last_line = -math.inf
        self.last_phase = ""

    def update(self, run: SimRun, backend: Backend) -> None:
        phase = _phase(run)
        now = self.clock()
        if phase == self.last_phase and now - self.last_line < self.interval:
            return
        self.last_line, self.last_phase = now, phase
        (_, phase_value), *rest = _figures(run, backend)
        self.note(f"simulate: {phase_value}; " + "; ".join(f"{label} {value}" for label, value in rest))

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def stop(self) -> None:
        return None


class _Quiet:
    """``--no-progress``: only the interruption line."""

    def update(self, run: SimRun, backend: Backend) -> None:
        return None

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def stop(self) -> None:
        return None


# --- the run ---------------------------------------------------------------------------------------


async def _watch_interrupts(
    stop: anyio.Event, everything: anyio.CancelScope, progress: _Progress, started: float,
    *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Ctrl-C once: stop the load and keep what ran. Twice: give up on the report too."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            if not stop.is_set():
                progress.note(f"interrupted after {time.monotonic() - started:.1f} s; writing the report of what ran")
                stop.set()
            else:
                progress.note("interrupted again; stopping without a report")
                everything.cancel()


async def _simulate(config: SimConfig, progress: _Progress, runtime: SystemFactory, stop: anyio.Event) -> SimRun:
    # The actor system first: on Ray, a pool backend hosts its model actor on the cluster.
    async with runtime() as system, make_backend(config) as backend:

        def make_client() -> Connecting:
            npcs = max(128, config.npc_count)
            bridge = InProcessEndpoint(lambda write: Bridge(
                system, write,
                config=BridgeConfig(max_sessions=max(64, config.sessions)),
                system_model=backend.system_model(),
                extensions=[GameExtension(max_npcs=npcs, max_subscriptions=npcs,
                                          max_conversations=max(64, config.conversation_count))],
            ))
            return connect(bridge, timeout=None)  # a turn takes what it takes: the report measures it

        return await run_simulation(config, backend, make_client, stop=stop,
                                    on_tick=lambda run: progress.update(run, backend))


Written = tuple[dict[str, Any], tuple[Path, Path]]


async def _main(config: SimConfig, progress: _Progress, runtime: SystemFactory, started: float) -> Written | None:
    """The report of the run (of what ran, after Ctrl-C) and where it was written; None after a
    second Ctrl-C."""
    stop = anyio.Event()
    written = None
    try:
        with anyio.CancelScope() as everything:
            async with anyio.create_task_group() as tg:
                await tg.start(_watch_interrupts, stop, everything, progress, started)
                run = await _simulate(config, progress, runtime, stop)
                # Still under the signal watcher, so a Ctrl-C now cannot tear the files.
                report = build_report(run, startup_seconds=max(0.0, run.started - started))
                written = report, write_report(report, config.report_dir)
                tg.cancel_scope.cancel()
    finally:
        progress.stop()
    return written


def _summary(report: dict[str, Any]) -> str:
    """One line of the report's figures; its seconds are the report's (the run, start-up apart)."""
    turns, latency, quota = report["turns"], report["latency"]["ok"], report["quota"]
    jain = report["fairness"]["jainIndex"]
    startup = report["startupSeconds"]
    parts = [
        f"{turns['total']} turns in {report['elapsedSeconds']:.0f} s"
        + (f" (after {startup:.0f} s of start-up)" if startup >= 1 else "")
        + f": {turns['ok']} ok, {turns['cancelled']} cancelled, "
        f"{turns['failed']} failed" + (f", {turns['fallback']} fallback" if turns["fallback"] else ""),
        f"p50 {latency['p50Ms']:.0f} ms, p99 {latency['p99Ms']:.0f} ms" if latency["count"] else "no ok turns",
        f"Jain's fairness {'—' if jain is None else f'{jain:.3f}'}",
    ]
    if quota is not None:  # the live display's words for the same figures
        if "refusalsAbsorbedByPool" in quota:
            parts.append(f"pool quota refusals absorbed {quota['refusalsAbsorbedByPool']}, pool steps given up "
                         f"(queue time ran out) {quota['stepsGivenUpByPool']}")
        else:
            parts.append(f"rate limits from the server {quota['throttlesFromServer']}")
        parts.append(f"turns failed rate_limited {quota['rateLimitedTurns']}")
    return "; ".join(parts)


def _check_empty_store(path: str) -> None:
    """A simulation creates its own sessions, NPCs and world: a store holding objects (an earlier
    run's) would refuse them."""
    store = opened_store(path, create=False)
    try:
        held = len(store.records())
    finally:
        store.close()
    if held:
        raise UsageError(f"--state-store {path}: holds {held} objects; a simulation needs a new or empty store")


def run(args: argparse.Namespace) -> int:
    if args.state_store and os.path.exists(args.state_store):
        _check_empty_store(args.state_store)
    runtime = system_from_args(args)
    _check(args)
    config = _config(args)
    progress: _Progress
    if args.no_progress:
        progress = _Quiet()
    elif sys.stderr.isatty():
        progress = _LiveProgress(config)
    else:
        progress = _PlainProgress(args.progress_interval)
    started = time.monotonic()
    with open(reserve_stdout(), "w") as out:
        try:
            written = anyio.run(_main, config, progress, runtime, started)
        except KeyboardInterrupt:  # before the signal watcher was up: nothing ran yet
            progress.note("interrupted while starting; no report")
            return EXIT_INTERRUPTED
        if written is None:
            return EXIT_INTERRUPTED
        report, (json_path, html_path) = written
        print(_summary(report), file=out)
        print(f"report: {json_path} and {html_path}", file=out)
    return EXIT_INTERRUPTED if report["interrupted"] else 0
