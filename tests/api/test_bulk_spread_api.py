"""A large bulk request is dealt over every shard and created all or none.

These tests commit (``transaction=True``), as the API does: inside a test's transaction a
bulk goes to one shard (``jobsvc.jobs.spread.inside_a_transaction``).
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.conf import settings as django_settings
from django.db import connections

from jobsvc.jobs import spread
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import (
    shard_alias,
    shard_aliases,
    shard_count,
    shard_for_idempotency_key,
)
from tests.api.support import error_of, job_body, job_count, post_jobs, stored_job
from tests.conftest import prepared_bulk_transactions
from tests.e2e.faults import terminate_connection
from tools.devstack.ports import free_port

pytestmark = [
    pytest.mark.django_db(databases="__all__", transaction=True),
    pytest.mark.usefixtures("no_prepared_bulk_transaction_left"),
]

SPREAD_MIN_JOBS = django_settings.BULK_SPREAD_MIN_JOBS


def prepared_transactions() -> list[str]:
    """Prepared transactions of bulk requests on any shard."""
    return [gid for alias in shard_aliases() for gid in prepared_bulk_transactions(alias)]


def test_a_large_bulk_is_dealt_over_every_shard(user_client, user):
    bodies = [job_body(f"job {n}", minutes=n + 1) for n in range(100 * shard_count())]

    response = post_jobs(user_client, bodies)

    assert response.status_code == 201
    jobs = response.json()["data"]
    assert [job["message"] for job in jobs] == [body["message"] for body in bodies]
    assert Counter(job["shard_id"] for job in jobs) == dict.fromkeys(range(shard_count()), 100)
    for job in jobs[:: len(jobs) // 20]:
        assert shard_of(job["id"]) == job["shard_id"]
        assert stored_job(job["id"]).message == job["message"]
    assert job_count(user.pk) == len(bodies)
    assert prepared_transactions() == []


def test_a_bulk_below_the_threshold_stays_on_one_shard(user_client):
    jobs = post_jobs(user_client, [job_body()] * (SPREAD_MIN_JOBS - 1)).json()["data"]

    assert len({job["shard_id"] for job in jobs}) == 1


def test_a_spread_bulk_retried_with_its_key_replays_the_same_list(user_client, user):
    bodies = [job_body(f"job {n}") for n in range(SPREAD_MIN_JOBS)]

    first = post_jobs(user_client, bodies, key="spread-1")
    second = post_jobs(user_client, bodies, key="spread-1")

    assert first.status_code == 201
    assert second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    first_ids = [job["id"] for job in first.json()["data"]]
    assert [job["id"] for job in second.json()["data"]] == first_ids
    assert len({shard_of(job_id) for job_id in first_ids}) == shard_count()
    assert job_count(user.pk) == SPREAD_MIN_JOBS


def test_a_shard_down_in_the_middle_creates_nothing(user_client, user, monkeypatch):
    # the key's shard coordinates and inserts first; then each other shard is prepared
    # in turn, and the last of them is down: the prepared ones must be rolled back
    key = "spread-down"
    coordinator = shard_for_idempotency_key(user_id=user.pk, key=key)
    down = max(shard_id for shard_id in range(shard_count()) if shard_id != coordinator)
    connection = connections[f"shard_{down}"]
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "PORT", str(free_port()))

    response = post_jobs(user_client, [job_body()] * SPREAD_MIN_JOBS, key=key)

    error_of(response, 503, "database_unavailable")
    connection.close()
    monkeypatch.undo()
    assert job_count(user.pk) == 0
    assert prepared_transactions() == []
    # the key was not taken: the retry the 503 asks for creates the jobs, once
    assert post_jobs(user_client, [job_body()] * SPREAD_MIN_JOBS, key=key).status_code == 201
    assert job_count(user.pk) == SPREAD_MIN_JOBS


def test_a_keyed_bulk_that_lost_a_shard_after_its_commit_point_replays_every_job(
    user_client, user, monkeypatch
):
    # The coordinator committed, then the connection to one other shard was lost before
    # COMMIT PREPARED: that shard's share is created (the decision says so) but still
    # prepared, invisible. The retry the client makes must list every job, and find them.
    key = "spread-cut"
    coordinator = shard_for_idempotency_key(user_id=user.pk, key=key)
    lost = next(shard_id for shard_id in range(shard_count()) if shard_id != coordinator)
    finish = spread._finish

    def lose_the_shard_first(alias, gid, *, commit):
        if alias == shard_alias(lost) and commit:
            terminate_connection(alias)
        return finish(alias, gid, commit=commit)

    monkeypatch.setattr(spread, "_finish", lose_the_shard_first)
    bodies = [job_body(f"job {n}") for n in range(100 * shard_count())]

    first = post_jobs(user_client, bodies, key=key)
    monkeypatch.undo()
    # a served request drops a broken connection when it ends; the test client does not
    connections[shard_alias(lost)].close()

    assert first.status_code == 201
    first_ids = [job["id"] for job in first.json()["data"]]
    assert job_count(user.pk) == len(bodies) - 100  # the lost shard's hundred: prepared

    second = post_jobs(user_client, bodies, key=key)

    assert second.status_code == 201
    assert [job["id"] for job in second.json()["data"]] == first_ids
    assert job_count(user.pk) == len(bodies)
    assert prepared_transactions() == []


def test_spreading_can_be_turned_off(user_client, settings):
    settings.BULK_SPREAD_MIN_JOBS = 0

    jobs = post_jobs(user_client, [job_body()] * 100 * shard_count()).json()["data"]

    assert len({job["shard_id"] for job in jobs}) == 1
    assert prepared_transactions() == []
