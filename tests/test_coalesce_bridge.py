"""Coalescing through the real ``oam-actors stdio`` process on a farm of simulated phones: many
NPCs barking at once on the shared system model cost fewer generations than barks (counted by
the pool), every bark is answered with its own NPC's line (and every talk with its own reply,
plain or structured), ``model/status`` reports the
coalescing, and the per-request and per-server opt-outs."""

from __future__ import annotations

from typing import Any

from bridge_process import BridgeProcess

NPCS = [f"villager{n}" for n in range(12)]
FARM = ["--model", "farm:2", "--farm-time-scale", "0.05"]


def act_all(bridge: BridgeProcess, method: str, options: dict[str, Any] | None = None,
            **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Create the NPCs (with ``options``), send ``method`` for each at once; results and the
    model's statistics."""
    for npc in NPCS:
        bridge.call("npc/create", {"npc": npc, "persona": {"name": npc.capitalize(), "role": "a villager"},
                                   **({"options": options} if options else {})})
    ids = [bridge.request(method, {"npc": npc, **params}) for npc in NPCS]
    results = [bridge.result(i) for i in ids]
    return results, bridge.call("model/status")["statistics"]


def bark_all(bridge: BridgeProcess, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return act_all(bridge, "npc/bark", situation="Dawn in the square.", **params)


def test_barks_of_a_crowd_on_a_farm_share_generations() -> None:
    with BridgeProcess(FARM) as bridge:
        results, stats = bark_all(bridge)
        assert bridge.close() == 0
    assert [r["npc"] for r in results] == NPCS and all(r["line"] for r in results)
    coalescing = stats["coalescing"]
    assert coalescing["items"] == len(NPCS) and coalescing["batches"] >= 1
    assert stats["stepsOk"] == coalescing["generations"] < len(NPCS)  # what the phones generated
    assert coalescing["itemsPerGeneration"] > 1


def test_coalescing_is_off_per_request_and_per_server() -> None:
    with BridgeProcess(FARM) as bridge:
        results, stats = bark_all(bridge, coalesce=False)
        error = bridge.error(bridge.request("npc/bark", {"npc": NPCS[0], "coalesce": "no"}))
        assert bridge.close() == 0
    assert all(r["line"] for r in results)
    assert (stats["stepsOk"], stats["coalescing"]["passthrough"], stats["coalescing"]["items"]) == (12, 12, 0)
    assert error["code"] == -32602 and "coalesce" in error["message"]
    with BridgeProcess([*FARM, "--no-coalesce"]) as bridge:
        results, stats = bark_all(bridge)
        assert bridge.close() == 0
    assert all(r["line"] for r in results) and stats["stepsOk"] == 12 and "coalescing" not in stats


def test_decide_many_on_a_farm_shares_generations_and_a_bad_coalesce_names_the_field() -> None:
    requests = [{"situation": "A stranger arrives.", "options": ["greet", "hide", "shout"],
                 "actor": {"name": f"Goblin{n}"}} for n in range(8)]
    with BridgeProcess(FARM) as bridge:
        result = bridge.call("decision/decideMany", {"requests": requests, "maxConcurrency": 8})
        bad = bridge.error(bridge.request("decision/decideMany", {"requests": [{**requests[0], "coalesce": 1}]}))
        stats = bridge.call("model/status")["statistics"]
        assert bridge.close() == 0
    assert [r["optionID"] in ("greet", "hide", "shout") for r in result["results"]] == [True] * 8
    assert stats["stepsOk"] < 8 and stats["coalescing"]["answered"] >= 2
    assert bad["code"] == -32602 and "requests[0].coalesce" in bad["message"]


def talk_all(bridge: BridgeProcess, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return act_all(bridge, "npc/talk", {"replyFormat": "text"}, line="Any news today?", **params)


def test_text_replies_of_a_crowd_share_generations_and_opt_out_per_request() -> None:
    with BridgeProcess(FARM) as bridge:
        results, stats = talk_all(bridge)
        assert bridge.close() == 0
    assert [r["npc"] for r in results] == NPCS and all("today" in r["line"] for r in results)
    assert not any(r["isFallback"] for r in results)
    assert stats["stepsOk"] == stats["coalescing"]["generations"] < len(NPCS)
    with BridgeProcess(FARM) as bridge:
        results, stats = talk_all(bridge, coalesce=False)
        bad = bridge.error(bridge.request("npc/talk", {"npc": NPCS[0], "line": "Hi.", "coalesce": "no"}))
        assert bridge.close() == 0
    assert all(r["line"] for r in results) and stats["stepsOk"] == len(NPCS)
    assert bad["code"] == -32602 and "coalesce" in bad["message"]


def test_structured_replies_of_a_crowd_share_generations_with_their_player_options() -> None:
    with BridgeProcess(FARM) as bridge:
        results, stats = act_all(bridge, "npc/talk", line="Any news today?")  # replyFormat automatic
        assert bridge.close() == 0
    assert [r["npc"] for r in results] == NPCS and all("today" in r["line"] for r in results)
    assert not any(r["isFallback"] for r in results)
    assert all(r["playerOptions"] and isinstance(r["endsConversation"], bool) for r in results)
    coalescing = stats["coalescing"]
    assert coalescing["items"] == len(NPCS) and coalescing["answered"] >= 2 and coalescing["passthrough"] == 0
    # the simulated phone answers a batch with all three options, the endsConversation flag false
    answered = [r for r in results if len(r["playerOptions"]) == 3 and r["endsConversation"] is False]
    assert len(answered) >= coalescing["answered"]
    assert stats["stepsOk"] == coalescing["generations"] < len(NPCS)
