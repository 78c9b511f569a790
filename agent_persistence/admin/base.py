"""What every admin of the app shares: read-only runtime rows and the operator permission.

Runtime rows (runs, interrupts, supervision, recordings, checkpoints, events,
leases) change only through the stores, under their invariants (fencing,
"answered exactly once", gapless sequences). Their admins therefore add,
change and delete nothing; operators act through explicit actions, which
need the model's Django *change* permission (``agent_persistence.change_run``
and so on): the ``operate`` entry of ``allowed_permissions``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.db.models import URLField
from django.http import HttpRequest

# Callback and endpoint URLs are https unless they say otherwise (Django 6's default, today).
URL_FIELDS = {URLField: {"assume_scheme": "https"}}

#: The stylesheet of the app's admin pages.
ADMIN_CSS = {"all": ["agent_persistence/admin.css"]}


class OperatorPermissionMixin:
    """``allowed_permissions=("operate",)`` on an action: the user holds the model's change permission.

    The admin's own ``has_change_permission`` may say False (nothing is editable
    in a form) while the operator actions stay available to those trusted to
    change the model.
    """

    opts: Any

    def has_operate_permission(self, request: HttpRequest) -> bool:
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")


class ReadOnlyAdmin(OperatorPermissionMixin, admin.ModelAdmin):
    """Browse only: no add, no change form, no delete; the change page has no Save or Delete."""

    class Media:
        css = ADMIN_CSS

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """A read-only table of a conversation's runtime rows."""

    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
