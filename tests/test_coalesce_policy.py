"""The pure coalescing policy: what may be combined, packing under the backend's limits, the
batch prompt, reading a batch's answer back per item (lenient numbering, per-item checks,
attribution), and how long NPC work lingers (adaptive, on a virtual clock's times)."""

from __future__ import annotations

import json

import msgspec
import pytest

from oam_actors.agent.model import (
    BarkItem,
    DecisionItem,
    GenerationRequest,
    ItemOption,
    ModelCapabilities,
    Sampling,
    StepKind,
    ToolSpec,
)
from oam_actors.models.coalesce import (
    ADAPTIVE_LINGER,
    Answer,
    CoalesceSettings,
    QueuePressure,
    Unanswered,
    Why,
    batch_key,
    batch_request,
    pack,
    read_batch,
)

NAMES = ("Gorm", "Mira", "Old Tobin")


def bark(name: str, situation: str = "Dawn in the square.", **fields: object) -> GenerationRequest:
    item = BarkItem(speaker=name, character="Role: a villager.", situation=situation)
    return GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt="Situation: …",
                             priority="background", item=item, **fields)  # type: ignore[arg-type]


def decision(actor: str, *ids: str, situation: str = "A goblin blocks the road.") -> GenerationRequest:
    item = DecisionItem(actor=actor, situation=situation, options=tuple(ItemOption(i, f"do {i}") for i in ids))
    return GenerationRequest(kind=StepKind.STRUCTURED, system="You decide.", prompt="Options: …",
                             priority="decision", item=item)


BARKS = [bark(n) for n in NAMES]


# --- what may be combined -------------------------------------------------------------------------


def test_steps_of_one_kind_priority_and_sampling_share_a_key() -> None:
    assert batch_key(bark("Gorm")) == batch_key(bark("Mira"))
    assert batch_key(bark("Gorm")) != batch_key(decision("Snik", "attack", "flee"))
    assert batch_key(bark("Gorm")) != batch_key(bark("Mira", temperature=0.9))
    assert batch_key(bark("Gorm")) != batch_key(bark("Mira", sampling=Sampling(top_k=1)))


@pytest.mark.parametrize("request_", [
    GenerationRequest(kind=StepKind.RESPOND, system="s", prompt="p"),  # no item: not ours to combine
    bark("Gorm", is_repair=True),  # a repair runs as the step it repairs
    bark("Gorm", tools=(ToolSpec("look", "Look around.", {}),)),
    decision("Snik", "run away", "stay"),  # an id with a space cannot be read back from a line
    decision("Snik", "a|b", "c"),
    decision("Snik", "attack", "Attack"),  # ids that differ only in case
    decision("Snik", *[f"o{n}" for n in range(13)]),  # too many options to share a prompt
])
def test_a_step_that_cannot_be_combined_has_no_key(request_: GenerationRequest) -> None:
    assert batch_key(request_) is None


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        CoalesceSettings(max_items=0)
    with pytest.raises(ValueError):
        CoalesceSettings(linger_seconds=-1.0)
    with pytest.raises(ValueError, match="time_scale"):
        CoalesceSettings(time_scale=0.0)


# --- lingering ------------------------------------------------------------------------------------


def test_npc_work_lingers_one_backend_second_only_while_its_priority_queues() -> None:
    settings = CoalesceSettings()
    assert settings.adaptive and ADAPTIVE_LINGER == 1.0
    assert settings.linger_for("background", queueing=True) == settings.linger_for("decision", queueing=True) == 1.0
    assert settings.linger_for("background", queueing=False) == 0.0  # free capacity: a lone bark goes at once
    assert settings.linger_for("dialogue", queueing=True) == 0.0  # a player's dialogue never lingers


def test_the_adaptive_linger_and_what_counts_as_queueing_scale_with_the_backends_time() -> None:
    farm = CoalesceSettings(time_scale=0.1)  # a farm running ten times as fast: a phone second is 0.1 s
    assert farm.linger_for("background", queueing=True) == pytest.approx(0.1)
    assert farm.queued(0.06) and not farm.queued(0.04)  # half a phone second of waiting for admission
    assert CoalesceSettings().queued(0.6) and not CoalesceSettings().queued(0.4)
    fading, held = farm.pressure(), farm.pressure()
    for pressure in (fading, held):
        pressure.record(0.0, queued=True)
        pressure.record(0.05, queued=True)
    assert not fading.queueing(0.5)  # two phone seconds fade a step by half (never seen lingering: no hold)
    assert held.queueing(0.1) and held.queueing(3.0) and not held.queueing(3.2)  # held 30 phone seconds
    slow = CoalesceSettings().pressure()
    slow.record(0.0, queued=True)
    slow.record(0.05, queued=True)
    assert slow.queueing(0.5)  # in real time, half a second is a quarter of a half-life


def test_a_fixed_linger_or_none_overrides_the_adaptive_one_but_never_for_dialogue() -> None:
    fixed, never = CoalesceSettings(linger_seconds=0.3), CoalesceSettings(linger_seconds=0.0)
    assert not fixed.adaptive and not never.adaptive
    assert fixed.linger_for("background") == fixed.linger_for("decision", queueing=True) == 0.3
    assert never.linger_for("background", queueing=True) == 0.0
    assert fixed.linger_for("dialogue", queueing=True) == 0.0
    assert CoalesceSettings(dialogue_linger_seconds=0.2).linger_for("dialogue") == 0.2


def test_queue_pressure_holds_while_recent_steps_queued_and_fades_when_capacity_is_free() -> None:
    pressure = QueuePressure(half_life=2.0)
    assert not pressure.queueing(0.0)  # nothing seen: free capacity
    pressure.record(0.0, queued=True)
    assert pressure.queueing(0.0)  # one step had to queue: the next lingers
    for at in (0.5, 1.0, 1.5):
        pressure.record(at, queued=True)
    assert pressure.queueing(2.0)
    for at in (2.0, 2.1, 2.2, 2.3, 2.4, 2.5):  # the backend admits at once again
        pressure.record(at, queued=False)
    assert not pressure.queueing(2.5)
    pressure.record(3.0, queued=True)
    assert not pressure.queueing(3.0)  # one wait among steps that went at once is no shortage


def test_queue_pressure_fades_when_steps_stop_coming() -> None:
    pressure = QueuePressure(half_life=2.0)
    for n in range(50):
        pressure.record(n / 10, queued=True)  # quota short for five seconds, every step queued
    assert pressure.queueing(5.0) and pressure.queueing(10.0)
    assert not pressure.queueing(5.0 + 2.0 * 6)  # idle six half-lives: a lone step goes at once


def test_queue_pressure_once_lingering_holds_for_a_quota_window_after_the_last_shortage() -> None:
    pressure = QueuePressure(half_life=2.0, hold=60.0)
    assert not pressure.queueing(0.0)
    for at in (0.0, 0.5, 1.0):
        pressure.record(at, queued=True)
    assert pressure.queueing(1.0)  # enters: most recent steps queued
    for n in range(40):  # lingering batches are admitted at once: the share falls to nothing
        pressure.record(1.0 + n / 2, queued=False)
    assert pressure.queueing(30.0) and pressure.queueing(60.9)  # stays: the window spent is not back yet
    pressure.record(40.0, queued=True)  # one wait among many that went at once: no new shortage
    assert not pressure.queueing(61.0)  # leaves a window after the shortage it last saw
    for at in (70.0, 70.2, 70.4):
        pressure.record(at, queued=True)
    assert pressure.queueing(70.4) and pressure.queueing(130.0) and not pressure.queueing(130.5)  # enters again


# --- packing --------------------------------------------------------------------------------------


def test_packing_stops_at_the_batch_size() -> None:
    waiting = [bark(f"Villager{n}") for n in range(10)]
    assert pack(waiting, ModelCapabilities(), 6) == 6
    assert pack(waiting[:3], ModelCapabilities(), 6) == 3
    assert pack(waiting, ModelCapabilities(), 1) == 1


def test_packing_keeps_the_prompt_and_answers_within_the_context() -> None:
    long = [bark(f"Villager{n}", situation="The market is loud. " * 40) for n in range(6)]
    one = batch_request(long[:2])
    per_item = (len(one.prompt) + len(one.system)) // 4 // 2
    small = ModelCapabilities(context_size=per_item * 4, max_output_tokens=4096)
    assert 1 < pack(long, small, 6) < 6
    assert pack(long, ModelCapabilities(context_size=200), 6) == 1  # the first always goes, alone


def test_packing_keeps_the_answers_within_the_output_limit() -> None:
    waiting = [bark(f"Villager{n}") for n in range(6)]
    assert pack(waiting, ModelCapabilities(max_output_tokens=140), 6) == 5
    assert pack(waiting, ModelCapabilities(max_output_tokens=100), 6) == 3


NANO = ModelCapabilities(context_size=4000, max_output_tokens=256)


def test_ten_barks_or_eight_decisions_fit_a_nano_phones_output_limit_and_ten_is_the_default() -> None:
    barks = [bark(f"Villager{n}") for n in range(12)]
    decisions = [decision(f"Goblin{n}", "attack", "flee", "beg") for n in range(12)]
    assert CoalesceSettings().max_items == 10
    assert pack(barks, NANO, 12) == 10  # an eleventh bark's answer would not fit 256 tokens
    assert pack(decisions, NANO, 12) == 8  # a decision's line is longer (its option, confidence, reason)


def test_a_batch_may_write_past_its_estimate_within_the_backends_limits() -> None:
    four = [bark(f"Villager{n}") for n in range(4)]
    estimate = next(limit for limit in range(1, 4096) if pack(four, ModelCapabilities(max_output_tokens=limit), 6) == 4)
    roomy = batch_request(four, capabilities=ModelCapabilities(context_size=8192, max_output_tokens=4096))
    assert roomy.max_output_tokens == estimate * 3 // 2  # half as much again as packing counted
    capped = batch_request(four, capabilities=ModelCapabilities(max_output_tokens=estimate + 5))
    assert capped.max_output_tokens == estimate + 5  # the backend's own limit
    prompt = (len(roomy.system) + 3) // 4 + (len(roomy.prompt) + 3) // 4
    tight = batch_request(four, capabilities=ModelCapabilities(context_size=prompt + estimate + 3))
    assert tight.max_output_tokens == estimate + 3  # what the context leaves
    assert batch_request(four, capabilities=ModelCapabilities(context_size=prompt)).max_output_tokens == estimate


# --- the batch prompt -----------------------------------------------------------------------------


def test_the_batch_prompt_numbers_each_item_under_one_instruction_block() -> None:
    request = batch_request(BARKS)
    assert request.system.count("You write short ambient lines") == 1
    assert "exactly 3 lines" in request.system and "<number>. <name>: <line>" in request.system
    assert [line for line in request.prompt.splitlines() if line.startswith("Character ")] == [
        "Character 1: Gorm", "Character 2: Mira", "Character 3: Old Tobin"]
    assert request.prompt.count("Situation: Dawn in the square.") == 3
    assert (request.priority, request.kind, request.item) == ("background", StepKind.TEXT, None)
    decisions = batch_request([decision("Snik", "attack", "flee"), decision("Grak", "hide", "shout")])
    assert "Options: attack = do attack; flee = do flee" in decisions.prompt
    assert "Decision 2, for Grak" in decisions.prompt


# --- reading the answer back ----------------------------------------------------------------------


def texts(results: list[Answer | Unanswered]) -> list[str | Why]:
    return [r.text if isinstance(r, Answer) else r.why for r in results]


@pytest.mark.parametrize("answer", [
    "1. Gorm: Steel today.\n2. Mira: Fresh bread!\n3. Old Tobin: My knees ache.",
    "1: Gorm: Steel today.\n2: Mira: Fresh bread!\n3: Tobin: My knees ache.",
    "[1] Steel today.\n[2] \"Fresh bread!\"\n[3] **Old Tobin:** My knees ache.",
    "Here you go:\nItem 1 - Gorm: Steel today.\n\n  2) Mira: Fresh bread!\n- 3. Old Tobin: My knees ache.\nDone.",
    "1.\nGorm: Steel today.\n2.\nFresh bread!\n3. Old Tobin: My knees ache.",
])
def test_numbered_lines_are_read_leniently(answer: str) -> None:
    assert texts(read_batch(answer, BARKS)) == ["Steel today.", "Fresh bread!", "My knees ache."]


def test_missing_and_doubled_items_are_not_answered() -> None:
    answer = "1. Gorm: Steel today.\n3. Old Tobin: My knees ache.\n3. Old Tobin: Again."
    assert texts(read_batch(answer, BARKS)) == ["Steel today.", Why.MISSING, Why.INVALID]


def test_garbage_answers_nothing() -> None:
    assert texts(read_batch('[{"line": "Steel today."', BARKS)) == [Why.MISSING] * 3
    assert texts(read_batch("", BARKS)) == [Why.MISSING] * 3


def test_a_cut_off_answer_does_not_trust_its_last_line() -> None:
    answer = "1. Gorm: Steel today.\n2. Mira: Fresh br"
    assert texts(read_batch(answer, BARKS, truncated=True)) == ["Steel today.", Why.MISSING, Why.MISSING]


def test_a_line_for_another_character_is_never_delivered() -> None:
    # The model swapped Gorm and Mira: neither line reaches the wrong NPC.
    answer = "1. Mira: Fresh bread!\n2. Gorm: Steel today.\n3. Old Tobin: My knees ache."
    assert texts(read_batch(answer, BARKS)) == [Why.MISATTRIBUTED, Why.MISATTRIBUTED, "My knees ache."]


def test_a_line_naming_another_character_of_the_batch_is_misattributed() -> None:
    answer = "1. Gorm: Mira, your bread burns!\n2. Mira: Fresh bread!\n3. Old Tobin: Ask Gorm."
    assert texts(read_batch(answer, BARKS)) == [Why.MISATTRIBUTED, "Fresh bread!", Why.MISATTRIBUTED]
    tobin = "1. Gorm: Tobin is late again.\n2. Mira: Fresh bread!\n3. Tobin: Fine day."
    assert texts(read_batch(tobin, BARKS))[0] is Why.MISATTRIBUTED  # a short name counts too


def test_a_name_in_the_items_own_situation_may_be_said() -> None:
    barks = [bark("Gorm", "Mira walks past the forge."), bark("Mira")]
    answer = "1. Gorm: Morning, Mira!\n2. Mira: Fresh bread!"
    assert texts(read_batch(answer, barks)) == ["Morning, Mira!", "Fresh bread!"]


def test_an_empty_line_is_invalid() -> None:
    assert texts(read_batch("1. Gorm: \"\"\n2. Mira: Hi.\n3. Old Tobin: Eh.", BARKS))[0] is Why.INVALID


DECISIONS = [decision("Snik", "attack", "flee"), decision("Grak", "hide", "shout")]


def decided(results: list[Answer | Unanswered]) -> list[dict[str, object] | Why]:
    return [json.loads(r.text) if isinstance(r, Answer) else r.why for r in results]


def test_a_decision_line_becomes_the_decision_steps_json() -> None:
    answer = "1. flee | 78 | Snik is timid.\n2. `SHOUT` | 90% | Grak wants help."
    assert decided(read_batch(answer, DECISIONS)) == [
        {"reasoning": "Snik is timid.", "choice": "flee", "confidence": 78},
        {"reasoning": "Grak wants help.", "choice": "shout", "confidence": 90},
    ]


def test_a_decision_line_without_separators_is_read_too() -> None:
    answer = "1. I would flee (80), too dangerous.\n2. hide | 40 | ..."
    assert decided(read_batch(answer, DECISIONS)) == [
        {"reasoning": "I would, too dangerous.", "choice": "flee", "confidence": 80},
        {"reasoning": "", "choice": "hide", "confidence": 40},
    ]


def test_a_decision_must_choose_one_of_its_own_options() -> None:
    # Item 1 answered with item 2's option (mixed up), item 2 with two options at once.
    answer = "1. hide | 70 | safer\n2. hide or shout | 60 | unsure"
    assert decided(read_batch(answer, DECISIONS)) == [Why.INVALID, Why.INVALID]
    named = "1. flee | 70 | Grak will cover him.\n2. hide | 60 | quiet"
    assert decided(read_batch(named, DECISIONS))[0] is Why.MISATTRIBUTED


def test_results_are_plain_structs() -> None:
    result = read_batch("1. Gorm: Hi.", BARKS[:1])[0]
    assert msgspec.to_builtins(result) == {"text": "Hi."}
