"""Jobs get a priority, and the due index leads with (user_id, priority).

The column has a constant default, so adding it rewrites nothing (PostgreSQL 11+); the
database keeps that default, so API processes of the previous release still insert.
The new index is built CONCURRENTLY under a temporary name, the old one dropped
CONCURRENTLY, and the new one takes the old name: creates and status changes are never
blocked for the time a build takes. Between the drop and the deploy of the schedulers
that read the index by priority, an old scheduler's due-user query cannot use it and
sorts instead: migrate, then deploy the schedulers promptly.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

TEMPORARY_NAME = "jobs_due_by_user_prio_idx"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0004_jobs_finished_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="priority",
            field=models.SmallIntegerField(db_default=5, default=5),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status="scheduled"),
                fields=["user_id", "priority", "due_at", "id"],
                name=TEMPORARY_NAME,
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="jobs_due_by_user_idx"),
        migrations.RenameIndex(
            model_name="job", new_name="jobs_due_by_user_idx", old_name=TEMPORARY_NAME
        ),
    ]
