"""Placeholder."""


class ConversationStore:
    pass
