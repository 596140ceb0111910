"""Batch items are built only for a backend that coalesces (``capabilities.coalesces``): an NPC's
talk, bark and a decision reach a plain backend without ``item``, and reach the backend behind a
CoalescingModel with one (the same steps, run alone with free quota)."""

from __future__ import annotations

import pytest

from oam_actors import ScriptedModel, ScriptStep, ScriptStyle, StepKind
from oam_actors.agent.model import BarkItem, DecisionItem, ReplyItem
from oam_actors.game import NPC, DecisionEngine, DecisionOption, DecisionRequest, Persona
from oam_actors.game.options import NPCOptions, ReplyFormat
from oam_actors.models.coalesce import CoalescingModel

from test_coalesce_model import alone_line


@pytest.mark.parametrize("coalescing", [False, True], ids=["plain", "coalescing"])
async def test_items_reach_only_a_backend_that_coalesces(coalescing: bool) -> None:
    backend = ScriptedModel(style=ScriptStyle.ENVELOPE,
                            fallback=ScriptStep.from_function(lambda r: ScriptStep.say(alone_line(r))))
    model = CoalescingModel(backend) if coalescing else backend
    assert model.capabilities.coalesces is coalescing and not backend.capabilities.coalesces
    npc = NPC(Persona(name="Gorm", role="a villager"), model, options=NPCOptions(reply_format=ReplyFormat.TEXT))
    await npc.talk("Any news?")
    await npc.bark("Dawn in the square.")
    await DecisionEngine(model).decide(DecisionRequest(situation="A stranger arrives.",
                                                       options=[DecisionOption("flee"), DecisionOption("hide")],
                                                       actor=Persona(name="Goblin")))
    kinds = [(r.kind, type(r.item)) for r in backend.requests]
    if coalescing:
        assert kinds == [(StepKind.RESPOND, ReplyItem), (StepKind.RESPOND, BarkItem),
                         (StepKind.STRUCTURED, DecisionItem)]
    else:
        assert kinds == [(StepKind.RESPOND, type(None)), (StepKind.RESPOND, type(None)),
                         (StepKind.STRUCTURED, type(None))]
