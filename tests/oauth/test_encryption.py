"""Secrets at rest: encryption, key rotation (also under concurrent writes), bad ciphertext, dumps."""

from __future__ import annotations

import io
import logging
import random
import threading
import time
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.db.models import TextField, Value
from django.utils import timezone

from agent_persistence.models import McpClientInfo, McpIntegration
from agent_persistence.oauth.exceptions import SecretUnreadable
from agent_persistence.oauth.repository import ClientInfo, OAuthRepository, Tokens, UserIntegration
from agent_persistence.oauth.tokens import get_access_token
from agent_persistence.scope import Scope

from .helpers import connect, start

OLD_KEY = "cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4="  # tests/settings.py
NEW_KEY = Fernet.generate_key().decode()


def use_keys(settings, *keys: str) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "ENCRYPTION_KEYS": list(keys)}


def ciphertexts(model=McpIntegration, field="access_token") -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name(field)} FROM {connection.ops.quote_name(model._meta.db_table)}")
        return [row[0] for row in cursor.fetchall() if row[0] is not None]


def record(user: str, token: str) -> UserIntegration:
    return UserIntegration(
        tenant="t",
        user=user,
        server="docs",
        tokens=Tokens(access_token=token, refresh_token=f"r-{token}", expires_at=timezone.now() + timedelta(hours=1)),
    )


def run_rotation(**options) -> str:
    out = io.StringIO()
    call_command("rotate_encryption_keys", stdout=out, **options)
    return out.getvalue()


@pytest.mark.django_db
def test_rotation_re_encrypts_under_the_newest_key_and_is_idempotent(settings):
    repository = OAuthRepository()
    for n in range(7):
        repository.save_user_integration(record(f"u{n}", f"token-{n}"))
    repository.save_client_info(ClientInfo(tenant="t", server="docs", client_id="c", client_secret="client-secret-x"))
    use_keys(settings, NEW_KEY, OLD_KEY)
    output = run_rotation(batch_size=3)
    assert "Total: 15 rotated, 0 already current, 0 unreadable." in output
    newest = Fernet(NEW_KEY.encode())
    assert all(newest.decrypt(c.encode()) for c in ciphertexts() + ciphertexts(field="refresh_token"))
    use_keys(settings, NEW_KEY)  # the old key is gone: everything still reads
    assert [r.tokens.access_token for r in map(lambda n: repository.get_user_integration("t", f"u{n}", "docs"), range(7))] == [
        f"token-{n}" for n in range(7)
    ]
    assert repository.get_client_info("t", "docs").client_secret == "client-secret-x"
    assert "Total: 0 rotated, 15 already current, 0 unreadable." in run_rotation()


@pytest.mark.django_db
def test_rotation_leaves_an_undecryptable_value_as_it_is_and_says_so(settings, caplog):
    OAuthRepository().save_user_integration(record("u", "token"))
    McpIntegration.objects.update(access_token=Value("gAAAAtampered", output_field=TextField()))
    use_keys(settings, NEW_KEY, OLD_KEY)
    with caplog.at_level(logging.WARNING), pytest.raises(CommandError, match="1 secret"):
        run_rotation()
    assert ciphertexts() == ["gAAAAtampered"]
    assert "McpIntegration.access_token" in caplog.text and "r-token" not in caplog.text


@pytest.mark.django_db
def test_rotation_without_keys_is_a_clear_error(settings):
    use_keys(settings)
    with pytest.raises(CommandError, match="empty"):
        run_rotation()


@pytest.mark.django_db(transaction=True)
def test_rotation_while_records_are_written_loses_nothing(settings):
    """Writers keep saving tokens while the command rotates: every record reads under the new key alone."""
    repository = OAuthRepository()
    for n in range(150):
        repository.save_user_integration(record(f"u{n}", f"first-{n}"))
    use_keys(settings, NEW_KEY, OLD_KEY)
    last_written: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            n = 0
            while not stop.is_set() or n < 20:
                user = f"u{rng.randrange(180)}"  # some new records, most existing
                token = f"w{seed}-{n}"
                with lock:
                    repository.save_user_integration(record(user, token))
                    last_written[user] = token
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    writers = [threading.Thread(target=writer, args=(seed,)) for seed in range(3)]
    for thread in writers:
        thread.start()
    try:
        while not last_written:  # the writers are writing before the rotation starts
            time.sleep(0.001)
        written_before = dict(last_written)
        output = run_rotation(batch_size=5)
        written_during = {user: token for user, token in last_written.items() if written_before.get(user) != token}
    finally:
        stop.set()
        for thread in writers:
            thread.join(60)
    assert not errors, errors
    assert "0 unreadable" in output
    if connection.vendor == "postgresql":
        # Row locks let writers in between batches; SQLite has one writer at a time, and its
        # busy-wait backoff often lets a quick rotation finish before a waiting writer retries.
        assert written_during, "no write overlapped the rotation"
    use_keys(settings, NEW_KEY)
    for n in range(180):
        user = f"u{n}"
        stored = repository.get_user_integration("t", user, "docs")
        if user in last_written:
            assert stored is not None and not stored.unreadable, user
            assert stored.tokens.access_token == last_written[user]
        elif n < 150:
            assert stored.tokens.access_token == f"first-{n}"


@pytest.mark.django_db
@pytest.mark.usefixtures("mcp_settings")
@pytest.mark.parametrize("damage", ["tampered", "truncated", "key lost"])
def test_an_undecryptable_token_is_a_clear_error_and_the_record_stays(api, browser, user, oauth_server, settings, caplog, damage):
    connect(api, browser, oauth_server)
    if damage == "key lost":
        use_keys(settings, NEW_KEY)
    else:
        original = ciphertexts()[0]
        broken = original[:-10] if damage == "truncated" else original[:40] + ("A" if original[40] != "A" else "B") + original[41:]
        McpIntegration.objects.update(access_token=Value(broken, output_field=TextField()))
    before = ciphertexts() + ciphertexts(field="refresh_token")
    scope = Scope(tenant="", user=str(user.pk))
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(SecretUnreadable):
            get_access_token(scope, "docs")
        listing = api.get("/api/mcp/integrations/").json()
        restart = api.post("/api/mcp/integrations/docs/authorize/", {}, format="json")
    assert {i["server"]: i["status"] for i in listing}["docs"] == "unreadable"
    assert restart.status_code == 409 and restart.json()["code"] == "secret_unreadable"
    assert ciphertexts() + ciphertexts(field="refresh_token") == before
    for secret in oauth_server.issued:
        assert secret not in caplog.text
    # Disconnecting still works, and a new authorization can follow.
    assert api.delete("/api/mcp/integrations/docs/").status_code == 204


@pytest.mark.django_db
def test_no_key_configured_is_a_clear_error_and_a_system_check(settings):
    from agent_persistence.checks import check_settings

    use_keys(settings)
    assert "agent_persistence.W001" in [message.id for message in check_settings()]
    with pytest.raises(ImproperlyConfigured, match="ENCRYPTION_KEYS"):
        OAuthRepository().save_user_integration(record("u", "token"))
    assert not McpIntegration.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("mcp_settings")
def test_a_dump_of_every_table_holds_no_secret_in_clear(api, browser, user, oauth_server, caplog):
    """After a dance, a refresh, a registration and a pending: no token, verifier, state or client secret in clear."""
    with caplog.at_level(logging.DEBUG):
        connect(api, browser, oauth_server)  # registered client: a client secret stored
        McpIntegration.objects.update(token_expires_at=timezone.now())
        get_access_token(Scope(tenant="", user=str(user.pk)), "docs")
        connect(api, browser, oauth_server, "post")
        started = start(api, "basic")  # a pending in flight
    verifiers = [row.pending_code_verifier for row in McpIntegration.objects.exclude(pending_code_verifier=None)]
    secrets = [*oauth_server.issued, *verifiers, started["authorization_url"].split("state=")[1].split("&")[0]]
    secrets += [c.client_secret for c in McpClientInfo.objects.all()]
    assert len(secrets) > 10 and all(secrets)
    dump = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("agent_persistence").get_models():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(model._meta.db_table)}")
            dump.append(repr(cursor.fetchall()))
    dump_text = "\n".join(dump)
    for secret in secrets:
        assert secret not in dump_text
        assert secret not in caplog.text
