"""Bridges that run agents written with a framework as durable turns.

One module per framework, each behind its own optional extra, none imported
by the rest of the app:

- :mod:`.openai_agents` (``pip install agent-persistence[openai-agents]``):
  a ``Session`` on the conversation store and ``OpenAIAgentsAgent``, which runs
  an OpenAI Agents SDK agent with ``Runner.run_streamed``.
- :mod:`.pydantic_ai` (``[pydantic-ai-slim]``): ``PydanticAIAgent``, which runs a
  Pydantic AI ``Agent`` with ``iter``; :mod:`.pydantic_ai_messages` moves a
  conversation out as Pydantic AI ``ModelMessage``s and back in.
- :mod:`.langgraph` (``[langgraph]``): ``LangGraphAgent``, which runs a compiled
  graph, with :mod:`.langgraph_store`'s ``DjangoCheckpointSaver`` underneath.

What they share lives in :mod:`.base`.
"""
