"""``agent.words.distinctive_words``: the words that tell what a text is about, shared by the heard
note a question asks about (three letters or more) and a batch answer carrying another NPC's
private knowledge (four letters or more)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oam_actors.agent.words import COMMON_WORDS, distinctive_words, whole_word


def test_words_are_casefolded_runs_of_letters_and_digits_with_a_plural_s_off() -> None:
    assert distinctive_words("The Blacksmith's KEYS, two bridges and sword2!") == {
        "blacksmith", "keys", "bridge", "sword2"}


def test_common_words_and_short_ones_say_nothing() -> None:
    assert distinctive_words("Where are you from? What do you know?") == set()
    assert distinctive_words("Is the ox in the mill?") == {"mill"}  # "ox": two letters
    assert distinctive_words("The red key is under the barrel.", min_length=4) == {"under", "barrel"}


def test_small_talk_every_character_says_tells_nothing() -> None:
    # Another NPC's "Of course." must not look like it carries a note that holds "of course".
    assert distinctive_words("Of course. Anything else? Safe travels, and thanks for the help!", min_length=4) == set()
    assert distinctive_words("The north bridge is safe again.", min_length=4) == {"north", "bridge"}


def test_common_words_count_as_common_in_their_plural_too() -> None:
    assert "thing" in COMMON_WORDS and distinctive_words("things") == set()
    assert distinctive_words("Yours, sir.") == {"sir"}


def test_ignore_leaves_out_the_callers_own_words_as_the_function_spells_them() -> None:
    keys = distinctive_words("player_options ends_conversation")
    assert keys == {"option", "ends", "conversation"}
    assert distinctive_words("Three options end the conversation.", ignore=keys) == {"three", "end"}


@given(st.text(max_size=200), st.integers(min_value=1, max_value=6))
def test_a_longer_minimum_keeps_a_subset_and_nothing_common(text: str, length: int) -> None:
    shorter = distinctive_words(text, min_length=length)
    longer = distinctive_words(text, min_length=length + 1)
    assert longer <= shorter
    assert all(len(word) >= length and word not in COMMON_WORDS for word in shorter)


def test_whole_word_matches_the_word_alone_in_any_case_unless_told_otherwise() -> None:
    assert whole_word("Odo").search("then odo nods")
    assert not whole_word("Odo").search("an odorous barrel")
    assert not whole_word("Odo", ignore_case=False).search("then odo nods")
    assert whole_word("Mr. Bran").search("Ask Mr. Bran, he knows")  # a name's dot is no wildcard
    assert not whole_word("Mr. Bran").search("Ask Mrs Bran")
