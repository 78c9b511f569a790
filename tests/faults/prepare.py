"""Prepare a fault test's private database: a user, a logged-in session, conversations; prints them as JSON.

Run as ``python -m tests.faults.prepare COUNT`` with ``DATABASE_URL`` naming the
private database (migrated already).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.realtime.server_settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402

from agent_persistence.scope import Scope  # noqa: E402
from agent_persistence.stores import conversation_store  # noqa: E402


def main(count: int) -> None:
    user = get_user_model().objects.create_user("fault-alice")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    scope = Scope(tenant="", user=str(user.pk))
    conversations = [str(conversation_store().create(scope, agent="scripted").pk) for _ in range(count)]
    print(json.dumps({"session": session.session_key, "conversations": conversations}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
