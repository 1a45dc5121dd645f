"""Jobs and idempotency keys. These tables live in every shard database, never in control.

Job lifecycle (``Job.status``)::

    scheduled --(due; published by a scheduler)--> queued --(claimed by an executor)--> running
    running --> succeeded | failed | scheduled (a retryable failure, with a later execute_at)
    scheduled | queued --(cancel)--> cancelled

``succeeded``, ``failed`` and ``cancelled`` are terminal.

Every finished attempt of a job is a ``JobAttempt`` row beside it, written by the same
statement's transaction that records the attempt's outcome, and deleted with the job.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from jobsvc.jobs.priorities import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN

__all__ = [
    "CANCELLABLE_STATUSES",
    "PRIORITY_DEFAULT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "TERMINAL_STATUSES",
    "AttemptOutcome",
    "IdempotencyKey",
    "Job",
    "JobAttempt",
    "JobStatus",
    "ShardLease",
]


class JobStatus(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


CANCELLABLE_STATUSES = frozenset({JobStatus.SCHEDULED, JobStatus.QUEUED})
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Job(models.Model):
    # "C" collation: ids must compare byte-wise, as KSUIDs sort, not by a locale's rules.
    id = models.CharField(primary_key=True, max_length=27, editable=False, db_collation="C")
    user_id = models.BigIntegerField(editable=False)
    message = models.TextField()
    # When the user asked the job to run (job latency is measured from it); changed only
    # by a reschedule, which is refused once the job has been dispatched.
    execute_at = models.DateTimeField()
    # When the next attempt is due: execute_at at first, later the retry time.
    due_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.SCHEDULED)
    attempts = models.IntegerField(default=0)  # attempts started so far
    max_attempts = models.SmallIntegerField()
    timeout_seconds = models.FloatField()  # per attempt
    # PRIORITY_MIN..PRIORITY_MAX. The database keeps the default too, so an API process
    # of the previous release, which does not name the column, still inserts jobs.
    priority = models.SmallIntegerField(default=PRIORITY_DEFAULT, db_default=PRIORITY_DEFAULT)
    handler = models.CharField(max_length=64, default="default")
    handler_params = models.JSONField(default=dict, blank=True)
    shard_id = models.SmallIntegerField(editable=False)
    last_error = models.TextField(blank=True, default="")
    # [{"attempt": n, "error": "...", "at": "..."}, ...] for every failed attempt.
    attempt_errors = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The shard-ownership epoch under which the job was last dispatched (fencing).
    dispatch_epoch = models.BigIntegerField(null=True, blank=True)
    # The jobs topic's partition its last dispatch went to: what the scheduler counts per
    # partition in flight, to supply each executor as fast as it starts jobs.
    dispatch_partition = models.SmallIntegerField(null=True, blank=True)
    # While queued or running: when the sweeper may assume the message or executor was lost.
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs"
        indexes = [
            # A user's jobs, newest first (ids sort by creation time).
            models.Index(fields=["user_id", "-id"], name="jobs_user_newest_idx"),
            # What the scheduler reads: each user's scheduled jobs by priority, then in
            # due order (scheduler_worker/queries.py reads it one priority at a time).
            models.Index(
                fields=["user_id", "priority", "due_at", "id"],
                condition=models.Q(status="scheduled"),
                name="jobs_due_by_user_idx",
            ),
            # What the scheduler counts (in flight) and the sweeper scans (expired leases).
            models.Index(
                fields=["lease_expires_at"],
                condition=models.Q(status__in=["queued", "running"]),
                name="jobs_in_flight_idx",
            ),
            # What the scheduler deletes once JOBSVC_JOB_RETENTION_DAYS have passed.
            models.Index(
                fields=["finished_at"],
                condition=models.Q(status__in=["succeeded", "failed", "cancelled"]),
                name="jobs_finished_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.id} ({self.status})"


class AttemptOutcome(models.TextChoices):
    """How an attempt ended. An attempt that timed out or was lost is retried while the
    job has attempts left, like one that raised; its job fails once it has none."""

    SUCCEEDED = "succeeded", "Succeeded"
    RETRIED = "retried", "Failed, retried"  # the handler raised; the job was scheduled again
    FAILED = "failed", "Failed for good"  # the handler raised; no retry (permanent, or last)
    TIMED_OUT = "timed_out", "Timed out"  # the handler did not finish in its timeout
    LOST = "lost", "Lost"  # its executor stopped responding (the sweeper took it back)


class JobAttempt(models.Model):
    """One finished attempt of a job: its delivery log entry.

    Kept as long as the job (the scheduler's purge deletes both), on the job's shard.
    Written with raw SQL by the executor (``executor_worker/queries.py``) and the sweeper
    (``scheduler_worker/queries.py``), one INSERT per batch of outcomes. An attempt the
    executor ran inline and found succeeded has no row: the job's row is its record
    (``selectors.job_attempts`` lists it from there).
    """

    pk = models.CompositePrimaryKey("job_id", "attempt")
    job_id = models.CharField(max_length=27, db_collation="C")
    attempt = models.IntegerField()  # 1 for the first
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    # "" for none. Defaults kept by the database too: the writers' raw INSERTs leave out
    # what an attempt does not have.
    error = models.TextField(blank=True, db_default="")
    # What the receiver answered, for handlers that call one (the http handler): the
    # status, and the first JOBSVC_ATTEMPT_RESPONSE_EXCERPT_BYTES of the body as text.
    http_status = models.SmallIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True, db_default="")

    class Meta:
        db_table = "jobs_attempt"

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} ({self.outcome})"

    @property
    def duration_seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


class IdempotencyKey(models.Model):
    """A create request's ``Idempotency-Key``: its first result is returned to every retry.

    It lives on the shard chosen by hashing the user and key, together with the jobs that
    request created, so both commit in one transaction.
    """

    user_id = models.BigIntegerField()
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    job_ids = ArrayField(models.CharField(max_length=27))
    is_bulk = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "jobs_idempotency_key"
        constraints = [
            models.UniqueConstraint(
                fields=["user_id", "key"], name="jobs_idempotency_user_key_uniq"
            ),
        ]
        # The scheduler deletes expired keys oldest first.
        indexes = [models.Index(fields=["created_at"], name="jobs_idempotency_created_idx")]

    def __str__(self) -> str:
        return f"idempotency key {self.key!r} of user {self.user_id}"


class BulkDecision(models.Model):
    """Whether a bulk request spread over several shards committed (``jobsvc.jobs.spread``).

    It lives on the request's coordinator shard and is written in the transaction that
    commits there: the other shards' prepared transactions are committed if it says so,
    and rolled back if the row says otherwise or, once they are old, is missing (then a
    row saying so is written first, so that a late coordinator cannot commit after).
    """

    batch = models.CharField(max_length=64, primary_key=True)
    committed = models.BooleanField()
    decided_at = models.DateTimeField()

    class Meta:
        db_table = "jobs_bulk_decision"
        # The scheduler deletes old decisions oldest first.
        indexes = [models.Index(fields=["decided_at"], name="jobs_bulk_decided_idx")]

    def __str__(self) -> str:
        return f"bulk {self.batch} ({'committed' if self.committed else 'aborted'})"


class ShardLease(models.Model):
    """Who may dispatch from this shard: the fencing record, one row per shard database.

    A scheduler that acquires the shard in ZooKeeper increments ``epoch`` here, and every
    write it makes to the shard first checks that ``epoch`` is still its own. A worker that
    was paused or partitioned while another took over finds a higher epoch and changes
    nothing. ZooKeeper decides who should own a shard; this row decides whose writes count.
    """

    shard_id = models.SmallIntegerField(primary_key=True)
    epoch = models.BigIntegerField(default=0)
    owner = models.CharField(max_length=200, blank=True, default="")
    acquired_at = models.DateTimeField(null=True, blank=True)
    # When the owner last ran a dispatch round (written at most once a second): the
    # operator's "is this shard being served" on the admin's cluster page.
    last_round_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs_shard_lease"

    def __str__(self) -> str:
        return f"shard {self.shard_id} epoch {self.epoch} ({self.owner or 'unowned'})"
