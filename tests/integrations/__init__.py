"""Tests of the agent-framework bridges (agent_persistence.integrations)."""
