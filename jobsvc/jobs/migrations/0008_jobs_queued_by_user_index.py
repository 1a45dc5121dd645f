"""An index on published, unstarted jobs by user, newest first, for work stealing.

Built CONCURRENTLY: the jobs table of a running deployment is large, and a plain CREATE
INDEX would block every create and status change until it is done.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0007_bulk_decision"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status="queued"),
                fields=["user_id", "-id"],
                name="jobs_queued_by_user_idx",
            ),
        ),
    ]
