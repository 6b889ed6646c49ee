"""The lock app's own SQL, as named and commented statements, one module per concern.

- ``locking``: what the selector's store runs to lock, unlock and read supply (the hot path);
- ``batches``: which tokens a locking statement tries (given ids, or a fetch's batch);
- ``turns``: a key's turn (``sherdlock.turns``), a session advisory lock per wallet and currency;
- ``lifecycle``: spend, release, extend and read a recorded selection, one statement each;
- ``waiting``: the queue of requests waiting for held funds, and the ``woken`` CTE that wakes it;
- ``housekeeping``: the guard and the bounded deletes of a housekeeping pass;
- ``notifications``: the triggers that publish changes to replica caches;
- ``dashboard`` and ``wallet``: what the operators' pages read in one statement each;
- ``seeding``: bulk locks for ``manage.py seed_locks``.

Statements are composed from named fragments with ``str.format`` only, once, at import (the
rule every app's SQL follows; see ``common.sql``). Everything else goes through the ORM.
"""
