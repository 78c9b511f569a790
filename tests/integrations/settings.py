"""Settings of the bridges' turn processes: the test settings plus the scripted framework agents."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import AGENT_PERSISTENCE

FRAMEWORK_AGENTS = {
    "langgraph": "tests.integrations.scripted_langgraph.ScriptedGraphAgent",
    "langgraph-approval": "tests.integrations.scripted_langgraph.ApprovalGraphAgent",
    "pydantic-ai": "tests.integrations.scripted_pydantic_ai.ScriptedPydanticAgent",
    "pydantic-ai-approval": "tests.integrations.scripted_pydantic_ai.ApprovalPydanticAgent",
    "openai-agents": "tests.integrations.scripted_openai_agents.ScriptedOpenAIAgent",
    "openai-agents-approval": "tests.integrations.scripted_openai_agents.ApprovalOpenAIAgent",
}

AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "AGENTS": {**AGENT_PERSISTENCE["AGENTS"], **FRAMEWORK_AGENTS}}
