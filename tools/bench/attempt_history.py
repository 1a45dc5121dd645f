"""``attempt_history``: what writing the attempt history adds to an executor's database
work per job.

In process, on shard 0 (``ClaimStore``), batches of ``BATCH`` due jobs are claimed and
recorded succeeded, as an executor does for jobs run on handler threads (the http
handler): ``ClaimStore.claim``, then ``ClaimStore.record``, which writes each attempt's
history row (status and excerpt included) in the transaction that records the outcome.
Batches alternate with ones recorded by the outcome statement alone, which is what
recording cost without a history. Reported: median milliseconds per batch of each, and
the history's extra microseconds per job, also as a share of the claim and record. Jobs
run inline (the no-op ``default`` handler) write no row at all: the job's row
is their record (``jobsvc.jobs.selectors.job_attempts``).

A webhook job costs the whole stack about 2,000 µs of CPU in the webhook drain
(``fairness_webhooks``: the scheduler, the broker, the executor's handler thread and
HTTP call, the receiver, PostgreSQL); the promise is that the history adds at most 5 %
of that.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.db import connections, transaction
from django.utils import timezone

from executor_worker import queries
from executor_worker.claims import Attempt, ClaimRequest, ClaimStore, Outcome
from jobsvc.sharding.shards import shard_alias
from tools.bench.scenario_stack import analyze, clean_slate, load_jobs

SHARD = 0
BATCH = 1000  # jobs claimed, then recorded, in one transaction each
ROUNDS = 20  # pairs of batches, one of each kind, their order alternating
QUICK_ROUNDS = 5
EXCERPT = '{"received": true}'  # a receiver's answer, as the http handler keeps it


def run_attempt_history(context) -> dict:
    rounds = QUICK_ROUNDS if context.quick else ROUNDS
    alias = shard_alias(SHARD)
    with clean_slate((1.0,)) as users:
        past = timezone.now() - timedelta(minutes=5)
        load_jobs(SHARD, ((users[0], past) for _ in range(2 * rounds * BATCH)))
        analyze()
        claims = ClaimStore(shard_id=SHARD, lease_seconds=60.0)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for number in range(rounds):
            for history in (True, False) if number % 2 == 0 else (False, True):
                seconds[history].append(_claim_and_record(claims, alias, history=history))
    with_ms = 1000 * statistics.median(seconds[True])
    without_ms = 1000 * statistics.median(seconds[False])
    extra_us = 1000 * (with_ms - without_ms) / BATCH
    share = (with_ms - without_ms) / without_ms
    setup = (
        f"shard 0 alone, in process (ClaimStore); {rounds} pairs of batches of {BATCH:,} "
        "due jobs, each claimed and recorded succeeded with an http status and an excerpt, "
        "with and without the history rows, in alternating order; medians"
    )
    markdown = "\n".join(
        [
            "| claim + record a batch | ms (median) | µs per job |",
            "|---|---:|---:|",
            f"| with the attempt history | {with_ms:.1f} | {1000 * with_ms / BATCH:.1f} |",
            f"| without | {without_ms:.1f} | {1000 * without_ms / BATCH:.1f} |",
            "",
            f"The history adds {extra_us:.1f} µs per job, {100 * share:.1f} % of the claim "
            f"and record. Setup: {setup}.",
        ]
    )
    return {
        "with_history_ms_median": round(with_ms, 2),
        "without_history_ms_median": round(without_ms, 2),
        "extra_us_per_job": round(extra_us, 2),
        "extra_share": round(share, 4),
        "setup": setup,
        "markdown": markdown,
    }


def _claim_and_record(claims: ClaimStore, alias: str, *, history: bool) -> float:
    """Seconds to claim the next batch of due jobs and record them succeeded."""
    requests = _next_batch(alias)
    started = time.perf_counter()
    with transaction.atomic(using=alias):
        attempts = claims.claim(requests)
    outcomes = [
        Outcome(attempt=a, succeeded=True, http_status=200, response_excerpt=EXCERPT)
        for a in attempts
    ]
    if history:
        claims.record(outcomes)
    else:
        _record_outcomes_only(alias, attempts)
    return time.perf_counter() - started


def _record_outcomes_only(alias: str, attempts: list[Attempt]) -> None:
    params = {"job_ids": [a.job_id for a in attempts], "attempts": [a.attempt for a in attempts]}
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(queries.SUCCEED, params)


def _next_batch(alias: str) -> list[ClaimRequest]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT id, user_id, due_at FROM jobs WHERE status = 'scheduled' ORDER BY id LIMIT %s",
            [BATCH],
        )
        return [ClaimRequest(job_id, 1, user_id, due_at) for job_id, user_id, due_at in cursor]
