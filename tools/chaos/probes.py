"""What a client sees while a fault holds: the bulk create a fault's check sends.

`BulkProbe` creates `PROBE_JOBS` no-op jobs in one request, as a user of its own, with an
Idempotency-Key, and never retries: that many are dealt over every shard by two-phase
commit (`JOBSVC_BULK_SPREAD_MIN_JOBS`), so the request touches the shard a fault made
unreachable or unwritable. Such a fault expects 503 within `PROBE_TIMEOUT`, and that the
request created nothing: after the campaign no job of the probe's user may exist that was
not acknowledged (`unacknowledged`). Jobs of an acknowledged probe are judged like the
workload's (they must run, once, not early).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from tools.loadgen.client import ApiClient, ConnectionFailed

from .faults import Check
from .history import ShardProbe
from .workload import JOB_TIMEOUT_SECONDS, Created, sign_up

PROBE_JOBS = 200  # at least JOBSVC_BULK_SPREAD_MIN_JOBS (100): dealt over every shard
PROBE_TIMEOUT = 10.0  # seconds a create may take to answer while a shard is unreachable
PROBE_LEAD_SECONDS = 2.0  # the probe's jobs are due this long after the request
MESSAGE_PREFIX = "chaos probe "  # + the request's number


@dataclass(frozen=True)
class ProbeAnswer:
    number: int  # of the probe's requests, from 0; in its jobs' message
    sent_at: float  # Unix seconds
    status: int | None  # None: no answer within PROBE_TIMEOUT (or the connection failed)
    seconds: float
    jobs: int  # created, when acknowledged
    error: str = ""

    def describe(self) -> str:
        if self.status is None:
            return f"no answer after {self.seconds:.1f} s ({self.error})"
        created = f", {self.jobs} jobs created" if self.jobs else ""
        return f"{self.status} in {self.seconds:.1f} s{created}"


class BulkProbe:
    def __init__(self, *, api_url: str) -> None:
        self._api_url = api_url
        self._token = ""
        self.user_id: int | None = None
        self.created: list[Created] = []  # acknowledged probes' jobs
        self.answers: list[ProbeAnswer] = []

    def start(self) -> BulkProbe:
        self._token, self.user_id = sign_up(self._api_url, label="probe")
        return self

    def bulk_create(self) -> ProbeAnswer:
        number, sent_at = len(self.answers), time.time()
        execute_at = datetime.fromtimestamp(sent_at + PROBE_LEAD_SECONDS, UTC)
        job = {
            "message": f"{MESSAGE_PREFIX}{number}",
            "execute_at": execute_at.isoformat(),
            "timeout_seconds": JOB_TIMEOUT_SECONDS,
        }
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {self._token}",
            "Idempotency-Key": uuid.uuid4().hex,
        }
        client = ApiClient(self._api_url, timeout=PROBE_TIMEOUT)
        started = time.monotonic()
        try:
            response = client.request(
                "POST", "/api/v1/me/jobs", body=json.dumps([job] * PROBE_JOBS).encode(),
                headers=headers,
            )  # fmt: skip
        except ConnectionFailed as exc:
            answer = ProbeAnswer(number, sent_at, None, time.monotonic() - started, 0, str(exc))
        else:
            jobs = response.body["data"] if response.ok else []
            now = time.time()
            self.created.extend(
                Created(
                    job_id=item["id"],
                    shard=item["shard_id"],
                    handler=item["handler"],
                    execute_at=datetime.fromisoformat(item["execute_at"]).timestamp(),
                    acknowledged_at=now,
                )
                for item in jobs
            )
            answer = ProbeAnswer(number, sent_at, response.status, response.seconds, len(jobs))
        finally:
            client.close()
        self.answers.append(answer)
        return answer


@dataclass(frozen=True)
class Observers:
    """What a fault's check may use: the API (as the probe's user) and the shards."""

    probe: BulkProbe
    shards: ShardProbe


def answered_unavailable(answer: ProbeAnswer, *, what: str) -> Check:
    """503 within `PROBE_TIMEOUT`, nothing created."""
    ok = answer.status == 503 and answer.seconds <= PROBE_TIMEOUT
    return Check(f"{what}: 503 within {PROBE_TIMEOUT:g} s", ok, answer.describe())


def unacknowledged(rows: dict[str, str], probe: BulkProbe) -> dict[int, int]:
    """Per request (`ProbeAnswer.number`), how many of the probe user's jobs exist though
    no create acknowledged them. `rows` maps each of that user's job ids to its message."""
    acknowledged = {job.job_id for job in probe.created}
    counts: dict[int, int] = {}
    for job_id, message in rows.items():
        if job_id not in acknowledged:
            number = int(message.removeprefix(MESSAGE_PREFIX))
            counts[number] = counts.get(number, 0) + 1
    return counts
