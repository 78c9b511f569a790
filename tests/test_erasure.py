"""User and tenant erasure and export (issue 25): no row of the user is left in any table of the app."""

from __future__ import annotations

import json
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.db.models import ProtectedError
from django.test import override_settings
from django.utils import timezone

from agent_persistence import models as m
from agent_persistence.erasure import erase_tenant, erase_user, export_user, user_rows
from agent_persistence.exceptions import Conflict, Validation

pytestmark = pytest.mark.django_db

ALICE, BOB = "u-alice", "u-bob"


def marker(tenant: str, user: str) -> str:
    return f"MARK[{tenant}|{user}]"


def populate(tenant: str, user: str, *, account: str = "", running: bool = False) -> dict[str, Any]:
    """One row of the user in every table of the app (bytes of files and blobs included)."""
    mark = marker(tenant, user)
    now = timezone.now()
    suffix = uuid.uuid4().hex[:8]
    conv = m.Conversation.objects.create(tenant=tenant, owner=user, title=mark, metadata={"m": mark})
    m.Message.objects.create(conversation=conv, position=0, role="user", content=mark)
    run = m.Run.objects.create(conversation=conv, message_id=uuid.uuid4(), name=mark)
    m.Interrupt.objects.create(run=run, conversation=conv, payload={"m": mark})
    m.Event.objects.create(conversation=conv, seq=1, type="custom", data={"m": mark})
    m.Activity.objects.create(conversation=conv, activity_id=uuid.uuid4(), position=0, activity_type="p", content={"m": mark})
    stored = m.StoredFile(conversation=conv, uploader=user, name="f.txt", size=len(mark))
    stored.content.save("f.txt", ContentFile(mark.encode()), save=False)
    stored.save()
    m.Task.objects.create(tenant=tenant, owner=user, conversation=conv, title=mark)
    m.Task.objects.create(tenant=tenant, owner=user, title=mark)
    m.TurnSupervision.objects.create(
        conversation=conv, status="running" if running else "done", message_id=uuid.uuid4(), epoch=1, replica=mark
    )
    m.StreamRecording.objects.create(conversation=conv, message_id=uuid.uuid4(), message={"m": mark})
    m.AgentCheckpoint.objects.create(conversation=conv, state={"m": mark})
    m.GraphCheckpoint.objects.create(thread_id=str(conv.pk), checkpoint_id="1", checkpoint_type="json",
                                     checkpoint=mark.encode(), conversation=conv)
    m.GraphCheckpoint.objects.create(thread_id=str(conv.pk), checkpoint_id="2", checkpoint_type="json",
                                     checkpoint=mark.encode())  # not linked: found by its thread id
    m.GraphBlob.objects.create(thread_id=str(conv.pk), channel="c", version="1", value_type="json",
                               value=mark.encode(), conversation=conv)
    m.GraphWrite.objects.create(thread_id=str(conv.pk), checkpoint_id="1", task_id="t", idx=0, channel="c",
                                value_type="json", value=mark.encode(), conversation=conv)
    generation = m.GenerationRun.objects.create(id=uuid.uuid4(), tenant=tenant, owner=user, slot=mark, kind="image")

    def blob(key: str) -> m.Blob:
        row = m.Blob(tenant=tenant, key=key, size=len(mark), custom_metadata={"m": mark})
        row.content.save(f"erasure-test/{uuid.uuid4()}", ContentFile(mark.encode()), save=False)
        row.save()
        return row

    m.Artifact.objects.create(tenant=tenant, owner=user, generation_run=generation, blob=blob(f"gen/{uuid.uuid4()}"), name=mark)
    m.Artifact.objects.create(tenant=tenant, owner=user, conversation=conv, run=run, blob=blob(f"chat/{uuid.uuid4()}"), name=mark)
    named = blob(f"keys/{mark}/{uuid.uuid4()}")
    m.Artifact.objects.create(tenant=tenant, owner=user, generation_run=generation, blob_key=named.key, name=mark)
    m.MetadataEntry.objects.create(tenant=tenant, namespace="agent_persistence.agui", key=f"resume:{conv.pk}:x", value=json.dumps(mark))
    m.Lease.objects.create(tenant=tenant, key=f"mcp-refresh:{user}:srv-{suffix}", holder="r", expires_at=now + timedelta(hours=1),
                           metadata={"m": mark})
    m.WebsocketTicket.objects.create(tenant=tenant, user=user, account=account, conversation_id=conv.pk,
                                     expires_at=now + timedelta(minutes=1))
    m.McpIntegration.objects.create(tenant=tenant, user=user, server=f"srv-{suffix}", scope=mark)
    return {"conversation": conv, "run": run, "file": stored, "blob": named}


def tenant_wide(tenant: str) -> None:
    """Rows of the tenant that name no user: erase_user leaves them, erase_tenant deletes them."""
    m.McpClientInfo.objects.create(tenant=tenant, server="srv", client_id=f"TENANT[{tenant}]")
    m.MetadataEntry.objects.create(tenant=tenant, namespace="ns", key="k", value=json.dumps(f"TENANT[{tenant}]"))


def snapshot() -> dict[str, dict[Any, str]]:
    """Every row of every table of the app, as text."""
    tables = {}
    for model in apps.get_app_config("agent_persistence").get_models():
        rows = {}
        for values in model.objects.values():
            rows[values["pk"] if "pk" in values else values[model._meta.pk.attname]] = text_of(values)
        tables[model.__name__] = rows
    return tables


def text_of(values: dict[str, Any]) -> str:
    parts = []
    for key, value in sorted(values.items()):
        if isinstance(value, (bytes, memoryview)):
            value = bytes(value).decode("utf-8", "replace")
        parts.append(f"{key}={value!r}")
    return "; ".join(parts)


def users_rows(tables: dict[str, dict[Any, str]], tenant: str, user: str, conversation_ids: list[str]) -> dict[str, set[Any]]:
    needles = [marker(tenant, user)] + conversation_ids
    return {name: {pk for pk, text in rows.items() if any(n in text for n in needles)} for name, rows in tables.items()}


def scenario() -> dict[str, Any]:
    alice = populate("t1", ALICE)
    bob = populate("t1", BOB)
    populate("t2", ALICE)  # the same user string in another tenant
    tenant_wide("t1")
    tenant_wide("t2")
    # Alice's traces in Bob's (shared) conversation: a file she uploaded, an interrupt she answered.
    visit = m.StoredFile(conversation=bob["conversation"], uploader=ALICE, name="v.txt", size=1)
    visit.content.save("v.txt", ContentFile(b"v"), save=False)
    visit.save()
    answered = m.Interrupt.objects.create(run=bob["run"], conversation=bob["conversation"], status="resolved",
                                          resolved_at=timezone.now(), resolved_by=ALICE)
    return {"alice": alice, "bob": bob, "visit": visit, "touched": {visit.pk, answered.pk}}


def test_erase_user_leaves_no_row_of_the_user_in_any_table(django_capture_on_commit_callbacks: Any) -> None:
    data = scenario()
    alice_conversations = [str(pk) for pk in m.Conversation.objects.filter(tenant="t1", owner=ALICE).values_list("pk", flat=True)]
    before = snapshot()
    doomed = users_rows(before, "t1", ALICE, alice_conversations)
    # The fixture has a row of Alice's in every table of the app (a new table must be covered here too).
    assert [name for name, pks in doomed.items() if name != "McpClientInfo" and not pks] == []
    paths = [data["alice"]["file"].content.path, data["alice"]["blob"].content.path]
    with django_capture_on_commit_callbacks(execute=True):
        deleted = erase_user("t1", ALICE)
    assert deleted["agent_persistence.Conversation"] == 1 and deleted["anonymised"] == 2
    after = snapshot()
    for name, rows in after.items():
        left = [text for text in rows.values() if marker("t1", ALICE) in text or any(c in text for c in alice_conversations)]
        assert left == [], name
    # No text column of any t1 row names Alice any more.
    for model in apps.get_app_config("agent_persistence").get_models():
        names = {f.name for f in model._meta.concrete_fields}
        scoped = {"tenant": "t1"} if "tenant" in names else {"conversation__tenant": "t1"} if "conversation" in names else {}
        for column in model._meta.concrete_fields:
            if column.get_internal_type() in ("CharField", "TextField") and column.name != "tenant":
                assert not model.objects.filter(**scoped, **{column.name: ALICE}).exists(), (model.__name__, column.name)
    assert not m.Lease.objects.filter(tenant="t1", key__contains=ALICE).exists()
    # Every other row is intact, Alice's name aside in Bob's conversation.
    for name, rows in before.items():
        expected = {pk: text for pk, text in rows.items() if pk not in doomed[name]}
        got = after[name]
        assert set(got) == set(expected), name
        for pk, text in expected.items():
            anonymised = text if pk not in data["touched"] else text.replace(f"uploader={ALICE!r}", "uploader=None").replace(f"resolved_by={ALICE!r}", "resolved_by=None")
            assert got[pk] == anonymised, (name, pk)
    assert m.StoredFile.objects.get(pk=data["visit"].pk).uploader is None
    # The bytes went with the rows; Bob's stayed.
    assert [Path(p).exists() for p in paths] == [False, False]
    assert Path(data["bob"]["file"].content.path).exists() and Path(data["bob"]["blob"].content.path).exists()


def test_erase_user_refuses_a_running_turn_and_deletes_nothing_unless_forced() -> None:
    populate("t1", ALICE)
    populate("t1", ALICE, running=True)
    before = snapshot()
    with pytest.raises(Conflict) as caught:
        erase_user("t1", ALICE)
    assert caught.value.code == "turn_running"
    assert snapshot() == before
    erase_user("t1", ALICE, force=True)
    assert not any(rows.exists() for rows in user_rows("t1", ALICE).values())


def test_bad_scope_is_refused_with_a_code() -> None:
    populate("t1", ALICE)
    for tenant, user in ((1, ALICE), ("t1", ""), ("t1", None), ("t1", "x" * 256)):
        with pytest.raises(Validation) as caught:
            erase_user(tenant, user)  # type: ignore[arg-type]
        assert caught.value.code == "invalid_scope"
    with pytest.raises(Validation):
        erase_user("t1", ALICE, force="yes")  # type: ignore[arg-type]
    assert m.Conversation.objects.filter(owner=ALICE).exists()


def test_erase_tenant_deletes_the_tenant_and_nothing_else(django_capture_on_commit_callbacks: Any) -> None:
    scenario()
    before = snapshot()
    with django_capture_on_commit_callbacks(execute=True):
        erase_tenant("t1")
    after = snapshot()
    for name, rows in after.items():
        assert not [t for t in rows.values() if "t1|" in t or "TENANT[t1]" in t], name
        kept = {pk for pk, text in before[name].items() if "t2|" in text or "TENANT[t2]" in text}
        assert kept <= set(rows), name
    assert m.Conversation.objects.filter(tenant="t2").count() == 1


def test_export_round_trip(tmp_path: Path) -> None:
    data = scenario()
    export = export_user("t1", ALICE)
    written = export.write(tmp_path / "alice.zip")
    with zipfile.ZipFile(written) as archive:
        document = json.loads(archive.read("export.json"))
        assert document["format"] == "agent_persistence.user_export" and document["scope"] == {"tenant": "t1", "user": ALICE}
        tables = document["tables"]
        for model, rows in user_rows("t1", ALICE).items():
            assert sorted(r[model._meta.pk.attname] for r in tables[model.__name__]) == sorted(
                str(pk) if isinstance(pk, uuid.UUID) else pk for pk in rows.values_list("pk", flat=True)
            ), model.__name__
        [conversation] = tables["Conversation"]
        assert conversation["title"] == marker("t1", ALICE)
        [stored] = tables["StoredFile"]
        assert archive.read(stored["export_path"]) == marker("t1", ALICE).encode()
        blobs = {row["key"]: archive.read(row["export_path"]) for row in tables["Blob"]}
        assert blobs[data["alice"]["blob"].key] == marker("t1", ALICE).encode()
        assert "access_token" not in tables["McpIntegration"][0]
        assert "u-bob" not in json.dumps(tables)
    # A folder, and never over something.
    folder = export.write(tmp_path / "alice")
    assert json.loads((folder / "export.json").read_text()) == document
    assert (folder / stored["export_path"]).read_bytes() == marker("t1", ALICE).encode()
    with pytest.raises(Validation):
        export.write(tmp_path / "alice")
    with pytest.raises(Validation):
        export.write(tmp_path / "alice.zip")


# -- deleting a Django user -------------------------------------------------------------------


def django_user(name: str = "carol") -> Any:
    return get_user_model().objects.create_user(username=name, password="x")


def test_deleting_a_django_user_erases_its_rows(django_capture_on_commit_callbacks: Any) -> None:
    carol = django_user()
    user = str(carol.pk)
    populate("", user, account=user)
    populate("other", user)
    populate("", BOB)
    with django_capture_on_commit_callbacks(execute=True):
        carol.delete()
    assert not any(rows.exists() for rows in user_rows(None, user, account=user).values())
    assert m.Conversation.objects.filter(owner=BOB).exists()


def test_on_user_delete_keep_and_refuse() -> None:
    carol = django_user()
    user = str(carol.pk)
    populate("", user)
    with override_settings(AGENT_PERSISTENCE={"ON_USER_DELETE": "keep"}):
        django_user("dave").delete()
        get_user_model().objects.filter(pk=carol.pk).delete()
        assert m.Conversation.objects.filter(owner=user).exists()
    erin = django_user("erin")
    populate("", str(erin.pk))
    with override_settings(AGENT_PERSISTENCE={"ON_USER_DELETE": "refuse"}):
        with pytest.raises(ProtectedError, match="erase_user"), transaction.atomic():
            erin.delete()
        assert get_user_model().objects.filter(pk=erin.pk).exists()
        assert m.Conversation.objects.filter(owner=str(erin.pk)).exists()
        erase_user(None, str(erin.pk))
        erin.delete()
        assert not get_user_model().objects.filter(pk=erin.pk).exists()


def test_on_user_delete_check() -> None:
    from agent_persistence.checks import check_on_user_delete

    assert check_on_user_delete() == []
    with override_settings(AGENT_PERSISTENCE={"ON_USER_DELETE": "delete"}):
        [error] = check_on_user_delete()
        assert error.id == "agent_persistence.E013"
    own = "tests.api.conftest.scope_from_user_names"
    with override_settings(AGENT_PERSISTENCE={"SCOPE_RESOLVER": own}):
        [warning] = check_on_user_delete()  # "erase" by default, but the scope user may not be str(user.pk)
        assert warning.id == "agent_persistence.W003"
    for chosen in ("erase", "keep"):
        with override_settings(AGENT_PERSISTENCE={"SCOPE_RESOLVER": own, "ON_USER_DELETE": chosen}):
            assert check_on_user_delete() == []


# -- the commands ------------------------------------------------------------------------------


def test_export_and_erase_commands(tmp_path: Path, capsys: Any) -> None:
    carol = django_user()
    populate("", str(carol.pk))
    populate("t1", ALICE)
    call_command("export_user", "carol", str(tmp_path / "carol.zip"))
    with zipfile.ZipFile(tmp_path / "carol.zip") as archive:
        assert json.loads(archive.read("export.json"))["tables"]["Conversation"][0]["owner"] == str(carol.pk)
    call_command("export_user", str(tmp_path / "alice"), tenant="t1", user=ALICE)
    assert (tmp_path / "alice" / "export.json").exists()
    call_command("erase_user", "--tenant", "t1", "--user", ALICE, "--yes")
    assert not m.Conversation.objects.filter(owner=ALICE).exists()
    call_command("erase_user", str(carol.pk), "--yes")
    assert not m.Conversation.objects.filter(owner=str(carol.pk)).exists()
    assert get_user_model().objects.filter(pk=carol.pk).exists()  # the account itself is the project's
    out = capsys.readouterr().out
    assert "Erased" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["nobody", "--yes"], "No user"),
        (["--tenant", "t1", "--yes"], "--user"),
        (["carol", "--user", ALICE, "--yes"], "either"),
        ([], "Name a user"),
        (["carol"], "--yes"),
    ],
)
def test_erase_command_errors(args: list[str], message: str) -> None:
    django_user()
    with pytest.raises(CommandError, match=message):
        call_command("erase_user", *args)


def test_erase_command_refuses_a_running_turn(tmp_path: Path) -> None:
    populate("t1", ALICE, running=True)
    with pytest.raises(CommandError, match="turn_running"):
        call_command("erase_user", "--tenant", "t1", "--user", ALICE, "--yes")
    assert m.Conversation.objects.filter(owner=ALICE).exists()
    with pytest.raises(CommandError, match="exists"):
        (tmp_path / "x.zip").write_bytes(b"")
        call_command("export_user", str(tmp_path / "x.zip"), tenant="t1", user=ALICE)


def test_a_forced_erasure_fences_the_running_producer() -> None:
    """A real turn (begun through the turn store): refused, then forced; the producer's later writes write nothing."""
    from agent_persistence.exceptions import Fenced, NotFound
    from agent_persistence.stores.checkpoints import CheckpointStore
    from agent_persistence.stores.turns import TurnStore
    from agent_persistence.testing.turns import AGENTS, COMPLETED, OWNER

    store = TurnStore()
    plan = store.begin(OWNER, uuid.uuid4(), content="hello", known_agents=AGENTS, agent="helper")
    with pytest.raises(Conflict) as caught:
        erase_user(OWNER.tenant, OWNER.user)
    assert caught.value.code == "turn_running" and caught.value.details["conversation_id"] == str(plan.conversation_id)
    assert m.Message.objects.filter(conversation_id=plan.conversation_id).count() == 1
    erase_user(OWNER.tenant, OWNER.user, force=True)
    sealed = store.seal(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch,
                        message={"role": "assistant", "content": "late"}, seal=COMPLETED, stop_reason="completed")
    assert sealed is False
    with pytest.raises((Fenced, NotFound)):
        CheckpointStore().save(plan.conversation_id, {"k": 1}, epoch=plan.epoch, message_id=plan.message_id)
    assert not any(rows.exists() for rows in user_rows(OWNER.tenant, OWNER.user).values())


@pytest.mark.django_db(transaction=True)
def test_erasure_waits_for_a_producer_mid_write_in_the_lock_order() -> None:
    """A producer holds its fence (supervision row) and then takes the conversation row to append:
    the erasure, which takes the same rows in the same order, waits for it instead of deadlocking,
    and deletes what it appended."""
    import threading

    from django.db import connection, transaction

    from agent_persistence.stores.fencing import fence
    from agent_persistence.stores.turns import TurnStore
    from agent_persistence.testing.turns import AGENTS, OWNER

    plan = TurnStore().begin(OWNER, uuid.uuid4(), content="hello", known_agents=AGENTS, agent="helper")
    holding, go_on = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def producer() -> None:
        try:
            with transaction.atomic():
                fence(plan.conversation_id, plan.epoch)
                holding.set()
                go_on.wait(5)
                conversation = m.Conversation.objects.select_for_update().get(pk=plan.conversation_id)
                m.Event.objects.create(conversation=conversation, seq=conversation.last_event_seq + 1, type="late")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            from django.db import connection as own

            own.close()

    thread = threading.Thread(target=producer)
    thread.start()
    assert holding.wait(5)
    erased: list[dict[str, int]] = []
    eraser = threading.Thread(target=lambda: (erased.append(erase_user(OWNER.tenant, OWNER.user, force=True)), connection.close()))
    eraser.start()
    eraser.join(0.5)
    if connection.vendor == "postgresql":
        assert eraser.is_alive()  # waiting for the producer's supervision row lock
    go_on.set()
    thread.join(10)
    eraser.join(10)
    assert failures == [] and not eraser.is_alive() and erased
    assert erased[0]["agent_persistence.Event"] >= 1  # the producer's late event went too
    assert not any(rows.exists() for rows in user_rows(OWNER.tenant, OWNER.user).values())


#: Runs ``manage.py`` once per command line of ``argv[1]`` (JSON), each in a child forked after Django is
#: set up and the system checks ran once: every command is the real ``manage.py`` in its own process (its
#: exit code, its stderr, its own system checks), without paying the start-up (Django, the example
#: project's three agent frameworks: seconds each) once per command. Prints one JSON result per command.
MANAGE_EACH = """
import json, os, runpy, sys, tempfile
import django
django.setup()
from django.core.checks import run_checks
from django.db import connections
run_checks()  # imports what the system checks import (the project's agents, their frameworks) once, for every child
for argv in json.loads(sys.argv[1]):
    connections.close_all()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = ["manage.py", *argv]
            code = 0
            try:
                runpy.run_path("manage.py", run_name="__main__")
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else 1
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.seek(0)
        err.seek(0)
        print(json.dumps({"returncode": status, "stdout": out.read(), "stderr": err.read()}), flush=True)
"""


@pytest.mark.e2e
def test_the_commands_in_a_real_project_answer_errors_in_one_line(tmp_path: Path) -> None:
    """manage.py of the example project (its own SQLite database): export, errors with no traceback, erase."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "AGENT_PERSISTENCE_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "example_project.settings",
           "PYTHONPATH": str(root)}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)

    def manage_each(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
        done = subprocess.run([sys.executable, "-c", MANAGE_EACH, json.dumps(commands)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        results = [json.loads(line) for line in done.stdout.splitlines()]
        assert len(results) == len(commands), done.stdout[-3000:]
        return [subprocess.CompletedProcess(argv, **result) for argv, result in zip(commands, results)]

    failures = (
        (["erase_user", "nobody", "--yes"], "CommandError: No user 'nobody'"),
        (["erase_user", "demo"], "pass --yes"),
        (["export_user", "demo", str(tmp_path / "demo.zip")], "CommandError: export_exists"),
        (["export_user", "demo", str(tmp_path / "no" / "such" / "x.zip")], "CommandError: Could not write the export"),
        (["erase_user", "--user", "x" * 300, "--yes"], "CommandError: invalid_scope"),
    )
    migrated, user, exported, *failed, erased = manage_each(
        ["migrate", "-v0"], ["demo_user"], ["export_user", "demo", str(tmp_path / "demo.zip")],
        *(args for args, _ in failures), ["erase_user", "demo", "--yes"],
    )
    assert migrated.returncode == 0 and user.returncode == 0, migrated.stderr + user.stderr
    assert exported.returncode == 0 and "Exported" in exported.stdout, exported.stderr
    assert "export.json" in zipfile.ZipFile(tmp_path / "demo.zip").namelist()
    for (args, expected), result in zip(failures, failed):
        assert result.returncode != 0 and expected in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert erased.returncode == 0 and erased.stdout.startswith("Erased"), erased.stderr
