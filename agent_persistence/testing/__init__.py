"""Contract suites for the stores, shipped so a custom backend can run the same tests.

Each suite is a pytest class that asserts through the store API only (no
model query); subclass it in your project and override ``make_store()`` to
test one store of yours, or ``make_stores()`` to run it on a whole family
(:class:`agent_persistence.testing.family.Stores`)::

    from agent_persistence.testing.conversations import ConversationStoreContract

    class TestMyConversationStore(ConversationStoreContract):
        def make_store(self):
            return MyConversationStore()

Both shipped families pass every suite: the ORM one (``orm_stores()``, the
default) and the in-memory one (``memory_stores()``). They need pytest and
pytest-django; on the ORM family, a database that supports concurrent
transactions (PostgreSQL, or SQLite on a file in WAL mode with IMMEDIATE
transactions), since the race tests run real threads and processes.
"""
