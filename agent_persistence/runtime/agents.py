"""The agent API: the base class an application implements, and the registry of agents.

Register agents by import path in settings::

    AGENT_PERSISTENCE = {"AGENTS": {"support": "myapp.agents.SupportAgent"}}

An agent is a class with an ``async def run(self, turn)`` method; ``turn`` is a
:class:`~agent_persistence.runtime.turn.Turn`. The runtime constructs one
instance per run, so instance attributes do not survive a crash: keep what must
survive in ``turn.state`` (checkpointed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from ..conf import app_settings
from ..exceptions import Validation

if TYPE_CHECKING:
    from .turn import Turn


class Agent:
    """Base class of agents.

    ``run`` may stream text (``turn.stream``), call tools (``await turn.tool``),
    ask a person (``await turn.interrupt``) and keep its working state in
    ``turn.state``. It is re-driven from the last checkpoint after a crash or
    an answered interrupt, with ``turn.resumed`` true: completed tool calls
    return their recorded results and text already checkpointed is restored.
    """

    #: The name the agent is registered under (set by the registry).
    name: str = ""

    async def run(self, turn: "Turn") -> None:
        raise NotImplementedError("Agents implement `async def run(self, turn)`.")


def agent_names() -> list[str]:
    return sorted(app_settings.AGENTS)


def get_agent(name: str) -> Agent:
    """A new instance of the agent registered as ``name``; Validation when there is none."""
    path = app_settings.AGENTS.get(name) if isinstance(name, str) else None
    if path is None:
        raise Validation(f"No agent is registered as {name!r}.", code="unknown_agent", field="agent")
    agent_class: Any = import_string(path)
    agent = agent_class()
    agent.name = name
    return agent
