"""Gunicorn settings of the jobsvc API.

    gunicorn --config deploy/gunicorn.conf.py jobsvc.wsgi:application

Every value has an environment override, so the same file serves `make run`, the
container image and a benchmark:

    JOBSVC_API_BIND            address to listen on (default 127.0.0.1:8000)
    JOBSVC_API_WORKERS         worker processes (default 2 per CPU core)
    JOBSVC_API_THREADS         threads per worker (default 1: sync workers; more: gthread)
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
# One thread per worker (gunicorn's sync worker) unless JOBSVC_API_THREADS says more
# (then its gthread worker). On the 2-core machine with the whole stack on it, 4 workers
# (python -m tools.bench.api_create against `make run`, 16 connections, 4 runs of 12 s):
#   sync, 1 thread:       1,198-1,236 creates/s, p99 19.7-26.1 ms
#   gthread, 4 threads:   784-1,250 creates/s, p99 30.8-68.4 ms
#   gthread, 1 thread:    972-1,053 creates/s, p99 40.1-47.8 ms
# A create is mostly Python (python -m tools.bench.create_cpu: 0.63-0.75 ms of CPU, of
# 1.1-1.2 ms wall in four runs of five), so threads add GIL hand-offs and little
# overlap; and a gthread worker keeps its
# keep-alive connections, so requests queue behind whichever worker holds the most, where
# sync workers take every request from the shared accept queue. Sync workers serve one
# request at a time, so a slow client holds a worker: gunicorn wants a buffering reverse
# proxy (nginx, a load balancer) in front of them. docker-compose.yml publishes gunicorn
# directly and so runs 4 threads.
threads = _int_env("JOBSVC_API_THREADS", 1)
worker_class = "gthread" if threads > 1 else "sync"
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
