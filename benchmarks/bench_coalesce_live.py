"""Coalescing on a real local model: how many items of a batch come back valid and attributed to
the right character (no line speaks as, or names, another NPC of its batch).

The real path of a crowd: ``NPC.bark`` and ``DecisionEngine.decide`` → the coalescing model →
one quota scheduler (one request at a time) → the proxy model → an OpenAI-compatible server
(``scripts/local_model.py``: Qwen2.5-Coder-1.5B on llama.cpp). Each round starts its items
together; a short linger lets them gather into one batch, as they do on their own when quota
is short. An item the batch did not answer runs alone (counted, not a failure of the crowd).
Printed: items answered from their batch (valid and attributed), items retried alone and why,
seconds per batch, and every batch's raw answer.

Run: python3 benchmarks/bench_coalesce_live.py [--base-url http://127.0.0.1:PORT/v1] [--bark-rounds 5]
     [--decision-rounds 3]
Without ``--base-url`` it starts ``scripts/local_model.py`` (first run: downloads ~1.1 GB) and
stops it at the end. Heavy: ~2 GB of memory, both cores, a few minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _live import ServerDidNotStart, live_model  # noqa: E402
from oam_actors.agent.model import GenerationRequest, LanguageModel, StepKind, Usage  # noqa: E402
from oam_actors.game import NPC, DecisionEngine, DecisionOption, DecisionRequest, Persona  # noqa: E402
from oam_actors.models.coalesce import CoalesceSettings, CoalescingModel, CoalescingStatistics  # noqa: E402
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
]


class Recording:
    """The backend seen by the coalescing model, with every batch's prompt and answer kept."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.batches: list[tuple[int, str, float]] = []  # items, answer, seconds
        self.alone = 0

    @property
    def capabilities(self) -> Any:
        return self.model.capabilities

    async def availability(self) -> Any:
        return await self.model.availability()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        started = time.perf_counter()
        pieces: list[str] = []
        async for piece in self.model.stream(request):
            if isinstance(piece, str):
                pieces.append(piece)
            yield piece
        if request.kind is StepKind.TEXT:
            items = len(re.findall(r"^(?:Character|Decision) \d+", request.prompt, re.MULTILINE))
            self.batches.append((items, "".join(pieces), time.perf_counter() - started))
        else:
            self.alone += 1


async def run(base_url: str, model_name: str, bark_rounds: int, decision_rounds: int, batch: int) -> dict[str, Any]:
    config = ProxyConfig(provider=Provider.OPENAI, model=model_name, base_url=base_url, context_size=4096)
    async with ProxyBackends(environ={"OPENAI_API_KEY": "local"}) as backends:
        recording = Recording(backends.model(config))
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1))
        model = CoalescingModel(ScheduledModel(recording, scheduler, queue_seconds=(900.0, 900.0, 900.0)),
                                CoalesceSettings(max_items=batch, linger_seconds=0.5))
        barks: list[tuple[str, str, str]] = []
        for round_ in range(bark_rounds):
            cast = [CAST[(round_ + n) % len(CAST)] for n in range(batch)]
            situation = SITUATIONS[round_ % len(SITUATIONS)]
            npcs = [NPC(persona, model, owner=f"npc:{persona.name}") for persona in cast]
            async with anyio.create_task_group() as group:
                for npc in npcs:
                    async def bark(npc: NPC = npc) -> None:
                        barks.append((npc.persona.name, situation, (await npc.bark(situation)).line))
                    group.start_soon(bark)
        bark_stats = model.coalescing_statistics()
        decided: list[tuple[str, str, tuple[str, ...]]] = []
        engine = DecisionEngine(model)
        for _ in range(decision_rounds):
            async with anyio.create_task_group() as group:
                for name, role, situation, ids in DECISIONS:
                    request = DecisionRequest(situation=situation, options=[DecisionOption(i) for i in ids],
                                              actor=Persona(name=name, role=role))

                    async def decide(request: DecisionRequest = request, name: str = name,
                                     ids: tuple[str, ...] = ids) -> None:
                        decision = await engine.decide(request)
                        decided.append((name, decision.option_id, ids))
                    group.start_soon(decide)
        total = model.coalescing_statistics()
    decisions = _difference(total, bark_stats)
    return {
        "barks": _figures(bark_stats),
        "decisions": {**_figures(decisions), "choseOwnOption": sum(choice in ids for _, choice, ids in decided)},
        "allItems": {**_figures(total), "generations": total.generations,
                     "itemsPerGeneration": total.items_per_generation},
        "secondsPerBatch": [round(seconds, 1) for _, _, seconds in recording.batches],
        "batchSizes": [items for items, _, _ in recording.batches],
        "_barks": barks,
        "_answers": [answer for _, answer, _ in recording.batches],
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible …/v1 (default: start scripts/local_model.py)")
    parser.add_argument("--model-name", default="qwen")
    parser.add_argument("--bark-rounds", type=int, default=5)
    parser.add_argument("--decision-rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=6, help="barks per batch (decisions: 4)")
    args = parser.parse_args()
    try:
        with live_model(args.base_url) as base_url:
            figures = anyio.run(run, base_url, args.model_name, args.bark_rounds, args.decision_rounds, args.batch)
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    barks, answers = figures.pop("_barks"), figures.pop("_answers")
    print(json.dumps(figures, indent=2))
    print("\nbarks delivered (speaker | situation | line)")
    for speaker, situation, line in barks:
        print(f"  {speaker} | {situation} | {line}")
    print("\nbatch answers as written by the model")
    for answer in answers:
        print("  ---\n  " + answer.strip().replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
