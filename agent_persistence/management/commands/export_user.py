"""``manage.py export_user``: write one user's rows and bytes to a folder or a zip (agent_persistence.erasure).

``export_user carol carol.zip`` (a Django user, by username or primary key) or
``export_user out/ --tenant acme --user 42`` (scope strings). The export is
``export.json`` (every row :func:`~agent_persistence.erasure.erase_user` would
delete, credentials excepted) and the bytes of the user's files and blobs
under ``files/`` and ``blobs/``. Nothing is overwritten.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...erasure import export_user
from ...exceptions import AgentPersistenceError
from .erase_user import add_scope_arguments, resolve_scope


class Command(BaseCommand):
    help = "Export one user's agent_persistence rows (JSON) and files to a folder or a .zip."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "targets", nargs="+", metavar="[DJANGO_USER] DESTINATION",
            help="A Django username or primary key (unless --user), then a new folder or a path ending in .zip.",
        )
        add_scope_arguments(parser)

    def handle(self, *targets: str, tenant: str | None, scope_user: str | None, **options: Any) -> None:
        given = list(targets) or list(options.get("targets") or [])
        expected = 1 if scope_user is not None else 2
        if len(given) != expected:
            if scope_user is not None:
                raise CommandError("With --user, give only the destination (a new folder or a .zip path).")
            raise CommandError("Give the Django user (username or pk) and the destination, or --user and the destination.")
        django_user = None if scope_user is not None else given[0]
        tenant, user, account, described = resolve_scope(django_user, tenant, scope_user)
        try:
            export = export_user(tenant, user, account=account)
            written = export.write(given[-1])
        except AgentPersistenceError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        except OSError as exc:
            raise CommandError(f"Could not write the export: {exc.strerror or exc}") from None
        rows = sum(len(listed) for listed in export.document["tables"].values())
        self.stdout.write(f"Exported {rows} row(s) and {len(export.contents)} file(s) of {described} to {written}.")
