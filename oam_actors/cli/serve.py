"""``oam-actors serve``: the bridge protocol over TCP (JSON lines) and WebSocket.

All connections share one actor system (``LocalSystem``, or ``RaySystem`` with ``--runtime ray``);
each gets its own bridge. stdout carries exactly one line per listener, first ``tcp://HOST:PORT``
then ``ws://HOST:PORT/ws``, with the bound ports (so ``:0`` works), and nothing else; logs go to
stderr. SIGINT or SIGTERM stops the server: every connection is closed and its work cancelled.

Refuses to start (exit status 2) when a listen address is not loopback and no ``--token`` is
given, and (exit status 1) when an address cannot be bound.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from ..bridge import BridgeConfig, Extension
from ..game_methods import GameExtension, GameLimits
from ..observability.metrics import ServerMetrics
from ..runtime import LocalSystem
from ..transports.auth import TokenTable, is_loopback
from ..transports.hub import Hub, ServePolicy
from ..transports.stdio import MAX_LINE_BYTES
from ..transports.tcp import serve_tcp
from .models import ModelSetup, add_model_arguments, models_from_args
from .runtime import SystemFactory, add_runtime_arguments, system_from_args
from .stdio import add_game_arguments, game_limits_from_args

__all__ = ["Endpoint", "add_arguments", "exposure_error", "parse_endpoint", "run", "serve_network"]


@dataclass(frozen=True)
class Endpoint:
    """A listen address; ``host == ""`` means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{_bracket(self.host)}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT``; ``argparse.ArgumentTypeError`` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets: [{host}]:{port}")
    return Endpoint(host, int(port))


def exposure_error(endpoints: list[Endpoint], tokens: TokenTable) -> str | None:
    """Why the server must not start as configured, or ``None``."""
    exposed = [str(e) for e in endpoints if not is_loopback(e.host)]
    if exposed and not tokens:
        return (
            f"listening on {', '.join(exposed)} (not loopback) requires a bearer token: "
            "add --token NAME=SECRET (or --token SECRET), or listen on 127.0.0.1"
        )
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--tcp", type=parse_endpoint, metavar="HOST:PORT", help="serve JSON lines over TCP here")
    parser.add_argument("--ws", type=parse_endpoint, metavar="HOST:PORT",
                        help="serve WebSocket (/ws), /health and /metrics here (needs the websockets package)")
    parser.add_argument("--token", action="append", default=[], metavar="[NAME=]SECRET",
                        help="accept this bearer token (repeatable); NAME is its tenant")
    parser.add_argument("--share-objects", action="store_true",
                        help="share sessions among the connections of one tenant (default: per connection)")
    parser.add_argument("--max-connections", type=_positive_int, default=256, help="open connections (default 256)")
    parser.add_argument("--idle-timeout", type=_positive_float, default=None, metavar="S",
                        help="close connections idle for S seconds (default: never)")
    parser.add_argument("--max-sessions", type=_positive_int, default=64,
                        help="sessions per connection, or per tenant with --share-objects (default 64)")
    parser.add_argument("--max-line-bytes", type=_positive_int, default=MAX_LINE_BYTES,
                        help=f"longest accepted message (default {MAX_LINE_BYTES})")
    parser.add_argument("--no-scripted", action="store_true", help="refuse scripted models")
    add_game_arguments(parser)
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> int:
    endpoints = [e for e in (args.tcp, args.ws) if e is not None]
    if not endpoints:
        return _fail("give --tcp HOST:PORT and/or --ws HOST:PORT", 2)
    try:
        tokens = TokenTable.parse(args.token)
    except ValueError as exc:
        return _fail(f"--token: {exc}", 2)
    if (problem := exposure_error(endpoints, tokens)) is not None:
        return _fail(problem, 2)
    if args.ws is not None and importlib.util.find_spec("websockets") is None:
        return _fail("--ws needs the websockets package: python3 -m pip install websockets", 2)
    policy = ServePolicy(
        tokens=tokens,
        share_objects=args.share_objects,
        max_connections=args.max_connections,
        idle_timeout=args.idle_timeout,
        max_line_bytes=args.max_line_bytes,
    )
    setup = models_from_args(args)
    config = BridgeConfig(
        max_sessions=args.max_sessions, scripted_models=not args.no_scripted, model_types=setup.model_types
    )
    try:
        anyio.run(
            serve_network, policy, config, setup, game_limits_from_args(args), args.tcp, args.ws, system_from_args(args)
        )
    except (OSError, ExceptionGroup) as exc:
        bind_error = _os_error(exc)
        if bind_error is None:
            raise
        return _fail(f"cannot listen: {bind_error}", 1)
    return 0


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` a start-up failure comes down to (task groups wrap it), if any."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((found for e in exc.exceptions if (found := _os_error(e)) is not None), None)
    return None


async def serve_network(
    policy: ServePolicy,
    config: BridgeConfig,
    models: ModelSetup,
    game: GameLimits,
    tcp: Endpoint | None,
    ws: Endpoint | None,
    runtime: SystemFactory = LocalSystem,
) -> None:
    """Listen, print the bound addresses, serve until SIGINT or SIGTERM. The proxy backends'
    HTTP client closes after every connection has ended."""
    async with models.backends, models.resources, runtime() as system, models.hosted, AsyncExitStack() as stack:
        hub = Hub(
            system,
            policy,
            config=config,
            system_model=models.system_model,
            extensions=lambda: [*_game_extension(game), *models.extensions()],
            metrics=ServerMetrics(),
        )
        addresses = []
        listener = None
        if tcp is not None:
            listener = await anyio.create_tcp_listener(local_host=tcp.host or None, local_port=tcp.port)
            stack.push_async_callback(listener.aclose)
            addresses.append(_url("tcp", listener.extra(SocketAttribute.local_address)))
        if ws is not None:
            # Imported here: the websockets package is needed only by this transport.
            from ..transports.websocket import WS_PATH, websocket_server

            server = await stack.enter_async_context(websocket_server(hub, ws.host or None, ws.port))
            addresses.append(_url("ws", server.sockets[0].getsockname(), WS_PATH))
        print(*addresses, sep="\n", flush=True)
        async with anyio.create_task_group() as tasks:
            if listener is not None:
                tasks.start_soon(serve_tcp, listener, hub)
            await _wait_for_stop_signal()
            tasks.cancel_scope.cancel()


def _game_extension(limits: GameLimits) -> list[Extension]:
    extension = GameExtension(
        max_npcs=limits.max_npcs, max_worlds=limits.max_worlds, max_subscriptions=limits.max_subscriptions
    )
    return [extension]


async def _wait_for_stop_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def _url(scheme: str, address: Sequence[Any], path: str = "") -> str:
    """``scheme://host:port/path`` of a bound socket's address (IPv4 or IPv6)."""
    host, port = address[0], address[1]
    return f"{scheme}://{_bracket(host)}:{port}{path}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _fail(message: str, status: int) -> int:
    print(f"oam-actors serve: {message}", file=sys.stderr)
    return status


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value
