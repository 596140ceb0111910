"""``oam-actors stdio``: one bridge over this process's stdin and stdout.

stdout carries protocol messages only (one JSON object per line); logs go to stderr, and so does
anything else that writes to stdout (``reserve_stdout``: Ray's driver prints raylet errors there).
The process exits on end of input and after answering ``shutdown``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from contextlib import AsyncExitStack

import anyio

from ..bridge import Bridge, BridgeConfig, ModelFactory, model_extensions
from ..bridge.config import DEFAULT_MAX_CONNECTION_BYTES, DEFAULT_MAX_IN_FLIGHT
from ..game_methods import GameExtension, GameLimits
from ..models.errors import ModelHostError
from ..models.proxy import ProxyBackends
from ..models.setup import ModelSetup
from ..runtime import LocalSystem
from ..transports.stdio import MAX_LINE_BYTES, LineSplitter, open_stdio, read_lines, reserve_stdout
from .argtypes import UsageError, positive_int
from .models import add_model_arguments, check_routes, models_from_args
from .runtime import SystemFactory, add_runtime_arguments, system_from_args

__all__ = [
    "add_arguments", "add_connection_arguments", "add_game_arguments", "connection_bounds_error", "game_limits_from_args",
    "run", "serve_stdio",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--max-sessions", type=positive_int, default=64, metavar="N",
                        help="sessions per connection (default 64)")
    parser.add_argument("--max-line-bytes", type=positive_int, default=MAX_LINE_BYTES, metavar="N",
                        help=f"longest accepted input line (default {MAX_LINE_BYTES})")
    parser.add_argument("--no-scripted", action="store_true", help="refuse scripted models")
    add_connection_arguments(parser)
    add_game_arguments(parser)
    add_runtime_arguments(parser)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The per-connection bounds of ``stdio`` and ``serve``."""
    parser.add_argument("--max-connection-bytes", type=positive_int, default=DEFAULT_MAX_CONNECTION_BYTES,
                        metavar="N", help="memory one connection may hold: pending output, requests in flight, "
                        f"buffered input (default {DEFAULT_MAX_CONNECTION_BYTES}; at least 4 x --max-line-bytes)")
    parser.add_argument("--max-in-flight", type=positive_int, default=DEFAULT_MAX_IN_FLIGHT, metavar="N",
                        help=f"requests one connection may have in flight (default {DEFAULT_MAX_IN_FLIGHT})")


def connection_bounds_error(args: argparse.Namespace) -> str | None:
    """Why ``--max-connection-bytes`` does not fit ``--max-line-bytes``, or ``None``."""
    if args.max_connection_bytes < 4 * args.max_line_bytes:
        return (f"--max-connection-bytes ({args.max_connection_bytes}) must be at least 4 x --max-line-bytes "
                f"({args.max_line_bytes})")
    return None


def add_game_arguments(parser: argparse.ArgumentParser) -> None:
    """The game extension's per-connection limits (crowd servers raise them)."""
    defaults = GameLimits()
    parser.add_argument("--max-npcs", type=positive_int, default=defaults.max_npcs, metavar="N",
                        help=f"NPCs per connection (default {defaults.max_npcs})")
    parser.add_argument("--max-worlds", type=positive_int, default=defaults.max_worlds, metavar="N",
                        help=f"worlds per connection (default {defaults.max_worlds})")
    parser.add_argument("--max-subscriptions", type=positive_int, default=defaults.max_subscriptions, metavar="N",
                        help=f"world subscriptions per connection (default {defaults.max_subscriptions})")
    parser.add_argument("--max-conversations", type=positive_int, default=defaults.max_conversations, metavar="N",
                        help=f"conversations among NPCs per connection (default {defaults.max_conversations})")


def game_limits_from_args(args: argparse.Namespace) -> GameLimits:
    return GameLimits(max_npcs=args.max_npcs, max_worlds=args.max_worlds, max_subscriptions=args.max_subscriptions,
                      max_conversations=args.max_conversations)


async def serve_stdio(
    config: BridgeConfig,
    system_model: ModelFactory | None,
    max_line_bytes: int = MAX_LINE_BYTES,
    backends: ProxyBackends | None = None,
    game: GameLimits | None = None,
    runtime: SystemFactory = LocalSystem,
    *,
    models: ModelSetup | None = None,
    stdout_fd: int = 1,
) -> None:
    """Serve until end of input or ``shutdown``; ``backends`` (their HTTP client) close after
    the bridge has finished. The game methods are installed with ``game``'s limits; ``models``
    adds what the system model needs running (a device pool or model actor) and its extensions;
    protocol output goes to ``stdout_fd``."""
    stdin, write = await open_stdio(stdout_fd=stdout_fd)
    async with AsyncExitStack() as resources:
        if backends is not None:
            await resources.enter_async_context(backends)
        if models is not None:
            await resources.enter_async_context(models.resources)
        await resources.enter_async_context(stdin)
        system = await resources.enter_async_context(runtime())
        if models is not None:
            await resources.enter_async_context(models.hosted)
        limits = game or GameLimits()
        extension = GameExtension(
            max_npcs=limits.max_npcs, max_worlds=limits.max_worlds, max_subscriptions=limits.max_subscriptions,
            max_conversations=limits.max_conversations,
        )
        extensions = [extension, *(model_extensions(models) if models is not None else ())]
        bridge = Bridge(system, write, config=config, system_model=system_model, extensions=extensions)
        splitter = LineSplitter(max_line_bytes)
        await bridge.serve(read_lines(stdin, splitter=splitter), buffered=lambda: splitter.buffered)


def run(args: argparse.Namespace) -> int:
    if args.check_routes:
        return check_routes(args)
    if (problem := connection_bounds_error(args)) is not None:
        raise UsageError(problem)
    runtime = system_from_args(args)  # first: it sets what Ray reads when it is imported
    setup = models_from_args(args)
    config = BridgeConfig(
        max_sessions=args.max_sessions, scripted_models=not args.no_scripted, model_types=setup.model_types,
        model_checks=setup.model_checks,
        max_connection_bytes=args.max_connection_bytes, max_in_flight=args.max_in_flight,
    )
    serve = functools.partial(serve_stdio, models=setup, stdout_fd=reserve_stdout())
    game = game_limits_from_args(args)
    try:
        anyio.run(serve, config, setup.system_model, args.max_line_bytes, setup.backends, game, runtime)
    except ModelHostError as exc:
        print(f"oam-actors stdio: {exc}", file=sys.stderr)
        return 1
    return 0
