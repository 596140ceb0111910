"""Coalescing on a real local model: how many items of a batch come back valid and attributed to
the right character (no line speaks as, or names, another NPC of its batch), and how many output
tokens an item's answer takes (what :mod:`oam_actors.models.coalesce` estimates when it packs).

The real path of a crowd: ``NPC.bark``, ``DecisionEngine.decide`` and ``NPC.talk`` → the
coalescing model → one quota scheduler (one request at a time) → the proxy model → an
OpenAI-compatible server (``scripts/local_model.py``: Qwen2.5-Coder-1.5B on llama.cpp). Each round
starts its items together; a short linger lets them gather into one batch, as they do on their
own when quota is short. Talk rounds: NPCs with a tool each (their own) talk at once in plain
text, so their decide steps share a batch of tool choices (and their replies a reply batch). An
item the batch did not answer runs alone (counted, not a failure of the crowd).
Printed: per kind (bark, decision, tool choice, reply) the items batched, those answered from
their batch (valid and attributed), those retried alone, output tokens per item as the server
counted them; per phase the reasons items were retried; seconds per batch; every batch's raw
answer.

Run: python3 benchmarks/bench_coalesce_live.py [--base-url http://127.0.0.1:PORT/v1] [--batch N]
     [--bark-rounds 5] [--decision-rounds 3] [--talk-rounds 1] [--talks 4]
Without ``--base-url`` it starts ``scripts/local_model.py`` (first run: downloads ~1.1 GB) and
stops it at the end. Heavy: ~2 GB of memory, both cores, a few minutes (on shared cores, where
the model writes 1-3 tokens/s, a batch of ten takes minutes: ``--step-timeout``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _live import ServerDidNotStart, live_model  # noqa: E402
from oam_actors.agent import ToolDefinition  # noqa: E402
from oam_actors.agent.model import GenerationRequest, LanguageModel, StepKind, Usage  # noqa: E402
from oam_actors.agent.schema import Schema  # noqa: E402
from oam_actors.cli.argtypes import non_negative_int, positive_int  # noqa: E402
from oam_actors.game import NPC, DecisionEngine, DecisionOption, DecisionRequest, Persona  # noqa: E402
from oam_actors.game.options import NPCOptions, ReplyFormat  # noqa: E402
from oam_actors.models.coalesce import (  # noqa: E402
    BARK_TASK,
    DECISION_TASK,
    REPLY_TASK,
    TOOL_CHOICE_TASK,
    CoalesceSettings,
    CoalescingModel,
    CoalescingStatistics,
)
from oam_actors.models.pool import ScheduledModel  # noqa: E402
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig  # noqa: E402
from oam_actors.models.scheduler import QuotaLimits, QuotaScheduler  # noqa: E402

CAST = [
    Persona(name="Gorm", role="the village blacksmith", personality="Gruff, proud of his steel.",
            speaking_style="Short, blunt sentences."),
    Persona(name="Mira", role="the baker", personality="Warm and chatty.", speaking_style="Cheerful."),
    Persona(name="Tobin", role="an old fisherman", personality="Grumbles about the weather.",
            speaking_style="Slow, folksy."),
    Persona(name="Elsa", role="the town guard captain", personality="Stern and watchful.",
            speaking_style="Clipped orders."),
    Persona(name="Brann", role="a travelling bard", personality="Flamboyant, loves an audience.",
            speaking_style="Rhymes when he can."),
    Persona(name="Hild", role="the herbalist", personality="Quiet, knows every plant.",
            speaking_style="Soft and precise."),
    Persona(name="Ulf", role="a farmhand", personality="Tired but kind.", speaking_style="Plain words."),
    Persona(name="Sela", role="the innkeeper", personality="Shrewd and welcoming.", speaking_style="Friendly."),
]
SITUATIONS = ["Dawn; the market square is filling up.", "A cold rain starts to fall.",
              "A stranger in a dark cloak walks through the gate.", "Evening; lanterns are being lit.",
              "The church bell rings for noon."]
DECISIONS = [
    ("Snik", "a timid goblin", "The player raises a sword at you.", ("attack", "flee", "beg")),
    ("Grak", "a proud orc chief", "A rival clan insults your name.", ("challenge", "ignore", "laugh")),
    ("Vera", "a greedy merchant", "A customer offers half your price.", ("accept", "haggle", "refuse")),
    ("Ods", "a sleepy watchman", "You hear a noise behind the barn.", ("investigate", "sleep", "shout")),
    ("Pell", "a nervous apprentice", "The forge fire goes out.", ("relight", "hide", "call_master")),
    ("Rusk", "a hungry wolf", "A lone traveller walks by at dusk.", ("stalk", "howl", "retreat")),
    ("Tamsin", "a curious child", "A strange box lies in the road.", ("open", "poke", "fetch_parents")),
    ("Borin", "a dwarf miner", "The tunnel ceiling creaks.", ("dig_on", "brace", "run")),
    ("Liss", "a pickpocket", "A guard watches the crowd.", ("steal", "wait", "blend_in")),
    ("Hobb", "a farmer", "Crows land on the wheat field.", ("scare", "shoot", "ignore")),
]
# Talk rounds: each NPC's own tool, and a player line that asks for it.
TALKERS = [
    ("Gorm", "the village blacksmith", "check_steel", "weapon", "Do you have a sword for sale?"),
    ("Mira", "the baker", "check_oven", "bread", "Is the rye bread ready yet?"),
    ("Tobin", "an old fisherman", "check_catch", "fish", "Did you catch any trout today?"),
    ("Sela", "the innkeeper", "check_rooms", "room", "Is there a room free tonight?"),
    ("Hild", "the herbalist", "check_herbs", "herb", "Do you have any mint?"),
    ("Ulf", "a farmhand", "check_barn", "animal", "How is the old horse doing?"),
]
TASKS = {BARK_TASK: "bark", DECISION_TASK: "decision", TOOL_CHOICE_TASK: "toolChoice", REPLY_TASK: "reply"}
ITEM_HEAD = re.compile(r"^(?:Character|Decision|Conversation) \d+", re.MULTILINE)


@dataclass
class Batch:
    kind: str
    items: int
    answer: str
    seconds: float
    output_tokens: int


class Recording:
    """The backend seen by the coalescing model: every batch (its kind, size, answer, time and
    output tokens), and the items that ran alone after their batch (``follow_up`` with an item)."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.batches: list[Batch] = []
        self.retried: Counter[str] = Counter()
        self.alone = 0

    @property
    def capabilities(self) -> Any:
        return self.model.capabilities

    async def availability(self) -> Any:
        return await self.model.availability()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        started = time.perf_counter()
        pieces: list[str] = []
        usage: Usage | None = None
        async for piece in self.model.stream(request):
            if isinstance(piece, str):
                pieces.append(piece)
            else:
                usage = piece
            yield piece
        kind = next((k for task, k in TASKS.items() if request.prompt.endswith(task)), None)
        if request.kind is StepKind.TEXT and request.item is None and kind is not None:
            batch = Batch(kind, len(ITEM_HEAD.findall(request.prompt)), "".join(pieces),
                          time.perf_counter() - started, usage.output_tokens if usage else 0)
            self.batches.append(batch)
            # As it comes (stderr): a run on slow shared cores may be stopped before its summary.
            print(f"batch {kind} of {batch.items}: {batch.output_tokens} output tokens, {batch.seconds:.0f} s\n"
                  f"  {batch.answer.strip()}", file=sys.stderr, flush=True)
        else:
            self.alone += 1
            if request.follow_up and request.item is not None:
                kind = _KINDS[type(request.item).__name__]
                self.retried[kind] += 1
                print(f"{kind} retried alone after its batch", file=sys.stderr, flush=True)


_KINDS = {"BarkItem": "bark", "DecisionItem": "decision", "ToolChoiceItem": "toolChoice", "ReplyItem": "reply"}


async def run(base_url: str, model_name: str, rounds: Rounds, batch: int, step_timeout: float) -> dict[str, Any]:
    config = ProxyConfig(provider=Provider.OPENAI, model=model_name, base_url=base_url, context_size=4096,
                         step_timeout=step_timeout)
    async with ProxyBackends(environ={"OPENAI_API_KEY": "local"}) as backends:
        recording = Recording(backends.model(config))
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1))
        queue = step_timeout * 3
        model = CoalescingModel(ScheduledModel(recording, scheduler, queue_seconds=(queue, queue, queue)),
                                CoalesceSettings(max_items=batch, linger_seconds=0.5, dialogue_linger_seconds=0.5))
        barks: list[tuple[str, str, str]] = []
        for round_ in range(rounds.barks):
            cast = [CAST[(round_ + n) % len(CAST)] for n in range(batch)]
            situation = SITUATIONS[round_ % len(SITUATIONS)]
            npcs = [NPC(persona, model, owner=f"npc:{persona.name}:{n}") for n, persona in enumerate(cast)]
            async with anyio.create_task_group() as group:
                for npc in npcs:
                    async def bark(npc: NPC = npc) -> None:
                        barks.append((npc.persona.name, situation, (await npc.bark(situation)).line))
                    group.start_soon(bark)
        bark_stats = model.coalescing_statistics()
        decided: list[tuple[str, str, tuple[str, ...]]] = []
        engine = DecisionEngine(model)
        for round_ in range(rounds.decisions):
            chosen = [DECISIONS[(round_ + n) % len(DECISIONS)] for n in range(batch)]
            async with anyio.create_task_group() as group:
                for name, role, situation, ids in chosen:
                    request = DecisionRequest(situation=situation, options=[DecisionOption(i) for i in ids],
                                              actor=Persona(name=name, role=role))

                    async def decide(request: DecisionRequest = request, name: str = name,
                                     ids: tuple[str, ...] = ids) -> None:
                        decision = await engine.decide(request)
                        decided.append((name, decision.option_id, ids))
                    group.start_soon(decide)
        decision_stats = model.coalescing_statistics()
        talked: list[tuple[str, str, list[str], str]] = []  # speaker, own tool, tools it ran, line
        for round_ in range(rounds.talks):
            cast = [TALKERS[(round_ + n) % len(TALKERS)] for n in range(rounds.talkers)]
            async with anyio.create_task_group() as group:
                for talker in cast:
                    group.start_soon(_talk, model, talker, talked)
        total = model.coalescing_statistics()
    return {
        "perKind": _per_kind(recording),
        "barks": _figures(bark_stats),
        "decisions": {**_figures(_difference(decision_stats, bark_stats)),
                      "choseOwnOption": sum(choice in ids for _, choice, ids in decided)},
        "talks": {**_figures(_difference(total, decision_stats)), "talks": len(talked),
                  "ranOwnToolOnly": sum(all(t == tool for t in ran) for _, tool, ran, _ in talked),
                  "toolRuns": sum(len(ran) for _, _, ran, _ in talked)},
        "allItems": {**_figures(total), "generations": total.generations,
                     "itemsPerGeneration": total.items_per_generation},
        "secondsPerBatch": [round(b.seconds, 1) for b in recording.batches],
        "batchSizes": [f"{b.kind}:{b.items}" for b in recording.batches],
        "_barks": barks,
        "_talks": talked,
        "_answers": [b.answer for b in recording.batches],
    }


async def _talk(model: LanguageModel, talker: tuple[str, str, str, str, str],
                talked: list[tuple[str, str, list[str], str]]) -> None:
    name, role, tool_name, key, line = talker
    ran: list[str] = []

    async def handler(arguments: dict[str, Any], tool: str = tool_name) -> Any:
        ran.append(tool)
        return {key: arguments.get(key), "status": "in stock", "count": 3}

    schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    tool = ToolDefinition(tool_name, f"Look up a {key} {name} has.", Schema.compile(schema), handler=handler)
    npc = NPC(Persona(name=name, role=role), model, tools=[tool],
              options=NPCOptions(reply_format=ReplyFormat.TEXT), owner=f"npc:{name}")
    turn = await npc.talk(line)
    talked.append((name, tool_name, ran, turn.line))


def _per_kind(recording: Recording) -> dict[str, Any]:
    """Per kind: items in batches, those a batch answered (the rest ran alone after it), and the
    output tokens per item the server counted (a batch's answer over its items)."""
    figures: dict[str, Any] = {}
    for kind in TASKS.values():
        batches = [b for b in recording.batches if b.kind == kind]
        if not batches:
            continue
        items = sum(b.items for b in batches)
        retried = recording.retried[kind]
        per_item = sorted(round(b.output_tokens / b.items, 1) for b in batches)
        figures[kind] = {"batches": len(batches), "batchedItems": items, "answered": items - retried,
                         "retriedAlone": retried, "answeredShare": round((items - retried) / items, 3),
                         "outputTokensPerItem": per_item,
                         "outputTokensPerItemMean": round(sum(b.output_tokens for b in batches) / items, 1)}
    return figures


def _difference(later: CoalescingStatistics, earlier: CoalescingStatistics) -> CoalescingStatistics:
    fields = {f: getattr(later, f) - getattr(earlier, f) for f in later.__struct_fields__}
    return CoalescingStatistics(**fields)


def _figures(stats: CoalescingStatistics) -> dict[str, Any]:
    """``validShare``: of the items a finished batch answered for, those valid and attributed to
    the right character (a batch that failed as a whole, e.g. timed out, checked none)."""
    checked = stats.answered + stats.missing + stats.invalid + stats.misattributed
    return {"items": stats.items, "checked": checked, "valid": stats.answered,
            "validShare": round(stats.answered / max(1, checked), 3), "missing": stats.missing,
            "invalid": stats.invalid, "misattributed": stats.misattributed,
            "retriedAlone": stats.retried_alone, "inFailedBatches": stats.failed}


@dataclass(frozen=True)
class Rounds:
    barks: int
    decisions: int
    talks: int
    talkers: int


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible …/v1 (default: start scripts/local_model.py)")
    parser.add_argument("--model-name", default="qwen")
    parser.add_argument("--bark-rounds", type=non_negative_int, default=5)
    parser.add_argument("--decision-rounds", type=non_negative_int, default=3)
    parser.add_argument("--talk-rounds", type=non_negative_int, default=1)
    parser.add_argument("--talks", type=positive_int, default=4, help="NPCs talking at once per talk round")
    parser.add_argument("--batch", type=positive_int, default=CoalesceSettings().max_items,
                        help=f"items per batch at most, and barks and decisions per round "
                        f"(default {CoalesceSettings().max_items}, the server's)")
    parser.add_argument("--step-timeout", type=float, default=900.0,
                        help="seconds one generation may take (default 900: shared cores write slowly)")
    args = parser.parse_args()
    rounds = Rounds(args.bark_rounds, args.decision_rounds, args.talk_rounds, args.talks)
    try:
        with live_model(args.base_url) as base_url:
            figures = anyio.run(run, base_url, args.model_name, rounds, args.batch, args.step_timeout)
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    barks, talks, answers = figures.pop("_barks"), figures.pop("_talks"), figures.pop("_answers")
    print(json.dumps(figures, indent=2))
    print("\nbarks delivered (speaker | situation | line)")
    for speaker, situation, line in barks:
        print(f"  {speaker} | {situation} | {line}")
    print("\ntalks (speaker | its own tool | tools run | line)")
    for speaker, tool, ran, line in talks:
        print(f"  {speaker} | {tool} | {', '.join(ran) or '-'} | {line}")
    print("\nbatch answers as written by the model")
    for answer in answers:
        print("  ---\n  " + answer.strip().replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
