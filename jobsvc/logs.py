"""Log formatting: plain text for people, one JSON object per line for log pipelines.

``JOBSVC_LOG_FORMAT=json`` switches to JSON. Records carry the context the code passes in
``extra`` (job id, shard, epoch, action), the worker id of the process and, in the API,
the id of the request being served (``X-Request-ID``), so a log search can follow one
job, one shard or one request across workers. Per-job events are logged at DEBUG: at
millions of jobs an hour, INFO is for state changes of workers and shards.
"""

from __future__ import annotations

import json
import logging
import os
from contextvars import ContextVar
from datetime import UTC, datetime

CONTEXT_FIELDS = ("worker_id", "request_id", "job_id", "shard", "epoch", "user_id", "action")
WORKER_ID_ENV = "JOBSVC_WORKER_ID"

# The id of the API request this thread is serving ("" outside a request); set by
# jobsvc.api.middleware.RequestIdMiddleware for the length of the request.
request_id: ContextVar[str] = ContextVar("request_id", default="")


class WorkerIdFilter(logging.Filter):
    """Stamps every record with this process's worker id (set by the run_* commands)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker_id"):
            record.worker_id = os.environ.get(WORKER_ID_ENV, "")
        return True


class RequestIdFilter(logging.Filter):
    """Stamps every record with the id of the request being served, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_id.get()
        return True


class PlainFormatter(logging.Formatter):
    """``time LEVEL logger [worker request] message``; either id is left out when unset."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(context)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = (getattr(record, "worker_id", ""), getattr(record, "request_id", ""))
        record.context = " ".join(value for value in ids if value)
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
