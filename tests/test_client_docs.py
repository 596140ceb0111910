"""docs/client.md's examples run, and print what the page says they print.

Each ```python block runs in a fresh interpreter in a temporary folder (each starts its own
``oam-actors stdio``); the ```text block right after it is its expected standard output. The
page has no other code blocks.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "client.md"
TEXT = PAGE.read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", TEXT, re.S)


def test_every_code_block_is_an_example_with_its_output() -> None:
    assert len(EXAMPLES) >= 5
    assert TEXT.count("```") == 4 * len(EXAMPLES)


@pytest.mark.parametrize(("code", "expected"), EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_example_prints_what_the_page_says(code: str, expected: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
