"""Placeholder."""


class TaskStore:
    pass
