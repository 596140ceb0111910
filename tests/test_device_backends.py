"""Device backends sessions name (``{"type": "device", "urls": [...]}``) on LocalSystem: what the
front door refuses (naming the field), one pool per set of phones, started on first use and
shared by every session naming those phones. (On Ray: ``test_cluster_ray``.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oam_actors import AgentError, Bridge, ErrorCode, LocalSystem, ProtocolError
from oam_actors.bridge import BridgeConfig
from oam_actors.models.device import PhoneConfig, SimulatedPhone
from oam_actors.models.device_backends import MAX_DEVICE_POOLS, DeviceBackends
from oam_actors.models.setup import ModelConfig, create_model_setup
from oam_actors.runtime import hosting_of
from oam_actors.client import InProcessEndpoint, connect

PHONE = PhoneConfig(first_token_latency_s=0.0, tokens_per_s=0.0, tool_call_rate=0.0)


def device(*urls: str) -> dict[str, Any]:
    return {"type": "device", "urls": list(urls)}


@pytest.mark.parametrize(("spec", "words"), [
    ({"type": "device"}, ["'model.urls'", "array of 1-64 device URLs"]),
    (device(), ["'model.urls'", "array"]),
    ({"type": "device", "urls": "http://127.0.0.1:8765"}, ["'model.urls'", "array"]),
    (device("ftp://127.0.0.1:21"), ["'model.urls'", "must look like http://HOST:PORT"]),
    (device("http://127.0.0.1:8765", "HTTP://127.0.0.1:8765/"), ["'model.urls'", "listed twice"]),
    (device("http://10.9.9.9:8765"), ["'model.urls'", "host '10.9.9.9'", "--device-allow-host"]),
    ({**device("http://127.0.0.1:8765"), "token": "secret"}, ["'model.token'", "takes type, urls"]),
])
def test_a_device_model_the_server_cannot_run_is_invalid_params_naming_the_field(
    spec: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ProtocolError) as raised:
        DeviceBackends().from_wire(spec, "model")
    assert raised.value.code is ErrorCode.INVALID_PARAMS
    assert all(word in raised.value.message for word in words), raised.value.message


def test_the_system_pools_hosts_and_allowed_hosts_may_be_named() -> None:
    setup = create_model_setup(ModelConfig(devices=("http://10.0.0.5:8765",), device_allow_hosts=("phones.lan",)))
    named = setup.model_types["device"]
    assert named(device("http://10.0.0.5:8766"), "model") is not None
    assert named(device("http://PHONES.lan:8765"), "model") is not None
    with pytest.raises(ProtocolError, match="host '10.0.0.6'"):
        named(device("http://10.0.0.6:8765"), "model")


def test_the_same_phones_in_any_spelling_are_one_model_hosted_under_one_name() -> None:
    backends = DeviceBackends()
    first = backends.from_wire(device("http://127.0.0.1:9001", "http://127.0.0.1:9002"))
    again = backends.from_wire(device("HTTP://127.0.0.1:9002/", "http://127.0.0.1:9001"))
    other = backends.from_wire(device("http://127.0.0.1:9001"))
    assert first is again and other is not first
    hosting = hosting_of(first)
    assert hosting is not None and hosting.name == "device:http://127.0.0.1:9001,http://127.0.0.1:9002"
    assert hosting_of(other).name == "device:http://127.0.0.1:9001"  # type: ignore[union-attr]


def test_past_the_limit_of_pools_a_new_set_of_phones_is_refused() -> None:
    backends = DeviceBackends()
    for port in range(MAX_DEVICE_POOLS):
        backends.from_wire(device(f"http://127.0.0.1:{10000 + port}"))
    backends.from_wire(device("http://127.0.0.1:10000"))  # a set it runs already
    with pytest.raises(ProtocolError) as raised:
        backends.from_wire(device("http://127.0.0.1:9999"))
    assert raised.value.code is ErrorCode.LIMIT_REACHED


async def test_a_model_of_backends_that_do_not_run_is_model_unavailable() -> None:
    model = DeviceBackends().from_wire(device("http://127.0.0.1:9"))
    with pytest.raises(AgentError) as raised:
        await model.availability()
    assert raised.value.code is ErrorCode.MODEL_UNAVAILABLE


def bridge_of(system: LocalSystem, config: BridgeConfig) -> Callable[[Callable[[bytes], Awaitable[None]]], Bridge]:
    return lambda write: Bridge(system, write, config=config)


async def test_sessions_naming_one_phone_share_the_one_pool_started_on_first_use() -> None:
    setup = create_model_setup(ModelConfig())
    async with SimulatedPhone(PHONE) as phone, setup.resources, LocalSystem() as system:
        config = BridgeConfig(model_types=setup.model_types)
        async with connect(InProcessEndpoint(bridge_of(system, config))) as client:
            for session in ("guard", "smith"):
                await client.call("session/create", {"session": session, "model": device(phone.url)})
            assert phone.statistics().admitted == 0  # nothing started before a step needs it
            replies = [await client.call("session/respond", {"session": s, "prompt": "Ale?"})
                       for s in ("guard", "smith")]
        pool = setup.model_types["device"](device(phone.url), "model")
        statistics = await pool.statistics()
    assert all(reply["text"] for reply in replies)
    assert statistics.steps_ok == 2 == phone.statistics().admitted  # type: ignore[attr-defined]


async def test_sessions_naming_the_servers_own_phones_share_the_servers_pool() -> None:
    async with SimulatedPhone(PHONE) as phone:
        setup = create_model_setup(ModelConfig(devices=(phone.url,)))
        async with setup.resources, LocalSystem() as system:
            named = setup.model_types["device"](device(phone.url.upper() + "/"), "model")  # another spelling
            assert setup.system_model is not None and named is setup.system_model()
            config = BridgeConfig(model_types=setup.model_types)
            async with connect(InProcessEndpoint(lambda write: Bridge(system, write, config=config,
                                                         system_model=setup.system_model))) as client:
                await client.call("session/create", {"session": "guard", "model": device(phone.url)})
                await client.call("session/create", {"session": "smith"})  # the system model
                replies = [await client.call("session/respond", {"session": s, "prompt": "Ale?"})
                           for s in ("guard", "smith")]
            assert setup.status_model is not None
            statistics = await setup.status_model().statistics()
    assert all(reply["text"] for reply in replies)
    assert statistics.steps_ok == 2 == phone.statistics().admitted  # type: ignore[attr-defined]
