"""Command-line mistakes on `stdio`, `serve` and `device`: the real `python -m oam_actors`, each
mistake exits 2 with exactly one stderr line, `oam-actors COMMAND: error: …`, naming the option
(argparse's usage is not printed: for these commands it wraps over a dozen lines). Nothing goes to
stdout and nothing starts. The processes run a few at a time, all started by one fixture."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import socket
import subprocess
import sys
import types
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from oam_actors.cli import main as cli_main
from oam_actors.cli.argtypes import UsageError

ROOT = Path(__file__).resolve().parents[1]
BUSY = "{busy}"  # replaced by a port that a socket of this module listens on

# (case id, argv, what the one line must contain: the option, and what it allows)
MISTAKES: list[tuple[str, list[str], list[str]]] = [
    # values, checked while parsing
    ("line-bytes-0", ["stdio", "--max-line-bytes", "0"], ["--max-line-bytes", "at least 1", "'0'"]),
    ("line-bytes-negative", ["stdio", "--max-line-bytes", "-5"], ["--max-line-bytes", "at least 1", "'-5'"]),
    ("sessions-negative", ["stdio", "--max-sessions", "-1"], ["--max-sessions", "at least 1"]),
    ("shards-0", ["stdio", "--runtime", "ray", "--shards", "0"], ["--shards", "at least 1"]),
    ("runtime-choice", ["stdio", "--runtime", "cloud"], ["--runtime", "'local', 'ray'"]),
    ("address-form", ["stdio", "--runtime", "ray", "--address", "somewhere"], ["--address", "HOST:PORT"]),
    ("log-level-before", ["--log-level", "LOUD", "stdio"], ["--log-level", "DEBUG, INFO, WARNING, ERROR, CRITICAL"]),
    ("log-level-after", ["serve", "--log-level", "LOUD"], ["--log-level", "DEBUG, INFO"]),
    ("connections-0", ["serve", "--tcp", "127.0.0.1:0", "--max-connections", "0"], ["--max-connections", "at least 1"]),
    ("idle-negative", ["serve", "--tcp", "127.0.0.1:0", "--idle-timeout", "-1"], ["--idle-timeout", "at least 0"]),
    ("connection-bytes-small", ["serve", "--tcp", "127.0.0.1:0", "--max-connection-bytes", "1000"],
     ["--max-connection-bytes (1000) must be at least 4 x --max-line-bytes"]),
    ("in-flight-0", ["stdio", "--max-in-flight", "0"], ["--max-in-flight", "at least 1"]),
    ("tcp-port", ["serve", "--tcp", "127.0.0.1:70000"], ["--tcp", "port from 0 to 65535"]),
    ("device-port", ["device", "--simulate", "--port", "70000"], ["--port", "0 to 65535"]),
    ("device-window", ["device", "--simulate", "--quota-window", "0"], ["--quota-window", "greater than 0"]),
    ("device-rate", ["device", "--simulate", "--tool-call-rate", "1.5"], ["--tool-call-rate", "from 0 to 1"]),
    ("device-block", ["device", "--simulate", "--block", "troll:loud"], ["--block", "WORD:CODE"]),
    ("device-background", ["device", "--simulate", "--background", "9:3"], ["--background", "START <= END"]),
    ("unknown-option", ["stdio", "--max-lines", "3"], ["unrecognized arguments: --max-lines"]),
    # no abbreviations: a typo is an error, never another option (--phone is not --phones)
    ("abbreviated-phones", ["simulate", "--phone", "8"], ["unrecognized arguments: --phone 8"]),
    ("abbreviated-tcp", ["serve", "--tc", "127.0.0.1:0"], ["unrecognized arguments: --tc"]),
    ("abbreviated-log-level", ["stdio", "--log-lev", "DEBUG"], ["unrecognized arguments: --log-lev DEBUG"]),
    # options that do not fit together, found after parsing
    ("token-empty-secret", ["serve", "--tcp", "127.0.0.1:0", "--token", "alice="], ["--token", "'alice' is empty"]),
    ("token-empty-name", ["serve", "--tcp", "127.0.0.1:0", "--token", "=s3cret"], ["--token", "NAME in NAME=SECRET"]),
    ("token-twice", ["serve", "--tcp", "127.0.0.1:0", "--token", "a=x", "--token", "b=x"], ["--token", "twice"]),
    ("serve-no-listener", ["serve", "--model", "scripted"], ["--tcp HOST:PORT", "--ws HOST:PORT"]),
    ("serve-open-no-token", ["serve", "--tcp", "0.0.0.0:0"], ["0.0.0.0:0 (not loopback)", "--token"]),
    ("device-open-no-token", ["device", "--simulate", "--host", "0.0.0.0", "--port", "0"],
     ["--host 0.0.0.0 (not loopback)", "--token"]),
    ("device-not-simulate", ["device"], ["--simulate"]),
    ("device-fault-sum", ["device", "--simulate", "--fault-hang", "0.6", "--fault-garbage", "0.6"],
     ["invalid phone configuration", "sum to at most 1"]),
    ("address-without-ray", ["stdio", "--address", "auto"], ["--address", "--runtime ray"]),
    ("address-unresolvable", ["stdio", "--runtime", "ray", "--address", "nowhere.invalid:6379"],
     ["--address nowhere.invalid:6379", "cannot resolve"]),
    ("state-store-folder", ["stdio", "--runtime", "ray", "--state-store", "/nonexistent/oam/state.db"],
     ["--state-store", "does not exist"]),
    # addresses that cannot be bound
    ("device-port-busy", ["device", "--simulate", "--port", BUSY], ["--host/--port 127.0.0.1:" + BUSY, "in use"]),
    ("tcp-port-busy", ["serve", "--tcp", "127.0.0.1:" + BUSY], ["--tcp 127.0.0.1:" + BUSY, "in use"]),
    ("ws-port-busy", ["serve", "--ws", "127.0.0.1:" + BUSY], ["--ws 127.0.0.1:" + BUSY, "in use"]),
    ("tcp-host-unresolvable", ["serve", "--tcp", "nowhere.invalid:0", "--token", "s3cret"],
     ["--tcp nowhere.invalid:0", "cannot listen"]),
    ("device-host-unresolvable", ["device", "--simulate", "--host", "nowhere.invalid", "--port", "0", "--token", "s"],
     ["--host/--port nowhere.invalid:0", "cannot listen"]),
]

NEEDS_WEBSOCKETS = {"ws-port-busy"}


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oam_actors", *argv],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OAM_RUNTIME": "local"},
    )


@pytest.fixture(scope="module")
def busy_port() -> Iterator[str]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield str(listening.getsockname()[1])


@pytest.fixture(scope="module")
def outcomes(busy_port: str) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Every case's process, started at once and run three at a time (each spends most of its
    half second importing)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {
            case: pool.submit(_run, [arg.replace(BUSY, busy_port) for arg in argv])
            for case, argv, _ in MISTAKES
        }


@pytest.mark.parametrize(("case", "argv", "expected"), MISTAKES, ids=[case for case, _, _ in MISTAKES])
def test_a_mistake_exits_2_with_one_line_naming_the_option(
    case: str, argv: list[str], expected: list[str], outcomes: dict, busy_port: str
) -> None:
    if case in NEEDS_WEBSOCKETS and importlib.util.find_spec("websockets") is None:
        pytest.skip("needs the websockets package")
    completed = outcomes[case].result()
    lines = completed.stderr.splitlines()
    assert (completed.returncode, completed.stdout, len(lines)) == (2, "", 1), completed.stderr
    # the subcommand's parser names itself; the top-level one (unknown options, --log-level first) does not
    assert re.match(rf"oam-actors( {argv[0]})?: error: ", lines[0]), lines[0]
    for text in expected:
        assert text.replace(BUSY, busy_port) in lines[0]


@pytest.mark.parametrize("command", list(cli_main.COMMANDS))
def test_no_parser_takes_abbreviations(command: str) -> None:
    parser, _ = cli_main.build_parser([command])
    [subcommands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert parser.allow_abbrev is False and subcommands.choices[command].allow_abbrev is False


@pytest.mark.parametrize("argv", [["stdio", "--log-level", "debug"], ["--log-level", "DEBUG", "stdio"]])
def test_log_level_goes_before_or_after_the_subcommand(argv: list[str]) -> None:
    completed = _run(argv)  # end of input at once: the bridge starts and stops cleanly
    assert completed.returncode == 0, completed.stderr
    assert " DEBUG " in completed.stderr  # asyncio's own debug line: the level took effect


# --- in process: every numeric option is checked ----------------------------------------------

# Plain int/float on purpose: any integer seeds; the phone configuration checks the battery code.
UNCHECKED_BY_DESIGN = {("device", "--seed"), ("device", "--battery-code"), ("simulate", "--seed")}


@pytest.mark.parametrize("command", list(cli_main.COMMANDS))
def test_every_numeric_option_is_checked(command: str) -> None:
    """A bare ``type=int`` or ``float`` accepts 0, -5 and nan; each option says what it allows."""
    parser = cli_main.build_parser([command])[0]
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    unchecked = {
        (command, action.option_strings[-1])
        for action in sub._actions
        if action.type in (int, float)
    }
    assert unchecked - UNCHECKED_BY_DESIGN == set(), "use a checker of oam_actors.cli.argtypes"


# --- in process: how the entry point tells a mistake from a bug ----------------------------------


def _command(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    """Makes `oam-actors stdio` a command whose run raises ``failure``."""
    module = types.ModuleType("fake_command")
    module.add_arguments = lambda parser: None  # type: ignore[attr-defined]

    def run(args: object) -> int:
        raise failure

    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_command", module)
    monkeypatch.setitem(cli_main.COMMANDS, "stdio", ("fake_command", "a test command"))
    monkeypatch.setattr(cli_main, "tune_gc_for_servers", lambda: None)


@pytest.mark.parametrize(
    "failure",
    [UsageError("--x: no"), ExceptionGroup("task group", [UsageError("--x: no")]),
     BaseExceptionGroup("nested", [ExceptionGroup("inner", [UsageError("--x: no")])])],
)
def test_a_usage_error_is_one_line_even_from_a_task_group(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], failure: BaseException
) -> None:
    _command(monkeypatch, failure)
    assert cli_main.main(["stdio"]) == 2
    assert capsys.readouterr().err == "oam-actors stdio: error: --x: no\n"


def test_ctrl_c_ends_without_a_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _command(monkeypatch, KeyboardInterrupt())
    assert cli_main.main(["stdio"]) == 130
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "failure", [RuntimeError("bug"), ExceptionGroup("task group", [UsageError("--x: no"), RuntimeError("bug")])]
)
def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    _command(monkeypatch, failure)
    with pytest.raises(type(failure)):
        cli_main.main(["stdio"])
