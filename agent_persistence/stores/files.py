"""Placeholder."""


class FileStore:
    pass
