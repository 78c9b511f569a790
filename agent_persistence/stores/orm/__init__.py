"""The Django ORM store family: the store modules of :mod:`agent_persistence.stores`, named as one family.

``AGENT_PERSISTENCE["STORES"] = "agent_persistence.stores.orm.family"`` (the
default) selects it; :mod:`.family` builds it. The stores themselves stay
where they are (``agent_persistence.stores.conversations`` ...).
"""
