"""The partition a job's last dispatch went to (scheduler_worker.partition_deal).

A nullable column without a default: PostgreSQL adds it without rewriting the table. Rows
dispatched by a scheduler of the previous release have none; they count as in flight on
no partition until they finish.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0010_job_attempts"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="dispatch_partition",
            field=models.SmallIntegerField(blank=True, null=True),
        ),
    ]
