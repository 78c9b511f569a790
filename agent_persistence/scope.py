"""Who is acting: the (tenant, user) pair every store call is scoped by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Scope:
    """The tenant partition and the user id string a store call acts for.

    ``user`` is compared with a conversation's ``owner``: the owner may write,
    anyone of the same tenant may read a shared conversation, and everything
    else reads as absent.
    """

    tenant: str = ""
    user: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not isinstance(self.user, str):
            raise TypeError("Scope tenant and user must be strings.")


def default_scope_resolver(request: Any) -> Scope | None:
    """Tenant "" and the authenticated user's primary key; None when anonymous.

    ``request`` is a Django/DRF request or a Channels scope dict.
    """
    user = request.get("user") if isinstance(request, dict) else getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return Scope(tenant="", user=str(user.pk))
