"""Entry point of the ``oam-actors`` command.

Only the chosen subcommand's module is imported, so ``oam-actors stdio`` starts without loading
the WebSocket server, the simulator or the proxy backends.

A command-line mistake exits with status 2 and one line on stderr,
``oam-actors COMMAND: error: …`` naming the option and what it allows: argparse's own errors
(the values are checked by :mod:`oam_actors.cli.argtypes`) and any
:class:`~oam_actors.cli.argtypes.UsageError` a subcommand raises, inside task groups too. Ctrl-C
ends a command with status 130 and no traceback. Anything else is our bug: its traceback is kept.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from types import ModuleType
from typing import NoReturn, TypeVar

from .. import __version__
from ..runtime import tune_gc_for_servers
from .argtypes import LOG_LEVELS, UsageError, log_level

__all__ = ["main"]

_E = TypeVar("_E", bound=BaseException)

COMMANDS: dict[str, tuple[str, str]] = {
    "stdio": ("oam_actors.cli.stdio", "serve one bridge over stdin/stdout"),
    "serve": ("oam_actors.cli.serve", "serve the protocol over TCP and WebSocket"),
    "simulate": ("oam_actors.cli.simulate", "run a crowd simulation and write a report"),
    "device": ("oam_actors.cli.device", "run a simulated Nano phone (device protocol)"),
    "state": ("oam_actors.cli.state", "list, export, import or compact a state store (--state-store)"),
}

_LOG_LEVEL_HELP = f"stderr log level: {', '.join(LOG_LEVELS)}, any case (default WARNING)"


class _Parser(argparse.ArgumentParser):
    """Reports a mistake on one line (argparse would print the whole, wrapped usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _selected(argv: list[str]) -> str | None:
    """The subcommand: the first argument that is neither an option nor an option's value."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--log-level":
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    # No abbreviated options anywhere: a typo (``--phone 8``) must not silently mean another option.
    parser = _Parser(prog="oam-actors", description="Actor runtime for the bridge protocol v1.0.", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"oam-actors {__version__}")
    parser.add_argument("--log-level", type=log_level, default="WARNING", metavar="LEVEL", help=_LOG_LEVEL_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _selected(argv)
    module = None
    for name, (module_name, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            # Also after the subcommand; SUPPRESS keeps the top-level value when it is not given here.
            sub.add_argument("--log-level", type=log_level, default=argparse.SUPPRESS, metavar="LEVEL",
                             help=_LOG_LEVEL_HELP)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, module = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if module is None:
        return 2
    tune_gc_for_servers()
    try:
        return int(module.run(args))
    except BaseException as exc:
        if (mistake := _only(exc, UsageError)) is not None:
            print(f"oam-actors {args.command}: error: {mistake}", file=sys.stderr)
            return 2
        if _only(exc, KeyboardInterrupt) is not None:
            return 130
        raise


def _only(exc: BaseException, kind: type[_E]) -> _E | None:
    """``exc`` if it is a ``kind``, or the first ``kind`` of a task group's exceptions if they all are."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, others = exc.split(kind)
        if matched is not None and others is None:
            return _only(matched.exceptions[0], kind)
    return None


if __name__ == "__main__":
    sys.exit(main())
