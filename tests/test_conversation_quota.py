"""Conversations and quota: an ambient line that cannot be admitted before its deadline is the
speaker's fallback line, marked ``degraded`` (on a virtual clock, over the device pool); the next
lines of many conversations on a farm share generations, each spoken by its own member."""

from __future__ import annotations

from bridge_process import BridgeProcess
from test_quota_degradation import pool_crowd

FARM = ["--model", "farm:2", "--farm-time-scale", "0.05"]


async def test_an_ambient_line_past_its_deadline_is_the_speakers_fallback_line() -> None:
    async with pool_crowd() as crowd:
        client = crowd.client
        await client.call("world/create", {"world": "docks"})
        for npc, name in (("bran", "Bran"), ("cora", "Cora")):
            await client.call("npc/create", {"npc": npc, "persona": {"name": name}, "world": "docks",
                                                "options": {"fallbackLines": [f"{name} shrugs."]}})
        await client.call("npc/bark", {"npc": "bran"})  # the backend's last generation
        await client.call("conversation/create", {"conversation": "c", "world": "docks",
                                                     "members": ["bran", "cora"]})
        degraded = await crowd.degrade("conversation/advance", {"conversation": "c", "deadlineSeconds": 5})
        assert degraded["lines"] == [{"speaker": "bran", "name": "Bran", "line": "Bran shrugs.", "emotion": "neutral",
                                      "addressee": None, "isFallback": True, "degraded": "deadline"}]
        assert degraded["next"] == "cora"
        state = await client.call("conversation/state", {"conversation": "c"})
        assert [line["degraded"] for line in state["state"]["lines"]] == ["deadline"]


def test_next_lines_of_many_conversations_share_generations_each_by_its_own_member() -> None:
    pairs = [(f"a{n}", f"b{n}") for n in range(6)]
    with BridgeProcess(FARM) as bridge:
        bridge.call("world/create", {"world": "farmland"})
        for a, b in pairs:
            for npc in (a, b):
                bridge.call("npc/create", {"npc": npc, "persona": {"name": npc.upper(), "role": "a farmer"},
                                           "world": "farmland"})
            bridge.call("conversation/create", {"conversation": f"c{a}", "world": "farmland", "members": [a, b],
                                                "situation": "Harvest time."})
        ids = [bridge.request("conversation/run", {"conversation": f"c{a}", "lines": 2}) for a, _ in pairs]
        results = [bridge.result(i) for i in ids]
        stats = bridge.call("model/status")["statistics"]
        assert bridge.close() == 0
    for (a, b), result in zip(pairs, results, strict=True):
        assert [line["speaker"] for line in result["lines"]] == [a, b]
        assert all(line["line"] and not line["isFallback"] for line in result["lines"])
        others = [n.upper() for pair in pairs for n in pair if n not in (a, b)]
        assert not any(line["line"].startswith(f"{o}:") for o in others for line in result["lines"])
    coalescing = stats["coalescing"]
    assert coalescing["items"] >= 12 and stats["stepsOk"] < 12
