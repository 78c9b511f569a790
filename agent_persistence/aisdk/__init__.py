"""The Vercel AI SDK's UI message stream protocol (``ai`` 6 and 7, ``useChat``), resumable on any replica.

- :mod:`.chunks`: websocket frames of :class:`~agent_persistence.realtime.follower.Follower`
  turned into UI message stream chunks (``text-delta``, ``tool-approval-request``, ``finish`` ...);
- :mod:`.requests`: ``useChat``'s request body read strictly (the question, the approvals);
- :mod:`.streams`: one response's stream: where a client resumes and how chunks are written, on
  the loop of :mod:`agent_persistence.realtime.sse` (the follower, keep-alives, the release of
  everything on every exit), shared with AG-UI's stream; the takeover of a dead turn.

The endpoints are :mod:`agent_persistence.api.views.aisdk`; see ``docs/reference/aisdk.md``.
"""
