"""Backends sessions name, on a real two-node Ray cluster: one named model actor per backend,
shared by every shard and every front door, within the provider's limit, and restarted with its
quota state.

The provider is :class:`~provider_servers.WindowedProvider` on loopback (4 requests per fixed
1 s window, with OpenAI's rate-limit headers, 429 over the limit); the front doors are real
``oam-actors serve --runtime ray --address …`` processes; sessions name the provider in
``session/create``. One cluster for the module (``test_cluster_multinode``'s fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import ray
from provider_servers import WindowedProvider
from serve_process import ServeProcess, TcpPeer
from test_cluster_models import one_session_per_shard
from test_cluster_multinode import cluster  # noqa: F401 - the module's two-node cluster

from oam_actors.cluster import MODEL_NAMESPACE, RemoteModel
from oam_actors.models.proxy import ProxyConfig, config_from_wire

pytestmark = pytest.mark.slow

LIMIT, WINDOW = 4, 1.0  # 240 requests a minute, enforced per second


@pytest.fixture(scope="module")
def provider() -> Iterator[WindowedProvider]:
    with WindowedProvider(LIMIT, WINDOW) as server:
        yield server


@pytest.fixture(scope="module")
def ray_client(cluster: str) -> Iterator[None]:  # noqa: F811 - the fixture imported above
    ray.init(address=cluster, log_to_driver=False)
    yield
    ray.shutdown()


def backend(provider: WindowedProvider, model: str) -> dict[str, Any]:
    return {"type": "openai", "baseUrl": f"{provider.url}/v1", "model": model}


def actor_name(spec: dict[str, Any]) -> str:
    config: ProxyConfig = config_from_wire(spec)
    return f"oam-model:proxy:{config.quota_key}"


def model_actors() -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == MODEL_NAMESPACE and a["name"].startswith("oam-model:proxy:"))


def run_turns(peer: TcpPeer, spec: dict[str, Any], sessions: list[str], turns: int) -> list[dict[str, Any]]:
    for session in sessions:
        peer.result(peer.request("session/create", {"session": session, "model": spec}))
    ids = [peer.request("session/respond", {"session": s, "prompt": f"turn {n}"}) for n in range(turns) for s in sessions]
    return [peer.response(i) for i in ids]


def test_two_front_doors_share_one_model_actor_per_backend_within_the_providers_limit(
    cluster: str, provider: WindowedProvider, ray_client: None  # noqa: F811
) -> None:
    spec = backend(provider, "shared")
    sessions = [f"{s}-{k}" for s in one_session_per_shard() for k in range(2)]  # two on each shard
    args = ["--runtime", "ray", "--address", cluster, "--shards", "2", "--tcp", "127.0.0.1:0",
            "--rpm", str(int(LIMIT * 60 / WINDOW))]
    before = len(provider.requests)
    with ServeProcess(args) as first, ServeProcess(args) as second:
        peers = [first.tcp(), second.tcp()]
        results: list[list[dict[str, Any]]] = [[], []]

        async def door(index: int) -> None:
            results[index] = await anyio.to_thread.run_sync(run_turns, peers[index], spec,
                                                            [f"{s}-{index}" for s in sessions], 3)

        async def both() -> None:
            async with anyio.create_task_group() as group:
                for index in range(2):
                    group.start_soon(door, index)

        anyio.run(both)
        # A backend that cannot be hosted fails as on LocalSystem, naming the field.
        bad = peers[0].error(peers[0].request("session/create", {"session": "bad", "model": {
            "type": "openai", "baseUrl": "http://10.9.9.9/v1", "model": "m"}}))
        for peer in peers:
            peer.close()
    assert bad["code"] == -32602 and "model.baseUrl" in bad["message"] and "pickle" not in bad["message"]
    answers = results[0] + results[1]
    assert [a.get("error") for a in answers] == [None] * 24  # every turn answered, none refused
    assert all(a["result"]["text"] == "Aye." for a in answers)
    assert len(provider.requests) - before == 24
    assert provider.refused == {} and provider.most_in_a_window() <= LIMIT  # one stated rate in total
    assert model_actors().count(actor_name(spec)) == 1  # both doors, both shards: one actor


def test_a_killed_model_actor_fails_its_step_retryably_and_comes_back_with_its_quota_state(
    cluster: str, provider: WindowedProvider, ray_client: None  # noqa: F811
) -> None:
    spec = backend(provider, "restarted")
    name = actor_name(spec)
    with ServeProcess(["--runtime", "ray", "--address", cluster, "--tcp", "127.0.0.1:0"]) as door:
        peer = door.tcp()
        assert [a.get("error") for a in run_turns(peer, spec, ["before"], 2)] == [None, None]
        remote = RemoteModel(name.removeprefix("oam-model:"), None, variant=(config_from_wire(spec), None))  # type: ignore[arg-type]
        learned = anyio.run(remote.statistics)
        assert learned is not None and learned.reported_limit == LIMIT
        assert learned.reported_window is not None and 0 < learned.reported_window <= WINDOW
        anyio.run(anyio.sleep, 0.6)  # past a quota checkpoint
        # A step in flight when the actor dies: it fails retryably, and runs again after the restart.
        provider.hang_next = True
        sent = len(provider.requests)
        turn = peer.request("session/respond", {"session": "before", "prompt": "while it dies"})
        while len(provider.requests) == sent:
            anyio.run(anyio.sleep, 0.05)
        ray.kill(ray.get_actor(name, namespace=MODEL_NAMESPACE), no_restart=False)
        answer = peer.response(turn)
        peer.close()
    assert answer.get("error") is None and answer["result"]["text"] == "Aye."
    assert len(provider.requests) == sent + 2  # the step, then its retry on the restarted actor
    restored = anyio.run(RemoteModel(name.removeprefix("oam-model:"), None,  # type: ignore[arg-type]
                                     variant=(config_from_wire(spec), None)).statistics)
    assert restored is not None and restored.reported_limit == LIMIT  # learned before the kill
    assert restored.reported_window is not None and restored.reported_window >= learned.reported_window
    assert restored.requests_in_window >= 3  # the window it had spent came back too
