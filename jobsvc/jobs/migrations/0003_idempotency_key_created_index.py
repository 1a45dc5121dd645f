"""An index on Idempotency-Key age, for the scheduler's purge of expired keys.

Built CONCURRENTLY: the keys table of a running deployment may be large (keys were never
deleted before this), and a plain CREATE INDEX would block creates with a key meanwhile.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0002_drop_redundant_id_like_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="idempotencykey",
            index=models.Index(fields=["created_at"], name="jobs_idempotency_created_idx"),
        ),
    ]
