"""A scheduler that cannot reach one of its shards says so, and gives the shard up; it
joins again once the shard answers it.

Two schedulers share the four shards; one of them has its own address for shard 3 (a
fault local to it: the other reaches the shard fine). Its /readyz turns 503 naming the
shard, it steps back, and the other scheduler dispatches the shard's jobs.
"""

from __future__ import annotations

import pytest

from coordination.assignment import assign_shards
from jobsvc.jobs.models import ShardLease
from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.e2e.faults import shard_nowhere, shard_through
from tests.e2e.health import readyz
from tests.e2e.jobs import create, due_in, spec, status_counts
from tests.waiting import wait_until
from tools.devstack.ports import free_port

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

UNHEALTHY_AFTER = 2.0  # seconds of failed rounds before /readyz answers 503
ENV = {
    "JOBSVC_SCHEDULER_UNHEALTHY_AFTER_SECONDS": str(UNHEALTHY_AFTER),
    # Out for the rest of a test, unless the shard answers again.
    "JOBSVC_SCHEDULER_STEP_BACK_SECONDS": "600",
}


def _names(shard: int) -> tuple[str, str]:
    """Two schedulers' names: the one ZooKeeper gives ``shard`` to, and the other."""
    names = ["scheduler-a", "scheduler-b"]
    [owner] = [
        name for name, shards in assign_shards(names, shard_ids()).items() if shard in shards
    ]
    [other] = [name for name in names if name != owner]
    return owner, other


def _two_schedulers(start_worker, shard: int, shard_env: dict[str, str]):
    """Two schedulers and an executor; the scheduler ZooKeeper gives ``shard`` to has
    ``shard_env`` (its own address of the shard) and serves /readyz on ``port``.
    Returns (its name, the other's name, port, the other's process)."""
    cut_off, healthy = _names(shard)
    port = free_port()
    start_worker(
        "scheduler",
        cut_off,
        env={**ENV, **shard_env, "JOBSVC_SCHEDULER_METRICS_PORT": str(port)},
    )
    other = start_worker("scheduler", healthy, env=ENV)
    start_worker("executor", "executor-a")
    return cut_off, healthy, port, other


def _owner(shard: int) -> str | None:
    """Who took the shard's lease last (None: nobody yet)."""
    leases = ShardLease.objects.using(shard_alias(shard)).filter(pk=shard)
    return leases.values_list("owner", flat=True).first()


def test_a_scheduler_that_cannot_reach_a_shard_turns_unready_and_hands_it_over(
    make_user, start_worker, monkeypatch
):
    shard = max(shard_ids())
    cut_off, healthy, port, _ = _two_schedulers(start_worker, shard, shard_nowhere(shard))
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
    assert _owner(shard) == healthy
    assert readyz(port)[0] == 503  # still out: it stepped back, and says so


def test_a_scheduler_that_stepped_back_joins_again_once_the_shard_answers(
    make_user, start_worker, monkeypatch, shard_proxy
):
    shard = max(shard_ids())
    cut_off, healthy, port, other = _two_schedulers(
        start_worker, shard, shard_through(shard_proxy, shard)
    )
    wait_until(lambda: _owner(shard) == cut_off, timeout=30, what=f"{cut_off} owns the shard")

    shard_proxy.cut()
    wait_until(lambda: _owner(shard) == healthy, timeout=30, what=f"{cut_off} steps back")
    shard_proxy.restore()
    wait_until(
        lambda: readyz(port)[0] == 200,
        timeout=30,
        what=f"{cut_off} joins again long before its 600 s are over",
    )

    other.stop()  # only the scheduler that joined again is left to dispatch the shard
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: shard)
    ids = create(make_user().pk, [spec(due=due_in(0)) for _ in range(20)])
    wait_until(
        lambda: status_counts()["succeeded"] == len(ids),
        timeout=60,
        what=f"{cut_off} dispatches the shard's jobs",
    )
