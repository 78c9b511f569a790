"""Every code block of the README tour and of the tutorial is a file that ``test_fresh_project.py`` runs.

A block is preceded by an HTML comment naming its file (``<!-- tests/newcomer/project/agents.py -->``,
invisible when rendered) and must equal that file. So the docs cannot drift from what the test
does in a brand-new project: change the file, and the docs must change with it (and the reverse).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = Path(__file__).resolve().parent / "project"
MARKER = re.compile(r"^<!-- (tests/newcomer/project/[\w.-]+) -->$")
FENCE = re.compile(r"^```")


def code_blocks(text: str) -> list[tuple[int, str | None, str]]:
    """(line number, the file named by the marker above it or None, the block's text) for every fenced block."""
    lines = text.splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            start = index
            index += 1
            body = []
            while not FENCE.match(lines[index]):
                body.append(lines[index])
                index += 1
            previous = next((line for line in reversed(lines[:start]) if line.strip()), "")
            marker = MARKER.match(previous.strip())
            blocks.append((start + 1, marker.group(1) if marker else None, "\n".join(body) + "\n"))
        index += 1
    return blocks


def readme_tour() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## A five-minute tour\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## A five-minute tour' section"
    return match.group(1)


DOCS = {"README.md (tour)": readme_tour, **{
    str(path.relative_to(ROOT)): path.read_text for path in sorted((ROOT / "docs" / "tutorial").glob("*.md"))
}}


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_block_is_a_tested_file(doc: str) -> None:
    blocks = code_blocks(DOCS[doc]())
    assert blocks, f"{doc} has no code block"
    for line, name, body in blocks:
        assert name is not None, f"{doc}, block at line {line}: no <!-- tests/newcomer/project/... --> marker above it"
        assert body == (ROOT / name).read_text(), f"{doc}, block at line {line} differs from {name}"


def test_every_tested_file_is_shown_in_the_docs() -> None:
    shown = {name for read in DOCS.values() for _, name, _ in code_blocks(read())}
    files = {str(path.relative_to(ROOT)) for path in SNIPPETS.iterdir() if path.is_file()}
    assert files - shown == set()


def test_a_block_that_differs_from_its_file_is_found() -> None:
    doc = "<!-- tests/newcomer/project/urls.py -->\n```python\nurlpatterns = []\n```\n"
    ((_, name, body),) = code_blocks(doc)
    assert name == "tests/newcomer/project/urls.py"
    assert body != (ROOT / name).read_text()
