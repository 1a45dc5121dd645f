"""Shards are plain database settings, so they can live on separate PostgreSQL servers.

``make test`` puts shards 0-1 on one server and shards 2-3 on another.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.jobs.services import jobs_create
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.shards import shard_alias, shard_ids

pytestmark = pytest.mark.django_db(databases="__all__")


def _server_of(alias: str) -> tuple[str, str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT inet_server_port()::text, current_setting('data_directory')")
        return cursor.fetchone()


def test_shards_are_spread_over_more_than_one_server():
    servers = {_server_of(shard_alias(shard_id)) for shard_id in shard_ids()}
    if len(servers) < 2:
        pytest.skip("this run's stack has every shard on one server (make test uses two)")
    assert len(servers) >= 2


def test_jobs_on_every_server_are_created_and_read_back(make_user, monkeypatch):
    user = make_user()
    created = {}
    for shard_id in shard_ids():
        monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda s=shard_id: s)
        spec = JobSpec(
            message=f"on shard {shard_id}",
            execute_at=timezone.now() + timedelta(hours=1),
            max_attempts=3,
            timeout_seconds=30.0,
        )
        [row] = jobs_create(user_id=user.pk, specs=[spec], is_bulk=False).jobs
        created[shard_id] = row.id
    for shard_id, job_id in created.items():
        job = Job.objects.using(shard_alias(shard_id)).get(pk=job_id)
        assert (job.shard_id, job.message) == (shard_id, f"on shard {shard_id}")
        for other in set(shard_ids()) - {shard_id}:
            assert not Job.objects.using(shard_alias(other)).filter(pk=job_id).exists()
