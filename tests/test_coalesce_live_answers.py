"""Batch answers Qwen2.5-Coder-1.5B wrote in ``benchmarks/bench_coalesce_live.py`` runs
(``tests/fixtures/coalesce_live/``, as captured), read back per item: what the lenient reader
must take from a real small model's lines, and what it must still send to run alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from oam_actors import GenerationRequest, StepKind
from oam_actors.agent.model import BarkItem, BatchItem, DecisionItem, ItemOption, ReplyItem, StructuredReplyItem, ToolChoiceItem
from oam_actors.models.coalesce import Answer, Unanswered, Why, read_batch

FIXTURES = Path(__file__).parent / "fixtures" / "coalesce_live"
CAST = ("Gorm", "Mira", "Tobin", "Elsa", "Brann", "Hild", "Ulf", "Sela")
DECISIONS = [  # the benchmark's: actor, situation, option ids
    ("Snik", "The player raises a sword at you.", ("attack", "flee", "beg")),
    ("Grak", "A rival clan insults your name.", ("challenge", "ignore", "laugh")),
    ("Vera", "A customer offers half your price.", ("accept", "haggle", "refuse")),
    ("Ods", "You hear a noise behind the barn.", ("investigate", "sleep", "shout")),
    ("Pell", "The forge fire goes out.", ("relight", "hide", "call_master")),
    ("Rusk", "A lone traveller walks by at dusk.", ("stalk", "howl", "retreat")),
    ("Tamsin", "A strange box lies in the road.", ("open", "poke", "fetch_parents")),
    ("Borin", "The tunnel ceiling creaks.", ("dig_on", "brace", "run")),
    ("Liss", "A guard watches the crowd.", ("steal", "wait", "blend_in")),
    ("Hobb", "Crows land on the wheat field.", ("scare", "shoot", "ignore")),
]


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def answers(results: list[Answer | Unanswered]) -> list[Any]:
    return [json.loads(r.text) if r.text.startswith("{") else r.text for r in results if isinstance(r, Answer)]


def test_a_bark_batch_in_quotes_is_every_characters_own_line() -> None:
    requests = [GenerationRequest(kind=StepKind.TEXT, system="", prompt="", item=BarkItem(
        speaker=name, situation="Dawn; the market square is filling up.")) for name in CAST]
    results = read_batch(recorded("barks_market_dawn.txt"), requests)
    assert answers(results) == [
        "We can't wait for the market to open.", "Bread and butter, folks!",
        "I'll have a fresh catch of cod tomorrow morning.", "Stay safe out there.", "I'm glad you're here.",
        "I've got some herbs to sell.", "Thanks for letting me help out.", "Welcome, folks!"]


def test_a_batch_of_ten_decisions_whose_reasons_name_their_own_character() -> None:
    requests = [GenerationRequest(kind=StepKind.STRUCTURED, system="", prompt="", item=DecisionItem(
        actor=actor, situation=situation, options=tuple(ItemOption(i) for i in ids))) for actor, situation, ids in DECISIONS]
    read = answers(read_batch(recorded("decisions_snik_to_hobb.txt"), requests))
    assert [(d["choice"], d["confidence"]) for d in read] == [
        ("attack", 75), ("challenge", 90), ("accept", 90), ("sleep", 80), ("hide", 85), ("retreat", 80),
        ("poke", 80), ("dig_on", 85), ("steal", 75), ("ignore", 70)]
    assert read[0]["reasoning"] == "Snik: The goblin is too small to attack with a sword. He would flee or beg instead."


def test_tool_choices_with_a_line_left_out_answer_the_others_and_send_that_one_alone() -> None:
    tools = {"Gorm": "check_steel", "Mira": "check_oven", "Tobin": "check_catch"}
    requests = [GenerationRequest(kind=StepKind.DECIDE, system="", prompt="", item=ToolChoiceItem(
        talk=ReplyItem(speaker=name, line="Do you have it?", tool_results=(f"{tool} result: in stock",)),
        tools=(f"- {tool}: Look it up. Arguments: {{}}", "- respond: answer the player"), names=(tool,)))
        for name, tool in tools.items()]
    results = read_batch(recorded("tool_choices_one_missing.txt"), requests)
    assert answers(results) == [{"action": "respond", "arguments": {}}, {"action": "check_oven", "arguments": {}}]
    assert results[2] == Unanswered(Why.MISSING, "no line")


def structured(name: str, emotions: tuple[str, ...], options: int, can_end: bool, line: str) -> GenerationRequest:
    talk = ReplyItem(speaker=name, character=f"Role: {name}'s trade.", line=line)
    item = StructuredReplyItem(talk=talk, emotions=emotions, player_options=options, can_end=can_end)
    return GenerationRequest(kind=StepKind.STRUCTURED, system="", prompt="", item=item)


def test_structured_replies_where_the_model_copied_the_first_items_form() -> None:
    # The first item has three options and may end; the model gave every item three options and [end].
    requests = [
        structured("Gorm", ("neutral", "proud", "annoyed"), 3, True, "Can you fix my axe by tonight?"),
        structured("Mira", ("happy", "excited"), 2, True, "What smells so good in here?"),
        structured("Tobin", ("worried", "neutral", "sad"), 0, False, "Will the storm reach the harbour?"),
    ]
    gorm, mira, tobin = read_batch(recorded("structured_gorm_mira_tobin.txt"), requests)
    assert isinstance(gorm, Answer) and json.loads(gorm.text) == {
        "emotion": "annoyed", "line": "No, I can't do that tonight.",
        "player_options": ["I need to repair my forge.", "I'd like to buy some more steel.", "I need to rest for the day."],
        "ends_conversation": True}
    # An emotion not of its own list is no answer (its schema's enum), as from the step alone.
    assert mira == Unanswered(Why.INVALID, "emotion 'cheerful' is not one of its own")
    # Options and [end] its schema has no field for are dropped, as from the step alone's JSON.
    assert isinstance(tobin, Answer) and json.loads(tobin.text) == {
        "emotion": "neutral", "line": "I'm sorry, but the weather is too bad to fish."}


def recorded_batches(name: str) -> list[tuple[str, list[GenerationRequest], str]]:
    """``bench_coalesce_live.py --record`` batches: kind, the items' requests, the answer."""
    batches = []
    for line in recorded(name).splitlines():
        entry = msgspec.json.decode(line)
        items = msgspec.convert(entry["items"], list[BatchItem])
        kind = StepKind.STRUCTURED if entry["kind"] in {"decision", "structuredReply"} else StepKind.TEXT
        batches.append((entry["kind"], [GenerationRequest(kind=kind, system="", prompt="", item=i) for i in items],
                        entry["answer"]))
    return batches


def test_a_structured_batch_answered_with_the_examples_dots_sends_its_item_alone() -> None:
    (_, decisions, decided), (_, replies, replied) = recorded_batches("run_decisions_structured.jsonl")
    assert [json.loads(r.text)["choice"] for r in read_batch(decided, decisions) if isinstance(r, Answer)] == [
        "attack", "challenge", "accept", "sleep", "relight", "retreat"]
    # The model copied the example's "..." for Gorm's options, then wrote nothing for the others.
    assert replied.strip() == "1. Gorm: [proud] I can't do it tonight, sorry. >> ... | ... | ... | [end]"
    assert read_batch(replied, replies) == [Unanswered(Why.INVALID, "no player options")] + \
        [Unanswered(Why.MISSING, "no line")] * 5


def test_a_structured_batch_that_copied_named_placeholders_runs_every_item_alone() -> None:
    # An example with "<reply>" instead of "...": the model wrote "[proud] <reply> >> no >> [end]" for all.
    ((_, replies, replied),) = recorded_batches("structured_named_placeholders.jsonl")
    assert read_batch(replied, replies) == [Unanswered(Why.INVALID, "an emotion without a reply")] * 6
