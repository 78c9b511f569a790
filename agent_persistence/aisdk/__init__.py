"""The Vercel AI SDK's UI message stream protocol (``ai`` 6 and 7, ``useChat``), resumable on any replica.

- :mod:`.chunks`: websocket frames of :class:`~agent_persistence.realtime.follower.Follower`
  turned into UI message stream chunks (``text-delta``, ``tool-approval-request``, ``finish`` ...);
- :mod:`.requests`: ``useChat``'s request body read strictly (the question, the approvals);
- :mod:`.streams`: one response's stream (the follower, the translation, the SSE encoding,
  keep-alives, the release of everything on every exit), on the AG-UI stream's machinery.

The endpoints are :mod:`agent_persistence.api.views.aisdk`; see ``docs/reference/aisdk.md``.
"""
