"""The turn runtime: the agent API, producers and their supervision in this process.

models <- stores <- runtime <- {api, realtime, admin}: the runtime drives agents
through the stores and knows nothing of HTTP or websockets; it announces
finished turns with the ``conversation_updated`` signal.

Its modules, each importing only those after it: ``lifecycle`` (the entry
points: start, continue, resume, cancel, reap), ``shutdown`` (the drain of a
process that is going away: hand-offs), ``producer`` (drives a run;
the supervisor), ``agents``, ``turn`` (what an agent sees), ``subagents``,
``host`` (the ``TurnHost`` protocol), ``outcomes``; ``hooks`` and ``loop``
import none of them.
"""
