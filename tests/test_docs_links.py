"""Every relative link in README.md and docs/*.md names a file that exists and, with ``#anchor``,
a heading of that file (anchors as GitHub makes them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def _links() -> list[tuple[str, Path, str]]:
    found = []
    for page in PAGES:
        text = _FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in _LINK.findall(text):
            if not re.match(r"[a-z]+:", target):
                found.append((f"{page.relative_to(REPO)} → {target}", page, target))
    return found


LINKS = _links()


def test_the_pages_link_each_other() -> None:
    assert len(LINKS) > 50


@pytest.mark.parametrize(("name", "page", "target"), LINKS, ids=[link[0] for link in LINKS])
def test_link_resolves(name: str, page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{name}: no file {file.relative_to(REPO)}"
    if anchor:
        assert file.suffix == ".md", f"{name}: an anchor into a file that is not Markdown"
        assert anchor in _anchors(file), f"{name}: no heading #{anchor} in {file.relative_to(REPO)}"
