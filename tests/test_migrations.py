"""The migrations match the models, and the app's system checks pass on the test settings."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


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
