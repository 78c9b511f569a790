"""The agents' token accessor: valid tokens, refresh before expiry, one refresh at a time."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from agent_persistence.models import McpIntegration
from agent_persistence.oauth.exceptions import AuthorizationRequired, OAuthServerError
from agent_persistence.oauth.tokens import aget_access_token, get_access_token, get_tokens
from agent_persistence.scope import Scope
from agent_persistence.stores.leases import MAX_ATTEMPTS, LeaseStore

from .helpers import connect

pytestmark = pytest.mark.usefixtures("mcp_settings")


def scope_of(user) -> Scope:
    return Scope(tenant="", user=str(user.pk))


def expire_soon() -> None:
    """Move the token inside the refresh margin (60 s by default)."""
    McpIntegration.objects.update(token_expires_at=timezone.now() + timedelta(seconds=5))


@pytest.mark.django_db
def test_a_fresh_token_is_returned_without_calling_the_server(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    stored = McpIntegration.objects.get().access_token
    assert get_access_token(scope_of(user), "docs") == stored
    assert oauth_server.token_calls["refresh_token"] == 0


@pytest.mark.django_db
def test_no_integration_raises_authorization_required_with_the_start_url(user):
    with pytest.raises(AuthorizationRequired) as raised:
        get_access_token(scope_of(user), "docs")
    assert raised.value.code == "authorization_required"
    assert raised.value.authorize_url == "/api/mcp/integrations/docs/authorize/"
    assert raised.value.as_dict()["details"]["authorize_url"] == raised.value.authorize_url


@pytest.mark.django_db
def test_refresh_before_expiry_with_a_new_refresh_token(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    old = McpIntegration.objects.get()
    expire_soon()
    token = get_access_token(scope_of(user), "docs")
    row = McpIntegration.objects.get()
    assert token != old.access_token and row.access_token == token
    assert row.refresh_token != old.refresh_token and row.refresh_token in oauth_server.refresh_tokens
    assert row.token_expires_at > timezone.now() + timedelta(minutes=30)
    assert oauth_server.token_calls["refresh_token"] == 1


@pytest.mark.django_db
def test_a_refresh_without_refresh_token_keeps_the_stored_one(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    old = McpIntegration.objects.get()
    oauth_server.rotate_refresh = False
    expire_soon()
    tokens = get_tokens(scope_of(user), "docs")
    row = McpIntegration.objects.get()
    assert tokens.access_token != old.access_token
    assert row.refresh_token == old.refresh_token == tokens.refresh_token
    assert row.scope == old.scope  # the refresh answer named no scope: the granted one stays


@pytest.mark.django_db
def test_a_revoked_refresh_token_means_authorization_required_and_empties_the_tokens(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    oauth_server.refresh_tokens.clear()
    expire_soon()
    with pytest.raises(AuthorizationRequired):
        get_access_token(scope_of(user), "docs")
    assert not McpIntegration.objects.exists()  # nothing left in the record: deleted


@pytest.mark.django_db
def test_an_expired_token_without_refresh_token_needs_authorization(api, browser, user, oauth_server):
    connect(api, browser, oauth_server)
    McpIntegration.objects.update(refresh_token=None, token_expires_at=timezone.now() - timedelta(seconds=1))
    assert {i["server"]: i["status"] for i in api.get("/api/mcp/integrations/").json()}["docs"] == "expired"
    with pytest.raises(AuthorizationRequired):
        get_access_token(scope_of(user), "docs")


@pytest.mark.django_db
@pytest.mark.parametrize("failure", ["500", "garbage"])
def test_a_failing_refresh_is_a_clear_error_and_keeps_the_tokens(api, browser, user, oauth_server, caplog, failure):
    connect(api, browser, oauth_server)
    expire_soon()
    before = list(McpIntegration.objects.values())
    oauth_server.token_failure = failure
    with caplog.at_level(logging.DEBUG), pytest.raises(OAuthServerError) as raised:
        get_access_token(scope_of(user), "docs")
    assert raised.value.code == "oauth_server_error"
    assert list(McpIntegration.objects.values()) == before
    for secret in oauth_server.issued:
        assert secret not in caplog.text and secret not in str(raised.value.as_dict())


class ChurnedLeaseStore(LeaseStore):
    """The real lease store, whose first rounds each lose to a write by another refresher.

    Eight refreshers waiting on one lease take and drop it in quick turns, so
    one acquire can lose every round it tries (``lease_contended``); the
    first ``MAX_ATTEMPTS + 1`` rounds here lose, as they did in a CI run.
    """

    lost_rounds = 0

    def _try_acquire(self, *args, **kwargs):
        if ChurnedLeaseStore.lost_rounds <= MAX_ATTEMPTS:
            ChurnedLeaseStore.lost_rounds += 1
            return None
        return super()._try_acquire(*args, **kwargs)


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:AGENT_PERSISTENCE.*is deprecated:DeprecationWarning")  # LEASE_STORE swapped alone
def test_a_refresh_waits_out_a_churned_lease_instead_of_failing(api, browser, user, oauth_server, settings):
    connect(api, browser, oauth_server)
    expire_soon()
    ChurnedLeaseStore.lost_rounds = 0
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "LEASE_STORE": f"{__name__}.ChurnedLeaseStore"}
    token = get_access_token(scope_of(user), "docs")
    assert ChurnedLeaseStore.lost_rounds == MAX_ATTEMPTS + 1
    assert oauth_server.token_calls["refresh_token"] == 1
    assert McpIntegration.objects.get().access_token == token


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshes_call_the_token_endpoint_once(api, browser, user, oauth_server):
    """Eight threads (eight connections) find the token due: one refresh, all get its result."""
    connect(api, browser, oauth_server)
    expire_soon()
    oauth_server.token_delay = 0.3
    scope = scope_of(user)
    barrier = threading.Barrier(8)
    results: list[str] = []
    errors: list[BaseException] = []

    def agent() -> None:
        try:
            barrier.wait()
            results.append(get_access_token(scope, "docs"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=agent) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert oauth_server.token_calls["refresh_token"] == 1
    assert len(results) == 8 and len(set(results)) == 1
    assert McpIntegration.objects.get().access_token == results[0]


@pytest.mark.django_db(transaction=True)
def test_the_async_accessor(api, browser, user, oauth_server):
    import asyncio

    from asgiref.sync import sync_to_async

    connect(api, browser, oauth_server)

    async def agent() -> str:
        try:
            return await aget_access_token(scope_of(user), "docs")
        finally:
            await sync_to_async(connections.close_all)()  # the sync thread's own connection

    token = asyncio.run(agent())
    assert token == McpIntegration.objects.get().access_token
