"""The authorization dance through the API against a real local OAuth 2.1 server."""

from __future__ import annotations

import logging
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from agent_persistence.fields import digest
from agent_persistence.models import McpClientInfo, McpIntegration
from agent_persistence.oauth.client import code_challenge
from agent_persistence.oauth.store import integration_store
from agent_persistence.scope import Scope

from .helpers import connect, start

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_settings")]


def alice(user) -> Scope:
    return Scope(tenant="", user=str(user.pk))


def test_start_returns_an_s256_authorization_url_and_stores_only_a_state_digest(api, user, oauth_server):
    started = start(api)
    query = {k: v[0] for k, v in parse_qs(urlsplit(started["authorization_url"]).query).items()}
    assert started["authorization_url"].startswith(f"{oauth_server.base_url}/authorize?")
    assert query["code_challenge_method"] == "S256"
    assert query["response_type"] == "code"
    assert query["redirect_uri"] == "http://testserver/api/mcp/oauth/callback/"
    assert query["scope"] == "read write"
    assert query["resource"] == "https://mcp.example.test/docs"
    row = McpIntegration.objects.get(user=str(user.pk), server="docs")
    assert row.pending_state_digest == digest(query["state"])
    assert code_challenge(row.pending_code_verifier) == query["code_challenge"]
    assert query["state"] not in (row.pending_auth_url or "")
    # Dynamic client registration happened once, for the tenant.
    assert oauth_server.registrations == 1
    assert McpClientInfo.objects.get(server="docs").client_id == query["client_id"]


def test_the_whole_dance_lands_tokens_clears_the_pending_and_lists_connected(api, browser, user, oauth_server):
    response = connect(api, browser, oauth_server)
    assert response.json() == {"server": "docs", "status": "connected"}
    row = McpIntegration.objects.get(user=str(user.pk), server="docs")
    assert row.pending_state_digest is None and row.pending_code_verifier is None and row.pending_expires_at is None
    assert row.access_token in oauth_server.issued and row.refresh_token in oauth_server.issued
    assert row.scope == "read write"
    listing = api.get("/api/mcp/integrations/").json()
    by_server = {item["server"]: item for item in listing}
    assert by_server["docs"]["status"] == "connected"
    assert by_server["basic"]["status"] == "disconnected"
    assert row.access_token not in str(listing) and row.refresh_token not in str(listing)
    assert oauth_server.token_calls["authorization_code"] == 1
    # A second user's authorization reuses the tenant's registered client.
    start(api)
    assert oauth_server.registrations == 1


@pytest.mark.parametrize("server", ["basic", "post"])
def test_configured_clients_authenticate_with_basic_and_post(api, browser, user, oauth_server, server):
    connect(api, browser, oauth_server, server)
    assert integration_store().get(alice(user), server).tokens is not None
    assert oauth_server.registrations == 0


def test_the_local_server_refuses_a_wrong_verifier_secret_or_redirect_uri(oauth_server):
    """The test server is a real one: it checks PKCE, client credentials and the redirect URI."""
    import httpx

    from agent_persistence.oauth.client import new_code_verifier

    verifier = new_code_verifier()
    url = (
        f"{oauth_server.base_url}/authorize?response_type=code&client_id=static-post&state=s"
        f"&redirect_uri=http%3A%2F%2Ftestserver%2Fapi%2Fmcp%2Foauth%2Fcallback%2F"
        f"&code_challenge={code_challenge(verifier)}&code_challenge_method=S256"
    )
    redirect = "http://testserver/api/mcp/oauth/callback/"
    form = {"grant_type": "authorization_code", "client_id": "static-post", "redirect_uri": redirect}
    good_secret = "static-post-secret-0123456789"
    cases = [
        ({"code_verifier": new_code_verifier(), "client_secret": good_secret}, 400),
        ({"code_verifier": verifier, "client_secret": "wrong"}, 401),
        ({"code_verifier": verifier, "client_secret": good_secret, "redirect_uri": "http://evil.test/cb"}, 400),
    ]
    for extra, expected in cases:
        code = oauth_server.authorize(url)["code"]
        answer = httpx.post(f"{oauth_server.base_url}/token", data={**form, "code": code, **extra})
        assert answer.status_code == expected, extra
    bad_redirect = url.replace("testserver", "evil.test")
    assert httpx.get(bad_redirect).status_code == 400


def test_an_unknown_state_is_400_and_changes_nothing(api, browser, user, oauth_server):
    start(api)
    before = list(McpIntegration.objects.values())
    response = browser.get("/api/mcp/oauth/callback/", {"state": "forged", "code": "whatever"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_state"
    assert list(McpIntegration.objects.values()) == before
    assert browser.get("/api/mcp/oauth/callback/", {"code": "x"}).status_code == 400


def test_a_state_used_twice_is_400_and_keeps_the_tokens(api, browser, user, oauth_server):
    started = start(api)
    params = oauth_server.authorize(started["authorization_url"])
    assert browser.get("/api/mcp/oauth/callback/", params).status_code == 200
    before = list(McpIntegration.objects.values())
    again = browser.get("/api/mcp/oauth/callback/", params)
    assert again.status_code == 400 and again.json()["code"] == "invalid_state"
    assert list(McpIntegration.objects.values()) == before
    assert oauth_server.token_calls["authorization_code"] == 1


def test_an_expired_state_is_410_and_its_pending_is_cleaned_up(api, browser, user, oauth_server):
    started = start(api)
    params = oauth_server.authorize(started["authorization_url"])
    McpIntegration.objects.update(pending_expires_at=timezone.now() - timedelta(seconds=1))
    response = browser.get("/api/mcp/oauth/callback/", params)
    assert response.status_code == 410 and response.json()["code"] == "authorization_expired"
    assert not McpIntegration.objects.exists()  # nothing else in it: the empty record is deleted
    assert oauth_server.token_calls["authorization_code"] == 0


def test_an_expired_pending_reads_as_absent_and_keeps_granted_tokens(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    start(api)
    McpIntegration.objects.update(pending_expires_at=timezone.now() - timedelta(seconds=1))
    record = integration_store().get(alice(user), "docs")
    assert record.pending is None and record.tokens is not None
    row = McpIntegration.objects.get()
    assert row.pending_state_digest is None and row.access_token == record.tokens.access_token


def test_a_callback_with_an_error_parameter_is_400_and_records_stay(api, browser, user, oauth_server, caplog):
    connect(api, browser, oauth_server)
    started = start(api)
    params = oauth_server.authorize(started["authorization_url"], deny=True)
    assert params["error"] == "access_denied"
    before = list(McpIntegration.objects.values())
    with caplog.at_level(logging.DEBUG):
        response = browser.get("/api/mcp/oauth/callback/", params)
    assert response.status_code == 400
    assert response.json()["code"] == "authorization_denied"
    assert response.json()["details"]["error"] == "access_denied"
    assert list(McpIntegration.objects.values()) == before
    assert params["state"] not in caplog.text


@pytest.mark.parametrize("failure", ["500", "garbage"])
def test_a_failing_token_endpoint_is_502_logged_without_secrets(api, browser, user, oauth_server, caplog, failure):
    started = start(api)
    params = oauth_server.authorize(started["authorization_url"])
    oauth_server.token_failure = failure
    before = list(McpIntegration.objects.values())
    with caplog.at_level(logging.DEBUG):
        response = browser.get("/api/mcp/oauth/callback/", params)
    assert response.status_code == 502
    assert response.json()["code"] == "oauth_server_error"
    assert list(McpIntegration.objects.values()) == before  # the pending stays: the user may retry
    assert "token endpoint" in caplog.text
    for secret in oauth_server.issued:
        assert secret not in caplog.text
        assert secret not in response.content.decode()


def test_unknown_server_is_404_and_anonymous_is_refused(api, browser):
    response = api.post("/api/mcp/integrations/nope/authorize/", {}, format="json")
    assert response.status_code == 404 and response.json()["code"] == "unknown_server"
    assert browser.get("/api/mcp/integrations/").status_code in (401, 403)
    assert browser.post("/api/mcp/integrations/docs/authorize/", {}, format="json").status_code in (401, 403)


def test_start_refuses_unknown_fields(api):
    response = api.post("/api/mcp/integrations/docs/authorize/", {"redirect_uri": "http://evil.test/"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"


def test_disconnect_forgets_tokens_and_answers_404_after(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    assert api.delete("/api/mcp/integrations/docs/").status_code == 204
    assert not McpIntegration.objects.exists()
    assert api.delete("/api/mcp/integrations/docs/").status_code == 404


def test_pending_is_listed_without_secrets(api, user):
    start(api)
    listing = api.get("/api/mcp/integrations/").json()
    docs = next(item for item in listing if item["server"] == "docs")
    assert docs["status"] == "pending" and docs["pending_expires_at"]
    row = McpIntegration.objects.get()
    assert row.pending_code_verifier not in str(listing)


def test_purge_clears_expired_pendings_in_batches(api, user, django_user_model):
    start(api)
    McpIntegration.objects.update(pending_expires_at=timezone.now() - timedelta(seconds=1))
    assert integration_store().purge_expired_pendings(limit=10) == 1
    assert not McpIntegration.objects.exists()


def test_the_repository_is_selectable_in_settings(settings, user):
    from agent_persistence.oauth.store import IntegrationStore

    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "OAUTH_REPOSITORY": "tests.oauth.test_flow.CountingRepository"}
    store = integration_store()
    assert isinstance(store, IntegrationStore) and isinstance(store.repository, CountingRepository)
    store.get(alice(user), "docs")
    assert store.repository.reads == 1


from agent_persistence.oauth.repository import OAuthRepository  # noqa: E402


class CountingRepository(OAuthRepository):
    def __init__(self) -> None:
        self.reads = 0

    def get_user_integration(self, *args, **kwargs):
        self.reads += 1
        return super().get_user_integration(*args, **kwargs)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_callbacks_with_one_state_land_tokens_once(api, browser, user, oauth_server):
    """The second either finds the state used (400 invalid_state) or its code refused (400 invalid_grant)."""
    import threading

    from django.db import connections
    from rest_framework.test import APIClient

    started = start(api)
    params = oauth_server.authorize(started["authorization_url"])
    oauth_server.token_delay = 0.2
    statuses: list[tuple[int, str]] = []
    barrier = threading.Barrier(2)

    def callback() -> None:
        try:
            barrier.wait()
            response = APIClient().get("/api/mcp/oauth/callback/", params)
            statuses.append((response.status_code, response.json().get("code", "ok")))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=callback) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses)[0] == (200, "ok")
    assert sorted(statuses)[1][0] == 400 and sorted(statuses)[1][1] in ("invalid_state", "invalid_grant")
    row = McpIntegration.objects.get()
    assert row.pending_state_digest is None and row.access_token in oauth_server.issued
