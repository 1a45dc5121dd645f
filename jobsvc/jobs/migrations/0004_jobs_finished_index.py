"""An index on finished jobs by finish time, for the scheduler's retention purge.

Built CONCURRENTLY: the jobs table of a running deployment is large, and a plain CREATE
INDEX would block every create and status change until it is done.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0003_idempotency_key_created_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status__in=["succeeded", "failed", "cancelled"]),
                fields=["finished_at"],
                name="jobs_finished_idx",
            ),
        ),
    ]
