"""Drop the index on published, unstarted jobs by user: nothing reads it any more, and every
dispatch and claim paid to maintain it. Dropped CONCURRENTLY, so creates and status
changes go on meanwhile."""

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0008_jobs_queued_by_user_index"),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="job", name="jobs_queued_by_user_idx"),
    ]
