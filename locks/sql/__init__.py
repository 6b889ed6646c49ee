"""The application's own SQL, as named and commented statements, one module per concern.

- ``locking``: what the selector's store runs to lock, unlock and read supply (the hot path);
- ``lifecycle``: spend, release, extend and read a recorded selection, one statement each.

Everything else goes through the ORM.
"""
