"""The live benchmarks' model server: the ``--base-url`` given, or ``scripts/local_model.py``
started for the run and stopped at its end (first run: downloads ~1.1 GB)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from local_model import default_cache, prepared  # noqa: E402


def local_model_ready() -> bool:
    """Whether ``scripts/local_model.py`` would serve at once (wheels and model in its cache),
    rather than download ~1.1 GB first."""
    return prepared(default_cache())


class ServerDidNotStart(Exception):
    """``scripts/local_model.py`` did not print ``READY <url>``."""


@contextmanager
def live_model(base_url: str | None) -> Iterator[str]:
    """The OpenAI-compatible base URL to use while the block runs."""
    if base_url is not None:
        yield base_url
        return
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "local_model.py"), "--stop-on-stdin-eof"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    try:
        ready = server.stdout.readline()
        if not ready.startswith("READY "):
            raise ServerDidNotStart(f"the local model server did not start: {ready!r}")
        yield ready.split()[1]
    finally:
        server.stdin.close()
        server.wait(timeout=60)
