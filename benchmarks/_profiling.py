"""Profiling for the benchmarks: ``--profile PATH`` runs the measured server under cProfile.

A server subprocess (``oam-actors stdio``) is started as ``python -m cProfile -o PATH -m …``, so
the profile covers the whole process and is written when it exits; work done in the benchmark's
own process is profiled with :func:`profiled`. Either way the top entries are printed after the
figures (cProfile slows the process down: figures from a profiled run are not the benchmark's).

A saved profile can be read again: ``python3 -m pstats PATH`` (``sort tottime``, ``stats 30``).
Call counts are the evidence to compare two versions by on a shared machine (times under
cProfile move with the load, counts do not): divide by the turns run, e.g. for the stdio server
``python3 benchmarks/bench_stdio.py --sessions 100 --turns 5000 --profile stdio.prof``. cProfile
counts every resumption of a coroutine as a call, so ``ncalls`` of a turn's coroutines (and of
``Context.run``: task steps) per turn count its trips through the event loop.
"""

from __future__ import annotations

import cProfile
import contextlib
import io
import os
import pstats
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cpu_seconds", "load_average", "print_top", "profiled", "python_command"]


def python_command(profile: str | None) -> list[str]:
    """How to start a Python server process: under cProfile writing ``profile`` when given."""
    if profile is None:
        return [sys.executable]
    return [sys.executable, "-m", "cProfile", "-o", profile]


@contextlib.contextmanager
def profiled(profile: str | None) -> Iterator[None]:
    """Profile this process's work inside the block into ``profile`` (nothing when ``None``)."""
    if profile is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


def print_top(profile: str, *, entries: int = 30, sort: str = "tottime") -> None:
    """The ``entries`` most expensive functions of a saved profile, by ``sort``."""
    if not Path(profile).exists():
        print(f"(no profile written to {profile})")
        return
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(entries)
    print(f"--- profile {profile}, top {entries} by {sort} ---")
    print(out.getvalue().split("\n", 3)[-1].rstrip())


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; this process elsewhere)."""
    if pid is None or not Path("/proc", str(pid), "stat").exists():
        return os.times().user + os.times().system if pid is None else 0.0
    fields = Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """The 1-minute load average and the cores, to print next to a figure."""
    return f"load {os.getloadavg()[0]:.2f}/{os.cpu_count()} cores"
