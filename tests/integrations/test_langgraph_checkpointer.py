"""DjangoCheckpointSaver against LangGraph's checkpointer contract, sync and async, on the test database.

LangGraph's own conformance suite runs in ``test_langgraph_conformance.py``;
these are the behaviours its docs and its own savers state besides: put / get (latest or by id),
list newest first with ``filter``, ``before`` and ``limit``, pending writes
(first write of a task index stands, special writes replace), thread deletion,
and real graphs (interrupt, resume, history) on top. Then the fencing a turn
adds, with a race between writers and a takeover.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any, TypedDict

import pytest
from django.db import connections
from django.test import override_settings
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agent_persistence.exceptions import Fenced
from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver
from agent_persistence.models import AgentCheckpoint, GraphBlob, GraphCheckpoint, GraphWrite
from agent_persistence.runtime.lifecycle import begin_turn, force_release
from agent_persistence.stores import checkpoint_store
from agent_persistence.testing.concurrency import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


class Mode:
    """Drive the saver through its sync methods or through its async twins, with one API."""

    def __init__(self, saver: DjangoCheckpointSaver, use_async: bool) -> None:
        self.saver = saver
        self.use_async = use_async

    def _run(self, coro: Any) -> Any:
        async def main() -> Any:
            try:
                return await coro
            finally:
                from asgiref.sync import sync_to_async

                await sync_to_async(connections.close_all)()

        return asyncio.run(main())

    def put(self, config: dict, checkpoint: Checkpoint, metadata: dict, versions: dict) -> dict:
        if self.use_async:
            return self._run(self.saver.aput(config, checkpoint, metadata, versions))
        return self.saver.put(config, checkpoint, metadata, versions)

    def put_writes(self, config: dict, writes: list, task_id: str, task_path: str = "") -> None:
        if self.use_async:
            return self._run(self.saver.aput_writes(config, writes, task_id, task_path))
        return self.saver.put_writes(config, writes, task_id, task_path)

    def get_tuple(self, config: dict) -> Any:
        return self._run(self.saver.aget_tuple(config)) if self.use_async else self.saver.get_tuple(config)

    def list(self, config: dict | None, **kwargs: Any) -> list:
        if self.use_async:
            async def collect() -> list:
                return [item async for item in self.saver.alist(config, **kwargs)]

            return self._run(collect())
        return list(self.saver.list(config, **kwargs))

    def delete_thread(self, thread_id: str) -> None:
        if self.use_async:
            return self._run(self.saver.adelete_thread(thread_id))
        return self.saver.delete_thread(thread_id)

    def prune(self, thread_ids: list[str], strategy: str = "keep_latest") -> None:
        if self.use_async:
            return self._run(self.saver.aprune(thread_ids, strategy=strategy))
        return self.saver.prune(thread_ids, strategy=strategy)

    def copy_thread(self, source: str, target: str) -> None:
        if self.use_async:
            return self._run(self.saver.acopy_thread(source, target))
        return self.saver.copy_thread(source, target)

    def delete_for_runs(self, run_ids: list[str]) -> None:
        if self.use_async:
            return self._run(self.saver.adelete_for_runs(run_ids))
        return self.saver.delete_for_runs(run_ids)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    return Mode(DjangoCheckpointSaver(), request.param == "async")


def thread(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> dict:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def checkpoint_with(saver: DjangoCheckpointSaver, values: dict[str, Any], previous: Checkpoint | None = None) -> tuple[Checkpoint, dict]:
    checkpoint = empty_checkpoint()
    versions = dict(previous["channel_versions"]) if previous else {}
    new_versions = {}
    for channel in values:
        versions[channel] = new_versions[channel] = saver.get_next_version(versions.get(channel), None)
    checkpoint["channel_versions"] = versions
    checkpoint["channel_values"] = dict(values)
    return checkpoint, new_versions


def test_put_then_get_returns_the_checkpoint_its_values_metadata_and_parent(mode: Mode) -> None:
    first, versions = checkpoint_with(mode.saver, {"messages": ["hi"], "count": 1})
    saved = mode.put(thread("t1"), first, {"source": "input", "step": -1}, versions)
    assert saved == thread("t1", "", first["id"])
    second, versions2 = checkpoint_with(mode.saver, {"count": 2}, previous=first)
    second_config = mode.put(saved, second, {"source": "loop", "step": 0}, versions2)

    latest = mode.get_tuple(thread("t1"))
    assert latest.config == second_config
    assert latest.parent_config == saved
    assert latest.metadata == {"source": "loop", "step": 0}
    # The unchanged channel comes from the first checkpoint's blob: stored once, read in both.
    assert latest.checkpoint["channel_values"] == {"messages": ["hi"], "count": 2}
    assert latest.checkpoint["id"] == second["id"]
    older = mode.get_tuple(thread("t1", "", first["id"]))
    assert older.checkpoint["channel_values"] == {"messages": ["hi"], "count": 1}
    assert older.parent_config is None
    assert GraphBlob.objects.filter(thread_id="t1", channel="messages").count() == 1
    assert mode.get_tuple(thread("nobody")) is None
    assert mode.get_tuple(thread("t1", "", "missing-id")) is None


def test_list_is_newest_first_with_filter_before_limit_and_namespaces(mode: Mode) -> None:
    configs = []
    previous = None
    for step in range(4):
        checkpoint, versions = checkpoint_with(mode.saver, {"step": step}, previous)
        configs.append(mode.put(configs[-1] if configs else thread("t2"), checkpoint, {"step": step, "source": "loop" if step else "input", "user": "ann"}, versions))
        previous = checkpoint
    sub, versions = checkpoint_with(mode.saver, {"inner": True})
    mode.put(thread("t2", "child:1"), sub, {"step": 0, "source": "loop"}, versions)
    other, versions = checkpoint_with(mode.saver, {"x": 1})
    mode.put(thread("t3"), other, {"step": 0, "source": "loop"}, versions)

    ids = [item.config["configurable"]["checkpoint_id"] for item in mode.list(thread("t2"))]
    assert ids == [c["configurable"]["checkpoint_id"] for c in reversed(configs)]
    everything = mode.list({"configurable": {"thread_id": "t2"}})
    assert len(everything) == 5  # both namespaces when none is named
    assert [item.metadata["step"] for item in mode.list(thread("t2"), filter={"source": "loop"})] == [3, 2, 1]
    assert [item.metadata["step"] for item in mode.list(thread("t2"), filter={"step": 1, "user": "ann"})] == [1]
    assert mode.list(thread("t2"), filter={"user": "bob"}) == []
    assert [item.metadata["step"] for item in mode.list(thread("t2"), before=configs[2])] == [1, 0]
    assert [item.metadata["step"] for item in mode.list(thread("t2"), limit=2)] == [3, 2]
    assert [item.metadata["step"] for item in mode.list(thread("t2"), filter={"source": "loop"}, limit=1)] == [3]
    assert len(mode.list(None)) == 6
    assert mode.list(thread("t2", "", configs[1]["configurable"]["checkpoint_id"]))[0].metadata["step"] == 1


def test_pending_writes_keep_the_first_regular_write_and_replace_special_ones(mode: Mode) -> None:
    checkpoint, versions = checkpoint_with(mode.saver, {"a": 1})
    config = mode.put(thread("t4"), checkpoint, {}, versions)
    mode.put_writes(config, [("a", 10), ("b", "x")], task_id="task-b", task_path="~__pregel_pull, node_b")
    mode.put_writes(config, [("a", 99)], task_id="task-b", task_path="~__pregel_pull, node_b")  # a retry changes nothing
    mode.put_writes(config, [("c", [1, 2])], task_id="task-a", task_path="~__pregel_pull, node_a")
    mode.put_writes(config, [("__interrupt__", "first")], task_id="task-c")
    mode.put_writes(config, [("__interrupt__", "second")], task_id="task-c")
    writes = mode.get_tuple(config).pending_writes
    # writes_sort_key order: (task_path, task_id, idx); writes without a path first.
    assert writes == [
        ("task-c", "__interrupt__", "second"),
        ("task-a", "c", [1, 2]),
        ("task-b", "a", 10),
        ("task-b", "b", "x"),
    ]


def test_delete_thread_removes_its_checkpoints_blobs_and_writes_only(mode: Mode) -> None:
    for thread_id in ("gone", "kept"):
        checkpoint, versions = checkpoint_with(mode.saver, {"v": thread_id})
        config = mode.put(thread(thread_id), checkpoint, {}, versions)
        mode.put_writes(config, [("v", 1)], task_id="t")
    mode.delete_thread("gone")
    assert mode.get_tuple(thread("gone")) is None
    assert not GraphBlob.objects.filter(thread_id="gone").exists()
    assert not GraphWrite.objects.filter(thread_id="gone").exists()
    assert mode.get_tuple(thread("kept")).checkpoint["channel_values"] == {"v": "kept"}


class Approval(TypedDict, total=False):
    request: str
    decision: str
    log: list[str]


def approval_graph(saver: DjangoCheckpointSaver) -> Any:
    def ask(state: Approval) -> dict:
        decision = interrupt({"question": f"approve {state['request']}?"})
        return {"decision": decision, "log": [*state.get("log", []), "asked"]}

    def act(state: Approval) -> dict:
        return {"log": [*state.get("log", []), f"acted:{state['decision']}"]}

    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_node("act", act)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


def test_a_real_graph_interrupts_resumes_and_keeps_its_history_sync() -> None:
    graph = approval_graph(DjangoCheckpointSaver())
    config = {"configurable": {"thread_id": "graph-sync"}}
    first = graph.invoke({"request": "refund"}, config)
    assert first["__interrupt__"][0].value == {"question": "approve refund?"}
    state = graph.get_state(config)
    assert state.next == ("ask",) and state.interrupts[0].value == {"question": "approve refund?"}
    final = graph.invoke(Command(resume="yes"), config)
    assert final["log"] == ["asked", "acted:yes"]
    history = list(graph.get_state_history(config))
    assert [snapshot.metadata["step"] for snapshot in history] == [2, 1, 0, -1]


def test_a_real_graph_interrupts_resumes_and_keeps_its_history_async() -> None:
    graph = approval_graph(DjangoCheckpointSaver())
    config = {"configurable": {"thread_id": "graph-async"}}

    async def scenario() -> tuple[Any, Any, list]:
        try:
            first = await graph.ainvoke({"request": "refund"}, config)
            final = await graph.ainvoke(Command(resume="no"), config)
            history = [snapshot async for snapshot in graph.aget_state_history(config)]
            return first, final, history
        finally:
            from asgiref.sync import sync_to_async

            await sync_to_async(connections.close_all)()

    first, final, history = asyncio.run(scenario())
    assert first["__interrupt__"][0].value == {"question": "approve refund?"}
    assert final["log"] == ["asked", "acted:no"]
    assert len(history) == 4


def test_concurrent_writers_of_one_task_index_leave_exactly_one_value() -> None:
    """Eight threads write the same (task, idx) with different values: one stands and every reader sees it."""
    saver = DjangoCheckpointSaver()
    checkpoint, versions = checkpoint_with(saver, {"a": 0})
    config = saver.put(thread("race"), checkpoint, {}, versions)
    outcomes = run_in_threads(8, lambda i: saver.put_writes(config, [("a", i)], task_id="same-task"))
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    writes = saver.get_tuple(config).pending_writes
    assert len(writes) == 1 and writes[0][1] == "a" and writes[0][2] in range(8)
    assert GraphWrite.objects.filter(thread_id="race").count() == 1


FENCE_AGENTS = {"ENCRYPTION_KEYS": ["cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4="], "AGENTS": {"echo": "tests.agents.EchoAgent"}}


def bound_saver(conversation_id: uuid.UUID, message_id: uuid.UUID, epoch: int, snapshot: dict) -> DjangoCheckpointSaver:
    saver = DjangoCheckpointSaver()
    saver.conversation_id, saver.message_id, saver.epoch = conversation_id, message_id, epoch
    saver.turn_snapshot = lambda: dict(snapshot)
    return saver


@override_settings(AGENT_PERSISTENCE=FENCE_AGENTS)
def test_a_bound_saver_writes_the_turn_checkpoint_with_the_graph_and_is_fenced_after_a_takeover(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    plan = begin_turn(alice, conversation_id, content="hi", agent="echo")
    snapshot = {"message_id": str(plan.message_id), "agent": {"n": 1}, "text": "so far", "tool_calls": [], "tool_results": {}}
    saver = bound_saver(conversation_id, plan.message_id, plan.epoch, snapshot)
    checkpoint, versions = checkpoint_with(saver, {"v": 1})
    config = saver.put(thread(str(conversation_id)), checkpoint, {}, versions)
    row = GraphCheckpoint.objects.get(thread_id=str(conversation_id))
    assert (row.conversation_id, row.epoch, row.message_id) == (conversation_id, plan.epoch, plan.message_id)
    assert checkpoint_store().load(conversation_id)["text"] == "so far"
    assert saver.written_by(str(conversation_id), plan.message_id)
    with pytest.raises(Exception) as wrong:
        saver.put(thread("another-thread"), checkpoint, {}, versions)
    assert getattr(wrong.value, "code", None) == "wrong_thread"

    assert force_release(conversation_id)  # a newer epoch holds the conversation now
    later, versions = checkpoint_with(saver, {"v": 2}, previous=checkpoint)
    with pytest.raises(Fenced):
        saver.put(config, later, {}, versions)
    with pytest.raises(Fenced):
        saver.put_writes(config, [("v", 3)], task_id="late")
    assert GraphCheckpoint.objects.filter(thread_id=str(conversation_id)).count() == 1
    assert not GraphBlob.objects.filter(thread_id=str(conversation_id), version=versions["v"]).exists()
    assert not GraphWrite.objects.filter(thread_id=str(conversation_id)).exists()


@override_settings(AGENT_PERSISTENCE=FENCE_AGENTS)
def test_writes_racing_a_takeover_either_land_whole_or_not_at_all(alice: Any) -> None:
    """Writers put checkpoints while another thread takes the conversation over: each put that returned
    is stored with the turn's checkpoint, each that was Fenced left nothing; none lands after the takeover."""
    conversation_id = uuid.uuid4()
    plan = begin_turn(alice, conversation_id, content="hi", agent="echo")
    snapshot = {"message_id": str(plan.message_id), "agent": {}, "text": "", "tool_calls": [], "tool_results": {}}
    saver = bound_saver(conversation_id, plan.message_id, plan.epoch, snapshot)
    released = threading.Event()

    def worker(index: int) -> Any:
        if index == 0:
            taken = force_release(conversation_id)
            released.set()
            return taken
        stored = []
        for _ in range(6):
            checkpoint, versions = checkpoint_with(saver, {"w": index})
            try:
                saver.put(thread(str(conversation_id)), checkpoint, {"writer": index}, versions)
            except Fenced:
                stored.append(None)
                continue
            stored.append(checkpoint["id"])
        return stored

    outcomes = run_in_threads(5, worker)
    assert outcomes[0] is True
    landed = {checkpoint_id for result in outcomes[1:] for checkpoint_id in result if checkpoint_id}
    assert set(GraphCheckpoint.objects.filter(thread_id=str(conversation_id)).values_list("checkpoint_id", flat=True)) == landed
    assert GraphBlob.objects.filter(thread_id=str(conversation_id)).count() == len(landed)
    # After the takeover nothing more is accepted.
    checkpoint, versions = checkpoint_with(saver, {"w": 9})
    with pytest.raises(Fenced):
        saver.put(thread(str(conversation_id)), checkpoint, {}, versions)
    assert AgentCheckpoint.objects.filter(pk=conversation_id).count() == (1 if landed else 0)
