"""Conversations among NPCs on a real local Ray instance: a conversation and its members each live
on their own shard (the world's document is a replica on the shards other than the world's),
asking each other across shards; a shard killed under any of them loses nothing committed (the
conversation's lines, the members' and bystanders' memories of them, the members' scripts'
positions), and the conversation finds its members again at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oam_actors.cluster import RaySystem, shard_of
from oam_actors.runtime import Address

from test_cluster_ray import (  # noqa: F401
    HANG_GUARD, OPEN_GATE, check_invariants, kill_and_wait, on_shard, open_wire, ray_instance,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def lines(*texts: str) -> dict[str, object]:
    return {"type": "scripted", "steps": [{"text": text} for text in texts]}


async def test_a_conversation_and_its_members_come_back_from_their_checkpoints(ray_instance: None) -> None:
    village = Address("world", "village")
    conversation = next(i for i in (f"table{n}" for n in range(100))  # on the shard the world is not on
                        if shard_of(Address("conversation", i), 2) != shard_of(village, 2))
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


def said(memory: dict[str, Any]) -> list[str]:
    """The lines an NPC heard, without who said them."""
    return [note.split(": ", 1)[1] for note in memory["heard"]]


async def test_members_on_different_shards_talk_remember_and_lose_nothing_when_a_members_shard_dies(
        ray_instance: None) -> None:
    bran, cora = on_shard(0, "bran"), on_shard(1, "cora")
    members = [bran, cora]
    assert {shard_of(Address("npc", npc), 2) for npc in members} == {0, 1}
    # The conversation lives with Bran: Cora's shard dies under her line, not under the conversation.
    table = next(i for i in (f"table{n}" for n in range(100)) if shard_of(Address("conversation", i), 2) == 0)
    # Cora's third line is slow: her shard is killed while the conversation waits for it.
    scripts = {bran: lines("The bridge is out, Cora.", "Two days.", "Or three.", "Four, then."),
               cora: {"type": "scripted", "steps": [{"text": "Then no flour."}, {"text": "Fine."},
                                                    {"text": "Too late.", "delayMs": 20_000}]}}
    async with RaySystem(shards=2) as system, open_wire(system, game=True) as wire:
        await wire.call("world/create", {"world": "village"})
        for npc in members:
            await wire.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "world": "village",
                                           "model": scripts[npc]})
        await wire.call("conversation/create", {"conversation": table, "world": "village", "members": members})
        ran = await wire.call("conversation/run", {"conversation": table, "lines": 4})
        committed = ["The bridge is out, Cora.", "Then no flour.", "Two days.", "Fine."]
        assert [(line["speaker"], line["line"]) for line in ran["lines"]] == list(zip([bran, cora] * 2, committed))
        for npc in members:
            memory = (await wire.call("npc/state", {"npc": npc}))["state"]["memory"]
            assert said(memory) == committed
            assert memory["heard"][0].startswith("You" if npc == bran else bran.title())
        # Mid-run: Bran's line is said, Cora's is asked for, and her shard dies.
        running = wire.request("conversation/run", {"conversation": table, "lines": 2, "stream": True})
        await wire.wait_for(lambda m: m.get("method") == "conversation/event"
                            and m["params"]["event"] == {"type": "speaker", "npc": cora, "name": cora.title()})
        await kill_and_wait(system, shard_of(Address("npc", cora), 2))
        with anyio.fail_after(HANG_GUARD):
            answer = await wire.response(running)
        assert answer["error"]["code"] == -32603  # the line's host failed: the run is not committed
        state = (await wire.call("conversation/state", {"conversation": table}))["state"]
        assert [line["line"] for line in state["lines"]] == committed
        for npc in members:  # Cora's memory came back from her checkpoint; Bran's shard lived on
            assert said((await wire.call("npc/state", {"npc": npc}))["state"]["memory"]) == committed
        # The conversation goes on across the shards; both members hear the new line.
        again = await wire.call("conversation/advance", {"conversation": table, "speaker": bran})
        assert again["lines"][0]["speaker"] == bran
        for npc in members:
            memory = (await wire.call("npc/state", {"npc": npc}))["state"]["memory"]
            assert said(memory) == [*committed, again["lines"][0]["line"]]
        check_invariants(wire.log)


async def test_a_member_on_another_shard_deleted_mid_line_fails_the_request_as_on_one_process(
        ray_instance: None) -> None:
    # The conversation asks Cora across shards.
    conversation = next(i for i in (f"d{n}" for n in range(100))
                        if shard_of(Address("conversation", i), 2) != shard_of(Address("npc", "cora"), 2))
    async with RaySystem(shards=2) as system, open_wire(system, game=True) as wire:
        await wire.call("world/create", {"world": "village"})
        for npc, model in (("bran", lines("Hello.")), ("cora", {"type": "scripted", "steps": [
                {"text": "Slow words.", "delayMs": 20_000}]})):
            await wire.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "world": "village",
                                           "model": model})
        await wire.call("conversation/create", {"conversation": conversation, "world": "village",
                                                "members": ["bran", "cora"]})
        run = wire.request("conversation/run", {"conversation": conversation, "lines": 2, "stream": True})
        await wire.wait_for(lambda m: m.get("method") == "conversation/event"
                            and m["params"]["event"] == {"type": "speaker", "npc": "cora", "name": "Cora"})
        await wire.call("npc/delete", {"npc": "cora"})
        error = (await wire.response(run))["error"]
        assert (error["code"], error["data"]) == (-32050, {"code": "npc_not_found", "npc": "cora"})
        state = (await wire.call("conversation/state", {"conversation": conversation}))["state"]
        assert (state["lines"], [m["npc"] for m in state["members"]]) == ([], ["bran"])
        assert "heard" not in (await wire.call("npc/state", {"npc": "bran"}))["state"]["memory"]
        check_invariants(wire.log)


async def test_a_lines_response_waits_for_a_busy_bystander_on_another_shard_and_its_checkpoint(
        ray_instance: None) -> None:
    # Finn overhears from the shard the conversation is not on, busy with the player's gate.
    finn = on_shard(1, "finn")
    table = next(i for i in (f"t{n}" for n in range(100)) if shard_of(Address("conversation", i), 2) == 0)
    finn_model = {"type": "scripted", "steps": [
        {"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]},
        {"json": {"emotion": "neutral", "line": "Open.", "player_options": [], "ends_conversation": False}}]}
    async with RaySystem(shards=2) as system, open_wire(system, game=True) as wire:
        await wire.call("world/create", {"world": "village"})
        for npc, model, tools in (("bran", lines("The bridge is out, Cora."), []), ("cora", lines("Then no flour."), []),
                                  (finn, finn_model, [OPEN_GATE])):
            await wire.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "world": "village",
                                           "model": model, "tools": tools})
        await wire.call("conversation/create", {"conversation": table, "world": "village",
                                                "members": ["bran", "cora"], "audience": [finn]})
        talk = wire.request("npc/talk", {"npc": finn, "line": "Open the north gate."})
        call = wire.log[await wire.wait_for(lambda m: m.get("method") == "tool/call")]
        run = wire.request("conversation/run", {"conversation": table, "lines": 2, "stream": True})
        await wire.wait_for(lambda m: m.get("method") == "conversation/event"
                            and m["params"]["event"].get("type") == "line" and m["params"]["event"]["speaker"] == "cora")
        wire.send({"id": call["id"], "result": {"output": "open"}})
        await wire.result(run)
        # Finn's note waited behind his talk: the talk's answer came first.
        answers = [m["id"] for m in wire.log if "method" not in m and m.get("id") in (talk, run)]
        assert answers == [talk, run]
        await kill_and_wait(system, shard_of(Address("npc", finn), 2))
        heard = (await wire.call("npc/state", {"npc": finn, "settle": False}))["state"]["memory"]["heard"]
        assert heard == ["(overheard) Bran to Cora: The bridge is out, Cora.", "(overheard) Cora: Then no flour."]
        check_invariants(wire.log)
