"""Reply cleaning for respond steps: §6.8 and the black-box expectations §9 item 82."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oam_actors.agent.reply import ReplyCleaner


def clean(text: str, label: str = "Mira") -> str:
    cleaner = ReplyCleaner(label)
    cleaner.push(text)
    return cleaner.final()


def stream(text: str, label: str = "Mira") -> list[str]:
    """The visible text after each character, fed one at a time."""
    cleaner = ReplyCleaner(label)
    return [cleaner.push(char) for char in text]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Mira: Welcome, friend! [check_menu → {"ale":3}]', "Welcome, friend!"),
        ('"Hi there"', "Hi there"),
        ("Assistant: Assistant-free text", "Assistant-free text"),
        ("Mirabelle is my cousin.", "Mirabelle is my cousin."),
        ("  \n mira:   Hello", "Hello"),
        ("MIRA: Hello", "Hello"),
        ("**Mira:** Hello", "Hello"),
        ("**Mira**: Hello", "Hello"),
        ("__Mira__: Hello", "Hello"),
        ("Mira: *waves* Hello", "*waves* Hello"),  # emphasis after the label is kept
        ("Mira: Mira: twice", "Mira: twice"),  # one label only
        ("Mira", "Mira"),  # a reply that is only the name
        ("Mira:", ""),
        ("Gorm: Hello", "Gorm: Hello"),  # other speakers are not labels
        ("Hello, Mira: welcome", "Hello, Mira: welcome"),  # only a leading label
        ('Sure. [take_order {"item":"ale","quantity":2} → {"ok":true}] Coming up!', "Sure. Coming up!"),
        ('Here. [read_book → ["a", "b"]]', "Here."),
        ("Here.  Two   spaces.", "Here. Two spaces."),
        ("Line one\nLine two", "Line one\nLine two"),
        ('"Hi" she said, "again"', '"Hi" she said, "again"'),  # four quotes: left alone
        ('"', '"'),
        ('""', ""),
        ("[not a record] but text", "[not a record] but text"),
        ("", ""),
    ],
)
def test_final(text: str, expected: str) -> None:
    assert clean(text) == expected


def test_default_label_is_assistant() -> None:
    assert clean("Assistant: Hi", "Assistant") == "Hi"
    cleaner = ReplyCleaner()
    cleaner.push("assistant: Hi")
    assert cleaner.final() == "Hi"


def test_streaming_never_shows_the_label() -> None:
    text = 'Mira: Welcome, friend! [check_menu → {"ale":3}]'
    visible = stream(text)
    assert all(not part.lower().startswith("mira") for part in visible)
    assert visible[:5] == ["", "", "", "", ""]  # "M" … "Mira:" held back
    assert visible[5] == ""  # "Mira: " — the label is known, nothing after it yet
    assert visible[6] == "W"
    assert visible[-1] == 'Welcome, friend! [check_menu → {"ale":3}]'


@pytest.mark.parametrize(
    "text", ["**Mira:** Hi there", "**Mira**: Hi there", "Assistant: Hi there", "  mira: Hi there"]
)
def test_streaming_bold_and_default_labels(text: str) -> None:
    visible = stream(text)
    assert all(part in ("", "H") or part.startswith("Hi") for part in visible)
    assert visible[-1] == "Hi there"


def test_streaming_releases_text_that_is_not_a_label() -> None:
    visible = stream("Mirabelle is my cousin.")
    assert visible[:4] == ["", "", "", ""]  # "Mira" might still become "Mira:"
    assert visible[4] == "Mirab"
    assert visible[-1] == "Mirabelle is my cousin."
    assert stream("Hello")[0] == "H"


def test_push_accumulates_chunks() -> None:
    cleaner = ReplyCleaner("Mira")
    assert cleaner.push("Mi") == ""
    assert cleaner.push("ra: Wel") == "Wel"
    assert cleaner.push("come.") == "Welcome."
    assert cleaner.final() == "Welcome."


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='Mira:*_ Asistn\n"[]→{}x', max_size=30), st.text(), st.text(max_size=12))
def test_cleaner_never_raises_and_only_cuts_a_prefix(prefix: str, text: str, label: str) -> None:
    cleaner = ReplyCleaner(label)
    pushed = ""
    for char in prefix + text:
        pushed += char
        assert pushed.endswith(cleaner.push(char))
    assert isinstance(cleaner.final(), str)
