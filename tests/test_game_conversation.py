"""The pure part of conversations among NPCs (turn orders, the attribution check, whom a line
addresses, how a listener remembers it) and an NPC's side: its line coalesced with other
conversations' lines, a misattributed one retried alone, and a talk with the player that draws on
what the NPC heard."""

from __future__ import annotations

import re

import pytest

from oam_actors import GenerationRequest, ScriptedModel
from oam_actors.game import NPC, NPCMemory, Persona
from oam_actors.game.conversation import (
    PLAYER,
    ConversationLine,
    ConversationState,
    Member,
    TurnOrder,
    addressee_of,
    check_line,
    heard_note,
    next_speaker,
    spoken,
    view_for,
)

from test_coalesce_model import Rig

MEMBERS = (Member("b", "Bran"), Member("c", "Cora"), Member("d", "Dena"))


def said(state: ConversationState, speaker: str, line: str) -> ConversationState:
    return spoken(state, ConversationLine(speaker=speaker, name=state.name_of(speaker), line=line,
                                          addressee=addressee_of(line, speaker, state)))


def test_round_robin_cycles_members_then_the_player() -> None:
    state = ConversationState(world="w", members=MEMBERS, player="Aria")
    order = []
    for _ in range(5):
        speaker = next_speaker(state)
        order.append(speaker)
        state = said(state, speaker, "Hm.")
    assert order == ["b", "c", "d", PLAYER, "b"]


def test_sequence_repeats_and_model_order_follows_the_addressee_else_the_longest_silent() -> None:
    state = ConversationState(world="w", members=MEMBERS, order=TurnOrder.SEQUENCE, sequence=("d", "b"))
    assert [next_speaker(state := said(state, "x", "Hm.")) for _ in range(3)] == ["b", "d", "b"]
    state = ConversationState(world="w", members=MEMBERS, order=TurnOrder.MODEL, player="Aria")
    assert next_speaker(state) == "b"
    state = said(state, "b", "What do you think, Dena?")
    assert next_speaker(state) == "d"
    state = said(state, "d", "I think it will rain.")
    assert next_speaker(state) == "c"  # nobody addressed: Cora has been silent longest
    state = said(state, "c", "Aria, you came from the north?")
    assert next_speaker(state) == PLAYER


@pytest.mark.parametrize(("line", "checked"), [
    ("Bran: The bridge is out.", "The bridge is out."),
    ("The bridge is out. Cora: Oh no!", "The bridge is out."),
    ("Cora: I speak for Bran.", None),
    ("  ", None),
    ("Cora, the bridge is out.", "Cora, the bridge is out."),
])
def test_a_line_is_spoken_by_its_speaker_only(line: str, checked: str | None) -> None:
    assert check_line(line, "Bran", ["Cora", "Dena"]) == checked


def test_each_listener_remembers_who_said_what_to_whom() -> None:
    state = ConversationState(world="w", members=MEMBERS)
    line = ConversationLine(speaker="b", name="Bran", line="The bridge is out.", addressee="c")
    assert heard_note(state, line, "b", overheard=False) == "You to Cora: The bridge is out."
    assert heard_note(state, line, "c", overheard=False) == "Bran to you: The bridge is out."
    assert heard_note(state, line, "x", overheard=True) == "(overheard) Bran to Cora: The bridge is out."


async def test_lines_of_different_conversations_share_a_generation_and_a_wrong_one_runs_alone() -> None:
    def answer(request: GenerationRequest) -> str:
        names = re.findall(r"^Conversation (\d+): (\w+)", request.prompt, re.MULTILINE)
        # The second item is answered as if by the first speaker: it must be asked again alone.
        return "\n".join(f"{n}. {names[0][1] if n == '2' else name}: [happy] Fine weather, friend."
                         for n, name in names)

    rig = Rig(answer)
    await rig.warm_up()
    names = ["Gorm", "Mira", "Tobin"]
    npcs = [NPC(Persona(name=name, role="a villager"), rig.model, owner=name) for name in names]
    views = [view_for(ConversationState(world="w", members=(Member(name, name), Member("o", f"Other{i}")),
                                        situation="Market day."), name) for i, name in enumerate(names)]
    replies = await rig.run([lambda n=n, v=v: n.converse(v) for n, v in zip(npcs, views, strict=True)])
    assert [r.line for r in replies] == ["Fine weather, friend.", "Mira alone.", "Fine weather, friend."]
    stats = rig.model.coalescing_statistics()
    assert stats.misattributed == 1 and stats.retried_alone == 1 and stats.answered == 2


async def test_a_talk_with_the_player_draws_on_what_the_npc_heard() -> None:
    from oam_actors.game import NPCOptions

    model = ScriptedModel.from_wire({"type": "scripted", "steps": [{"text": "[neutral] The bridge is out."}]})
    options = NPCOptions.from_wire({"replyFormat": "text"}).value
    npc = NPC(Persona(name="Cora"), model, options=options, memory=NPCMemory(facts=("Likes bread.",)))
    npc.hear(["Bran to you: The bridge is out."])
    await npc.talk("Any news?")
    request = model.requests[0]
    assert "Bran to you: The bridge is out." in request.system + request.prompt
    assert npc.memory.heard == ("Bran to you: The bridge is out.",)
    assert NPCMemory.from_wire(npc.memory.to_wire()) == npc.memory


async def test_the_memory_tool_changes_how_an_npc_feels_toward_another_npc() -> None:
    from oam_actors.game import NPCOptions

    steps = [{"toolCalls": [{"name": "change_relationship",
                             "arguments": {"reason": "he lied", "delta": -8, "toward": "Bran"}}]},
             {"text": "[angry] Bran lied to me."}, {"text": "[neutral] Hm."}]
    model = ScriptedModel.from_wire({"type": "scripted", "steps": steps})
    options = NPCOptions.from_wire({"memoryTools": ["changeRelationship"], "replyFormat": "text"}).value
    npc = NPC(Persona(name="Cora"), model, options=options)
    await npc.talk("Bran sold you rotten flour.")
    assert (npc.memory.relationship, npc.memory.others) == (0, (("Bran", -8),))
    assert npc.memory.to_wire()["others"] == {"Bran": -8}
    await npc.talk("How do you feel about Bran?")
    assert "You feel neutral toward Bran (-8" in model.requests[-1].system + model.requests[-1].prompt
    assert NPCMemory.from_wire(npc.memory.to_wire()) == npc.memory


async def test_compaction_folds_what_the_npc_heard_into_its_summary() -> None:
    from oam_actors.game import NPCOptions

    steps = [{"text": "[neutral] Hello."}, {"text": "Cora heard that the bridge is out."}]
    model = ScriptedModel.from_wire({"type": "scripted", "steps": steps})
    options = NPCOptions.from_wire({"replyFormat": "text", "compactAfterTurns": 1, "keepRecentTurns": 0}).value
    npc = NPC(Persona(name="Cora"), model, options=options)
    npc.hear(["Bran to you: The bridge is out."])
    await npc.talk("Hi.")
    assert await npc.run_pending_compaction()
    assert "Bran to you: The bridge is out." in model.requests[-1].prompt  # the summarizer saw it
    assert (npc.memory.summary, npc.memory.heard) == ("Cora heard that the bridge is out.", ())
