"""Routing on ``--runtime ray``: the router is one model actor for the cluster, so a spend cap
holds for the sessions of every shard together. A real ``oam-actors stdio --runtime ray``
subprocess (a private local Ray instance) with two shards, a simulated phone and a priced
OpenAI-compatible provider on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bridge_process import BridgeProcess
from provider_servers import ProviderServer, openai_text, stream

from oam_actors.cli.models import models_from_args
from oam_actors.cluster import ClusterModel

from test_cluster_models import one_session_per_shard, parse


def route_file(tmp_path: Path, cloud_url: str) -> Path:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({
        "backends": {"phones": {"model": "farm:1"},
                     "cloud": {"model": f"openai:{cloud_url}/v1#small", "price": {"request": 0.01},
                               "cap": {"hour": 0.02}}},
        "routes": {"dialogue": ["cloud", "phones"], "default": ["phones"]},
    }))
    return path


def test_on_ray_the_router_is_one_model_actor(tmp_path: Path) -> None:
    setup = models_from_args(parse("--runtime", "ray", "--routes", str(route_file(tmp_path, "http://127.0.0.1:9"))))
    assert isinstance(setup.cluster, ClusterModel) and setup.cluster.name.startswith("system:routes:")
    assert setup.router is None and setup.status_model is not None


@pytest.mark.slow
def test_a_spend_cap_holds_for_the_sessions_of_every_shard_together(tmp_path: Path) -> None:
    sessions = one_session_per_shard()
    with ProviderServer() as cloud:
        cloud.always = stream(openai_text("From the cloud."))
        args = ["--runtime", "ray", "--shards", "2", "--routes", str(route_file(tmp_path, cloud.url)),
                "--farm-time-scale", "0.01"]
        with BridgeProcess(args, env={"OPENAI_API_KEY": "k"}) as bridge:
            for session in sessions:
                bridge.call("session/create", {"session": session})
            replies = [bridge.call("session/respond", {"session": s, "prompt": f"Hello {n}!"})
                       for n in range(2) for s in sessions]
            status = bridge.call("model/status")
            assert bridge.close() == 0
    texts = [reply["text"] for reply in replies]
    backends = {b["name"]: b for b in status["statistics"]["backends"]}
    # The cap allows two cloud steps in the hour: two of the four turns (from both shards) got
    # the cloud, the others the phone, however the shards interleaved.
    assert texts.count("From the cloud.") == 2 == backends["cloud"]["served"] == len(cloud.requests)
    assert all(texts) and backends["phones"]["served"] == 2 and backends["cloud"]["capped"] == 2
    assert backends["cloud"]["spend"] == pytest.approx(0.02)


@pytest.mark.slow
def test_simulate_on_ray_routes_through_the_one_router_actor(tmp_path: Path) -> None:
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps({
        "backends": {"phones": {"model": "farm:1"}, "backup": {"model": "scripted", "price": {"request": 0.01}}},
        "routes": {"dialogue": ["phones", "backup"], "default": ["phones"]},
    }))
    completed = subprocess.run(
        [sys.executable, "-m", "oam_actors", "simulate", "--runtime", "ray", "--routes", str(routes), "--duration", "4",
         "--sessions", "3", "--npcs", "2", "--cancel-rate", "0", "--tool-timeout-rate", "0", "--no-progress",
         "--report-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    phones, backup = report["routing"]["backends"]
    # The router's record came back from its model actor, the farm's own record nested in it.
    assert phones["name"] == "phones" and phones["served"] > 0 and phones["generating"] is not None
    assert backup["spend"] == round(0.01 * backup["served"], 6)


def test_front_doors_with_the_same_table_share_one_router_actor(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    names = []
    for folder in (first, second):
        setup = models_from_args(parse("--runtime", "ray", "--routes", str(route_file(folder, "http://127.0.0.1:9"))))
        assert setup.cluster is not None
        names.append(setup.cluster.name)
    other = models_from_args(parse("--runtime", "ray", "--farm-time-scale", "0.5",
                                   "--routes", str(route_file(first, "http://127.0.0.1:9"))))
    assert names[0] == names[1] != other.cluster.name  # type: ignore[union-attr]
