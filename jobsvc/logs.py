"""Log formatting: plain text for people, one JSON object per line for log pipelines.

``JOBSVC_LOG_FORMAT=json`` switches to JSON. Records carry the context the code passes in
``extra`` (job id, shard, epoch, action) and the worker id of the process, so a log
search can follow one job or one shard across workers. Per-job events are logged at
DEBUG: at millions of jobs an hour, INFO is for state changes of workers and shards.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime

CONTEXT_FIELDS = ("worker_id", "job_id", "shard", "epoch", "user_id", "action")
WORKER_ID_ENV = "JOBSVC_WORKER_ID"


class WorkerIdFilter(logging.Filter):
    """Stamps every record with this process's worker id (set by the run_* commands)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker_id"):
            record.worker_id = os.environ.get(WORKER_ID_ENV, "")
        return True


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
