"""Conversations among NPCs on a real local model (issue 32's live goals): of coalesced
conversation lines, the share valid, spoken by the right member and in character (goal 95 %);
and whether an NPC that overheard a fact uses it when the player asks, while one that was not
there does not (goal: 9 of 10 probes each).

The real path: a :class:`~oam_actors.bridge.Bridge` in process (the game methods, on
``LocalSystem``) whose system model is the proxy model of an OpenAI-compatible server
(``scripts/local_model.py``: Qwen2.5-Coder-1.5B on llama.cpp) behind one quota scheduler (one
request at a time, as the server has one slot) and the coalescing model, as ``oam-actors serve
--model openai`` builds it. The client speaks JSON-RPC to the bridge (``conversation/*``,
``npc/*``).

1. Ambient conversations: ``--conversations`` conversations of ``--size`` NPCs (each its own
   persona), all advanced one line at a time together (``conversation/advance``), so that their
   next lines wait for the model together and share generations. Each delivered line is
   checked:

   - *valid*: not a fallback line, one line, with spoken words, no ``[…]`` tag or bracket left in it (the
     emotion tag is the line's ``emotion``; a line ``[Shocked]`` says nothing), no label of its
     own (``Hild:``, ``<Hild>:``), and as the library's own attribution check
     (:func:`oam_actors.game.conversation.check_line`) would deliver it: it neither begins with
     another member's label (``Mira: …``) nor goes on as another member;
   - *right member*: its ``speaker`` is the member whose turn it was (``roundRobin``) and its
     ``name`` that member's persona name;
   - *in character*: no assistant-speak (``As an AI``, ``language model``, ``I'm an
     assistant``, ``I'm just here to help``, ``I cannot assist``, ``User:``/``Assistant:``
     labels) and it does not claim to be another member (``I am <other>``, ``I'm <other>``, ``my
     name is <other>``, ``call me <other>``), nor narrates its speaker in the third person (begins with its own name, or
     "the" and its role's noun, as a subject: ``Gorm's heart sinks …``, ``Mira replies, …``,
     ``The blacksmith is pleased …``); refusals (``I can't help with that``) are assistant-speak.

   Beside these (not part of the goal's share): lines that name a member of *another* conversation,
   which that speaker never heard of — content carried across items of one shared batch.

   The coalescing model's statistics of this part say how many lines a batch answered, how many
   were retried alone after their batch, and how many ran alone (never batched).

2. Overheard-fact probes (``--probes``, 10 facts): per probe a fresh world with NPCs A, B (the
   conversation's members), C (its ``audience``) and D (on the same world, not there). A knows
   the fact (persona ``knowledge``) and says it: A's first line is planted by a scripted step
   (A's own ``model``), so that what is measured is whether C uses what it overheard, not whether
   a 1.5B model happens to say a fact; B answers on the real model (coalesced with the other
   probes' lines), and the conversation goes on one line at a time until C has overheard the
   fact (its ``memory.heard`` holds the fact's keywords) and B has spoken, at most
   ``--probe-lines`` lines. Then the player asks C and D the probe's question (``npc/talk``,
   plain text). C *used the fact* when its answer contains every keyword of the fact
   (case-insensitive whole words, plurals too); D *knew nothing* when its answer contains none of
   them. A probe whose members never said the fact counts as not used (C could not know it); how
   many reached C is printed beside.

Printed (stdout): both parts' counts against the goals, each line not counted and each missed
probe (its question and both answers), and the coalescing statistics as JSON.
On stderr, as they come: each line delivered and each answer (``--show-generations``: also
every generation's raw text, batch answers included).

Run: python3 benchmarks/bench_conversations_live.py [--base-url http://127.0.0.1:PORT/v1]
     [--conversations 3] [--size 3] [--lines 6] [--probes 10] [--probe-lines 4]
     [--probes-at-once 5] [--batch 6] [--linger 0.5] [--step-timeout 600] [--show-generations]
Without ``--base-url`` it starts ``scripts/local_model.py`` and stops it at the end. Heavy: ~2 GB
of memory, both cores, several minutes.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _live import ServerDidNotStart, live_model  # noqa: E402
from oam_actors.agent.model import DelegatingModel, GenerationRequest, LanguageModel, Usage  # noqa: E402
from oam_actors.bridge import Bridge  # noqa: E402
from oam_actors.cli.argtypes import non_negative_int, positive_int  # noqa: E402
from oam_actors.game.conversation import check_line  # noqa: E402
from oam_actors.game_methods import GameExtension  # noqa: E402
from oam_actors.models.coalesce import CoalesceSettings, CoalescingModel, CoalescingStatistics  # noqa: E402
from oam_actors.models.pool import ScheduledModel  # noqa: E402
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig  # noqa: E402
from oam_actors.models.scheduler import QuotaLimits, QuotaScheduler  # noqa: E402
from oam_actors.runtime import LocalSystem  # noqa: E402
from oam_actors.client import Client, InProcessEndpoint, connect  # noqa: E402
from oam_actors.errors import OamError  # noqa: E402

CAST = [
    ("Gorm", "the village blacksmith", "Gruff, proud of his steel."),
    ("Mira", "the baker", "Warm and chatty."),
    ("Tobin", "an old fisherman", "Grumbles about the weather."),
    ("Elsa", "the town guard captain", "Stern and watchful."),
    ("Brann", "a travelling bard", "Flamboyant, loves an audience."),
    ("Hild", "the herbalist", "Quiet, knows every plant."),
    ("Ulf", "a farmhand", "Tired but kind."),
    ("Sela", "the innkeeper", "Shrewd and welcoming."),
    ("Odo", "the miller", "Anxious about money."),
    ("Petra", "a shepherd", "Cheerful, talks about her flock."),
    ("Corwin", "the village priest", "Gentle and solemn."),
    ("Yara", "a merchant", "Quick-witted, always bargaining."),
]
SITUATIONS = ["Gossip by the well at dawn.", "Waiting out the rain under the inn's porch.",
              "A quarrel about grain prices at the market.", "Evening by the fire after a long day."]
# fact (A tells B), the player's question, the fact's keywords (all in C's answer; none in D's)
FACTS = [
    ("the blacksmith's key is hidden under the red barrel", "Do you know where the blacksmith's key is hidden?",
     ("barrel",)),
    ("the miller's daughter ran away with a sailor called Pim", "What happened to the miller's daughter?", ("Pim",)),
    ("the wolves were seen near the old windmill last night", "Where were the wolves seen?", ("windmill",)),
    ("the password for the cellar door is 'turnip'", "What is the password for the cellar door?", ("turnip",)),
    ("the mayor hid the town's gold in the chapel bell tower", "Where did the mayor hide the town's gold?",
     ("bell",)),
    ("the healer's new cat is named Biscuit", "What is the healer's new cat called?", ("Biscuit",)),
    ("the caravan from the south is bringing saffron", "What is the caravan from the south bringing?", ("saffron",)),
    ("the thief escaped through the sewer grate behind the bakery", "How did the thief escape?", ("sewer",)),
    ("the ferry will not run again until the harvest festival", "When will the ferry run again?", ("harvest",)),
    ("the old well is poisoned with hemlock", "What is wrong with the old well?", ("hemlock",)),
]
GOAL_SHARE = 0.95
GOAL_PROBES = 0.9
ASSISTANT_SPEAK = re.compile(r"\bas an ai\b|\blanguage model\b|\bi'?m an (?:ai )?assistant\b|\bi am an (?:ai )?assistant\b"
                             r"|\bi(?:'m| am) (?:just |only )?here to (?:help|assist)(?: you)?\s*[.!]?\s*$"
                             r"|\bi cannot assist\b|\bi can'?t assist\b|\bi can'?t help with that\b|\bi cannot help with that\b"
                             r"|(?:^|\s)(?:user|assistant|system)\s*:",
                             re.IGNORECASE)
# Plain-text replies, no tools (a talk is one reply step: what the NPC knows is its memory alone).
NPC_OPTIONS = {"replyFormat": "text", "memoryTools": "none", "worldReadable": [], "playerOptionCount": 0,
               "maximumResponseTokens": 80}


class Shown(DelegatingModel):
    """The proxy model, each generation's raw text written to stderr once it is done."""

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:  # type: ignore[override]
        text: list[str] = []
        try:
            async for piece in self._model.stream(request):
                if isinstance(piece, str):
                    text.append(piece)
                yield piece
        finally:
            log(f"-- generation ({request.priority}):\n{''.join(text).strip()}\n--")


def clean(line: str, speaker: str) -> bool:
    """Words, no ``[…]`` tag (nor a bracket of one), no label of the speaker's own."""
    return (re.search(r"\w", line) is not None and not any(bracket in line for bracket in "[]")
            and re.match(rf"\W*{re.escape(speaker)}\W*:", line, re.IGNORECASE) is None)


ROLES = {name: role for name, role, _ in CAST}


def in_character(line: str, speaker: str, others: list[str]) -> bool:
    """No assistant-speak, no narration of the speaker (its name, or "the" and its role's noun,
    as the line's subject), and no claim to be another member."""
    noun = ROLES.get(speaker, speaker).split()[-1]
    narrator = rf"\W*(?:{re.escape(speaker)}|the\s+(?:\w+\s+)?{re.escape(noun)})(?:'s)?\s+\w"
    if ASSISTANT_SPEAK.search(line) or re.match(narrator, line, re.IGNORECASE):
        return False
    return not any(re.search(rf"\b(?:i am|i'm|my name is|call me)\s+{re.escape(other)}\b", line, re.IGNORECASE)
                   for other in others)


def mentions(text: str, keyword: str) -> bool:
    """``keyword`` as a whole word (or its plural)."""
    return re.search(rf"(?<!\w){re.escape(keyword)}(?:e?s)?(?!\w)", text, re.IGNORECASE) is not None


@dataclass
class Ambient:
    delivered: int = 0
    fallback: int = 0
    valid: int = 0
    right_member: int = 0
    in_character: int = 0
    all_three: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)  # lines naming a member of another conversation


@dataclass
class Probes:
    run: int = 0
    overheard: int = 0  # the fact reached C's memory
    used: int = 0  # C's answer used it
    absent_knew_nothing: int = 0  # D's did not
    failed: dict[str, int] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)  # why each probe missed: its question and answers
    lines: Ambient = field(default_factory=Ambient)  # the probes' conversation lines, checked as above


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def create_npc(client: Client, npc: str, world: str, persona: tuple[str, str, str],
                     knowledge: tuple[str, ...] = (), says: str | None = None) -> None:
    """``says``: the NPC's first line, planted by a scripted step (its own model), word for word."""
    name, role, personality = persona
    params: dict[str, Any] = {"npc": npc, "world": world, "options": NPC_OPTIONS, "persona": {
        "name": name, "role": role, "personality": personality, "knowledge": list(knowledge)}}
    if says is not None:
        params["model"] = {"type": "scripted", "steps": [{"text": f"[neutral] {says}"}]}
    await client.call("npc/create", params)


async def converse(client: Client, conversation: str, members: list[tuple[str, str]], elsewhere: list[str],
                   lines: int, tally: Ambient) -> None:
    for turn in range(lines):
        expected_npc, expected_name = members[turn % len(members)]
        try:
            result = await client.call("conversation/advance", {"conversation": conversation})
        except OamError as error:
            tally.failed[error.code.wire] = tally.failed.get(error.code.wire, 0) + 1
            log(f"{conversation}: advance failed: {error.error}")
            continue
        for line in result["lines"]:
            check(line, expected_npc, expected_name, [name for npc, name in members if npc != line["speaker"]], tally)
            if any(mentions(line["line"], name) for name in elsewhere):
                tally.leaked.append(f"{line['name']} ({conversation}): {line['line']!r}")
            log(f"{conversation} | {line['name']} ({line['emotion']}, to {line['addressee']})"
                f"{' [fallback ' + str(line.get('degraded')) + ']' if line['isFallback'] else ''}: {line['line']}")


def check(line: dict[str, Any], expected_npc: str, expected_name: str, others: list[str], tally: Ambient) -> None:
    text: str = line["line"]
    tally.delivered += 1
    tally.fallback += bool(line["isFallback"])
    valid = (not line["isFallback"] and clean(text, line["name"]) and "\n" not in text.strip()
             and check_line(text, line["name"], others) == text.strip())
    right = line["speaker"] == expected_npc and line["name"] == expected_name
    character = in_character(text, line["name"], others)
    tally.valid += valid
    tally.right_member += right
    tally.in_character += character
    tally.all_three += valid and right and character
    if not (valid and right and character):
        tally.failures.append(f"{expected_name} -> {line['name']}: {text!r} (valid {valid}, right member {right}, "
                              f"in character {character}, fallback {line['isFallback']})")


async def ambient(client: Client, args: argparse.Namespace) -> Ambient:
    tally = Ambient()
    await client.call("world/create", {"world": "village"})
    groups = []
    for g in range(args.conversations):
        members = []
        for i in range(args.size):
            persona = CAST[(g * args.size + i) % len(CAST)]
            npc = f"villager{g}_{i}"
            await create_npc(client, npc, "village", persona)
            members.append((npc, persona[0]))
        await client.call("conversation/create", {
            "conversation": f"c{g}", "world": "village", "members": [npc for npc, _ in members],
            "situation": SITUATIONS[g % len(SITUATIONS)], "lineBudget": args.lines})
        groups.append(members)
    async with anyio.create_task_group() as tasks:
        for g, members in enumerate(groups):
            elsewhere = [name for other in groups if other is not members for _, name in other]
            tasks.start_soon(converse, client, f"c{g}", members, elsewhere, args.lines, tally)
    return tally


async def probe(client: Client, n: int, args: argparse.Namespace, tally: Probes) -> None:
    fact, question, keywords = FACTS[n % len(FACTS)]
    world = f"probe{n}"
    await client.call("world/create", {"world": world})
    cast = [CAST[(n * 4 + i) % len(CAST)] for i in range(4)]
    ids = [f"{world}_{role}" for role in "abcd"]
    teller, listener = cast[0][0], cast[1][0]
    for i, (npc, persona) in enumerate(zip(ids, cast, strict=True)):
        await create_npc(client, npc, world, persona, (f"News: {fact}.",) if i == 0 else (),
                         says=f"{listener}, listen, {fact}!" if i == 0 else None)
    a, b, c, d = ids
    try:
        await client.call("conversation/create", {
            "conversation": f"talk{n}", "world": world, "members": [a, b], "audience": [c],
            "situation": f"{teller} has just found out some news and tells {listener}, word for word: {fact}.",
            "lineBudget": args.probe_lines})
        overheard = False
        for turn in range(args.probe_lines):  # until the bystander has heard the fact and B has spoken
            said = await client.call("conversation/advance", {"conversation": f"talk{n}"})
            for line in said["lines"]:
                speaker, other = (a, listener) if turn % 2 == 0 else (b, teller)
                check(line, speaker, cast[turn % 2][0], [other], tally.lines)
                log(f"probe {n} | {line['name']}: {line['line']}")
            heard = (await client.call("npc/state", {"npc": c}))["state"].get("memory", {}).get("heard", [])
            overheard = all(any(mentions(note, k) for note in heard) for k in keywords)
            if overheard and turn >= 1:
                break
        answers: dict[str, str] = {}
        async with anyio.create_task_group() as tasks:
            for npc in (c, d):
                tasks.start_soon(_ask, client, npc, question, answers)
    except OamError as error:
        tally.failed[error.code.wire] = tally.failed.get(error.code.wire, 0) + 1
        log(f"probe {n} failed: {error.error}")
        return
    tally.run += 1
    used = all(mentions(answers[c], k) for k in keywords)
    nothing = not any(mentions(answers[d], k) for k in keywords)
    tally.overheard += overheard
    tally.used += used
    tally.absent_knew_nothing += nothing
    if not (used and nothing):
        tally.misses.append(f"probe {n} ({question!r}, keywords {', '.join(keywords)}; overheard {overheard}): "
                            f"{cast[2][0]} (heard it) {answers[c]!r}; {cast[3][0]} (not there) {answers[d]!r}")
    log(f"probe {n} | fact overheard {overheard}, used {used}, absent knew nothing {nothing}\n"
        f"  {cast[2][0]} (heard it): {answers[c]}\n  {cast[3][0]} (not there): {answers[d]}")


async def _ask(client: Client, npc: str, question: str, answers: dict[str, str]) -> None:
    answers[npc] = (await client.call("npc/talk", {"npc": npc, "line": question}))["line"]


async def probes(client: Client, args: argparse.Namespace) -> Probes:
    tally = Probes()
    for start in range(0, args.probes, args.probes_at_once):
        async with anyio.create_task_group() as tasks:
            for n in range(start, min(args.probes, start + args.probes_at_once)):
                tasks.start_soon(probe, client, n, args, tally)
    return tally


async def run(base_url: str, args: argparse.Namespace) -> tuple[Ambient, Probes, dict[str, Any], dict[str, Any]]:
    config = ProxyConfig(provider=Provider.OPENAI, model=args.model_name, base_url=base_url, context_size=4096,
                         step_timeout=args.step_timeout, read_timeout=args.step_timeout)  # slow shared cores
    queue = args.step_timeout * 3
    async with ProxyBackends(environ={"OPENAI_API_KEY": "local"}) as backends, LocalSystem() as system:
        scheduler = QuotaScheduler(QuotaLimits(max_concurrency=1))  # the server has one slot
        proxy: LanguageModel = Shown(backends.model(config)) if args.show_generations else backends.model(config)
        model = CoalescingModel(ScheduledModel(proxy, scheduler, queue_seconds=(queue, queue, queue)),
                                CoalesceSettings(max_items=args.batch, linger_seconds=args.linger,
                                                 dialogue_linger_seconds=args.linger))
        extension = GameExtension(max_npcs=args.conversations * args.size + 4 * args.probes + 4,
                                  max_worlds=args.probes + 2, max_conversations=args.conversations + args.probes + 1)
        make = lambda write: Bridge(system, write, system_model=lambda: model, extensions=[extension])  # noqa: E731
        async with connect(InProcessEndpoint(make), timeout=None) as client:
            started = time.perf_counter()
            lines = await ambient(client, args)
            lines_seconds = time.perf_counter() - started
            after_lines = model.coalescing_statistics()
            started = time.perf_counter()
            facts = await probes(client, args) if args.probes else Probes()
            probe_seconds = time.perf_counter() - started
        total = model.coalescing_statistics()
    return (lines, facts, {"conversationLines": _builtins(after_lines), "probes": _difference(total, after_lines)},
            {"conversationSeconds": round(lines_seconds), "probeSeconds": round(probe_seconds)})


def _builtins(stats: CoalescingStatistics) -> dict[str, Any]:
    return msgspec.to_builtins(stats)  # type: ignore[no-any-return]


def _difference(total: CoalescingStatistics, before: CoalescingStatistics) -> dict[str, Any]:
    now, then = _builtins(total), _builtins(before)
    diff = {key: value - then[key] for key, value in now.items() if key != "itemsPerGeneration"}
    diff["itemsPerGeneration"] = round(diff["served"] / diff["generations"], 3) if diff["generations"] else 0.0
    return diff


def report(args: argparse.Namespace, lines: Ambient, facts: Probes, stats: dict[str, Any],
           seconds: dict[str, Any]) -> None:
    print(f"ambient conversations: {args.conversations} of {args.size} NPCs, {args.lines} lines each "
          f"({seconds['conversationSeconds']} s)")
    _lines(lines)
    s = stats["conversationLines"]
    print(f"  from the coalescing model: {s['items']} lines asked, {s['batchedItems']} sent in {s['batches']} "
          f"batches, {s['answered']} answered by their batch, {s['retriedAlone']} retried alone (missing "
          f"{s['missing']}, invalid {s['invalid']}, misattributed {s['misattributed']}), "
          f"{s['items'] - s['batchedItems']} ran alone; {s['generations']} generations, "
          f"{s['itemsPerGeneration']} lines per generation")
    print(f"  lines naming a member of another conversation (content carried across a shared batch; not in "
          f"the goal's share): {len(lines.leaked)}/{lines.delivered}")
    for leak in lines.leaked:
        print(f"    {leak}")
    print(f"overheard-fact probes: {facts.run} run ({seconds['probeSeconds']} s), failed requests "
          f"{sum(facts.failed.values())} {facts.failed or ''}; the fact reached the bystander's memory in "
          f"{facts.overheard}/{facts.run}")
    print("  the probes' conversation lines, checked as the ambient ones:")
    _lines(facts.lines)
    print(f"overheard fact used: {facts.used}/{args.probes} (of {facts.overheard} where it was overheard); "
          f"absent NPC knew nothing: "
          f"{facts.absent_knew_nothing}/{args.probes}   (goal >= {GOAL_PROBES:.0%} each: "
          f"{'met' if min(facts.used, facts.absent_knew_nothing) >= GOAL_PROBES * args.probes else 'NOT met'})")
    for miss in facts.misses:
        print(f"  missed: {miss}")
    print()
    print(json.dumps({"coalescing": stats}, indent=2))


def _lines(lines: Ambient) -> None:
    share = lines.all_three / max(1, lines.delivered)
    print(f"  lines delivered {lines.delivered} (fallback {lines.fallback}), failed requests "
          f"{sum(lines.failed.values())} {lines.failed or ''}")
    for label, count in (("valid", lines.valid), ("spoken by the right member", lines.right_member),
                         ("in character", lines.in_character)):
        print(f"  {label}: {count}/{lines.delivered} ({count / max(1, lines.delivered):.1%})")
    print(f"  valid, right member and in character: {lines.all_three}/{lines.delivered} ({share:.1%}; goal "
          f"{GOAL_SHARE:.0%}: {'met' if share >= GOAL_SHARE and lines.delivered else 'NOT met'})")
    for failure in lines.failures:
        print(f"  not counted: {failure}")


def main() -> int:
    # An NPC's background compaction that times out is logged with its traceback; not measured here.
    logging.getLogger("oam_actors.game.npc").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible …/v1 (default: start scripts/local_model.py)")
    parser.add_argument("--model-name", default="qwen")
    parser.add_argument("--conversations", type=positive_int, default=3, help="ambient conversations at once")
    parser.add_argument("--size", type=positive_int, default=3, help="members per ambient conversation (2-8)")
    parser.add_argument("--lines", type=positive_int, default=6, help="lines per ambient conversation")
    parser.add_argument("--probes", type=non_negative_int, default=10, help="overheard-fact probes")
    parser.add_argument("--probe-lines", type=positive_int, default=4,
                        help="conversation lines per probe at most (it stops once the bystander heard the fact "
                             "and the listener answered)")
    parser.add_argument("--probes-at-once", type=positive_int, default=5)
    parser.add_argument("--batch", type=positive_int, default=6, help="items per generation at most")
    parser.add_argument("--linger", type=float, default=0.5,
                        help="seconds a new batch waits for company (all priorities)")
    parser.add_argument("--step-timeout", type=float, default=600.0, help="seconds one generation may take")
    parser.add_argument("--show-generations", action="store_true", help="every generation's raw text on stderr")
    args = parser.parse_args()
    if not 2 <= args.size <= 8:
        parser.error("--size must be 2 to 8")
    try:
        with live_model(args.base_url) as base_url:
            lines, facts, stats, seconds = anyio.run(run, base_url, args)
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    report(args, lines, facts, stats, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
