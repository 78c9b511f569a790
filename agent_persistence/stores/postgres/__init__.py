"""The PostgreSQL wing of the ORM stores: what only PostgreSQL runs.

- :mod:`.binding`: server-side binding (``execute_bound``, ``Utf8Text``);
- :mod:`.rows`: psycopg's compiled ``timestamptz`` loader for the rows a compiled statement reads;
- :mod:`.appends`: the one-statement appends and turn starts (data-modifying CTEs) and the one-statement turn read;
- :mod:`.checkpoints`: the checkpoint save function of migration 0011 and its one-statement fallback.

On any other database the stores take their general path, in a transaction.
"""
