"""Coalesced structured replies: the structured reply steps of NPC talks (``replyFormat``
automatic or structured) waiting for one backend share a generation, answered in compact lines
(``3. Name: [emotion] words [end] >> option | option``). Each item is checked by its own NPC's
reply schema (its emotions, its player option count, whether it may end the conversation) and by
attribution; an item the batch got wrong runs alone, never another NPC's answer. The policy, then
NPC talks on a virtual clock, then over a device pool on loopback."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from oam_actors import GenerationRequest, ModelCapabilities, ScriptStep, StepKind
from oam_actors.agent.model import ReplyItem, StructuredReplyItem
from oam_actors.game import NPC
from oam_actors.game.options import NPCOptions, ReplyFormat
from oam_actors.models.coalesce import (
    REPLY_ITEM_TOKENS,
    STRUCTURED_REPLY_TASK,
    Answer,
    CoalescingModel,
    Unanswered,
    Why,
    batch_key,
    batch_request,
    pack,
    read_batch,
)

from test_coalesce_backends import all_done
from test_coalesce_model import Rig
from test_coalesce_replies import talk_jobs as talking
from test_coalesce_replies import talkers as text_talkers
from test_pool_errors import farm, generate, phone
from test_pool_scheduling import PACED

NAMES = ("Gorm", "Mira", "Tobin")
EMOTIONS = ("neutral", "happy", "sad", "angry")
_CONVERSATION = re.compile(r"^Conversation (\d+): (\w+) \(", re.MULTILINE)


def structured(name: str, *, options: int = 3, can_end: bool = True, conversation: tuple[str, ...] = (),
               emotions: tuple[str, ...] = EMOTIONS, **fields: Any) -> GenerationRequest:
    talk = ReplyItem(speaker=name, character="Role: a villager.", conversation=conversation, line="Any news?")
    item = StructuredReplyItem(talk=talk, emotions=emotions, player_options=options, can_end=can_end)
    return GenerationRequest(kind=StepKind.STRUCTURED, system=f"You play {name}.", prompt="", item=item, **fields)


# --- the policy ----------------------------------------------------------------------------------


def test_structured_replies_share_a_key_of_their_own_at_dialogue_priority() -> None:
    text = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="", item=ReplyItem(speaker="Gorm"))
    assert batch_key(structured("Gorm")) == batch_key(structured("Mira", options=0, can_end=False))
    assert batch_key(structured("Gorm")) != batch_key(text)
    assert batch_request([structured("Gorm"), structured("Mira")]).priority == "dialogue"
    long = tuple(f"Player: question number {n} about the old mill and the river" for n in range(REPLY_ITEM_TOKENS // 8))
    assert batch_key(structured("Gorm", conversation=long)) is None  # alone rather than shortened
    assert batch_key(structured("Gorm", emotions=())) is None
    assert batch_key(structured("Gorm", emotions=("happy]",))) is None  # not written back inside [...]
    assert batch_key(structured("Gorm", is_repair=True)) is None


def test_the_batch_prompt_asks_each_conversation_for_its_own_schema() -> None:
    request = batch_request([structured("Gorm"), structured("Mira", options=0, can_end=False, emotions=("sad",))])
    prompt = request.prompt
    assert prompt.endswith(STRUCTURED_REPLY_TASK)
    assert "Conversation 1: Gorm (at most 2 sentences, 3 player options, may end the conversation)\n" \
           "Role: a villager.\nPlayer: Any news?\nEmotions: neutral, happy, sad, angry" in prompt
    assert "Conversation 2: Mira (at most 2 sentences, no player options)\nRole: a villager.\n" \
           "Player: Any news?\nEmotions: sad" in prompt
    assert "1. Gorm: [happy] ... >> ... | ... | ...\n2. Mira: [sad] ...\n" in request.system + "\n"


def test_packing_keeps_the_structured_replies_within_the_output_limit() -> None:
    requests = [structured(n) for n in (*NAMES, "Elsa")]
    assert pack(requests, ModelCapabilities(context_size=4000, max_output_tokens=256), 6) == 3
    assert pack(requests, ModelCapabilities(context_size=4000, max_output_tokens=256), 2) == 2
    fewer = [structured(n, options=0, can_end=False) for n in (*NAMES, "Elsa")]
    assert pack(fewer, ModelCapabilities(context_size=4000, max_output_tokens=256), 6) == 4
    assert pack(requests, ModelCapabilities(context_size=4000, max_output_tokens=150), 6) == 1


def test_a_good_line_is_the_json_object_its_step_alone_would_have_written() -> None:
    requests = [structured("Gorm"), structured("Mira", options=0, can_end=False), structured("Tobin", options=2)]
    text = ("1. Gorm: [Happy] Steel is cheap today. [end] >> Buy a sword. | - Goodbye. | \"Why so cheap?\"\n"
            "2. [sad] Mira: No bread today.\n"
            "3. Tobin: [angry] Leave me be. >> Sorry.")
    assert [json.loads(r.text) for r in read_batch(text, requests) if isinstance(r, Answer)] == [
        {"emotion": "happy", "line": "Steel is cheap today.", "player_options": ["Buy a sword.", "Goodbye.", "Why so cheap?"],
         "ends_conversation": True},
        {"emotion": "sad", "line": "No bread today."},  # keys as its schema has them
        {"emotion": "angry", "line": "Leave me be.", "player_options": ["Sorry."], "ends_conversation": False},
    ]


@pytest.mark.parametrize(("line", "why", "detail"), [
    ("Gorm: [joyful] Fine day. >> Hi.", Why.INVALID, "emotion 'joyful' is not one of its own"),
    ("Gorm: Fine day. >> Hi.", Why.INVALID, "no emotion"),
    ("Gorm: [happy] >> Hi.", Why.INVALID, "an emotion without a reply"),
    ("Gorm: [happy] ... >> Hi.", Why.INVALID, "an emotion without a reply"),  # the example's dots
    ("Gorm: [happy] Fine day. >> ... | …", Why.INVALID, "no player options"),
    ("Gorm: [happy] <reply> >> Hi.", Why.INVALID, "an emotion without a reply"),
    ("Gorm: [happy] Fine day. >> <player option> | <player option>", Why.INVALID, "no player options"),
    ("Gorm: [happy] Fine day.", Why.INVALID, "no player options"),
    ("Gorm: [happy] Fine day. >> A. | Ask Mira. | C.", Why.MISATTRIBUTED, "names Mira"),  # kept or not
    ("Mira: [happy] Fine day. >> Hi.", Why.MISATTRIBUTED, "written for Mira"),
    ("Gorm: [happy] Mira burnt the bread. >> Hi.", Why.MISATTRIBUTED, "names Mira"),
    ("Gorm: [happy] Fine day. >> Ask Mira.", Why.MISATTRIBUTED, "names Mira"),
])
def test_each_field_is_checked_by_the_npcs_own_schema(line: str, why: Why, detail: str) -> None:
    requests = [structured("Gorm", options=2), structured("Mira")]
    assert read_batch(f"1. {line}\n2. Mira: [sad] Hm. >> Hi.", requests)[0] == Unanswered(why, detail)


def test_what_an_npcs_schema_has_no_room_for_is_dropped_as_from_its_step_alone() -> None:
    # The step alone's JSON loses keys its schema lacks and options past its count (parse_reply).
    requests = [structured("Gorm", options=0, can_end=False), structured("Mira", options=2)]
    gorm, mira = read_batch("1. Gorm: [sad] Go away. >> Bye. | Why? [end]\n2. Mira: [sad] Hm. >> A. | B. | C.", requests)
    assert isinstance(gorm, Answer) and json.loads(gorm.text) == {"emotion": "sad", "line": "Go away."}
    assert isinstance(mira, Answer) and json.loads(mira.text) == {
        "emotion": "sad", "line": "Hm.", "player_options": ["A.", "B."], "ends_conversation": False}
    assert read_batch("1. Gorm: [sad] Go away.", requests)[1] == Unanswered(Why.MISSING, "no line")


# --- NPC talks on a virtual clock ----------------------------------------------------------------


def good_lines(request: GenerationRequest) -> str:
    return "\n".join(f"{n}. {name}: [happy] {name} has news. >> Tell me more. | Goodbye. | Who told you?"
                     for n, name in _CONVERSATION.findall(request.prompt))


def rig_with(batch: Any, alone: Any) -> Rig:
    """A :class:`Rig` whose steps alone are answered by ``alone`` (batches by ``batch``)."""
    rig = Rig(batch)

    def answer(request: GenerationRequest) -> ScriptStep:
        if request.owner == "warm-up":
            return ScriptStep.say("warm")
        return ScriptStep.say(batch(request) if request.kind is StepKind.TEXT else alone(request))

    rig.backend.fallback = ScriptStep.from_function(answer)
    return rig


def alone_reply(request: GenerationRequest) -> str:
    name = re.match(r"You play (\w+)", request.system)
    return json.dumps({"emotion": "sad", "line": f"{name.group(1) if name else '?'} alone.",
                       "player_options": ["Alone?"], "ends_conversation": False})


def talkers(model: Any, names: tuple[str, ...] = NAMES, options: NPCOptions = NPCOptions(), **persona: Any) -> list[NPC]:
    """NPCs whose replies are structured (``replyFormat`` automatic unless ``options`` say)."""
    return text_talkers(model, names, options, **persona)


async def test_structured_replies_waiting_together_share_one_generation_with_their_events() -> None:
    rig = rig_with(good_lines, alone_reply)
    await rig.warm_up()
    npcs = talkers(rig.model) + talkers(rig.model, ("Elsa",), options=NPCOptions(
        reply_format=ReplyFormat.STRUCTURED, can_end_conversation=False))
    turns = await rig.run(talking(npcs))
    assert [(t.line, t.emotion.value, t.player_options, t.is_fallback) for t, _ in turns] == [
        (f"{n} has news.", "happy", ("Tell me more.", "Goodbye.", "Who told you?"), False) for n in (*NAMES, "Elsa")]
    assert all(events for _, events in turns)  # the line's events came before the result
    assert len(rig.batches) == 1 and rig.alone == []
    assert "Elsa (at most 2 sentences, 3 player options)" in rig.batches[0].prompt
    stats = rig.model.coalescing_statistics()
    assert (stats.items, stats.generations, stats.answered) == (4, 1, 4)


async def test_an_item_the_batch_got_wrong_runs_alone_and_no_npc_gets_anothers() -> None:
    wrong = ("1. Gorm: [happy] Fine steel. >> Buy? | Bye.\n2. Mira: [sad] Gorm is rude. >> Why?\n"
             "3. Tobin: [smug] Nice day. >> Hi.")
    rig = rig_with(lambda r: wrong, alone_reply)
    await rig.warm_up()
    turns = await rig.run(talking(talkers(rig.model)))
    assert [(t.line, t.emotion.value, t.player_options) for t, _ in turns] == [
        ("Fine steel.", "happy", ("Buy?", "Bye.")), ("Mira alone.", "sad", ("Alone?",)),
        ("Tobin alone.", "sad", ("Alone?",))]
    assert [r.kind for r in rig.alone] == [StepKind.STRUCTURED] * 2 and not any(r.is_repair for r in rig.alone)
    stats = rig.model.coalescing_statistics()
    assert (stats.misattributed, stats.invalid, stats.retried_alone) == (1, 1, 2)


async def test_secrets_the_opt_out_and_the_text_retry_run_alone() -> None:
    rig = rig_with(lambda r: "1. Gorm: [joyful] Hm.\n2. Mira: [joyful] Hm.", lambda r: "not json")
    await rig.warm_up()
    turns = await rig.run(talking(talkers(rig.model, ("Gorm", "Mira"))))
    # both batch items invalid, then garbage alone twice each: the automatic text retry, alone
    assert [t.line for t, _ in turns] == ["not json", "not json"]
    assert len(rig.batches) == 1
    retries = [r for r in rig.alone if r.kind is StepKind.RESPOND]
    assert len(retries) == 2 and all(r.item is None for r in retries)
    rig = rig_with(good_lines, alone_reply)
    await rig.warm_up()
    secret = talkers(rig.model, ("Gorm",), secrets=("He forged the key.",))
    await rig.run(talking(secret) + talking(talkers(rig.model, ("Mira", "Tobin")), coalesce=False))
    assert rig.batches == [] and all(r.item is None for r in rig.alone) and len(rig.alone) == 3


# --- over the device pool on loopback ------------------------------------------------------------


async def test_structured_replies_of_npcs_on_one_phone_share_its_generation() -> None:
    async with farm(phone(), config=PACED) as f:
        model = CoalescingModel(f.pool)
        await generate(f.pool)  # the phone's next admission is a virtual second away
        turns = await all_done(talking(talkers(model)), f.clock)
        generations = f.admitted()[0] - 1
        stats = model.coalescing_statistics()
    assert all("news" in turn.line and len(turn.player_options) == 3 and not turn.is_fallback for turn, _ in turns)
    assert generations == stats.generations == 1  # all three waited for the phone's next admission
    assert (stats.batches, stats.answered, stats.retried_alone) == (1, 3, 0)
