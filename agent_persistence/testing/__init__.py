"""Contract suites for the stores, shipped so a custom backend can run the same tests.

Each suite is a pytest class; subclass it in your project and override
``make_store()`` to return your backend::

    from agent_persistence.testing.conversations import ConversationStoreContract

    class TestMyConversationStore(ConversationStoreContract):
        def make_store(self):
            return MyConversationStore()

They need pytest and pytest-django, and a database that supports concurrent
transactions (PostgreSQL, or SQLite on a file in WAL mode with IMMEDIATE
transactions).
"""
