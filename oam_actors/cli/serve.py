"""``oam-actors serve``: the bridge protocol over TCP (JSON lines) and WebSocket, and the
OpenAI-compatible HTTP API (``--openai``, repeatable) over the same models.

All connections share one actor system (``LocalSystem``, or ``RaySystem`` with ``--runtime ray``)
and one system model; each bridge connection gets its own bridge. stdout carries exactly one line
per listener, first ``tcp://HOST:PORT``, then ``ws://HOST:PORT/ws``, then ``http://HOST:PORT/v1``
per ``--openai`` in the order given, then ``http://HOST:PORT/console`` for ``--console``, with the
bound ports (so ``:0`` works), and nothing else;
logs go to stderr, and so does anything else that writes to stdout (``reserve_stdout``). SIGINT or
SIGTERM stops the server: every connection is closed and its work cancelled.

The operator's console (:mod:`oam_actors.transports.console`) is served at ``/console`` on the
``--ws`` port, or only on ``--console HOST:PORT`` when that is given.

Refuses to start (:class:`UsageError`: exit status 2, one line) when a listen address is not
loopback and no ``--token`` is given, when a token is malformed, and when an address cannot be
bound (in use, not on this machine, a host that does not resolve).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, TextIO

import anyio
from anyio.abc import SocketAttribute

from ..bridge import BridgeConfig, Extension, model_extensions
from ..game_methods import GameExtension, GameLimits, GameRegistry
from ..models.errors import ModelHostError
from ..models.setup import ModelSetup
from ..observability.metrics import ServerMetrics
from ..runtime import LocalSystem
from ..transports.auth import TokenTable, is_loopback
from ..transports.hub import IDLE_TIMEOUT, LINE_TIMEOUT, WRITE_TIMEOUT, Hub, ServePolicy
from ..transports.stdio import MAX_LINE_BYTES, reserve_stdout
from ..transports.tcp import serve_tcp
from .argtypes import Endpoint, UsageError, host_port, listen_errors, non_negative_float, positive_int
from .models import add_model_arguments, check_routes, models_from_args
from .runtime import SystemFactory, add_runtime_arguments, system_from_args
from .stdio import add_connection_arguments, add_game_arguments, connection_bounds_error, game_limits_from_args

__all__ = ["add_arguments", "exposure_error", "run", "serve_network"]


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
    parser.add_argument("--tcp", type=host_port, metavar="HOST:PORT", help="serve JSON lines over TCP here")
    parser.add_argument("--ws", type=host_port, metavar="HOST:PORT",
                        help="serve WebSocket (/ws), /health and /metrics here (needs the websockets package)")
    parser.add_argument("--console", type=host_port, metavar="HOST:PORT",
                        help="serve the operator's console (/console) here instead of on the --ws port")
    parser.add_argument("--openai", type=host_port, action="append", default=[], metavar="HOST:PORT",
                        help="serve the OpenAI-compatible API (/v1/chat/completions, /v1/models) here (repeatable)")
    parser.add_argument("--token", action="append", default=[], metavar="[NAME=]SECRET",
                        help="accept this bearer token (repeatable); NAME is its tenant")
    parser.add_argument("--share-objects", action="store_true",
                        help="share sessions among the connections of one tenant (default: per connection)")
    parser.add_argument("--max-connections", type=positive_int, default=256, metavar="N", help="open connections (default 256)")
    parser.add_argument("--idle-timeout", type=non_negative_float, default=IDLE_TIMEOUT, metavar="S",
                        help=f"close connections silent for S seconds with nothing in flight (default {IDLE_TIMEOUT:g}; "
                        "0: never)")
    parser.add_argument("--line-timeout", type=non_negative_float, default=LINE_TIMEOUT, metavar="S",
                        help="close connections that leave their first message, or a line they began, unfinished for "
                        f"S seconds (default {LINE_TIMEOUT:g}; 0: never)")
    parser.add_argument("--write-timeout", type=non_negative_float, default=WRITE_TIMEOUT, metavar="S",
                        help=f"close connections that do not read their output for S seconds (default {WRITE_TIMEOUT:g}; "
                        "0: never)")
    parser.add_argument("--max-sessions", type=positive_int, default=64, metavar="N",
                        help="sessions per connection, or per tenant with --share-objects (default 64)")
    parser.add_argument("--max-line-bytes", type=positive_int, default=MAX_LINE_BYTES, metavar="N",
                        help=f"longest accepted message (default {MAX_LINE_BYTES})")
    parser.add_argument("--no-scripted", action="store_true", help="refuse scripted models")
    add_connection_arguments(parser)
    add_game_arguments(parser)
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.check_routes:
        return check_routes(args)
    endpoints = [e for e in (args.tcp, args.ws, *args.openai, args.console) if e is not None]
    if not endpoints:
        raise UsageError("give --tcp HOST:PORT, --ws HOST:PORT and/or --openai HOST:PORT")
    try:
        tokens = TokenTable.parse(args.token)
    except ValueError as exc:
        raise UsageError(f"--token: {exc}") from None
    if (problem := exposure_error(endpoints, tokens) or connection_bounds_error(args)) is not None:
        raise UsageError(problem)
    for option in ("ws", "console"):
        if getattr(args, option) is not None and importlib.util.find_spec("websockets") is None:
            raise UsageError(f"--{option} needs the websockets package: python3 -m pip install websockets")
    policy = ServePolicy(
        tokens=tokens,
        share_objects=args.share_objects,
        max_connections=args.max_connections,
        idle_timeout=args.idle_timeout or None,  # 0: never
        line_timeout=args.line_timeout or None,
        write_timeout=args.write_timeout or None,
        max_line_bytes=args.max_line_bytes,
    )
    runtime = system_from_args(args)  # first: it sets what Ray reads when it is imported
    # Beyond loopback, sessions may not make the server reach its own or private addresses.
    setup = models_from_args(args, refuse_private=any(not is_loopback(e.host) for e in endpoints))
    config = BridgeConfig(
        max_sessions=args.max_sessions, scripted_models=not args.no_scripted, model_types=setup.model_types,
        model_checks=setup.model_checks,
        max_connection_bytes=args.max_connection_bytes, max_in_flight=args.max_in_flight,
    )
    with open(reserve_stdout(), "w") as out:
        try:
            anyio.run(serve_network, policy, config, setup, game_limits_from_args(args), args.tcp, args.ws,
                      runtime, args.openai, out, args.console)
        except ModelHostError as exc:
            print(f"oam-actors serve: {exc}", file=sys.stderr)
            return 1
    return 0


async def serve_network(
    policy: ServePolicy,
    config: BridgeConfig,
    models: ModelSetup,
    game: GameLimits,
    tcp: Endpoint | None,
    ws: Endpoint | None,
    runtime: SystemFactory = LocalSystem,
    openai: Sequence[Endpoint] = (),
    out: TextIO = sys.stdout,
    console: Endpoint | None = None,
) -> None:
    """Listen, print the bound addresses to ``out``, serve until SIGINT or SIGTERM. The proxy
    backends' HTTP client closes after every connection has ended. The console is served on
    ``console``, else on ``ws``."""
    async with models.backends, models.resources, runtime() as system, models.hosted, AsyncExitStack() as stack:
        registries: dict[str, GameRegistry] = {}  # one per shared namespace (a tenant's)
        hub = Hub(
            system,
            policy,
            config=config,
            system_model=models.system_model,
            extensions=lambda: [*_game_extension(game, registries), *model_extensions(models)],
            metrics=ServerMetrics(),
            status_model=models.status_model,
            routing=None if models.router is None else models.router.statistics_nowait,
        )
        addresses = []
        listener = None
        if tcp is not None:
            with listen_errors("--tcp", tcp):
                listener = await anyio.create_tcp_listener(local_host=tcp.host or None, local_port=tcp.port)
            stack.push_async_callback(listener.aclose)
            addresses.append(_url("tcp", listener.extra(SocketAttribute.local_address)))
        panel = None
        if ws is not None or console is not None:
            # Imported here: the websockets package is needed only by these.
            from ..transports.console import CONSOLE_PATH, Console
            from ..transports.websocket import WS_PATH, websocket_server

            panel = Console(hub)
        if ws is not None:
            with listen_errors("--ws", ws):
                server = await stack.enter_async_context(
                    websocket_server(hub, ws.host or None, ws.port, console=None if console else panel))
            addresses.append(_url("ws", server.sockets[0].getsockname(), WS_PATH))
        openai_doors = _openai_listeners(hub, openai, stack, addresses)
        if console is not None:
            with listen_errors("--console", console):
                server = await stack.enter_async_context(
                    websocket_server(hub, console.host or None, console.port, console=panel, bridges=False))
            addresses.append(_url("http", server.sockets[0].getsockname(), CONSOLE_PATH))
        print(*addresses, sep="\n", file=out, flush=True)
        async with anyio.create_task_group() as tasks:
            if panel is not None:
                tasks.start_soon(panel.run)
            if listener is not None:
                tasks.start_soon(serve_tcp, listener, hub)
            for serve_door in openai_doors:
                tasks.start_soon(serve_door)
            await _wait_for_stop_signal()
            tasks.cancel_scope.cancel()


def _openai_listeners(
    hub: Hub, endpoints: Sequence[Endpoint], stack: AsyncExitStack, addresses: list[str]
) -> list[Callable[[], Awaitable[None]]]:
    """Bind each ``--openai`` endpoint (one front door shared by all); what serves them."""
    if not endpoints:
        return []
    # Imported here: the HTTP stack is needed only by this transport.
    from ..transports.openai import FrontDoor, openai_listener, serve_openai

    door = FrontDoor(hub)
    served = []
    for endpoint in endpoints:
        with listen_errors("--openai", endpoint):
            sock = openai_listener(endpoint.host or None, endpoint.port)
        stack.callback(sock.close)
        addresses.append(_url("http", sock.getsockname(), "/v1"))
        served.append(functools.partial(serve_openai, door, sock, grace=hub.config.shutdown_grace_seconds))
    return served


def _game_extension(limits: GameLimits, registries: dict[str, GameRegistry]) -> list[Extension]:
    extension = GameExtension(
        max_npcs=limits.max_npcs, max_worlds=limits.max_worlds, max_subscriptions=limits.max_subscriptions,
        registries=registries,
        max_conversations=limits.max_conversations,
    )
    return [extension]


async def _wait_for_stop_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def _url(scheme: str, address: Sequence[Any], path: str = "") -> str:
    """``scheme://host:port/path`` of a bound socket's address (IPv4 or IPv6)."""
    return f"{scheme}://{Endpoint(address[0], address[1])}{path}"
