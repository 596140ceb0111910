"""Whose share of quota each request spends, through the real bridge: fair queuing counts an NPC's
actions, so every request an NPC makes (its barks, its talks, the decisions it is the actor of)
is charged to that NPC, and only a turn's first step is charged for the action."""

from __future__ import annotations

import json

from oam_actors import Bridge, GameExtension, GenerationRequest, LocalSystem, ScriptedModel, ScriptStep, ScriptStyle
from oam_actors import StepKind
from oam_actors.client import InProcessEndpoint, connect


def answer(request: GenerationRequest) -> ScriptStep:
    if request.kind is StepKind.STRUCTURED:
        return ScriptStep.say(json.dumps({"reasoning": "Dragons burn.", "choice": "flee", "confidence": 60}))
    return ScriptStep.say("Fine weather.")


async def test_a_decision_whose_actor_is_an_npc_is_charged_to_that_npc_like_its_barks() -> None:
    model = ScriptedModel(style=ScriptStyle.ENVELOPE, fallback=ScriptStep.from_function(answer))
    async with LocalSystem() as system, connect(InProcessEndpoint(
            lambda write: Bridge(system, write, system_model=lambda: model, extensions=[GameExtension()]))) as client:
        await client.call("npc/create", {"npc": "gorm", "persona": {"name": "Gorm", "role": "a blacksmith"}})
        await client.call("npc/bark", {"npc": "gorm", "situation": "Dawn."})
        options = ["fight", "flee"]
        named = await client.call("decision/decide", {"situation": "A dragon.", "options": options, "actor": "gorm"})
        inline = await client.call("decision/decide", {"situation": "A dragon.", "options": options,
                                                          "actor": {"name": "Snik"}})
    assert named["optionID"] == inline["optionID"] == "flee"
    assert [r.owner for r in model.requests] == ["gorm", "gorm", None]  # a persona object names no NPC
    assert not any(r.follow_up for r in model.requests)
