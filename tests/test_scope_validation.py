"""Issue 21 (L3): every store validates the scope it is given, once, in check_scope.

A tenant or user with a NUL, a lone surrogate or more than 255 characters is
Validation code ``invalid_scope`` (``details.field`` ``scope.tenant`` /
``scope.user``) before any query: never stored (SQLite kept the NUL) and never a
driver DataError (PostgreSQL). Run over every store family (ORM and in-memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent_persistence.exceptions import Validation
from agent_persistence.ids import uuid7
from agent_persistence.scope import Scope
from agent_persistence.stores.base import check_scope
from agent_persistence.testing.family import Stores, memory_stores, orm_stores

BAD_SCOPES = [
    (Scope(tenant="acme\x00evil", user="alice"), "scope.tenant"),
    (Scope(tenant="acme", user="alice\x00"), "scope.user"),
    (Scope(tenant="\ud800", user="alice"), "scope.tenant"),
    (Scope(tenant="t" * 256, user="alice"), "scope.tenant"),
    (Scope(tenant="acme", user="u" * 256), "scope.user"),
]

CALLS: dict[str, Callable[[Stores, Scope], Any]] = {
    "metadata.set": lambda s, scope: s.metadata.set(scope, "ns", "key", {"v": 1}),
    "metadata.get": lambda s, scope: s.metadata.get(scope, "ns", "key"),
    "metadata.delete": lambda s, scope: s.metadata.delete(scope, "ns", "key"),
    "conversations.create": lambda s, scope: s.conversations.create(scope, title="t"),
    "conversations.list": lambda s, scope: s.conversations.list(scope),
    "conversations.get": lambda s, scope: s.conversations.get(scope, uuid7()),
    "generations.create_or_resume": lambda s, scope: s.generations.create_or_resume(
        scope, id=uuid7(), slot="hero", kind="image"),
    "generations.latest": lambda s, scope: s.generations.latest(scope, "hero"),
    "tasks.list": lambda s, scope: s.tasks.list(scope),
    "files.list": lambda s, scope: s.files.list(scope, uuid7()),
    "runs.list": lambda s, scope: s.runs.list(scope, uuid7()),
    "events.list": lambda s, scope: s.events.list(scope, uuid7()),
    "activities.list": lambda s, scope: s.activities.list(scope, uuid7()),
    "artifacts.list_by_conversation": lambda s, scope: s.artifacts.list_by_conversation(scope, uuid7()),
    "interrupts.pending": lambda s, scope: s.interrupts.pending(scope, uuid7()),
    "supervision.status": lambda s, scope: s.supervision.status(scope, uuid7()),
    "recordings.read": lambda s, scope: s.recordings.read(scope, uuid7()),
    "checkpoints.load_for": lambda s, scope: s.checkpoints.load_for(scope, uuid7()),
    "events.summary": lambda s, scope: s.events.summary(scope, [uuid7()]),
    "turns.begin": lambda s, scope: s.turns.begin(scope, uuid7(), content="hi", known_agents={"echo"}, agent="echo"),
}


@pytest.mark.parametrize("bad,field", BAD_SCOPES, ids=["nul-tenant", "nul-user", "surrogate", "long-tenant", "long-user"])
def test_check_scope_refuses_what_no_column_can_hold(bad: Scope, field: str) -> None:
    with pytest.raises(Validation) as caught:
        check_scope(bad)
    assert (caught.value.code, caught.value.details["field"]) == ("invalid_scope", field)
    assert check_scope(Scope(tenant="t" * 255, user="ü" * 255)) is not None


def refuses_every_bad_scope(family: Stores, call: str) -> None:
    for bad, field in BAD_SCOPES:
        with pytest.raises(Validation) as caught:
            CALLS[call](family, bad)
        assert (caught.value.code, caught.value.details["field"]) == ("invalid_scope", field), (call, bad)
    good = Scope(tenant="acme", user="alice")
    assert family.metadata.get(good, "ns", "key") is None
    assert family.conversations.list(good).items == []


@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_orm_family_refuses_a_bad_scope(db: Any, call: str) -> None:
    refuses_every_bad_scope(orm_stores(), call)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_memory_family_refuses_a_bad_scope(call: str) -> None:
    refuses_every_bad_scope(memory_stores(), call)
