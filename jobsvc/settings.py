"""Django settings for jobsvc: everything comes from ``JOBSVC_*`` environment variables.

docs/configuration.md lists every variable. The control database holds users, auth and admin data;
each shard database holds jobs. Shard ``i`` is the ``i``-th URL of ``JOBSVC_SHARD_DB_URLS``
and is known to Django as the database alias ``shard_i``.
"""

from __future__ import annotations

import ipaddress
import secrets
from datetime import timedelta
from pathlib import Path

from jobsvc.accounts.weights import JOB_WEIGHT_CEILING, JOB_WEIGHT_FLOOR
from jobsvc.env import (
    ConfigError,
    database_from_url,
    env_bool,
    env_database_urls,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_rate,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

# Development mode: Django's debug pages, and keys generated when none are given. Never on
# a deployment that users reach.
DEBUG = env_bool("JOBSVC_DEBUG", False)
# The keys come from the environment. Under DEBUG a missing one is a random key of this
# process alone (never a constant anyone could read here): tokens then last only as long
# as the process, and processes do not accept each other's. `make run` and the tests
# generate theirs and pass them in.
MIN_KEY_LENGTH = 32  # characters of JOBSVC_SECRET_KEY and JOBSVC_JWT_SIGNING_KEY
MIN_KEY_DISTINCT_CHARACTERS = 10  # a key of few distinct characters is a guessable one


def _checked_key(name: str, value: str) -> str:
    if len(value) < MIN_KEY_LENGTH or len(set(value)) < MIN_KEY_DISTINCT_CHARACTERS:
        raise ConfigError(
            f"{name} must be at least {MIN_KEY_LENGTH} characters, of at least "
            f"{MIN_KEY_DISTINCT_CHARACTERS} different ones (e.g. `openssl rand -base64 48`)"
        )
    return value


# Django's key (sessions, CSRF, password reset); at least 32 characters, required unless
# JOBSVC_DEBUG.
SECRET_KEY = _checked_key(
    "JOBSVC_SECRET_KEY",
    env_str("JOBSVC_SECRET_KEY", secrets.token_urlsafe(48) if DEBUG else None),
)
# The HS256 key that signs the API's access and refresh tokens; required unless
# JOBSVC_DEBUG, and not JOBSVC_SECRET_KEY.
JWT_SIGNING_KEY = _checked_key(
    "JOBSVC_JWT_SIGNING_KEY",
    env_str("JOBSVC_JWT_SIGNING_KEY", secrets.token_urlsafe(48) if DEBUG else None),
)
if JWT_SIGNING_KEY == SECRET_KEY:
    raise ConfigError("JOBSVC_JWT_SIGNING_KEY must differ from JOBSVC_SECRET_KEY")

# Host names the API answers to (Django's ALLOWED_HOSTS), comma-separated.
ALLOWED_HOSTS = env_list("JOBSVC_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
# DEBUG shows tracebacks and settings to whoever triggers an error: local use only.
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1", "testserver"}
if DEBUG and not set(ALLOWED_HOSTS) <= _LOCAL_HOSTS:
    raise ConfigError(
        "JOBSVC_DEBUG=true serves local names only; JOBSVC_ALLOWED_HOSTS names "
        f"{sorted(set(ALLOWED_HOSTS) - _LOCAL_HOSTS)}"
    )

# --- TLS (in front of the API: a reverse proxy terminates it, docker-compose.yml's Caddy) --
# Trust the proxy's X-Forwarded-Proto to tell https requests from http ones. Only behind a
# proxy that always sets it: a client could send it itself otherwise.
BEHIND_TLS_PROXY = env_bool("JOBSVC_BEHIND_TLS_PROXY", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_TLS_PROXY else None
# The admin's session and CSRF cookies are sent over https only.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("JOBSVC_SECURE_COOKIES", False)
# Seconds browsers must use https for this host (Strict-Transport-Security); 0: no header.
SECURE_HSTS_SECONDS = env_int("JOBSVC_SECURE_HSTS_SECONDS", 0, minimum=0)
# Answer http requests with a redirect to https (off where the proxy redirects itself).
SECURE_SSL_REDIRECT = env_bool("JOBSVC_SECURE_SSL_REDIRECT", False)
# Origins the admin's forms may be posted from besides the host itself, e.g.
# https://jobs.example.com (needed behind a proxy that changes the scheme or the port).
CSRF_TRUSTED_ORIGINS = env_list("JOBSVC_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "jobsvc.accounts",
    "jobsvc.jobs",
    "jobsvc.cluster",
    "scheduler_worker",
    "executor_worker",
]

MIDDLEWARE = [
    # First: every response carries the request's id, and every log line of it.
    "jobsvc.api.middleware.RequestIdMiddleware",
    "jobsvc.metrics.MetricsMiddleware",
    "jobsvc.api.middleware.RequestSizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "jobsvc.admin_middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "jobsvc.admin_middleware.CsrfViewMiddleware",
    "jobsvc.admin_middleware.AuthenticationMiddleware",
    "jobsvc.admin_middleware.MessageMiddleware",
    "jobsvc.admin_middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "jobsvc.urls"
WSGI_APPLICATION = "jobsvc.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Databases -------------------------------------------------------------------------

# The control database (users, tokens, grants): a postgresql:// URL.
CONTROL_DB_URL = env_str(
    "JOBSVC_CONTROL_DB_URL", "postgresql://jobsvc@127.0.0.1:5432/jobsvc_control"
)
# The shard databases, comma-separated postgresql:// URLs; a job id names its shard by
# position in this list, so shards are only ever appended (docs/operations.md).
SHARD_DB_URLS = env_database_urls(
    "JOBSVC_SHARD_DB_URLS",
    ",".join(f"postgresql://jobsvc@127.0.0.1:5432/jobsvc_shard_{i}" for i in range(4)),
)
if not SHARD_DB_URLS:
    raise ConfigError("JOBSVC_SHARD_DB_URLS must name at least one shard database")
if len(SHARD_DB_URLS) > 65536:
    raise ConfigError("JOBSVC_SHARD_DB_URLS: at most 65536 shards fit in a job id")

# Seconds a pooled connection is kept; health checks drop one the server closed.
DB_CONN_MAX_AGE = env_int("JOBSVC_DB_CONN_MAX_AGE", 300, minimum=0)
DB_CONNECT_TIMEOUT = env_int("JOBSVC_DB_CONNECT_TIMEOUT", 3, minimum=1)  # seconds
# A statement running longer than this is cancelled by the server (0: no limit). Keeps a
# lock wait or a runaway query from holding a request or a worker thread for good;
# migrate_all lifts it for index builds.
DB_STATEMENT_TIMEOUT = env_float("JOBSVC_DB_STATEMENT_TIMEOUT_SECONDS", 30.0, minimum=0.0)
# A transaction left idle this long is ended by the server (0: no limit). A process paused
# inside one (SIGSTOP, a GC pause, a stopped VM) would otherwise hold its row locks until
# it woke: an executor's claimed jobs, which another executor claims once the consumer
# group gives it the partitions (after the consumer session, 6 s), and the API's cancels
# wait on too (the schedulers skip locked rows). Below that session; our transactions go
# from one statement to the next within milliseconds, and the two that publish inside
# (dead letters) raise the limit for themselves by their publish timeout.
DB_IDLE_IN_TRANSACTION_TIMEOUT = env_float(
    "JOBSVC_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", 5.0, minimum=0.0
)
# A server that vanished without closing the connection (a failed host, a partition, a
# failover behind a virtual IP) leaves it half-open. A query sent on it fails once its data
# has gone unacknowledged this long (TCP_USER_TIMEOUT), and an idle connection once its
# keepalives go unanswered (after idle + count x interval seconds), instead of the kernel's
# minutes or hours: a worker then moves on (another takes over what it cannot reach).
# A few seconds each, so that a worker cut off from a server is replaced within the 10-s
# takeover bound (docs/design/faults.md); a server's kernel acknowledges at once however
# busy PostgreSQL is, so only a real network fault of that length trips them.
DB_TCP_USER_TIMEOUT = env_float("JOBSVC_DB_TCP_USER_TIMEOUT_SECONDS", 3.0, minimum=0.5)
# Idle seconds before a connection's first keepalive probe (see above).
DB_KEEPALIVES_IDLE = env_int("JOBSVC_DB_KEEPALIVES_IDLE_SECONDS", 2, minimum=1)
# Seconds between keepalive probes.
DB_KEEPALIVES_INTERVAL = env_int("JOBSVC_DB_KEEPALIVES_INTERVAL_SECONDS", 1, minimum=1)
# Unanswered keepalive probes after which the connection is dropped.
DB_KEEPALIVES_COUNT = env_int("JOBSVC_DB_KEEPALIVES_COUNT", 2, minimum=1)


def _database(url: str, *, name: str) -> dict[str, object]:
    database = database_from_url(url, name=name)
    database["CONN_MAX_AGE"] = DB_CONN_MAX_AGE
    database["CONN_HEALTH_CHECKS"] = True
    # Our defaults, under whatever the URL says itself (its query parameters).
    options = {
        "connect_timeout": DB_CONNECT_TIMEOUT,
        "keepalives": 1,
        "keepalives_idle": DB_KEEPALIVES_IDLE,
        "keepalives_interval": DB_KEEPALIVES_INTERVAL,
        "keepalives_count": DB_KEEPALIVES_COUNT,
        "tcp_user_timeout": round(DB_TCP_USER_TIMEOUT * 1000),
        **database["OPTIONS"],
    }
    timeouts = (
        f"-c statement_timeout={round(DB_STATEMENT_TIMEOUT * 1000)}"
        " -c idle_in_transaction_session_timeout="
        f"{round(DB_IDLE_IN_TRANSACTION_TIMEOUT * 1000)}"
    )
    options["options"] = " ".join(filter(None, [timeouts, options.get("options")]))
    database["OPTIONS"] = options
    return database


DATABASES = {"default": _database(CONTROL_DB_URL, name="JOBSVC_CONTROL_DB_URL")}
for _index, _url in enumerate(SHARD_DB_URLS):
    DATABASES[f"shard_{_index}"] = _database(_url, name=f"JOBSVC_SHARD_DB_URLS[{_index}]")
DATABASE_ROUTERS = ["jobsvc.sharding.routers.ShardRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Coordination and messaging -------------------------------------------------------

# ZooKeeper ensemble, "host:port,host:port" (kazoo's hosts string).
ZK_HOSTS = env_str("JOBSVC_ZK_HOSTS", "127.0.0.1:2181")
# A ZooKeeper user (SASL DIGEST-MD5) the workers and the cluster page authenticate as;
# the znodes they create are readable and writable by that user only. "": no
# authentication (the local stack).
ZK_SASL_USERNAME = env_str("JOBSVC_ZK_SASL_USERNAME", "")
# That user's password.
ZK_SASL_PASSWORD = env_str("JOBSVC_ZK_SASL_PASSWORD", "")
if bool(ZK_SASL_USERNAME) != bool(ZK_SASL_PASSWORD):
    raise ConfigError("JOBSVC_ZK_SASL_USERNAME and JOBSVC_ZK_SASL_PASSWORD go together")
# Kafka bootstrap servers, "host:port,host:port".
KAFKA_BOOTSTRAP = env_str("JOBSVC_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
# How the app's Kafka clients authenticate (jobsvc.messaging.client_security): PLAINTEXT
# (the local stack), SSL, SASL_PLAINTEXT or SASL_SSL; with SASL_*, a user of the brokers
# (SCRAM-SHA-512 by default) whose ACLs allow what this kind of process does.
KAFKA_SECURITY_PROTOCOL = env_str("JOBSVC_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
if KAFKA_SECURITY_PROTOCOL not in {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}:
    raise ConfigError(
        "JOBSVC_KAFKA_SECURITY_PROTOCOL must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
# The SASL mechanism of the brokers' user (with SASL_*).
KAFKA_SASL_MECHANISM = env_str("JOBSVC_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
# That user's name.
KAFKA_SASL_USERNAME = env_str("JOBSVC_KAFKA_SASL_USERNAME", "")
# The password of JOBSVC_KAFKA_SASL_USERNAME.
KAFKA_SASL_PASSWORD = env_str("JOBSVC_KAFKA_SASL_PASSWORD", "")
if KAFKA_SECURITY_PROTOCOL.startswith("SASL_") and not (
    KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD
):
    raise ConfigError(
        "JOBSVC_KAFKA_SECURITY_PROTOCOL=SASL_* needs JOBSVC_KAFKA_SASL_USERNAME and _PASSWORD"
    )
# PEM bundle the brokers' TLS certificates are checked against (SSL, SASL_SSL); "": the
# system's.
KAFKA_SSL_CA_LOCATION = env_str("JOBSVC_KAFKA_SSL_CA_LOCATION", "")
# The topic schedulers publish due jobs to and executors consume from.
KAFKA_JOBS_TOPIC = env_str("JOBSVC_KAFKA_JOBS_TOPIC", "jobs")
# The topic a job's last failed attempt is published to.
KAFKA_DEAD_LETTER_TOPIC = env_str("JOBSVC_KAFKA_DEAD_LETTER_TOPIC", "jobs.dead-letter")
# Partitions of the jobs topic when `ensure_topics` creates it: the most executors that
# can share the work.
KAFKA_JOBS_PARTITIONS = env_int("JOBSVC_KAFKA_JOBS_PARTITIONS", 12, minimum=1)
# Replicas of every topic, and how many must have a message before the broker acknowledges
# it (producers use acks=all). The workers refuse to start against a topic that has fewer
# (jobsvc.messaging.topics). A production cluster of three brokers: 3 and 2.
KAFKA_REPLICATION_FACTOR = env_int("JOBSVC_KAFKA_REPLICATION_FACTOR", 1, minimum=1)
# Replicas that must have a message before the broker acknowledges it (see above).
KAFKA_MIN_INSYNC_REPLICAS = env_int("JOBSVC_KAFKA_MIN_INSYNC_REPLICAS", 1, minimum=1)
if KAFKA_MIN_INSYNC_REPLICAS > KAFKA_REPLICATION_FACTOR:
    raise ConfigError(
        "JOBSVC_KAFKA_MIN_INSYNC_REPLICAS must not exceed JOBSVC_KAFKA_REPLICATION_FACTOR"
    )

# --- Jobs ----------------------------------------------------------------------------

# Attempts a job gets when its request names no max_attempts.
JOB_DEFAULT_MAX_ATTEMPTS = env_int("JOBSVC_JOB_DEFAULT_MAX_ATTEMPTS", 3, minimum=1)
# The most max_attempts a create may name, and the most new attempts one retry may give.
JOB_MAX_ATTEMPTS_LIMIT = env_int("JOBSVC_JOB_MAX_ATTEMPTS_LIMIT", 25, minimum=1)
# Seconds an attempt may run when the request names no timeout_seconds.
JOB_DEFAULT_TIMEOUT_SECONDS = env_float("JOBSVC_JOB_DEFAULT_TIMEOUT_SECONDS", 30.0, minimum=0.001)
# The most timeout_seconds a request may name.
JOB_TIMEOUT_LIMIT_SECONDS = env_float("JOBSVC_JOB_TIMEOUT_LIMIT_SECONDS", 900.0, minimum=0.001)
# Handlers a job may name: name -> dotted path of the handler class. Projects add their own
# in JOBSVC_EXTRA_HANDLERS as "name=dotted.path,..." (built with no constructor options).
JOB_HANDLERS = {
    "default": "jobsvc.handlers.record.RecordHandler",
    "http": "jobsvc.handlers.http.HttpHandler",
    "kafka": "jobsvc.handlers.kafka.KafkaHandler",
}
# A project's own handlers, "name=dotted.path,...", added to default, http and kafka.
for _entry in env_list("JOBSVC_EXTRA_HANDLERS"):
    _name, _, _path = _entry.partition("=")
    if not _name.strip() or not _path.strip():
        raise ConfigError(f"JOBSVC_EXTRA_HANDLERS: expected name=dotted.path, got {_entry!r}")
    JOB_HANDLERS[_name.strip()] = _path.strip()
# The http handler signs each delivery with the job owner's own secret (Standard Webhooks;
# jobsvc.accounts.webhook_secrets). After a rotation the previous secret signs too, for
# this many hours, so receivers can switch without losing deliveries.
WEBHOOK_SECRET_OVERLAP = timedelta(
    hours=env_float("JOBSVC_WEBHOOK_SECRET_OVERLAP_HOURS", 24.0, minimum=0.0)
)
# Seconds a process (API, executor) trusts its copy of a user's webhook signing secrets
# and granted Kafka topics: a rotation, a grant or a withdrawal applies within this.
USER_HANDLER_CACHE_SECONDS = env_float("JOBSVC_USER_HANDLER_CACHE_SECONDS", 10.0, minimum=0.0)
# Hosts the http handler may call ("api.example.com" or "*.example.com"), on ports 80 and
# 443 unless an entry names its port ("api.example.com:8443", or "host:*" for any);
# empty: none.
HTTP_HANDLER_ALLOWED_HOSTS = env_list("JOBSVC_HTTP_HANDLER_ALLOWED_HOSTS")
# Loopback, private and link-local addresses stay unreachable unless this is on (dev, tests).
HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES = env_bool(
    "JOBSVC_HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES", False
)
# The most seconds an http job's request may be given (its timeout_seconds, capped).
HTTP_HANDLER_MAX_TIMEOUT = env_float("JOBSVC_HTTP_HANDLER_MAX_TIMEOUT_SECONDS", 30.0, minimum=0.1)
# A create request resolves the hosts of its http jobs to check their addresses
# (jobsvc.handlers.resolution), each distinct host once: at most this many distinct hosts
# per request (beyond, 400), which bounds how long one bulk request can hold an API
# worker on name resolution.
HTTP_HANDLER_MAX_HOSTS_PER_REQUEST = env_int(
    "JOBSVC_HTTP_HANDLER_MAX_HOSTS_PER_REQUEST", 20, minimum=1
)
# Seconds of name resolution one create request may spend: no lookup starts after them
# (the job is refused, 400).
HTTP_HANDLER_RESOLVE_BUDGET_SECONDS = env_float(
    "JOBSVC_HTTP_HANDLER_RESOLVE_BUDGET_SECONDS", 5.0, minimum=0.1
)
# Bytes of the receiver's answer (the http handler reads the body's first bytes) kept, as
# text, in each attempt's history (GET /api/v1/me/jobs/ID/attempts). 0 keeps none.
ATTEMPT_RESPONSE_EXCERPT_BYTES = env_int("JOBSVC_ATTEMPT_RESPONSE_EXCERPT_BYTES", 1024, minimum=0)
if ATTEMPT_RESPONSE_EXCERPT_BYTES > 65536:
    raise ConfigError("JOBSVC_ATTEMPT_RESPONSE_EXCERPT_BYTES must be at most 65536")
# Topics the kafka handler may publish to at all; staff grant each user some of them
# (User.kafka_topics). A system topic here (jobs, dead letters, __*) stops start-up.
KAFKA_HANDLER_ALLOWED_TOPICS = env_list("JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS")
# The most seconds a kafka job's publish may wait for the broker's acknowledgement.
KAFKA_HANDLER_MAX_TIMEOUT = env_float("JOBSVC_KAFKA_HANDLER_MAX_TIMEOUT_SECONDS", 10.0, minimum=0.1)


# --- Processes (the API's, schedulers, executors) --------------------------------------

# Python's garbage collector in the API's and the workers' processes (jobsvc.gc_tuning):
# what start-up created is frozen, and the young generation is collected after this many
# allocations instead of 700, so full collections (tens of milliseconds each, during a
# flood) become rare. 0: Python's own settings.
GC_YOUNG_THRESHOLD = env_int("JOBSVC_GC_YOUNG_THRESHOLD", 50_000, minimum=0)


# The address the workers' /metrics, /healthz and /readyz listen on (their port:
# JOBSVC_SCHEDULER_METRICS_PORT, JOBSVC_EXECUTOR_METRICS_PORT). Loopback by default, like
# every other local server; a deployment whose Prometheus scrapes from another host or
# container sets 0.0.0.0 (or one interface's address) and keeps the port off the Internet.
WORKER_METRICS_BIND = env_str("JOBSVC_WORKER_METRICS_BIND", "127.0.0.1")
try:
    ipaddress.ip_address(WORKER_METRICS_BIND)
except ValueError:
    raise ConfigError(
        f"JOBSVC_WORKER_METRICS_BIND must be an IP address, got {WORKER_METRICS_BIND!r}"
    ) from None


# --- Scheduler workers ---------------------------------------------------------------

# ZooKeeper session timeout: how long a dead worker keeps its shards (ZK's floor is 2 ticks).
ZK_SESSION_TIMEOUT = env_float("JOBSVC_ZK_SESSION_TIMEOUT_SECONDS", 5.0, minimum=1.0)
# The znode under which the workers register and own shards; one per deployment.
ZK_ROOT = env_str("JOBSVC_ZK_ROOT", "/jobsvc")
# Seconds between the starts of a shard's dispatch rounds. A job created less than
# JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS before its due time (one created to run now)
# need not wait this long: the API tells the shard's scheduler (PostgreSQL LISTEN and
# NOTIFY, which a connection pooler in transaction mode would lose), whose next round
# starts 0.05 s after the last at the soonest. One created earlier is dispatched ahead of
# its time whatever this is. A round costs its queries, a commit and a batch to the
# broker however few jobs it finds: behind a flood on a small machine, 0.05 made jobs
# created to run now later, as smaller rounds slowed the drain (docs/design/fairness.md).
SCHEDULER_POLL_INTERVAL = env_float("JOBSVC_SCHEDULER_POLL_INTERVAL_SECONDS", 0.1, minimum=0.001)
# Jobs of one shard published and not finished, shared by weight among the users with jobs
# due: each may have its share in flight (scheduler_worker.in_flight), the rest waits in
# PostgreSQL. Executors hold what is in flight and start it in weighted fair order, so this
# bounds their memory and how long a newcomer's job waits behind others', while it must
# keep them busy: the drain needs about a second of work in flight. The jobs of a user
# whose backlog ran out stay in flight beside the others' shares until they finish, so a
# shard can hold up to about twice this for a while.
SCHEDULER_MAX_IN_FLIGHT_PER_SHARD = env_int(
    "JOBSVC_SCHEDULER_MAX_IN_FLIGHT_PER_SHARD", 2000, minimum=1
)
# Seconds of work a shard keeps in flight: its limit is the rate its jobs finish times
# this, from 100 jobs up to JOBSVC_SCHEDULER_MAX_IN_FLIGHT_PER_SHARD (the maximum until
# that rate is measured). The longer executors hold a user's jobs, the further their
# start rates drift apart before its last ones, and the more its share falls in the
# second before its last start (docs/design/fairness.md); shorter, their batches get
# smaller (more CPU per job) and they may wait for work. Jobs due at a steady rate spend
# about JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS in flight; a limit below that sends them
# closer to their due time. 0: the maximum always.
SCHEDULER_IN_FLIGHT_SECONDS = env_float("JOBSVC_SCHEDULER_IN_FLIGHT_SECONDS", 1.0, minimum=0.0)
# A queued job no executor claimed within this many seconds of its due time is dispatched
# again: the last resort for a message lost on a path nothing else detects.
SCHEDULER_QUEUED_TIMEOUT = env_float("JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS", 60.0, minimum=1.0)
# Seconds before its due time a job may be dispatched. The executor holds it until it is
# due by the database's clock, so the round, the broker and the executor's read happen
# while the job waits anyway, and it starts on time under load. A job queued this way can
# no longer be rescheduled (409), as a dispatched one; it can be cancelled. 0: dispatch
# jobs only once they are due.
SCHEDULER_DISPATCH_AHEAD = env_float("JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS", 1.0, minimum=0.0)
# Seconds between sweeps of an owned shard: running attempts whose lease expired (their
# executor died or was cut off) and lost messages are made due again.
SCHEDULER_SWEEP_INTERVAL = env_float("JOBSVC_SCHEDULER_SWEEP_INTERVAL_SECONDS", 1.0, minimum=0.1)
# Seconds a scheduler reuses the users' weights it read: a changed job_weight applies
# within this.
SCHEDULER_WEIGHT_REFRESH = env_float("JOBSVC_SCHEDULER_WEIGHT_REFRESH_SECONDS", 2.0, minimum=0.1)
# Seconds the broker gets to acknowledge a dispatch's message; after it the job is due again
# and the round counts as failed (see JOBSVC_SCHEDULER_STEP_BACK_AFTER_SECONDS).
SCHEDULER_PUBLISH_TIMEOUT = env_float("JOBSVC_SCHEDULER_PUBLISH_TIMEOUT_SECONDS", 3.0, minimum=1.0)
SCHEDULER_METRICS_PORT = env_int("JOBSVC_SCHEDULER_METRICS_PORT", 0, minimum=0)  # 0: off
# Seconds an owned shard's dispatch rounds may all fail before the worker's /readyz (on its
# metrics port) answers 503.
SCHEDULER_UNHEALTHY_AFTER = env_float("JOBSVC_SCHEDULER_UNHEALTHY_AFTER_SECONDS", 10.0, minimum=1.0)
# Seconds an owned shard's rounds may all fail (its database, or the broker, cannot be
# reached from here) while other schedulers run, before this one steps back: it leaves the
# membership, so its shards move to them, until it reaches the broker and those shards again
# (probed every second), for at most JOBSVC_SCHEDULER_STEP_BACK_SECONDS.
SCHEDULER_STEP_BACK_AFTER = env_float("JOBSVC_SCHEDULER_STEP_BACK_AFTER_SECONDS", 3.0, minimum=0.5)
# Seconds a scheduler that stepped back stays out of the membership at most (it joins
# again sooner once the broker and the shards that failed answer it, or at once if no
# other scheduler is left).
SCHEDULER_STEP_BACK = env_float("JOBSVC_SCHEDULER_STEP_BACK_SECONDS", 30.0, minimum=1.0)

# --- Executor workers ----------------------------------------------------------------

# The Kafka consumer group every executor of a deployment joins.
EXECUTOR_GROUP_ID = env_str("JOBSVC_EXECUTOR_GROUP_ID", "jobsvc-executors")
EXECUTOR_CONCURRENCY = env_int("JOBSVC_EXECUTOR_CONCURRENCY", 16, minimum=1)  # handler threads
# Messages per poll.
EXECUTOR_BATCH_SIZE = env_int("JOBSVC_EXECUTOR_BATCH_SIZE", 2000, minimum=1)
# Attempts claimed and not yet recorded, at most (bounded memory).
EXECUTOR_MAX_IN_FLIGHT = env_int("JOBSVC_EXECUTOR_MAX_IN_FLIGHT", 2000, minimum=1)
# Jobs one executor holds at most (read, not started yet): reading pauses beyond it. Above
# what the schedulers keep in flight for its partitions (shards x
# JOBSVC_SCHEDULER_MAX_IN_FLIGHT_PER_SHARD / executors), so that it holds all of it and
# the weighted fair order decides, not the broker's FIFO partitions.
EXECUTOR_READ_AHEAD = env_int("JOBSVC_EXECUTOR_READ_AHEAD", 20000, minimum=1)
# Inline jobs (no-op, kafka) taken per turn to be claimed, one transaction per shard: a job
# that goes next in the fair order starts after about one turn, so a turn's length is what
# a light user's job waits behind a flood. Smaller claims cost more transactions (commits)
# per job; 250 keeps a turn short without slowing a drain.
EXECUTOR_CLAIM_BATCH = env_int("JOBSVC_EXECUTOR_CLAIM_BATCH", 250, minimum=1)
# Messages of one partition held behind one not handled yet (a long job, a shard that
# cannot be reached): offsets are committed only up to it, so at this many the executor
# stops reading the partition (bounded memory) until half are committed.
EXECUTOR_MAX_UNCOMMITTED_PER_PARTITION = env_int(
    "JOBSVC_EXECUTOR_MAX_UNCOMMITTED_PER_PARTITION", 20000, minimum=1
)
# Seconds the dead-letter topic (and the kafka handler's topics) get to acknowledge; also
# the executor producer's message.timeout.ms, so a letter that was not acknowledged in time
# is not delivered later behind the retry's back.
EXECUTOR_PUBLISH_TIMEOUT = env_float("JOBSVC_EXECUTOR_PUBLISH_TIMEOUT_SECONDS", 10.0, minimum=1.0)
# Seconds an attempt running on a handler thread holds its job, renewed every third of it
# while it runs: if the executor dies, pauses or is cut off, the schedulers' sweeper makes
# the job due again this soon (an attempt may then run twice: handlers must be
# idempotent). Longer survives longer pauses (a stopped VM) without a second run.
EXECUTOR_LEASE_SECONDS = env_float("JOBSVC_EXECUTOR_LEASE_SECONDS", 6.0, minimum=1.0)
# Seconds a shard may fail every claim and record on an executor, while another executor
# reached it lately, before this one leaves the consumer group (its partitions, and the
# jobs it held, go to the others) for up to JOBSVC_EXECUTOR_STEP_BACK_SECONDS. A shard
# down for every executor moves nothing. 0: never leave.
EXECUTOR_STEP_BACK_AFTER = env_float("JOBSVC_EXECUTOR_STEP_BACK_AFTER_SECONDS", 3.0, minimum=0.0)
# Seconds an executor that left the consumer group stays out at most. It joins again
# sooner once the shard it left for answers, or no executor holding partitions reaches it.
EXECUTOR_STEP_BACK = env_float("JOBSVC_EXECUTOR_STEP_BACK_SECONDS", 30.0, minimum=1.0)
# Seconds an executor's clock may be off a shard database's before /readyz says so. Jobs
# are held by the database's clock whatever the offset (executor_worker.shard_clocks).
EXECUTOR_MAX_CLOCK_OFFSET = env_float(
    "JOBSVC_EXECUTOR_MAX_CLOCK_OFFSET_SECONDS", 1.0, minimum=0.001
)
# Seconds a stopping executor (SIGTERM) waits for the attempts it runs to finish and be
# recorded; those still running then are taken back by the sweeper when their lease ends.
EXECUTOR_DRAIN_TIMEOUT = env_float("JOBSVC_EXECUTOR_DRAIN_TIMEOUT_SECONDS", 30.0, minimum=0.0)
EXECUTOR_METRICS_PORT = env_int("JOBSVC_EXECUTOR_METRICS_PORT", 0, minimum=0)  # 0: off
# Seconds a shard database (claims, records) or the dead-letter topic may fail every try
# before the executor's /readyz (on its metrics port) answers 503.
EXECUTOR_UNHEALTHY_AFTER = env_float("JOBSVC_EXECUTOR_UNHEALTHY_AFTER_SECONDS", 10.0, minimum=1.0)
# Backoff before a failed attempt's retry: retry n waits between half and all of
# min(max delay, base delay x 2^(n-1)) seconds (executor_worker.retry_policy).
RETRY_BASE_DELAY = env_float("JOBSVC_RETRY_BASE_DELAY_SECONDS", 1.0, minimum=0.0)
# The most seconds a retry waits (the backoff's cap).
RETRY_MAX_DELAY = env_float("JOBSVC_RETRY_MAX_DELAY_SECONDS", 300.0, minimum=0.0)

# --- Auth ------------------------------------------------------------------------------

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Self-service sign-up (POST /api/v1/users without a staff token).
SIGNUP_ENABLED = env_bool("JOBSVC_SIGNUP_ENABLED", True)
# The smallest job_weight (a share relative to other users; no unit) any user may have,
# on every path that sets one: sign-up, staff creating users, the admin, the model's save
# (jobsvc.accounts.weights; the database enforces its hard bounds, 0.001 to 1,000,000).
# A tiny weight would make every other user's share vanish in the fair order's arithmetic.
MIN_JOB_WEIGHT = env_float(
    "JOBSVC_MIN_JOB_WEIGHT", 0.001, minimum=JOB_WEIGHT_FLOOR, maximum=JOB_WEIGHT_CEILING
)
# The largest job_weight any user may have, staff-created ones included.
MAX_JOB_WEIGHT = env_float(
    "JOBSVC_MAX_JOB_WEIGHT", 1000.0, minimum=JOB_WEIGHT_FLOOR, maximum=JOB_WEIGHT_CEILING
)
if MIN_JOB_WEIGHT > MAX_JOB_WEIGHT:
    raise ConfigError("JOBSVC_MIN_JOB_WEIGHT must not exceed JOBSVC_MAX_JOB_WEIGHT")
# Highest job_weight a user may give themselves; above it a staff caller is needed.
SELF_SERVICE_MAX_JOB_WEIGHT = env_float(
    "JOBSVC_SELF_SERVICE_MAX_JOB_WEIGHT", 1.0, minimum=MIN_JOB_WEIGHT, maximum=MAX_JOB_WEIGHT
)

# Seconds an access token is valid.
TOKEN_LIFETIME = timedelta(seconds=env_int("JOBSVC_TOKEN_LIFETIME_SECONDS", 3600, minimum=30))
# Seconds a refresh token is valid.
TOKEN_REFRESH_LIFETIME = timedelta(
    seconds=env_int("JOBSVC_TOKEN_REFRESH_LIFETIME_SECONDS", 86400, minimum=60)
)
# How long an API process trusts its cached copy of a user (active flag, staff flag,
# password, revoked tokens): deactivating a user, a new password and a logout take
# effect on every API process within this many seconds.
AUTH_USER_CACHE_SECONDS = env_float("JOBSVC_AUTH_USER_CACHE_SECONDS", 10.0, minimum=0.0)

SIMPLE_JWT = {
    "AUTH_TOKEN_CLASSES": ("rest_framework_simplejwt.tokens.SlidingToken",),
    "SLIDING_TOKEN_LIFETIME": TOKEN_LIFETIME,
    "SLIDING_TOKEN_REFRESH_LIFETIME": TOKEN_REFRESH_LIFETIME,
    # The algorithm is pinned: a token naming any other (or "none") is rejected.
    "ALGORITHM": "HS256",
    "SIGNING_KEY": JWT_SIGNING_KEY,
    "ISSUER": "jobsvc",
    "AUDIENCE": "jobsvc-api",
    "LEEWAY": 0,
    "AUTH_HEADER_TYPES": ("Bearer",),
    "USER_ID_FIELD": "id",
    "USER_ID_CLAIM": "user_id",
    "UPDATE_LAST_LOGIN": False,
    # Every token carries a digest of its user's password hash: a new password voids
    # every token issued before it (jobsvc.accounts.tokens).
    "CHECK_REVOKE_TOKEN": True,
    "REVOKE_TOKEN_CLAIM": "hash_password",
}

# --- API -------------------------------------------------------------------------------

# Who may read the API's /metrics: the peer address of the connection (never a forwarded
# header) must be in one of these networks. The default admits loopback and the private
# ranges (a Prometheus beside the API, a compose or cluster network) and refuses the
# Internet. Behind a reverse proxy every request comes from the proxy: do not route
# /metrics through it.
METRICS_ALLOWED_NETWORKS = env_networks(
    "JOBSVC_METRICS_ALLOWED_NETWORKS",
    "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7",
)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "jobsvc.accounts.authentication.CachedUserJWTAuthentication"
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["jobsvc.api.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["jobsvc.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "jobsvc.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Trusted proxies in front of the API: the client address the throttles count is the
    # one this many hops back in X-Forwarded-For (0: the connection's peer). Set it to the
    # real number: too high lets clients choose their address, too low makes every client
    # behind the proxy one address.
    "NUM_PROXIES": env_int("JOBSVC_NUM_PROXIES", 0, minimum=0),
    "UNAUTHENTICATED_USER": None,
}


# Log-ins and token refreshes per client address (an IPv6 client by its /64). This and
# the two throttles below live in the control database, so every API process shares them
# (jobsvc.accounts.throttles).
LOGIN_THROTTLE_RATE = env_rate("JOBSVC_LOGIN_THROTTLE_RATE", "30/min")
# Log-ins (the API's and the admin's) and password changes per account, from any address:
# what a guesser spread over many addresses gets. Every attempt counts, so a stranger who
# knows a username can hold its owner's log-ins to this rate as well.
LOGIN_ACCOUNT_THROTTLE_RATE = env_rate("JOBSVC_LOGIN_ACCOUNT_THROTTLE_RATE", "10/min")
# Sign-ups per client address (each is an account with its own quotas).
SIGNUP_THROTTLE_RATE = env_rate("JOBSVC_SIGNUP_THROTTLE_RATE", "30/hour")

SPECTACULAR_SETTINGS = {
    "TITLE": "jobsvc API",
    "DESCRIPTION": "Schedule one-time jobs; they run at their due time, fairly across users.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        # The rules of request bodies serializers cannot state (exactly one of execute_at
        # and delay_seconds, no unknown field, ...), so the schema says what is accepted.
        "jobsvc.api.schema_view.add_rules",
    ],
}

# Limits on what a request may ask for.
MAX_MESSAGE_BYTES = env_int("JOBSVC_MAX_MESSAGE_BYTES", 64 * 1024, minimum=1)
# How far ahead execute_at may be, in days.
MAX_SCHEDULE_HORIZON = timedelta(days=env_int("JOBSVC_MAX_SCHEDULE_HORIZON_DAYS", 365, minimum=1))
# Jobs in one bulk create request, at most.
MAX_BULK_JOBS = env_int("JOBSVC_MAX_BULK_JOBS", 1000, minimum=1)
# Bytes of a request's body, at most (beyond: 413).
MAX_REQUEST_BYTES = env_int("JOBSVC_MAX_REQUEST_BYTES", 16 * 1024 * 1024, minimum=1024)
# A bulk request of at least this many jobs is dealt over every shard and committed in two
# phases (jobsvc.jobs.spread); smaller ones, and all where this is 0, go to one shard.
# Each shard a request touches costs a commit flushed to disk, so spreading makes bulk
# creates slower; it lets every shard's scheduler dispatch the user's jobs.
BULK_SPREAD_MIN_JOBS = env_int("JOBSVC_BULK_SPREAD_MIN_JOBS", 100, minimum=0)
MAX_IDEMPOTENCY_KEY_LENGTH = 255
# How long an Idempotency-Key is remembered: a retry within this many hours of the first
# request returns its result; after it, the key is free again. The scheduler owning a
# shard deletes expired keys there (every sweep, in batches).
IDEMPOTENCY_KEY_TTL = timedelta(
    hours=env_float("JOBSVC_IDEMPOTENCY_KEY_TTL_HOURS", 24.0, minimum=0.01)
)
# Days a finished job (succeeded, failed, cancelled) stays readable; then the scheduler
# owning its shard deletes it. 0 keeps finished jobs forever. At the design's 5M jobs an
# hour, 30 days is about 3.6 billion rows across the shards.
JOB_RETENTION = timedelta(days=env_float("JOBSVC_JOB_RETENTION_DAYS", 30.0, minimum=0.0))
if JOB_RETENTION and JOB_RETENTION < IDEMPOTENCY_KEY_TTL:
    # A retry within the key's TTL must find the jobs the key names.
    raise ConfigError(
        "JOBSVC_JOB_RETENTION_DAYS must be 0 or cover JOBSVC_IDEMPOTENCY_KEY_TTL_HOURS"
    )
# Per-user limits on creating jobs (jobsvc/jobs/limits.py says how each is kept cheap).
# A user's own values in the admin (User.max_unfinished_jobs, .create_rate_per_second,
# .max_stored_bytes) replace these; 0 turns a limit off.
# Jobs a user may have scheduled, queued or running at once, across all shards.
USER_MAX_UNFINISHED_JOBS = env_int("JOBSVC_USER_MAX_UNFINISHED_JOBS", 1_000_000, minimum=0)
# Bytes a user's unfinished jobs may hold: their messages (UTF-8) and handler parameters
# (JSON). With the job cap it bounds what one account can make the shards store; 256 MiB
# is 4,096 jobs of the largest message, or a million of 256 bytes.
USER_MAX_STORED_BYTES = env_int("JOBSVC_USER_MAX_STORED_BYTES", 256 * 1024 * 1024, minimum=0)
# Jobs a user may create per second, in each API process (a bulk counts every job; a
# retry counts the jobs it schedules again, a reschedule counts as one).
USER_CREATE_RATE_PER_SECOND = env_float("JOBSVC_USER_CREATE_RATE_PER_SECOND", 1000.0, minimum=0.0)
# Seconds of that rate a user may spend at once (the token bucket's size); never less
# than one full bulk request.
USER_CREATE_BURST_SECONDS = env_float("JOBSVC_USER_CREATE_BURST_SECONDS", 100.0, minimum=1.0)
# Seconds an API process reuses its count of a user's unfinished jobs (0: count every
# create). Longer is cheaper, and lets a user overshoot by what other processes admitted.
USER_UNFINISHED_REFRESH_SECONDS = env_float(
    "JOBSVC_USER_UNFINISHED_REFRESH_SECONDS", 5.0, minimum=0.0
)
# Jobs (and attempts) in a page of a list when the request names no limit.
JOBS_PAGE_SIZE = env_int("JOBSVC_JOBS_PAGE_SIZE", 50, minimum=1)
# The most ?limit= a list request may name.
JOBS_MAX_PAGE_SIZE = env_int("JOBSVC_JOBS_MAX_PAGE_SIZE", 500, minimum=1)

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Misc ------------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
# Admin assets are served by WhiteNoise straight from the installed apps (no collectstatic).
WHITENOISE_USE_FINDERS = True

# The app's log level: DEBUG, INFO, WARNING, ERROR.
LOG_LEVEL = env_str("JOBSVC_LOG_LEVEL", "INFO")
LOG_FORMAT = env_str("JOBSVC_LOG_FORMAT", "plain")  # "plain" or "json"
if LOG_FORMAT not in {"plain", "json"}:
    raise ConfigError(f"JOBSVC_LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "worker_id": {"()": "jobsvc.logs.WorkerIdFilter"},
        "request_id": {"()": "jobsvc.logs.RequestIdFilter"},
    },
    "formatters": {
        "plain": {"()": "jobsvc.logs.PlainFormatter"},
        "json": {"()": "jobsvc.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["worker_id", "request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"kazoo": {"level": "WARNING"}},
}
