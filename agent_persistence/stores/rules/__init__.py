"""The backend-neutral rules of the stores, one module per concern: input cleaning, the values stores trade in, event builders.

Both families apply the same rules, so bad input gets the same domain error
from either: the ORM stores (:mod:`agent_persistence.stores`) and the in-memory
ones (:mod:`agent_persistence.stores.memory`) import them from here, and
nothing here reads or writes a table. The ORM modules re-export what moved, so
``from agent_persistence.stores.runs import clean_run_id`` still works.
"""
