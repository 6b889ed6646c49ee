"""Key tokens by wallet, the partition (and distribution) key; claim transaction ids.

The primary key becomes (id, wallet) and the identity's unique key names the wallet too; the
identity stays unique across wallets through the transaction-id claims (``TxClaim``), filled
here from the tokens already issued. With ``SHERDLOCK_PARTITIONS`` above 1 the table is then
partitioned by hash of wallet (``common.partitioning``); the number is read now, once.
"""

from django.db import migrations, models

from common import partitioning

# Django keeps ``id`` as the model's pk; the table's key names the wallet as well (id first:
# lookups by id alone, the admin's and the ORM's, still use it).
KEY = [
    "ALTER TABLE tokens_token DROP CONSTRAINT tokens_token_pkey",
    "ALTER TABLE tokens_token ADD CONSTRAINT tokens_token_pkey PRIMARY KEY (id, wallet)",
]
KEY_BACK = [
    "ALTER TABLE tokens_token DROP CONSTRAINT tokens_token_pkey",
    "ALTER TABLE tokens_token ADD CONSTRAINT tokens_token_pkey PRIMARY KEY (id)",
]
CLAIM_ISSUED = """
INSERT INTO tokens_txclaim (namespace, tx_id)
SELECT DISTINCT namespace, tx_id FROM tokens_token
ON CONFLICT (namespace, tx_id) DO NOTHING
"""


def partitions() -> int:
    from common.knobs import knobs

    return knobs().partitions


def partition(apps, schema_editor):
    if partitions() > 1:
        schema_editor.connection.cursor().execute(
            partitioning.partition("tokens_token", "id", partitions())
        )


def unpartition(apps, schema_editor):
    schema_editor.connection.cursor().execute(partitioning.unpartition("tokens_token", "id"))


class Migration(migrations.Migration):

    # After the lock table stopped referencing the token id alone (a foreign key needs a
    # unique key on exactly its columns).
    dependencies = [
        ('tokens', '0004_currency_supply'),
        ('locks', '0011_selection_legs'),
    ]

    operations = [
        migrations.CreateModel(
            name='TxClaim',
            fields=[
                ('pk', models.CompositePrimaryKey('namespace', 'tx_id', blank=True, editable=False, primary_key=True, serialize=False)),
                ('namespace', models.CharField(blank=True, max_length=64)),
                ('tx_id', models.CharField(max_length=128)),
                ('wallet', models.CharField(blank=True, max_length=128, null=True)),
            ],
        ),
        migrations.RemoveConstraint(
            model_name='token',
            name='token_identity_unique',
        ),
        migrations.AddConstraint(
            model_name='token',
            constraint=models.UniqueConstraint(fields=('namespace', 'tx_id', 'index', 'wallet'), name='token_identity_unique'),
        ),
        migrations.RunSQL(CLAIM_ISSUED, migrations.RunSQL.noop),
        migrations.RunSQL(KEY, KEY_BACK),
        migrations.RunPython(partition, unpartition),
    ]
