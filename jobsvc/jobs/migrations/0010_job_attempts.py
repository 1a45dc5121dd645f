"""Every finished attempt of a job (its delivery log), beside the job on its shard.

A new, empty table on every shard: nothing to rewrite. Its primary key (job_id, attempt)
is its only index: the executor's and sweeper's inserts pay for one index entry each, and
a job's attempts, and the purge's deletes, are found through it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0009_drop_jobs_queued_by_user_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobAttempt",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "job_id",
                        "attempt",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("job_id", models.CharField(db_collation="C", max_length=27)),
                ("attempt", models.IntegerField()),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField()),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("succeeded", "Succeeded"),
                            ("retried", "Failed, retried"),
                            ("failed", "Failed for good"),
                            ("timed_out", "Timed out"),
                            ("lost", "Lost"),
                        ],
                        max_length=16,
                    ),
                ),
                ("error", models.TextField(blank=True, db_default="")),
                ("http_status", models.SmallIntegerField(blank=True, null=True)),
                ("response_excerpt", models.TextField(blank=True, db_default="")),
            ],
            options={
                "db_table": "jobs_attempt",
            },
        ),
    ]
