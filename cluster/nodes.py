"""Start a loopback-only Ray cluster on this machine, or stop the Ray processes of one cluster.

    python3 cluster/nodes.py local NODES PORT CPUS   a head on 127.0.0.1:PORT plus NODES-1 nodes
    python3 cluster/nodes.py stop PORT               end this machine's processes of that cluster

``cluster/start.sh`` calls this; see it for the environment (token auth, ``PYTHONPATH``).

Every cluster started through ``start.sh`` keeps its files in its own directory,
``/tmp/oam-ray-PORT`` (short: Ray's socket paths must fit in 107 bytes). Its Ray processes name
that directory on their command line (the GCS, the raylets, the monitors), and everything else
of the cluster (agents, workers) descends from them, so ``stop`` ends exactly those processes
and no other Ray on the machine (``ray stop`` ends every one).

Why not ``ray start --node-ip-address 127.0.0.1``: Ray replaces a loopback node address by the
machine's routable one (``services.resolve_ip_for_localhost``), and its servers then listen on
every interface. A node created with the address as given (``ray._private.node.Node``, what
``ray start`` and ``ray.cluster_utils.Cluster`` create) keeps 127.0.0.1, and Ray's servers
listen on loopback only when the node address is loopback.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


def cluster_dir(port: int) -> Path:
    return Path(f"/tmp/oam-ray-{port}")


def members(port: int) -> set[int]:
    """Pids of this machine's processes of the cluster on ``port``: those naming its directory,
    and all their descendants (agents and workers rename themselves, so only descent finds them)."""
    mentions = re.compile(re.escape(str(cluster_dir(port))) + "(/|$)")
    parents: dict[int, int] = {}
    roots: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if state == "Z":
            continue  # ended already
        parents[int(entry.name)] = int(parent)
        if any(mentions.search(argument) for argument in arguments):
            roots.add(int(entry.name))
    ancestors, pid = set(), os.getpid()  # never this process, nor whoever runs it
    while pid > 1:
        ancestors.add(pid)
        pid = parents.get(pid, 1)
    found, frontier = set(), roots - ancestors
    while frontier:
        found |= frontier
        frontier = {child for child, parent in parents.items() if parent in frontier} - found - ancestors
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _signal_all(pids: set[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while (left := {pid for pid in pids if alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def stop(port: int) -> int:
    pids = members(port)
    if not pids:
        print(f"oam-actors: no Ray processes of a cluster on port {port} here")
        return 0
    # The GCS last, as `ray stop` does: a raylet told to stop reports to its GCS first, and
    # waits about 10 s for one that is gone.
    gcs = {pid for pid in pids if _name(pid) == "gcs_server"}
    _signal_all(pids - gcs, signal.SIGTERM)
    left = _wait_gone(pids - gcs, 10)
    _signal_all(gcs, signal.SIGTERM)
    left = _wait_gone(left | gcs, 10)
    _signal_all(left, signal.SIGKILL)
    left = _wait_gone(left, 5)
    if left:
        print(f"oam-actors: could not end {sorted(left)}", file=sys.stderr)
        return 1
    print(f"oam-actors: stopped the cluster on port {port}: ended {' '.join(map(str, sorted(pids)))}; "
          f"its logs stay in {cluster_dir(port)}")
    return 0


def start_local(nodes: int, port: int, cpus: int) -> int:
    if members(port):
        print(f"oam-actors: a cluster on port {port} is already running (stop: cluster/start.sh stop {port})",
              file=sys.stderr)
        return 1
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    common = {"node_ip_address": LOOPBACK, "temp_dir": str(cluster_dir(port)), "num_cpus": cpus}
    try:
        # The processes outlive this one (no exit hook, no reaper), as after `ray start`.
        head = Node(RayParams(gcs_server_port=port, include_dashboard=False, **common),
                    head=True, shutdown_at_exit=False, spawn_reaper=False)
        for _ in range(nodes - 1):
            Node(RayParams(gcs_address=head.gcs_address, include_log_monitor=False, **common),
                 head=False, shutdown_at_exit=False, spawn_reaper=False)
    except BaseException:
        stop(port)
        raise
    print(f"oam-actors: {nodes} nodes on {LOOPBACK}; use --address {head.gcs_address}; "
          f"stop with: cluster/start.sh stop {port}")
    return 0


def main(argv: list[str]) -> int:
    match argv:
        case ["local", nodes, port, cpus] if nodes.isdigit() and port.isdigit() and cpus.isdigit():
            return start_local(int(nodes), int(port), int(cpus))
        case ["stop", port] if port.isdigit():
            return stop(int(port))
    print(f"usage:\n{__doc__.split(chr(10) * 2)[1]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
