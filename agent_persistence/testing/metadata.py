"""The contract of a metadata store: every rule of :class:`~agent_persistence.stores.metadata.MetadataStore`.

Subclass :class:`MetadataStoreContract` and override ``make_stores()`` (the
family) or ``make_store()`` to run it against another backend. The suite
asserts through the store API only; its race runs in real threads (and
forked processes, for a family whose state they share) on committed data.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from ..exceptions import StorageLimit, Validation
from ..scope import Scope
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract

NAMESPACE = "compaction"

#: A value absent from every store, to tell "no value" from a stored ``None``.
ABSENT = object()


class MetadataStoreContract(FamilyContract):
    """The behaviour every metadata store must have, on every database it supports."""

    RACE_ROUNDS = 4
    RACE_THREADS = 8

    def make_store(self) -> Any:
        return self.family.metadata

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def test_a_missing_key_reads_as_the_default(self, store: Any) -> None:
        assert store.get(ALICE, NAMESPACE, "thread-1") is None
        assert store.get(ALICE, NAMESPACE, "thread-1", ABSENT) is ABSENT

    @pytest.mark.parametrize("value", [{"summary": "x", "upto": 12}, [1, "two", None], "text", 7, 1.5, True, None])
    def test_set_then_get_returns_the_json_value(self, store: Any, value: Any) -> None:
        assert store.set(ALICE, NAMESPACE, "k", value) == value
        assert store.get(ALICE, NAMESPACE, "k", ABSENT) == value

    def test_a_stored_null_is_not_a_missing_key(self, store: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", None)
        assert store.get(ALICE, NAMESPACE, "k", ABSENT) is None

    def test_values_come_back_as_json_round_tripping_gives_them(self, store: Any) -> None:
        assert store.set(ALICE, NAMESPACE, "k", {"t": (1, 2), "s": '{"a": 1}'}) == {"t": [1, 2], "s": '{"a": 1}'}
        assert store.get(ALICE, NAMESPACE, "k") == {"t": [1, 2], "s": '{"a": 1}'}

    def test_changing_a_returned_value_changes_nothing_stored(self, store: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", {"items": [1]})
        store.get(ALICE, NAMESPACE, "k")["items"].append(2)
        assert store.get(ALICE, NAMESPACE, "k") == {"items": [1]}

    def test_set_replaces_the_value(self, store: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", {"v": 1})
        store.set(ALICE, NAMESPACE, "k", [2])
        assert store.get(ALICE, NAMESPACE, "k") == [2]

    def test_the_same_key_in_two_namespaces_is_independent(self, store: Any) -> None:
        store.set(ALICE, "compaction", "k", "a")
        store.set(ALICE, "sandbox", "k", "b")
        assert (store.get(ALICE, "compaction", "k"), store.get(ALICE, "sandbox", "k")) == ("a", "b")
        assert store.delete(ALICE, "compaction", "k") is True
        assert (store.get(ALICE, "compaction", "k", ABSENT), store.get(ALICE, "sandbox", "k")) == (ABSENT, "b")

    def test_values_are_per_tenant_and_shared_by_its_users(self, store: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", "acme's")
        assert store.get(BOB, NAMESPACE, "k") == "acme's"  # the same tenant: one value
        assert store.get(MALLORY, NAMESPACE, "k", ABSENT) is ABSENT  # another tenant, alice's user id
        store.set(MALLORY, NAMESPACE, "k", "other's")
        assert (store.get(ALICE, NAMESPACE, "k"), store.get(MALLORY, NAMESPACE, "k")) == ("acme's", "other's")
        assert store.delete(MALLORY, NAMESPACE, "k") is True
        assert store.get(ALICE, NAMESPACE, "k") == "acme's"

    def test_delete_says_whether_there_was_a_value(self, store: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", 1)
        assert store.delete(ALICE, NAMESPACE, "k") is True
        assert store.delete(ALICE, NAMESPACE, "k") is False
        assert store.get(ALICE, NAMESPACE, "k", ABSENT) is ABSENT

    @pytest.mark.parametrize(
        "namespace, key, field",
        [("", "k", "namespace"), (NAMESPACE, "", "key"), (None, "k", "namespace"), (NAMESPACE, 3, "key"),
         ("n" * 256, "k", "namespace"), (NAMESPACE, "nul\x00", "key"), ("lone\ud800", "k", "namespace")],
    )
    def test_a_bad_namespace_or_key_is_validation(self, store: Any, namespace: Any, key: Any, field: str) -> None:
        for call in (lambda: store.get(ALICE, namespace, key), lambda: store.set(ALICE, namespace, key, 1),
                     lambda: store.delete(ALICE, namespace, key)):
            with pytest.raises(Validation) as caught:
                call()
            assert caught.value.details["field"] == field

    @pytest.mark.parametrize("value", [{"text": "nul \x00"}, ["lone \ud800"], {"n": 2**64}, float("nan"), {1, 2}, object()])
    def test_a_value_the_json_policy_refuses_is_validation_and_writes_nothing(self, store: Any, value: Any) -> None:
        store.set(ALICE, NAMESPACE, "k", "before")
        with pytest.raises(Validation):
            store.set(ALICE, NAMESPACE, "k", value)
        assert store.get(ALICE, NAMESPACE, "k") == "before"

    def test_deep_nesting_is_refused(self, store: Any) -> None:
        nested: Any = []
        for _ in range(200):
            nested = [nested]
        with pytest.raises(Validation):
            store.set(ALICE, NAMESPACE, "k", nested)
        assert store.get(ALICE, NAMESPACE, "k", ABSENT) is ABSENT

    def test_a_value_over_max_state_bytes_is_storage_limit(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_STATE_BYTES": 64}
        with pytest.raises(StorageLimit):
            store.set(ALICE, NAMESPACE, "k", "x" * 100)
        assert store.get(ALICE, NAMESPACE, "k", ABSENT) is ABSENT

    def test_calls_take_a_scope(self, store: Any) -> None:
        with pytest.raises(TypeError):
            store.get("acme", NAMESPACE, "k")

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_sets_of_one_key_never_fail_and_the_last_commit_wins(self, store: Any) -> None:
        for round_number in range(self.RACE_ROUNDS):
            key = f"race-{round_number}"

            def set_value(index: int) -> None:
                store.set(ALICE, NAMESPACE, key, {"writer": index})

            outcomes = run_in_threads(self.RACE_THREADS, set_value)
            assert outcomes == [None] * self.RACE_THREADS, outcomes
            assert store.get(ALICE, NAMESPACE, key) in [{"writer": index} for index in range(self.RACE_THREADS)]
            # The winner is the last commit: a set after the race replaces it, as any later set does.
            store.set(ALICE, NAMESPACE, key, {"writer": "last"})
            assert store.get(ALICE, NAMESPACE, key) == {"writer": "last"}

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_sets_from_several_processes_never_fail(self, store: Any) -> None:
        def set_value(index: int) -> str:
            store.set(Scope("acme", f"user{index}"), NAMESPACE, "shared", index)
            return "ok"

        assert self.family.run_in_processes(4, set_value) == ["ok"] * 4
        assert store.get(ALICE, NAMESPACE, "shared") in range(4)

    def test_async_twins_run_the_sync_methods(self, store: Any) -> None:
        async_to_sync(store.aset)(ALICE, NAMESPACE, "k", {"v": 1})
        assert async_to_sync(store.aget)(ALICE, NAMESPACE, "k") == {"v": 1}
        assert async_to_sync(store.adelete)(ALICE, NAMESPACE, "k") is True
        assert async_to_sync(store.aget)(ALICE, NAMESPACE, "k", 0) == 0
