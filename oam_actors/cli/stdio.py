"""``oam-actors stdio``: one bridge over this process's stdin and stdout.

stdout carries protocol messages only (one JSON object per line); logs go to stderr. The process
exits on end of input and after answering ``shutdown``.
"""

from __future__ import annotations

import argparse

import anyio

from ..bridge import Bridge, BridgeConfig, ModelFactory
from ..runtime import LocalSystem
from ..transports.stdio import MAX_LINE_BYTES, open_stdio, read_lines
from .models import add_model_arguments, system_model_from_args

__all__ = ["add_arguments", "run", "serve_stdio"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--max-sessions", type=int, default=64, help="sessions per connection (default 64)")
    parser.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                        help=f"longest accepted input line (default {MAX_LINE_BYTES})")
    parser.add_argument("--no-scripted", action="store_true", help="refuse scripted models")


async def serve_stdio(config: BridgeConfig, system_model: ModelFactory | None, max_line_bytes: int = MAX_LINE_BYTES) -> None:
    stdin, write = await open_stdio()
    async with stdin, LocalSystem() as system:
        bridge = Bridge(system, write, config=config, system_model=system_model)
        await bridge.serve(read_lines(stdin, max_line_bytes=max_line_bytes))


def run(args: argparse.Namespace) -> int:
    config = BridgeConfig(max_sessions=args.max_sessions, scripted_models=not args.no_scripted)
    anyio.run(serve_stdio, config, system_model_from_args(args), args.max_line_bytes)
    return 0
