"""A scheduler that cannot reach one of its shards says so, and gives the shard up.

Two schedulers share the four shards; one of them is configured with a wrong address for
shard 3 (a fault local to it: the other reaches the shard fine). Its /readyz turns 503
naming the shard, it steps back, and the other scheduler dispatches the shard's jobs.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from coordination.assignment import assign_shards
from jobsvc.jobs.models import ShardLease
from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.e2e.health import readyz
from tests.e2e.jobs import create, due_in, spec, status_counts
from tests.waiting import wait_until
from tools.devstack.ports import free_port

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

UNHEALTHY_AFTER = 2.0  # seconds of failed rounds before /readyz answers 503


def test_a_scheduler_that_cannot_reach_a_shard_turns_unready_and_hands_it_over(
    make_user, start_worker, monkeypatch
):
    shard = max(shard_ids())
    names = ["scheduler-a", "scheduler-b"]
    [cut_off] = [
        name for name, shards in assign_shards(names, shard_ids()).items() if shard in shards
    ]
    [healthy] = [name for name in names if name != cut_off]
    urls = list(settings.SHARD_DB_URLS)
    urls[shard] = f"postgresql://jobsvc@127.0.0.1:{free_port()}/nowhere"  # nothing listens
    port = free_port()
    env = {
        "JOBSVC_SCHEDULER_UNHEALTHY_AFTER_SECONDS": str(UNHEALTHY_AFTER),
        "JOBSVC_SCHEDULER_STEP_BACK_SECONDS": "600",  # stays out for the rest of the test
    }
    start_worker(
        "scheduler",
        cut_off,
        env={
            **env,
            "JOBSVC_SHARD_DB_URLS": ",".join(urls),
            "JOBSVC_SCHEDULER_METRICS_PORT": str(port),
        },
    )
    start_worker("scheduler", healthy, env=env)
    start_worker("executor", "executor-a")
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: shard)
    user = make_user()
    ids = create(user.pk, [spec(due=due_in(0)) for _ in range(20)])

    wait_until(lambda: readyz(port)[0] == 503, timeout=30, what=f"{cut_off} reports itself unready")
    _, body = readyz(port)
    assert body["ready"] is False
    assert any(
        f"shard {shard}" in problem or "stepped back" in problem for problem in body["problems"]
    )

    wait_until(
        lambda: status_counts()["succeeded"] == len(ids),
        timeout=60,
        what="the other scheduler dispatches the shard's jobs",
    )
    lease = ShardLease.objects.using(shard_alias(shard)).get(pk=shard)
    assert lease.owner == healthy
    assert readyz(port)[0] == 503  # still out: it stepped back, and says so
