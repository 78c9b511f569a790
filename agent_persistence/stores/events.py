"""Placeholder."""


class EventStore:
    pass
