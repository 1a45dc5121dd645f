"""Gunicorn settings of the jobsvc API.

    gunicorn --config deploy/gunicorn.conf.py jobsvc.wsgi:application

Every value has an environment override, so the same file serves `make run`, the
container image and a benchmark:

    JOBSVC_API_BIND            address to listen on (default 127.0.0.1:8000)
    JOBSVC_API_WORKERS         worker processes (default 2 per CPU core)
    JOBSVC_API_THREADS         threads per worker (default 4)
    JOBSVC_API_ACCESS_LOG      access log target, "-" for stdout (default: off)
    JOBSVC_API_LOG_LEVEL       error log level (default info)
    JOBSVC_API_CONTROL_SOCKET  gunicornc control socket path (default: no control socket)
    JOBSVC_API_METRICS_DIR     where workers share Prometheus values (default: a temp dir)
"""

from __future__ import annotations

import os
import shutil
import tempfile


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = int(raw)
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


_cores = len(os.sched_getaffinity(0))

bind = [os.environ.get("JOBSVC_API_BIND", "127.0.0.1:8000")]
workers = _int_env("JOBSVC_API_WORKERS", 2 * _cores)
# Threads let a worker overlap requests that wait on PostgreSQL: a create spends about
# 1.3 of its 2 ms there, mostly the commit's WAL flush. With 2 threads per worker the
# p99 was tighter (37-54 ms at 1,021-1,045 creates/s), but in two runs out of five,
# when this VM's disk flushes slowed, throughput fell to 578-592/s: fewer requests in
# flight mean fewer commits to flush together. 4 threads keep more in flight
# (make bench ARGS='--only api_create': 1,029/s, p99 53.5 ms).
worker_class = "gthread"
threads = _int_env("JOBSVC_API_THREADS", 4)
keepalive = 5  # seconds an idle keep-alive connection stays open
timeout = 30  # seconds of silence before the master restarts a stuck worker
graceful_timeout = 20  # seconds workers get to finish in-flight requests on SIGTERM
# Workers are not recycled: each recycled worker would leave its metric files behind in
# PROMETHEUS_MULTIPROC_DIR (thousands a day at peak), and every scrape reads them all.
max_requests = 0
# Not preloaded: each worker opens its own database, Kafka and ZooKeeper clients after
# the fork, never sharing a socket with the master.
preload_app = False
# The heartbeat file on tmpfs: a slow disk must not make the master kill healthy workers.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None

accesslog = os.environ.get("JOBSVC_API_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("JOBSVC_API_LOG_LEVEL", "info")
proc_name = "jobsvc-api"

# Gunicorn's control socket defaults to one path per user, which two stacks would fight
# over: only create one where the launcher says.
_control_socket = os.environ.get("JOBSVC_API_CONTROL_SOCKET")
if _control_socket:
    control_socket = _control_socket
else:
    control_socket_disable = True

# Prometheus metrics across worker processes: prometheus_client keeps each worker's values
# in files under PROMETHEUS_MULTIPROC_DIR and /metrics sums them. The directory is made
# fresh for each master, and a dead worker's gauges are dropped.
_metrics_dir = os.environ.get("JOBSVC_API_METRICS_DIR") or tempfile.mkdtemp(
    prefix="jobsvc-api-metrics-"
)
shutil.rmtree(_metrics_dir, ignore_errors=True)
os.makedirs(_metrics_dir, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir
os.environ["JOBSVC_METRICS_PROCESS_ROOT_PID"] = str(os.getpid())


def child_exit(server, worker) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server) -> None:
    shutil.rmtree(_metrics_dir, ignore_errors=True)
