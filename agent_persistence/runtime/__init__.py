"""The turn runtime: the agent API, producers and their supervision in this process.

models <- stores <- runtime <- {api, realtime, admin}: the runtime drives agents
through the stores and knows nothing of HTTP or websockets; it announces
finished turns with the ``conversation_updated`` signal.
"""
