"""Apply migrations to the control database and to every shard database."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand

from jobsvc.sharding.shards import shard_aliases


class Command(BaseCommand):
    help = "Apply migrations to the control database and every shard (idempotent)."

    def handle(self, *args, **options) -> None:
        verbosity = options["verbosity"]
        for alias in ["default", *shard_aliases()]:
            if verbosity:
                self.stdout.write(f"migrating {alias}")
            call_command(
                "migrate", database=alias, interactive=False, verbosity=max(0, verbosity - 1)
            )
