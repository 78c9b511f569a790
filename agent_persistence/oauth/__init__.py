"""MCP OAuth on behalf of users: storage, flow rules, the token client and the agents' accessor.

- :mod:`.repository`: plain create / read / update / delete of user integrations and
  per-tenant client info (``AGENT_PERSISTENCE["OAUTH_REPOSITORY"]``).
- :mod:`.store`: :class:`~.store.IntegrationStore`, the flow rules over a repository.
- :mod:`.client`: PKCE, metadata discovery, dynamic client registration and the token
  endpoint, over httpx.
- :mod:`.tokens`: :func:`~.tokens.get_access_token` for agents.
- :mod:`.views`: the HTTP endpoints (routed by ``api/routes/oauth.py``).
"""
