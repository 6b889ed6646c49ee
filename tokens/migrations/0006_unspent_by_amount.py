"""Index the unspent tokens of a wallet by quantity: fetches in quantity order walk it.

The strategies smallest_first and fewest_tokens, a random selection's largest-first fetch after
a short batch, and the windows of exact and consolidate read a wallet's free tokens in quantity
order. Without an index on it they read and sorted every free token of the wallet, so their cost
grew with the wallet (docs/performance.md, "The strategies' statements").
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tokens', '0005_wallet_keys'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='token',
            index=models.Index(condition=models.Q(('spent_at__isnull', True)), fields=['wallet', 'currency', 'quantity', 'id'], name='token_unspent_by_amount'),
        ),
    ]
