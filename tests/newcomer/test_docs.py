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


# --- What a newcomer pastes from the other docs (issue 25, part 3) ---

ALL_DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "clients").glob("*/README.md"))]


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fenced(text: str, language: str) -> list[tuple[int, str]]:
    """(line number, text) of every fenced block of ``language`` (```python, ```ts, ...), indented ones too."""
    blocks, lines, index = [], text.splitlines(), 0
    while index < len(lines):
        opening = re.match(r"^(\s*)```(\w*)\s*$", lines[index])
        if opening:
            indent, body, start = len(opening.group(1)), [], index
            index += 1
            while not re.match(r"^\s*```\s*$", lines[index]):
                body.append(lines[index][indent:])
                index += 1
            if opening.group(2) == language:
                blocks.append((start + 1, "\n".join(body) + "\n"))
        index += 1
    return blocks


@pytest.mark.parametrize("path", ALL_DOCS, ids=doc_id)
def test_no_stale_text(path: Path) -> None:
    """What was true before the websocket layer and the HTTP API shipped, and files that are not in the repository."""
    text = " ".join(path.read_text().split())
    for stale in ("not shipped yet", "is not shipped", "are not shipped"):
        assert stale not in text, f"{doc_id(path)}: {stale!r}"
    for match in re.finditer(r"(?<![\w/.(\[-])([\w./-]*[A-Za-z]\w*\.md)\b(?!\))", text):
        name = match.group(1)
        assert any((base / name).exists() for base in (path.parent, ROOT, ROOT / "docs")), (
            f"{doc_id(path)} refers to {name}, which is not in the repository"
        )


@pytest.mark.parametrize("path", ALL_DOCS, ids=doc_id)
def test_python_blocks_define_what_they_call(path: Path) -> None:
    """A settings block calls nothing a newcomer has not got (``env()`` of django-environ, say)."""
    for line, block in fenced(path.read_text(), "python"):
        if re.search(r"(?<![\w.])env\(", block):
            assert re.search(r"^(def env\(|env = |from \S+ import .*\benv\b)", block, re.M), (
                f"{doc_id(path)}, block at line {line}: calls env(), which nothing defines"
            )


def test_the_status_mapping_in_the_exceptions_reference_is_the_apis() -> None:
    from agent_persistence import exceptions
    from agent_persistence.api.errors import STATUS_BY_ERROR, status_for

    text = (ROOT / "docs" / "reference" / "exceptions.md").read_text()
    sentence = re.search(r"^The HTTP API maps them(.*?)\.\n\n", text, re.S | re.M)
    assert sentence, "docs/reference/exceptions.md: no 'The HTTP API maps them' paragraph"
    documented = {name: int(code) for name, code in re.findall(r"`(\w+)` (\d{3})", sentence.group(1))}
    assert documented == {error.__name__: code for error, code in STATUS_BY_ERROR}
    for name, status in re.findall(r"^\| `(\w+)` \| [^|]+\| [^|]+\| (\d{3}) \|", text, re.M):
        assert status_for(getattr(exceptions, name)()) == int(status), name


def tour_settings(monkeypatch: pytest.MonkeyPatch, **environ: str) -> dict:
    """The settings of a fresh ``startproject`` (what the tour appends to) with the tour's block applied."""
    for name, value in {"AGENT_PERSISTENCE_KEY": "a-key", **environ}.items():
        monkeypatch.setenv(name, value)
    namespace = {"BASE_DIR": Path("/srv/mysite"), "INSTALLED_APPS": ["django.contrib.admin", "django.contrib.staticfiles"],
                 "MIDDLEWARE": ["django.middleware.security.SecurityMiddleware", "django.middleware.common.CommonMiddleware"]}
    exec((SNIPPETS / "settings.py-tpl").read_text(), namespace)
    return namespace


def block_after(path: Path, heading: str, contains: str) -> str:
    text = path.read_text()
    section = text[text.index(heading):]
    return next(block for _, block in fenced(section, "python") if contains in block)


def test_the_postgresql_settings_add_to_the_tours(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = tour_settings(monkeypatch, DB_PASSWORD="secret", REDIS_URL="redis://redis.internal:6379/0")
    exec(block_after(ROOT / "docs" / "howto" / "postgresql-and-redis.md", "## In your project", "DATABASES"), settings)
    assert settings["DATABASES"]["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert settings["DATABASES"]["default"]["PASSWORD"] == "secret"
    assert settings["CHANNEL_LAYERS"]["default"]["CONFIG"]["hosts"][0]["address"] == "redis://redis.internal:6379/0"
    # The tour's agent and key are still there.
    assert settings["AGENT_PERSISTENCE"]["AGENTS"] == {"helper": "myapp.agents.HelperAgent"}
    assert settings["AGENT_PERSISTENCE"]["ENCRYPTION_KEYS"] == ["a-key"]
    assert settings["AGENT_PERSISTENCE"]["REAPER_ENABLED"] is True


BRIDGES = {"pydantic-ai.md": ("support", "SupportAgent"), "openai-agents.md": ("support", "SupportAgent"),
           "langgraph.md": ("orders", "OrderGraph")}


@pytest.mark.parametrize("doc", sorted(BRIDGES))
def test_a_bridge_agent_goes_beside_the_tours(doc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The how-to's agent is a new module next to the tour's ``myapp/agents.py`` and is registered next to ``helper``.

    Written into ``myapp/agents.py`` it would replace the tour's agent (and ``from pydantic_ai import
    Agent`` would shadow ours); ``AGENT_PERSISTENCE = {...}`` would drop the tour's agent and key.
    """
    path = ROOT / "docs" / "howto" / doc
    name, class_name = BRIDGES[doc]
    agent_block = block_after(path, "## Write the agent", f"class {class_name}(")
    module = re.match(r"# (myapp/\w+\.py)\b", agent_block)
    assert module, f"{doc}: the agent's block does not start with the file it goes in"
    assert module.group(1) != "myapp/agents.py", f"{doc}: the agent replaces the tour's myapp/agents.py"
    dotted = module.group(1)[: -len(".py")].replace("/", ".")

    settings = tour_settings(monkeypatch)
    exec(block_after(path, "## Write the agent", "AGENT_PERSISTENCE"), settings)
    assert settings["AGENT_PERSISTENCE"]["AGENTS"] == {"helper": "myapp.agents.HelperAgent", name: f"{dotted}.{class_name}"}
    assert settings["AGENT_PERSISTENCE"]["ENCRYPTION_KEYS"] == ["a-key"]


def node_snippets() -> dict[str, str]:
    """The Node blocks of the frontend how-to (those that import ``ws``), by the file name their first line gives."""
    found = {}
    for path in ALL_DOCS:
        for language in ("js", "ts", "mjs"):
            for line, block in fenced(path.read_text(), language):
                if 'from "ws"' not in block:
                    continue
                first = re.match(r"// ([\w-]+\.mjs): (.*)\n", block)
                assert first and language == "js", (
                    f"{doc_id(path)}, block at line {line}: a Node snippet is a ```js module whose first line says how to run it "
                    f"(// name.mjs: node name.mjs ...)"
                )
                assert re.search(rf"\bnode {re.escape(first.group(1))}\b", first.group(2)), f"{doc_id(path)}, line {line}: {first.group(0)}"
                found[first.group(1)] = block
    return found


def test_the_node_snippets_are_modules_node_runs(tmp_path: Path) -> None:
    import shutil
    import subprocess

    snippets = node_snippets()
    assert set(snippets) == {"follow-with-cookie.mjs", "follow-with-ticket.mjs"}
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed")
    for name, body in snippets.items():
        (tmp_path / name).write_text(body)
        checked = subprocess.run(["node", "--check", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, f"{name}:\n{checked.stderr}"


def test_the_readmes_resume_promise_names_the_reaper_it_depends_on() -> None:
    """The README promises a resume after a lost replica; that needs a reaper, which is off by default."""
    from agent_persistence.conf import DEFAULTS

    readme = (ROOT / "README.md").read_text()
    promise = next(paragraph for paragraph in readme.split("\n- ") if "resumes the turn" in paragraph)
    assert DEFAULTS["REAPER_ENABLED"] is False
    assert "REAPER_ENABLED" in promise and "reap_turns --resume --loop" in promise, promise
    howto = (ROOT / "docs/howto/recover-dead-turns.md").read_text()
    assert '"REAPER_ENABLED": True' in howto and "reap_turns --resume --loop" in howto
