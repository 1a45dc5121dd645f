"""Decisions of bulk requests spread over several shards (two-phase commit, presumed abort).

A new, empty table on every shard: nothing to rewrite.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0006_shard_lease_last_round_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="BulkDecision",
            fields=[
                ("batch", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("committed", models.BooleanField()),
                ("decided_at", models.DateTimeField()),
            ],
            options={
                "db_table": "jobs_bulk_decision",
                "indexes": [models.Index(fields=["decided_at"], name="jobs_bulk_decided_idx")],
            },
        ),
    ]
