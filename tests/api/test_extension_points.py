"""The DRF extension points of the API (issue 25, part 1): docs/howto/customize-the-api.md.

The how-to's example (a field more on conversations, deletes for staff only) and its throttling
settings are run here exactly as the page shows them: the blocks marked ``<!-- example: ... -->``
are read from the page, the files written into a package ``myproject`` on ``sys.path``, the
settings blocks applied. Real requests through the real URLconf, real users, a real database.
"""

from __future__ import annotations

import base64
import re
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.urls import resolve, reverse
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from agent_persistence.checks import check_api_extension_settings
from agent_persistence.models import Message
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store

ROOT = Path(__file__).resolve().parents[2]
HOWTO = ROOT / "docs" / "howto" / "customize-the-api.md"
EXAMPLE = re.compile(r"^<!-- example: (\S+) -->\n```python\n(.*?)^```$", re.M | re.S)


def examples() -> list[tuple[str, str]]:
    """(name, code) of every block of the how-to marked ``<!-- example: name -->``, in page order."""
    return EXAMPLE.findall(HOWTO.read_text())


def example_settings(index: int) -> dict[str, Any]:
    """The names the ``index``-th settings block of the how-to assigns."""
    blocks = [code for name, code in examples() if name == "settings"]
    namespace: dict[str, Any] = {}
    exec(compile(blocks[index], f"{HOWTO}:settings[{index}]", "exec"), namespace)
    return {key: value for key, value in namespace.items() if key.isupper()}


def apply(settings: Any, names: dict[str, Any]) -> None:
    """Merge a settings block into the test's settings, as the how-to tells a project to."""
    for key, value in names.items():
        current = getattr(settings, key, None) or {}
        setattr(settings, key, {**current, **value})


@pytest.fixture
def myproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The how-to's ``myproject`` package, importable, from the page's blocks."""
    package = tmp_path / "myproject"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, code in examples():
        if name.startswith("myproject/"):
            (tmp_path / name).write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for module in [name for name in sys.modules if name == "myproject" or name.startswith("myproject.")]:
        del sys.modules[module]


@pytest.fixture
def carol_user(db: Any) -> Any:
    """A staff user."""
    return get_user_model().objects.create_user("carol", password="carol-password", is_staff=True)


def error(response: Any) -> tuple[int, str]:
    return response.status_code, response.json().get("code")


# -- the example of the how-to -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_howto_example_adds_a_field_and_lets_only_staff_delete(
    settings: Any, myproject: Path, alice_user: Any, carol_user: Any, client_for: Callable[[Any], APIClient]
) -> None:
    apply(settings, example_settings(0))
    settings.ROOT_URLCONF = "myproject.urls"
    alice, carol, anon = client_for(alice_user), client_for(carol_user), client_for(None)
    mine = conversation_store().create(Scope("", str(alice_user.pk)), agent="echo")
    hers = conversation_store().create(Scope("", str(carol_user.pk)), agent="echo", title="Plans")

    # The field, on every conversation answer; the built-in fields are all still there.
    detail = alice.get(f"/api/conversations/{mine.pk}/")
    assert detail.status_code == 200
    assert detail.json()["display_title"] == "Untitled conversation"
    assert {"id", "owner", "version", "messages"} <= set(detail.json())
    assert alice.get("/api/conversations/").json()["items"][0]["display_title"] == "Untitled conversation"
    created = alice.post("/api/conversations/", {"agent": "echo", "title": "Trip"}, format="json")
    assert created.status_code == 201 and created.json()["display_title"] == "Trip"
    updated = alice.patch(f"/api/conversations/{mine.pk}/", {"title": "Renamed"}, format="json")
    assert updated.status_code == 200 and updated.json()["display_title"] == "Renamed"

    # The permission: alice (not staff) may not delete her own conversation, and nothing is deleted.
    refused = alice.delete(f"/api/conversations/{mine.pk}/")
    assert refused.status_code == 403
    assert refused.json() == {"code": "permission_denied", "message": "Only staff may delete conversations."}
    assert conversation_store().get(Scope("", str(alice_user.pk)), mine.pk).pk == mine.pk
    # HasScope still comes first: anonymous is not_authenticated, not the project's message.
    assert error(anon.delete(f"/api/conversations/{mine.pk}/")) == (403, "not_authenticated")
    assert error(anon.get("/api/conversations/")) == (403, "not_authenticated")
    # Staff may, and the store's access rules still hold: carol deletes hers, alice's is 404 to her.
    assert carol.delete(f"/api/conversations/{hers.pk}/").status_code == 204
    assert error(carol.delete(f"/api/conversations/{mine.pk}/")) == (404, "not_found")

    # Routing: the project's view answers the path, the app's reverse name gives the same URL.
    url = reverse("agent_persistence:conversation-detail", args=[mine.pk])
    assert url == reverse("conversation-detail", args=[mine.pk]) == f"/api/conversations/{mine.pk}/"
    assert resolve(url).func.view_class.__module__ == "myproject.api"
    assert resolve(reverse("agent_persistence:conversation-list")).func.view_class.__module__.startswith("agent_persistence.")


@pytest.mark.django_db
def test_without_the_settings_conversations_keep_the_built_in_fields(alice_client: APIClient, alice_scope: Scope) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    assert "display_title" not in alice_client.get(f"/api/conversations/{conversation.pk}/").json()
    assert alice_client.delete(f"/api/conversations/{conversation.pk}/").status_code == 204


@pytest.mark.django_db
def test_a_message_serializer_renders_every_message_answer(settings: Any, myproject: Path, alice_client: APIClient,
                                                          alice_scope: Scope) -> None:
    (myproject / "messages.py").write_text(
        "from rest_framework import serializers\n"
        "from agent_persistence.api.serializers.conversations import MessageSerializer\n\n"
        "class LabelledMessageSerializer(MessageSerializer):\n"
        "    label = serializers.SerializerMethodField()\n\n"
        "    def get_label(self, message):\n"
        "        return f'{message.role} #{message.position}'\n"
    )
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE,
                                  "SERIALIZERS": {"message": "myproject.messages.LabelledMessageSerializer"}}
    conversation = conversation_store().create(alice_scope, agent="echo")
    created = alice_client.post(f"/api/conversations/{conversation.pk}/messages/", {"role": "user", "content": "hi"}, format="json")
    assert created.status_code == 201, created.content
    label = created.json()["label"]
    assert label.startswith("user #")
    assert alice_client.get(f"/api/conversations/{conversation.pk}/messages/").json()["items"][0]["label"] == label
    assert alice_client.get(f"/api/conversations/{conversation.pk}/").json()["messages"]["items"][0]["label"] == label


# -- throttling turn starts ----------------------------------------------------------------------


@pytest.fixture
def throttled(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The how-to's throttling settings, applied."""
    apply(settings, example_settings(1))
    # DRF binds SimpleRateThrottle.THROTTLE_RATES when it is imported: a project's settings are read
    # then, a test's override must be bound again.
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", api_settings.DEFAULT_THROTTLE_RATES)
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_the_fourth_turn_start_of_a_user_in_a_minute_is_429_throttled(
    throttled: None, drained_producer_loop: None, alice_user: Any, bob_user: Any, client_for: Callable[[Any], APIClient]
) -> None:
    alice, bob = client_for(alice_user), client_for(bob_user)
    started = [alice.post(f"/api/conversations/{uuid.uuid4()}/turns/", {"content": "hi", "agent": "echo"}, format="json")
               for _ in range(3)]
    assert [response.status_code for response in started] == [202, 202, 202]
    fourth_id = uuid.uuid4()
    fourth = alice.post(f"/api/conversations/{fourth_id}/turns/", {"content": "hi", "agent": "echo"}, format="json")
    assert fourth.status_code == 429
    assert fourth.json()["code"] == "throttled"
    assert 1 <= int(fourth["Retry-After"]) <= 60
    assert not Message.objects.filter(conversation_id=fourth_id).exists()  # nothing stored, nothing started
    # Per user: bob starts his turn; the other endpoints are not throttled for alice.
    assert bob.post(f"/api/conversations/{uuid.uuid4()}/turns/", {"content": "hi", "agent": "echo"}, format="json").status_code == 202
    assert all(alice.get("/api/conversations/").status_code == 200 for _ in range(5))


@pytest.mark.django_db
def test_without_throttle_settings_turn_starts_are_not_throttled(settings: Any) -> None:
    from agent_persistence.api.views import StartTurnView

    assert StartTurnView().get_throttles() == []
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"agent_persistence.turn_start": "1/minute"}}
    assert StartTurnView().get_throttles() == []  # a rate alone throttles nothing: THROTTLE_CLASSES is None


# -- permission and authentication settings ------------------------------------------------------------


@pytest.mark.django_db
def test_permission_classes_are_checked_after_has_scope(settings: Any, alice_user: Any, carol_user: Any,
                                                       client_for: Callable[[Any], APIClient]) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"]}
    assert error(client_for(None).get("/api/conversations/")) == (403, "not_authenticated")  # AllowAny lets no one in
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}
    assert error(client_for(alice_user).get("/api/conversations/")) == (403, "permission_denied")
    assert client_for(carol_user).get("/api/conversations/").status_code == 200
    # The OAuth callback is no scoped view: the project's permissions do not apply to it.
    assert error(client_for(None).get("/api/mcp/oauth/callback/")) == (400, "invalid_state")


@pytest.mark.django_db
def test_authentication_classes_replace_the_host_defaults_for_the_api(settings: Any, alice_user: Any) -> None:
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"alice:alice-password").decode())
    session = APIClient()
    assert session.login(username="alice", password="alice-password")
    # Today: the host's defaults (session, then basic).
    assert session.get("/api/conversations/").status_code == 200
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE,
                                  "AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]}
    assert basic.get("/api/conversations/").status_code == 200
    refused = session.get("/api/conversations/")
    assert error(refused) == (401, "not_authenticated")
    assert refused["WWW-Authenticate"].startswith("Basic")


# -- public views --------------------------------------------------------------------------------


def test_every_routed_view_is_importable_from_agent_persistence_api_views() -> None:
    from django.urls import get_resolver

    from agent_persistence.api import views
    from agent_persistence.api.schema import SchemaView
    from agent_persistence.api.views.base import UnknownResourceView

    routed = {pattern.callback.view_class for pattern in get_resolver("agent_persistence.api.urls").url_patterns}
    routed -= {SchemaView, UnknownResourceView}
    exported = {getattr(views, name) for name in views.__all__}
    assert routed <= exported
    with pytest.raises(AttributeError):
        views.NoSuchView  # noqa: B018


# -- system checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("PERMISSION_CLASSES", None, "must be a list of import strings"),
        ("PERMISSION_CLASSES", ["myproject.nowhere.Permission"], "does not import"),
        ("AUTHENTICATION_CLASSES", "rest_framework.authentication.BasicAuthentication", "must be a list"),
        ("THROTTLE_CLASSES", [42], "not an import string"),
        ("SERIALIZERS", ["x"], "must be a dict"),
        ("SERIALIZERS", {"conversations": "agent_persistence.api.serializers.conversations.ConversationSerializer"}, "unknown resource"),
        ("SERIALIZERS", {"conversation": "agent_persistence.api.permissions.HasScope"}, "not a DRF serializer"),
    ],
)
def test_a_malformed_extension_setting_is_e012(settings: Any, key: str, value: Any, fragment: str) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, key: value}
    errors = check_api_extension_settings()
    assert [error.id for error in errors] == ["agent_persistence.E012"], errors
    assert fragment in errors[0].msg
    with pytest.raises(SystemCheckError, match="E012"):
        call_command("check")


def test_the_defaults_and_the_howto_settings_pass_the_checks(settings: Any) -> None:
    assert check_api_extension_settings() == []
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **example_settings(1)["AGENT_PERSISTENCE"],
                                  "AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
                                  "SERIALIZERS": {"conversation": "agent_persistence.api.serializers.conversations.ConversationSerializer"}}
    assert check_api_extension_settings() == []


@pytest.mark.django_db(transaction=True)
def test_the_howto_throttle_subclass_limits_only_turn_starts(
    settings: Any, monkeypatch: pytest.MonkeyPatch, myproject: Path, drained_producer_loop: None,
    alice_user: Any, client_for: Callable[[Any], APIClient]
) -> None:
    (myproject / "throttle_urls.py").write_text(
        "from django.urls import include, path\n\n"
        "from myproject.throttles import StartTurnView\n\n"
        "urlpatterns = [\n"
        '    path("api/conversations/<str:conversation_id>/turns/", StartTurnView.as_view(), name="turn-start"),\n'
        '    path("api/", include("agent_persistence.api.urls")),\n'
        "]\n"
    )
    settings.ROOT_URLCONF = "myproject.throttle_urls"
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"turn_starts": "5/hour"}}  # the rate the page's comment gives
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", api_settings.DEFAULT_THROTTLE_RATES)
    cache.clear()
    alice = client_for(alice_user)
    statuses = [alice.post(f"/api/conversations/{uuid.uuid4()}/turns/", {"content": "hi", "agent": "echo"}, format="json").status_code
                for _ in range(6)]
    assert statuses == [202] * 5 + [429]
    assert all(alice.get("/api/conversations/").status_code == 200 for _ in range(6))  # THROTTLE_CLASSES is None
    cache.clear()
