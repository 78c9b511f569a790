"""The OpenAI Agents SDK's own session tests (openai-agents 0.24.0 sdist, MIT), run by ``test_openai_sdk_session_suite``.

Not collected by pytest on their own (their names do not start with ``test_``).
"""
