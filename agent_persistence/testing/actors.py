"""The scopes every contract suite acts as: an owner, another user of her tenant, another tenant."""

from __future__ import annotations

import pytest

from ..scope import Scope

ALICE = Scope(tenant="acme", user="alice")
BOB = Scope(tenant="acme", user="bob")  # another user of alice's tenant
MALLORY = Scope(tenant="other", user="alice")  # another tenant, with alice's user id


class Actors:
    """``alice``, ``bob`` and ``mallory`` fixtures for a contract class."""

    @pytest.fixture
    def alice(self) -> Scope:
        return ALICE

    @pytest.fixture
    def bob(self) -> Scope:
        """Another user of alice's tenant."""
        return BOB

    @pytest.fixture
    def mallory(self) -> Scope:
        """A user of another tenant, with alice's user id."""
        return MALLORY
