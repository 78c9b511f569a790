"""Issue 21 (L1): an id containing ``%2F`` (a slash once decoded) answers the API's JSON 404, on every route.

Django decodes ``%2F`` before resolving, so ``conversations/a%2Fb/`` is
``conversations/a/b/``, which no route matches: Django's HTML 404 page used to
answer. Every route that takes an id is tried with each id replaced, for every
method the API uses.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent_persistence.api import urls

pytestmark = pytest.mark.django_db

ID_ROUTES = [str(pattern.pattern) for pattern in urls.urlpatterns if "<" in str(pattern.pattern)]
HOSTILE_IDS = ["a%2Fb", "%2F", "a%2Fb%2Fc", "x%2F..%2Fy", "%2Fshare"]


def paths_of(route: str) -> list[str]:
    return ["/api/" + re.sub(r"<[^>]+>", hostile, route) for hostile in HOSTILE_IDS]


def test_the_sweep_covers_the_routes_with_ids() -> None:
    assert len(ID_ROUTES) >= 17


@pytest.mark.parametrize("route", ID_ROUTES)
def test_a_slash_in_an_id_is_the_json_404(alice_client: Any, route: str) -> None:
    for path in paths_of(route):
        for method in ("get", "post", "put", "patch", "delete"):
            response = getattr(alice_client, method)(path, {}, format="json")
            assert response.status_code == 404, (method, path, response.status_code)
            assert response["Content-Type"].startswith("application/json"), (method, path, response.content[:80])
            assert response.json()["code"].endswith("not_found"), (method, path, response.json())


def test_anonymous_is_still_401(client_for: Any) -> None:
    response = client_for(None).get("/api/conversations/a%2Fb/messages/")
    assert response.status_code in (401, 403) and response["Content-Type"].startswith("application/json")

