"""The :class:`GameExtension` itself, driven in process through a :class:`Bridge` (what the
subprocess tests cannot see): limits coerced to at least 1, one bridge per extension,
``shutdown`` leaving no NPC, world, subscription or request actor behind, and connections that
share a namespace sharing its game objects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from oam_actors import Bridge, LocalSystem
from oam_actors.game_methods import GAME_METHODS, GameExtension, GameRegistry
from oam_actors.objects.session import NAMESPACE_SEPARATOR
from oam_actors.client import InProcessEndpoint, connect


def test_limits_are_at_least_one() -> None:
    limits = GameExtension(max_npcs=0, max_worlds=-3, max_subscriptions=5).limits
    assert (limits.max_npcs, limits.max_worlds, limits.max_subscriptions) == (1, 1, 5)


def test_the_extension_registers_34_methods_and_serves_one_bridge() -> None:
    # protocol-game's 23 and the 11 conversation/* methods (PROTOCOL.md §10.9)
    assert len(GAME_METHODS) == 34
    assert sum(name.startswith("conversation/") for name in GAME_METHODS) == 11

    async def write(data: bytes) -> None:
        return None

    extension = GameExtension()
    Bridge(LocalSystem(), write, extensions=[extension])
    with pytest.raises(RuntimeError):
        Bridge(LocalSystem(), write, extensions=[extension])


async def test_shutdown_leaves_nothing_behind() -> None:
    extension = GameExtension()
    async with LocalSystem() as system:

        def make(write: Callable[[bytes], Awaitable[None]]) -> Bridge:
            return Bridge(system, write, extensions=[extension])

        async with connect(InProcessEndpoint(make)) as client:
            await client.call("world/create", {"world": "village", "state": {"time": "dawn"}})
            await client.call("world/subscribe", {"world": "village"})
            await client.call(
                "npc/create", {"npc": "gorm", "persona": {"name": "Gorm"}, "world": "village", "model": "scripted"}
            )
            decided = await client.call(
                "decision/decide",
                {
                    "situation": "x",
                    "options": ["a", "b"],
                    "model": {
                        "type": "scripted",
                        "steps": [{"json": {"reasoning": "r", "choice": "b", "confidence": 9}}],
                    },
                },
            )
            assert decided["optionID"] == "b"
            state = extension.state
            assert state is not None
            assert (list(state.npcs), list(state.worlds), list(state.subscriptions)) == (
                ["gorm"],
                ["village"],
                ["sub1"],
            )
            assert sorted(a.kind for a in system.addresses()) == ["npc", "world"]  # the request actor is gone
            assert await client.call("shutdown") == {}
            assert (state.npcs, state.worlds, state.subscriptions) == ({}, {}, {})
            assert system.addresses() == []


async def test_bridges_sharing_a_namespace_share_the_game_objects() -> None:
    registry = GameRegistry()
    namespace = "t:guild" + NAMESPACE_SEPARATOR
    async with LocalSystem() as system:

        def make(write: Callable[[bytes], Awaitable[None]]) -> Bridge:
            extension = GameExtension(registry=registry)
            return Bridge(system, write, namespace=namespace, shared=True, extensions=[extension])

        async with connect(InProcessEndpoint(make)) as second:
            async with connect(InProcessEndpoint(make)) as first:
                await first.call("world/create", {"world": "village"})
                await first.call("npc/create", {"persona": {"name": "Gorm"}, "world": "village", "model": "scripted"})
            # The first connection is gone; its objects stay for the second one.
            assert [n["npc"] for n in (await second.call("npc/list"))["npcs"]] == ["npc1"]
            created = await second.call("npc/create", {"persona": {"name": "Mira"}, "model": "scripted"})
            assert created["npc"] == "npc2"
            assert (await second.call("world/list"))["worlds"][0]["npcs"] == 1
