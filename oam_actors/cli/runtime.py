"""Choosing the actor runtime from the command line: ``--runtime local|ray`` and its options.

``local`` (the default) is ``LocalSystem``. ``ray`` is ``RaySystem``: ``--address auto`` or
``HOST:PORT`` joins a running cluster, no address starts a private local Ray instance;
``--shards`` sets how many shard actors host the objects, ``--state-store`` an SQLite file for
checkpoints (default: in memory). Ray is imported only when ``ray`` is chosen.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..runtime import ActorSystem, LocalSystem

__all__ = ["SystemFactory", "add_runtime_arguments", "system_from_args"]

SystemFactory = Callable[[], ActorSystem]
"""Makes the (not yet entered) actor system of a server."""


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--runtime", choices=("local", "ray"), default=env("OAM_RUNTIME", "local"),
                        help="where object actors run: this process (local, the default) or shard actors "
                        "on a Ray cluster (ray) (environment: OAM_RUNTIME)")
    parser.add_argument("--address", default=env("OAM_RAY_ADDRESS"),
                        help="with --runtime ray: the cluster to join, 'auto' or HOST:PORT; unset starts a "
                        "private local Ray instance (environment: OAM_RAY_ADDRESS)")
    parser.add_argument("--shards", type=int, default=int(env("OAM_SHARDS", "2")),
                        help="with --runtime ray: shard actors hosting the objects (default 2; environment: "
                        "OAM_SHARDS)")
    parser.add_argument("--state-store", default=env("OAM_STATE_STORE"), metavar="PATH",
                        help="with --runtime ray: SQLite file for object checkpoints (default: in memory; "
                        "environment: OAM_STATE_STORE)")


def system_from_args(args: argparse.Namespace) -> SystemFactory:
    """Exits (``SystemExit``) with a readable message for options that do not fit together."""
    if args.runtime == "local":
        if args.address or args.state_store:
            raise SystemExit("oam-actors: --address and --state-store need --runtime ray")
        return LocalSystem
    if args.shards < 1:
        raise SystemExit(f"oam-actors: --shards must be at least 1, got {args.shards}")
    from ..cluster import RaySystem, SqliteStore

    def ray_system() -> ActorSystem:
        store = SqliteStore(args.state_store) if args.state_store else None
        return RaySystem(shards=args.shards, address=args.address, store=store)

    return ray_system
