"""DjangoCheckpointSaver's prune, copy_thread and delete_for_runs on real graphs, sync and async; a bound saver's scope.

LangGraph's conformance suite (``test_langgraph_conformance.py``) checks the
rows these leave on hand-made checkpoints. Here real graphs run before and
after: a pruned thread keeps its state, its pending interrupt and its
subgraph's paused call, and runs on; a subgraph call's namespace goes with
the root checkpoint it started from; the blobs left are exactly those the kept
checkpoints reference; a ``DeltaChannel`` thread is refused by
``keep_latest`` with nothing pruned; a copy runs on apart from its source; a
deleted run leaves the next run's checkpoints, without a dangling parent; a
prune racing a running graph (two threads, real transactions) loses nothing.
A saver bound to a turn touches only its conversation's thread and is fenced.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from django.test import override_settings
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agent_persistence.exceptions import Fenced, Validation
from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver
from agent_persistence.models import GraphBlob, GraphCheckpoint, GraphWrite
from agent_persistence.runtime.lifecycle import begin_turn, force_release
from agent_persistence.testing.concurrency import run_in_threads
from tests.integrations.test_langgraph_checkpointer import FENCE_AGENTS, Mode, approval_graph, bound_saver, checkpoint_with, thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    return Mode(DjangoCheckpointSaver(), request.param == "async")


def config_of(thread_id: str, run_id: uuid.UUID | None = None) -> dict:
    """A graph config; a ``run_id`` goes where LangGraph's server puts it, and LangGraph copies it to the metadata."""
    configurable = {"thread_id": thread_id, **({"run_id": str(run_id)} if run_id else {})}
    return {"configurable": configurable}


def referenced_blobs(saver: DjangoCheckpointSaver, thread_id: str) -> set[tuple[str, str, str]]:
    """(namespace, channel, version) of every blob the thread's checkpoints reference."""
    wanted = set()
    for row in GraphCheckpoint.objects.filter(thread_id=thread_id):
        checkpoint = saver.serde.loads_typed((row.checkpoint_type, bytes(row.checkpoint)))
        wanted |= {(row.checkpoint_ns, channel, str(version)) for channel, version in checkpoint["channel_versions"].items()}
    return wanted


def stored_blobs(thread_id: str) -> set[tuple[str, str, str]]:
    return set(GraphBlob.objects.filter(thread_id=thread_id).values_list("checkpoint_ns", "channel", "version"))


def test_keep_latest_keeps_the_state_and_the_pending_interrupt_and_the_graph_runs_on(mode: Mode) -> None:
    graph = approval_graph(mode.saver)
    config = config_of("pruned")
    graph.invoke({"request": "refund"}, config)
    graph.invoke(Command(resume="yes"), config)
    graph.invoke({"request": "exchange"}, config)  # paused at ask again, with its interrupt pending
    before = graph.get_state(config)
    assert len(list(graph.get_state_history(config))) > 1

    mode.prune(["pruned"])
    history = list(graph.get_state_history(config))
    assert len(history) == 1 and history[0].parent_config is None
    after = graph.get_state(config)
    assert after.values == before.values and after.next == ("ask",)
    assert [i.value for i in after.interrupts] == [{"question": "approve exchange?"}]
    assert stored_blobs("pruned") == referenced_blobs(mode.saver, "pruned")
    final = graph.invoke(Command(resume="no"), config)
    assert final["log"] == ["asked", "acted:yes", "asked", "acted:no"]


class Outer(TypedDict, total=False):
    log: list[str]


def subgraph_graph(saver: DjangoCheckpointSaver) -> Any:
    def inner(state: Outer) -> dict:
        return {"log": [*state.get("log", []), f"inner:{interrupt('continue?')}"]}

    sub = StateGraph(Outer)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    builder = StateGraph(Outer)
    builder.add_node("child", sub.compile())
    builder.add_edge(START, "child")
    builder.add_edge("child", END)
    return builder.compile(checkpointer=saver)


def test_keep_latest_drops_finished_subgraph_calls_and_keeps_the_paused_one(mode: Mode) -> None:
    graph = subgraph_graph(mode.saver)
    config = config_of("calls")
    graph.invoke({"log": []}, config)
    graph.invoke(Command(resume="a"), config)
    graph.invoke({"log": []}, config)  # the second call is paused inside the subgraph
    namespaces = set(GraphCheckpoint.objects.filter(thread_id="calls").values_list("checkpoint_ns", flat=True))
    assert len(namespaces) == 3  # the root and two calls of the subgraph

    mode.prune(["calls"])
    rows = GraphCheckpoint.objects.filter(thread_id="calls")
    assert rows.filter(checkpoint_ns="").count() == 1
    calls = set(rows.exclude(checkpoint_ns="").values_list("checkpoint_ns", flat=True))
    assert len(calls) == 1 and rows.filter(checkpoint_ns__in=calls).count() == 1  # the paused call, its latest only
    assert not GraphWrite.objects.filter(thread_id="calls").exclude(
        checkpoint_id__in=rows.values_list("checkpoint_id", flat=True)
    ).exists()
    assert stored_blobs("calls") == referenced_blobs(mode.saver, "calls")
    assert graph.invoke(Command(resume="b"), config)["log"] == ["inner:b"]

    mode.prune(["calls"])  # the finished call goes with the root checkpoint it started from
    assert set(rows.values_list("checkpoint_ns", flat=True)) == {""}
    assert graph.get_state(config).values == {"log": ["inner:b"]}


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Notes(TypedDict, total=False):
    notes: Annotated[list[str], DeltaChannel(_extend)]


def test_keep_latest_refuses_a_thread_with_a_delta_channel_and_prunes_nothing(mode: Mode) -> None:
    builder = StateGraph(Notes)
    builder.add_node("note", lambda state: {"notes": ["n"]})
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    graph = builder.compile(checkpointer=mode.saver)
    for _ in range(3):
        graph.invoke({"notes": ["in"]}, config_of("delta"))
    plain = approval_graph(mode.saver)
    plain.invoke({"request": "x"}, config_of("plain"))
    counts = {t: GraphCheckpoint.objects.filter(thread_id=t).count() for t in ("delta", "plain")}

    with pytest.raises(NotImplementedError, match="DeltaChannel: delta"):
        mode.prune(["plain", "delta"])
    assert {t: GraphCheckpoint.objects.filter(thread_id=t).count() for t in ("delta", "plain")} == counts
    assert graph.get_state(config_of("delta")).values["notes"] == ["in", "n"] * 3
    mode.prune(["delta"], strategy="delete")
    assert not GraphCheckpoint.objects.filter(thread_id="delta").exists()
    assert not GraphBlob.objects.filter(thread_id="delta").exists()


def test_prune_refuses_a_string_and_an_unknown_strategy(mode: Mode) -> None:
    checkpoint, versions = checkpoint_with(mode.saver, {"a": 1})
    mode.put(thread("abc"), checkpoint, {}, versions)
    with pytest.raises(TypeError):
        mode.prune("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown prune strategy"):
        mode.prune(["abc"], strategy="oldest")
    assert GraphCheckpoint.objects.filter(thread_id="abc").count() == 1


def test_a_copied_thread_runs_on_apart_from_its_source(mode: Mode) -> None:
    graph = approval_graph(mode.saver)
    graph.invoke({"request": "refund"}, config_of("source"))  # paused at ask
    mode.copy_thread("source", "copy")
    copy_state = graph.get_state(config_of("copy"))
    assert copy_state.values == graph.get_state(config_of("source")).values and copy_state.next == ("ask",)
    assert len(list(graph.get_state_history(config_of("copy")))) == len(list(graph.get_state_history(config_of("source"))))

    assert graph.invoke(Command(resume="copy says yes"), config_of("copy"))["log"] == ["asked", "acted:copy says yes"]
    assert graph.get_state(config_of("source")).next == ("ask",)  # the source did not move
    assert graph.invoke(Command(resume="no"), config_of("source"))["log"] == ["asked", "acted:no"]


def test_copy_thread_into_a_thread_that_has_checkpoints_is_refused_and_writes_nothing(mode: Mode) -> None:
    graph = approval_graph(mode.saver)
    graph.invoke({"request": "a"}, config_of("from"))
    graph.invoke({"request": "b"}, config_of("into"))
    before = GraphCheckpoint.objects.filter(thread_id="into").count()
    with pytest.raises(Validation) as refused:
        mode.copy_thread("from", "into")
    assert refused.value.code == "thread_not_empty"
    assert GraphCheckpoint.objects.filter(thread_id="into").count() == before
    assert graph.get_state(config_of("into")).values["request"] == "b"
    mode.copy_thread("nothing-here", "fresh")  # an empty source copies nothing
    assert not GraphCheckpoint.objects.filter(thread_id="fresh").exists()


def test_delete_for_runs_removes_a_runs_checkpoints_and_leaves_the_next_run_whole(mode: Mode) -> None:
    graph = approval_graph(mode.saver)
    first, second = uuid.uuid4(), uuid.uuid4()
    graph.invoke({"request": "refund"}, config_of("runs", run_id=first))
    graph.invoke(Command(resume="yes"), config_of("runs", run_id=second))
    graph.invoke({"request": "other"}, config_of("elsewhere", run_id=first))

    def run_of(row: GraphCheckpoint) -> Any:
        return row.metadata.get("run_id")

    assert {run_of(row) for row in GraphCheckpoint.objects.filter(thread_id="runs")} == {str(first), str(second)}

    mode.delete_for_runs([str(first)])
    rows = list(GraphCheckpoint.objects.filter(thread_id="runs").order_by("checkpoint_id"))
    assert rows and {run_of(row) for row in rows} == {str(second)}
    assert rows[0].parent_checkpoint_id is None  # its parent was the first run's
    assert not GraphCheckpoint.objects.filter(thread_id="elsewhere").exists()  # the run's rows in every thread
    assert not GraphWrite.objects.filter(thread_id="runs").exclude(checkpoint_id__in=[r.checkpoint_id for r in rows]).exists()
    assert stored_blobs("runs") == referenced_blobs(mode.saver, "runs")
    assert graph.get_state(config_of("runs")).values["log"] == ["asked", "acted:yes"]
    mode.delete_for_runs([])


@override_settings(AGENT_PERSISTENCE=FENCE_AGENTS)
def test_a_bound_saver_prunes_copies_and_deletes_only_its_conversation_and_is_fenced(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    plan = begin_turn(alice, conversation_id, content="hi", agent="echo")
    snapshot = {"message_id": str(plan.message_id), "agent": {}, "text": "", "tool_calls": [], "tool_results": {}}
    saver = bound_saver(conversation_id, plan.message_id, plan.epoch, snapshot)
    mine = str(conversation_id)
    previous = None
    config = thread(mine)
    for step in range(3):
        checkpoint, versions = checkpoint_with(saver, {"step": step}, previous)
        config = saver.put(config, checkpoint, {"run_id": "shared-run", "step": step}, versions)
        previous = checkpoint
    other = DjangoCheckpointSaver()
    checkpoint, versions = checkpoint_with(other, {"x": 1})
    other.put(thread("someone-else"), checkpoint, {"run_id": "shared-run"}, versions)

    for call in (lambda: saver.prune(["someone-else"]), lambda: saver.copy_thread("someone-else", mine),
                 lambda: saver.copy_thread(mine, "someone-else")):
        with pytest.raises(Validation) as wrong:
            call()
        assert wrong.value.code == "wrong_thread"
    saver.prune([mine])
    assert GraphCheckpoint.objects.filter(thread_id=mine).count() == 1
    saver.delete_for_runs(["shared-run"])
    assert not GraphCheckpoint.objects.filter(thread_id=mine).exists()
    assert GraphCheckpoint.objects.filter(thread_id="someone-else").count() == 1  # another thread's run is not its to delete

    checkpoint, versions = checkpoint_with(saver, {"step": 9})
    saver.put(thread(mine), checkpoint, {"run_id": "shared-run"}, versions)
    assert force_release(conversation_id)  # a newer epoch holds the conversation now
    for call in (lambda: saver.delete_for_runs(["shared-run"]), lambda: saver.prune([mine], strategy="delete"),
                 lambda: saver.prune([mine])):
        with pytest.raises(Fenced):
            call()
    assert GraphCheckpoint.objects.filter(thread_id=mine).count() == 1


def test_prune_racing_a_running_graph_loses_none_of_its_progress() -> None:
    """One thread runs a graph step by step while another prunes its thread over and over (real transactions):
    every checkpoint left can be loaded, the blobs it names are there, and the graph ends where it should."""
    saver = DjangoCheckpointSaver()
    graph = approval_graph(saver)
    config = config_of("racing")
    rounds = 4

    def worker(index: int) -> Any:
        if index == 0:
            for round_ in range(rounds):
                graph.invoke({"request": f"r{round_}"}, config)
                graph.invoke(Command(resume=f"a{round_}"), config)
            return graph.get_state(config).values["log"]
        pruned = 0
        for _ in range(12):
            saver.prune(["racing"])
            pruned += 1
        return pruned

    outcomes = run_in_threads(2, worker)
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    expected = [entry for round_ in range(rounds) for entry in ("asked", f"acted:a{round_}")]
    assert outcomes[0] == expected
    assert referenced_blobs(saver, "racing") <= stored_blobs("racing")
    for row in GraphCheckpoint.objects.filter(thread_id="racing"):
        assert saver.get_tuple(thread("racing", row.checkpoint_ns, row.checkpoint_id)) is not None
    assert graph.get_state(config).values["log"] == expected
