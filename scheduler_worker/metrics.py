"""Prometheus metrics of a scheduler worker, served on ``JOBSVC_SCHEDULER_METRICS_PORT``.

Fairness is shown per weight class, never per user (``scheduler_worker.dispatch_metrics``).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds; dense below 100 ms, the design-peak target for dispatch lag.
_LAG_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

JOBS_DISPATCHED = Counter(
    "jobsvc_jobs_dispatched", "Jobs published to the jobs topic, by weight class", ["weight_class"]
)
DISPATCH_LAG = Histogram(
    "jobsvc_dispatch_lag_seconds", "Dispatched minus due, per job", buckets=_LAG_BUCKETS
)
DISPATCH_ROUND = Histogram(
    "jobsvc_dispatch_round_seconds",
    "Duration of one dispatch round (select, claim, send to the broker)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
DUE_BACKLOG = Gauge("jobsvc_due_backlog_jobs", "Due jobs waiting in the shard", ["shard"])
OLDEST_DUE_AGE = Gauge(
    "jobsvc_oldest_due_job_age_seconds",
    "Queue lag: seconds the oldest due, unstarted job of the shard has waited since due",
    ["shard"],
)
IN_FLIGHT = Gauge("jobsvc_in_flight_jobs", "Jobs published but not finished", ["shard"])
IN_FLIGHT_LIMIT = Gauge("jobsvc_in_flight_limit_jobs", "Jobs a shard may have in flight", ["shard"])
SHARD_OWNED = Gauge("jobsvc_shard_owned", "1 while this worker owns the shard", ["shard"])
SHARDS_CONFIGURED = Gauge("jobsvc_shards_configured", "Shards in the pool")
SHARD_FAILING = Gauge(
    "jobsvc_shard_dispatch_failing",
    "1 while every dispatch round of an owned shard fails (database or broker errors)",
    ["shard"],
)
OWNERSHIP_CHANGES = Counter(
    "jobsvc_shard_ownership_changes", "Shards acquired, released or fenced", ["change"]
)
JOBS_RELEASED = Counter(
    "jobsvc_jobs_released", "Claimed jobs made due again because the broker failed their message"
)
JOBS_SWEPT = Counter("jobsvc_jobs_swept", "Jobs recovered by the sweeper", ["reason"])
IDEMPOTENCY_KEYS_PURGED = Counter(
    "jobsvc_idempotency_keys_purged", "Idempotency-Keys deleted after their TTL"
)
BULK_TRANSACTIONS_RESOLVED = Counter(
    "jobsvc_bulk_transactions_resolved",
    "Prepared transactions of spread bulk requests committed or rolled back by a sweep",
)
JOBS_PURGED = Counter("jobsvc_jobs_purged", "Finished jobs deleted after the retention time")
BACKLOGGED_USERS = Gauge(
    "jobsvc_backlogged_users",
    "Users with due jobs in the shard's last round, by weight class",
    ["shard", "weight_class"],
)
SHARE_TARGET = Gauge(
    "jobsvc_dispatched_share_target",
    "Share of the shard's dispatch the weight class is entitled to among its backlogged users",
    ["shard", "weight_class"],
)


def weight_class(weight: float) -> str:
    """A bounded label for a weight: two significant digits ("1", "2.5", "40")."""
    return f"{weight:.2g}"
