"""Coalesced tool choices: the decide steps of NPC talks waiting for one backend share a
generation (the policy, then NPC talks on a virtual clock, then over a device pool on loopback).
Each talk keeps its own steps (decide, the tool it chose, decide again, its reply); the tool runs
once, in its own turn, never in the batch; a choice the batch got wrong (another NPC's tool,
respond where a tool is required, arguments naming another NPC) runs again alone."""

from __future__ import annotations

import json
import re
from typing import Any

from oam_actors import GenerationRequest, ModelCapabilities, ScriptStep, ScriptStyle, ScriptedModel, StepKind
from oam_actors.agent import ToolDefinition
from oam_actors.agent.model import BarkItem, ReplyItem, ToolChoiceItem, ToolSpec
from oam_actors.agent.schema import Schema
from oam_actors.game import NPC, Persona
from oam_actors.game.options import NPCOptions, ReplyFormat
from oam_actors.models.coalesce import (
    REPLY_TASK,
    TOOL_CHOICE_TASK,
    Answer,
    CoalescingModel,
    Unanswered,
    Why,
    batch_key,
    batch_request,
    pack,
    read_batch,
)
from oam_actors.models.pool import ScheduledModel
from oam_actors.models.scheduler import ManualClock, QuotaLimits, QuotaScheduler

from test_coalesce_backends import all_done
from test_coalesce_model import run_jobs
from test_pool_errors import farm, generate, phone
from test_pool_scheduling import PACED

STOCK = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
CATALOG = ('- check_stock: Look up the stock of an item. Arguments: {"item": string}',
           "- respond: answer the user directly, without a tool. Arguments: {}")
_CONVERSATION = re.compile(r"^Conversation (\d+): (\w+)", re.MULTILINE)
RESPOND = '{"action": "respond", "arguments": {}}'


def choice(name: str, *, tools: tuple[str, ...] = CATALOG, names: tuple[str, ...] = ("check_stock",),
           **fields: Any) -> GenerationRequest:
    talk = ReplyItem(speaker=name, character="Role: a villager.", line="Any ale left?")
    item = ToolChoiceItem(talk=talk, tools=tools, names=names,
                          allow_respond=any(t.startswith("- respond:") for t in tools))
    return GenerationRequest(kind=StepKind.DECIDE, system=f"You play {name}.", prompt="Available tools:", item=item,
                             tools=tuple(ToolSpec(n, "", STOCK) for n in names), **fields)


# --- the policy ----------------------------------------------------------------------------------


def test_tool_choices_offer_tools_yet_share_a_key_of_their_own() -> None:
    bark = GenerationRequest(kind=StepKind.DECIDE, system="", prompt="", item=BarkItem(speaker="Gorm"),
                             tools=choice("Gorm").tools)
    assert batch_key(choice("Gorm")) == batch_key(choice("Mira")) is not None
    assert batch_key(bark) is None  # only a tool choice may offer tools in a batch
    assert batch_key(choice("Gorm", names=("respond",))) is None  # its answer could not be told apart


def test_six_tool_choices_fit_a_nano_phones_output_limit() -> None:
    six = [choice(name) for name in ("Gorm", "Mira", "Tobin", "Elsa", "Brann", "Hild", "Ulf")]
    assert pack(six, ModelCapabilities(context_size=4000, max_output_tokens=256), 6) == 6
    assert pack(six, ModelCapabilities(context_size=4000, max_output_tokens=120), 6) < 6


def test_the_batch_prompt_shows_each_conversation_with_its_own_tools() -> None:
    gate = ("- open_gate: Open the town gate. Arguments: {}",)
    request = batch_request([choice("Gorm"), choice("Mira", tools=gate, names=("open_gate",))])
    assert request.prompt.endswith(TOOL_CHOICE_TASK) and "Available tools:" not in request.prompt
    gorm, mira = request.prompt.split("\n\n")[:2]
    assert gorm.startswith("Conversation 1: Gorm") and "Tools:\n" + "\n".join(CATALOG) in gorm
    assert "Tools (one must be used now):\n" + gate[0] in mira and "respond" not in mira


def test_reading_tool_choices_checks_each_against_its_own_tools() -> None:
    gate = ("- open_gate: Open the town gate. Arguments: {}",)
    requests = [choice("Gorm"), choice("Mira", tools=gate, names=("open_gate",)), choice("Tobin"), choice("Elsa")]
    text = "\n".join([
        '1. {"action": "check_stock", "arguments": {"item": "ale"}}',
        '2. {"action": "respond", "arguments": {}}',  # Mira must use her tool
        '3. {"action": "check_stock", "arguments": {"item": "what Gorm sells"}}',
        "4. respond",
    ])
    gorm, mira, tobin, elsa = read_batch(text, requests)
    assert isinstance(gorm, Answer) and json.loads(gorm.text) == {"action": "check_stock", "arguments": {"item": "ale"}}
    assert isinstance(mira, Unanswered) and mira.why is Why.INVALID
    assert tobin == Unanswered(Why.MISATTRIBUTED, "names Gorm")
    assert isinstance(elsa, Answer) and json.loads(elsa.text) == {"action": "respond", "arguments": {}}
    other = read_batch('1. {"action": "open_gate", "arguments": {}}', requests[:1])
    assert isinstance(other[0], Unanswered) and other[0].why is Why.INVALID  # another NPC's tool


# --- NPC talks on a virtual clock ----------------------------------------------------------------


class Talks:
    """Talking NPCs with a counting ``check_stock`` tool over a scripted backend behind a paced
    scheduler, coalesced; ``choose`` answers a batch of tool choices, replies are the NPCs'."""

    def __init__(self, choose: Any) -> None:
        self.clock = ManualClock()
        self.calls: list[tuple[str, dict[str, Any]]] = []

        def answer(request: GenerationRequest) -> ScriptStep:
            if request.owner == "warm-up":
                return ScriptStep.say("warm")
            if request.kind is StepKind.TEXT and request.prompt.endswith(TOOL_CHOICE_TASK):
                return ScriptStep.say(choose(_CONVERSATION.findall(request.prompt)))
            if request.kind is StepKind.TEXT and request.prompt.endswith(REPLY_TASK):
                return ScriptStep.say("\n".join(f"{n}. {name}: [happy] {name} has ale."
                                                for n, name in _CONVERSATION.findall(request.prompt)))
            if request.kind is StepKind.DECIDE:  # alone: the tool unless this turn used it
                used = "check_stock" in request.prompt.split("Available tools:")[0].rsplit("Player:", 1)[-1]
                action = {"action": "respond", "arguments": {}} if used else {
                    "action": "check_stock", "arguments": {"item": "alone"}}
                return ScriptStep.say(json.dumps(action))
            name = re.match(r"You play (\w+)", request.system)
            return ScriptStep.say(f"[neutral] {name.group(1) if name else '?'} alone.")

        self.backend = ScriptedModel(style=ScriptStyle.ENVELOPE, fallback=ScriptStep.from_function(answer))
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1, min_interval_seconds=1.0), clock=self.clock)
        self.model = CoalescingModel(ScheduledModel(self.backend, scheduler), clock=self.clock)

    def npc(self, name: str) -> NPC:
        async def handler(arguments: dict[str, Any]) -> Any:
            self.calls.append((name, arguments))
            return {"item": arguments["item"], "stock": 3}

        tool = ToolDefinition("check_stock", "Look up the stock of an item.", Schema.compile(STOCK), handler=handler)
        return NPC(Persona(name=name, role="a villager"), self.model, tools=[tool],
                   options=NPCOptions(reply_format=ReplyFormat.TEXT), owner=f"npc:{name}")

    def requests(self, kind: StepKind) -> list[GenerationRequest]:
        return [r for r in self.backend.requests if r.kind is kind and r.owner != "warm-up"]

    async def talk(self, names: tuple[str, ...]) -> list[Any]:
        warm = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="warm up", owner="warm-up")
        async for _ in self.model.stream(warm):
            pass
        npcs = [self.npc(name) for name in names]
        return await run_jobs([lambda npc=npc: npc.talk("Any ale left?") for npc in npcs], self.clock)


def stock_or_respond(found: list[tuple[str, str]]) -> str:
    """Gorm and Mira look the ale up; everyone who already did (or Tobin) responds."""
    return "\n".join(f'{n}. {{"action": "check_stock", "arguments": {{"item": "ale"}}}}'
                     if name in ("Gorm", "Mira") else f'{n}. {{"action": "respond", "arguments": {{}}}}'
                     for n, name in found)


async def test_decide_steps_of_waiting_talks_share_a_generation_and_each_tool_runs_once() -> None:
    calls_per_batch: list[int] = []

    def choose(found: list[tuple[str, str]]) -> str:
        calls_per_batch.append(len(found))
        if len(calls_per_batch) == 1:
            return stock_or_respond(found)
        return "\n".join(f'{n}. {{"action": "respond", "arguments": {{}}}}' for n, _ in found)

    talks = Talks(choose)
    turns = await talks.talk(("Gorm", "Mira", "Tobin"))
    assert [t.line for t in turns] == ["Gorm has ale.", "Mira has ale.", "Tobin has ale."]
    assert sorted(talks.calls) == [("Gorm", {"item": "ale"}), ("Mira", {"item": "ale"})]  # once each
    assert [[r.call.name for r in t.tool_calls] for t in turns] == [["check_stock"], ["check_stock"], []]
    assert calls_per_batch == [3, 2]  # the second round: the two that used their tool
    assert talks.requests(StepKind.DECIDE) == [] and talks.requests(StepKind.RESPOND) == []
    stats = talks.model.coalescing_statistics()
    assert (stats.items, stats.retried_alone, stats.passthrough) == (3 + 2 + 3, 0, 1)  # the warm-up


async def test_a_choice_the_batch_got_wrong_runs_again_alone_and_no_tool_runs_for_it() -> None:
    def choose(found: list[tuple[str, str]]) -> str:
        lines = {"Gorm": '{"action": "check_stock", "arguments": {"item": "ale"}}',
                 "Mira": '{"action": "check_stock", "arguments": {"item": "Gorm\'s ale"}}'}  # names Gorm
        return "\n".join(f"{n}. {lines.get(name, RESPOND)}" for n, name in found)

    talks = Talks(choose)
    turns = await talks.talk(("Gorm", "Mira"))
    mira = [r for r in talks.requests(StepKind.DECIDE) if r.owner == "npc:Mira"]
    assert mira and not mira[0].is_repair  # her first attempt again, alone (not a repair)
    assert sorted(talks.calls) == [("Gorm", {"item": "ale"}), ("Mira", {"item": "alone"})]  # never "Gorm's ale"
    assert all(t.line.endswith(("has ale.", "alone.")) for t in turns)
    stats = talks.model.coalescing_statistics()
    assert (stats.misattributed, stats.retried_alone) == (1, 1)


# --- over the device pool on loopback --------------------------------------------------------------


async def test_talks_with_tools_on_one_phone_choose_in_one_generation() -> None:
    async with farm(phone(tool_call_rate=1.0), config=PACED) as f:
        talks = Talks(stock_or_respond)
        talks.model = CoalescingModel(f.pool)
        await generate(f.pool)  # the phone's next admission is a virtual second away
        npcs = [talks.npc(name) for name in ("Gorm", "Mira", "Tobin")]
        turns = await all_done([lambda npc=npc: npc.talk("Any ale left?") for npc in npcs], f.clock)
        stats = talks.model.coalescing_statistics()
    assert all(not isinstance(t, Exception) and t.line for t in turns)
    assert sorted(name for name, _ in talks.calls) == ["Gorm", "Mira", "Tobin"]  # the phone picks the tool
    assert stats.batches >= 2 and stats.retried_alone == 0  # the choices, then the replies (and choices again)
