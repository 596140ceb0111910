"""Entry point of the ``oam-actors`` command."""

from __future__ import annotations

import argparse
import logging
import sys

from .. import __version__
from . import device, serve, simulate, stdio

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oam-actors", description="Actor runtime for the bridge protocol v1.0.")
    parser.add_argument("--version", action="version", version=f"oam-actors {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    commands = parser.add_subparsers(dest="command", required=True)
    stdio.add_arguments(commands.add_parser("stdio", help="serve one bridge over stdin/stdout"))
    device.add_arguments(commands.add_parser("device", help="run a simulated Nano phone (device protocol)"))
    simulate.add_arguments(commands.add_parser("simulate", help="run a crowd simulation and write a report"))
    serve.add_arguments(commands.add_parser("serve", help="serve the protocol over TCP and WebSocket"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "stdio":
        return stdio.run(args)
    if args.command == "device":
        return device.run(args)
    if args.command == "simulate":
        return simulate.run(args)
    if args.command == "serve":
        return serve.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
