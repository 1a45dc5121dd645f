"""An executor whose databases or broker fail under it: no message is dropped, no job is
lost or run twice, and what does work goes on.

Like test_executor_delivery, most tests publish job messages themselves (no scheduler,
so no sweeper makes a lost job due again: only the executor can finish the jobs).
"""

from __future__ import annotations

import pytest

from jobsvc.jobs.models import Job, JobAttempt
from jobsvc.messaging.producer import BatchProducer
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.e2e.conftest import create_topics
from tests.e2e.dead_letters import dead_letters
from tests.e2e.faults import control_nowhere, shard_failures, shard_offline
from tests.e2e.health import readyz
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.e2e.jobs_topic import HANDLED_TIMEOUT, job, message, queued_job
from tests.waiting import wait_until
from tools.devstack.ports import free_port

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def jobs_split_by_shard(user_id: int, url: str, *, each: int) -> tuple[int, list[str], list[str]]:
    """At least ``each`` queued http jobs on one shard, and ``each`` on the others."""
    first = queued_job(user_id, url)
    shard = shard_of(first)
    on_shard, elsewhere = [first], []
    for _ in range(50 * each):
        if len(on_shard) >= each and len(elsewhere) >= each:
            break
        job_id = queued_job(user_id, url)
        (on_shard if shard_of(job_id) == shard else elsewhere).append(job_id)
    assert len(on_shard) >= each and len(elsewhere) >= each
    return shard, on_shard, elsewhere


def status(job_id: str) -> str:
    """The job's status, read from its own shard only (another may be offline)."""
    return Job.objects.using(shard_alias(shard_of(job_id))).get(pk=job_id).status


def succeeded(job_ids: list[str]) -> bool:
    return all(status(job_id) == "succeeded" for job_id in job_ids)


def test_a_shard_that_cannot_be_reached_holds_its_jobs_and_not_the_others(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    shard, held, others = jobs_split_by_shard(user.pk, receiver.url, each=6)
    port = free_port()
    health = {
        "JOBSVC_EXECUTOR_METRICS_PORT": str(port),
        "JOBSVC_EXECUTOR_UNHEALTHY_AFTER_SECONDS": "1",
    }
    with shard_offline(shard):
        # The unreachable shard's messages first: each partition's others come after one.
        jobs_topic.publish(*[(j, message(j, user.pk, attempt=1)) for j in held + others])
        start_worker("executor", "executor-a", env=health)
        wait_until(lambda: succeeded(others), timeout=HANDLED_TIMEOUT, what="others ran")
        assert not jobs_topic.all_handled()  # the held messages keep their offsets
        # It says so: /readyz names the shard it cannot use.
        wait_until(lambda: readyz(port)[0] == 503, timeout=HANDLED_TIMEOUT, what="unready")
        assert any(f"shard {shard}" in problem for problem in readyz(port)[1]["problems"])

    wait_until(lambda: succeeded(held), timeout=HANDLED_TIMEOUT, what="held jobs ran")
    assert readyz(port)[0] == 200
    jobs_topic.wait_until_all_handled()
    assert receiver.count_by_job() == dict.fromkeys(held + others, 1)
    assert {job(j).attempts for j in held + others} == {1}


def test_a_dead_letter_topic_that_does_not_acknowledge_holds_back_only_the_failures(
    broker, make_user, start_worker, receiver, messaging
):
    """The broker goes away while the attempts run: the successes are recorded, the final
    failure waits for its dead letter until the broker is back."""
    # ``broker`` comes first so that it is stopped last, after the workers using it.
    create_topics(broker, messaging)
    user = make_user()
    doomed = queued_job(user.pk, receiver.url)
    receiver.answer(doomed, 404)  # fails for good: it needs its dead letter
    fine = [queued_job(user.pk, receiver.url) for _ in range(4)]
    for job_id in [doomed, *fine]:
        receiver.stall(job_id, 8.0)  # the broker is stopped (it takes seconds) while they run
    env = {
        "JOBSVC_KAFKA_BOOTSTRAP": broker.bootstrap,
        "JOBSVC_EXECUTOR_PUBLISH_TIMEOUT_SECONDS": "1",
    }
    start_worker("executor", "executor-a", env=env)
    producer = BatchProducer(bootstrap=broker.bootstrap, client_id="e2e-test")
    try:
        messages = [(doomed.encode(), message(j, user.pk, attempt=1)) for j in [doomed, *fine]]
        assert producer.publish(messaging.jobs_topic, messages, timeout=10) == []
    finally:
        producer.close()
    wait_until(
        lambda: all(status(j) == "running" for j in [doomed, *fine]),
        timeout=HANDLED_TIMEOUT,
        what="every attempt started",
    )

    broker.stop()
    wait_until(lambda: succeeded(fine), timeout=HANDLED_TIMEOUT, what="the successes recorded")
    assert status(doomed) == "running"  # not failed without its dead letter

    broker.start()
    wait_until(lambda: status(doomed) == "failed", timeout=HANDLED_TIMEOUT, what="dead-lettered")
    letters = dead_letters(messaging, bootstrap=broker.bootstrap)
    assert [letter["job_id"] for letter in letters] == [doomed]
    assert receiver.count_by_job() == dict.fromkeys([doomed, *fine], 1)


def test_a_failure_recorded_after_its_shard_comes_back_is_dead_lettered_once(
    make_user, start_worker, receiver, jobs_topic, messaging
):
    """The shard goes away while the failing attempt runs, so its outcome must wait."""
    user = make_user()
    doomed = queued_job(user.pk, receiver.url)
    receiver.answer(doomed, 404)
    receiver.stall(doomed, 1.0)
    executor = start_worker("executor", "executor-a")
    jobs_topic.publish((doomed, message(doomed, user.pk, attempt=1)))
    wait_until(lambda: status(doomed) == "running", timeout=HANDLED_TIMEOUT, what="started")

    with shard_offline(shard_of(doomed)):
        wait_until(lambda: receiver.of(doomed), timeout=HANDLED_TIMEOUT, what="answered")
        wait_until(
            lambda: shard_failures(executor, shard_of(doomed)) >= 3,
            timeout=HANDLED_TIMEOUT,
            what="the executor found the shard failing three times",
        )

    wait_until(lambda: status(doomed) == "failed", timeout=HANDLED_TIMEOUT, what="failed")
    jobs_topic.wait_until_all_handled()
    assert [letter["job_id"] for letter in dead_letters(messaging)] == [doomed]
    assert len(receiver.of(doomed)) == 1


def test_jobs_waiting_for_a_handler_thread_do_not_time_out_waiting(
    make_user, start_worker, receiver, jobs_topic
):
    """Two threads, both taken by one user's hanging webhooks (4 s each, their timeout):
    the others' jobs (2 s timeout) wait for a thread, then run in full."""
    hog, other = make_user(), make_user()
    hanging = [queued_job(hog.pk, receiver.url, timeout_seconds=4) for _ in range(2)]
    for job_id in hanging:
        receiver.stall(job_id, 10.0)
    patient = [
        queued_job(other.pk, receiver.url, timeout_seconds=2, max_attempts=1) for _ in range(2)
    ]
    start_worker("executor", "executor-a", env={"JOBSVC_EXECUTOR_CONCURRENCY": "2"})
    jobs_topic.publish(*[(j, message(j, hog.pk, attempt=1)) for j in hanging])
    wait_until(
        lambda: all(status(j) == "running" for j in hanging),
        timeout=HANDLED_TIMEOUT,
        what="the webhooks hang",
    )

    jobs_topic.publish(*[(j, message(j, other.pk, attempt=1)) for j in patient])

    wait_until(
        lambda: all(status(j) != "queued" and status(j) != "running" for j in patient),
        timeout=HANDLED_TIMEOUT,
        what="the others finished",
    )
    assert [status(j) for j in patient] == ["succeeded", "succeeded"]
    assert {job(j).attempts for j in patient} == {1}
    assert [len(receiver.of(j)) for j in patient] == [1, 1]


MAX_UNCOMMITTED = 40  # the executor's limit per partition in the test below
BATCH_SIZE = 10  # messages per poll: what it may read past the limit in one poll


def jobs_behind_a_held_message(user_id: int, url: str) -> tuple[int, str, list[str]]:
    """A job on one shard, and 4 x MAX_UNCOMMITTED on the others: (its shard, it, them).

    Jobs that land on the held job's shard are deleted: they would be held with it, and
    only the others tell how far the executor read."""
    held = queued_job(user_id, url)
    shard = shard_of(held)
    others: list[str] = []
    while len(others) < 4 * MAX_UNCOMMITTED:
        job_id = queued_job(user_id, url)
        if shard_of(job_id) == shard:
            Job.objects.using(shard_alias(shard)).filter(pk=job_id).delete()
        else:
            others.append(job_id)
    return shard, held, others


def hold_up_a_partition(start_worker, jobs_topic, user_id: int, held: str, others: list[str]):
    """Publish ``held`` and then ``others`` to one partition (one key), start an executor,
    and wait until it pauses that partition; its shard must be offline. The executor."""
    jobs_topic.publish(*[(held, message(j, user_id, attempt=1)) for j in [held, *others]])
    executor = start_worker(
        "executor",
        "executor-a",
        env={
            "JOBSVC_EXECUTOR_MAX_UNCOMMITTED_PER_PARTITION": str(MAX_UNCOMMITTED),
            "JOBSVC_EXECUTOR_BATCH_SIZE": str(BATCH_SIZE),
        },
    )
    wait_until(
        lambda: "pausing it" in executor.log(),
        timeout=HANDLED_TIMEOUT,
        what="the executor pauses the partition",
    )
    return executor


def succeeded_count(job_ids: list[str]) -> int:
    aliases = {shard_alias(shard_of(j)) for j in job_ids}
    return sum(
        Job.objects.using(alias).filter(pk__in=job_ids, status="succeeded").count()
        for alias in aliases
    )


def test_an_executor_stops_reading_a_partition_held_up_by_an_unreachable_shard(
    make_user, start_worker, receiver, jobs_topic
):
    """Memory stays bounded: at-least-once forbids committing past the held message, so
    the executor stops reading its partition instead of remembering ever more behind it.
    The jobs behind the held message on other shards run meanwhile (counted here to tell
    how far the executor read), but their offsets wait for it."""
    user = make_user()
    shard, held, others = jobs_behind_a_held_message(user.pk, receiver.url)

    with shard_offline(shard):
        # One partition: every other message waits behind the held one.
        executor = hold_up_a_partition(start_worker, jobs_topic, user.pk, held, others)
        retries = shard_failures(executor, shard)
        wait_until(
            lambda: shard_failures(executor, shard) >= retries + 2,
            timeout=HANDLED_TIMEOUT,
            what="the executor found the shard failing twice more",
        )
        assert 0 < succeeded_count(others) <= MAX_UNCOMMITTED + BATCH_SIZE

    wait_until(
        lambda: succeeded_count(others) == len(others) and status(held) == "succeeded",
        timeout=HANDLED_TIMEOUT,
        what="every job ran once the shard is back",
    )
    jobs_topic.wait_until_all_handled()
    assert receiver.count_by_job() == dict.fromkeys([held, *others], 1)


def test_a_job_whose_owner_s_secrets_are_out_of_reach_waits_and_spends_no_attempt(
    make_user, start_worker, receiver
):
    """An executor that cannot read the control database (restarting, cut off) for a user
    it never read cannot sign that user's webhooks: the job did not start. It must not
    fail for good, nor spend one of its attempts (here its only one)."""
    user = make_user()
    start_worker("scheduler", "scheduler-a")
    blind = start_worker("executor", "executor-blind", env=control_nowhere())
    params = {"url": receiver.url}
    specs = [spec(due=due_in(1.0), handler="http", params=params, max_attempts=1)] * 5
    ids = create(user.pk, specs)

    def put_back() -> bool:
        return any(job.due_at > job.execute_at for job in all_jobs())

    wait_until(put_back, timeout=30, what="an attempt that did not start")
    assert status_counts()["failed"] == 0
    blind.stop()
    start_worker("executor", "executor-a")

    wait_until(lambda: status_counts()["succeeded"] == len(ids), timeout=60, what="jobs ran")
    assert sorted((d.job_id, d.attempt) for d in receiver.deliveries()) == [
        (job_id, 1) for job_id in sorted(ids)
    ]
    assert {job.attempts for job in all_jobs()} == {1}
    history = [
        a.outcome
        for alias in {shard_alias(shard_of(i)) for i in ids}
        for a in JobAttempt.objects.using(alias).filter(job_id__in=ids)
    ]
    assert history == ["succeeded"] * len(ids)
