"""``.ci/run`` runs the README's test command as written, so CI and a new user cannot diverge."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _readme_block_after(heading: str) -> list[str]:
    """The lines of the first ``sh`` block after the line ``heading`` in README.md."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(f"\n{heading}\n")
    block = re.search(r"```sh\n(.*?)```", readme[start:], re.S)
    assert block is not None, f"no sh block after {heading!r}"
    return block.group(1).strip().splitlines()


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    [command] = _readme_block_after("Run the tests:")
    script = (REPO / ".ci" / "run").read_text().splitlines()
    runs = [line for line in script if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert runs == [f"{command} || status=$?"], f".ci/run must run exactly {command!r}; it runs {runs}"


def test_ci_uses_a_fresh_virtualenv() -> None:
    script = (REPO / ".ci" / "run").read_text()
    assert re.search(r'^python3 -m venv "\$\{tmp\}/venv"$', script, re.M)
    assert "system-site-packages" not in script
    assert re.search(r'^\. "\$\{tmp\}/venv/bin/activate"$', script, re.M)
    subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")], check=True)


def test_readme_shows_how_to_make_the_virtualenv() -> None:
    assert _readme_block_after("## The two commands") == ["python3 -m venv .venv && . .venv/bin/activate"]
