"""Key lock rows and selections by wallet, the partition (and distribution) key.

Lock rows: primary key (token_id, wallet), the lock-by-insert's conflict target. Selections:
primary key (id, wallet), unique (namespace, tx_id, wallet) and (fence, wallet); a selection's
transaction id stays unique across wallets through its claim (``tokens.TxClaim``), filled here
from the selections already recorded (naming their wallets). With ``SHERDLOCK_PARTITIONS``
above 1 both tables are then partitioned by hash of wallet (``common.partitioning``).
"""

import locks.models
from django.db import migrations, models

from common import partitioning

KEY = [
    "ALTER TABLE locks_tokenlock DROP CONSTRAINT locks_tokenlock_pkey",
    "ALTER TABLE locks_tokenlock ADD CONSTRAINT locks_tokenlock_pkey "
    "PRIMARY KEY (token_id, wallet)",
    "ALTER TABLE locks_selection DROP CONSTRAINT locks_selection_pkey",
    "ALTER TABLE locks_selection ADD CONSTRAINT locks_selection_pkey PRIMARY KEY (id, wallet)",
]
KEY_BACK = [
    "ALTER TABLE locks_tokenlock DROP CONSTRAINT locks_tokenlock_pkey",
    "ALTER TABLE locks_tokenlock ADD CONSTRAINT locks_tokenlock_pkey PRIMARY KEY (token_id)",
    "ALTER TABLE locks_selection DROP CONSTRAINT locks_selection_pkey",
    "ALTER TABLE locks_selection ADD CONSTRAINT locks_selection_pkey PRIMARY KEY (id)",
]
CLAIM_SELECTED = """
INSERT INTO tokens_txclaim AS c (namespace, tx_id, wallet)
SELECT namespace, tx_id, wallet FROM locks_selection
ON CONFLICT (namespace, tx_id) DO UPDATE SET wallet = EXCLUDED.wallet
"""


def partition(apps, schema_editor):
    from common.knobs import knobs

    if knobs().partitions > 1:
        with schema_editor.connection.cursor() as cursor:
            for table in ("locks_tokenlock", "locks_selection"):
                column = dict(partitioning.TABLES)[table]
                cursor.execute(partitioning.partition(table, column, knobs().partitions))


def unpartition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table in ("locks_tokenlock", "locks_selection"):
            cursor.execute(partitioning.unpartition(table, dict(partitioning.TABLES)[table]))


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0011_selection_legs'),
        ('tokens', '0005_wallet_keys'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='selection',
            name='selection_tx_id_unique',
        ),
        migrations.AlterField(
            model_name='selection',
            name='fence',
            field=models.BigIntegerField(db_default=locks.models.NextFence()),
        ),
        migrations.AddConstraint(
            model_name='selection',
            constraint=models.UniqueConstraint(fields=('namespace', 'tx_id', 'wallet'), name='selection_tx_id_unique'),
        ),
        migrations.AddConstraint(
            model_name='selection',
            constraint=models.UniqueConstraint(fields=('fence', 'wallet'), name='selection_fence_unique'),
        ),
        migrations.RunSQL(CLAIM_SELECTED, migrations.RunSQL.noop),
        migrations.RunSQL(KEY, KEY_BACK),
        migrations.RunPython(partition, unpartition),
    ]
