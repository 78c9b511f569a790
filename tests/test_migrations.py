"""The migrations match the models, and the app's system checks pass on the test settings."""

from __future__ import annotations

import importlib
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db
def test_no_missing_migrations() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "agent_persistence", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # makemigrations --check exits 1 when a migration is missing
        pytest.fail(f"A migration is missing:\n{out.getvalue()}\n(exit {exc.code})")


@pytest.mark.django_db
def test_system_checks_pass() -> None:
    call_command("check", "--database", "default", "--fail-level", "WARNING")


def test_a_bad_setting_is_a_system_check_error_with_a_stable_id() -> None:
    from django.conf import settings
    from django.test import override_settings

    from agent_persistence.checks import check_settings

    base = settings.AGENT_PERSISTENCE
    cases = {
        "agent_persistence.E001": {"NOT_A_SETTING": 1},
        "agent_persistence.E002": {"EVENT_STORE": "nowhere.Store"},
        "agent_persistence.E003": {"HEARTBEAT_INTERVAL": -1},
        "agent_persistence.E005": {"FILE_STORAGE": "missing"},
        "agent_persistence.E006": {"AGENTS": {"x": "nowhere.Agent"}},
        "agent_persistence.E007": {"ENCRYPTION_KEYS": ["not-a-key"]},
        "agent_persistence.E008": {"DEAD_AFTER": 0.5, "HEARTBEAT_INTERVAL": 1.0},
        "agent_persistence.E010": {"MCP_SERVERS": ["calendar"]},
        "agent_persistence.W001": {"ENCRYPTION_KEYS": []},
    }
    for check_id, overrides in cases.items():
        with override_settings(AGENT_PERSISTENCE={**base, **overrides}):
            assert check_id in [message.id for message in check_settings()], check_id
    assert check_settings() == []


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="column compression: PostgreSQL")
def test_values_written_whole_are_compressed_with_lz4() -> None:
    """Migrations 0003 and 0010: checkpoint states, recordings and LangGraph blobs use lz4 (the test server has it)."""
    migration = importlib.import_module("agent_persistence.migrations.0010_lz4_compression")
    for model_name, field_name in [("agentcheckpoint", "state"), *migration.COLUMNS]:
        meta = apps.get_model("agent_persistence", model_name)._meta
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attcompression FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
                [meta.db_table, meta.get_field(field_name).column],
            )
            assert cursor.fetchone() == ("l",), (model_name, field_name)
