from django.db import migrations

# The lock table churns (a row per lock, gone with its release or spend) and its size swings
# from a handful of rows to many thousands. Plans of the hot statements are kept per connection
# until the table is analysed again, and a plan made while it was nearly empty walks the whole
# table where it should look a token's lock up by key. Analyse it after every few hundred
# changes instead of after 10% of it changed; vacuum it likewise, so dead rows go quickly.
TUNE = """
ALTER TABLE locks_tokenlock SET (
    autovacuum_analyze_scale_factor = 0.0, autovacuum_analyze_threshold = 500,
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000)
"""
UNTUNE = """
ALTER TABLE locks_tokenlock RESET (
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)
"""


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0008_waiters'),
    ]

    operations = [
        migrations.RunSQL(TUNE, UNTUNE),
    ]
