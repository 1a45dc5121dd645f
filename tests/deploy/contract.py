"""The metrics contract: every metric jobsvc exposes, by process, with its type and labels.

Dashboards (deploy/grafana/dashboards/) and alert rules (deploy/prometheus/alerts.yml)
may only query these names, and the code's metric modules must define exactly these
(tests/deploy/test_metrics_contract.py), so a renamed metric breaks a test instead of a
dashboard panel.

Names are metric family names as Prometheus sees them; a counter's samples end in
`_total`, a histogram's in `_bucket`, `_sum` and `_count`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Scrape jobs (the `job` label) of the three kinds of process.
API_JOB = "jobsvc-api"
SCHEDULER_JOB = "jobsvc-scheduler"
EXECUTOR_JOB = "jobsvc-executor"
SCRAPE_JOBS = (API_JOB, SCHEDULER_JOB, EXECUTOR_JOB)


@dataclass(frozen=True)
class Metric:
    name: str  # family name, without the `_total` of a counter
    type: str  # "counter", "gauge" or "histogram"
    labels: tuple[str, ...] = ()

    def sample_names(self) -> set[str]:
        """The names of the series this metric exposes (what PromQL selects)."""
        if self.type == "counter":
            return {f"{self.name}_total"}
        if self.type == "histogram":
            return {f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        return {self.name}


API_METRICS = (
    Metric("jobsvc_http_requests", "counter", ("method", "route", "status")),
    Metric("jobsvc_http_request_duration_seconds", "histogram", ("method", "route")),
    Metric("jobsvc_jobs_created", "counter"),
    Metric("jobsvc_logins_failed", "counter", ("via",)),
)
SCHEDULER_METRICS = (
    Metric("jobsvc_jobs_dispatched", "counter", ("weight_class",)),
    Metric("jobsvc_dispatch_lag_seconds", "histogram"),
    Metric("jobsvc_due_backlog_jobs", "gauge", ("shard",)),
    Metric("jobsvc_oldest_due_job_age_seconds", "gauge", ("shard",)),
    Metric("jobsvc_in_flight_jobs", "gauge", ("shard",)),
    Metric("jobsvc_in_flight_limit_jobs", "gauge", ("shard",)),
    Metric("jobsvc_shard_owned", "gauge", ("shard",)),
    Metric("jobsvc_shards_configured", "gauge"),
    Metric("jobsvc_shard_dispatch_failing", "gauge", ("shard",)),
    Metric("jobsvc_shard_ownership_changes", "counter", ("change",)),
    Metric("jobsvc_jobs_released", "counter"),
    Metric("jobsvc_jobs_swept", "counter", ("reason",)),
    Metric("jobsvc_idempotency_keys_purged", "counter"),
    Metric("jobsvc_jobs_purged", "counter"),
    Metric("jobsvc_bulk_transactions_resolved", "counter"),
    Metric("jobsvc_dispatch_round_seconds", "histogram"),
    Metric("jobsvc_backlogged_users", "gauge", ("shard", "weight_class")),
    Metric("jobsvc_dispatched_share_target", "gauge", ("shard", "weight_class")),
)
EXECUTOR_METRICS = (
    Metric("jobsvc_jobs_processed", "counter", ("outcome",)),
    Metric("jobsvc_job_latency_seconds", "histogram"),
    Metric("jobsvc_job_start_delay_seconds", "histogram"),
    Metric("jobsvc_attempt_duration_seconds", "histogram", ("handler",)),
    Metric("jobsvc_consumer_lag_messages", "gauge", ("partition",)),
    Metric("jobsvc_executor_in_flight", "gauge"),
    Metric("jobsvc_executor_read_ahead_messages", "gauge"),
    Metric("jobsvc_executor_clock_offset_seconds", "gauge", ("shard",)),
    Metric("jobsvc_executor_shard_failing_seconds", "gauge", ("shard",)),
)
# Defined once (jobsvc.messaging.dead_letter), exported by schedulers and executors alike:
# both dead-letter jobs.
DEAD_LETTER_METRICS = (Metric("jobsvc_jobs_dead_lettered", "counter"),)
# prometheus_client's default collectors, in every process.
PROCESS_METRICS = (
    Metric("process_cpu_seconds", "counter"),
    Metric("process_resident_memory_bytes", "gauge"),
)
# Series Prometheus itself makes for every target.
PROMETHEUS_SERIES = frozenset({"up"})

ALL_METRICS = (
    API_METRICS + SCHEDULER_METRICS + EXECUTOR_METRICS + DEAD_LETTER_METRICS + PROCESS_METRICS
)


def sample_metrics() -> dict[str, Metric | None]:
    """Series name -> the metric it belongs to (None: a series Prometheus makes, ``up``)."""
    found: dict[str, Metric | None] = dict.fromkeys(PROMETHEUS_SERIES)
    for metric in ALL_METRICS:
        found.update(dict.fromkeys(metric.sample_names(), metric))
    return found


def queryable_names() -> set[str]:
    """Every series name a dashboard or an alert may select."""
    names = set(PROMETHEUS_SERIES)
    for metric in ALL_METRICS:
        names |= metric.sample_names()
    return names
