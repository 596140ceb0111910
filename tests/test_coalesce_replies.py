"""Coalesced replies: the plain-text reply steps of NPC talks waiting for one backend share a
generation (the policy, then NPC talks on a virtual clock, then over a device pool and a proxy on
loopback). Each NPC gets its own reply with its own emotion, the batch shows each conversation
whole, and a reply the batch got wrong (misattributed, missing) runs again alone. Secrets,
oversized conversations and ``coalesce=False`` run alone (structured replies:
test_coalesce_structured.py)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from provider_servers import ProviderServer, openai_text, stream

from oam_actors import GenerationRequest, ModelCapabilities, StepKind
from oam_actors.agent.model import BarkItem, ReplyItem
from oam_actors.game import NPC, DialogueTurn, Persona
from oam_actors.game.options import NPCOptions, ReplyFormat
from oam_actors.models.coalesce import (
    REPLY_ITEM_TOKENS,
    REPLY_TASK,
    Answer,
    CoalescingModel,
    Unanswered,
    Why,
    batch_key,
    batch_request,
    pack,
    read_batch,
)
from oam_actors.models.proxy import ProxyBackends
from oam_actors.models.scheduler import ManualClock

from test_coalesce_backends import all_done, proxied, prompts
from test_coalesce_model import Rig
from test_pool_errors import farm, generate, phone
from test_pool_scheduling import PACED

NAMES = ("Gorm", "Mira", "Tobin", "Elsa")
TEXT = NPCOptions(reply_format=ReplyFormat.TEXT)
_CONVERSATION = re.compile(r"^Conversation (\d+): (\w+)", re.MULTILINE)


def reply(name: str, line: str = "Any news?", conversation: tuple[str, ...] = (), **fields: Any) -> GenerationRequest:
    item = ReplyItem(speaker=name, character="Role: a villager.", conversation=conversation, line=line)
    return GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt=line, item=item, **fields)


# --- the policy ----------------------------------------------------------------------------------


def test_replies_share_a_key_of_their_own_at_dialogue_priority() -> None:
    bark = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="", priority="dialogue",
                             item=BarkItem(speaker="Gorm"))
    assert batch_key(reply("Gorm")) == batch_key(reply("Mira")) != batch_key(bark)
    assert batch_request([reply("Gorm"), reply("Mira")]).priority == "dialogue"


def test_a_conversation_over_the_item_budget_runs_alone_rather_than_shortened() -> None:
    long = tuple(f"Player: question number {n} about the old mill and the river" for n in range(REPLY_ITEM_TOKENS // 8))
    assert batch_key(reply("Gorm", conversation=long)) is None
    assert batch_key(reply("Gorm", conversation=long[:5])) is not None


def test_the_batch_prompt_shows_each_conversation_whole_with_its_tool_results() -> None:
    gorm = reply("Gorm", "And the price?", conversation=("Player: Hello.", "Gorm: Welcome."))
    mira = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="", item=ReplyItem(
        speaker="Mira", line="Bread?", tool_results=("[check_stock → 3 loaves]",)))
    prompt = batch_request([gorm, mira]).prompt
    assert prompt.endswith(REPLY_TASK)
    assert "Conversation 1: Gorm (at most 2 sentences)\nRole: a villager.\nPlayer: Hello.\nGorm: Welcome.\n" \
           "Player: And the price?" in prompt
    assert "Conversation 2: Mira (at most 2 sentences)\nPlayer: Bread?\n[check_stock → 3 loaves]" in prompt


def test_packing_keeps_the_replies_within_the_output_limit() -> None:
    requests = [reply(n) for n in NAMES]
    assert pack(requests, ModelCapabilities(context_size=4000, max_output_tokens=256), 6) == 4
    assert pack(requests, ModelCapabilities(context_size=4000, max_output_tokens=150), 6) == 2


def test_reading_replies_keeps_the_emotion_and_checks_attribution() -> None:
    requests = [reply("Gorm"), reply("Mira", conversation=("Player: Is Tobin around?",)), reply("Tobin"),
                reply("Elsa")]
    text = ("1. Gorm: [happy] Steel is cheap today.\n2. [sad] Mira: Tobin left at dawn.\n"
            "3. Tobin: [angry] Ask Gorm, not me.\n4. Elsa:")
    assert read_batch(text, requests) == [
        Answer("[happy] Steel is cheap today."),
        Answer("[sad] Tobin left at dawn."),  # Tobin is in Mira's own conversation
        Unanswered(Why.MISATTRIBUTED, "names Gorm"),
        Unanswered(Why.INVALID, "an empty line"),
    ]
    assert read_batch("1. Mira: [happy] Hi.", requests[:2])[0] == Unanswered(Why.MISATTRIBUTED, "written for Mira")


# --- NPC talks on a virtual clock ----------------------------------------------------------------


def good_replies(request: GenerationRequest) -> str:
    return "\n".join(f"{n}. {name}: [happy] {name} has news."
                     for n, name in _CONVERSATION.findall(request.prompt))


def talkers(model: Any, names: tuple[str, ...] = NAMES, options: NPCOptions = TEXT, **persona: Any) -> list[NPC]:
    return [NPC(Persona(name=name, role="a villager", **persona), model, options=options, owner=f"npc:{name}")
            for name in names]


def talking(npcs: list[NPC], line: str = "Any news?", **kwargs: Any) -> list[Any]:
    """Jobs talking to each NPC: each gives its line, its emotion and the events sent."""
    return [lambda job=job: _line_of(job) for job in talk_jobs(npcs, line, **kwargs)]


async def _line_of(job: Callable[[], Awaitable[tuple[DialogueTurn, list[Any]]]]) -> tuple[str, str, list[Any]]:
    turn, events = await job()
    return turn.line, turn.emotion.value, events


def talk_jobs(npcs: list[NPC], line: str = "Any news?",
              **kwargs: Any) -> list[Callable[[], Awaitable[tuple[DialogueTurn, list[Any]]]]]:
    """Jobs talking to each NPC: each gives the turn and the events sent before it."""
    async def one(npc: NPC) -> tuple[DialogueTurn, list[Any]]:
        events: list[Any] = []

        async def emit(event: Any) -> None:
            events.append(event)

        return await npc.talk(line, emit=emit, **kwargs), events

    return [lambda npc=npc: one(npc) for npc in npcs]


async def test_text_replies_waiting_together_share_one_generation_with_their_events() -> None:
    rig = Rig(good_replies)
    await rig.warm_up()
    npcs = talkers(rig.model)
    turns = await rig.run(talking(npcs))
    assert [(line, emotion) for line, emotion, _ in turns] == [(f"{n} has news.", "happy") for n in NAMES]
    assert all(events for _, _, events in turns)  # the line's events came before the result
    assert len(rig.batches) == 1 and rig.alone == []
    assert all(npc.turn_count == 1 for npc in npcs)
    stats = rig.model.coalescing_statistics()
    assert (stats.items, stats.generations, stats.answered) == (4, 1, 4)


async def test_a_later_turn_shows_its_whole_conversation_in_the_batch() -> None:
    rig = Rig(good_replies)
    await rig.warm_up()
    npcs = talkers(rig.model, NAMES[:2])
    await rig.run(talking(npcs, "Hello there."))
    await rig.run(talking(npcs, "Any news?"))
    last = rig.batches[-1].prompt
    # as the step alone shows it: the reply as it was said
    assert "Player: Hello there.\nGorm: [happy] Gorm has news.\nPlayer: Any news?" in last
    assert "Player: Hello there.\nMira: [happy] Mira has news.\nPlayer: Any news?" in last


async def test_a_misattributed_reply_runs_again_alone_and_no_npc_gets_anothers() -> None:
    rig = Rig(lambda r: "1. Gorm: [happy] Fine steel.\n2. Mira: [sad] Gorm is rude.\n3. Tobin: [happy] Nice day.")
    await rig.warm_up()
    turns = await rig.run(talking(talkers(rig.model, NAMES[:3])))
    assert [line for line, _, _ in turns] == ["Fine steel.", "Mira alone.", "Nice day."]
    assert len(rig.alone) == 1 and rig.model.coalescing_statistics().misattributed == 1


async def test_secrets_and_the_opt_out_run_alone() -> None:
    rig = Rig(good_replies)
    await rig.warm_up()
    secret = talkers(rig.model, ("Gorm", "Mira"), secrets=("She hid the key.",))
    jobs = talking(secret) + talking(talkers(rig.model, ("Tobin", "Elsa")), coalesce=False)
    await rig.run(jobs)
    assert rig.batches == [] and {r.owner for r in rig.alone} == {f"npc:{n}" for n in NAMES}
    assert all(r.item is None for r in rig.alone)


# --- over the device pool and a proxy on loopback ------------------------------------------------


async def test_replies_of_many_npcs_on_one_phone_share_its_generations() -> None:
    async with farm(phone(), config=PACED) as f:
        model = CoalescingModel(f.pool)
        await generate(f.pool)  # the phone's next admission is a virtual second away
        turns = await all_done(talking(talkers(model)), f.clock)
        generations = f.admitted()[0] - 1
        stats = model.coalescing_statistics()
    assert all(isinstance(t, tuple) and "news" in t[0] for t in turns)  # the simulated phone's topic
    assert generations == stats.generations == 1  # all four waited for the phone's next admission
    assert (stats.batches, stats.answered, stats.retried_alone) == (1, 4, 0)


async def test_replies_over_a_proxy_share_one_request_and_a_missing_one_is_asked_again() -> None:
    clock = ManualClock()
    with ProviderServer() as server:
        server.push(
            stream(openai_text("[happy] Fine morning.")),  # Gorm: quota free, alone
            stream(openai_text("1. Mira: [sad] No bread today.\n", "2. Tobin: [angry] Leave me be.")),  # no Elsa
            stream(openai_text("[neutral] The well ran dry.")),  # Elsa alone
        )
        async with ProxyBackends(environ={"OPENAI_API_KEY": "k"}) as backends:
            turns = await all_done(talking(talkers(proxied(backends, server, clock))), clock)
        sent = prompts(server)
    assert [(line, emotion) for line, emotion, _ in turns] == [
        ("Fine morning.", "happy"), ("No bread today.", "sad"), ("Leave me be.", "angry"), ("The well ran dry.", "neutral")]
    assert len(sent) == 3 and sent[1].endswith(REPLY_TASK) and "Conversation 3: Elsa" in sent[1]
