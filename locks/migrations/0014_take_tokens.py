import importlib

from django.db import migrations

# Take a contested wallet's batch for a lock insert as of now, a covering run at a time: the fetch
# of a contested wallet (locks.sql.batches, TAKEN_AS_OF_NOW) hands its batch over in its order, and
# this takes tokens from the front until what it took covers the need. It replaces
# locks_take_token (0013), called once per token: three queries per token, paid a hundred times
# over by a selection that gathers many small tokens.
#
# Each round looks at the shortest run of the next tokens that covers what is still missing if
# all of them are free, and takes that run with two queries, each on a snapshot of its own (a
# VOLATILE function in READ COMMITTED), as locks_take_token did for one token:
# - the run's rows that are unspent and named by no live lock in a new snapshot, row-locked
#   unless another transaction is taking them right now (SKIP LOCKED: every lock insert holds its
#   token's row until it commits);
# - of those, the ones still named by no live lock, looked at again under the row lock, which
#   catches a lock committed between the first look and the row lock.
# A token that either look leaves out is passed over, and the next round covers what it would
# have. With no contention that is one round for the whole need, as the plain fetch's covering
# prefix; a token is never taken after the need is covered. Rows come back in batch order, one per
# token looked at, `took` true for each token whose row this transaction now holds, unspent and
# named by no live lock.
#
# ROWS 8 tells the planner what a call returns: about a covering run (the default, 1000, made the
# calling statement read every unspent token of the wallet to find the few it took). Its queries
# run on generic plans, made once per session: left to the plan cache they were planned afresh
# at every call (a slice of ids costs differently each time), which made the contested fetch
# nearly twice as slow as the per-token calls it replaces. Both plans find rows by key.
#
# The lock probe is the plain fetch's (locks.sql.locking, FREE): by key, once per row (OFFSET 0
# keeps it a per-row subplan) with the lease test where no index can answer it.
TAKE = """
CREATE FUNCTION locks_take_tokens(ids bigint[], amounts numeric[], need numeric, owner text,
                                  unit text)
RETURNS TABLE (token bigint, took boolean)
LANGUAGE plpgsql VOLATILE ROWS 8 SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    size int := coalesce(array_length(ids, 1), 0);
    first int := 1;
    last int;
    reach numeric;
    total numeric := 0;
    got bigint[];
BEGIN
    WHILE total < need AND first <= size LOOP
        last := first;
        reach := amounts[first];
        WHILE reach < need - total AND last < size LOOP
            last := last + 1;
            reach := reach + amounts[last];
        END LOOP;
        SELECT coalesce(array_agg(r.id), '{}') INTO got FROM (
            SELECT t.id FROM tokens_token t
            WHERE t.id = ANY (ids[first:last]) AND t.wallet = owner AND t.currency = unit
              AND t.spent_at IS NULL
              AND NOT EXISTS (SELECT FROM locks_tokenlock l
                              WHERE l.token_id = t.id AND l.wallet = owner
                                AND (l.expires_at > now()) IS TRUE
                              OFFSET 0)
            FOR UPDATE OF t SKIP LOCKED) r;
        IF got <> '{}' THEN
            SELECT coalesce(array_agg(g.id), '{}') INTO got FROM unnest(got) AS g(id)
            WHERE NOT EXISTS (SELECT FROM locks_tokenlock l
                              WHERE l.token_id = g.id AND l.wallet = owner
                                AND (l.expires_at > now()) IS TRUE
                              OFFSET 0);
        END IF;
        FOR i IN first..last LOOP
            token := ids[i];
            took := token = ANY (got);
            IF took THEN
                total := total + amounts[i];
            END IF;
            RETURN NEXT;
        END LOOP;
        first := last + 1;
    END LOOP;
END
$$
"""
DROP = "DROP FUNCTION locks_take_tokens(bigint[], numeric[], numeric, text, text)"

_ONE_AT_A_TIME = importlib.import_module("locks.migrations.0013_take_token")


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0013_take_token'),
    ]

    operations = [
        migrations.RunSQL(TAKE, DROP),
        migrations.RunSQL(_ONE_AT_A_TIME.DROP, _ONE_AT_A_TIME.TAKE),
    ]
