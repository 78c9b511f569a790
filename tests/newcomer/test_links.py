"""Every relative link of the README, ``docs/`` and the CHANGELOG reaches a file, and its ``#anchor`` a heading.

Anchors are GitHub's, since that is where the docs are read: a heading's text, rendered (code spans
and links reduced to their text), lower-cased, with every character that is not a letter, a digit, a
space, ``-`` or ``_`` dropped and spaces turned into ``-``; the second heading of the same text gets
``-1``, the third ``-2``. Markdown's ``{#anchor}`` heading attributes are not GitHub's (the braces are
dropped and the word stays in the anchor), so a link to one is broken and this test finds it. An
explicit ``<a id="...">`` or ``<a name="...">`` anchor counts too.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: ``[text](target)`` and ``![alt](target)``, the target up to a space (a title) or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose_lines(text: str) -> list[str]:
    """The document's lines outside fenced code blocks (a link or heading in a code block is code)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def rendered(heading: str) -> str:
    """A heading's text as GitHub renders it: code spans, emphasis and links reduced to their text, HTML tags gone."""
    parts = heading.split("`")
    for index in range(0, len(parts), 2):  # outside code spans: links to their text, HTML tags and emphasis gone
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", parts[index])
        parts[index] = re.sub(r"<[^>]+>", "", text).replace("*", "")
    return "".join(parts)


def slug(heading: str) -> str:
    kept = []
    for character in rendered(heading).strip().lower():
        category = unicodedata.category(character)
        if character in " -_" or category[0] in "LN" or category == "Mn":
            kept.append(character)
    return "".join(kept).replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    lines = prose_lines(path.read_text())
    for line in lines:
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    anchors.update(HTML_ANCHOR.findall("\n".join(lines)))
    return anchors


def links_of(path: Path) -> list[str]:
    text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in prose_lines(path.read_text()))
    return LINK.findall(text) + REFERENCE.findall(text)


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links_of(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        shown = destination.relative_to(ROOT) if destination.is_relative_to(ROOT) else destination
        if not destination.exists():
            broken.append(f"{target}: no file {shown}")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors_of(destination):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {shown}")
    return broken


def test_the_anchors_are_githubs() -> None:
    assert slug("## `GET conversations/<id>/reconstruct/` (`conversation-reconstruct`)".lstrip("# ")) == (
        "get-conversationsidreconstruct-conversation-reconstruct"
    )
    assert slug("Activity rows {#activity}") == "activity-rows-activity"
    assert slug("What's new: Django 6.0, *the* [tiers](x.md)") == "whats-new-django-60-the-tiers"


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n## Usage\n```\n## not a heading\n```\n## Usage\n<a id=\"custom\"></a>\n")
    assert anchors_of(page) == {"page", "usage", "usage-1", "custom"}


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[fine](other.md#other) [self](#page) [gone](missing.md) [wrong](other.md#nope) "
        "[web](https://example.com/#x) `[code](nowhere.md)`\n"
    )
    found = broken_links(page)
    assert [entry.split(":")[0] for entry in found] == ["missing.md", "other.md#nope"]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_reaches_its_file_and_heading(path: Path) -> None:
    assert broken_links(path) == []
