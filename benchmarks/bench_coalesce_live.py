"""Coalescing on a real local model: per kind of item (bark, decision, structured reply, a talk's
tool choice and plain reply), how many items of a batch come back valid and attributed to the
right character (no line speaks as, or names, another NPC of its batch; issue 13's goal: 95 % of
barks and decisions), and how many output tokens an item's answer takes (what
:mod:`oam_actors.models.coalesce` estimates when it packs).

The real path of a crowd: ``NPC.bark``, ``DecisionEngine.decide`` and ``NPC.talk`` → the
coalescing model → one quota scheduler (one request at a time) → the proxy model → an
OpenAI-compatible server (``scripts/local_model.py``: Qwen2.5-Coder-1.5B on llama.cpp). Each round
starts its items together; a short linger lets them gather into one batch, as they do on their
own when quota is short. Rounds of each kind take turns. Talk rounds: NPCs with a tool each (their
own) talk at once in plain text, so their decide steps share a batch of tool choices (and their
replies a reply batch). Structured rounds: NPCs without tools, each with its own reply schema
(emotions, player options, may it end), talk at once. An item the batch did not answer runs alone
(counted, not a failure of the crowd).

Each batch is read again here as the coalescing model reads it (``read_batch`` on its answer and
its items, named by the prompt), which gives the per-kind figures; a table line says whether
their sums agree with the coalescing model's own statistics. Printed (stdout): per kind the
items, those batched, valid from their batch, retried alone, misattributed, missing, invalid and
the share valid and attributed against the goal; then the figures as JSON (why items were
retried, output tokens per item, seconds per batch). On stderr, as they come: each batch's raw
answer with how each item read, and at the end what was delivered.

Run: python3 benchmarks/bench_coalesce_live.py [--base-url http://127.0.0.1:PORT/v1] [--batch N]
     [--bark-rounds 5] [--decision-rounds 3] [--structured-rounds 1] [--talk-rounds 1] [--talks 4]
     [--seconds S] [--record batches.jsonl]
Without ``--base-url`` it starts ``scripts/local_model.py`` (first run: downloads ~1.1 GB) and
stops it at the end. Heavy: ~2 GB of memory, both cores, many minutes (on shared cores, where
the model writes 1-3 tokens/s, a batch of ten takes minutes: ``--step-timeout``; ``--seconds``
starts no round after that). ``--record`` keeps each batch's items and answer (test fixtures).
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import functools
import json
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _live import ServerDidNotStart, live_model  # noqa: E402
from oam_actors.agent import ToolDefinition  # noqa: E402
from oam_actors.agent.model import (  # noqa: E402
    BarkItem,
    BatchItem,
    DecisionItem,
    GenerationRequest,
    LanguageModel,
    ReplyItem,
    StructuredReplyItem,
    ToolChoiceItem,
    Usage,
)
from oam_actors.agent.schema import Schema  # noqa: E402
from oam_actors.cli.argtypes import non_negative_int, positive_int  # noqa: E402
from oam_actors.errors import AgentError  # noqa: E402
from oam_actors.game import NPC, DecisionEngine, DecisionOption, DecisionRequest, DialogueTurn, Emotion, Persona  # noqa: E402
from oam_actors.game.options import NPCOptions, ReplyFormat  # noqa: E402
from oam_actors.models.coalesce import (  # noqa: E402
    BARK_TASK,
    DECISION_TASK,
    REPLY_TASK,
    STRUCTURED_REPLY_TASK,
    TOOL_CHOICE_TASK,
    Answer,
    CoalesceSettings,
    CoalescingModel,
    CoalescingStatistics,
    Unanswered,
    batch_key,
    read_batch,
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
# Structured talks: each NPC its own reply schema (emotions, player options, whether it may end).
_E = Emotion
STRUCTURED = [
    (CAST[0], "Can you fix my axe by tonight?",
     NPCOptions(emotions=(_E.NEUTRAL, _E.PROUD, _E.ANNOYED), player_option_count=3)),
    (CAST[1], "What smells so good in here?", NPCOptions(emotions=(_E.HAPPY, _E.EXCITED), player_option_count=2)),
    (CAST[2], "Will the storm reach the harbour?",
     NPCOptions(emotions=(_E.WORRIED, _E.NEUTRAL, _E.SAD), player_option_count=0, can_end_conversation=False)),
    (CAST[3], "I saw someone climb the town wall last night.",
     NPCOptions(emotions=(_E.SUSPICIOUS, _E.ANGRY, _E.NEUTRAL), player_option_count=2)),
    (CAST[4], "Play me a song about the sea!", NPCOptions(player_option_count=1, can_end_conversation=False)),
    (CAST[5], "My daughter has a fever. Can you help?",
     NPCOptions(emotions=(_E.WORRIED, _E.NEUTRAL, _E.GRATEFUL), player_option_count=3)),
    (CAST[6], "Go away, farm boy.", NPCOptions(emotions=(_E.SAD, _E.ANGRY, _E.NEUTRAL), player_option_count=2)),
    (CAST[7], "How much for a room and a hot meal?",
     NPCOptions(emotions=(_E.HAPPY, _E.NEUTRAL, _E.AMUSED), player_option_count=3, can_end_conversation=False)),
]
CUT_MARGIN_TOKENS = 2
"""An answer this close to its output limit may be cut: its last line is not trusted (the
coalescing model's margin; the agreement line of the table would show a drift)."""
TASKS = {BARK_TASK: "bark", DECISION_TASK: "decision", TOOL_CHOICE_TASK: "toolChoice", REPLY_TASK: "reply",
         STRUCTURED_REPLY_TASK: "structuredReply"}
KINDS = {BarkItem: "bark", DecisionItem: "decision", ToolChoiceItem: "toolChoice", ReplyItem: "reply",
         StructuredReplyItem: "structuredReply"}
# Each item's block in a batch prompt opens with its number and its character (policy's blocks).
ITEM_HEAD = re.compile(r"^(?:Character (\d+): (.+)|Decision (\d+), for (.+)|Conversation (\d+): (.+?)(?: \(.*\))?)$",
                       re.MULTILINE)
GOAL = 0.95
"""Of the items coalesced, the share valid and attributed to the right character (issue 13)."""


@dataclass
class Batch:
    kind: str
    items: int
    answer: str
    seconds: float
    output_tokens: int
    results: list[Answer | Unanswered]


@dataclass
class KindCounts:
    """One kind's items: those sent to the coalescing model, those batched, and how the batch
    read (answered, or why not), and those the coalescing model ran alone after their batch."""

    items: int = 0
    batched: int = 0
    answered: int = 0
    missing: int = 0
    invalid: int = 0
    misattributed: int = 0
    retried_alone: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


class _Watching:
    """A model in front of ``model`` that watches its steps go by."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model

    @property
    def capabilities(self) -> Any:
        return self.model.capabilities

    async def availability(self) -> Any:
        return await self.model.availability()


class Front(_Watching):
    """The callers' side of the coalescing model: every step it is given, by identity (so the
    backend side can tell a step sent as it came from the copy a retry alone makes) and, while
    it runs, by kind and character (so a batch prompt's items can be named)."""

    def __init__(self, model: CoalescingModel) -> None:
        super().__init__(model)
        self.sent: dict[int, GenerationRequest] = {}
        self.running: dict[tuple[str, str], GenerationRequest] = {}
        self.kinds: defaultdict[str, KindCounts] = defaultdict(KindCounts)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        item = request.item
        key = None
        if item is not None and batch_key(request) is not None:
            key = (KINDS[type(item)], _speaker(item))
            self.kinds[key[0]].items += 1
            self.sent[id(request)] = request
            self.running[key] = request
        try:
            async with aclosing(self.model.stream(request)) as pieces:
                async for piece in pieces:
                    yield piece
        finally:
            if key is not None:
                self.running.pop(key, None)


class Recording(_Watching):
    """The backend seen by the coalescing model: every batch (its kind, size, answer, time,
    output tokens and how each of its items reads), and the items run alone after their batch
    (a copy of the step the caller sent: ``follow_up`` set)."""

    def __init__(self, model: LanguageModel, record: Path | None = None) -> None:
        super().__init__(model)
        self.front: Front | None = None
        self.batches: list[Batch] = []
        self.record = record

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        assert self.front is not None
        kind = next((k for task, k in TASKS.items() if request.prompt.endswith(task)), None)
        batch = request.item is None and kind is not None
        if request.item is not None and id(request) not in self.front.sent and request.follow_up:
            # Counted before it streams: a decide step stops reading at its first JSON value, so
            # the end of this stream is never reached for a tool choice.
            retried = KINDS[type(request.item)]
            self.front.kinds[retried].retried_alone += 1
            print(f"{retried} retried alone after its batch", file=sys.stderr, flush=True)
        started = time.perf_counter()
        pieces: list[str] = []
        usage: Usage | None = None
        try:
            async for piece in self.model.stream(request):
                if isinstance(piece, str):
                    pieces.append(piece)
                else:
                    usage = piece
                yield piece
        except Exception as exc:
            if batch:  # its items get the error (their step retry decides) or run alone
                print(f"batch {kind} failed after {time.perf_counter() - started:.0f} s: {exc}", file=sys.stderr, flush=True)
            raise
        if batch:
            assert kind is not None
            self._read(kind, request, "".join(pieces), time.perf_counter() - started, usage)

    def _read(self, kind: str, request: GenerationRequest, answer: str, seconds: float, usage: Usage | None) -> None:
        """The batch read as the coalescing model reads it (its items named by the prompt)."""
        assert self.front is not None
        heads = [[g for g in m.groups() if g] for m in ITEM_HEAD.finditer(request.prompt)]
        members = [self.front.running[(kind, name.strip())] for _, name in heads]
        tokens = usage.output_tokens if usage is not None else 0
        limit = min(request.max_output_tokens or 0, self.model.capabilities.max_output_tokens)
        truncated = tokens >= limit - CUT_MARGIN_TOKENS
        results = read_batch(answer, members, truncated=truncated)
        if self.record is not None:  # fixtures for the reader's tests: the items and the answer as written
            entry = {"kind": kind, "items": [m.item for m in members], "answer": answer, "truncated": truncated}
            with self.record.open("ab") as file:
                file.write(msgspec.json.encode(entry) + b"\n")
        counts = self.front.kinds[kind]
        counts.batched += len(members)
        for result in results:
            if isinstance(result, Answer):
                counts.answered += 1
            else:
                setattr(counts, result.why.value, getattr(counts, result.why.value) + 1)
                counts.reasons[f"{result.why.value}: {result.detail}"] += 1
        self.batches.append(Batch(kind, len(members), answer, seconds, tokens, results))
        # As it comes (stderr): a run on slow shared cores may be stopped before its summary.
        marks = " ".join("ok" if isinstance(r, Answer) else r.why.value for r in results)
        print(f"batch {kind} of {len(members)}: {tokens} output tokens, {seconds:.0f} s [{marks}]\n"
              f"  {answer.strip()}", file=sys.stderr, flush=True)


async def run(base_url: str, model_name: str, rounds: Rounds, batch: int, step_timeout: float,
              record: Path | None, seconds: float | None) -> dict[str, Any]:
    config = ProxyConfig(provider=Provider.OPENAI, model=model_name, base_url=base_url, context_size=4096,
                         step_timeout=step_timeout, read_timeout=step_timeout)  # slow shared cores
    async with ProxyBackends(environ={"OPENAI_API_KEY": "local"}) as backends:
        recording = Recording(backends.model(config), record)
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1))
        queue = step_timeout * 3
        coalescing = CoalescingModel(ScheduledModel(recording, scheduler, queue_seconds=(queue, queue, queue)),
                                     CoalesceSettings(max_items=batch, linger_seconds=0.5,
                                                      dialogue_linger_seconds=0.5))
        recording.front = Front(coalescing)
        crowd = Crowd(recording.front, batch, rounds.talkers)
        # Rounds of each kind in turn, so that a run cut short by --seconds still has every kind.
        plan = [(kind, n) for n in range(max(rounds.counts().values(), default=0))
                for kind, count in rounds.counts().items() if n < count]
        started, skipped = time.perf_counter(), 0
        for kind, n in plan:
            if seconds is not None and time.perf_counter() - started > seconds:
                skipped += 1
                continue
            await crowd.round(kind, n)
        total = coalescing.coalescing_statistics()
    kinds = {kind: recording.front.kinds[kind] for kind in KINDS.values() if kind in recording.front.kinds}
    return {
        "_table": _table(kinds, total),
        "perKind": {kind: _kind_figures(counts, recording.batches, kind) for kind, counts in kinds.items()},
        "roundsRun": len(plan) - skipped, "roundsSkippedForTime": skipped, "failedByKind": dict(crowd.failed),
        "decisions": {"decided": len(crowd.decided),
                      "choseOwnOption": sum(choice in ids for _, choice, ids in crowd.decided)},
        "talks": {"talks": len(crowd.talked),
                  "ranOwnToolOnly": sum(all(t == tool for t in ran) for _, tool, ran, _ in crowd.talked),
                  "toolRuns": sum(len(ran) for _, _, ran, _ in crowd.talked)},
        "structuredTalks": {"talks": len(crowd.replied), "fallbacks": sum(t.is_fallback for _, t in crowd.replied)},
        "allItems": {**_figures(total), "generations": total.generations,
                     "itemsPerGeneration": total.items_per_generation},
        "secondsPerBatch": [round(b.seconds, 1) for b in recording.batches],
        "batchSizes": [f"{b.kind}:{b.items}" for b in recording.batches],
        "_barks": crowd.barks,
        "_talks": crowd.talked,
        "_replies": crowd.replied,
    }


class Crowd:
    """The NPCs of the run, by round: each kind's round starts its items together."""

    def __init__(self, model: LanguageModel, batch: int, talkers: int) -> None:
        self.model = model
        self.batch = batch
        self.talkers = talkers
        self.engine = DecisionEngine(model)
        self.barks: list[tuple[str, str, str]] = []  # speaker, situation, line
        self.decided: list[tuple[str, str, tuple[str, ...]]] = []  # actor, choice, its options
        self.talked: list[tuple[str, str, list[str], str]] = []  # speaker, own tool, tools it ran, line
        self.replied: list[tuple[str, DialogueTurn]] = []
        self.failed: Counter[str] = Counter()

    async def round(self, kind: str, n: int) -> None:
        jobs = {"bark": self._barks, "decision": self._decisions, "talk": self._talks,
                "structured": self._structured}[kind](n)
        async with anyio.create_task_group() as group:
            for job in jobs:
                group.start_soon(self._counted, kind, job)

    async def _counted(self, kind: str, job: Callable[[], Awaitable[None]]) -> None:
        """``job``; one that fails (the server too slow for a step's timeout) is counted, and
        the run goes on."""
        try:
            await job()
        except AgentError as exc:
            self.failed[kind] += 1
            print(f"a {kind} failed: {exc}", file=sys.stderr, flush=True)

    def _barks(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        situation = SITUATIONS[n % len(SITUATIONS)]
        cast = [CAST[(n + i) % len(CAST)] for i in range(min(self.batch, len(CAST)))]

        async def bark(persona: Persona, i: int) -> None:
            line = (await NPC(persona, self.model, owner=f"npc:{persona.name}:{i}").bark(situation)).line
            self.barks.append((persona.name, situation, line))
        return [functools.partial(bark, persona, i) for i, persona in enumerate(cast)]

    def _decisions(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        chosen = [DECISIONS[(n + i) % len(DECISIONS)] for i in range(min(self.batch, len(DECISIONS)))]

        async def decide(name: str, role: str, situation: str, ids: tuple[str, ...]) -> None:
            request = DecisionRequest(situation=situation, options=[DecisionOption(i) for i in ids],
                                      actor=Persona(name=name, role=role))
            self.decided.append((name, (await self.engine.decide(request)).option_id, ids))
        return [functools.partial(decide, *decision) for decision in chosen]

    def _talks(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        return [functools.partial(self._talk, TALKERS[(n + i) % len(TALKERS)]) for i in range(self.talkers)]

    async def _talk(self, talker: tuple[str, str, str, str, str]) -> None:
        name, role, tool_name, key, line = talker
        ran: list[str] = []

        async def handler(arguments: dict[str, Any]) -> Any:
            ran.append(tool_name)
            return {key: arguments.get(key), "status": "in stock", "count": 3}

        schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
        tool = ToolDefinition(tool_name, f"Look up a {key} {name} has.", Schema.compile(schema), handler=handler)
        npc = NPC(Persona(name=name, role=role), self.model, tools=[tool],
                  options=NPCOptions(reply_format=ReplyFormat.TEXT), owner=f"npc:{name}")
        turn = await npc.talk(line)
        self.talked.append((name, tool_name, ran, turn.line))

    def _structured(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        cast = [STRUCTURED[(n + i) % len(STRUCTURED)] for i in range(min(self.batch, len(STRUCTURED)))]

        async def reply(persona: Persona, line: str, options: NPCOptions) -> None:
            npc = NPC(persona, self.model, options=options, owner=f"npc:{persona.name}")
            self.replied.append((persona.name, await npc.talk(line)))
        return [functools.partial(reply, *speaker) for speaker in cast]


def _kind_figures(counts: KindCounts, batches: list[Batch], kind: str) -> dict[str, Any]:
    """One kind: its items, how its batches read, the items retried alone, and the output
    tokens per item the server counted (a batch's answer over its items)."""
    own = [b for b in batches if b.kind == kind]
    return {"items": counts.items, "batches": len(own), "batchedItems": counts.batched,
            "validFromBatch": counts.answered, "validShare": _share(counts),
            "missing": counts.missing, "invalid": counts.invalid, "misattributed": counts.misattributed,
            "retriedAlone": counts.retried_alone, "whyRetried": dict(counts.reasons),
            "outputTokensPerItem": sorted(round(b.output_tokens / b.items, 1) for b in own),
            "outputTokensPerItemMean": round(sum(b.output_tokens for b in own) / max(1, counts.batched), 1)}


def _share(counts: KindCounts) -> float:
    return round(counts.answered / max(1, counts.batched), 3)


def _table(kinds: dict[str, KindCounts], total: CoalescingStatistics) -> str:
    """Per kind: items, valid from their batch, retried alone, misattributed, and the share
    valid and attributed against the goal; then the barks and decisions together (the goal's
    own figure), and whether these counts agree with the coalescing model's own."""
    head = f"{'kind':<16}{'items':>6}{'batched':>8}{'valid':>7}{'retried':>8}{'misattr.':>9}{'missing':>8}" \
           f"{'invalid':>8}  valid and attributed"
    rows = [head]
    for kind, c in kinds.items():
        rows.append(_row(kind, c))
    goal = KindCounts()
    for kind in ("bark", "decision"):
        if kind in kinds:
            for name in ("items", "batched", "answered", "missing", "invalid", "misattributed", "retried_alone"):
                setattr(goal, name, getattr(goal, name) + getattr(kinds[kind], name))
    rows.append(_row("barks+decisions", goal))
    read = [sum(getattr(c, name) for c in kinds.values()) for name in ("answered", "missing", "invalid", "misattributed")]
    agrees = read == [total.answered, total.missing, total.invalid, total.misattributed] \
        and sum(c.retried_alone for c in kinds.values()) == total.retried_alone
    rows.append(f"per-kind counts agree with the coalescing model's statistics: {'yes' if agrees else 'NO'}")
    return "\n".join(rows)


def _row(kind: str, c: KindCounts) -> str:
    share = _share(c)
    verdict = "-" if not c.batched else f"{share:.1%} (goal {GOAL:.0%}: {'met' if share >= GOAL else 'NOT met'})"
    return f"{kind:<16}{c.items:>6}{c.batched:>8}{c.answered:>7}{c.retried_alone:>8}{c.misattributed:>9}" \
           f"{c.missing:>8}{c.invalid:>8}  {verdict}"


def _figures(stats: CoalescingStatistics) -> dict[str, Any]:
    """``validShare``: of the items a finished batch answered for, those valid and attributed to
    the right character (a batch that failed as a whole, e.g. timed out, checked none)."""
    checked = stats.answered + stats.missing + stats.invalid + stats.misattributed
    return {"items": stats.items, "checked": checked, "valid": stats.answered,
            "validShare": round(stats.answered / max(1, checked), 3), "missing": stats.missing,
            "invalid": stats.invalid, "misattributed": stats.misattributed,
            "retriedAlone": stats.retried_alone, "inFailedBatches": stats.failed}


def _speaker(item: BatchItem) -> str:
    if isinstance(item, ToolChoiceItem | StructuredReplyItem):
        return item.talk.speaker.strip()
    if isinstance(item, BarkItem | ReplyItem):
        return item.speaker.strip()
    return item.actor.strip()


@dataclass(frozen=True)
class Rounds:
    barks: int
    decisions: int
    talks: int
    talkers: int
    structured: int

    def counts(self) -> dict[str, int]:
        return {"bark": self.barks, "decision": self.decisions, "structured": self.structured, "talk": self.talks}


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible …/v1 (default: start scripts/local_model.py)")
    parser.add_argument("--model-name", default="qwen")
    parser.add_argument("--bark-rounds", type=non_negative_int, default=5)
    parser.add_argument("--decision-rounds", type=non_negative_int, default=3)
    parser.add_argument("--talk-rounds", type=non_negative_int, default=1)
    parser.add_argument("--talks", type=positive_int, default=4, help="NPCs talking at once per talk round")
    parser.add_argument("--structured-rounds", type=non_negative_int, default=1,
                        help="rounds of structured talks (each NPC its own reply schema, no tools)")
    parser.add_argument("--batch", type=positive_int, default=CoalesceSettings().max_items,
                        help=f"items per batch at most, and barks and decisions per round "
                        f"(default {CoalesceSettings().max_items}, the server's)")
    parser.add_argument("--step-timeout", type=float, default=900.0,
                        help="seconds one generation may take (default 900: shared cores write slowly)")
    parser.add_argument("--seconds", type=float, help="start no round after this many seconds (default: no limit)")
    parser.add_argument("--record", type=Path, help="append each batch (its items and answer) to this JSON-lines file")
    args = parser.parse_args()
    rounds = Rounds(args.bark_rounds, args.decision_rounds, args.talk_rounds, args.talks, args.structured_rounds)
    try:
        with live_model(args.base_url) as base_url:
            figures = anyio.run(run, base_url, args.model_name, rounds, args.batch, args.step_timeout, args.record,
                                args.seconds)
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    table, barks, talks, replies = (figures.pop(k) for k in ("_table", "_barks", "_talks", "_replies"))
    print(table)
    print()
    print(json.dumps(figures, indent=2))
    # What was delivered goes to stderr, next to each batch's raw answer.
    print("\nbarks delivered (speaker | situation | line)", file=sys.stderr)
    for speaker, situation, line in barks:
        print(f"  {speaker} | {situation} | {line}", file=sys.stderr)
    print("\ntalks (speaker | its own tool | tools run | line)", file=sys.stderr)
    for speaker, tool, ran, line in talks:
        print(f"  {speaker} | {tool} | {', '.join(ran) or '-'} | {line}", file=sys.stderr)
    print("\nstructured talks (speaker | emotion | line | player options | ends | fallback)", file=sys.stderr)
    for speaker, turn in replies:
        print(f"  {speaker} | {turn.emotion.value} | {turn.line} | {' / '.join(turn.player_options) or '-'} | "
              f"{turn.ends_conversation} | {turn.is_fallback}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
