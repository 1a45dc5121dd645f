"""A shard that cannot be reached answers 503 with Retry-After, never a 500."""

from __future__ import annotations

import pytest
from django.db import connections

from jobsvc.sharding.ids import new_job_id
from tests.api.support import JOBS_URL, error_of, job_body, job_url, post_jobs
from tools.devstack.ports import free_port

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


@pytest.fixture
def shard_0_unreachable(monkeypatch):
    """Shard 0's server refuses connections: nothing listens where its settings point."""
    connection = connections["shard_0"]
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "PORT", str(free_port()))
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: 0)
    yield
    connection.close()  # monkeypatch then restores the real port


def test_a_create_on_an_unreachable_shard_is_a_503_to_retry(user_client, shard_0_unreachable):
    response = post_jobs(user_client, job_body())

    error_of(response, 503, "database_unavailable")
    assert response["Retry-After"] == "1"
    assert "Idempotency-Key" in response.json()["error"]["message"]


def test_reading_a_job_on_an_unreachable_shard_is_a_503(user_client, shard_0_unreachable):
    error_of(user_client.get(job_url(new_job_id(shard_id=0))), 503, "database_unavailable")


def test_the_shard_serves_again_once_reachable(user_client, shard_0_unreachable, monkeypatch):
    error_of(post_jobs(user_client, job_body()), 503, "database_unavailable")
    monkeypatch.undo()
    connections["shard_0"].close()

    response = post_jobs(user_client, job_body())

    assert response.status_code == 201, response.json()
    assert user_client.get(JOBS_URL).status_code == 200
