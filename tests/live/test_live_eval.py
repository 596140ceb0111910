"""The opt-in live eval against a real local model (``OAM_LIVE_EVAL=1``; see ``live_eval.py``).

The server comes from ``OAM_LIVE_BASE_URL`` (an OpenAI-compatible ``…/v1``, model name from
``OAM_LIVE_MODEL``, default ``qwen``) or is started here with ``scripts/local_model.py`` (first run:
downloads and assembles ~1.1 GB). Heavy: ~2 GB of memory and both cores for a few minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.environ.get("OAM_LIVE_EVAL") != "1", reason="live eval: set OAM_LIVE_EVAL=1"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    if os.environ.get("OAM_LIVE_BASE_URL"):
        yield os.environ["OAM_LIVE_BASE_URL"]
        return
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "local_model.py"), "--stop-on-stdin-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("READY "), f"local model server did not start: {line!r}"
        yield line.split()[1]
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


def test_live_sessions_choose_well_and_answer_in_form(base_url: str) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from live_eval import run_eval

    figures = run_eval(base_url, model_name=os.environ.get("OAM_LIVE_MODEL", "qwen"))
    print(json.dumps(figures.summary(), indent=2))
    for kind, text in figures.answers:
        print(f"{kind:18} | {' '.join(text.split())[:160]}")
    assert figures.lines and not [e for e in figures.errors if "structured" not in e]
    assert figures.right_action >= 0.7 * figures.lines
    assert figures.decide_first_valid >= 0.8 * figures.decide_first
    assert figures.structured_valid >= figures.structured - 1
