"""Server-side request forgery: a server listening beyond loopback refuses session- and
NPC-named backends on loopback, link-local or private addresses unless the operator allowed the
host (PROTOCOL.md §7 Backends, docs/security.md). A real ``oam-actors serve`` bound to 0.0.0.0
with a token (the tests connect through 127.0.0.1), a real HTTP listener on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from provider_servers import TEXT, ProviderServer, stream
from serve_process import ServeProcess, TcpPeer

from oam_actors.models.address_guard import AddressGuard

TOKEN = "s3cret-token"
FORGED = [
    "http://127.0.0.1:{port}/v1",
    "http://localhost:{port}/v1",
    "http://[::1]:{port}/v1",
    "http://[::ffff:127.0.0.1]:{port}/v1",
    "http://169.254.169.254/latest",
    "http://0.0.0.0:{port}/v1",
]


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    with ProviderServer() as server:
        server.always = stream(TEXT["openai"]("The gate is open."))
        yield server


def serve(*extra: str, host: str = "0.0.0.0") -> ServeProcess:
    return ServeProcess(["--tcp", f"{host}:0", "--token", f"alice={TOKEN}", *extra])


def connect(server: ServeProcess) -> TcpPeer:
    assert server.tcp_address is not None
    peer = TcpPeer(("127.0.0.1", server.tcp_address[1]))  # bound to 0.0.0.0, reached on loopback
    peer.call("auth", {"token": TOKEN})
    return peer


def openai(base_url: str) -> dict[str, Any]:
    return {"type": "openai", "model": "m", "baseUrl": base_url}


def port_of(provider: ProviderServer) -> int:
    return int(provider.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("template", FORGED)
def test_beyond_loopback_a_session_may_not_name_a_private_backend(provider: ProviderServer, template: str) -> None:
    url = template.format(port=port_of(provider))
    with serve() as server, connect(server) as peer:
        error = peer.error(peer.request("session/create", {"session": "s", "model": openai(url)}))
        assert (error["code"], error["data"]["code"]) == (-32602, "invalid_params")
        assert "'model.baseUrl'" in error["message"] and "--proxy-allow-host" in error["message"]
        npc = peer.error(peer.request("npc/create", {"persona": {"name": "Gorm"}, "model": openai(url)}))
        assert (npc["code"], "'model.baseUrl'" in npc["message"]) == (-32602, True)
        assert peer.call("session/list") == {"sessions": []}
    assert provider.requests == []  # nothing reached the local service


def test_beyond_loopback_a_session_may_not_name_private_phones(provider: ProviderServer) -> None:
    with serve() as server, connect(server) as peer:
        for url in (provider.url, "http://10.1.2.3:8765", "http://[fe80::1]:8765"):
            error = peer.error(peer.request("session/create", {"model": {"type": "device", "urls": [url]}}))
            assert (error["code"], "'model.urls'" in error["message"]) == (-32602, True), error
    assert provider.requests == []


def test_a_host_the_operator_allowed_is_reached(provider: ProviderServer) -> None:
    with serve("--proxy-allow-host", "127.0.0.1", "--device-allow-host", "127.0.0.1") as server, \
            connect(server) as peer:
        peer.call("session/create", {"session": "s", "model": openai(provider.url + "/v1")})
        assert peer.call("session/respond", {"session": "s", "prompt": "Open?"})["text"] == "The gate is open."
        assert peer.call("session/create", {"model": {"type": "device", "urls": [provider.url]}})["session"]
        # Only the allowed host: its other spellings still resolve to loopback and are refused.
        refused = peer.error(peer.request("session/create", {"model": openai(f"http://localhost:{port_of(provider)}/v1")}))
        assert refused["code"] == -32602
    assert len(provider.requests) == 1


def test_a_loopback_only_server_still_reaches_loopback_backends(provider: ProviderServer) -> None:
    with serve(host="127.0.0.1") as server, connect(server) as peer:
        peer.call("session/create", {"session": "s", "model": openai(provider.url + "/v1")})
        assert peer.call("session/respond", {"session": "s", "prompt": "Open?"})["text"] == "The gate is open."
    assert len(provider.requests) == 1


def test_the_pinned_transport_refuses_a_private_address_at_connection_time(provider: ProviderServer) -> None:
    """The check at create is repeated at each connection, on the address connected to."""

    async def fetch(exempt: set[str]) -> int:
        guard = AddressGuard(exempt, allow_flag="--proxy-allow-host")
        async with httpx.AsyncClient(transport=guard.transport(), follow_redirects=False) as client:
            return (await client.post(provider.url + "/v1/chat/completions", json={})).status_code

    with pytest.raises(httpx.ConnectError, match="not a public address"):
        anyio.run(fetch, set())
    assert provider.requests == []
    assert anyio.run(fetch, {"127.0.0.1"}) == 200
    assert len(provider.requests) == 1


def test_the_operators_own_system_model_on_loopback_is_still_reached(provider: ProviderServer) -> None:
    with serve("--model", "openai#m", "--base-url", provider.url + "/v1") as server, connect(server) as peer:
        peer.call("session/create", {"session": "s"})  # the system model
        assert peer.call("session/respond", {"session": "s", "prompt": "Open?"})["text"] == "The gate is open."
        # Sessions may name the system model's host too: the operator chose it.
        peer.call("session/create", {"session": "named", "model": openai(provider.url + "/v1")})
        assert peer.call("session/respond", {"session": "named", "prompt": "Open?"})["text"] == "The gate is open."
    assert len(provider.requests) == 2
