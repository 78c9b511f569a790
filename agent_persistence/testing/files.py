"""The contract of a file store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.files import FileStoreContract

    class TestMyFileStore(FileStoreContract):
        def make_store(self):
            return MyFileStore()

Records are made and inspected through the store API; what the API cannot
show (that a failed save left no content behind, that a deleted record's
content is gone) is asked of the family (``content_exists``,
``stored_contents``; see :class:`~agent_persistence.testing.family.Stores`).
Override ``make_stores()`` to run the suite on another family.
"""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.files.base import ContentFile, File
from django.test import override_settings
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import ConversationNotOwned, NotFound, StorageLimit, Validation
from ..ids import uuid7
from ..models import Conversation, Message, StoredFile
from ..scope import Scope
from .actors import ALICE, Actors
from .concurrency import run_in_threads
from .family import FamilyContract, caught_not_found, check_cursor_walks, frozen_clock

SAVE_RACE_ROUNDS = 4
SAVE_RACE_SAVERS = 5
PURGE_RACE_ROUNDS = 3
PURGE_RACE_FILES = 24
PURGE_RACE_SWEEPERS = 3


class _TrackingBytesIO(io.BytesIO):
    """A seekable stream that counts the bytes read from it."""

    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


class _EndlessStream:
    """A stream that cannot tell its size and would give ``total`` bytes."""

    def __init__(self, total: int) -> None:
        self.remaining = total
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        count = self.remaining if size is None or size < 0 else min(size, self.remaining)
        self.remaining -= count
        self.bytes_read += count
        return b"x" * count


class _StreamWithHook:
    """A stream that runs ``at_end`` once, when it is read to its end (between checks and insert)."""

    def __init__(self, data: bytes, at_end: Callable[[], None]) -> None:
        self._data = io.BytesIO(data)
        self._at_end: Callable[[], None] | None = at_end

    def read(self, size: int = -1) -> bytes:
        chunk = self._data.read(size)
        if not chunk and self._at_end is not None:
            at_end, self._at_end = self._at_end, None
            at_end()
        return chunk


class FileStoreContract(Actors, FamilyContract):
    """Every rule of a file store, checked on real transactions."""

    def make_store(self) -> Any:
        return self.family.files

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    # -- helpers ------------------------------------------------------------------------------

    def conversation(self, scope: Scope, *, shared: bool = False) -> Conversation:
        conversation = self.new_conversation(scope, shared=shared)
        self.made = [*getattr(self, "made", []), conversation]
        return conversation

    def message(self, conversation: Conversation) -> Message:
        owner = Scope(tenant=conversation.tenant, user=conversation.owner)
        return self.family.conversations.append_message(owner, conversation.pk, role="user", content="hi")

    def exists(self, record: Any, scope: Scope = ALICE) -> bool:
        try:
            self.family.files.get(scope, record.pk)
        except NotFound:
            return False
        return True

    def file_ids(self, conversation: Conversation, scope: Scope = ALICE) -> set[Any]:
        return {record.pk for record in self.family.files.list(scope, conversation.pk, limit=app_settings.MAX_PAGE_SIZE).items}

    def file_count(self) -> int:
        """The file records of every conversation this test made (a deleted one holds none)."""
        count = 0
        for conversation in getattr(self, "made", []):
            owner = Scope(tenant=conversation.tenant, user=conversation.owner)
            try:
                count += self.family.files.list(owner, conversation.pk, limit=1).total
            except NotFound:
                continue
        return count

    def delete_conversation(self, conversation: Conversation) -> None:
        owner = Scope(tenant=conversation.tenant, user=conversation.owner)
        self.family.conversations.delete(owner, conversation.pk)

    @contextmanager
    def limits(self, **values: Any) -> Iterator[None]:
        with override_settings(AGENT_PERSISTENCE={**getattr(settings, "AGENT_PERSISTENCE", {}), **values}):
            yield

    @contextmanager
    def nothing_stored(self) -> Iterator[None]:
        """Asserts the block adds no file record and no content to the backend."""
        records, names = self.file_count(), self.family.stored_contents()
        yield
        assert self.file_count() == records
        assert self.family.stored_contents() == names

    # -- save ---------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_save_stores_record_and_content(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        expires_at = timezone.now() + timedelta(days=1)
        record = store.save(
            alice,
            conversation_id=conversation.pk,
            content=b"hello",
            name="hello.txt",
            content_type="text/plain; charset=utf-8",
            agent="writer",
            expires_at=expires_at,
        )
        assert isinstance(record, StoredFile)
        stored = store.get(alice, record.pk)
        assert stored.conversation_id == conversation.pk
        assert stored.message_id is None
        assert stored.uploader == "alice"
        assert stored.agent == "writer"
        assert stored.name == "hello.txt"
        assert stored.content_type == "text/plain; charset=utf-8"
        assert stored.size == 5
        assert stored.expires_at == expires_at
        assert self.family.content_exists(stored)
        assert store.read(alice, record.pk) == b"hello"

    @pytest.mark.django_db
    def test_save_defaults(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        record = store.save(alice, conversation_id=str(conversation.pk), content=b"", name="empty")
        assert (record.content_type, record.size, record.agent, record.expires_at) == (
            "application/octet-stream",
            0,
            None,
            None,
        )
        assert store.read(alice, record.pk) == b""

    @pytest.mark.django_db
    def test_content_is_named_by_the_record_not_the_client(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        record = store.save(alice, conversation_id=conversation.pk, content=b"x", name="../../etc/passwd")
        assert record.name == "passwd"
        assert str(record.pk) in record.content.name
        assert "passwd" not in record.content.name and ".." not in record.content.name

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "given, kept",
        [
            ("report.pdf", "report.pdf"),
            ("a/b/report.pdf", "report.pdf"),
            ("C:\\Users\\alice\\report.pdf", "report.pdf"),
            ("  spaced name.txt  ", "spaced name.txt"),
            ("é" * 255, "é" * 255),
        ],
    )
    def test_name_is_reduced_to_its_base_name(self, store: Any, alice: Scope, given: str, kept: str) -> None:
        conversation = self.conversation(alice)
        assert store.save(alice, conversation_id=conversation.pk, content=b"x", name=given).name == kept

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "fields",
        [
            {"name": ""},
            {"name": "folder/"},
            {"name": ".."},
            {"name": "a" * 256},
            {"name": "bad\x00name"},
            {"name": "line\nbreak"},
            {"name": None},
            {"content_type": "plain"},
            {"content_type": ""},
            {"content_type": "text/plain; charset"},
            {"content_type": "text/" + "a" * 300},
            {"content_type": 42},
            {"agent": "a" * 256},
            {"expires_at": "tomorrow"},
            {"expires_at": "2030-01-01T00:00:00"},
            {"content": "text is not bytes"},
            {"content": 42},
            {"content": io.StringIO("text stream")},
        ],
    )
    def test_bad_input_is_validation_and_stores_nothing(self, store: Any, alice: Scope, fields: dict[str, Any]) -> None:
        conversation = self.conversation(alice)
        for value in fields.values():
            if isinstance(value, io.IOBase):
                value.seek(0)  # the parameter is one object, shared by every class that runs the suite
        arguments = {"content": b"x", "name": "f.bin", **fields}
        with self.nothing_stored(), pytest.raises(Validation):
            store.save(alice, conversation_id=conversation.pk, **arguments)

    @pytest.mark.django_db
    def test_save_needs_a_conversation_or_message(self, store: Any, alice: Scope) -> None:
        with self.nothing_stored(), pytest.raises(Validation):
            store.save(alice, content=b"x", name="f")

    @pytest.mark.django_db
    def test_save_with_a_message_belongs_to_its_conversation(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        message = self.message(conversation)
        record = store.save(alice, message_id=message.pk, content=b"x", name="f")
        assert (record.conversation_id, record.message_id) == (conversation.pk, message.pk)
        both = store.save(alice, conversation_id=conversation.pk, message_id=str(message.pk), content=b"y", name="g")
        assert (both.conversation_id, both.message_id) == (conversation.pk, message.pk)

    @pytest.mark.django_db
    def test_message_of_another_conversation_is_not_found(self, store: Any, alice: Scope) -> None:
        conversation, other = self.conversation(alice), self.conversation(alice)
        message = self.message(other)
        with self.nothing_stored(), pytest.raises(NotFound):
            store.save(alice, conversation_id=conversation.pk, message_id=message.pk, content=b"x", name="f")

    @pytest.mark.django_db
    @pytest.mark.parametrize("unknown", ["conversation", "message", "malformed conversation", "malformed message"])
    def test_unknown_target_is_not_found_and_stores_nothing(self, store: Any, alice: Scope, unknown: str) -> None:
        conversation = self.conversation(alice)
        target = {
            "conversation": {"conversation_id": uuid7()},
            "message": {"conversation_id": conversation.pk, "message_id": uuid7()},
            "malformed conversation": {"conversation_id": "not-a-uuid"},
            "malformed message": {"message_id": "not-a-uuid"},
        }[unknown]
        stream = _TrackingBytesIO(b"content")
        with self.nothing_stored(), pytest.raises(NotFound):
            store.save(alice, content=stream, name="f", **target)
        assert stream.bytes_read == 0, "the content was read before the target was checked"

    @pytest.mark.django_db
    def test_only_the_owner_may_save(self, store: Any, alice: Scope, bob: Scope, mallory: Scope) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        shared_message = self.message(shared)
        with self.nothing_stored():
            with pytest.raises(ConversationNotOwned):
                store.save(bob, conversation_id=shared.pk, content=b"x", name="f")
            with pytest.raises(ConversationNotOwned):
                store.save(bob, message_id=shared_message.pk, content=b"x", name="f")
            with pytest.raises(NotFound):
                store.save(bob, conversation_id=private.pk, content=b"x", name="f")
            with pytest.raises(NotFound):
                store.save(mallory, conversation_id=shared.pk, content=b"x", name="f")
            with pytest.raises(NotFound):
                store.save(mallory, message_id=shared_message.pk, content=b"x", name="f")

    @pytest.mark.django_db
    def test_size_limit_on_bytes(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        with self.limits(MAX_FILE_BYTES=100):
            assert store.save(alice, conversation_id=conversation.pk, content=b"x" * 100, name="f").size == 100
            with self.nothing_stored(), pytest.raises(StorageLimit) as raised:
                store.save(alice, conversation_id=conversation.pk, content=b"x" * 101, name="f")
        assert raised.value.code == "too_large"

    @pytest.mark.django_db
    @pytest.mark.parametrize("wrap", [File, lambda stream: stream], ids=["django File", "file object"])
    def test_known_size_over_the_limit_is_refused_before_reading(self, store: Any, alice: Scope, wrap: Any) -> None:
        conversation = self.conversation(alice)
        stream = _TrackingBytesIO(b"x" * 101)
        with self.limits(MAX_FILE_BYTES=100), self.nothing_stored(), pytest.raises(StorageLimit):
            store.save(alice, conversation_id=conversation.pk, content=wrap(stream), name="f")
        assert stream.bytes_read == 0

    @pytest.mark.django_db
    def test_stream_reading_stops_past_the_limit(self, store: Any, alice: Scope) -> None:
        """A stream that cannot tell its size is read at most one chunk (64 KiB) past the limit."""
        conversation = self.conversation(alice)
        stream = _EndlessStream(total=10 * 1024 * 1024)
        with self.limits(MAX_FILE_BYTES=1000), self.nothing_stored(), pytest.raises(StorageLimit):
            store.save(alice, conversation_id=conversation.pk, content=stream, name="f")
        assert stream.bytes_read <= 1000 + 64 * 1024

    @pytest.mark.django_db
    def test_stream_exactly_at_the_limit_is_stored(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        with self.limits(MAX_FILE_BYTES=1000):
            record = store.save(alice, conversation_id=conversation.pk, content=_EndlessStream(1000), name="f")
        assert record.size == 1000
        assert store.read(alice, record.pk) == b"x" * 1000

    @pytest.mark.django_db
    def test_save_accepts_django_files_and_file_objects(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        from_file = store.save(alice, conversation_id=conversation.pk, content=ContentFile(b"django"), name="a")
        from_stream = store.save(alice, conversation_id=conversation.pk, content=io.BytesIO(b"stream"), name="b")
        assert (from_file.size, store.read(alice, from_file.pk)) == (6, b"django")
        assert (from_stream.size, store.read(alice, from_stream.pk)) == (6, b"stream")

    @pytest.mark.django_db
    @pytest.mark.parametrize("vanishing", ["message", "conversation"])
    def test_content_is_taken_back_when_the_record_cannot_be_written(
        self, store: Any, alice: Scope, vanishing: str
    ) -> None:
        """The target disappears after the checks, while the content is read: no record, no content."""
        conversation = self.conversation(alice)
        message = self.message(conversation)
        conversations = self.family.conversations
        if vanishing == "message":
            vanish = lambda: conversations.delete_message(alice, conversation.pk, message.pk)  # noqa: E731
        else:
            vanish = lambda: conversations.delete(alice, conversation.pk)  # noqa: E731
        stream = _StreamWithHook(b"content", at_end=vanish)
        with self.nothing_stored(), pytest.raises(NotFound):
            store.save(alice, conversation_id=conversation.pk, message_id=message.pk, content=stream, name="f")

    @pytest.mark.django_db(transaction=True)
    def test_saves_racing_a_conversation_delete_leave_nothing_behind(self, store: Any, alice: Scope) -> None:
        """Saves either land before the delete (and go with it) or fail: no record, no orphaned content."""
        names_before = self.family.stored_contents()
        for round_number in range(SAVE_RACE_ROUNDS):
            conversation = self.conversation(alice)

            def act(index: int) -> Any:
                if index == SAVE_RACE_SAVERS:
                    time.sleep(0.004 * round_number)  # let some saves in first in later rounds
                    self.delete_conversation(conversation)
                    return "deleted"
                try:
                    return store.save(alice, conversation_id=conversation.pk, content=b"x" * 2048, name=f"f{index}")
                except NotFound:
                    return None

            results = run_in_threads(SAVE_RACE_SAVERS + 1, act)
            assert not [r for r in results if isinstance(r, BaseException)], results
            # The same id made again holds no file: none slipped in after the delete.
            self.family.conversations.create(alice, id=conversation.pk)
            assert self.file_ids(conversation) == set()
            self.delete_conversation(conversation)
            assert self.family.stored_contents() == names_before

    # -- get, open, read ----------------------------------------------------------------------

    @pytest.mark.django_db
    def test_readers_of_the_conversation_read_its_files(
        self, store: Any, alice: Scope, bob: Scope, mallory: Scope
    ) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        shared_file = store.save(alice, conversation_id=shared.pk, content=b"shared", name="s")
        private_file = store.save(alice, conversation_id=private.pk, content=b"private", name="p")
        assert store.get(alice, private_file.pk) == private_file
        assert store.get(bob, str(shared_file.pk)) == shared_file
        assert store.read(bob, shared_file.pk) == b"shared"
        with store.open(alice, private_file.pk) as stream:
            assert stream.read() == b"private"
        for scope, record in [(bob, private_file), (mallory, shared_file), (mallory, private_file)]:
            for method in (store.get, store.open, store.read):
                with pytest.raises(NotFound):
                    method(scope, record.pk)

    @pytest.mark.django_db
    @pytest.mark.parametrize("file_id", [uuid7(), "not-a-uuid", None])
    def test_unknown_file_is_not_found(self, store: Any, alice: Scope, file_id: Any) -> None:
        for method in (store.get, store.open, store.read, store.delete):
            with pytest.raises(NotFound):
                method(alice, file_id)

    @pytest.mark.django_db
    def test_missing_content_is_not_found(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        record = store.save(alice, conversation_id=conversation.pk, content=b"x", name="f")
        self.family.lose_content(record)
        with pytest.raises(NotFound):
            store.read(alice, record.pk)

    # -- list ---------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_list_is_oldest_first_and_pages(self, store: Any, alice: Scope) -> None:
        conversation, other = self.conversation(alice), self.conversation(alice)
        saved = [store.save(alice, conversation_id=conversation.pk, content=b"x", name=f"f{i}") for i in range(5)]
        store.save(alice, conversation_id=other.pk, content=b"x", name="elsewhere")
        page = store.list(alice, conversation.pk)
        assert [f.pk for f in page.items] == [f.pk for f in saved]
        assert (page.total, page.limit, page.offset, page.has_more) == (5, app_settings.DEFAULT_PAGE_SIZE, 0, False)
        newest = store.list(alice, conversation.pk, order="desc")
        assert [f.pk for f in newest.items] == [f.pk for f in reversed(saved)]
        middle = store.list(alice, conversation.pk, limit=2, offset=1)
        assert [f.pk for f in middle.items] == [saved[1].pk, saved[2].pk]
        assert (middle.total, middle.limit, middle.offset, middle.has_more) == (5, 2, 1, True)
        last = store.list(alice, conversation.pk, limit=2, offset=4)
        assert [f.pk for f in last.items] == [saved[4].pk] and not last.has_more

    @pytest.mark.django_db
    def test_list_orders_by_creation_time_then_insertion(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        instant = timezone.now()
        saved = []
        for i in range(4):
            # The newest file is dated first: time decides before insertion order.
            with frozen_clock(instant - timedelta(seconds=1) if i == 3 else instant):
                saved.append(store.save(alice, conversation_id=conversation.pk, content=b"x", name=f"f{i}"))
        assert {f.created_at for f in saved} == {instant, instant - timedelta(seconds=1)}
        assert [f.pk for f in store.list(alice, conversation.pk).items] == [saved[i].pk for i in (3, 0, 1, 2)]
        assert [f.pk for f in store.list(alice, conversation.pk, order="desc").items] == [
            saved[i].pk for i in (2, 1, 0, 3)
        ]

    @pytest.mark.django_db
    def test_list_follows_conversation_access(self, store: Any, alice: Scope, bob: Scope, mallory: Scope) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        store.save(alice, conversation_id=shared.pk, content=b"x", name="f")
        assert store.list(bob, shared.pk).total == 1
        for scope, conversation_id in [(bob, private.pk), (mallory, shared.pk), (alice, uuid7()), (alice, "nope")]:
            with pytest.raises(NotFound):
                store.list(scope, conversation_id)

    def files_with_ties(self, store: Any, scope: Scope, conversation: Conversation) -> list[StoredFile]:
        """Six files of the conversation, three saved in one instant; in listing key order (created_at, then id)."""
        now = timezone.now()
        saved = []
        for offset in (0, -5, 0, 5, 0, -9):
            with frozen_clock(now + timedelta(seconds=offset)):
                saved.append(store.save(scope, conversation_id=conversation.pk, content=b"x", name=f"f{len(saved)}"))
        return sorted(saved, key=lambda record: (record.created_at, record.pk))

    @pytest.mark.django_db
    def test_cursor_walks_read_every_file_once_in_order_both_ways(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        oldest_first = [record.pk for record in self.files_with_ties(store, alice, conversation)]
        store.save(alice, conversation_id=self.conversation(alice).pk, content=b"x", name="elsewhere")
        read_page = functools.partial(store.list, alice, conversation.pk)
        check_cursor_walks(read_page, oldest_first)

    @pytest.mark.django_db
    def test_file_cursors_are_strict_by_created_at_then_id_whatever_the_order(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        saved = self.files_with_ties(store, alice, conversation)
        ids = [record.pk for record in saved]
        assert saved[2].created_at == saved[3].created_at == saved[4].created_at  # ids decide among these three
        pages = {
            "before": store.list(alice, conversation.pk, before=ids[3]),
            "before, newest first": store.list(alice, conversation.pk, before=str(ids[3]), order="desc"),
            "after": store.list(alice, conversation.pk, after=ids[3]),
            "after, newest first": store.list(alice, conversation.pk, after=ids[2], order="desc"),
            "between": store.list(alice, conversation.pk, after=ids[1], before=ids[4]),
            "with offset": store.list(alice, conversation.pk, after=ids[1], limit=2, offset=1),
            "past the end": store.list(alice, conversation.pk, after=ids[5]),
        }
        assert {name: ([record.pk for record in page.items], page.total, page.has_more) for name, page in pages.items()} == {
            "before": (ids[:3], None, False),
            "before, newest first": ([ids[2], ids[1], ids[0]], None, False),
            "after": (ids[4:], None, False),
            "after, newest first": ([ids[5], ids[4], ids[3]], None, False),
            "between": (ids[2:4], None, False),
            "with offset": (ids[3:5], None, True),
            "past the end": ([], None, False),
        }
        counted = store.list(alice, conversation.pk, after=ids[2], limit=2, with_total=True)
        assert ([record.pk for record in counted.items], counted.total, counted.has_more) == (ids[3:5], 3, True)

    @pytest.mark.django_db
    def test_a_file_cursor_outside_the_conversation_or_the_scope_is_not_found(
        self, store: Any, alice: Scope, bob: Scope, mallory: Scope
    ) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        first = store.save(alice, conversation_id=shared.pk, content=b"x", name="first")
        second = store.save(alice, conversation_id=shared.pk, content=b"x", name="second")
        foreign = store.save(alice, conversation_id=private.pk, content=b"x", name="foreign")
        for cursor in (foreign.pk, uuid7(), "nope", 5):
            for direction in ("before", "after"):
                for with_total in (None, True, False):
                    with pytest.raises(NotFound):
                        store.list(alice, shared.pk, with_total=with_total, **{direction: cursor})
        unknown_conversation = caught_not_found(lambda: store.list(alice, uuid7(), before=first.pk))
        for scope, conversation, cursor in ((mallory, shared, first), (bob, private, foreign)):
            for with_total in (None, True):
                # Answered exactly as for a conversation nobody holds: existence never leaks.
                refused = caught_not_found(lambda: store.list(scope, conversation.pk, after=cursor.pk, with_total=with_total))
                assert refused == unknown_conversation, (scope, with_total)
        assert [record.pk for record in store.list(bob, shared.pk, after=first.pk).items] == [second.pk]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "paging", [{"limit": 0}, {"limit": 10**6}, {"limit": "5"}, {"offset": -1}, {"order": "newest"}]
    )
    def test_list_refuses_bad_paging(self, store: Any, alice: Scope, paging: dict[str, Any]) -> None:
        conversation = self.conversation(alice)
        with pytest.raises(Validation):
            store.list(alice, conversation.pk, **paging)

    # -- delete -------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_delete_removes_record_and_content(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        record = store.save(alice, conversation_id=conversation.pk, content=b"x", name="f")
        kept = store.save(alice, conversation_id=conversation.pk, content=b"y", name="g")
        assert store.delete(alice, record.pk) is None
        assert not self.exists(record)
        assert not self.family.content_exists(record)
        assert self.family.content_exists(kept)
        with pytest.raises(NotFound):
            store.delete(alice, record.pk)

    @pytest.mark.django_db
    def test_only_the_owner_may_delete(self, store: Any, alice: Scope, bob: Scope, mallory: Scope) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        shared_file = store.save(alice, conversation_id=shared.pk, content=b"x", name="f")
        private_file = store.save(alice, conversation_id=private.pk, content=b"x", name="f")
        with pytest.raises(ConversationNotOwned):
            store.delete(bob, shared_file.pk)
        for scope, record in [(bob, private_file), (mallory, shared_file), (mallory, private_file)]:
            with pytest.raises(NotFound):
                store.delete(scope, record.pk)
        assert self.exists(shared_file) and self.exists(private_file)
        assert self.family.content_exists(shared_file) and self.family.content_exists(private_file)

    @pytest.mark.django_db(transaction=True)
    def test_deleting_a_conversation_deletes_its_files_and_content(self, store: Any, alice: Scope) -> None:
        conversation, other = self.conversation(alice), self.conversation(alice)
        message = self.message(conversation)
        records = [
            store.save(alice, conversation_id=conversation.pk, content=b"a", name="a"),
            store.save(alice, message_id=message.pk, content=b"b", name="b"),
        ]
        kept = store.save(alice, conversation_id=other.pk, content=b"c", name="c")
        self.delete_conversation(conversation)
        for record in records:
            assert not self.exists(record)
            assert not self.family.content_exists(record)
        assert self.family.content_exists(kept)

    @pytest.mark.django_db(transaction=True)
    def test_deleting_a_message_keeps_its_files(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        message = self.message(conversation)
        record = store.save(alice, message_id=message.pk, content=b"kept", name="f")
        self.family.conversations.delete_message(alice, conversation.pk, message.pk)
        kept = store.get(alice, record.pk)
        assert (kept.conversation_id, kept.message_id) == (conversation.pk, None)
        assert store.read(alice, record.pk) == b"kept"

    # -- purge_expired ------------------------------------------------------------------------

    def _expiring(self, store: Any, scope: Scope, conversation: Conversation, offsets: list[float | None]) -> list[Any]:
        now = timezone.now()
        return [
            store.save(
                scope,
                conversation_id=conversation.pk,
                content=b"x",
                name=f"f{i}",
                expires_at=None if offset is None else now + timedelta(seconds=offset),
            )
            for i, offset in enumerate(offsets)
        ]

    @pytest.mark.django_db(transaction=True)
    def test_purge_deletes_expired_files_earliest_first(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        late, never, early, future, middle = self._expiring(store, alice, conversation, [-10, None, -300, 3600, -60])
        assert store.purge_expired(limit=2) == 2
        assert self.file_ids(conversation) == {late.pk, never.pk, future.pk}
        assert not self.family.content_exists(early) and not self.family.content_exists(middle)
        assert self.family.content_exists(late)
        assert store.purge_expired() == 1
        assert store.purge_expired() == 0
        assert self.file_ids(conversation) == {never.pk, future.pk}
        assert store.purge_expired(before=future.expires_at) == 1, "expiry at `before` counts as expired"
        assert self.file_ids(conversation) == {never.pk}
        assert store.purge_expired(before=timezone.now() + timedelta(days=3650)) == 0

    @pytest.mark.django_db
    def test_purge_batch_defaults_to_the_sweep_batch_size(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        self._expiring(store, alice, conversation, [-5, -4, -3, -2, -1])
        with self.limits(SWEEP_BATCH_SIZE=3):
            assert store.purge_expired() == 3
        assert len(self.file_ids(conversation)) == 2

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments", [{"limit": 0}, {"limit": -1}, {"limit": "5"}, {"before": "soon"}, {"before": "2030-01-01"}]
    )
    def test_purge_refuses_bad_arguments(self, store: Any, arguments: dict[str, Any]) -> None:
        with pytest.raises(Validation):
            store.purge_expired(**arguments)

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_purges_delete_each_file_once(self, store: Any, alice: Scope) -> None:
        """Sweepers racing over the same expired files: every file deleted once, the counts sum up.

        The sweepers' counts add up to the expired files exactly and exactly
        those are gone, so no file was counted twice and none was missed.
        """
        for _round in range(PURGE_RACE_ROUNDS):
            conversation = self.conversation(alice)
            offsets: list[float | None] = [-(i + 1) for i in range(PURGE_RACE_FILES)] + [None, 3600]
            records = self._expiring(store, alice, conversation, offsets)

            def sweep(_index: int) -> int:
                total = 0
                while purged := store.purge_expired(limit=5):
                    total += purged
                return total

            results = run_in_threads(PURGE_RACE_SWEEPERS, sweep)
            assert not [r for r in results if isinstance(r, BaseException)], results
            assert sum(results) == PURGE_RACE_FILES
            assert self.file_ids(conversation) == {r.pk for r in records[PURGE_RACE_FILES:]}
            assert not any(self.family.content_exists(r) for r in records[:PURGE_RACE_FILES])
            self.delete_conversation(conversation)

    # -- async twins --------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_async_twins(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        record = async_to_sync(store.asave)(alice, conversation_id=conversation.pk, content=b"async", name="a")
        assert async_to_sync(store.aget)(alice, record.pk) == record
        assert async_to_sync(store.aread)(alice, record.pk) == b"async"
        stream = async_to_sync(store.aopen)(alice, record.pk)
        with stream:
            assert stream.read() == b"async"
        assert async_to_sync(store.alist)(alice, conversation.pk).total == 1
        assert async_to_sync(store.alist)(alice, conversation.pk, before=record.pk).items == []
        async_to_sync(store.adelete)(alice, record.pk)
        assert async_to_sync(store.apurge_expired)() == 0
        assert not self.exists(record)
