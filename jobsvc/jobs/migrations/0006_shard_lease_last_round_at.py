"""When the shard's owner last ran a dispatch round, for the admin's cluster page.

A nullable column without a default: PostgreSQL adds it without rewriting the table
(which has one row per shard anyway).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0005_job_priority"),
    ]

    operations = [
        migrations.AddField(
            model_name="shardlease",
            name="last_round_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
