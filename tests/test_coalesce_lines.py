"""Coalesced lines of conversations among NPCs (unlabelled reply items): a form of their own,
``3. [emotion] words``, without the speaker's name that each item's heading already gives, read
back per item with the same attribution checks as a talk's reply."""

from __future__ import annotations

from random import Random

from oam_actors import GenerationRequest, StepKind
from oam_actors.agent.model import ReplyItem, estimate_tokens
from oam_actors.models.coalesce import (
    LINE_TASK,
    REPLY_TASK,
    Answer,
    Unanswered,
    Why,
    batch_key,
    batch_request,
    read_batch,
)
from oam_actors.models.device.responder import respond

NAMES = ("Gorm", "Mira", "Tobin")


def line(name: str, last: str = "Grain is dear this year.", *, unlabelled: bool = True) -> GenerationRequest:
    item = ReplyItem(speaker=name, character="Role: a villager.", conversation=("Elsa: Morning.",), line=last,
                     user_label="Brann", sentences=1, unlabelled=unlabelled)
    return GenerationRequest(kind=StepKind.RESPOND, system=f"You play {name}.", prompt=last, item=item,
                             priority="background")


def test_lines_have_a_key_and_a_form_of_their_own() -> None:
    assert batch_key(line("Gorm")) == batch_key(line("Mira")) != batch_key(line("Gorm", unlabelled=False))
    batch = batch_request([line(n) for n in NAMES])
    assert batch.prompt.endswith(LINE_TASK) and REPLY_TASK not in batch.prompt
    assert "1. [happy] ...\n2. [neutral] ..." in batch.system
    assert "Conversation 2: Mira (at most 1 sentence)" in batch.prompt  # the heading names the speaker
    assert "Brann: Grain is dear this year." in batch.prompt


def test_unlabelled_answers_are_read_per_item_with_their_emotion() -> None:
    requests = [line(n) for n in NAMES]
    text = "1. [angry] Prices are theft.\n2. Mira: [happy] I grow my own.\n3. [sad] Gorm: We will starve."
    results = read_batch(text, requests)
    assert results[:2] == [Answer("[angry] Prices are theft."), Answer("[happy] I grow my own.")]
    assert isinstance(results[2], Unanswered) and results[2].why is Why.MISATTRIBUTED  # speaks as Gorm


def test_the_simulated_phone_answers_lines_without_the_speakers_name() -> None:
    requests = [line(n) for n in NAMES]
    batch = batch_request(requests)
    text = respond(batch.system, batch.prompt, Random(1))
    assert not any(name + ":" in text for name in NAMES)
    results = read_batch(text, requests)
    assert all(isinstance(r, Answer) and r.text.startswith("[neutral] ") for r in results)
    # what the batch wrote per line is the line, its tag and its number: nothing else
    answers = [r.text for r in results if isinstance(r, Answer)]
    assert estimate_tokens(text) <= sum(estimate_tokens(a) for a in answers) + 2 * len(answers)


def test_labels_the_model_wraps_or_borrows_are_read_as_labels() -> None:
    """Seen on the live model: ``<Mira>:`` is the speaker's own label; a line labelled as someone
    outside the batch, with an emotion tag after the label, speaks as that character; a tag at
    the end goes to the front."""
    requests = [line(n) for n in NAMES]
    text = "1. <Gorm>: [excited] Pim is safe now.\n2. Brann: [excited] You found the key!\n3. I'll look around. [angry]"
    results = read_batch(text, requests)
    assert results[0] == Answer("[excited] Pim is safe now.")
    assert isinstance(results[1], Unanswered) and results[1].why is Why.MISATTRIBUTED
    assert results[2] == Answer("[angry] I'll look around.")


def test_a_conversation_line_wrapped_in_its_own_label_is_kept_without_it() -> None:
    from oam_actors.game.conversation import check_line

    assert check_line("<Hild>: I'm so happy!", "Hild", ["Brann"]) == "I'm so happy!"
    assert check_line("(Brann): Two days.", "Hild", ["Brann"]) is None
