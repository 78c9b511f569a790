"""``manage.py erase_user``: delete every row of one user (agent_persistence.erasure.erase_user).

Name the user as a Django user (username or primary key: its rows in every
tenant, under the default scope resolver's user string ``str(user.pk)``), or as
scope strings (``--tenant`` and ``--user``). The Django account itself is left
alone: it is the project's. ``--yes`` is required; ``--force`` erases
conversations whose turn is running.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ...erasure import erase_user
from ...exceptions import AgentPersistenceError


def add_scope_arguments(parser: Any) -> None:
    parser.add_argument("--tenant", default=None, help="The scope's tenant string (default: every tenant of a Django user, \"\" with --user).")
    parser.add_argument("--user", dest="scope_user", default=None, help="The scope's user string (instead of a Django user).")


def resolve_scope(django_user: str | None, tenant: str | None, scope_user: str | None) -> tuple[str | None, str, str | None, str]:
    """``(tenant, user, account, description)`` of the command's arguments; CommandError when they do not name one user."""
    if django_user is not None and scope_user is not None:
        raise CommandError("Name the user either as a Django user (username or pk) or with --user, not both.")
    if django_user is None:
        if scope_user is None:
            if tenant is not None:
                raise CommandError("--tenant needs --user (the scope's user string), or name a Django user.")
            raise CommandError("Name a user: a Django username or primary key, or --user (and --tenant).")
        if scope_user == "":
            raise CommandError("--user must not be empty.")
        tenant = "" if tenant is None else tenant
        return tenant, scope_user, None, f"user {scope_user!r} of tenant {tenant!r}"
    model = get_user_model()
    found = model._default_manager.filter(**{model.USERNAME_FIELD: django_user}).first()
    if found is None:
        try:
            found = model._default_manager.filter(pk=django_user).first()
        except (ValueError, TypeError, ValidationError):
            found = None
    if found is None:
        raise CommandError(f"No user {django_user!r} (looked up by {model.USERNAME_FIELD} and by primary key).")
    where = "every tenant" if tenant is None else f"tenant {tenant!r}"
    return tenant, str(found.pk), str(found.pk), f"Django user {found.get_username()!r} (pk {found.pk}) in {where}"


class Command(BaseCommand):
    help = "Delete every agent_persistence row of one user (a Django user, or --tenant/--user scope strings)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("django_user", nargs="?", default=None, help="A Django username or primary key.")
        add_scope_arguments(parser)
        parser.add_argument("--yes", action="store_true", help="Really erase (required: nothing can bring the rows back).")
        parser.add_argument("--force", action="store_true", help="Also erase conversations whose turn is running.")

    def handle(self, *args: Any, django_user: str | None, tenant: str | None, scope_user: str | None,
               yes: bool, force: bool, **options: Any) -> None:
        tenant, user, account, described = resolve_scope(django_user, tenant, scope_user)
        if not yes:
            raise CommandError(f"This deletes every row of {described}; pass --yes to erase.")
        try:
            deleted = erase_user(tenant, user, account=account, force=force)
        except AgentPersistenceError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        anonymised = deleted.pop("anonymised", 0)
        total = sum(deleted.values())
        listed = ", ".join(f"{label.rsplit('.', 1)[-1]} {count}" for label, count in sorted(deleted.items()))
        self.stdout.write(f"Erased {total} row(s) of {described}" + (f": {listed}" if listed else "") + ".")
        if anonymised:
            self.stdout.write(f"Removed the user's name from {anonymised} row(s) of other users' conversations.")
