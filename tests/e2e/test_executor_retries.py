"""Failing jobs: retries with backoff through the scheduler, then the dead-letter topic.

Jobs use the http handler against the test's receiver, which answers each delivery with
the status the test scripted (then 200) and checks every request's signature. Retry
delays are the e2e FAST_TIMINGS: base 0.2 s, cap 1 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobsvc.jobs.models import JobAttempt
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.e2e.conftest import FAST_TIMINGS
from tests.e2e.dead_letters import dead_letters
from tests.e2e.jobs import all_jobs, create, spec
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

RUN_TIMEOUT = 30.0  # seconds for the workers to start and take a job through its attempts
RETRY_BASE_DELAY = float(FAST_TIMINGS["JOBSVC_RETRY_BASE_DELAY_SECONDS"])
RETRY_MAX_DELAY = float(FAST_TIMINGS["JOBSVC_RETRY_MAX_DELAY_SECONDS"])


def job(job_id: str):
    return all_jobs(pk=job_id)[0]


def http_job(user_id: int, url: str, *, max_attempts: int = 3) -> str:
    [job_id] = create(
        user_id, [spec(handler="http", params={"url": url}, max_attempts=max_attempts)]
    )
    return job_id


def wait_for_status(job_id: str, status: str) -> None:
    wait_until(lambda: job(job_id).status == status, timeout=RUN_TIMEOUT, what=f"job {status}")


def at(entry: dict) -> datetime:
    return datetime.fromisoformat(entry["at"])


def test_a_handler_that_fails_twice_then_succeeds_runs_three_times_with_backoff(
    make_user, start_worker, receiver
):
    user = make_user()
    job_id = http_job(user.pk, receiver.url, max_attempts=3)
    receiver.answer(job_id, 500, 500)
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    wait_for_status(job_id, "succeeded")

    deliveries = receiver.of(job_id)
    assert [d.status for d in deliveries] == [500, 500, 200]
    assert [d.idempotency_key for d in deliveries] == [job_id] * 3
    assert [d.attempt for d in deliveries] == [1, 2, 3]
    assert all(d.signature_valid for d in deliveries)
    done = job(job_id)
    assert done.attempts == 3
    errors = done.attempt_errors
    assert [e["attempt"] for e in errors] == [1, 2]
    assert all("500" in e["error"] for e in errors)
    # Retry n waits between half and all of min(cap, base * 2 ** (n - 1)).
    assert at(errors[1]) - at(errors[0]) >= timedelta(seconds=RETRY_BASE_DELAY / 2)
    second_delay = (done.due_at - at(errors[1])).total_seconds()
    assert RETRY_BASE_DELAY <= second_delay <= min(RETRY_MAX_DELAY, 2 * RETRY_BASE_DELAY)
    assert done.execute_at < done.due_at <= done.started_at


def test_a_handler_that_always_fails_is_dead_lettered_after_max_attempts(
    make_user, start_worker, receiver, messaging, client_for
):
    user = make_user()
    job_id = http_job(user.pk, receiver.url, max_attempts=3)
    receiver.answer(job_id, *[500] * 10)
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    wait_for_status(job_id, "failed")

    assert [d.attempt for d in receiver.of(job_id)] == [1, 2, 3]
    failed = job(job_id)
    [letter] = [letter for letter in dead_letters(messaging) if letter["job_id"] == job_id]
    assert letter["v"] == 1
    assert (letter["shard_id"], letter["user_id"]) == (failed.shard_id, user.pk)
    assert (letter["handler"], letter["handler_params"]) == ("http", {"url": receiver.url})
    assert letter["message"] == failed.message
    assert (letter["attempts"], letter["max_attempts"], letter["reason"]) == (3, 3, "exhausted")
    assert [e["attempt"] for e in letter["errors"]] == [1, 2, 3]
    assert all("500" in e["error"] for e in letter["errors"])
    assert [e["error"] for e in letter["errors"]] == [e["error"] for e in failed.attempt_errors]
    assert datetime.fromisoformat(letter["execute_at"]) == failed.execute_at
    assert datetime.fromisoformat(letter["created_at"]) == failed.created_at
    assert datetime.fromisoformat(letter["failed_at"]) >= at(failed.attempt_errors[1])

    shown = client_for(user).get(f"/api/v1/me/jobs/{job_id}").json()["data"]
    assert (shown["status"], shown["attempts"], shown["max_attempts"]) == ("failed", 3, 3)
    assert "500" in shown["last_error"]
    assert shown["last_error"] == failed.attempt_errors[-1]["error"]
    assert len(shown["attempt_errors"]) == 3


def test_http_answers_decide_between_retry_and_dead_letter(
    make_user, start_worker, receiver, messaging
):
    user = make_user()
    not_found, throttled, unavailable, ok = (http_job(user.pk, receiver.url) for _ in range(4))
    receiver.answer(not_found, 404)
    receiver.answer(throttled, 429)
    receiver.answer(unavailable, 503)
    # Allowed when created, but "localhost" is not in the executors' allow-list (127.0.0.1
    # is): the executor checks again before every request and makes none.
    refused = http_job(user.pk, receiver.url.replace("127.0.0.1", "localhost"))
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    for job_id in (throttled, unavailable, ok):
        wait_for_status(job_id, "succeeded")
    for job_id in (not_found, refused):
        wait_for_status(job_id, "failed")

    assert [d.status for d in receiver.of(not_found)] == [404]
    assert [d.status for d in receiver.of(throttled)] == [429, 200]
    assert [d.status for d in receiver.of(unavailable)] == [503, 200]
    assert [d.status for d in receiver.of(ok)] == [200]
    assert receiver.of(refused) == []
    assert all(d.signature_valid for d in receiver.deliveries())
    assert {d.body["job_id"] for d in receiver.deliveries()} == {
        not_found,
        throttled,
        unavailable,
        ok,
    }
    assert (job(not_found).attempts, job(refused).attempts) == (1, 1)
    assert "404" in job(not_found).last_error
    assert "allow-list" in job(refused).last_error
    letters = {letter["job_id"]: letter for letter in dead_letters(messaging)}
    assert set(letters) == {not_found, refused}
    assert {letter["reason"] for letter in letters.values()} == {"permanent"}
    assert [e["attempt"] for e in letters[not_found]["errors"]] == [1]


def test_a_failing_inline_handler_is_dead_lettered_and_its_batch_mates_still_succeed(
    make_user, start_worker, messaging
):
    """The default handler runs inside the claim's transaction; a failure leaves it."""
    user = make_user()
    # Parameters the API would refuse: the default handler fails for good on them.
    [bad] = create(user.pk, [spec(params={"unexpected": 1})])
    good = create(user.pk, [spec() for _ in range(20)])
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    wait_for_status(bad, "failed")
    wait_until(
        lambda: all(job.status == "succeeded" for job in all_jobs(pk__in=good)),
        timeout=RUN_TIMEOUT,
        what="the good jobs succeeded",
    )

    failed = job(bad)
    assert failed.attempts == 1
    assert "takes no parameters" in failed.last_error
    [letter] = [letter for letter in dead_letters(messaging) if letter["job_id"] == bad]
    assert (letter["reason"], letter["attempts"]) == ("permanent", 1)
    assert {j.attempts for j in all_jobs(pk__in=good)} == {1}


def test_each_delivery_is_in_the_jobs_attempt_history(make_user, start_worker, receiver):
    user = make_user()
    job_id = http_job(user.pk, receiver.url, max_attempts=3)
    receiver.answer(job_id, 503, 500)
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    wait_for_status(job_id, "succeeded")

    history = list(
        JobAttempt.objects.using(shard_alias(shard_of(job_id)))
        .filter(job_id=job_id)
        .order_by("attempt")
    )
    assert [(a.attempt, a.outcome, a.http_status) for a in history] == [
        (1, "retried", 503),
        (2, "retried", 500),
        (3, "succeeded", 200),
    ]
    assert all(a.started_at <= a.finished_at for a in history)
    assert history[0].finished_at <= history[1].started_at <= history[2].started_at
    assert "503" in history[0].error and history[2].error == ""
    done = job(job_id)
    assert (history[2].started_at, history[2].finished_at) == (done.started_at, done.finished_at)
