"""Apply migrations to the control database and to every shard database."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from jobsvc.sharding.shards import shard_aliases


class Command(BaseCommand):
    help = "Apply migrations to the control database and every shard (idempotent)."

    def handle(self, *args, **options) -> None:
        verbosity = options["verbosity"]
        for alias in ["default", *shard_aliases()]:
            if verbosity:
                self.stdout.write(f"migrating {alias}")
            with connections[alias].cursor() as cursor:
                # Index builds on a large table outlast JOBSVC_DB_STATEMENT_TIMEOUT_SECONDS,
                # and a migration may work between its statements for longer than
                # JOBSVC_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS: the limits are for
                # requests and workers, not for migrations.
                cursor.execute("SET statement_timeout = 0")
                cursor.execute("SET idle_in_transaction_session_timeout = 0")
            call_command(
                "migrate", database=alias, interactive=False, verbosity=max(0, verbosity - 1)
            )
