"""Drop the partial index on spent_by: nothing looks tokens up by their spender.

Every spend added one entry to it per input. The reads that named spent_by (the admin's "spent"
filter, its search by wallet) read spent_at or the wallet index instead, and which tokens a
spend took is recorded on its selection (``token_ids``, ``output_ids``).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tokens', '0006_unspent_by_amount'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='token',
            name='token_spent_by',
        ),
    ]
