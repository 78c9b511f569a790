"""What a release holds: the wheel built from the files an sdist holds, as ``fresh.build_wheel`` builds it.

- ``py.typed`` (PEP 561) and the ``LICENSE`` are in the wheel, and the licence is the one declared;
- the version is written once (``agent_persistence.__version__``) and the wheel's metadata carries it;
- the classifiers name the Django and Python versions CI runs (Django 5.2 LTS and 6.x; Python 3.11-3.13);
- ``CHANGELOG.md`` follows Keep a Changelog, states the versioning and deprecation policy and has
  an entry for the current version;
- the package is not on PyPI or npm: every doc that shows the registry install also shows the
  install from a checkout (pip) or from a packed tarball (npm).
"""

from __future__ import annotations

import email
import os
import re
import tomllib
import zipfile
from pathlib import Path

import pytest

import agent_persistence
from tests.newcomer.fresh import build_wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel ``.ci/package`` built and installed (its path in ``AGENT_PERSISTENCE_WHEEL``), else one of this checkout."""
    built = os.environ.get("AGENT_PERSISTENCE_WHEEL")
    with zipfile.ZipFile(built or build_wheel(tmp_path_factory.mktemp("wheel"))) as archive:
        yield archive


def metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_wheel_holds_py_typed_and_the_license(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert "agent_persistence/py.typed" in names
    licenses = [name for name in names if re.search(r"\.dist-info/licenses/LICENSE$", name)]
    assert licenses, names
    assert wheel.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    info = metadata(wheel)
    assert info["License-Expression"] == "BSD-3-Clause"
    assert info.get_all("License-File") == ["LICENSE"]


def test_the_license_file_is_the_declared_license() -> None:
    assert pyproject()["project"]["license"] == "BSD-3-Clause"
    text = " ".join((ROOT / "LICENSE").read_text().split())
    assert text.startswith("BSD 3-Clause License Copyright (c)")
    for clause in (
        "1. Redistributions of source code must retain the above copyright notice",
        "2. Redistributions in binary form must reproduce the above copyright notice",
        "3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or promote",
    ):
        assert clause in text
    package = (ROOT / "clients" / "typescript" / "package.json").read_text()
    assert '"license": "BSD-3-Clause"' in package


def test_the_version_is_written_once(wheel: zipfile.ZipFile) -> None:
    project = pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agent_persistence.__version__"}
    assert metadata(wheel)["Version"] == agent_persistence.__version__
    package = (ROOT / "clients" / "typescript" / "package.json").read_text()
    assert f'"version": "{agent_persistence.__version__}"' in package, "the TypeScript client is released with the same version"


def test_the_classifiers_name_what_ci_runs(wheel: zipfile.ZipFile) -> None:
    classifiers = set(metadata(wheel).get_all("Classifier"))
    django = {item.rsplit(" :: ", 1)[1] for item in classifiers if re.fullmatch(r"Framework :: Django :: [\d.]+", item)}
    python = {item.rsplit(" :: ", 1)[1] for item in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", item)}
    assert django == {"5.2", "6.0", "6.1"}
    assert python == {"3.11", "3.12", "3.13"}
    assert pyproject()["project"]["requires-python"] == ">=3.11"
    assert "Django>=5.2,<7" in pyproject()["project"]["dependencies"]
    assert "Typing :: Typed" in classifiers


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text and "https://semver.org/spec/v2.0.0.html" in text
    assert re.search(r"^## \[Unreleased\]$", text, re.M)
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert releases and releases[0] == agent_persistence.__version__
    for heading in ("## Versioning", "## Deprecation policy"):
        assert re.search(rf"^{heading}$", text, re.M), heading
    sections = set(re.findall(r"^### (\w+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "clients").glob("*/README.md"))]


REGISTRY_PIP = re.compile(r"""pip install ["']agent-persistence\[([\w,-]+)\]["']""")
REGISTRY_NPM = re.compile(r"npm install @agent-persistence/client")


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_registry_install_is_shown_with_the_install_from_a_checkout(path: Path) -> None:
    text = path.read_text()
    for extra in REGISTRY_PIP.findall(text):
        assert f"pip install '/path/to/agent_persistence[{extra}]'" in text, (
            f"{path.relative_to(ROOT)} shows pip install of agent-persistence[{extra}] from PyPI, where it is not "
            f"published, without the install from a checkout"
        )
    if REGISTRY_NPM.search(text):
        assert re.search(r"npm install [^\s`]*agent-persistence-client-[^\s`]*\.tgz", text), (
            f"{path.relative_to(ROOT)} shows npm install of @agent-persistence/client from npm, where it is not "
            f"published, without the install of a packed tarball"
        )
