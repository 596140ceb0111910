"""Entry point of the ``oam-actors`` command.

Only the chosen subcommand's module is imported, so ``oam-actors stdio`` starts without loading
the WebSocket server, the simulator or the proxy backends.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from types import ModuleType

from .. import __version__
from ..tuning import tune_gc_for_servers

__all__ = ["main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "stdio": ("oam_actors.cli.stdio", "serve one bridge over stdin/stdout"),
    "serve": ("oam_actors.cli.serve", "serve the protocol over TCP and WebSocket"),
    "simulate": ("oam_actors.cli.simulate", "run a crowd simulation and write a report"),
    "device": ("oam_actors.cli.device", "run a simulated Nano phone (device protocol)"),
}


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
    parser = argparse.ArgumentParser(prog="oam-actors", description="Actor runtime for the bridge protocol v1.0.")
    parser.add_argument("--version", action="version", version=f"oam-actors {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = _selected(argv)
    module = None
    for name, (module_name, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, module = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if module is None:
        return 2
    tune_gc_for_servers()
    return int(module.run(args))


if __name__ == "__main__":
    sys.exit(main())
