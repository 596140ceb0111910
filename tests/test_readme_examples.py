"""The README's Python examples run, and print what the README says they print.

Each ```python block of the "Embedding in Python" section runs in a fresh interpreter; the
```text block right after it is its expected standard output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```\s*```text\n(.*?)```", re.S)


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


EXAMPLES = _BLOCK.findall(_section(README.read_text(encoding="utf-8"), "Embedding in Python"))


def test_the_section_has_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize(("code", "expected"), EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_example_prints_what_the_readme_says(code: str, expected: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
