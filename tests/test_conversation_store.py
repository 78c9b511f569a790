"""The shipped ConversationStore against its contract suite, and its compiled page statement."""

from __future__ import annotations

import pytest
from django.db import connection

from agent_persistence.exceptions import NotFound
from agent_persistence.models import Message
from agent_persistence.scope import Scope
from agent_persistence.stores.base import compile_statement, statement_slots
from agent_persistence.stores.conversations import ConversationStore, message_page_statement
from agent_persistence.testing.conversations import ConversationStoreContract


class TestConversationStore(ConversationStoreContract):
    pass


OWNER = Scope(tenant="t1", user="alice")
READER = Scope(tenant="t1", user="bob")  # the same tenant: reads a shared conversation
OTHER_TENANT = Scope(tenant="t2", user="alice")  # alice's name, another tenant


@pytest.mark.django_db
def test_one_compiled_page_statement_serves_every_scope_with_its_own_access():
    """The cached statement keeps SQL text only: each call binds its own scope, conversation and cursor."""
    store = ConversationStore()
    private = store.create(OWNER)
    shared = store.create(OWNER, shared=True)
    for conversation in (private, shared):
        for n in range(5):
            store.append_message(OWNER, conversation.pk, role="user", content=f"{conversation.pk} {n}")
    first = {c.pk: store.list_messages(OWNER, c.pk, limit=2).items[0] for c in (private, shared)}
    message_page_statement.cache_clear()
    assert [m.content for m in store.list_messages(OWNER, private.pk, after=first[private.pk].pk, limit=2).items] == [
        f"{private.pk} 1",
        f"{private.pk} 2",
    ]
    # The same shape again, for other scopes and another conversation: one compiled statement.
    assert [m.content for m in store.list_messages(READER, shared.pk, after=first[shared.pk].pk, limit=2).items] == [
        f"{shared.pk} 1",
        f"{shared.pk} 2",
    ]
    for scope, conversation in ((READER, private), (OTHER_TENANT, private), (OTHER_TENANT, shared)):
        with pytest.raises(NotFound):
            store.list_messages(scope, conversation.pk, after=first[conversation.pk].pk, limit=2)
    # A cursor from the other conversation names nothing in this one.
    with pytest.raises(NotFound):
        store.list_messages(OWNER, private.pk, after=first[shared.pk].pk, limit=2)
    assert message_page_statement.cache_info().misses == 1
    assert message_page_statement.cache_info().hits >= 5


@pytest.mark.django_db
def test_a_statement_binds_each_uuid_in_the_form_its_backend_was_given():
    slots = statement_slots("user", ids=("conversation",))
    queryset = Message.objects.filter(conversation_id=slots["conversation"], conversation__owner=slots["user"])
    statement = compile_statement(queryset, slots)
    forms = {name: form for name, form in statement.slots if name is not None}
    assert forms == {"conversation": "as-is" if connection.features.has_native_uuid_field else "hex", "user": "as-is"}
    conversation = ConversationStore().create(OWNER)
    ConversationStore().append_message(OWNER, conversation.pk, role="user", content="hi")
    rows = list(Message.objects.raw(statement.sql, statement.params({"conversation": conversation.pk, "user": "alice"})))
    assert [row.content for row in rows] == ["hi"]


@pytest.mark.django_db
def test_a_slot_compiled_into_the_sql_text_is_refused():
    """A value the SQL carries as text (here in a raw expression) could not be bound per call."""
    from django.db.models.expressions import RawSQL

    slots = statement_slots("user")
    queryset = Message.objects.filter(pk__in=RawSQL(f"SELECT id FROM agent_persistence_message WHERE '{slots['user']}' = ''", []))
    with pytest.raises(AssertionError, match="compiled into the SQL text"):
        compile_statement(queryset, slots)
