"""RaySystem on a real two-node Ray cluster on this machine (``ray start --head`` plus
``ray start --address``): shards on both nodes, a shard killed on the second node, and every
conformance scenario replayed on the cluster.

The scenarios run over TCP on ``oam-actors serve --runtime ray --address``, one server per set
of command-line arguments (4 for the 28 files), each replay on a connection of its own (they
reuse session names: connections are isolated); the ones whose stdio behaviour differs from a
network connection's (shutdown, end of input) also run through ``oam-actors stdio --runtime ray
--address``. One cluster and one server per argument set for the whole module: a server or a
stdio process costs seconds to start (shard processes), a replay a fraction of that.

The cluster's processes are found by its own temp dir and ended by pid (not ``ray stop``, which
would end every Ray on the machine).
"""

from __future__ import annotations

import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import ray
import ray._raylet
from bridge_process import UNPARSED, BridgeProcess
from scenarios import Scenario, load_all, replay
from serve_process import ServeProcess
from test_cluster_ray import HANG_GUARD, check_invariants, open_wire
from test_scenarios import StdioConnection
from test_scenarios_network import STDIO_ONLY, NetworkConnection

from oam_actors.cluster import RaySystem, shard_of
from oam_actors import Address

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = load_all()
STDIO_TOO = {"shutdown", "end of input"}  # the process ends: not what a network connection does


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _ray_start(*args: str, env: dict[str, str]) -> None:
    subprocess.run([_ray_cli(), "start", *args, "--num-cpus", "1", "--object-store-memory", str(100 * 1024 * 1024),
                    "--disable-usage-stats"], env=env, check=True, capture_output=True, timeout=120)


def _end_processes_mentioning(marker: str) -> None:
    """SIGKILL every process whose command line mentions ``marker``, and their children."""
    ours = {os.getpid()}
    found: set[int] = set()
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if marker.encode() in command:
            found.add(int(entry.name))
    found |= {pid for pid, parent in parents.items() if parent in found}
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a two-node cluster; the environment lets this process and its children
    join it (token auth, and ``oam_actors`` importable on the nodes)."""
    temp_dir = tempfile.mkdtemp(prefix="oamray-", dir="/tmp")  # short: Ray's socket paths must fit
    address = f"127.0.0.1:{_free_port()}"
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), saved]))
    # Token auth on every process. Ray reads the mode once per process; it re-reads it the way
    # ray.init does for a local cluster (Config.initialize), so this driver can join too.
    saved_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "token"
    ray._raylet.Config.initialize("")
    env = dict(os.environ)
    if not (Path.home() / ".ray" / "auth_token").exists():
        subprocess.run([_ray_cli(), "get-auth-token", "--generate"], env=env, check=True, capture_output=True)
    try:
        _ray_start("--head", "--port", address.rpartition(":")[2], "--temp-dir", temp_dir,
                   "--include-dashboard=false", env=env)
        _ray_start("--address", address, "--temp-dir", temp_dir, env=env)
        yield address
    finally:
        _end_processes_mentioning(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)  # the cluster's session folders go with it
        current = Path("/tmp/ray/ray_current_cluster")
        if current.exists() and address.rpartition(":")[2] in current.read_text():
            current.unlink()
        for name, value in (("PYTHONPATH", saved), ("RAY_AUTH_MODE", saved_mode)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        ray._raylet.Config.initialize("")


def _wait_for_nodes(count: int) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while sum(node["Alive"] for node in ray.nodes()) < count:
        assert time.monotonic() < deadline, "the second node did not join"
        time.sleep(0.2)


async def test_shards_run_on_both_nodes_and_a_killed_one_comes_back(cluster: str) -> None:
    ray.init(address=cluster, log_to_driver=False)
    try:
        _wait_for_nodes(2)
        echo = {"type": "scripted", "fallback": {"template": "echo {prompt}"}}
        async with RaySystem(shards=2) as system, open_wire(system) as wire:
            shards = await system.shard_info()
            assert len({shard.node_id for shard in shards}) == 2
            sessions = {shard_of(Address("session", f"s{n}"), 2): f"s{n}" for n in range(20)}
            for session in sessions.values():
                await wire.call("session/create", {"session": session, "model": echo})
                assert (await wire.call("session/respond", {"session": session, "prompt": "one"}))["text"] == "echo one"
            driver_node = ray.get_runtime_context().get_node_id()
            second_node = next(shard.index for shard in shards if shard.node_id != driver_node)
            os.kill(shards[second_node].pid, signal.SIGKILL)
            with anyio.fail_after(HANG_GUARD):
                # A request written before the link sees the death would fail (HostFailed): wait.
                while system.shard_restarts()[second_node] == 0:
                    await anyio.sleep(0.05)
                reply = await wire.call("session/respond", {"session": sessions[second_node], "prompt": "two"})
            assert reply["text"] == "echo two"
            transcript = await wire.call("session/transcript", {"session": sessions[second_node]})
            assert [e["text"] for e in transcript["transcript"]["transcript"]["entries"]] == ["one", "echo one", "two", "echo two"]
            assert system.shard_restarts()[second_node] == 1
            check_invariants(wire.log)
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def servers(cluster: str) -> Iterator[dict[tuple[str, ...], ServeProcess]]:
    """``serve --runtime ray`` on the cluster, one per scenario argument set, started on first use."""
    started: dict[tuple[str, ...], ServeProcess] = {}
    yield started
    for server in started.values():
        assert server.stop() == 0, server.stderr
        server.__exit__()


def _ids(scenarios: list[Scenario]) -> list[str]:
    return [scenario.name for scenario in scenarios]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_ids(SCENARIOS))
def test_scenario_over_tcp_on_the_cluster(
    cluster: str, servers: dict[tuple[str, ...], ServeProcess], scenario: Scenario
) -> None:
    if scenario.name in STDIO_ONLY:
        pytest.skip(STDIO_ONLY[scenario.name])
    args = tuple(scenario.args)
    if args not in servers:
        servers[args] = ServeProcess(["--tcp", "127.0.0.1:0", "--runtime", "ray", "--address", cluster, *args])
    server = servers[args]
    with server.tcp() as peer:
        replay(scenario, NetworkConnection(peer, server))


STDIO_SCENARIOS = [scenario for scenario in SCENARIOS if scenario.name in STDIO_TOO]


@pytest.mark.parametrize("scenario", STDIO_SCENARIOS, ids=_ids(STDIO_SCENARIOS))
def test_scenario_over_stdio_on_the_cluster(cluster: str, scenario: Scenario) -> None:
    with BridgeProcess([*scenario.args, "--runtime", "ray", "--address", cluster]) as process:
        replay(scenario, StdioConnection(process))
        assert process.close() == 0
    assert [line for line in process.log if UNPARSED in line] == []
