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


def assert_same_instance(read: Message, loaded: Message) -> None:
    """The same attributes in the same order, equal and of the same types (times: the same tzinfo), the same state."""
    fields = {key: value for key, value in read.__dict__.items() if key != "_state"}
    expected = {key: value for key, value in loaded.__dict__.items() if key != "_state"}
    assert list(fields) == list(expected)
    for key, value in expected.items():
        assert fields[key] == value and type(fields[key]) is type(value), key
        if key.endswith("_at"):
            assert fields[key].tzinfo is value.tzinfo, key
    assert (read._state.db, read._state.adding) == (loaded._state.db, loaded._state.adding) == ("default", False)


HOSTILE_CONTENTS = [
    "plain text, the usual content",
    [{"type": "text", "text": "é😀 \u2028 \\ \" 1234567890123456789012"}],
    {"n": [2**63 - 1, -(2**63), 0, -0.0, 0.1, 1e300, 5e-324, 1.7976931348623157e308]},
    {"deep": [[[[[[[[{"k": None}]]]]]]]]},
    ["[", "{", "\t\n", True, False, None],
    None,
]


@pytest.mark.django_db
def test_an_uncounted_page_reads_the_instances_the_orm_reads():
    """read_models (Django's converters, the JSON decode, the plain builder) gives what Message.objects gives."""
    from agent_persistence.ids import uuid7
    from agent_persistence.stores import run_store

    store = ConversationStore()
    conversation = store.create(OWNER)
    run = run_store().create_or_resume(OWNER, conversation.pk, id=uuid7(), message_id=uuid7())
    first = store.append_message(OWNER, conversation.pk, role="user", content="first")
    for index, content in enumerate(HOSTILE_CONTENTS):
        store.append_message(
            OWNER,
            conversation.pk,
            role="assistant",
            content=content,
            name="helper" if index % 2 else None,
            tool_call_id="call_1" if index % 2 else None,
            tool_calls=[{"id": "call_1", "arguments": '{"q": 18446744073709551616}'}] if index % 2 else None,
            files=[{"id": "f1"}] if index % 3 == 0 else None,
            metadata={"pinned": True, "n": 2**63 - 1} if index % 2 else None,
            usage={"tokens": index} if index % 2 else None,
            run_id=run.id if index % 2 else None,
        )
    last = store.append_message(OWNER, conversation.pk, role="user", content="last")
    for order, cursor in (("asc", {"after": first.pk, "before": last.pk}), ("desc", {"before": last.pk, "after": first.pk})):
        page = store.list_messages(OWNER, conversation.pk, order=order, limit=100, **cursor)
        assert page.total is None and not page.has_more and len(page.items) == len(HOSTILE_CONTENTS)
        for read in page.items:
            assert_same_instance(read, Message.objects.get(pk=read.pk))


@pytest.mark.django_db
def test_a_page_is_built_by_from_db_when_a_receiver_listens_to_post_init():
    """With a post_init receiver for Message the rows go through Model.from_db, so the receiver sees each one."""
    from django.db.models.signals import post_init

    store = ConversationStore()
    conversation = store.create(OWNER)
    first = store.append_message(OWNER, conversation.pk, role="user", content="first")
    for n in range(3):
        store.append_message(OWNER, conversation.pk, role="user", content=n)
    seen: list[Message] = []

    def receiver(sender: type, instance: Message, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Message)
    try:
        page = store.list_messages(OWNER, conversation.pk, after=first.pk)
    finally:
        post_init.disconnect(receiver, sender=Message)
    assert [m.content for m in page.items] == [0, 1, 2]
    assert seen == page.items and all(a is b for a, b in zip(seen, page.items))
    for read in page.items:
        assert_same_instance(read, Message.objects.get(pk=read.pk))


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's session time zone")
def test_a_page_read_in_another_session_time_zone_keeps_djangos_time_loader():
    """Only a UTC session reads times with psycopg's own loader; any other keeps Django's, so the page reads as the ORM does."""
    from django.db import transaction

    store = ConversationStore()
    conversation = store.create(OWNER)
    first = store.append_message(OWNER, conversation.pk, role="user", content="first")
    store.append_message(OWNER, conversation.pk, role="user", content="second")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL TIME ZONE 'Asia/Kolkata'")
        (read,) = store.list_messages(OWNER, conversation.pk, after=first.pk).items
        loaded = Message.objects.get(pk=read.pk)
    assert_same_instance(read, loaded)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: SQLite's write lock serialises both")
def test_a_delete_mid_turn_waits_for_the_producer_instead_of_deadlocking():
    """The delete takes the turn's lock order (supervision row, then conversation).

    A producer holds its fence (the supervision row) and, once the delete waits
    on a lock, appends (locks the conversation). A delete that locked the
    conversation first and reached the supervision row by cascade would hold one
    row each with the producer: PostgreSQL answers one of them "deadlock
    detected" (the CI failure of test_agui's delete mid-turn). In order, the
    producer commits and the delete then removes everything.
    """
    import threading
    import time
    import uuid

    from django.db import transaction

    from agent_persistence.models import Conversation, TurnSupervision
    from agent_persistence.stores.fencing import fence
    from agent_persistence.stores.supervision import SupervisionStore
    from agent_persistence.testing.concurrency import run_in_threads

    store = ConversationStore()
    conversation = store.create(OWNER)
    epoch = SupervisionStore().claim(OWNER, conversation.pk, message_id=uuid.uuid4()).epoch
    fenced = threading.Event()

    def waiting_on_a_lock() -> bool:
        """Whether another backend waits on a lock (asked inside the producer's transaction, hence the cleared snapshot)."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return cursor.fetchone()[0] > 0

    def produce() -> str:
        with transaction.atomic():
            fence(conversation.pk, epoch)
            fenced.set()
            deadline = time.monotonic() + 10
            while not waiting_on_a_lock():
                assert time.monotonic() < deadline, "the delete never waited on a lock"
                time.sleep(0.01)
            Conversation.objects.select_for_update().get(pk=conversation.pk)
            Conversation.objects.filter(pk=conversation.pk).update(title="sealed")
        return "committed"

    def delete() -> str:
        assert fenced.wait(10)
        store.delete(OWNER, conversation.pk)
        return "deleted"

    # Each outcome is a result or the exception raised (deadlock detected, under the old lock order).
    assert run_in_threads(2, lambda index: produce() if index == 0 else delete(), timeout=30) == ["committed", "deleted"]
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not TurnSupervision.objects.filter(pk=conversation.pk).exists()


@pytest.mark.django_db
def test_a_counted_page_counts_in_its_own_statement_without_a_window():
    """The total comes from a subquery of the page's statement (one snapshot), not ``COUNT(*) OVER ()``.

    A window over the listing reads every row of it from the table before the page is cut: on a
    100,000-message transcript the counted page took 88 ms against 4.6 ms for a raw count and page.
    """
    from django.test.utils import CaptureQueriesContext

    store = ConversationStore()
    conversation = store.create(OWNER)
    messages = [store.append_message(OWNER, conversation.pk, role="user", content=f"m{n}") for n in range(7)]
    with CaptureQueriesContext(connection) as queries:
        page = store.list_messages(OWNER, conversation.pk, after=messages[1].pk, limit=2, offset=1, with_total=True)
    assert [m.content for m in page.items] == ["m3", "m4"] and page.total == 5 and page.has_more
    counted = [query["sql"] for query in queries if "COUNT(" in query["sql"].upper()]
    assert len(counted) == 1 and "LIMIT" in counted[0].upper(), counted  # the count and the page: one statement
    assert not any(" OVER " in query["sql"].upper() for query in queries)
    # An offset past the end: an empty page, counted alone; the listing's other pages as before.
    past = store.list_messages(OWNER, conversation.pk, limit=2, offset=9, with_total=True)
    assert past.items == [] and past.total == 7 and not past.has_more
    last = store.list_messages(OWNER, conversation.pk, limit=5, offset=5, with_total=True)
    assert [m.content for m in last.items] == ["m5", "m6"] and last.total == 7 and not last.has_more
    assert store.list_messages(OWNER, store.create(OWNER).pk, with_total=True).total == 0
