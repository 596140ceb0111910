"""The pure part of conversations among NPCs (turn orders, the attribution check, whom a line
addresses, how a listener remembers it) and an NPC's side: its line coalesced with other
conversations' lines, a misattributed one retried alone, and a talk with the player that draws on
what the NPC heard."""

from __future__ import annotations

import re
from typing import Any

import pytest

from oam_actors import ErrorCode, GenerationRequest, ScriptedModel
from oam_actors.agent import StepKind
from oam_actors.models.scripted import ScriptStep, ScriptStyle
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

from test_coalesce_model import Rig, alone_line

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
    # in a section of its own, last, next to the player's words (after the Memory block's facts)
    assert request.system.rstrip().endswith("tell it when you are asked about it:\n- Bran to you: The bridge is out.")
    assert request.system.index("Likes bread.") < request.system.index("What you know because you heard")
    assert npc.memory.heard == ("Bran to you: The bridge is out.",)
    assert NPCMemory.from_wire(npc.memory.to_wire()) == npc.memory


def test_the_heard_line_a_question_asks_about_is_said_as_what_the_npc_knows() -> None:
    memory = NPCMemory(heard=("(overheard) Gorm to Odo: The blacksmith's key is hidden under the red barrel.",
                              "Odo to you: The mill burned down last night.",
                              "(overheard) Odo to Gorm: Keep the keys away from the mill."))
    assert memory.heard_about("Do you know where the blacksmith's key is hidden?") == (
        "You know this because you overheard it, and you are asked about it now: "
        "Gorm to Odo: The blacksmith's key is hidden under the red barrel.")
    assert memory.heard_about("What happened to the mill?") == (  # a tie: the latest
        "You know this because you overheard it, and you are asked about it now: "
        "Odo to Gorm: Keep the keys away from the mill.")
    assert memory.heard_about("Burned? Last night?").endswith("you heard it, and you are asked about it now: "
                                                               "Odo to you: The mill burned down last night.")
    assert memory.heard_about("Where are you from? What do you know?") is None
    assert NPCMemory().heard_about("Where is the key?") is None


async def test_a_talk_asking_about_an_overheard_line_has_it_last_before_the_question() -> None:
    from oam_actors.game import NPCOptions

    model = ScriptedModel.from_wire({"type": "scripted", "steps": [{"text": "[neutral] Under the barrel."}] * 2})
    npc = NPC(Persona(name="Cora"), model, options=NPCOptions.from_wire({"replyFormat": "text"}).value)
    npc.hear(["(overheard) Gorm to Odo: The key is under the red barrel.", "Odo to you: The mill burned down."])
    await npc.talk("Where is the key, Cora?")
    await npc.talk("Nice weather.")
    asked, other = model.requests
    assert asked.system.rstrip().endswith("- Odo to you: The mill burned down.\nYou know this because you overheard "
                                          "it, and you are asked about it now: Gorm to Odo: The key is under the red barrel.")
    assert other.system.rstrip().endswith("- Odo to you: The mill burned down.")


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


# --- knowledge scoping in coalesced batches -------------------------------------------------------

_BATCHED = re.compile(r"^Conversation (\d+): (\w+)", re.MULTILINE)


def leaking(request: GenerationRequest) -> str:
    """A batch answer that carries each conversation's content into the next one's line: its
    last line, and its members' names, as a small model copying across items would."""
    blocks = request.prompt.split("\n\n")[:-1]
    lasts = [block.splitlines()[-1].partition(": ") for block in blocks]
    return "\n".join(f"{n}. [happy] Did you hear? {words.rstrip('.')}, says {name}."
                     for n, (name, _, words) in ((n, lasts[n % len(lasts)]) for n in range(1, len(blocks) + 1)))


def two_conversations() -> list[ConversationState]:
    pairs = [(Member("g", "Gorm"), Member("e", "Elsa")), (Member("m", "Mira"), Member("u", "Ulf"))]
    states = [ConversationState(world="w", members=pair, situation=where)
              for pair, where in zip(pairs, ("By the forge.", "At the bakery."), strict=True)]
    return [said(states[0], "e", "The north bridge has collapsed."),
            said(states[1], "u", "The flour mill burned down.")]


async def gorm_and_mira(rig: Rig, *, gorm_heard: tuple[str, ...] = (), mira_heard: tuple[str, ...] = ()) -> list[Any]:
    """Gorm's and Mira's next lines, each in its own conversation, asked together on ``rig``."""
    await rig.warm_up()
    gorm = NPC(Persona(name="Gorm", role="a smith"), rig.model, owner="Gorm")
    mira = NPC(Persona(name="Mira", role="a baker"), rig.model, owner="Mira")
    gorm.hear(gorm_heard)
    mira.hear(mira_heard)
    states = two_conversations()
    return await rig.run([lambda: gorm.converse(view_for(states[0], "g")),
                          lambda: mira.converse(view_for(states[1], "m"))])


async def test_a_line_never_carries_another_conversations_content_from_a_shared_batch() -> None:
    rig = Rig(leaking)
    replies = await gorm_and_mira(rig)
    assert len(rig.batches) == 1  # they shared a generation, and its answer mixed them up
    assert "Ulf" in rig.batches[0].prompt and "Elsa" in rig.batches[0].prompt
    gorm_line, mira_line = (r.line for r in replies)
    assert not re.search(r"Ulf|mill", gorm_line) and not re.search(r"Elsa|bridge", mira_line)
    stats = rig.model.coalescing_statistics()
    assert stats.misattributed == 2 and stats.retried_alone == 2
    assert all("mill" not in r.system + r.prompt for r in rig.alone if "Gorm" in r.system)


async def test_a_speaker_that_heard_something_elsewhere_says_its_line_alone() -> None:
    rig = Rig(leaking)
    replies = await gorm_and_mira(rig, gorm_heard=("(overheard) Hild to Odo: The key is under the red barrel.",),
                                  mira_heard=("Ulf to you: The flour mill burned down.",))  # her own conversation's
    assert all("barrel" not in batch.prompt for batch in rig.batches)
    assert [r.line for r in replies] == ["Gorm alone.", "Mira alone."]
    assert any("barrel" in r.system for r in rig.alone if "Gorm" in r.system)  # its own step shows it
    assert rig.model.coalescing_statistics().passthrough >= 1


def test_private_knowledge_is_memory_beyond_the_conversation_being_continued() -> None:
    own = "Ulf to you: Mira, the flour mill burned down."
    assert not NPCMemory(relationship=30, heard=(own,)).private_knowledge(["Mira, the flour mill burned down."])
    assert NPCMemory(heard=(own,)).private_knowledge()
    assert NPCMemory(heard=(own, "(overheard) Hild to Odo: The key.")).private_knowledge(
        ["Mira, the flour mill burned down."])
    for memory in (NPCMemory(facts=("Likes bread.",)), NPCMemory(summary="Met the player."),
                   NPCMemory(others=(("Bran", 5),))):
        assert memory.private_knowledge()


async def test_a_talk_never_carries_what_another_npc_of_its_batch_heard() -> None:
    """Hild overheard where the key is; Odo and Petra did not. Their talks share a generation
    whose answer gives all three Hild's knowledge: Hild's reply stands, the others run alone.
    (Hild is asked something else: a talk asked about what its NPC heard runs alone.)"""
    from oam_actors.game import NPCOptions

    rig = Rig(lambda request: "\n".join(f"{n}. {name}: [happy] Under the red barrel, friend."
                                         for n, name in _BATCHED.findall(request.prompt)))
    await rig.warm_up()
    options = NPCOptions.from_wire({"replyFormat": "text", "memoryTools": "none"}).value
    hild, odo, petra = (NPC(Persona(name=name), rig.model, options=options, owner=name)
                        for name in ("Hild", "Odo", "Petra"))
    hild.hear(["(overheard) Gorm to Mira: The key is under the red barrel."])
    turns = await rig.run([lambda npc=npc: npc.talk("Where is the key?" if npc is not hild else "Good morning!")
                           for npc in (hild, odo, petra)])
    assert len(rig.batches) == 1 and "- Gorm to Mira: The key is under the red barrel." in rig.batches[0].prompt
    assert [t.line for t in turns] == ["Under the red barrel, friend.", "Odo alone.", "Petra alone."]
    stats = rig.model.coalescing_statistics()
    assert (stats.answered, stats.misattributed, stats.retried_alone) == (1, 2, 2)


# --- repairing the shapes of bad lines ------------------------------------------------------------

@pytest.mark.parametrize(("text", "speaker", "role", "repaired"), [
    ('The village blacksmith grunted, "Well, it\'s a matter of price. "', "Gorm", "the village blacksmith",
     (None, "Well, it's a matter of price.")),
    ('<The village blacksmith grunted, "Okay, let\'s talk."> <I\'m glad you agree, Elsa.>', "Gorm",
     "the village blacksmith", (None, "Okay, let's talk.")),
    ('<Ulf muttered, "I\'m sorry, Ulf. We should talk it out. ">', "Ulf", "a farmhand",
     (None, "I'm sorry. We should talk it out.")),
    ('"Aye, the forge is hot," Gorm said.', "Gorm", None, (None, "Aye, the forge is hot.")),
    ("<happy> [laughing] I've got it!", "Mira", "the baker", ("happy", "I've got it!")),
    ("[angry] *sighs* Fine weather, friend.", "Ulf", None, ("angry", "Fine weather, friend.")),
    ("[Gorm] Mira, I know this is terrible news.", "Gorm", None, ("Gorm", "Mira, I know this is terrible news.")),
    ("[happy] Ulf, you should rest.", "Ulf", None, ("happy", "You should rest.")),
    ("(quietly) The well is poisoned.\nMira: What?", "Hild", None, (None, "The well is poisoned.")),
    ('The password is "turnip".', "Gorm", None, (None, 'The password is "turnip".')),
    ("<Hild>: I'm so happy!", "Hild", None, (None, "<Hild>: I'm so happy!")),  # a label: check_line's
    ("Gorm alone.", "Gorm", None, (None, "Gorm alone.")),
])
def test_deterministic_shapes_of_bad_lines_are_repaired(text: str, speaker: str, role: str | None,
                                                        repaired: tuple[str | None, str]) -> None:
    from oam_actors.game.conversation import RepairedLine, repaired_line

    assert repaired_line(text, speaker, role) == RepairedLine(*repaired)


@pytest.mark.parametrize(("text", "speaker", "role", "problem"), [
    ("I'm sorry, but I can't assist with that.", "Gorm", None, "REFUSAL"),
    ("As an AI language model, I have no opinion on grain.", "Gorm", None, "REFUSAL"),
    ("Gorm nods slowly.", "Gorm", None, "NARRATED"),
    ("Gorm's heart sinks at the news.", "Gorm", None, "NARRATED"),
    ("The blacksmith is pleased with the price.", "Gorm", "the village blacksmith", "NARRATED"),
    ("The town guard captain looks at the rain and shakes his head.", "Elsa", "the town guard captain", "NARRATED"),
    ("Odo nods.", "Gorm", None, "NARRATED"),  # another member narrated, no quote
    ("[calm] Odo smiles warmly at Gorm.", "Gorm", None, "NARRATED"),
    ("Odo sighs, looking down at the empty barrel by the forge.", "Gorm", None, "NARRATED"),
    ("Odo frowns and rolls his eyes as he reads the news.", "Gorm", None, "NARRATED"),
    ("Odo starts pacing, looking for a solution.", "Gorm", None, "NARRATED"),
    ("Odo looks thoughtful, pondering if she should mention the incident.", "Gorm", None, "NARRATED"),
    ("Odo sighs, relieved that the quarrel is settled.", "Gorm", None, "NARRATED"),
    ("Odo rolled her eyes and continued to wait for the rain to pass.", "Gorm", None, "NARRATED"),
    ('Odo starts laughing, thinking "That\'s funny. I\'ve never heard that."', "Gorm", None, "NARRATED"),
    ("Odo looks at Gorm, who smiles back at him. They start to argue about the price.", "Gorm", None, "NARRATED"),
    ("Only the words Gorm says aloud, in the first person, with no narration.", "Gorm", None, "ECHOED"),
    ("I'm just here to assist you.", "Gorm", None, "REFUSAL"),
    ("[happy] *waves*", "Gorm", None, "WORDLESS"),
    ("[Blessed]", "Gorm", None, "WORDLESS"),
    ("   ", "Gorm", None, "WORDLESS"),
])
def test_a_line_no_repair_can_save_is_asked_again(text: str, speaker: str, role: str | None, problem: str) -> None:
    from oam_actors.game.conversation import LineProblem, repaired_line

    assert repaired_line(text, speaker, role, ("Odo", "Player")) is LineProblem[problem]


@pytest.mark.parametrize(("text", "line"), [
    ('Odo smiles, "The key is under the anvil."', "The key is under the anvil."),
    ('"Come in, all of you," Odo said.', "Come in, all of you."),
    ("Odo says the road is closed, and I believe him.", "Odo says the road is closed, and I believe him."),
    ("Odo is right about the mill.", "Odo is right about the mill."),
    ("Odo wants the barrel moved before the rain starts tonight.",
     "Odo wants the barrel moved before the rain starts tonight."),
    ("Odo, you fool, the mill is burning!", "Odo, you fool, the mill is burning!"),
])
def test_narration_of_another_member_gives_its_quote_and_talk_about_it_stays(text: str, line: str) -> None:
    from oam_actors.game.conversation import RepairedLine, repaired_line

    assert repaired_line(text, "Gorm", "the village blacksmith", ("Odo", "Mira")) == RepairedLine(None, line)


def test_a_line_is_judged_with_what_was_wrong_and_the_note_says_it() -> None:
    from oam_actors.game.conversation import LineProblem, RepairedLine, judged_line, repair_note

    view = view_for(said(ConversationState(world="w", members=MEMBERS), "c", "The bridge is out."), "b")
    assert judged_line("[sad] Cora: It is.", "Bran", None, view) is LineProblem.MISATTRIBUTED
    assert judged_line("The bridge is out!", "Bran", None, view) is LineProblem.REPEATED
    assert judged_line("Cora nods.", "Bran", None, view) is LineProblem.NARRATED
    assert judged_line("[sad] Then we wait.", "Bran", None, view) == RepairedLine("sad", "Then we wait.")
    note = repair_note(LineProblem.NARRATED, "Bran")
    assert "narrated what someone does" in note and "only what Bran says aloud" in note


async def test_a_refused_line_is_asked_again_alone_and_never_delivered() -> None:
    replies = await gorm_and_mira(Rig(lambda request: "1. [neutral] I'm sorry, but I can't assist with that.\n"
                                                      "2. <happy> [laughing] Lovely bread!"))
    assert [(r.line, r.emotion, r.retried) for r in replies] == [("Gorm alone.", "neutral", True),
                                                                 ("Lovely bread!", "happy", False)]


async def test_a_line_asked_again_alone_is_told_what_was_wrong_with_it() -> None:
    from oam_actors.game.conversation import LineProblem, repair_note

    rig = Rig(lambda request: "1. [calm] Elsa nods.\n2. [sad] As an AI language model, I cannot bake.")
    replies = await gorm_and_mira(rig)
    assert [(r.line, r.retried) for r in replies] == [("Gorm alone.", True), ("Mira alone.", True)]
    gorm, mira = (next(r for r in rig.alone if f"You play {name}" in r.system) for name in ("Gorm", "Mira"))
    assert repair_note(LineProblem.NARRATED, "Gorm") in gorm.prompt
    assert repair_note(LineProblem.REFUSAL, "Mira") in mira.prompt and "Your last answer" not in rig.batches[0].prompt


async def test_a_line_whose_batch_failed_is_asked_again_alone_before_a_fallback() -> None:
    """The batch fails, and so does each line's own step retry: the line is asked once more,
    alone, and is no fallback."""
    from oam_actors.models.scripted import ScriptStep

    rig = Rig()
    alone: dict[str, int] = {}

    def answer(request: GenerationRequest) -> ScriptStep:
        if request.owner == "warm-up":
            return ScriptStep.say("warm")
        if request.kind is StepKind.TEXT:
            return ScriptStep.fail(ErrorCode.GENERATION_FAILED)
        alone[str(request.owner)] = alone.get(str(request.owner), 0) + 1
        if alone[str(request.owner)] <= 2:  # the step's own retry after the batch failed fails too
            return ScriptStep.fail(ErrorCode.GENERATION_FAILED)
        return ScriptStep.say(f"{request.owner} alone.")

    rig.backend.fallback = ScriptStep.from_function(answer)
    replies = await gorm_and_mira(rig)
    assert rig.batches
    assert [(r.line, r.is_fallback, r.retried) for r in replies] == [("Gorm alone.", False, True),
                                                                     ("Mira alone.", False, True)]


def test_a_line_that_repeats_the_conversation_word_for_word_is_caught() -> None:
    from oam_actors.game.conversation import repeats

    said = ("I'm just going to wait for the sun to rise.", "Stay indoors.")
    assert repeats("i'm just going to wait for the sun to rise!", said)
    assert not repeats("I'm going to wait for the rain to stop.", said) and not repeats("...", said)


async def test_a_line_alone_shows_what_was_heard_elsewhere_but_not_its_own_conversation_twice() -> None:
    rig = Rig(leaking)
    await gorm_and_mira(rig, gorm_heard=("(overheard) Hild to Odo: The key is under the red barrel.",
                                         "Elsa to you: The north bridge has collapsed."))
    gorm = next(r for r in rig.alone if "Gorm" in r.system)
    assert "- Hild to Odo: The key is under the red barrel." in gorm.system
    assert "collapsed" not in gorm.system and "Elsa: The north bridge has collapsed." in gorm.prompt


async def test_lines_of_conversations_sharing_a_name_never_share_a_generation() -> None:
    """Two conversations with a Gorm and a Mira each: a line carrying one's content into the
    other could not be told by the names it uses, so they run in generations of their own."""
    from oam_actors.agent.model import ReplyItem
    from oam_actors.models.coalesce import apart

    def item(speaker: str, *members: str) -> ReplyItem:
        return ReplyItem(speaker=speaker, unlabelled=True, members=members)

    assert apart(item("Mira", "Gorm"), item("Mira", "Gorm")) and apart(item("Ulf", "Gorm"), item("Gorm", "Elsa"))
    assert not apart(item("Mira", "Gorm"), item("Ulf", "Elsa")) and not apart(ReplyItem(speaker="Mira"),
                                                                              ReplyItem(speaker="Mira"))
    rig = Rig(leaking)
    await rig.warm_up()
    states = [said(ConversationState(world="w", members=(Member(f"g{n}", "Gorm"), Member(f"m{n}", "Mira"))),
                   f"g{n}", words) for n, words in enumerate(("The key is under the barrel.", "The mill burned."))]
    npcs = [NPC(Persona(name="Mira", role="a baker"), rig.model, owner=f"m{n}") for n in range(2)]
    replies = await rig.run([lambda n=n: npcs[n].converse(view_for(states[n], f"m{n}")) for n in range(2)])
    assert rig.batches == [] and [r.line for r in replies] == ["Mira alone.", "Mira alone."]


# --- asking a bad line again, and a talk about what the NPC heard ----------------------------------

@pytest.mark.parametrize(("text", "speaker", "others", "checked"), [
    ("[Gorm: Well, that's a bit of a surprise...", "Mira", ("Gorm",), None),  # another's label in a bracket
    ("[Mira: Well, that's a surprise.]", "Mira", ("Gorm",), "Well, that's a surprise."),
    ("[angry] [Elsa] I'm not letting him stay! [Brann] Let's go outside. [Hild] Later.", "Elsa", ("Brann", "Hild"),
     "I'm not letting him stay!"),  # members' names in brackets are labels
    ("[excited] Petra: The cat is cute! [happy] Petra: And the saffron is here.", "Petra", ("Odo",),
     "The cat is cute!"),  # the speaker's own label again: a second line, cut
])
def test_labels_in_brackets_and_a_second_line_of_the_speaker_are_caught(text: str, speaker: str,
                                                                       others: tuple[str, ...],
                                                                       checked: str | None) -> None:
    from oam_actors.game.conversation import RepairedLine, repaired_line

    repaired = repaired_line(text, speaker, None, others)
    assert isinstance(repaired, RepairedLine)
    assert check_line(repaired.line, speaker, others) == checked


@pytest.mark.parametrize(("text", "refused"), [
    ("I'm sorry, I can't help.", True),
    ("I'm sorry, but I can't participate in that.", True),
    ("I apologize, but I am unable to assist you.", True),
    ("Sorry, I can't help you with the harvest this year.", False),  # says what: in character
    ("I can't help it, the bread smells too good.", False),
    ("I'm just here to help.", True),
    ("I'm here to help you start your day!", False),  # says with what: in character
])
def test_an_apology_that_declines_is_a_refusal(text: str, refused: bool) -> None:
    from oam_actors.game.conversation import LineProblem, repaired_line

    assert (repaired_line(text, "Ulf", None, ("Sela",)) is LineProblem.REFUSAL) is refused


def test_a_line_asked_again_more_than_once_is_asked_in_other_words() -> None:
    from oam_actors.game.conversation import LineProblem, line_prompt, reask_prompt, repair_note

    view = view_for(said(ConversationState(world="w", members=MEMBERS), "c", "The bridge is out."), "b")
    first = reask_prompt(view, "Bran", LineProblem.REPEATED)
    assert first == f"{line_prompt(view, 'Bran')}\n{repair_note(LineProblem.REPEATED, 'Bran')}"
    again = reask_prompt(view, "Bran", LineProblem.REPEATED, other_words=True)
    assert "Cora: The bridge is out." in again and repair_note(LineProblem.REPEATED, "Bran") not in again
    assert "Bran says something new" in again and again.endswith("What does Bran answer Cora? One sentence, "
                                                               "the spoken words only.")
    opening = view_for(ConversationState(world="w", members=MEMBERS, situation="Market day."), "b")
    assert opening.opening and not view.opening
    assert reask_prompt(opening, "Bran", LineProblem.WORDLESS, other_words=True).endswith("What does Bran say first? "
                                                                                  "One sentence, the spoken words only.")


async def test_a_bad_line_is_asked_again_twice_afresh_before_a_fallback_stands_in() -> None:
    """Alone, Bran repeats Cora's line three times, then answers: each attempt starts from an
    empty history (the failed answer is never shown again, nor the prompt as Cora's line), the
    second is told what was wrong and the later ones are asked in other words."""
    from oam_actors.game.conversation import LINE_REASKS, LineProblem, reask_prompt

    answers = iter(["[sad] The bridge is out.", "The bridge is out!", "Bran: the bridge is out.",
                    "[sad] Then we take the ford."])
    model = ScriptedModel(style=ScriptStyle.ENVELOPE,
                          fallback=ScriptStep.from_function(lambda request: ScriptStep.say(next(answers))))
    state = said(ConversationState(world="w", members=MEMBERS), "c", "The bridge is out.")
    reply = await NPC(Persona(name="Bran"), model).converse(view_for(state, "b"))
    assert (reply.line, reply.emotion, reply.is_fallback, reply.retried) == ("Then we take the ford.", "sad", False,
                                                                             True)
    view = view_for(state, "b")
    prompts = [r.prompt for r in model.requests]
    assert len(prompts) == 1 + LINE_REASKS
    assert prompts[1] == reask_prompt(view, "Bran", LineProblem.REPEATED)
    assert prompts[2] == prompts[3] == reask_prompt(view, "Bran", LineProblem.REPEATED, other_words=True)
    assert all("The bridge is out!" not in p and "Conversation:" not in p for p in prompts)


async def test_a_line_that_fails_every_time_is_the_fallback_line() -> None:
    from oam_actors.game.conversation import LINE_REASKS

    model = ScriptedModel(style=ScriptStyle.ENVELOPE,
                          fallback=ScriptStep.from_function(lambda request: ScriptStep.say("I'm sorry, I can't help.")))
    state = said(ConversationState(world="w", members=MEMBERS), "c", "The bridge is out.")
    reply = await NPC(Persona(name="Bran"), model).converse(view_for(state, "b"))
    assert reply.is_fallback and reply.line == "Let's talk about something else."
    assert len(model.requests) == 1 + LINE_REASKS


async def test_the_opening_line_shows_the_situation_once() -> None:
    model = ScriptedModel.from_wire({"type": "scripted", "steps": [{"text": "[happy] Morning, all."}]})
    state = ConversationState(world="w", members=MEMBERS, situation="Market day at the square.")
    await NPC(Persona(name="Bran"), model).converse(view_for(state, "b"))
    request = model.requests[0]
    assert (request.system + request.prompt).count("Market day at the square.") == 1


def test_a_reply_draws_on_the_heard_note_when_it_says_something_the_question_did_not() -> None:
    from oam_actors.game.memory import draws_on

    note = "(overheard) Gorm to Mira: Mira, listen, the blacksmith's key is hidden under the red barrel!"
    question = "Do you know where the blacksmith's key is hidden?"
    assert draws_on("It's under the red barrel, I heard.", note, question)
    assert draws_on("Under some barrels, I think.", note, question)  # a plural
    assert not draws_on("No, I don't know. I heard it from Gorm.", note, question)  # names aside
    assert not draws_on("The weather's getting worse every day.", note, question)
    assert draws_on("No idea.", "Gorm to you: Where is the key?", "Where is the key?")  # nothing more to tell
    assert NPCMemory(heard=(note, "Mira to Gorm: Oh no!")).heard_note_about(question) == note


async def test_a_talk_about_what_the_npc_heard_runs_alone_and_is_asked_again_when_it_ignores_it() -> None:
    """Tobin overheard where the key is. Asked about it beside Elsa (who was not there), his
    talk does not share her generation; his first reply talks about the weather, so it is asked
    once more, alone, told what he overheard, and that reply is the turn."""
    from oam_actors.game import NPCOptions
    from oam_actors.game import _prompting as prompting

    note = "(overheard) Gorm to Mira: The blacksmith's key is hidden under the red barrel."
    tobin_replies = iter(["[angry] The weather's getting worse every day.", "[neutral] Under the red barrel."])

    def answer(request: GenerationRequest) -> ScriptStep:
        if request.owner == "warm-up":
            return ScriptStep.say("warm")
        if request.kind is StepKind.TEXT:
            return ScriptStep.say("\n".join(f"{n}. {name}: [happy] Good day." for n, name in _BATCHED.findall(request.prompt)))
        if "You play Tobin" in request.system:
            return ScriptStep.say(next(tobin_replies))
        return ScriptStep.say(alone_line(request))

    rig = Rig()
    rig.backend.fallback = ScriptStep.from_function(answer)
    await rig.warm_up()
    options = NPCOptions.from_wire({"replyFormat": "text", "memoryTools": "none"}).value
    tobin, elsa, odo = (NPC(Persona(name=name), rig.model, options=options, owner=name)
                        for name in ("Tobin", "Elsa", "Odo"))
    tobin.hear([note])
    question = "Do you know where the blacksmith's key is hidden?"
    turns = await rig.run([lambda npc=npc: npc.talk(question) for npc in (tobin, elsa, odo)])
    assert [t.line for t in turns] == ["Under the red barrel.", "Good day.", "Good day."]
    assert len(rig.batches) == 1 and "Tobin" not in rig.batches[0].prompt and "barrel" not in rig.batches[0].prompt
    tobins = [r for r in rig.alone if "You play Tobin" in r.system]
    assert len(tobins) == 2 and prompting.heard_repair(note) in tobins[1].system + tobins[1].prompt
    assert prompting.heard_repair(note).startswith("Your last reply did not say what you overheard")
    assert tobin.turn_count == 1  # the reply that stood; the first one was taken back
