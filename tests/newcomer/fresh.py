"""A brand-new Django project with agent_persistence installed from a wheel, as a user makes one.

- ``build_wheel``: a wheel of this checkout, built from a copy of what an sdist holds
  (``pyproject.toml``, ``README.md``, ``LICENSE``, ``CHANGELOG.md``, ``agent_persistence/``), so nothing of the source tree
  (tests, example project, editable install) can leak into the project.
- ``new_virtualenv``: a real virtualenv of the running interpreter whose dependencies come from
  the project's own virtualenv (symlinked, every distribution except agent_persistence), so
  ``pip install`` of the wheel resolves them offline and installs only agent_persistence; the
  console scripts of those dependencies (``django-admin``, ``daphne``) are recreated for it.
- ``Terminal``: runs the documented shell snippets one after the other as one shell session
  does: ``cd`` and variables carry over from one snippet to the next.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = Path(__file__).resolve().parent / "project"
PACKAGE_PREFIXES = ("agent_persistence", "agent-persistence", "__editable__", "_agent_persistence", "__editable___agent")
CONSOLE_SCRIPTS = {"django-admin": "django", "daphne": "daphne"}
# Variables of the test run that a user's terminal would not have.
SCRUBBED_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL",
                "AGENT_PERSISTENCE_KEY", "AGENT_PERSISTENCE_VAR_DIR", "AGENT_PERSISTENCE_TEST_DB_SUFFIX", "PYTEST_ADDOPTS")


def snippet(name: str, port: int | None = None, **replacements: str) -> str:
    """A documented snippet's text; ``port`` replaces the documented 8000 (a test never assumes a free 8000)."""
    text = (SNIPPETS / name).read_text()
    if port is not None:
        text = text.replace("8000", str(port))
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def build_wheel(workdir: Path) -> Path:
    source = workdir / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "agent_persistence", source / "agent_persistence", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = workdir / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"building the wheel failed:\n{result.stdout}\n{result.stderr}"
    (wheel,) = dist.glob("agent_persistence-*.whl")
    return wheel


def new_virtualenv(workdir: Path) -> Path:
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       check=True, capture_output=True, text=True).stdout.strip()
    )
    dependencies = workdir / "dependencies"
    dependencies.mkdir()
    for source in {Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])}:
        for entry in source.iterdir():
            name = entry.name
            if name.startswith(PACKAGE_PREFIXES) or name.endswith(".pth") or name in ("pip", "setuptools") \
                    or name.startswith(("pip-", "setuptools-")) or (dependencies / name).exists():
                continue
            (dependencies / name).symlink_to(entry)
    (site_packages / "project_dependencies.pth").write_text(f"{dependencies}\n")
    for script, module in CONSOLE_SCRIPTS.items():
        path = venv / "bin" / script
        path.write_text(f'#!/bin/sh\nexec "{python}" -m {module} "$@"\n')
        path.chmod(0o755)
    return venv


class Terminal:
    """One shell session: each snippet is sourced with ``set -euo pipefail``; cwd and variables carry over."""

    def __init__(self, cwd: Path, venv: Path, state_dir: Path, *, activated: bool = True) -> None:
        """``activated=False``: a new terminal, where the virtualenv is not activated yet."""
        self.cwd = cwd
        self.state = state_dir
        self.state.mkdir(parents=True, exist_ok=True)
        env = {name: value for name, value in os.environ.items() if name not in SCRUBBED_ENV and not name.startswith("AP_")}
        path = [entry for entry in env.get("PATH", "").split(os.pathsep) if not entry.startswith(str(ROOT))]
        env["PATH"] = os.pathsep.join([str(venv / "bin"), *path] if activated else path)
        if activated:
            env["VIRTUAL_ENV"] = str(venv)  # what `. .venv/bin/activate` sets
        self.env = env
        self.count = 0

    def _script(self, text: str) -> Path:
        self.count += 1
        path = self.state / f"snippet-{self.count}.sh"
        path.write_text(text)
        return path

    def run(self, text: str, *, stdin: str | None = None, timeout: float = 300) -> str:
        script = self._script(text)
        env_file, pwd_file = self.state / "env", self.state / "pwd"
        command = f'set -euo pipefail; set -a; source "{script}"; set +a; pwd > "{pwd_file}"; env -0 > "{env_file}"'
        result = subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env, input=stdin,
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"snippet failed ({result.returncode}):\n{text}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        self.cwd = Path(pwd_file.read_text().strip())
        self.env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        return result.stdout

    def start(self, text: str, log_name: str) -> "Background":
        script = self._script(text)
        with (self.state / log_name).open("w") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(["bash", "-c", f'set -euo pipefail; source "{script}"'], cwd=self.cwd, env=self.env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return Background(process, self.state / log_name)


class Background:
    """A long-running snippet (a server) in its own process group."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text()

    def wait_http(self, url: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(url, timeout=10).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{url} did not answer in {timeout} s:\n{self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
