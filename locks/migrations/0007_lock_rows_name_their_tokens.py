from django.db import migrations, models

# Fill the new columns of existing lock rows from their tokens, then require them.
FILL = """
UPDATE locks_tokenlock l SET wallet = t.wallet, currency = t.currency, quantity = t.quantity
FROM tokens_token t WHERE t.id = l.token_id
"""


class Migration(migrations.Migration):

    dependencies = [
        ('locks', '0006_admin_housekeeping_buckets'),
    ]

    operations = [
        migrations.AddField(
            model_name='tokenlock',
            name='wallet',
            field=models.CharField(max_length=128, null=True),
        ),
        migrations.AddField(
            model_name='tokenlock',
            name='currency',
            field=models.CharField(max_length=32, null=True),
        ),
        migrations.AddField(
            model_name='tokenlock',
            name='quantity',
            field=models.DecimalField(decimal_places=0, max_digits=20, null=True),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name='tokenlock',
            name='wallet',
            field=models.CharField(max_length=128),
        ),
        migrations.AlterField(
            model_name='tokenlock',
            name='currency',
            field=models.CharField(max_length=32),
        ),
        migrations.AlterField(
            model_name='tokenlock',
            name='quantity',
            field=models.DecimalField(decimal_places=0, max_digits=20),
        ),
    ]
