"""A key's turn (``sherdlock.turns``) on PostgreSQL: a session-level advisory lock per key.

A selection that waited long for held funds holds its key's turn while it polls; TAKE_TURN
queues for it (in the order asked), AWAIT_TURN waits until nobody holds or asks for it, END_TURN
gives it back. Each wait lasts at most as long as the lock_timeout local to its statement. The
key hashes the wallet and currency under a class of this project's own (two keys sharing a hash
only wait for each other).
"""

from __future__ import annotations

TURN_KEY = "1936221291, hashtext(%(wallet)s::text || '/' || %(currency)s::text)"
WAITING_AT_MOST = "waiting AS MATERIALIZED (SELECT set_config('lock_timeout', %(wait)s, true))"
TAKE_TURN = f"WITH {WAITING_AT_MOST}\nSELECT pg_advisory_lock({TURN_KEY}) FROM waiting"
AWAIT_TURN = f"""WITH {WAITING_AT_MOST},
ended AS MATERIALIZED (SELECT pg_advisory_lock_shared({TURN_KEY}) FROM waiting)
SELECT pg_advisory_unlock_shared({TURN_KEY}) FROM ended"""
END_TURN = f"SELECT pg_advisory_unlock({TURN_KEY})"
