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
"""

from __future__ import annotations

import os


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
# Threads let a worker overlap requests that wait on PostgreSQL or Kafka.
worker_class = "gthread"
threads = _int_env("JOBSVC_API_THREADS", 4)
keepalive = 5  # seconds an idle keep-alive connection stays open
timeout = 30  # seconds of silence before the master restarts a stuck worker
graceful_timeout = 20  # seconds workers get to finish in-flight requests on SIGTERM
# Recycle workers now and then, at different times, so a slow leak never takes all at once.
max_requests = 20000
max_requests_jitter = 2000
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
