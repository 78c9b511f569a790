"""AG-UI over server-sent events: a turn streamed as AG-UI events, resumable with ``Last-Event-ID``.

- :mod:`.positions`: the event ids (a client's exact position in a turn) and their checks;
- :mod:`.events`: websocket frames of :class:`~agent_persistence.realtime.follower.Follower`
  turned into the ``ag-ui-protocol`` package's event models;
- :mod:`.streams`: one response's stream: where a client resumes and how events are written, on
  the loop of :mod:`agent_persistence.realtime.sse` (the follower, keep-alives, the release of
  everything on every exit), shared with the AI SDK's stream.

The endpoint is :mod:`agent_persistence.api.views.agui`; see ``docs/reference/agui.md``.
"""
