"""Conversations among NPCs on a real local Ray instance: a conversation lives on its world's shard,
with the world's NPCs (they share the world's document), whatever shard its id hashes to; the
shard killed under it loses nothing committed (the conversation's lines, the members' and
bystanders' memories of them, the members' scripts' positions), and the conversation finds its
members again at once."""

from __future__ import annotations

import pytest

from oam_actors.cluster import RaySystem, shard_of
from oam_actors.runtime import Address

from test_cluster_ray import check_invariants, elsewhere, kill_and_wait, open_wire, ray_instance  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def lines(*texts: str) -> dict[str, object]:
    return {"type": "scripted", "steps": [{"text": text} for text in texts]}


async def test_a_conversation_and_its_members_come_back_from_their_checkpoints(ray_instance: None) -> None:
    village = Address("world", "village")
    conversation = elsewhere(village, "table")  # its id hashes to the other shard
    async with RaySystem(shards=2) as system, open_wire(system, game=True) as wire:
        await wire.call("world/create", {"world": "village"})
        for npc, model in (("bran", lines("The bridge is out, Cora.", "Two days.")),
                           ("cora", lines("Then no flour.")), ("finn", lines())):
            await wire.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "world": "village",
                                           "model": model})
        await wire.call("conversation/create", {"conversation": conversation, "world": "village",
                                                "members": ["bran", "cora"], "audience": ["finn"]})
        ran = await wire.call("conversation/run", {"conversation": conversation, "lines": 2})
        assert [(line["speaker"], line["line"]) for line in ran["lines"]] == [
            ("bran", "The bridge is out, Cora."), ("cora", "Then no flour.")]
        await kill_and_wait(system, shard_of(Address("conversation", conversation), 2))
        saved = (await wire.call("conversation/state", {"conversation": conversation}))["state"]
        assert [line["line"] for line in saved["lines"]] == ["The bridge is out, Cora.", "Then no flour."]
        await kill_and_wait(system, shard_of(village, 2))
        heard = (await wire.call("npc/state", {"npc": "finn"}))["state"]["memory"]["heard"]
        assert heard == ["(overheard) Bran to Cora: The bridge is out, Cora.", "(overheard) Cora: Then no flour."]
        # Bran's script goes on where it was: his next line is his second.
        again = await wire.call("conversation/advance", {"conversation": conversation})
        assert again["lines"][0]["line"] == "Two days."
        check_invariants(wire.log)
