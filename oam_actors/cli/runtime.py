"""Choosing the actor runtime from the command line: ``--runtime local|ray`` and its options.

``local`` (the default) is ``LocalSystem``. ``ray`` is ``RaySystem``: ``--address auto`` or
``HOST:PORT`` joins a running cluster, no address starts a private local Ray instance;
``--shards`` sets how many shard actors host the objects. Ray is imported only when ``ray`` is
chosen. ``--state-store PATH`` (either runtime) keeps every tenant's objects in that SQLite file
(``runtime.Durability``), held by this process until it exits.

``--max-running-turns`` bounds the turns (``session/respond``, ``npc/talk``) running at once in
each process that hosts objects (this one, or each shard); more wait and start connection by
connection in turn, each connection's in arrival order.

Values are checked while parsing (``--shards`` at least 1, ``--address`` ``auto`` or
``HOST:PORT``); :func:`system_from_args` raises :class:`UsageError` for options that do not fit
together, an ``--address`` host that does not resolve, or a ``--state-store`` that cannot be
used (a missing folder; a corrupt, newer or locked store).
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
from collections.abc import Callable

from ..addresses import is_loopback
from ..runtime import ActorSystem, Durability, LocalSystem, SqliteStore, StoreError, open_store
from .argtypes import UsageError, host_port, positive_int

__all__ = ["DEFAULT_MAX_RUNNING_TURNS", "SystemFactory", "add_runtime_arguments", "system_from_args"]

DEFAULT_MAX_RUNNING_TURNS = 64 * (os.cpu_count() or 1)
"""Turns running at once per hosting process unless ``--max-running-turns`` says otherwise: enough
to keep a core busy while turns wait on models and tools, few enough that under a burst the first
turns finish first."""

SystemFactory = Callable[[], ActorSystem]
"""Makes the (not yet entered) actor system of a server."""


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--runtime", choices=("local", "ray"), default=env("OAM_RUNTIME", "local"),
                        help="where object actors run: this process (local, the default) or shard actors "
                        "on a Ray cluster (ray) (environment: OAM_RUNTIME)")
    parser.add_argument("--address", type=_ray_address, default=env("OAM_RAY_ADDRESS"), metavar="auto|HOST:PORT",
                        help="with --runtime ray: the cluster to join, 'auto' or HOST:PORT; unset starts a "
                        "private local Ray instance (environment: OAM_RAY_ADDRESS)")
    # A string default goes through type= too, so a bad OAM_SHARDS is reported like a bad --shards.
    parser.add_argument("--shards", type=positive_int, default=env("OAM_SHARDS", "2"), metavar="N",
                        help="with --runtime ray: shard actors hosting the objects (default 2; environment: "
                        "OAM_SHARDS)")
    parser.add_argument("--state-store", default=env("OAM_STATE_STORE"), metavar="PATH",
                        help="SQLite file keeping every tenant's objects across connections and restarts; each "
                        "commit is written before it is answered (default: none, objects live with their "
                        "connection; with --runtime ray: shard checkpoints in memory) (environment: OAM_STATE_STORE)")
    parser.add_argument("--max-running-turns", type=positive_int, default=DEFAULT_MAX_RUNNING_TURNS, metavar="N",
                        help="turns running at once per process hosting objects (this one or each shard); "
                        f"later ones wait, connections in turn, each one's in arrival order (default {DEFAULT_MAX_RUNNING_TURNS}, "
                        "64 per core)")


def _ray_address(text: str) -> str:
    """``auto`` or ``HOST:PORT``, kept as text for ``ray.init``."""
    if text != "auto":
        host_port(text)
    return text


def system_from_args(args: argparse.Namespace) -> SystemFactory:
    """The runtime the options choose; :class:`UsageError` for options that do not fit together,
    an unresolvable ``--address`` host or a ``--state-store`` whose folder does not exist."""
    if args.runtime == "local":
        if args.address:
            raise UsageError("--address needs --runtime ray")
        if not args.state_store:
            return functools.partial(LocalSystem, max_running=args.max_running_turns)
        store = opened_store(args.state_store)
        return functools.partial(LocalSystem, max_running=args.max_running_turns, durability=Durability(store))
    if args.address not in (None, "auto"):
        _check_resolves(args.address)
    if args.address and is_loopback(args.address.rpartition(":")[0]):
        # Ray would replace a loopback address by this machine's routable one, where a cluster on
        # loopback only (cluster/start.sh local) does not listen, except in its non-cluster mode.
        # Ray reads that switch once, when it is imported: so here, before the import.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    durability = Durability(opened_store(args.state_store)) if args.state_store else None
    from ..cluster import RaySystem

    def ray_system() -> ActorSystem:
        return RaySystem(shards=args.shards, address=args.address, durability=durability,
                         max_running=args.max_running_turns)

    return ray_system


def opened_store(path: str, *, create: bool = True) -> SqliteStore:
    """The state store at ``path``, held by this process until it exits; :class:`UsageError`
    (one line, nothing written) for a missing folder, a locked, corrupt or newer store."""
    try:
        return open_store(path, create=create)
    except StoreError as exc:
        raise UsageError(f"--state-store {exc}") from None


def _check_resolves(address: str) -> None:
    endpoint = host_port(address)
    try:
        socket.getaddrinfo(endpoint.host, endpoint.port)
    except OSError as exc:
        raise UsageError(f"--address {address}: cannot resolve {endpoint.host!r} ({exc.strerror or exc})") from exc
