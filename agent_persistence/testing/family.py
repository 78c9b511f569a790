"""The family of stores a contract suite runs against, and the helpers that arrange data through them.

A contract suite tests one store, but it arranges its fixtures (a run, a
claim at some epoch, a heartbeat in the past) through the other stores of the
same family, never through the models: that is what lets a backend without
tables (the in-memory one) run the very same suite. Override ``make_stores()``
in a subclass to run a suite against another family::

    from agent_persistence.testing.family import memory_stores
    from agent_persistence.testing.runs import RunStoreContract

    class TestMemoryRunStore(RunStoreContract):
        def make_stores(self):
            return memory_stores()

The helpers below use store calls only (and a frozen clock where a test needs
equal or past timestamps).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.apps import apps
from django.db.models import DateTimeField
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import NotFound
from ..ids import uuid7
from ..statuses import SupervisionStatus
from ..scope import Scope
from ..stores.family import Stores
from .actors import ALICE, BOB, MALLORY


def orm_stores() -> Stores:
    """The Django ORM family (the shipped default, :mod:`agent_persistence.stores.orm.family`)."""
    from ..stores.orm.family import stores

    return stores()


class FamilyContract:
    """The base of every contract suite: a ``stores`` fixture built by ``make_stores()``.

    The suite's own store is ``make_store()``, by default the family's store
    of that concern; override either.
    """

    pytestmark = [pytest.mark.django_db]

    family: Stores

    def make_stores(self) -> Stores:
        return orm_stores()

    @pytest.fixture(autouse=True)
    def stores(self) -> Stores:
        self.family = self.make_stores()
        return self.family

    # -- helpers every suite shares, through the family's stores -------------------------------

    def new_conversation(self, owner: Scope = ALICE, *, shared: bool = False) -> Any:
        return self.family.conversations.create(owner, shared=shared)

    def conversation_epoch(self, conversation: Any) -> int:
        """The conversation's lease epoch (raised by every claim), as its owner reads it."""
        return self.family.conversations.get(Scope(conversation.tenant, conversation.owner), conversation.pk).epoch

    def row_of(self, conversation: Any) -> Any:
        """The conversation's supervision row, or None."""
        return self.family.supervision.read(conversation.pk)

    def claim_epoch(self, conversation: Any, epoch: int) -> None:
        """Make ``epoch`` hold the conversation's running turn (a stand-in for a producer's claim)."""
        claim_at(self.family, conversation, epoch)

    def when_dead(self, conversation: Any) -> datetime:
        """A moment at which the conversation's current producer reads as dead."""
        return self.row_of(conversation).heartbeat_at + timedelta(seconds=app_settings.DEAD_AFTER + 1)


# -- time ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def frozen_clock(moment: datetime) -> Iterator[None]:
    """Make ``django.utils.timezone.now()`` return ``moment``, for the stores and the models' defaults.

    Rows written meanwhile carry that instant: equal timestamps (to check the
    tie-breaks of an ordering) or past ones (to see whether a write moves them).
    """
    real_now = timezone.now
    fields = [
        field
        for model in apps.get_app_config("agent_persistence").get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, DateTimeField) and field.default is real_now
    ]

    def fake_now() -> datetime:
        return moment

    def point_defaults(to: Callable[[], datetime]) -> None:
        for field in fields:
            field.default = to
            field.__dict__.pop("_get_default", None)  # a cached_property over ``default``

    point_defaults(fake_now)
    try:
        with mock.patch("django.utils.timezone.now", fake_now):
            yield
    finally:
        point_defaults(real_now)


# -- reading back -------------------------------------------------------------------------------


def record_of(instance: Any) -> dict[str, Any]:
    """Every stored field of a store's return value, as a dict (a file field by its name)."""
    values = {}
    for field in instance._meta.concrete_fields:
        value = getattr(instance, field.attname)
        values[field.attname] = getattr(value, "name", value) if field.get_internal_type() == "FileField" else value
    return values


def walk_by_cursor(read_page: Callable[..., Any], *, cursor: str, order: str, limit: int) -> tuple[list[Any], list[Any]]:
    """A listing read page by page, each page from ``cursor`` (``"before"`` or ``"after"``) the last row of the one before.

    ``read_page(order=, limit=, before= / after=)`` reads one page; the first
    has no cursor. The walk stops at the first page without ``has_more``.
    Returns the ids in the order read and the pages (for their totals).
    """
    pages = [read_page(order=order, limit=limit)]
    while pages[-1].has_more:
        assert pages[-1].items and len(pages) < 1000, "has_more on an empty page, or a walk that never ends"
        pages.append(read_page(order=order, limit=limit, **{cursor: pages[-1].items[-1].pk}))
    return [row.pk for page in pages for row in page.items], pages


def check_cursor_walks(read_page: Callable[..., Any], oldest_first: list[Any], *, limits: tuple[int, ...] = (1, 2, 4)) -> None:
    """Walks by ``before`` newest first and by ``after`` oldest first read every row of ``oldest_first`` once, in order.

    At each page size: only the first page (no cursor) is counted, and every
    page but the last says ``has_more``.
    """
    for limit in limits:
        for cursor, order, expected in (("before", "desc", oldest_first[::-1]), ("after", "asc", oldest_first)):
            read, pages = walk_by_cursor(read_page, cursor=cursor, order=order, limit=limit)
            assert read == expected, (cursor, limit)
            assert [page.total for page in pages] == [len(oldest_first)] + [None] * (len(pages) - 1), (cursor, limit)
            assert [page.has_more for page in pages] == [True] * (len(pages) - 1) + [False], (cursor, limit)


def caught_not_found(call: Callable[[], Any]) -> tuple[str, str, dict[str, Any]]:
    """The NotFound ``call()`` raises, as (code, message, details): to compare two refusals."""
    with pytest.raises(NotFound) as caught:
        call()
    return caught.value.code, caught.value.message, caught.value.details


def count_conversations(store: Any, scopes: tuple[Scope, ...] = (ALICE, BOB, MALLORY)) -> int:
    """How many conversations the contract actors own, through ``list``."""
    return sum(store.list(scope, limit=1).total for scope in scopes)


# -- arranging ----------------------------------------------------------------------------------


def new_conversation(stores: Stores, owner: Scope = ALICE, *, shared: bool = False, **fields: Any) -> Any:
    return stores.conversations.create(owner, shared=shared, **fields)


def new_run(stores: Stores, conversation: Any, *, owner: Scope = ALICE, message_id: Any = None, **fields: Any) -> Any:
    """A running run of the conversation (its own turn unless ``message_id`` is given)."""
    return stores.runs.create_or_resume(
        owner, conversation.id, id=uuid7(), message_id=message_id or uuid7(), **fields
    )


def claim_at(stores: Stores, conversation: Any, epoch: int, *, message_id: Any = None, heartbeat_at: Any = None) -> int:
    """Make ``epoch`` hold the conversation's running turn (a fresh heartbeat unless one is given).

    Written with ``compare_and_swap`` against whatever row is there, so it
    works at any epoch above the conversation's; returns ``epoch``.
    """
    current = stores.supervision.read(conversation.id)
    written = stores.supervision.compare_and_swap(
        conversation.id,
        None if current is None else current.epoch,
        status=SupervisionStatus.RUNNING.value,
        message_id=message_id or uuid.uuid4(),
        epoch=epoch,
        heartbeat_at=heartbeat_at,
    )
    assert written, f"could not claim epoch {epoch}"
    return epoch




def memory_stores(database: Any = None) -> Stores:
    """The in-memory family (:mod:`agent_persistence.stores.memory.family`), on a fresh database unless one is given."""
    from ..stores.memory.database import MemoryDatabase
    from ..stores.memory.family import stores

    return stores(database if database is not None else MemoryDatabase())
