"""The :class:`HandlerBridge` protocol that handlers and extensions see is what :class:`Bridge`
provides: every member it names exists on a real bridge, a coroutine where the protocol's is one."""

from __future__ import annotations

import inspect

from oam_actors import Bridge, LocalSystem
from oam_actors.bridge.registry import HandlerBridge
from oam_actors.objects import Outlet


def protocol_members(protocol: type) -> dict[str, object]:
    """Names the protocol declares (attributes and methods, its bases' included) → their declaration."""
    members: dict[str, object] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (HandlerBridge, Outlet):
            members.update((name, None) for name in cls.__annotations__)
            members.update((name, value) for name, value in vars(cls).items() if inspect.isfunction(value))
    return {name: value for name, value in members.items() if not name.startswith("_")}


def test_a_bridge_provides_every_member_handlers_may_use() -> None:
    async def write(data: bytes) -> None:
        return None

    bridge = Bridge(LocalSystem(), write)
    members = protocol_members(HandlerBridge)
    assert {"notify", "call_tool", "system", "enqueue", "delete_durable"} <= members.keys()
    for name, declared in members.items():
        assert hasattr(bridge, name), name
        if declared is not None:
            assert inspect.iscoroutinefunction(getattr(bridge, name)) == inspect.iscoroutinefunction(declared), name
