"""Batch answers Qwen2.5-Coder-1.5B wrote in ``benchmarks/bench_coalesce_live.py`` runs
(``tests/fixtures/coalesce_live/``, as captured), read back per item: what the lenient reader
must take from a real small model's lines, and what it must still send to run alone."""

from __future__ import annotations

import json
from pathlib import Path

from oam_actors import GenerationRequest, StepKind
from oam_actors.agent.model import ReplyItem, StructuredReplyItem
from oam_actors.models.coalesce import Answer, Unanswered, Why, read_batch

FIXTURES = Path(__file__).parent / "fixtures" / "coalesce_live"


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


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
