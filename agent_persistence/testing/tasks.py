"""The contract of a task store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.tasks import TaskStoreContract

    class TestMyTaskStore(TaskStoreContract):
        def make_store(self):
            return MyTaskStore()

Conversations are made through the family's conversation store (override
``make_stores()`` to run the suite on another family), and tasks are checked
through the task store's own reads.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from ..exceptions import ConversationNotOwned, NotFound, StorageLimit, Validation
from ..ids import uuid7
from ..models import Conversation, Task
from ..scope import Scope
from .actors import ALICE, BOB, MALLORY, Actors
from .family import FamilyContract, check_cursor_walks, frozen_clock, record_of, walk_by_cursor
from .concurrency import run_in_threads

COMMENT_RACE_ROUNDS = 3
COMMENT_RACE_WRITERS = 8


class TaskStoreContract(Actors, FamilyContract):
    """Every rule of a task store, checked on real transactions."""

    def make_store(self) -> Any:
        return self.family.tasks

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    # -- helpers ------------------------------------------------------------------------------

    def conversation(self, scope: Scope, *, shared: bool = False) -> Conversation:
        return self.new_conversation(scope, shared=shared)

    def task_count(self) -> int:
        """Every task of the contract's actors, through ``list``."""
        return sum(self.family.tasks.list(scope, limit=1).total for scope in (ALICE, BOB, MALLORY))

    def exists(self, task_id: Any, scope: Scope = ALICE) -> bool:
        try:
            self.family.tasks.get(scope, task_id)
        except NotFound:
            return False
        return True

    @contextmanager
    def limits(self, **values: Any) -> Iterator[None]:
        with override_settings(AGENT_PERSISTENCE={**getattr(settings, "AGENT_PERSISTENCE", {}), **values}):
            yield

    @contextmanager
    def nothing_created(self) -> Iterator[None]:
        count = self.task_count()
        yield
        assert self.task_count() == count

    def snapshot(self, task_id: Any) -> dict[str, Any]:
        return record_of(self.family.tasks.get(ALICE, task_id))

    # -- create -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_create_with_defaults(self, store: Any, alice: Scope) -> None:
        before = timezone.now()
        task = store.create(alice, title="Summarise the thread")
        assert isinstance(task, Task)
        stored = self.family.tasks.get(ALICE, task.pk)
        assert (stored.tenant, stored.owner, stored.title) == ("acme", "alice", "Summarise the thread")
        assert stored.status == "pending"
        assert stored.description is stored.conversation_id is stored.agent is stored.callback_url is None
        assert (stored.comments, stored.metadata, stored.error, stored.result, stored.result_at) == (
            [],
            {},
            None,
            None,
            None,
        )
        assert stored.created_at >= before and stored.updated_at >= before

    @pytest.mark.django_db
    def test_create_with_every_field(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        task = store.create(
            alice,
            title="Crawl",
            description="Fetch the pages",
            conversation_id=str(conversation.pk),
            agent="crawler",
            status="running",
            callback_url="https://hooks.example.com/done?x=1",
            metadata={"priority": 2, "tags": ("a", "b")},
        )
        stored = self.family.tasks.get(ALICE, task.pk)
        assert stored.conversation_id == conversation.pk
        assert (stored.description, stored.agent, stored.status) == ("Fetch the pages", "crawler", "running")
        assert stored.callback_url == "https://hooks.example.com/done?x=1"
        assert stored.metadata == {"priority": 2, "tags": ["a", "b"]}
        assert task.metadata == stored.metadata

    @pytest.mark.django_db
    def test_metadata_round_trips_as_json(self, store: Any, alice: Scope) -> None:
        moment = datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt_timezone.utc)
        metadata = {"when": moment, "raw": '{"looks": "like json"}', "none": None, "nested": [1, 2.5, True]}
        task = store.create(alice, title="t", metadata=metadata)
        expected = {**metadata, "when": "2030-01-02T03:04:05Z"}
        assert task.metadata == expected
        assert store.get(alice, task.pk).metadata == expected

    @pytest.mark.django_db
    def test_create_in_a_conversation_needs_write_access(
        self, store: Any, alice: Scope, bob: Scope, mallory: Scope
    ) -> None:
        shared, private = self.conversation(alice, shared=True), self.conversation(alice)
        with self.nothing_created():
            with pytest.raises(ConversationNotOwned):
                store.create(bob, title="t", conversation_id=shared.pk)
            for scope, conversation_id in [
                (bob, private.pk),
                (mallory, shared.pk),
                (alice, uuid7()),
                (alice, "not-a-uuid"),
            ]:
                with pytest.raises(NotFound):
                    store.create(scope, title="t", conversation_id=conversation_id)

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "fields",
        [
            {"title": ""},
            {"title": "   "},
            {"title": None},
            {"title": "t" * 501},
            {"title": "nul\x00"},
            {"status": "done"},
            {"status": None},
            {"callback_url": "ftp://example.com/x"},
            {"callback_url": "javascript:alert(1)"},
            {"callback_url": "not a url"},
            {"callback_url": "https://example.com/" + "a" * 2000},
            {"callback_url": 42},
            {"metadata": ["not", "an", "object"]},
            {"metadata": {"nan": float("nan")}},
            {"metadata": {"nul": "a\x00b"}},
            {"metadata": {"set": {1, 2}}},
            {"description": 42},
            {"agent": "a" * 256},
        ],
    )
    def test_bad_input_is_validation_and_creates_nothing(
        self, store: Any, alice: Scope, fields: dict[str, Any]
    ) -> None:
        with self.nothing_created(), pytest.raises(Validation):
            store.create(alice, **{"title": "t", **fields})

    @pytest.mark.django_db
    @pytest.mark.parametrize("url", ["http://localhost:8000/hook", "https://example.com/a/b?c=d#e"])
    def test_callback_url_takes_http_and_https(self, store: Any, alice: Scope, url: str) -> None:
        assert store.create(alice, title="t", callback_url=url).callback_url == url

    @pytest.mark.django_db
    def test_oversized_metadata_is_a_storage_limit(self, store: Any, alice: Scope) -> None:
        with self.limits(MAX_MESSAGE_BYTES=100), self.nothing_created(), pytest.raises(StorageLimit):
            store.create(alice, title="t", metadata={"blob": "x" * 200})

    # -- get and scoping ----------------------------------------------------------------------

    @pytest.mark.django_db
    def test_a_task_is_visible_to_its_owner_only(self, store: Any, alice: Scope, bob: Scope, mallory: Scope) -> None:
        conversation = self.conversation(alice, shared=True)
        task = store.create(alice, title="mine", conversation_id=conversation.pk)
        assert store.get(alice, str(task.pk)) == task
        for scope in (bob, mallory):
            before = self.snapshot(task.pk)
            for call in (
                lambda: store.get(scope, task.pk),
                lambda: store.get_result(scope, task.pk),
                lambda: store.update(scope, task.pk, title="stolen"),
                lambda: store.add_comment(scope, task.pk, "hi"),
                lambda: store.set_result(scope, task.pk, {"x": 1}),
                lambda: store.delete(scope, task.pk),
            ):
                with pytest.raises(NotFound):
                    call()
            assert self.snapshot(task.pk) == before
            assert store.list(scope).total == 0

    @pytest.mark.django_db
    @pytest.mark.parametrize("task_id", [uuid7(), "not-a-uuid", None])
    def test_unknown_task_is_not_found(self, store: Any, alice: Scope, task_id: Any) -> None:
        for call in (
            lambda: store.get(alice, task_id),
            lambda: store.get_result(alice, task_id),
            lambda: store.update(alice, task_id, title="x"),
            lambda: store.add_comment(alice, task_id, "x"),
            lambda: store.set_result(alice, task_id, 1),
            lambda: store.delete(alice, task_id),
        ):
            with pytest.raises(NotFound):
                call()

    # -- list ---------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_list_is_newest_first_and_pages(self, store: Any, alice: Scope, bob: Scope) -> None:
        tasks = [store.create(alice, title=f"t{i}") for i in range(5)]
        store.create(bob, title="bob's")
        page = store.list(alice)
        assert [t.pk for t in page.items] == [t.pk for t in reversed(tasks)]
        assert (page.total, page.offset, page.has_more) == (5, 0, False)
        oldest = store.list(alice, order="asc")
        assert [t.pk for t in oldest.items] == [t.pk for t in tasks]
        middle = store.list(alice, limit=2, offset=1)
        assert [t.pk for t in middle.items] == [tasks[3].pk, tasks[2].pk]
        assert (middle.total, middle.limit, middle.offset, middle.has_more) == (5, 2, 1, True)
        assert not store.list(alice, limit=2, offset=3).has_more

    @pytest.mark.django_db
    def test_list_orders_by_creation_time_then_insertion(self, store: Any, alice: Scope) -> None:
        instant = timezone.now()
        with frozen_clock(instant):
            tasks = [store.create(alice, title=f"t{i}") for i in range(4)]
        assert {t.created_at for t in store.list(alice).items} == {instant}
        assert [t.pk for t in store.list(alice, order="asc").items] == [t.pk for t in tasks]
        assert [t.pk for t in store.list(alice).items] == [t.pk for t in reversed(tasks)]
        with frozen_clock(instant - timedelta(seconds=1)):
            earlier = store.create(alice, title="created last, dated first")
        assert [t.pk for t in store.list(alice).items] == [*(t.pk for t in reversed(tasks)), earlier.pk]

    @pytest.mark.django_db
    def test_list_filters_by_conversation_and_status(self, store: Any, alice: Scope) -> None:
        first, second = self.conversation(alice), self.conversation(alice)
        a = store.create(alice, title="a", conversation_id=first.pk)
        b = store.create(alice, title="b", conversation_id=first.pk, status="completed")
        c = store.create(alice, title="c", conversation_id=second.pk, status="completed")
        store.create(alice, title="d")
        assert [t.pk for t in store.list(alice, conversation_id=first.pk).items] == [b.pk, a.pk]
        assert [t.pk for t in store.list(alice, status="completed").items] == [c.pk, b.pk]
        assert [t.pk for t in store.list(alice, conversation_id=str(first.pk), status="completed").items] == [b.pk]
        assert store.list(alice, conversation_id=uuid7()).total == 0

    def tasks_with_ties(self, store: Any, scope: Scope, **fields: Any) -> list[Task]:
        """Six tasks of ``scope``, three created in one instant; in listing key order (created_at, then id)."""
        now = timezone.now()
        tasks = []
        for offset in (0, -5, 0, 5, 0, -9):
            with frozen_clock(now + timedelta(seconds=offset)):
                tasks.append(store.create(scope, title=f"t{len(tasks)}", **fields))
        return sorted(tasks, key=lambda task: (task.created_at, task.pk))

    @pytest.mark.django_db
    def test_cursor_walks_read_every_task_once_in_order_both_ways(self, store: Any, alice: Scope, bob: Scope) -> None:
        conversation = self.conversation(alice)
        oldest_first = [task.pk for task in self.tasks_with_ties(store, alice, conversation_id=conversation.pk)]
        store.create(alice, title="elsewhere")
        store.create(bob, title="bob's")
        read_page = functools.partial(store.list, alice, conversation_id=conversation.pk)
        check_cursor_walks(read_page, oldest_first)
        everything, _ = walk_by_cursor(functools.partial(store.list, alice), cursor="before", order="desc", limit=3)
        assert len(everything) == len(set(everything)) == 7

    @pytest.mark.django_db
    def test_task_cursors_are_strict_by_created_at_then_id_whatever_the_order(self, store: Any, alice: Scope) -> None:
        tasks = self.tasks_with_ties(store, alice)
        ids = [task.pk for task in tasks]
        assert tasks[2].created_at == tasks[3].created_at == tasks[4].created_at  # ids decide among these three
        pages = {
            "before, newest first": store.list(alice, before=ids[3]),
            "before, oldest first": store.list(alice, before=str(ids[3]), order="asc"),
            "after": store.list(alice, after=ids[3], order="asc"),
            "after, newest first": store.list(alice, after=ids[2]),
            "between": store.list(alice, after=ids[1], before=ids[4], order="asc"),
            "with offset": store.list(alice, before=ids[4], limit=2, offset=1),
            "past the end": store.list(alice, after=ids[5]),
        }
        assert {name: ([task.pk for task in page.items], page.total, page.has_more) for name, page in pages.items()} == {
            "before, newest first": ([ids[2], ids[1], ids[0]], None, False),
            "before, oldest first": (ids[:3], None, False),
            "after": (ids[4:], None, False),
            "after, newest first": ([ids[5], ids[4], ids[3]], None, False),
            "between": (ids[2:4], None, False),
            "with offset": ([ids[2], ids[1]], None, True),
            "past the end": ([], None, False),
        }
        counted = store.list(alice, before=ids[3], limit=2, with_total=True)
        assert ([task.pk for task in counted.items], counted.total, counted.has_more) == ([ids[2], ids[1]], 3, True)
        # The status filter is the page's: a cursor whose task's status moved on still marks its place.
        store.update(alice, ids[3], status="completed")
        pending = store.list(alice, status="pending", after=ids[3], order="asc")
        assert [task.pk for task in pending.items] == ids[4:]

    @pytest.mark.django_db
    def test_a_task_cursor_outside_the_listing_or_the_scope_is_not_found(
        self, store: Any, alice: Scope, bob: Scope, mallory: Scope
    ) -> None:
        first, second = self.conversation(alice), self.conversation(alice)
        mine = store.create(alice, title="mine", conversation_id=first.pk)
        elsewhere = store.create(alice, title="in another conversation", conversation_id=second.pk)
        strangers = [store.create(bob, title="bob's"), store.create(mallory, title="mallory's")]
        for cursor in (*(task.pk for task in strangers), uuid7(), "nope", 5):
            for direction in ("before", "after"):
                for with_total in (None, True, False):
                    with pytest.raises(NotFound):
                        store.list(alice, with_total=with_total, **{direction: cursor})
        for with_total in (None, True):
            with pytest.raises(NotFound):
                store.list(alice, conversation_id=first.pk, before=elsewhere.pk, with_total=with_total)
            for scope in (bob, mallory):
                with pytest.raises(NotFound):
                    store.list(scope, after=mine.pk, with_total=with_total)
        assert [task.pk for task in store.list(alice, after=mine.pk).items] == [elsewhere.pk]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [{"status": "done"}, {"conversation_id": "nope"}, {"limit": 0}, {"offset": -1}, {"order": "newest"}],
    )
    def test_list_refuses_bad_arguments(self, store: Any, alice: Scope, arguments: dict[str, Any]) -> None:
        with pytest.raises(Validation):
            store.list(alice, **arguments)

    # -- update -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_update_changes_only_what_is_passed(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        task = store.create(
            alice, title="t", description="d", callback_url="https://a.example", metadata={"a": 1}, agent="x"
        )
        updated = store.update(
            alice,
            task.pk,
            title="T",
            status="failed",
            conversation_id=conversation.pk,
            metadata={"b": 2},
            error={"message": "boom", "code": "crash"},
        )
        stored = self.family.tasks.get(ALICE, task.pk)
        assert (stored.title, stored.status, stored.conversation_id) == ("T", "failed", conversation.pk)
        assert stored.metadata == {"b": 2}, "metadata is replaced, not merged"
        assert stored.error == {"message": "boom", "code": "crash"}
        assert (stored.description, stored.callback_url, stored.agent) == ("d", "https://a.example", "x")
        assert (updated.title, updated.status, updated.metadata, updated.error) == (
            "T",
            "failed",
            {"b": 2},
            {"message": "boom", "code": "crash"},
        )
        assert updated.updated_at > task.updated_at

    @pytest.mark.django_db
    def test_update_with_none_clears_optional_fields(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        task = store.create(
            alice, title="t", description="d", conversation_id=conversation.pk, callback_url="http://a.example"
        )
        store.update(alice, task.pk, error={"code": "x"})
        store.update(
            alice, task.pk, description=None, conversation_id=None, callback_url=None, error=None, metadata=None
        )
        stored = self.family.tasks.get(ALICE, task.pk)
        assert stored.description is stored.conversation_id is stored.callback_url is stored.error is None
        assert stored.metadata == {}

    @pytest.mark.django_db
    def test_an_empty_update_moves_updated_at_only(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        before = self.snapshot(task.pk)
        updated = store.update(alice, task.pk)
        after = self.snapshot(task.pk)
        assert after.pop("updated_at") > before.pop("updated_at")
        assert after == before
        assert updated.updated_at > task.updated_at

    @pytest.mark.django_db
    def test_update_validates_and_changes_nothing_on_error(
        self, store: Any, alice: Scope, bob: Scope
    ) -> None:
        task = store.create(alice, title="t")
        bobs_conversation, shared = self.conversation(bob), self.conversation(bob, shared=True)
        before = self.snapshot(task.pk)
        for arguments in (
            {"status": "unknown"},
            {"title": ""},
            {"callback_url": "mailto:a@b.c"},
            {"metadata": [1]},
            {"error": float("inf")},
            {"title": "ok", "status": "nope"},
        ):
            with pytest.raises(Validation):
                store.update(alice, task.pk, **arguments)
        with pytest.raises(NotFound):
            store.update(alice, task.pk, title="ok", conversation_id=bobs_conversation.pk)
        with pytest.raises(ConversationNotOwned):
            store.update(alice, task.pk, title="ok", conversation_id=shared.pk)
        assert self.snapshot(task.pk) == before

    # -- comments -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_add_comment_appends(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        first = store.add_comment(alice, task.pk, "started", author="worker")
        second = store.add_comment(alice, task.pk, '{"not": "parsed"}')
        assert [c["text"] for c in second.comments] == ["started", '{"not": "parsed"}']
        assert [c["author"] for c in second.comments] == ["worker", None]
        comment = second.comments[0]
        assert set(comment) == {"id", "text", "author", "created_at"}
        assert uuid.UUID(comment["id"]) and comment["id"] != second.comments[1]["id"]
        assert datetime.fromisoformat(comment["created_at"]).tzinfo is not None
        assert first.comments == second.comments[:1]
        assert self.family.tasks.get(ALICE, task.pk).comments == second.comments
        assert second.updated_at >= first.updated_at > task.updated_at

    @pytest.mark.django_db
    @pytest.mark.parametrize("arguments", [{"text": None}, {"text": 42}, {"text": "a\x00"}, {"author": 1}])
    def test_add_comment_validates(self, store: Any, alice: Scope, arguments: dict[str, Any]) -> None:
        task = store.create(alice, title="t")
        with pytest.raises(Validation):
            store.add_comment(alice, task.pk, **{"text": "ok", **arguments})
        assert self.family.tasks.get(ALICE, task.pk).comments == []

    @pytest.mark.django_db
    def test_comments_are_bounded(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        with self.limits(MAX_STATE_BYTES=300):
            store.add_comment(alice, task.pk, "x" * 50)
            with pytest.raises(StorageLimit):
                store.add_comment(alice, task.pk, "y" * 250)
        assert [c["text"] for c in self.family.tasks.get(ALICE, task.pk).comments] == ["x" * 50]

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_comments_are_all_kept(self, store: Any, alice: Scope) -> None:
        for round_number in range(COMMENT_RACE_ROUNDS):
            task = store.create(alice, title=f"race {round_number}")
            results = run_in_threads(
                COMMENT_RACE_WRITERS, lambda i: store.add_comment(alice, task.pk, f"comment {i}", author=f"w{i}")
            )
            assert not [r for r in results if isinstance(r, BaseException)], results
            comments = self.family.tasks.get(ALICE, task.pk).comments
            assert sorted(c["text"] for c in comments) == sorted(f"comment {i}" for i in range(COMMENT_RACE_WRITERS))
            assert len({c["id"] for c in comments}) == COMMENT_RACE_WRITERS

    # -- result -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_set_result_replaces_the_one_result(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        assert store.get_result(alice, task.pk) is None
        first = store.set_result(alice, task.pk, {"pages": 3, "items": ["a"]})
        assert first.result == {"pages": 3, "items": ["a"]} and first.result_at is not None
        second = store.set_result(alice, task.pk, ["only", "this"])
        assert second.result == ["only", "this"]
        assert second.result_at >= first.result_at
        assert store.get_result(alice, str(task.pk)) == ["only", "this"]
        assert self.family.tasks.get(ALICE, task.pk).result == ["only", "this"]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "result, stored",
        [
            ("text", "text"),
            ('{"looks": "like json"}', '{"looks": "like json"}'),
            (0, 0),
            (False, False),
            ((1, 2), [1, 2]),
            ({"when": datetime(2030, 1, 1, tzinfo=dt_timezone.utc)}, {"when": "2030-01-01T00:00:00Z"}),
        ],
    )
    def test_result_round_trips_as_json(self, store: Any, alice: Scope, result: Any, stored: Any) -> None:
        task = store.create(alice, title="t")
        store.set_result(alice, task.pk, result)
        assert store.get_result(alice, task.pk) == stored
        assert type(store.get_result(alice, task.pk)) is type(stored)

    @pytest.mark.django_db
    def test_set_result_none_clears_it(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        store.set_result(alice, task.pk, {"x": 1})
        cleared = store.set_result(alice, task.pk, None)
        assert (cleared.result, cleared.result_at) == (None, None)
        assert store.get_result(alice, task.pk) is None

    @pytest.mark.django_db
    def test_bad_results_are_refused(self, store: Any, alice: Scope) -> None:
        task = store.create(alice, title="t")
        store.set_result(alice, task.pk, "kept")
        with pytest.raises(Validation):
            store.set_result(alice, task.pk, {"nan": float("nan")})
        with pytest.raises(Validation):
            store.set_result(alice, task.pk, object())
        with self.limits(MAX_STATE_BYTES=50), pytest.raises(StorageLimit):
            store.set_result(alice, task.pk, "x" * 100)
        assert store.get_result(alice, task.pk) == "kept"

    # -- delete -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_delete(self, store: Any, alice: Scope) -> None:
        task, other = store.create(alice, title="t"), store.create(alice, title="other")
        assert store.delete(alice, task.pk) is None
        assert not self.exists(task.pk)
        assert self.exists(other.pk)
        with pytest.raises(NotFound):
            store.delete(alice, task.pk)

    @pytest.mark.django_db
    def test_deleting_the_conversation_deletes_its_tasks(self, store: Any, alice: Scope) -> None:
        conversation = self.conversation(alice)
        inside = store.create(alice, title="in", conversation_id=conversation.pk)
        outside = store.create(alice, title="out")
        self.family.conversations.delete(alice, conversation.pk)
        assert not self.exists(inside.pk)
        assert store.get(alice, outside.pk) == outside

    # -- async twins --------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_async_twins(self, store: Any, alice: Scope) -> None:
        task = async_to_sync(store.acreate)(alice, title="async")
        assert async_to_sync(store.aget)(alice, task.pk) == task
        assert async_to_sync(store.aupdate)(alice, task.pk, status="running").status == "running"
        assert len(async_to_sync(store.aadd_comment)(alice, task.pk, "hi").comments) == 1
        async_to_sync(store.aset_result)(alice, task.pk, {"ok": True})
        assert async_to_sync(store.aget_result)(alice, task.pk) == {"ok": True}
        assert async_to_sync(store.alist)(alice).total == 1
        assert async_to_sync(store.alist)(alice, before=task.pk).items == []
        async_to_sync(store.adelete)(alice, task.pk)
        assert not self.exists(task.pk)
