"""Deprecated alias of :mod:`agent_persistence.runtime.lifecycle`, the turn's entry points.

Importing it warns (``DeprecationWarning``); every name is the lifecycle module's own. It is
removed in a later minor release, as the changelog's deprecation policy says.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import lifecycle

warnings.warn(
    "agent_persistence.runtime.turns is deprecated: import the entry points from agent_persistence.runtime.lifecycle.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(lifecycle, name)


def __dir__() -> list[str]:
    return dir(lifecycle)
