"""The ``default`` handler: record the job's message in the log, and succeed.

This is the seed's "Hello world" job. It logs at DEBUG, not INFO: at thousands of jobs a
second an INFO line per job would drown every other log line. It takes no parameters.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import InvalidHandlerParams

logger = logging.getLogger(__name__)

_PREVIEW_CHARS = 200  # of the message, in the log line; messages may be 64 KiB


class RecordHandler:
    name: ClassVar[str] = "default"
    inline: ClassVar[bool] = True  # never blocks: the executor may run it on its loop thread

    def validate_params(self, params: Any) -> dict[str, Any]:
        if params is None or params == {}:
            return {}
        if not isinstance(params, dict):
            raise InvalidHandlerParams("handler_params must be a JSON object.")
        names = ", ".join(sorted(map(str, params)))
        raise InvalidHandlerParams(f"The default handler takes no parameters; got: {names}.")

    def handle(self, job: JobContext) -> None:
        self.validate_params(job.params)
        logger.debug(
            "job %s attempt %d says %r (%d characters)",
            job.job_id,
            job.attempt,
            job.message[:_PREVIEW_CHARS],
            len(job.message),
            extra={"job_id": job.job_id, "shard_id": job.shard_id, "action": "record"},
        )
