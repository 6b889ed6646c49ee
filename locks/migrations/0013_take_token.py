from django.db import migrations

# Take one token for a lock insert as of now, not as of the calling statement's snapshot: the
# fetch of a contested wallet (locks.sql.batches, TAKEN_AS_OF_NOW) walks its batch through this,
# one token at a time, until what it took covers the need. A statement's own reads see the
# lock table as it was when the statement began; on a wallet that many replicas fight over,
# a lock committed since then was not seen, its token's row lock was already gone (so SKIP
# LOCKED did not skip it) and the insert found the lock and lost the token. Here each query
# runs on a snapshot of its own (a VOLATILE function in READ COMMITTED): a token seen locked
# is left without touching its row; one being taken right now is skipped; one whose lock was
# committed between the look and the row lock is caught by the second look, which runs under
# the row lock (every lock insert holds its token's row until it commits). True means this
# transaction now holds the unspent token's row and no live lock names the token.
TAKE = """
CREATE FUNCTION locks_take_token(token bigint, owner text, unit text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF EXISTS (SELECT FROM locks_tokenlock l
               WHERE l.token_id = token AND l.wallet = owner
                 AND (l.expires_at > now()) IS TRUE) THEN
        RETURN false;
    END IF;
    PERFORM FROM tokens_token t
    WHERE t.id = token AND t.wallet = owner AND t.currency = unit AND t.spent_at IS NULL
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (SELECT FROM locks_tokenlock l
                       WHERE l.token_id = token AND l.wallet = owner
                         AND (l.expires_at > now()) IS TRUE);
END
$$
"""
DROP = "DROP FUNCTION locks_take_token(bigint, text, text)"


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0012_wallet_keys'),
    ]

    operations = [
        migrations.RunSQL(TAKE, DROP),
    ]
