from django.db import migrations

# Keep the lock table's pages when vacuum empties them. A quiet spell releases or spends every
# lock; autovacuum then removes the dead rows and, by default, cuts the emptied pages off the end
# of the table, leaving it at no rows and no pages. The hot statements are planned again after
# that vacuum, for a table of no pages, where a sequential scan costs nothing: each token's lock
# is then looked for by reading the whole table instead of by key, and the plan is kept as the
# next burst fills the table, until the next analysis (migration 0009; up to a naptime later).
# A table that keeps its pages costs its pages to scan, and the key lookup stays the cheaper
# plan. Not truncating also spares the hot path the short exclusive lock a truncation takes.
# The pages are reused by the next locks; VACUUM FULL gives them back to the system.
# Partitioned by wallet (migration 0012), the table holds no pages of its own: its partitions do.
EACH = """
DO $each$
DECLARE
    part regclass;
BEGIN
    FOR part IN
        SELECT oid::regclass FROM pg_class
        WHERE oid = 'locks_tokenlock'::regclass AND relkind = 'r'
        UNION ALL
        SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'locks_tokenlock'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s {change}', part);
    END LOOP;
END
$each$
"""
KEEP = EACH.format(change="SET (vacuum_truncate = off)")
RESET = EACH.format(change="RESET (vacuum_truncate)")


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0014_take_tokens'),
    ]

    operations = [
        migrations.RunSQL(KEEP, RESET),
    ]
