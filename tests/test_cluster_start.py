"""The cluster path of docs/cluster.md from a shell with no ``RAY_*`` variables and no Ray token yet:
``cluster/start.sh local 2 PORT``, then ``oam-actors stdio --runtime ray --address
127.0.0.1:PORT`` as a real subprocess (a scripted turn), then ``cluster/start.sh stop PORT``.

The cluster listens on loopback only, and ``stop`` ends its processes and nothing else: two
bystanders survive, one naming the directory of the cluster on port PORT0 (a prefix of ours
would match a naive search) and one naming our port.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_process import BridgeProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
START = REPO / "cluster" / "start.sh"
_spec = importlib.util.spec_from_file_location("cluster_nodes", REPO / "cluster" / "nodes.py")
assert _spec is not None and _spec.loader is not None
nodes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nodes)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket the processes ``pids`` hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue  # ended meanwhile
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            # /proc/net prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8))
            ip = ipaddress.ip_address(raw)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            found.add((str(ip), int(port, 16)))
    return found


def _run(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(START), *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def clean_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process's environment as a new user's shell: no ``RAY_*``, a home without a token;
    the interpreter running the tests first on ``PATH`` (its ``ray`` and ``python3``)."""
    for name in [name for name in os.environ if name.startswith("RAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    yield dict(os.environ)


def test_local_cluster_from_a_clean_shell(clean_shell: dict[str, str]) -> None:
    port = _free_port()
    bystanders = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", argument])
        for argument in (f"--log-dir={nodes.cluster_dir(port)}0/session_latest/logs", f"--gcs_server_port={port}")
    ]
    try:
        started = _run("local", "2", str(port), env=clean_shell, timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"--address 127.0.0.1:{port}" in started.stdout
        assert (Path(clean_shell["HOME"]) / ".ray" / "auth_token").is_file()  # token auth, token made

        cluster = nodes.members(port)
        listening = _listening(cluster)
        assert ("127.0.0.1", port) in listening
        assert {address for address, _ in listening} == {"127.0.0.1"}, listening

        with BridgeProcess(["--runtime", "ray", "--address", f"127.0.0.1:{port}"]) as bridge:
            bridge.call("session/create", {"session": "guard", "model": {"type": "scripted",
                                                                         "steps": [{"template": "Halt: {prompt}"}]}})
            assert bridge.call("session/respond", {"session": "guard", "prompt": "who goes"})["text"] == "Halt: who goes"
            assert bridge.call("shutdown") == {}
            assert bridge.wait_exit() == 0, bridge.stderr
        assert "InvalidAuthToken" not in bridge.stderr

        cluster = nodes.members(port)
        stopped = _run("stop", str(port), env=clean_shell, timeout=60)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        ended = {int(pid) for pid in re.search(r"ended ([\d ]+);", stopped.stdout).group(1).split()}
        assert not {bystander.pid for bystander in bystanders} & ended
        assert not any(nodes.alive(pid) for pid in cluster)
        assert all(bystander.poll() is None for bystander in bystanders)
        assert not nodes.members(port)
        with socket.socket() as probe:  # nothing listens on the port (connections may linger in TIME_WAIT)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
            probe.listen()
    finally:
        if nodes.members(port):
            nodes.stop(port)
        for bystander in bystanders:
            bystander.kill()
            bystander.wait()
        shutil.rmtree(nodes.cluster_dir(port), ignore_errors=True)
