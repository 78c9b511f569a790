"""The contract of a conversation store, as a pytest class a custom backend can subclass.

Subclass :class:`ConversationStoreContract` in a test module and override
``make_store()`` to run every rule against another backend::

    class TestMyConversationStore(ConversationStoreContract):
        def make_store(self):
            return MyConversationStore()

The suite asserts through the store API only: it arranges data with the other
stores of the family (:mod:`agent_persistence.testing.family`), freezes the
clock to get equal or past timestamps, and proves that a refused call wrote
nothing by reading everything back. Race tests run real threads on committed data.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, Callable

import pytest
from asgiref.sync import async_to_sync

from ..conf import app_settings
from ..exceptions import Conflict, ConversationNotOwned, NotFound, PreconditionFailed, StorageLimit, Validation
from ..ids import uuid7
from ..models import Conversation, Message
from ..scope import Scope
from ..stores.conversations import thread_tag
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract, count_conversations, frozen_clock, new_run, record_of

LONG_AGO = datetime(2020, 1, 1, tzinfo=dt_timezone.utc)
NOON = datetime(2024, 1, 2, 12, 0, tzinfo=dt_timezone.utc)

PUBLIC_METHODS = (
    "create",
    "get",
    "list",
    "update",
    "update_if",
    "delete",
    "share",
    "append_message",
    "get_message",
    "list_messages",
    "update_message",
    "delete_message",
    "merge_messages",
    "replace_messages",
)


def snapshot(store: Any, conversation_id: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Everything the owner reads of a conversation, to prove a refused call changed nothing."""
    try:
        conversation = record_of(store.get(ALICE, conversation_id))
    except NotFound:
        return None, []
    messages = store.list_messages(ALICE, conversation_id, limit=app_settings.MAX_PAGE_SIZE).items
    return conversation, [record_of(message) for message in messages]


def message_exists(store: Any, scope: Scope, message: Any) -> bool:
    try:
        store.get_message(scope, message.conversation_id, message.id)
    except NotFound:
        return False
    return True


def limits(settings: Any, **values: Any) -> None:
    """Override AGENT_PERSISTENCE keys for one test (pytest-django's ``settings`` fixture)."""
    settings.AGENT_PERSISTENCE = {**(getattr(settings, "AGENT_PERSISTENCE", None) or {}), **values}


def ids(items: Any) -> list[Any]:
    return [item.id for item in items]


def json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def same_instant(text: Any, moment: datetime) -> bool:
    return isinstance(text, str) and datetime.fromisoformat(text.replace("Z", "+00:00")) == moment


# Every write, as called by a scope that may not make it.
OWNER_ONLY_WRITES: dict[str, Callable[[Any, Scope, Any, Any], Any]] = {
    "update": lambda store, scope, conversation, message: store.update(scope, conversation, title="taken"),
    "update_if": lambda store, scope, conversation, message: store.update_if(scope, conversation, 0, title="taken"),
    "share": lambda store, scope, conversation, message: store.share(scope, conversation, False),
    "delete": lambda store, scope, conversation, message: store.delete(scope, conversation),
    "append_message": lambda store, scope, conversation, message: store.append_message(
        scope, conversation, role="assistant", content="taken"
    ),
    "append_message_create": lambda store, scope, conversation, message: store.append_message(
        scope, conversation, role="user", content="taken", create=True
    ),
    "update_message": lambda store, scope, conversation, message: store.update_message(
        scope, conversation, message, content="taken"
    ),
    "delete_message": lambda store, scope, conversation, message: store.delete_message(scope, conversation, message),
    "merge_messages": lambda store, scope, conversation, message: store.merge_messages(
        scope, conversation, [{"id": str(message), "role": "user", "content": "taken"}]
    ),
    "merge_messages_create": lambda store, scope, conversation, message: store.merge_messages(
        scope, conversation, [{"role": "user", "content": "taken"}], create=True
    ),
    "merge_messages_empty": lambda store, scope, conversation, message: store.merge_messages(scope, conversation, []),
    "replace_messages": lambda store, scope, conversation, message: store.replace_messages(
        scope, conversation, [{"id": str(message), "role": "user", "content": "taken"}]
    ),
    "replace_messages_create": lambda store, scope, conversation, message: store.replace_messages(
        scope, conversation, [{"role": "user", "content": "taken"}], create=True
    ),
    "replace_messages_empty": lambda store, scope, conversation, message: store.replace_messages(
        scope, conversation, []
    ),
}


class ConversationStoreContract(FamilyContract):
    """Every rule of the conversation store; see ``docs/reference/stores/conversations.md``."""

    def make_store(self) -> Any:
        return self.family.conversations

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    @pytest.fixture
    def conversation(self, store: Any) -> Conversation:
        return store.create(ALICE, agent="helper", title="Plans")

    @pytest.fixture
    def old_conversation(self, store: Any) -> Conversation:
        """A conversation written long ago, so a test sees whether a write moves ``updated_at``."""
        with frozen_clock(LONG_AGO):
            return store.create(ALICE, agent="helper", title="Plans")

    def append(self, store: Any, conversation: Any, content: Any = "hi", **fields: Any) -> Message:
        fields.setdefault("role", "user")
        return store.append_message(ALICE, conversation.id, content=content, **fields)

    # -- create ---------------------------------------------------------------------------------

    def test_create_starts_at_version_zero_with_defaults(self, store: Any) -> None:
        created = store.create(ALICE)
        stored = store.get(ALICE, created.id)
        for conversation in (created, stored):
            assert (conversation.tenant, conversation.owner) == ("acme", "alice")
            assert conversation.version == 0
            assert conversation.agent == ""
            assert conversation.title is None
            assert conversation.metadata == {}
            assert conversation.state == {}
            assert conversation.shared is False
            assert conversation.pinned is False
            assert conversation.last_turn_status is None
            assert conversation.action_due_at is None
        assert created.created_at == stored.created_at == stored.updated_at
        assert isinstance(created.id, uuid.UUID) and created.id.version == 7

    def test_create_keeps_a_client_chosen_id_and_the_given_fields(self, store: Any) -> None:
        chosen = uuid.uuid4()
        created = store.create(
            ALICE,
            id=str(chosen),
            agent="helper",
            title="Plans",
            metadata={"pinned": True, "tags": ["a"]},
            state={"step": 2},
            shared=True,
            action_due_at=NOON,
        )
        assert created.id == chosen
        stored = store.get(ALICE, chosen)
        assert (stored.agent, stored.title) == ("helper", "Plans")
        assert (stored.metadata, stored.state) == ({"pinned": True, "tags": ["a"]}, {"step": 2})
        assert stored.shared is True and stored.pinned is True and stored.action_due_at == NOON

    def test_create_with_an_existing_id_is_a_conflict_and_changes_nothing(self, store: Any) -> None:
        first = store.create(MALLORY, title="theirs")
        for scope in (ALICE, MALLORY):
            with pytest.raises(Conflict) as caught:
                store.create(scope, id=first.id, title="mine")
            assert caught.value.code == "conversation_exists"
        assert store.get(MALLORY, first.id).title == "theirs"
        assert count_conversations(store) == 1

    @pytest.mark.parametrize("bad_id", ["nope", 12, "", uuid.uuid4().hex[:-1]])
    def test_create_with_a_malformed_id_is_invalid_id(self, store: Any, bad_id: Any) -> None:
        with pytest.raises(Validation) as caught:
            store.create(ALICE, id=bad_id)
        assert caught.value.code == "invalid_id"
        assert count_conversations(store) == 0

    @pytest.mark.parametrize(
        "fields",
        [
            {"title": "x" * 501},
            {"title": 5},
            {"title": "a\x00b"},
            {"agent": None},
            {"agent": "x" * 256},
            {"metadata": ["not", "an", "object"]},
            {"metadata": {"ratio": float("nan")}},
            {"metadata": {"a\x00": 1}},
            {"metadata": {"x": {1, 2}}},
            {"state": "not an object"},
            {"state": {"v": float("inf")}},
            {"shared": "yes"},
            {"action_due_at": "next tuesday"},
            {"action_due_at": datetime(2024, 1, 1)},  # no time zone
            {"action_due_at": 1700000000},
        ],
    )
    def test_create_refuses_bad_input_and_writes_nothing(self, store: Any, fields: dict[str, Any]) -> None:
        with pytest.raises(Validation):
            store.create(ALICE, **fields)
        assert count_conversations(store) == 0

    def test_create_refuses_a_state_over_the_limit(self, store: Any, settings: Any) -> None:
        limits(settings, MAX_STATE_BYTES=100)
        store.create(ALICE, state={"blob": "x" * 50})
        with pytest.raises(StorageLimit) as caught:
            store.create(ALICE, state={"blob": "x" * 200})
        assert caught.value.code == "too_large"
        assert count_conversations(store) == 1

    # -- get ------------------------------------------------------------------------------------

    def test_get_is_for_the_owner_and_for_the_tenant_when_shared(self, store: Any, conversation: Conversation) -> None:
        assert store.get(ALICE, conversation.id).id == conversation.id
        for outsider in (BOB, MALLORY):
            with pytest.raises(NotFound):
                store.get(outsider, conversation.id)
        store.share(ALICE, conversation.id)
        assert store.get(BOB, conversation.id).id == conversation.id
        with pytest.raises(NotFound):
            store.get(MALLORY, conversation.id)

    @pytest.mark.parametrize("missing", [uuid.uuid4(), "nope", None, 42])
    def test_get_of_an_unknown_or_malformed_id_is_not_found(self, store: Any, missing: Any) -> None:
        with pytest.raises(NotFound):
            store.get(ALICE, missing)

    # -- readable_ids (the websocket access sweep) ---------------------------------------------

    def test_readable_ids_are_the_pairs_whose_scope_may_read_now(self, store: Any) -> None:
        private, shared = store.create(ALICE), store.create(ALICE, shared=True)
        bobs = store.create(BOB)
        pairs = {(scope, conversation.id) for scope in (ALICE, BOB, MALLORY) for conversation in (private, shared, bobs)}
        assert store.readable_ids(pairs) == {
            (ALICE, private.id), (ALICE, shared.id),
            (BOB, shared.id), (BOB, bobs.id),
        }
        store.share(ALICE, shared.id, False)
        store.delete(BOB, bobs.id)
        assert store.readable_ids(pairs) == {(ALICE, private.id), (ALICE, shared.id)}

    def test_readable_ids_take_text_ids_and_leave_out_unknown_and_malformed_ones(self, store: Any) -> None:
        conversation = store.create(ALICE)
        pairs = [(ALICE, str(conversation.id)), (ALICE, uuid.uuid4()), (ALICE, "nope"), (ALICE, None), (BOB, 42)]
        assert store.readable_ids(pairs) == {(ALICE, conversation.id)}
        assert store.readable_ids([]) == set()

    def test_readable_ids_read_more_conversations_than_one_batch(self, store: Any) -> None:
        """Past the ORM store's 500 ids per query, every conversation is still read."""
        created = [store.create(ALICE if index % 2 else BOB) for index in range(520)]
        pairs = {(ALICE, conversation.id) for conversation in created}
        assert store.readable_ids(pairs) == {(ALICE, conversation.id) for conversation in created if conversation.owner == ALICE.user}

    # -- list -----------------------------------------------------------------------------------

    def test_list_is_newest_first_and_asc_reverses(self, store: Any) -> None:
        created = [store.create(ALICE, title=str(i)) for i in range(3)]
        assert ids(store.list(ALICE).items) == ids(reversed(created))
        assert ids(store.list(ALICE, order="asc").items) == ids(created)

    def test_list_pages_carry_total_limit_offset_and_has_more(self, store: Any) -> None:
        created = [store.create(ALICE) for _ in range(5)]
        newest_first = ids(reversed(created))
        first = store.list(ALICE, limit=2)
        paging = (first.total, first.limit, first.offset, first.has_more)
        assert (ids(first.items), paging) == (newest_first[:2], (5, 2, 0, True))
        middle = store.list(ALICE, limit=2, offset=2)
        assert (ids(middle.items), middle.has_more) == (newest_first[2:4], True)
        last = store.list(ALICE, limit=2, offset=4)
        assert (ids(last.items), last.total, last.has_more) == (newest_first[4:], 5, False)
        beyond = store.list(ALICE, limit=2, offset=50)
        assert (beyond.items, beyond.total, beyond.has_more) == ([], 5, False)

    def test_list_default_limit_is_the_page_size_setting(self, store: Any, settings: Any) -> None:
        assert store.list(ALICE).limit == app_settings.DEFAULT_PAGE_SIZE
        limits(settings, DEFAULT_PAGE_SIZE=2)
        for _ in range(3):
            store.create(ALICE)
        page = store.list(ALICE)
        assert (len(page.items), page.limit, page.total, page.has_more) == (2, 2, 3, True)

    def test_list_holds_only_the_scopes_own_conversations(self, store: Any) -> None:
        mine = store.create(ALICE)
        store.create(BOB, shared=True)
        store.create(MALLORY)
        assert ids(store.list(ALICE).items) == [mine.id]
        assert store.list(ALICE).total == 1

    def test_list_rows_with_equal_created_at_keep_insertion_order(self, store: Any) -> None:
        with frozen_clock(NOON):
            created = [store.create(ALICE) for _ in range(4)]
        assert {conversation.created_at for conversation in store.list(ALICE).items} == {NOON}
        assert ids(store.list(ALICE, order="asc").items) == ids(created)
        assert ids(store.list(ALICE).items) == ids(reversed(created))
        assert ids(store.list(ALICE, limit=3, offset=1, order="asc").items) == ids(created[1:4])

    def test_list_filters_by_agent(self, store: Any) -> None:
        helper = store.create(ALICE, agent="helper")
        store.create(ALICE, agent="other")
        page = store.list(ALICE, agent="helper")
        assert (ids(page.items), page.total) == ([helper.id], 1)

    def test_list_pinned_first_holds_across_pages(self, store: Any) -> None:
        created = [store.create(ALICE, title=str(i)) for i in range(6)]
        store.update(ALICE, created[1].id, metadata={"pinned": True})
        store.update(ALICE, created[4].id, metadata={"pinned": True})
        store.update(ALICE, created[2].id, metadata={"pinned": "yes"})  # only true pins
        c = ids(created)

        def walk(order: str) -> list[Any]:
            pages = [store.list(ALICE, pinned_first=True, order=order, limit=2, offset=offset) for offset in (0, 2, 4)]
            assert [page.has_more for page in pages] == [True, True, False]
            return [item for page in pages for item in ids(page.items)]

        assert walk("desc") == [c[4], c[1], c[5], c[3], c[2], c[0]]
        assert walk("asc") == [c[1], c[4], c[0], c[2], c[3], c[5]]
        assert ids(store.list(ALICE).items) == list(reversed(c))  # without the flag, plain order

    def test_pinned_mirrors_metadata_pinned_true_on_every_write(self, store: Any) -> None:
        conversation = store.create(ALICE, metadata={"pinned": True})
        assert store.get(ALICE, conversation.id).pinned is True
        assert store.update(ALICE, conversation.id, metadata={"pinned": 1}).pinned is False
        assert store.update_if(ALICE, conversation.id, 1, metadata={"pinned": True}).pinned is True
        assert store.update(ALICE, conversation.id, title="kept").pinned is True
        assert store.update(ALICE, conversation.id, metadata=None).pinned is False
        assert store.get(ALICE, conversation.id).metadata == {}

    def test_list_action_due_before_is_earliest_first_inclusive(self, store: Any) -> None:
        late = store.create(ALICE, action_due_at=NOON + timedelta(hours=3))
        first_tie = store.create(ALICE, action_due_at=NOON + timedelta(hours=1))
        undated = store.create(ALICE)
        boundary = store.create(ALICE)
        store.update(ALICE, boundary.id, action_due_at=NOON + timedelta(hours=2))
        second_tie = store.create(ALICE, action_due_at=NOON + timedelta(hours=1))
        earlier = store.create(ALICE, action_due_at=NOON)
        cleared = store.create(ALICE, action_due_at=NOON)
        store.update(ALICE, cleared.id, action_due_at=None)
        store.create(BOB, action_due_at=NOON)
        expected = [earlier.id, first_tie.id, second_tie.id, boundary.id]
        for order in ("desc", "asc"):
            page = store.list(ALICE, action_due_before=NOON + timedelta(hours=2), order=order)
            assert (ids(page.items), page.total) == (expected, 4)
        second_page = store.list(ALICE, action_due_before=NOON + timedelta(hours=2), limit=2, offset=2)
        assert ids(second_page.items) == expected[2:]
        assert late.id not in expected and undated.id not in expected

    @pytest.mark.parametrize(
        "arguments",
        [
            {"limit": 0},
            {"limit": "10"},
            {"limit": 10**9},
            {"offset": -1},
            {"offset": 1.5},
            {"order": "up"},
            {"pinned_first": "yes"},
            {"action_due_before": "soon"},
            {"agent": 7},
        ],
    )
    def test_list_refuses_bad_arguments(self, store: Any, arguments: dict[str, Any]) -> None:
        with pytest.raises(Validation):
            store.list(ALICE, **arguments)

    # -- update, update_if, share ---------------------------------------------------------------

    def test_update_replaces_the_given_fields_and_bumps_version(self, store: Any, old_conversation: Conversation) -> None:
        conversation = old_conversation
        updated = store.update(ALICE, conversation.id, title=None, state={"step": 1}, last_turn_status="running")
        assert updated.version == 1
        assert updated.updated_at > LONG_AGO
        assert (updated.title, updated.state, updated.last_turn_status) == (None, {"step": 1}, "running")
        assert (updated.agent, updated.metadata) == ("helper", {})  # untouched
        again = store.update(ALICE, conversation.id, agent="other", shared=True, action_due_at=NOON)
        assert (again.version, again.agent, again.shared) == (2, "other", True)
        assert (again.action_due_at, again.state) == (NOON, {"step": 1})
        stored = store.get(ALICE, conversation.id)
        assert (stored.version, stored.updated_at, stored.agent) == (2, again.updated_at, "other")

    @pytest.mark.parametrize("status", ["running", "complete", "errored", "cancelled", None])
    def test_update_accepts_every_last_turn_status(self, store: Any, conversation: Conversation, status: Any) -> None:
        assert store.update(ALICE, conversation.id, last_turn_status=status).last_turn_status == status

    @pytest.mark.parametrize(
        "changes",
        [
            {"last_turn_status": "done"},
            {"title": "x" * 501},
            {"title": ["x"]},
            {"agent": None},
            {"metadata": "pinned"},
            {"metadata": {"v": float("nan")}},
            {"state": {"k": "\x00"}},
            {"shared": 1},
            {"action_due_at": "tomorrow"},
        ],
    )
    def test_update_refuses_bad_input_and_writes_nothing(
        self, store: Any, conversation: Conversation, changes: dict[str, Any]
    ) -> None:
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.update(ALICE, conversation.id, **changes)
        with pytest.raises(Validation):
            store.update_if(ALICE, conversation.id, 0, **changes)
        assert snapshot(store, conversation.id) == before

    def test_update_refuses_a_state_over_the_limit(self, store: Any, conversation: Conversation, settings: Any) -> None:
        limits(settings, MAX_STATE_BYTES=100)
        before = snapshot(store, conversation.id)
        with pytest.raises(StorageLimit):
            store.update(ALICE, conversation.id, state={"blob": "x" * 200})
        assert snapshot(store, conversation.id) == before

    def test_update_of_an_unknown_conversation_is_not_found(self, store: Any) -> None:
        for missing in (uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.update(ALICE, missing, title="x")

    def test_update_if_writes_only_at_the_stored_version(self, store: Any, conversation: Conversation) -> None:
        won = store.update_if(ALICE, conversation.id, 0, title="first")
        assert (won.version, won.title) == (1, "first")
        assert store.update_if(ALICE, conversation.id, 0, title="stale") is None
        assert store.update_if(ALICE, conversation.id, 7, title="future") is None
        stored = store.get(ALICE, conversation.id)
        assert (stored.version, stored.title) == (1, "first")
        assert store.update_if(ALICE, conversation.id, 1, state={"a": 1}).version == 2

    def test_update_if_of_an_unknown_or_unreadable_conversation_is_not_found(
        self, store: Any, conversation: Conversation
    ) -> None:
        with pytest.raises(NotFound):
            store.update_if(ALICE, uuid.uuid4(), 0, title="x")
        for outsider in (BOB, MALLORY):
            with pytest.raises(NotFound):
                store.update_if(outsider, conversation.id, 0, title="x")
        assert store.get(ALICE, conversation.id).version == 0

    @pytest.mark.parametrize("version", [-1, "0", True, 1.0, None, 2**63])
    def test_update_if_refuses_a_malformed_version(self, store: Any, conversation: Conversation, version: Any) -> None:
        with pytest.raises(Validation):
            store.update_if(ALICE, conversation.id, version, title="x")
        assert store.get(ALICE, conversation.id).version == 0

    def test_share_is_an_update(self, store: Any, conversation: Conversation) -> None:
        shared = store.share(ALICE, conversation.id)
        assert (shared.shared, shared.version) == (True, 1)
        unshared = store.share(ALICE, conversation.id, shared=False)
        assert (unshared.shared, unshared.version) == (False, 2)
        with pytest.raises(NotFound):
            store.get(BOB, conversation.id)

    # -- owner-only writes ----------------------------------------------------------------------

    @pytest.mark.parametrize("operation", sorted(OWNER_ONLY_WRITES))
    @pytest.mark.parametrize(
        "scope, shared, error",
        [
            (BOB, True, ConversationNotOwned),
            (BOB, False, NotFound),
            (MALLORY, True, NotFound),
            (MALLORY, False, NotFound),
        ],
        ids=["reader-of-shared", "same-tenant-unshared", "other-tenant-shared", "other-tenant-unshared"],
    )
    def test_writes_are_owner_only_and_leave_the_conversation_untouched(
        self, store: Any, conversation: Conversation, operation: str, scope: Scope, shared: bool, error: type
    ) -> None:
        message = self.append(store, conversation)
        if shared:
            store.share(ALICE, conversation.id)
        before = snapshot(store, conversation.id)
        with pytest.raises(error) as caught:
            OWNER_ONLY_WRITES[operation](store, scope, conversation.id, message.id)
        assert caught.value.code == ("conversation_not_owned" if error is ConversationNotOwned else "not_found")
        assert snapshot(store, conversation.id) == before
        assert count_conversations(store) == 1

    # -- delete ---------------------------------------------------------------------------------

    def test_delete_removes_everything_the_conversation_holds(
        self, store: Any, stores: Any, conversation: Conversation, django_capture_on_commit_callbacks: Any
    ) -> None:
        other = store.create(ALICE)
        kept = self.append(store, other)
        message = self.append(store, conversation)
        run = new_run(stores, conversation)
        interrupt = stores.interrupts.create(ALICE, conversation.id, id=uuid7(), run_id=run.id, kind="generic")
        stores.events.append(ALICE, conversation.id, [{"type": "session.status_idle"}])
        task = stores.tasks.create(ALICE, title="t", conversation_id=conversation.id)
        claim = stores.supervision.claim(ALICE, conversation.id, message_id=uuid.uuid4())
        stores.checkpoints.save(conversation.id, {"k": 1}, epoch=claim.epoch)
        stored_file = stores.files.save(
            ALICE, conversation_id=conversation.id, message_id=message.id, content=b"abc", name="a.txt"
        )
        assert stores.content_exists(stored_file)

        with django_capture_on_commit_callbacks(execute=True):
            assert store.delete(ALICE, conversation.id) is None

        with pytest.raises(NotFound):
            store.get(ALICE, conversation.id)
        for read in (
            lambda: stores.runs.get(ALICE, run.id),
            lambda: stores.interrupts.get(ALICE, interrupt.id),
            lambda: stores.tasks.get(ALICE, task.id),
            lambda: stores.files.get(ALICE, stored_file.id),
        ):
            with pytest.raises(NotFound):
                read()
        assert not stores.content_exists(stored_file)
        assert stores.supervision.read(conversation.id) is None and stores.checkpoints.load(conversation.id) == {}
        # The same id made again holds nothing of the old conversation.
        store.create(ALICE, id=conversation.id)
        assert store.list_messages(ALICE, conversation.id).total == 0
        assert stores.runs.list(ALICE, conversation.id).total == 0
        assert stores.interrupts.list(ALICE, conversation.id) == []
        assert stores.events.list(ALICE, conversation.id).events == []
        assert stores.files.list(ALICE, conversation.id).total == 0
        assert ids(store.list_messages(ALICE, other.id).items) == [kept.id]
        store.delete(ALICE, conversation.id)
        with pytest.raises(NotFound):
            store.delete(ALICE, conversation.id)

    def test_delete_of_an_unknown_conversation_is_not_found(self, store: Any) -> None:
        for missing in (uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.delete(ALICE, missing)

    # -- append_message -------------------------------------------------------------------------

    def test_append_hands_out_positions_in_order_and_reads_absent_fields_as_absent(
        self, store: Any, old_conversation: Conversation
    ) -> None:
        conversation = old_conversation
        appended = [self.append(store, conversation, f"m{i}") for i in range(3)]
        assert [message.position for message in appended] == [0, 1, 2]
        for message in (appended[0], store.get_message(ALICE, conversation.id, appended[0].id)):
            assert (message.role, message.content, message.conversation_id) == ("user", "m0", conversation.id)
            assert message.name is None and message.tool_call_id is None
            assert message.tool_calls is None and message.files is None and message.usage is None
            assert message.metadata == {} and message.run_id is None
            assert isinstance(message.id, uuid.UUID)
        stored = store.get(ALICE, conversation.id)
        assert stored.version == 0  # messages are not updates of the conversation
        assert stored.updated_at > LONG_AGO

    def test_append_keeps_every_given_field(self, store: Any, stores: Any, conversation: Conversation) -> None:
        chosen = uuid.uuid4()
        run = new_run(stores, conversation, message_id=chosen)
        message = store.append_message(
            ALICE,
            conversation.id,
            id=str(chosen),
            role="assistant",
            content=[{"type": "text", "text": "hello"}],
            name="helper",
            tool_call_id="call_1",
            tool_calls=[{"id": "call_1", "name": "search"}],
            files=[{"id": "f1"}],
            metadata={"model": "m"},
            usage={"tokens": 3},
            run_id=run.id,
        )
        stored = store.get_message(ALICE, conversation.id, chosen)
        for read in (message, stored):
            assert read.id == chosen
            assert (read.role, read.content, read.name, read.tool_call_id) == (
                "assistant", [{"type": "text", "text": "hello"}], "helper", "call_1"
            )
            assert (read.tool_calls, read.files, read.metadata, read.usage, read.run_id) == (
                [{"id": "call_1", "name": "search"}], [{"id": "f1"}], {"model": "m"}, {"tokens": 3}, run.id
            )
        assert self.append(store, conversation, files=[]).files is None  # an empty list reads as absent

    def test_append_without_create_to_an_absent_conversation_is_not_found(self, store: Any) -> None:
        absent = uuid.uuid4()
        for conversation_id in (absent, "nope"):
            with pytest.raises(NotFound):
                store.append_message(ALICE, conversation_id, role="assistant", content="late")
        assert count_conversations(store) == 0
        with pytest.raises(NotFound):
            store.list_messages(ALICE, absent)

    def test_append_with_create_makes_the_conversation_once(self, store: Any) -> None:
        new_id = uuid.uuid4()
        first = store.append_message(ALICE, new_id, role="user", content="hi", create=True, agent="helper", title="T")
        conversation = store.get(ALICE, new_id)
        assert (conversation.owner, conversation.tenant) == ("alice", "acme")
        assert (conversation.agent, conversation.title) == ("helper", "T")
        assert conversation.version == 0 and first.position == 0
        second = store.append_message(ALICE, new_id, role="user", content="again", create=True, title="ignored")
        assert second.position == 1
        assert store.get(ALICE, new_id).title == "T"
        with pytest.raises(Validation) as caught:
            store.append_message(ALICE, "nope", role="user", content="hi", create=True)
        assert caught.value.code == "invalid_id"

    def test_append_with_create_never_takes_someone_elses_conversation(self, store: Any) -> None:
        theirs = store.create(MALLORY)
        with pytest.raises(NotFound):
            store.append_message(ALICE, theirs.id, role="user", content="hi", create=True)
        assert store.list_messages(MALLORY, theirs.id).total == 0
        assert store.get(MALLORY, theirs.id).tenant == "other" and count_conversations(store) == 1

    def test_assistant_append_never_resurrects_a_deleted_conversation(
        self, store: Any, conversation: Conversation
    ) -> None:
        self.append(store, conversation)
        store.delete(ALICE, conversation.id)
        with pytest.raises(NotFound):
            store.append_message(ALICE, conversation.id, role="assistant", content="the answer")
        assert count_conversations(store) == 0
        with pytest.raises(NotFound):
            store.list_messages(ALICE, conversation.id)

    def test_append_with_a_taken_message_id_is_a_conflict_and_keeps_positions_gap_free(
        self, store: Any, conversation: Conversation
    ) -> None:
        other = store.create(ALICE)
        taken = self.append(store, conversation)
        foreign = self.append(store, other)
        for message_id in (taken.id, foreign.id):
            with pytest.raises(Conflict) as caught:
                self.append(store, conversation, "dup", id=message_id)
            assert caught.value.code == "message_exists"
        assert store.get_message(ALICE, other.id, foreign.id).conversation_id == other.id
        assert self.append(store, conversation).position == 1

    @pytest.mark.parametrize(
        "fields",
        [
            {"role": "robot"},
            {"role": None},
            {"content": float("nan")},
            {"content": "a\x00b"},
            {"content": {"k": object()}},
            {"name": "x" * 256},
            {"name": 3},
            {"tool_call_id": ["x"]},
            {"tool_calls": {"id": "not a list"}},
            {"files": "f1"},
            {"metadata": ["x"]},
            {"usage": [1]},
            {"id": "not-a-uuid"},
            {"run_id": "not-a-uuid"},
            {"agent": 5, "create": True},
            {"title": "x" * 501, "create": True},
            {"create": "yes"},
        ],
    )
    def test_append_refuses_bad_input_and_writes_nothing(
        self, store: Any, conversation: Conversation, fields: dict[str, Any]
    ) -> None:
        self.append(store, conversation)
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            self.append(store, conversation, **fields)
        assert snapshot(store, conversation.id) == before

    def test_append_refuses_a_run_outside_the_conversation(self, store: Any, stores: Any, conversation: Conversation) -> None:
        other = store.create(ALICE)
        foreign_run = new_run(stores, other)
        before = snapshot(store, conversation.id)
        for run_id in (foreign_run.id, uuid.uuid4()):
            with pytest.raises(NotFound):
                self.append(store, conversation, run_id=run_id)
        assert snapshot(store, conversation.id) == before

    def test_append_refuses_a_message_over_the_limit(
        self, store: Any, conversation: Conversation, settings: Any
    ) -> None:
        limits(settings, MAX_MESSAGE_BYTES=200)
        self.append(store, conversation, "x" * 150)
        before = snapshot(store, conversation.id)
        for fields in ({"content": "x" * 300}, {"content": "x" * 120, "tool_calls": [{"arguments": "y" * 120}]}):
            with pytest.raises(StorageLimit):
                self.append(store, conversation, **fields)
        assert snapshot(store, conversation.id) == before

    # -- JSON fidelity --------------------------------------------------------------------------

    def test_json_fields_return_what_json_round_tripping_gives(self, store: Any) -> None:
        moment = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt_timezone.utc)
        value = {"when": moment, "pair": (1, 2), "text": '{"a":1}', "nested": [None, True, 1.5, "x"]}
        conversation = store.create(ALICE, metadata=value, state=value)
        appended = self.append(
            store, conversation, value, metadata=value, usage=value, tool_calls=[value], files=[value]
        )
        for read in (conversation, store.get(ALICE, conversation.id)):
            for field in (read.metadata, read.state):
                self.assert_round_tripped(field, moment)
        listed = store.list_messages(ALICE, conversation.id).items[0]
        for read in (appended, store.get_message(ALICE, conversation.id, appended.id), listed):
            for field in (read.content, read.metadata, read.usage, read.tool_calls[0], read.files[0]):
                self.assert_round_tripped(field, moment)

    def assert_round_tripped(self, field: Any, moment: datetime) -> None:
        assert same_instant(field["when"], moment)
        assert field["pair"] == [1, 2] and isinstance(field["pair"], list)
        assert field["text"] == '{"a":1}'
        assert field["nested"] == [None, True, 1.5, "x"]

    @pytest.mark.parametrize("content", ['{"a":1}', "[1, 2]", "null", "true", "3", '"quoted"', "", None, 0, [], {}])
    def test_content_comes_back_as_given_even_when_text_looks_like_json(
        self, store: Any, conversation: Conversation, content: Any
    ) -> None:
        appended = self.append(store, conversation, content)
        stored = store.get_message(ALICE, conversation.id, appended.id).content
        assert stored == content and type(stored) is type(content)
        assert appended.content == content

    @pytest.mark.parametrize(
        "bad", [float("nan"), float("-inf"), "nul\x00here", {"k\x00": 1}, [1, {"x": float("nan")}]]
    )
    def test_nan_and_nul_are_validation_everywhere(self, store: Any, conversation: Conversation, bad: Any) -> None:
        message = self.append(store, conversation)
        before = snapshot(store, conversation.id)
        attempts: list[Callable[[], Any]] = [
            lambda: store.create(ALICE, metadata={"v": bad}),
            lambda: store.create(ALICE, state={"v": bad}),
            lambda: store.update(ALICE, conversation.id, metadata={"v": bad}),
            lambda: self.append(store, conversation, bad),
            lambda: self.append(store, conversation, metadata={"v": bad}),
            lambda: store.update_message(ALICE, conversation.id, message.id, content=bad),
            lambda: store.merge_messages(ALICE, conversation.id, [{"role": "user", "content": bad}]),
        ]
        for attempt in attempts:
            with pytest.raises(Validation):
                attempt()
        assert snapshot(store, conversation.id) == before and count_conversations(store) == 1

    # -- get_message, list_messages -------------------------------------------------------------

    def test_get_message_is_scoped_to_its_conversation(self, store: Any, conversation: Conversation) -> None:
        other = store.create(ALICE)
        message = self.append(store, conversation)
        foreign = self.append(store, other)
        assert store.get_message(ALICE, conversation.id, str(message.id)).id == message.id
        for missing in (foreign.id, uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.get_message(ALICE, conversation.id, missing)
        with pytest.raises(NotFound):
            store.get_message(BOB, conversation.id, message.id)
        store.share(ALICE, conversation.id)
        assert store.get_message(BOB, conversation.id, message.id).id == message.id

    def test_list_messages_is_oldest_first_and_desc_reverses_with_paging(
        self, store: Any, conversation: Conversation
    ) -> None:
        appended = [self.append(store, conversation, str(i)) for i in range(5)]
        page = store.list_messages(ALICE, conversation.id)
        assert ids(page.items) == ids(appended)
        assert (page.total, page.limit, page.offset, page.has_more) == (5, app_settings.DEFAULT_PAGE_SIZE, 0, False)
        newest = store.list_messages(ALICE, conversation.id, order="desc", limit=2, offset=1)
        assert (ids(newest.items), newest.total, newest.has_more) == ([appended[3].id, appended[2].id], 5, True)
        tail = store.list_messages(ALICE, conversation.id, limit=2, offset=4)
        assert (ids(tail.items), tail.has_more) == ([appended[4].id], False)

    def test_messages_with_equal_timestamps_keep_insertion_order(self, store: Any, conversation: Conversation) -> None:
        with frozen_clock(NOON):
            appended = [self.append(store, conversation, str(i)) for i in range(4)]
        assert {message.created_at for message in store.list_messages(ALICE, conversation.id).items} == {NOON}
        assert ids(store.list_messages(ALICE, conversation.id).items) == ids(appended)
        assert ids(store.list_messages(ALICE, conversation.id, order="desc").items) == ids(reversed(appended))

    def test_message_cursors_are_strict_and_total_counts_the_cursor_set(
        self, store: Any, conversation: Conversation
    ) -> None:
        m = [self.append(store, conversation, str(i)) for i in range(5)]
        before = store.list_messages(ALICE, conversation.id, before=m[3].id, with_total=True)
        assert (ids(before.items), before.total, before.has_more) == (ids(m[:3]), 3, False)
        after = store.list_messages(ALICE, conversation.id, after=str(m[1].id), with_total=True)
        assert (ids(after.items), after.total) == (ids(m[2:]), 3)
        between = store.list_messages(ALICE, conversation.id, after=m[0].id, before=m[4].id, with_total=True)
        assert (ids(between.items), between.total) == (ids(m[1:4]), 3)
        newest_before = store.list_messages(ALICE, conversation.id, before=m[4].id, order="desc", limit=2, with_total=True)
        assert (ids(newest_before.items), newest_before.total, newest_before.has_more) == ([m[3].id, m[2].id], 4, True)
        assert store.list_messages(ALICE, conversation.id, before=m[0].id).items == []
        assert store.list_messages(ALICE, conversation.id, after=m[4].id, with_total=True).total == 0

    def test_a_cursor_read_is_not_counted_unless_asked_and_has_more_is_exact(
        self, store: Any, conversation: Conversation
    ) -> None:
        m = [self.append(store, conversation, str(i)) for i in range(5)]
        pages = [
            store.list_messages(ALICE, conversation.id, after=m[0].id, limit=2),
            store.list_messages(ALICE, conversation.id, after=m[2].id, limit=2),
            store.list_messages(ALICE, conversation.id, before=m[4].id, order="desc", limit=3),
            store.list_messages(ALICE, conversation.id, before=m[4].id, order="desc", limit=4),
            store.list_messages(ALICE, conversation.id, before=m[4].id, order="desc", limit=3, offset=1),
            store.list_messages(ALICE, conversation.id, after=m[4].id),
        ]
        assert [(ids(page.items), page.total, page.has_more) for page in pages] == [
            (ids(m[1:3]), None, True),
            (ids(m[3:5]), None, False),
            ([m[3].id, m[2].id, m[1].id], None, True),
            ([m[3].id, m[2].id, m[1].id, m[0].id], None, False),
            ([m[2].id, m[1].id, m[0].id], None, False),
            ([], None, False),
        ]
        uncounted = store.list_messages(ALICE, conversation.id, limit=2, offset=2, with_total=False)
        assert (ids(uncounted.items), uncounted.total, uncounted.has_more) == (ids(m[2:4]), None, True)
        past_the_end = store.list_messages(ALICE, conversation.id, offset=2**63 - 1, with_total=False)
        assert (past_the_end.items, past_the_end.has_more) == ([], False)
        with pytest.raises(Validation):
            store.list_messages(ALICE, conversation.id, with_total="yes")

    def test_an_uncounted_cursor_read_still_hides_what_the_scope_may_not_see(
        self, store: Any, conversation: Conversation
    ) -> None:
        message = self.append(store, conversation)
        foreign = self.append(store, store.create(ALICE))
        for outsider in (BOB, MALLORY):
            for cursor in ({"after": message.id}, {"before": message.id}, {}):
                with pytest.raises(NotFound):
                    store.list_messages(outsider, conversation.id, with_total=False, **cursor)
        for cursor in (foreign.id, uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.list_messages(ALICE, conversation.id, before=cursor)
        with pytest.raises(NotFound):
            store.list_messages(ALICE, "nope", after=message.id)
        store.share(ALICE, conversation.id)
        assert store.list_messages(BOB, conversation.id, before=self.append(store, conversation).id).items[0].id == message.id

    def test_a_cursor_outside_the_conversation_is_not_found(self, store: Any, conversation: Conversation) -> None:
        self.append(store, conversation)
        foreign = self.append(store, store.create(ALICE))
        for cursor in (foreign.id, uuid.uuid4(), "nope", 5):
            for direction in ("before", "after"):
                with pytest.raises(NotFound):
                    store.list_messages(ALICE, conversation.id, **{direction: cursor})

    def test_list_messages_of_an_unreadable_conversation_is_not_found(
        self, store: Any, conversation: Conversation
    ) -> None:
        self.append(store, conversation)
        for outsider in (BOB, MALLORY):
            with pytest.raises(NotFound):
                store.list_messages(outsider, conversation.id)
        store.share(ALICE, conversation.id)
        assert store.list_messages(BOB, conversation.id).total == 1

    @pytest.mark.parametrize("arguments", [{"limit": 0}, {"offset": -2}, {"order": "newest"}, {"limit": "5"}])
    def test_list_messages_refuses_bad_paging(self, store: Any, conversation: Conversation, arguments: dict) -> None:
        with pytest.raises(Validation):
            store.list_messages(ALICE, conversation.id, **arguments)

    # -- update_message, delete_message ---------------------------------------------------------

    def test_update_message_moves_only_its_updated_at(self, store: Any, conversation: Conversation) -> None:
        with frozen_clock(LONG_AGO):
            appended = [self.append(store, conversation, str(i), metadata={"i": i}) for i in range(3)]
        before_conversation, neighbours = snapshot(store, conversation.id)

        updated = store.update_message(ALICE, conversation.id, appended[1].id, content={"edited": True})
        assert (updated.content, updated.metadata, updated.position) == ({"edited": True}, {"i": 1}, 1)
        assert updated.created_at == appended[1].created_at and updated.updated_at > LONG_AGO
        metadata_only = store.update_message(ALICE, conversation.id, appended[1].id, metadata={"seen": 1})
        assert (metadata_only.content, metadata_only.metadata) == ({"edited": True}, {"seen": 1})

        after_conversation, after = snapshot(store, conversation.id)
        # The conversation's thread revision moves (its thread tag, If-Match of a save, must change); nothing else.
        assert after_conversation.pop("thread_revision") == before_conversation.pop("thread_revision") + 2
        assert after_conversation == before_conversation
        assert [row for row in after if row["id"] != appended[1].id] == [
            row for row in neighbours if row["id"] != appended[1].id
        ]
        assert ids(store.list_messages(ALICE, conversation.id).items) == ids(appended)

    def test_update_message_refuses_unknown_messages_and_bad_input(
        self, store: Any, conversation: Conversation, settings: Any
    ) -> None:
        message = self.append(store, conversation, tool_calls=[{"arguments": "y" * 100}])
        foreign = self.append(store, store.create(ALICE))
        for missing in (foreign.id, uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.update_message(ALICE, conversation.id, missing, content="x")
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.update_message(ALICE, conversation.id, message.id, metadata="x")
        limits(settings, MAX_MESSAGE_BYTES=200)
        with pytest.raises(StorageLimit):
            store.update_message(ALICE, conversation.id, message.id, content="x" * 150)  # with its tool calls
        assert snapshot(store, conversation.id) == before
        assert store.get_message(ALICE, foreign.conversation_id, foreign.id).content == "hi"

    def test_delete_message_keeps_its_files(self, store: Any, stores: Any, conversation: Conversation) -> None:
        first, second = self.append(store, conversation), self.append(store, conversation)
        stored_file = stores.files.save(
            ALICE, conversation_id=conversation.id, message_id=first.id, content=b"abc", name="a.txt"
        )
        assert store.delete_message(ALICE, conversation.id, first.id) is None
        assert ids(store.list_messages(ALICE, conversation.id).items) == [second.id]
        kept = stores.files.get(ALICE, stored_file.id)
        assert kept.message_id is None and stores.files.read(ALICE, stored_file.id) == b"abc"
        for missing in (first.id, uuid.uuid4(), "nope"):
            with pytest.raises(NotFound):
                store.delete_message(ALICE, conversation.id, missing)
        assert store.get(ALICE, conversation.id).version == 0

    def test_a_message_of_another_conversation_cannot_be_deleted_through_this_one(
        self, store: Any, conversation: Conversation
    ) -> None:
        foreign = self.append(store, store.create(ALICE))
        with pytest.raises(NotFound):
            store.delete_message(ALICE, conversation.id, foreign.id)
        assert message_exists(store, ALICE, foreign)

    # -- merge_messages -------------------------------------------------------------------------

    def transcript(self, store: Any, conversation: Any) -> list[tuple[Any, Any]]:
        return [(message.id, message.content) for message in store.list_messages(ALICE, conversation.id).items]

    def stored_turns(self, store: Any, conversation: Any) -> list[Message]:
        turns = (("u1", "user"), ("a1", "assistant"), ("u2", "user"), ("a2", "assistant"))
        return [self.append(store, conversation, text, role=role) for text, role in turns]

    def test_merge_cuts_off_after_the_last_known_id_and_incoming_wins(
        self, store: Any, conversation: Conversation
    ) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        merged = store.merge_messages(
            ALICE,
            conversation.id,
            [{"id": str(u1.id), "role": "user", "content": "u1!"}, {"id": u2.id, "role": "user", "content": "u2!"}],
        )
        expected = [(u1.id, "u1!"), (a1.id, "a1"), (u2.id, "u2!")]
        assert [(message.id, message.content) for message in merged] == expected
        assert self.transcript(store, conversation) == expected
        assert not message_exists(store, ALICE, a2)

    def test_merge_replaces_known_ids_and_appends_new_ones_after_the_cutoff(
        self, store: Any, conversation: Conversation
    ) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        fresh = uuid.uuid4()
        merged = store.merge_messages(
            ALICE,
            conversation.id,
            [
                {"id": a1.id, "role": "assistant", "content": "a1 edited", "metadata": {"v": 2}, "name": "helper"},
                {"id": fresh, "role": "user", "content": "retry"},
                {"role": "assistant", "content": "no id: appended"},
            ],
        )
        assert [message.content for message in merged] == ["u1", "a1 edited", "retry", "no id: appended"]
        assert [message.id for message in merged][:3] == [u1.id, a1.id, fresh]
        replaced = store.get_message(ALICE, conversation.id, a1.id)
        assert (replaced.metadata, replaced.name, replaced.position) == ({"v": 2}, "helper", 1)
        positions = [message.position for message in merged]
        assert positions == sorted(positions) and len(set(positions)) == 4
        assert not message_exists(store, ALICE, u2) and not message_exists(store, ALICE, a2)

    def test_merge_without_known_ids_keeps_history_and_appends(self, store: Any, conversation: Conversation) -> None:
        stored = self.stored_turns(store, conversation)
        incoming = [{"role": "user", "content": "u3"}, {"role": "assistant", "content": "a3"}]
        merged = store.merge_messages(ALICE, conversation.id, incoming)
        assert [message.content for message in merged] == ["u1", "a1", "u2", "a2", "u3", "a3"]
        assert ids(merged)[:4] == ids(stored)

    def test_merge_of_an_empty_list_never_deletes_history(self, store: Any, conversation: Conversation) -> None:
        with frozen_clock(LONG_AGO):
            stored = self.stored_turns(store, conversation)
        before = snapshot(store, conversation.id)
        assert ids(store.merge_messages(ALICE, conversation.id, [])) == ids(stored)
        assert snapshot(store, conversation.id) == before

    def test_merge_with_create_makes_the_conversation_and_without_is_not_found(self, store: Any) -> None:
        absent = uuid.uuid4()
        with pytest.raises(NotFound):
            store.merge_messages(ALICE, absent, [{"role": "user", "content": "hi"}])
        assert count_conversations(store) == 0
        merged = store.merge_messages(ALICE, absent, [{"role": "user", "content": "hi"}], create=True, agent="helper")
        assert [message.content for message in merged] == ["hi"]
        conversation = store.get(ALICE, absent)
        assert (conversation.agent, conversation.version) == ("helper", 0)
        other = uuid.uuid4()
        assert store.merge_messages(ALICE, other, [], create=True) == []
        assert store.get(ALICE, other).owner == "alice"

    def test_merge_is_all_or_nothing(self, store: Any, conversation: Conversation) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        foreign = self.append(store, store.create(ALICE))
        before = snapshot(store, conversation.id)
        # The cutoff (u1) would drop a1..a2 and the edit would land, but a taken id undoes it all.
        with pytest.raises(Conflict) as caught:
            store.merge_messages(
                ALICE,
                conversation.id,
                [
                    {"id": u1.id, "role": "user", "content": "edited"},
                    {"id": foreign.id, "role": "user", "content": "x"},
                ],
            )
        assert caught.value.code == "message_exists"
        assert snapshot(store, conversation.id) == before

    @pytest.mark.parametrize(
        "messages",
        [
            "not a list",
            [["role", "user"]],
            [{"content": "no role"}],
            [{"role": "user", "content": "x", "colour": "red"}],
            [{"id": "same-id", "role": "user", "content": "x"}],
            [{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}],
        ],
    )
    def test_merge_refuses_bad_input_and_writes_nothing(
        self, store: Any, conversation: Conversation, messages: Any
    ) -> None:
        self.stored_turns(store, conversation)
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.merge_messages(ALICE, conversation.id, messages)
        assert snapshot(store, conversation.id) == before

    def test_merge_refuses_a_repeated_id(self, store: Any, conversation: Conversation) -> None:
        u1 = self.append(store, conversation)
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.merge_messages(
                ALICE,
                conversation.id,
                [{"id": u1.id, "role": "user", "content": "a"}, {"id": str(u1.id), "role": "user", "content": "b"}],
            )
        assert snapshot(store, conversation.id) == before

    # -- version --------------------------------------------------------------------------------

    def test_message_writes_never_bump_the_conversation_version(self, store: Any, conversation: Conversation) -> None:
        message = self.append(store, conversation)
        store.update_message(ALICE, conversation.id, message.id, content="edited")
        store.merge_messages(ALICE, conversation.id, [{"role": "user", "content": "more"}])
        store.delete_message(ALICE, conversation.id, message.id)
        assert store.get(ALICE, conversation.id).version == 0
        assert store.update(ALICE, conversation.id, title="t").version == 1

    # -- async twins ----------------------------------------------------------------------------

    def test_every_method_has_an_async_twin(self, store: Any) -> None:
        for name in PUBLIC_METHODS:
            assert callable(getattr(store, f"a{name}")), name
        created = async_to_sync(store.acreate)(ALICE, title="async")
        message = async_to_sync(store.aappend_message)(ALICE, created.id, role="user", content="hi")
        assert async_to_sync(store.aget)(ALICE, created.id).title == "async"
        assert ids(async_to_sync(store.alist_messages)(ALICE, created.id).items) == [message.id]
        with pytest.raises(NotFound):
            async_to_sync(store.aget)(BOB, created.id)

    # -- races ----------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_of_twenty_writers_at_one_version_exactly_one_wins(self, store: Any) -> None:
        rounds, writers = 50, 20
        conversations = [store.create(ALICE) for _ in range(rounds)]
        start_round = threading.Barrier(writers)

        def writer(index: int) -> list[Any]:
            outcomes: list[Any] = []
            for conversation in conversations:
                start_round.wait(30)
                try:
                    won = store.update_if(ALICE, conversation.id, 0, title=f"writer {index}")
                    outcomes.append(None if won is None else (won.version, won.title))
                except Exception as exc:  # noqa: BLE001 - counted below
                    outcomes.append(exc)
            return outcomes

        results = run_in_threads(writers, writer, timeout=120)
        assert not [result for result in results if isinstance(result, BaseException)]
        for number, conversation in enumerate(conversations):
            outcomes = [result[number] for result in results]
            assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)], outcomes
            winners = [outcome for outcome in outcomes if outcome is not None]
            assert len(winners) == 1, f"round {number}: {len(winners)} winners"
            stored = store.get(ALICE, conversation.id)
            assert (stored.version, stored.title) == winners[0] == (1, winners[0][1])

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_first_appends_create_one_conversation_holding_every_message(self, store: Any) -> None:
        rounds, writers = 8, 8
        new_ids = [uuid.uuid4() for _ in range(rounds)]
        start_round = threading.Barrier(writers)

        def first_append(index: int) -> list[Any]:
            outcomes: list[Any] = []
            for conversation_id in new_ids:
                start_round.wait(30)
                try:
                    outcomes.append(
                        store.append_message(ALICE, conversation_id, role="user", content=f"w{index}", create=True).id
                    )
                except Exception as exc:  # noqa: BLE001 - counted below
                    outcomes.append(exc)
            return outcomes

        results = run_in_threads(writers, first_append, timeout=120)
        assert not [result for result in results if isinstance(result, BaseException)]
        errors = [outcome for result in results for outcome in result if isinstance(outcome, BaseException)]
        assert not errors, errors
        assert count_conversations(store) == rounds
        for number, conversation_id in enumerate(new_ids):
            messages = store.list_messages(ALICE, conversation_id).items
            assert [message.position for message in messages] == list(range(writers))
            assert {message.id for message in messages} == {result[number] for result in results}

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_appends_get_positions_zero_to_n_minus_one(self, store: Any) -> None:
        writers, per_writer = 10, 5
        conversation = store.create(ALICE)

        def appender(index: int) -> list[Any]:
            return [self.append(store, conversation, f"{index}.{n}").position for n in range(per_writer)]

        results = run_in_threads(writers, appender, timeout=120)
        assert not [result for result in results if isinstance(result, BaseException)], results
        for positions in results:
            assert positions == sorted(positions)  # each writer's own appends keep their order
        stored = [message.position for message in store.list_messages(ALICE, conversation.id).items]
        assert sorted(stored) == list(range(writers * per_writer))
        assert len(stored) == writers * per_writer
        assert store.get(ALICE, conversation.id).version == 0

    @pytest.mark.django_db(transaction=True)
    def test_an_assistant_append_racing_a_delete_never_leaves_a_conversation_behind(self, store: Any) -> None:
        for _ in range(10):
            conversation = store.create(ALICE)
            self.append(store, conversation)

            def race(index: int) -> Any:
                if index == 0:
                    return store.delete(ALICE, conversation.id)
                return store.append_message(ALICE, conversation.id, role="assistant", content="answer")

            deleted, appended = run_in_threads(2, race)
            assert deleted is None
            assert isinstance(appended, (Message, NotFound)), appended
            with pytest.raises(NotFound):
                store.get(ALICE, conversation.id)
            # Had the append slipped in after the delete, the id would hold its message.
            with pytest.raises(NotFound):
                store.list_messages(ALICE, conversation.id)

    # -- saving a whole thread: positions, unchanged messages, replace_messages ---------------

    def positions(self, store: Any, conversation: Any) -> list[int]:
        return [message.position for message in store.list_messages(ALICE, conversation.id).items]

    def test_merge_leaves_positions_dense_and_the_next_append_follows(
        self, store: Any, conversation: Conversation
    ) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        merged = store.merge_messages(
            ALICE, conversation.id, [{"id": u1.id, "role": "user", "content": "u1"}, {"role": "user", "content": "new"}]
        )
        assert [(message.content, message.position) for message in merged] == [("u1", 0), ("new", 1)]
        assert self.append(store, conversation, "next").position == 2
        assert self.positions(store, conversation) == [0, 1, 2]

    def test_a_save_writes_only_the_messages_it_changes(self, store: Any, conversation: Conversation) -> None:
        """An unchanged message keeps its times and position; a changed one moves only its updated_at."""
        with frozen_clock(LONG_AGO):
            u1, a1 = self.stored_turns(store, conversation)[:2]
        before = {message.id: record_of(message) for message in (u1, a1)}
        incoming = [
            {"id": u1.id, "role": "user", "content": "u1"},
            {"id": a1.id, "role": "assistant", "content": "a1 edited"},
            {"role": "user", "content": "u3"},
        ]
        for save in (store.merge_messages, store.replace_messages):
            saved = save(ALICE, conversation.id, incoming)
            assert [message.content for message in saved] == ["u1", "a1 edited", "u3"]
            assert record_of(saved[0]) == before[u1.id]  # untouched, not even updated_at
            edited = record_of(saved[1])
            assert edited["updated_at"] > LONG_AGO and edited["created_at"] == LONG_AGO and edited["position"] == 1
            assert {**edited, "content": "a1", "updated_at": LONG_AGO} == before[a1.id]
            # A cursor on a kept message still selects what follows it.
            assert [m.content for m in store.list_messages(ALICE, conversation.id, after=u1.id).items] == [
                "a1 edited",
                "u3",
            ]

    @pytest.mark.parametrize("old, new", [(1, True), (1, 1.0), (0, False), ({"a": 1}, {"a": True}), ([1], [1.0])])
    def test_a_save_replaces_json_that_python_calls_equal(
        self, store: Any, conversation: Conversation, old: Any, new: Any
    ) -> None:
        message = self.append(store, conversation, old)
        saved = store.replace_messages(ALICE, conversation.id, [{"id": message.id, "role": "user", "content": new}])
        stored = store.get_message(ALICE, conversation.id, message.id).content
        assert json_text(saved[0].content) == json_text(stored) == json_text(new)

    def test_replace_makes_the_transcript_exactly_the_list(self, store: Any, conversation: Conversation) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        fresh = uuid.uuid4()
        saved = store.replace_messages(
            ALICE,
            conversation.id,
            [
                {"id": a1.id, "role": "assistant", "content": "a1 edited", "metadata": {"v": 2}},
                {"id": str(fresh), "role": "user", "content": "fresh"},
                {"id": u1.id, "role": "user", "content": "u1"},
                {"role": "assistant", "content": "no id"},
            ],
        )
        expected = ["a1 edited", "fresh", "u1", "no id"]
        assert [message.content for message in saved] == expected
        assert [message.position for message in saved] == [0, 1, 2, 3]
        assert ids(saved)[:3] == [a1.id, fresh, u1.id]
        assert [content for _, content in self.transcript(store, conversation)] == expected
        assert store.get_message(ALICE, conversation.id, a1.id).metadata == {"v": 2}
        assert not message_exists(store, ALICE, u2) and not message_exists(store, ALICE, a2)
        assert self.append(store, conversation, "next").position == 4
        assert store.get(ALICE, conversation.id).version == 0

    def test_replace_unlike_merge_drops_stored_messages_the_list_leaves_out(
        self, store: Any, conversation: Conversation
    ) -> None:
        stored = self.stored_turns(store, conversation)
        new_turn = [{"role": "user", "content": "u3"}]
        assert [m.content for m in store.merge_messages(ALICE, conversation.id, new_turn)][-2:] == ["a2", "u3"]
        assert [m.content for m in store.replace_messages(ALICE, conversation.id, new_turn)] == ["u3"]
        assert not any(message_exists(store, ALICE, message) for message in stored)

    def test_replace_with_an_empty_list_empties_the_transcript_and_keeps_the_conversation(
        self, store: Any, conversation: Conversation
    ) -> None:
        self.stored_turns(store, conversation)
        assert store.replace_messages(ALICE, conversation.id, []) == []
        assert store.list_messages(ALICE, conversation.id).total == 0
        assert store.get(ALICE, conversation.id).title == "Plans"
        assert self.append(store, conversation).position == 0

    def test_replace_closes_the_gaps_a_delete_left(self, store: Any, conversation: Conversation) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        store.delete_message(ALICE, conversation.id, a1.id)
        assert self.positions(store, conversation) == [0, 2, 3]
        kept = [{"id": m.id, "role": m.role, "content": m.content} for m in (u1, u2, a2)]
        saved = store.replace_messages(ALICE, conversation.id, kept)
        assert [(m.id, m.position) for m in saved] == [(u1.id, 0), (u2.id, 1), (a2.id, 2)]
        assert record_of(saved[1])["updated_at"] == record_of(u2)["updated_at"]  # moved, not changed

    def test_replace_with_create_makes_the_conversation_and_without_is_not_found(self, store: Any) -> None:
        absent = uuid.uuid4()
        with pytest.raises(NotFound):
            store.replace_messages(ALICE, absent, [{"role": "user", "content": "hi"}])
        assert count_conversations(store) == 0
        saved = store.replace_messages(ALICE, absent, [{"role": "user", "content": "hi"}], create=True, agent="helper")
        assert [message.content for message in saved] == ["hi"]
        assert (store.get(ALICE, absent).agent, store.get(ALICE, absent).version) == ("helper", 0)
        other = uuid.uuid4()
        assert store.replace_messages(ALICE, other, [], create=True) == []
        assert store.get(ALICE, other).owner == "alice"

    def test_replace_is_all_or_nothing(self, store: Any, stores: Any, conversation: Conversation) -> None:
        self.stored_turns(store, conversation)
        other = store.create(ALICE)
        foreign = self.append(store, other)
        foreign_run = new_run(stores, other)
        before = snapshot(store, conversation.id)
        with pytest.raises(Conflict) as caught:
            store.replace_messages(
                ALICE, conversation.id, [{"role": "user", "content": "x"}, {"id": foreign.id, "role": "user", "content": "y"}]
            )
        assert caught.value.code == "message_exists"
        with pytest.raises(NotFound):
            store.replace_messages(
                ALICE, conversation.id, [{"role": "user", "content": "x", "run_id": str(foreign_run.id)}]
            )
        assert snapshot(store, conversation.id) == before
        assert message_exists(store, ALICE, foreign)

    def test_replace_keeps_a_run_of_the_conversation(self, store: Any, stores: Any, conversation: Conversation) -> None:
        run = new_run(stores, conversation)
        saved = store.replace_messages(ALICE, conversation.id, [{"role": "assistant", "content": "a", "run_id": run.id}])
        assert saved[0].run_id == run.id

    @pytest.mark.parametrize(
        "messages",
        [
            "not a list",
            [["role", "user"]],
            [{"content": "no role"}],
            [{"role": "user", "content": "x", "colour": "red"}],
            [{"id": "same-id", "role": "user", "content": "x"}],
            [{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}],
            [{"role": "user", "content": "nul\x00"}],
            [{"role": "user", "content": "x", "created_at": "2024-01-02T12:00:00"}],
        ],
    )
    def test_replace_refuses_bad_input_and_writes_nothing(
        self, store: Any, conversation: Conversation, messages: Any
    ) -> None:
        self.stored_turns(store, conversation)
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.replace_messages(ALICE, conversation.id, messages)
        assert snapshot(store, conversation.id) == before

    def test_replace_refuses_a_repeated_id(self, store: Any, conversation: Conversation) -> None:
        u1 = self.append(store, conversation)
        before = snapshot(store, conversation.id)
        with pytest.raises(Validation):
            store.replace_messages(
                ALICE,
                conversation.id,
                [{"id": u1.id, "role": "user", "content": "a"}, {"id": str(u1.id), "role": "user", "content": "b"}],
            )
        assert snapshot(store, conversation.id) == before

    def test_replace_keeps_a_message_s_files_attached(self, store: Any, stores: Any, conversation: Conversation) -> None:
        u1, a1, u2, a2 = self.stored_turns(store, conversation)
        attached = stores.files.save(
            ALICE, conversation_id=conversation.id, message_id=u2.id, content=b"x", name="x.txt"
        )
        store.replace_messages(ALICE, conversation.id, [{"id": u2.id, "role": "user", "content": "u2 first"}])
        assert stores.files.get(ALICE, attached.id).message_id == u2.id

    def test_async_replace_messages(self, store: Any, conversation: Conversation) -> None:
        saved = async_to_sync(store.areplace_messages)(ALICE, conversation.id, [{"role": "user", "content": "a"}])
        assert [message.content for message in saved] == ["a"]

    # -- caller-supplied created_at ------------------------------------------------------------

    def test_a_saved_message_keeps_the_created_at_its_caller_gave(self, store: Any, conversation: Conversation) -> None:
        """Listings stay in list (position) order, whatever the imported times say."""
        later, earlier = NOON, NOON - timedelta(days=1)
        saved = store.replace_messages(
            ALICE,
            conversation.id,
            [
                {"role": "user", "content": "first", "created_at": "2024-01-02T14:00:00+02:00"},
                {"role": "assistant", "content": "second", "created_at": earlier},
                {"role": "user", "content": "third"},
            ],
        )
        assert [m.created_at for m in saved[:2]] == [later, earlier]
        assert saved[2].created_at > NOON
        listed = store.list_messages(ALICE, conversation.id).items
        assert [(m.content, m.created_at) for m in listed[:2]] == [("first", later), ("second", earlier)]
        merged = store.merge_messages(ALICE, conversation.id, [{"role": "user", "content": "x", "created_at": LONG_AGO}])
        assert merged[-1].created_at == LONG_AGO

    def test_a_replaced_message_without_created_at_keeps_its_own(self, store: Any, conversation: Conversation) -> None:
        with frozen_clock(LONG_AGO):
            message = self.append(store, conversation)
        saved = store.replace_messages(ALICE, conversation.id, [{"id": message.id, "role": "user", "content": "new"}])
        assert saved[0].created_at == LONG_AGO
        saved = store.replace_messages(
            ALICE, conversation.id, [{"id": message.id, "role": "user", "content": "new", "created_at": NOON}]
        )
        assert saved[0].created_at == NOON

    @pytest.mark.parametrize(
        "created_at, code",
        [
            ("2024-01-02T12:00:00", "naive_time"),
            (datetime(2024, 1, 2, 12, 0), "naive_time"),
            ("yesterday", "invalid_time"),
            (12345, "invalid_time"),
            ("0001-01-01T00:00:00+01:00", "invalid_time"),
            ("9999-01-01T00:00:00Z", "future_time"),
        ],
    )
    def test_a_created_at_that_cannot_be_stored_is_refused(
        self, store: Any, conversation: Conversation, created_at: Any, code: str
    ) -> None:
        before = snapshot(store, conversation.id)
        for save in (store.replace_messages, store.merge_messages):
            with pytest.raises(Validation) as caught:
                save(ALICE, conversation.id, [{"role": "user", "content": "x", "created_at": created_at}])
            assert caught.value.code == code and caught.value.details["field"] == "created_at"
        assert snapshot(store, conversation.id) == before

    def test_a_created_at_ahead_of_the_clock_is_allowed_within_the_import_skew(
        self, store: Any, conversation: Conversation, settings: Any
    ) -> None:
        with frozen_clock(NOON):
            ahead = NOON + timedelta(seconds=60)
            saved = store.replace_messages(ALICE, conversation.id, [{"role": "user", "content": "x", "created_at": ahead}])
            assert saved[0].created_at == ahead
            limits(settings, IMPORT_CLOCK_SKEW=30)
            with pytest.raises(Validation) as caught:
                store.replace_messages(ALICE, conversation.id, [{"role": "user", "content": "x", "created_at": ahead}])
        assert caught.value.code == "future_time" and caught.value.details["limit"] == 30
        assert [m.created_at for m in store.list_messages(ALICE, conversation.id).items] == [ahead]

    # -- saving a whole thread: races ----------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_full_overwrites_leave_exactly_one_saved_list(self, store: Any) -> None:
        """Writers that insert, update and drop the same ids at once: the end is one writer's list, never a mix."""
        rounds, writers = 5, 8

        def thread_of(round_number: int, writer: int, pool: list[uuid.UUID]) -> list[dict[str, Any]]:
            rotated = pool[writer % len(pool) :] + pool[: writer % len(pool)]
            chosen = rotated[: 2 + writer % 5]
            named = [{"id": str(i), "role": "user", "content": f"r{round_number} w{writer} {i}"} for i in chosen]
            return named + [{"role": "assistant", "content": f"r{round_number} w{writer} no id"}]

        for round_number in range(rounds):
            pool = [uuid.uuid4() for _ in range(6)]  # ids are global: each round's conversation has its own
            conversation = store.create(ALICE)
            store.replace_messages(ALICE, conversation.id, [{"id": pool[0], "role": "user", "content": "old"}])
            saves = {writer: thread_of(round_number, writer, pool) for writer in range(writers)}

            def save(writer: int) -> Any:
                return store.replace_messages(ALICE, conversation.id, saves[writer])

            results = run_in_threads(writers, save, timeout=120)
            assert not [result for result in results if isinstance(result, BaseException)], results
            stored = store.list_messages(ALICE, conversation.id).items
            contents = [message.content for message in stored]
            matching = [writer for writer, thread in saves.items() if contents == [m["content"] for m in thread]]
            assert len(matching) == 1, f"round {round_number}: {contents} is no writer's list"
            assert [str(m.id) for m in stored[:-1]] == [m["id"] for m in saves[matching[0]][:-1]]
            assert [message.position for message in stored] == list(range(len(stored)))
            assert self.append(store, conversation, "after").position == len(stored)

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_merges_of_new_turns_keep_every_turn_at_dense_positions(self, store: Any) -> None:
        writers = 8
        conversation = store.create(ALICE)
        u1, a1 = self.stored_turns(store, conversation)[:2]
        store.delete_message(ALICE, conversation.id, a1.id)  # a gap the first save closes

        def merge(writer: int) -> Any:
            turn = [{"role": "user", "content": f"u{writer}"}, {"role": "assistant", "content": f"a{writer}"}]
            return store.merge_messages(ALICE, conversation.id, turn)

        results = run_in_threads(writers, merge, timeout=120)
        assert not [result for result in results if isinstance(result, BaseException)], results
        stored = store.list_messages(ALICE, conversation.id).items
        assert [message.content for message in stored[:3]] == ["u1", "u2", "a2"]
        turns = [m.content for m in stored[3:]]
        assert sorted(turns) == sorted(f"{r}{w}" for w in range(writers) for r in "ua")
        assert all(turns[i][1:] == turns[i + 1][1:] for i in range(0, len(turns), 2))  # no turn split by another
        assert [message.position for message in stored] == list(range(3 + 2 * writers))

    # -- the thread tag of If-Match: edits and deletes move it; a save returns the one it saved --------

    @pytest.mark.parametrize("change", ["edit", "delete"])
    def test_an_edit_or_a_delete_moves_the_thread_tag(self, store: Any, conversation: Conversation, change: str) -> None:
        m1 = self.append(store, conversation, "m1")
        m2 = self.append(store, conversation, "m2")
        tag = thread_tag(store.get(ALICE, conversation.id))
        stale = [{"id": m.id, "role": m.role, "content": m.content} for m in (m1, m2)]
        if change == "edit":
            store.update_message(ALICE, conversation.id, m2.id, content="m2 edited")
        else:
            store.delete_message(ALICE, conversation.id, m1.id)
        assert thread_tag(store.get(ALICE, conversation.id)) != tag
        before = snapshot(store, conversation.id)
        for save in (store.replace_messages, store.merge_messages):
            with pytest.raises(PreconditionFailed) as refused:
                save(ALICE, conversation.id, stale, if_match=tag)
            assert refused.value.details["current_tag"] == thread_tag(store.get(ALICE, conversation.id))
        assert snapshot(store, conversation.id) == before

    def test_a_save_returns_the_tag_of_the_thread_it_saved(self, store: Any, conversation: Conversation) -> None:
        self.append(store, conversation, "m1")
        saves = (
            lambda tag: store.replace_messages(ALICE, conversation.id, [{"role": "user", "content": "x"}], if_match=tag),
            lambda tag: store.merge_messages(ALICE, conversation.id, [{"role": "user", "content": "y"}], if_match=tag),
            lambda tag: store.merge_messages(ALICE, conversation.id, [], if_match=tag),
            lambda tag: store.replace_messages(ALICE, conversation.id, [], if_match=tag),
        )
        tag = thread_tag(store.get(ALICE, conversation.id))
        for save in saves:
            saved = save(tag)
            assert saved.tag == thread_tag(store.get(ALICE, conversation.id))
            assert ids(saved) == ids(store.list_messages(ALICE, conversation.id).items)
            tag = saved.tag
        self.append(store, conversation, "appended after the save")
        assert thread_tag(store.get(ALICE, conversation.id)) != tag
        with pytest.raises(PreconditionFailed):
            store.replace_messages(ALICE, conversation.id, [], if_match=tag)
        assert async_to_sync(store.areplace_messages)(ALICE, conversation.id, []).tag == thread_tag(
            store.get(ALICE, conversation.id)
        )

    @pytest.mark.parametrize("if_match", [0, '"0.0.0.0"'])
    def test_an_empty_merge_with_if_match_on_an_absent_conversation_is_not_found(self, store: Any, if_match: Any) -> None:
        absent = uuid7()
        for save in (store.merge_messages, store.replace_messages):
            with pytest.raises(NotFound):
                save(ALICE, absent, [], create=True, if_match=if_match)
            with pytest.raises(NotFound):
                store.get(ALICE, absent)
