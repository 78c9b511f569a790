"""Websocket tickets (``?ticket=``): a socket authenticated by a ticket, and every way a ticket is refused.

In this process with Channels' WebsocketCommunicator (the consumer, real
transactions). Every refusal closes the socket with 4403 and nothing else:
no frame before the close, no reason text, nothing in the logs that names the
ticket or the user. The race of one ticket presented at once is run on real
threads here and on two real server processes in ``test_tickets_replicas.py``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core import signing
from django.utils import timezone

from agent_persistence.models import WebsocketTicket
from agent_persistence.realtime import protocol
from agent_persistence.realtime.routing import websocket_urlpatterns
from agent_persistence.realtime.tickets import SALT, TicketRefused, issue_ticket, redeem_ticket
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from agent_persistence.testing.concurrency import run_in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

application = URLRouter(websocket_urlpatterns)


@pytest.fixture
def people() -> dict[str, Any]:
    """alice with a private conversation and a second one; bob of the same tenant."""
    model = get_user_model()
    alice, bob = model.objects.create_user("ticket-alice"), model.objects.create_user("ticket-bob")
    alice_scope, bob_scope = Scope("", str(alice.pk)), Scope("", str(bob.pk))
    first = conversation_store().create(alice_scope, agent="scripted").pk
    second = conversation_store().create(alice_scope, agent="scripted").pk
    return {"alice": alice, "bob": bob, "alice_scope": alice_scope, "bob_scope": bob_scope, "first": first, "second": second}


async def open_socket(conversation_id: Any, ticket: str | None, user: Any = None) -> WebsocketCommunicator:
    path = f"/ws/conversations/{conversation_id}/" + (f"?ticket={quote(ticket, safe='%:')}" if ticket is not None else "")
    communicator = WebsocketCommunicator(application, path)
    communicator.scope["user"] = user or AnonymousUser()
    connected, _ = await communicator.connect()
    assert connected  # the consumer accepts first, then refuses with a close code
    return communicator


async def assert_accepted(communicator: WebsocketCommunicator) -> dict[str, Any]:
    await communicator.send_json_to({"type": "attach"})
    status = await communicator.receive_json_from(timeout=10)
    assert status["type"] == "status"
    await communicator.disconnect()
    return status


async def assert_closed_with(communicator: WebsocketCommunicator, code: int) -> None:
    """The first and only output is a close with ``code`` and no reason."""
    output = await communicator.receive_output(timeout=10)
    assert output["type"] == "websocket.close", output
    assert output["code"] == code
    assert not output.get("reason")
    assert set(output) <= {"type", "code", "reason"}
    assert await communicator.receive_nothing(timeout=0.2)


def issue(scope: Scope, conversation_id: uuid.UUID | None = None) -> str:
    return issue_ticket(scope, conversation_id).ticket


async def test_a_ticket_opens_a_socket_without_a_session(people: dict[str, Any]) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"])
    await assert_accepted(await open_socket(people["first"], ticket))
    row = await WebsocketTicket.objects.aget()
    assert row.spent_at is not None
    assert ticket.split(":")[0] == row.pk.hex and len(ticket.split(":")) == 2  # the row's id and its signature: no user id


async def test_a_ticket_bound_to_a_conversation_opens_that_one(people: dict[str, Any]) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"], people["first"])
    await assert_accepted(await open_socket(people["first"], ticket))


async def test_the_socket_acts_for_the_ticket_s_user_whatever_session_it_carries(people: dict[str, Any]) -> None:
    """alice's session with bob's ticket is bob's socket: alice's private conversation reads as absent (4404)."""
    ticket = await sync_to_async(issue)(people["bob_scope"])
    await assert_closed_with(await open_socket(people["first"], ticket, user=people["alice"]), protocol.CLOSE_NOT_FOUND)


async def test_another_user_s_ticket_opens_only_what_that_user_may_read(people: dict[str, Any]) -> None:
    """bob's ticket on alice's private conversation: 4404; on a new id: admitted, bob's start would make it his."""
    ticket = await sync_to_async(issue)(people["bob_scope"])
    await assert_closed_with(await open_socket(people["first"], ticket), protocol.CLOSE_NOT_FOUND)
    other = await sync_to_async(issue)(people["bob_scope"])
    await assert_accepted(await open_socket(uuid.uuid4(), other))


async def test_an_expired_ticket_is_refused(people: dict[str, Any]) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"])
    await WebsocketTicket.objects.aupdate(expires_at=timezone.now() - timedelta(seconds=1), created_at=timezone.now() - timedelta(seconds=61))
    await assert_closed_with(await open_socket(people["first"], ticket), protocol.CLOSE_TICKET_REFUSED)


async def test_a_ticket_of_ttl_seconds_expires_by_the_setting(people: dict[str, Any], settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WS_TICKET_TTL": 5}
    issued = await sync_to_async(issue_ticket)(people["alice_scope"])
    row = await WebsocketTicket.objects.aget()
    assert row.expires_at - row.created_at == timedelta(seconds=5) == issued.expires_at - row.created_at


async def test_a_ticket_is_single_use(people: dict[str, Any]) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"])
    await assert_accepted(await open_socket(people["first"], ticket))
    await assert_closed_with(await open_socket(people["first"], ticket), protocol.CLOSE_TICKET_REFUSED)
    await assert_closed_with(await open_socket(people["first"], ticket, user=people["alice"]), protocol.CLOSE_TICKET_REFUSED)


@pytest.mark.parametrize("tamper", ["signature", "id", "forged", "garbage", "empty", "salt"])
async def test_a_tampered_ticket_is_refused_and_spends_nothing(people: dict[str, Any], tamper: str) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"])
    ticket_id, signature = ticket.split(":", 1)
    presented = {
        "signature": f"{ticket_id}:{signature[:-2]}{'AA' if not signature.endswith('AA') else 'BB'}",
        "id": f"{uuid.uuid4().hex}:{signature}",
        "forged": f"{ticket_id}:{signing.Signer(key='not-the-secret-key', salt=SALT).signature(ticket_id)}",
        "garbage": "not%20a%20ticket%00%ED%A0%80%FF",  # NUL, a lone surrogate and a stray byte, percent-encoded
        "empty": "",
        "salt": signing.Signer(salt="another.salt").sign(ticket_id),  # signed by the server for another purpose
    }[tamper]
    await assert_closed_with(await open_socket(people["first"], presented, user=people["alice"]), protocol.CLOSE_TICKET_REFUSED)
    assert (await WebsocketTicket.objects.aget()).spent_at is None
    await assert_accepted(await open_socket(people["first"], ticket))  # the real one still works


async def test_a_ticket_bound_to_another_conversation_is_refused_and_not_spent(people: dict[str, Any]) -> None:
    ticket = await sync_to_async(issue)(people["alice_scope"], people["first"])
    await assert_closed_with(await open_socket(people["second"], ticket), protocol.CLOSE_TICKET_REFUSED)
    await assert_closed_with(await open_socket("not-a-uuid", ticket), protocol.CLOSE_TICKET_REFUSED)
    assert (await WebsocketTicket.objects.aget()).spent_at is None
    await assert_accepted(await open_socket(people["first"], ticket))


async def test_refusals_log_neither_the_ticket_nor_the_user(people: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ticket = await sync_to_async(issue)(people["alice_scope"], people["first"])
    await assert_closed_with(await open_socket(people["second"], ticket), protocol.CLOSE_TICKET_REFUSED)
    await assert_closed_with(await open_socket(people["first"], ticket + "x"), protocol.CLOSE_TICKET_REFUSED)
    logged = "\n".join(record.getMessage() for record in caplog.records if record.name.startswith("agent_persistence"))
    assert ticket.split(":")[0] not in logged and "Scope(" not in logged


def test_one_ticket_redeemed_by_eight_threads_at_once_is_accepted_exactly_once(people: dict[str, Any]) -> None:
    """Real transactions on the test database (SQLite, or PostgreSQL when DATABASE_URL is set)."""
    for _ in range(3):
        ticket = issue(people["alice_scope"], people["first"])
        results = run_in_threads(8, lambda index: redeem_ticket(ticket, str(people["first"])))
        accepted = [result for result in results if isinstance(result, Scope)]
        refused = [result for result in results if isinstance(result, TicketRefused)]
        assert accepted == [people["alice_scope"]], results
        assert len(refused) == 7, results


@pytest.mark.parametrize("change", ["deactivated", "deleted"])
async def test_a_ticket_whose_user_was_deactivated_or_deleted_since_is_refused(people: dict[str, Any], change: str) -> None:
    """Django's authentication refuses an inactive user's session; a ticket issued just before is refused too."""
    alice = people["alice"]
    ticket = await sync_to_async(lambda: issue_ticket(people["alice_scope"], account=str(alice.pk)).ticket)()
    kept = await sync_to_async(lambda: issue_ticket(people["bob_scope"], account=str(people["bob"].pk)).ticket)()
    if change == "deactivated":
        alice.is_active = False
        await alice.asave(update_fields=["is_active"])
    else:
        await alice.adelete()
    await assert_closed_with(await open_socket(people["second"] if change == "deactivated" else uuid.uuid4(), ticket), protocol.CLOSE_TICKET_REFUSED)
    bobs = await sync_to_async(lambda: conversation_store().create(people["bob_scope"], agent="scripted").pk)()
    await assert_accepted(await open_socket(bobs, kept))  # another user's ticket is untouched


def test_an_account_that_is_no_key_of_the_user_model_is_refused(people: dict[str, Any]) -> None:
    ticket = issue_ticket(people["alice_scope"], account="not-a-number").ticket
    with pytest.raises(TicketRefused):
        redeem_ticket(ticket, people["first"])
