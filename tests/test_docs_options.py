"""The guides' option tables name exactly the options of each subcommand's parser (names only:
what they mean and their defaults are for a reader to check against ``--help``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from oam_actors.cli.main import COMMANDS, build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"
OPTION = re.compile(r"--[a-z][a-z0-9-]*")

# Where each command's options are documented: (guide, text of its ## heading). The runtime
# options of stdio, serve and simulate are documented once, in cluster.md.
RUNTIME = ("cluster.md", "Options")
SECTIONS = {
    "stdio": [("game-server.md", "`oam-actors stdio`"), RUNTIME],
    "serve": [("game-server.md", "`oam-actors serve`"), RUNTIME],
    "simulate": [("crowd-simulation.md", "`oam-actors simulate`"), RUNTIME],
    "device": [("farm-operation.md", "`oam-actors device`")],
    "state": [],  # positional arguments only (docs/durability.md)
}
# Every command takes these; --log-level is documented once, in the stdio table.
COMMON = {"--help", "--log-level"}


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _section(guide: str, heading: str) -> str:
    matches = [body for title, body in _sections((DOCS / guide).read_text()).items() if title.strip() == heading]
    assert len(matches) == 1, f"docs/{guide}: one section titled {heading!r}, found {len(matches)}"
    return matches[0]


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
    found: set[str] = set()
    for guide, heading in SECTIONS[command]:
        found |= _table_options(_section(guide, heading))
    return found


def _parsed(command: str) -> set[str]:
    parser = build_parser([command])[0]
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = commands.choices[command]
    return {option for action in sub._actions for option in action.option_strings if option.startswith("--")}


def test_every_command_has_its_tables() -> None:
    assert sorted(SECTIONS) == sorted(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_guide_tables_name_every_option(command: str) -> None:
    parsed, documented = _parsed(command) - COMMON, _documented(command) - COMMON
    where = ", ".join(f"docs/{guide} ({heading})" for guide, heading in SECTIONS[command])
    assert sorted(parsed - documented) == [], f"options of `oam-actors {command}` missing from the tables of {where}"
    assert sorted(documented - parsed) == [], f"the tables of {where} name options `oam-actors {command}` lacks"


def test_log_level_is_documented_with_its_placement() -> None:
    stdio = _section("game-server.md", "`oam-actors stdio`")
    assert "--log-level" in _table_options(stdio)
    assert "oam-actors --log-level INFO stdio" in stdio and "oam-actors stdio --log-level INFO" in stdio
