"""Every relative link in README.md and docs/*.md resolves: to a file of the repository, and,
with a ``#fragment``, to a heading of that file (GitHub's anchors). No link leaves the
repository through ``..`` (a reader of the project has only the project)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)]*)\)")
# A target is one word, optionally followed by a quoted title; anything else is not a link.
TARGET = re.compile(r'(\S+)(?:\s+"[^"]*")?')
FENCE = re.compile(r"^(```|~~~)")


def links(text: str) -> list[str]:
    """Link targets outside code blocks and inline code."""
    found, in_code = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if not in_code:
            found += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return found


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercased, punctuation but '-' and '_' dropped, spaces to
    '-', a repeated heading numbered."""
    seen: dict[str, int] = {}
    result, in_code = set(), False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    broken = []
    for written in links(page.read_text(encoding="utf-8")):
        well_formed = TARGET.fullmatch(written.strip())
        if not well_formed:
            broken.append(f"{written} (not a link target)")
            continue
        target = well_formed.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if root not in resolved.parents and resolved != root:
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif (
            fragment
            and resolved.suffix == ".md"
            and fragment not in anchors(resolved.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path):
    assert broken_links(page) == []


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Real heading\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#real-heading) [ok2](other.md#twice-1) [gone](missing.md) "
        "[nohead](other.md#nope) `[code](ignored.md)` [out](../x.md)\n"
        '[titled](other.md "Other") [prose](the end of this page)\n'
        "```\n[fenced](ignored.md)\n```\n"
    )
    (tmp_path.parent / "x.md").write_text("# x\n")
    assert broken_links(page, root=tmp_path) == [
        "missing.md (no such file)",
        "other.md#nope (no such heading)",
        "../x.md (outside the repository)",
        "the end of this page (not a link target)",
    ]


def test_the_readme_is_a_front_door():
    """Issue 34: the README stays short; depth lives in docs/."""
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
