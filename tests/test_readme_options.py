"""README.md's option tables name exactly the options of each subcommand's parser (names only:
what they mean and their defaults are for a reader to check against ``--help``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from oam_actors.cli.main import COMMANDS, build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
OPTION = re.compile(r"--[a-z][a-z0-9-]*")

# The README sections (## headings containing these) whose option tables document a command;
# the runtime options of stdio, serve and simulate are documented once, with the cluster.
SECTIONS = {
    "stdio": ["`oam-actors stdio`", "Running on a cluster"],
    "serve": ["`oam-actors serve`", "Running on a cluster"],
    "simulate": ["`oam-actors simulate`", "Running on a cluster"],
    "device": ["`oam-actors device`"],
    "state": [],  # positional arguments only (docs/durability.md)
}
# Every command takes these; --log-level is documented once, in the stdio table.
COMMON = {"--help", "--log-level"}


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _table_options(section: str) -> set[str]:
    """The options named in the first column of the section's ``| option | …`` tables."""
    found: set[str] = set()
    in_table = False
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            in_table = False
        elif cells[0] == "option":
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            found.update(OPTION.findall(cells[0]))
    return found


def _documented(command: str) -> set[str]:
    sections = _sections(README.read_text())
    found: set[str] = set()
    for wanted in SECTIONS[command]:
        matches = [body for heading, body in sections.items() if wanted in heading]
        assert len(matches) == 1, f"README.md: one section titled with {wanted!r}, found {len(matches)}"
        found |= _table_options(matches[0])
    return found


def _parsed(command: str) -> set[str]:
    parser = build_parser([command])[0]
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = commands.choices[command]
    return {option for action in sub._actions for option in action.option_strings if option.startswith("--")}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_readme_tables_name_every_option(command: str) -> None:
    parsed, documented = _parsed(command) - COMMON, _documented(command) - COMMON
    assert sorted(parsed - documented) == [], f"options of `oam-actors {command}` missing from README.md's table"
    assert sorted(documented - parsed) == [], f"README.md's `oam-actors {command}` table names unknown options"


def test_log_level_is_documented_with_its_placement() -> None:
    stdio = next(body for heading, body in _sections(README.read_text()).items() if "`oam-actors stdio`" in heading)
    assert "--log-level" in _table_options(stdio)
    assert "oam-actors --log-level INFO stdio" in stdio and "oam-actors stdio --log-level INFO" in stdio
