"""``npm ci`` for the suite's Node folders, once per lockfile, safe with runs side by side.

CI runs its legs side by side in one checkout (``.ci/run``), so two test sessions may reach the
same folder's install at once; ``npm ci`` removes ``node_modules`` first, which would pull the
packages from under the other run's vitest. The install holds an exclusive lock on a file beside
the folder's lockfile in the temporary folder, and a stamp in ``node_modules`` records the
lockfile it installed, so later sessions (and the second of two racing ones) skip it.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import tempfile
from pathlib import Path

STAMP_NAME = ".agent_persistence_lock_sha256"


def npm_ci(folder: Path, env: dict[str, str] | None = None, timeout: float = 600) -> None:
    """Install ``folder``'s packages from its lockfile unless they already match it."""
    digest = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    stamp = folder / "node_modules" / STAMP_NAME
    lock_path = Path(tempfile.gettempdir()) / f"agent_persistence_npm_{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest:
            return
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, f"npm ci in {folder} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        stamp.write_text(digest)
