"""Every relative link of README.md and docs/ reaches a file, and its ``#anchor`` a heading there.

Anchors are GitHub's: a heading lower-cased, its punctuation dropped but
``-`` and ``_``, spaces made ``-``; a repeated heading gets ``-1``, ``-2``.
Headings inside fenced code blocks are not headings.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")
HEADING = re.compile(r"#{1,6} (.*)")


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Return the anchors of ``page``'s headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            name = slug(match.group(1))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    broken = []
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        linked = (page.parent / target) if target else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}#{anchor}: no such heading")
    return broken


def test_the_anchors_are_githubs():
    assert slug("On a Cluster: one slot") == "on-a-cluster-one-slot"
    assert slug("`gcra` and `sliding_window`") == "gcra-and-sliding_window"
    assert slug("Measured: 1,000,000 keys") == "measured-1000000-keys"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_link_reaches_its_heading(page):
    assert broken_links(page) == []
