import importlib

from django.db import migrations

# A contested wallet's fetch locks a covering prefix of its batch, as every fetch does
# (locks.sql.batches.PREFIX), instead of handing its batch to locks_take_tokens (0014): its
# replicas each lock a few tokens of their own shuffle of the batch, so they seldom pick the
# same one, and a fetch that loses one refetches. The function is no longer called.

_TAKE_TOKENS = importlib.import_module("locks.migrations.0014_take_tokens")


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0015_totals_of_the_most_tokens'),
    ]

    operations = [
        migrations.RunSQL(_TAKE_TOKENS.DROP, _TAKE_TOKENS.TAKE),
    ]
