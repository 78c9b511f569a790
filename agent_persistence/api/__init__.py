"""The REST API (Django REST framework): include ``agent_persistence.api.urls`` in your URLconf.

Authentication comes from the host project's DRF settings; the
``SCOPE_RESOLVER`` setting maps each request to a Scope(tenant, user). Domain
errors are mapped to HTTP here (``errors.py``) without the host editing its
``REST_FRAMEWORK`` settings.
"""
