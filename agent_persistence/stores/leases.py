"""Placeholder."""


class LeaseStore:
    pass
