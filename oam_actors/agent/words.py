"""Words in texts: the distinctive words that tell what a text is about, and a word's whole-word
pattern (a name in a line). Pure: no I/O.

Two places match texts by their content words, with the same rules: the heard note that a
player's question asks about (``game.memory``, words of three letters or more) and a batch answer
that carries what only another NPC knows (``models.coalesce``, four letters or more: PROTOCOL.md
§10.8).
"""

from __future__ import annotations

import functools
import re

__all__ = ["COMMON_WORDS", "distinctive_words", "whole_word"]

_WORD = re.compile(r"[a-z0-9]+")


def _singular(word: str) -> str:
    """``word`` without a plural ``s`` (``bridges`` is ``bridge``); a word of four letters or
    fewer keeps it (``this``, ``was``, ``keys``)."""
    return word.removesuffix("s") if len(word) > 4 else word


COMMON_WORDS = frozenset(_singular(word) for word in """
about after again also anyone anything because been before come could does doing down from give going good
have hear heard here into just know knew like listen look make many mine more much need nothing only other ours
over overheard please really right said same says should some someone something sure tell than that their them
then there these they thing think this those today told tomorrow very want well were what when where which
while whom whose will with would yesterday your yours player
all and any are but can did for get got had has her him his how its let may not now off one our out own saw say
see she the too two use was way who why yes yet you
course else farewell hello help indeed maybe okay perhaps safe sorry thank travel welcome""".split())
"""Words that say nothing of what a text is about (as :func:`distinctive_words` spells them). The
last line is small talk every character says (``Of course.``, ``Anything else?``, ``Safe
travels.``): counted as telling, another NPC's ``Of course`` in a batch looked like it carried a
note holding ``of course``, and 8 % of a farm's batched replies beside conversations ran again
alone."""


def distinctive_words(text: str, *, min_length: int = 3, ignore: frozenset[str] = frozenset()) -> frozenset[str]:
    """The words of ``text`` that tell what it is about: its runs of letters and digits,
    casefolded, a plural ``s`` off (see :func:`_singular`), at least ``min_length`` long, and
    neither in :data:`COMMON_WORDS` nor in ``ignore`` (words the caller's own texts always hold,
    spelled as this function returns them)."""
    words = (_singular(word) for word in _WORD.findall(text.casefold()))
    return frozenset(w for w in words if len(w) >= min_length and w not in COMMON_WORDS and w not in ignore)


# A crowd's names are many more than ``re``'s own cache of 512 holds (it thrashed: compiling them
# took about a fifth of a conversation farm's CPU under cProfile): each one's pattern is kept here.
@functools.lru_cache(maxsize=8192)
def whole_word(word: str, *, ignore_case: bool = True) -> re.Pattern[str]:
    """The pattern of ``word`` as a whole word (no letter or digit right before or after it)."""
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE if ignore_case else 0)
