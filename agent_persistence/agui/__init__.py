"""AG-UI over server-sent events: a turn streamed as AG-UI events, resumable with ``Last-Event-ID``.

- :mod:`.positions`: the event ids (a client's exact position in a turn) and their checks;
- :mod:`.events`: websocket frames of :class:`~agent_persistence.realtime.follower.Follower`
  turned into the ``ag-ui-protocol`` package's event models;
- :mod:`.streams`: one response's stream (the follower, the translation, the SSE encoding,
  keep-alives, the release of everything on every exit).

The endpoint is :mod:`agent_persistence.api.views.agui`; see ``docs/reference/agui.md``.
"""
