"""The README's OpenAI section: its ``curl`` and ``openai`` SDK examples run against a live server
started as the section shows (with a free port and a fast simulated farm)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from serve_process import HANG_GUARD, ServeProcess

README = Path(__file__).parent.parent / "README.md"
EXAMPLE_URL = "http://127.0.0.1:7402/v1"


def _section_blocks() -> dict[str, list[str]]:
    text = README.read_text()
    section = text.split("## The OpenAI-compatible API", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    for language, body in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S):
        blocks.setdefault(language, []).append(body)
    return blocks


def test_the_readme_examples_run_against_a_live_server() -> None:
    blocks = _section_blocks()
    (serve,) = [b for b in blocks["sh"] if "oam-actors serve" in b]
    (curl,) = [b for b in blocks["sh"] if b.lstrip().startswith("curl")]
    (sdk,) = blocks["python"]
    assert "--openai 127.0.0.1:7402" in serve and "--model farm:2" in serve
    args = ["--openai", "127.0.0.1:0", "--model", "farm:2", "--farm-time-scale", "0.01"]
    with ServeProcess(args) as process:
        url = process.openai_urls[0]
        shown = subprocess.run(["sh", "-c", curl.replace(EXAMPLE_URL, url)], capture_output=True, text=True,
                               timeout=HANG_GUARD, check=True)
        completion = json.loads(shown.stdout)
        assert completion["choices"][0]["message"]["content"]
        ran = subprocess.run([sys.executable, "-c", sdk.replace(EXAMPLE_URL, url)], capture_output=True, text=True,
                             timeout=HANG_GUARD * 3, check=False)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() and ran.stdout.strip() != "None"
        assert process.stop() == 0
