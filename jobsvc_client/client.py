"""A typed client of the jobsvc REST API (``/api/v1``), on the standard library only.

``Client`` logs in, refreshes its token before it expires, and retries a request the API
answered 429 or 503 (after the ``Retry-After`` it names) or could not be reached for, when
the request is safe to send twice: reads, cancels, and creates (every create carries an
``Idempotency-Key``, so a retried create returns the first result).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from jobsvc_client.errors import (
    NotLoggedIn,
    TransportError,
    WaitTimeout,
    api_error,
)
from jobsvc_client.models import Job, JobSpec, Token, format_time, parse_time
from jobsvc_client.transport import Response, Transport, UrllibTransport

API_PREFIX = "/api/v1"
REQUEST_TIMEOUT_SECONDS = 30.0  # per HTTP request
MAX_RETRIES = 5  # further attempts after a 429, a 503 or an unreachable API
RETRY_BASE_DELAY_SECONDS = 0.5  # doubled per retry when the API names no Retry-After
RETRY_MAX_DELAY_SECONDS = 30.0  # cap on any one wait, whatever Retry-After says
REFRESH_BEFORE = timedelta(seconds=60)  # refresh a token this long before it expires
WAIT_POLL_SECONDS = 0.5  # between reads of a job being waited for
RETRYABLE_STATUSES = frozenset({429, 503})

# Every operation the client uses: (method, path as the OpenAPI schema names it).
# tests/client/test_schema_contract.py checks each against /api/v1/schema/.
OPERATIONS = {
    "sign_up": ("post", "/api/v1/users"),
    "login": ("post", "/api/v1/auth/login"),
    "refresh": ("post", "/api/v1/auth/refresh"),
    "jobs_create": ("post", "/api/v1/me/jobs"),
    "jobs_list": ("get", "/api/v1/me/jobs"),
    "jobs_get": ("get", "/api/v1/me/jobs/{job_id}"),
    "jobs_cancel": ("post", "/api/v1/me/jobs/{job_id}/cancel"),
}
LIST_PARAMETERS = ("status", "execute_at_from", "execute_at_to", "cursor", "limit")


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_cursor: str | None


class Client:
    """One user's session with the API.

    ``on_token`` is called with every token the client obtains (log-in and refresh), e.g.
    to save it. ``clock`` and ``sleep`` are injected for testing.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: Token | None = None,
        transport: Transport | None = None,
        on_token: Callable[[Token], None] | None = None,
        refresh_before: timedelta = REFRESH_BEFORE,
        max_retries: int = MAX_RETRIES,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._transport = transport or UrllibTransport()
        self._on_token = on_token
        self._refresh_before = refresh_before
        self._max_retries = max_retries
        self._timeout = timeout
        self._clock = clock
        self._sleep = sleep

    # --- accounts --------------------------------------------------------------------------

    def sign_up(self, *, username: str, password: str, job_weight: float | None = None) -> dict:
        body: dict[str, Any] = {"username": username, "password": password}
        if job_weight is not None:
            body["job_weight"] = job_weight
        return self._call("sign_up", body=body, auth=False, retry_safe=False)

    def login(self, *, username: str, password: str) -> Token:
        data = self._call("login", body={"username": username, "password": password}, auth=False)
        return self._took(data)

    def refresh(self) -> Token:
        if self.token is None:
            raise NotLoggedIn("log in first")
        data = self._call("refresh", auth=False, headers=self._bearer())
        return self._took(data)

    # --- jobs ------------------------------------------------------------------------------

    def create_job(
        self,
        *,
        message: str,
        execute_at: datetime,
        handler: str | None = None,
        handler_params: dict[str, Any] | None = None,
        max_attempts: int | None = None,
        timeout_seconds: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        spec = JobSpec(message, execute_at, handler, handler_params, max_attempts, timeout_seconds)
        data = self._call("jobs_create", body=spec.to_json(), headers=_idempotency(idempotency_key))
        return Job.from_json(data)

    def create_jobs(
        self, specs: Sequence[JobSpec], *, idempotency_key: str | None = None
    ) -> list[Job]:
        """Create all of ``specs`` or none (one request; the API caps how many)."""
        body = [spec.to_json() for spec in specs]
        data = self._call("jobs_create", body=body, headers=_idempotency(idempotency_key))
        return [Job.from_json(item) for item in data]

    def get_job(self, job_id: str) -> Job:
        return Job.from_json(self._call("jobs_get", job_id=job_id))

    def cancel_job(self, job_id: str) -> Job:
        return Job.from_json(self._call("jobs_cancel", job_id=job_id))

    def list_page(
        self,
        *,
        status: Iterable[str] = (),
        execute_at_from: datetime | None = None,
        execute_at_to: datetime | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page:
        query: dict[str, str] = {}
        if statuses := ",".join(status):
            query["status"] = statuses
        if execute_at_from is not None:
            query["execute_at_from"] = format_time(execute_at_from)
        if execute_at_to is not None:
            query["execute_at_to"] = format_time(execute_at_to)
        if cursor is not None:
            query["cursor"] = cursor
        if limit is not None:
            query["limit"] = str(limit)
        body = self._call("jobs_list", query=query, envelope=True)
        jobs = [Job.from_json(item) for item in body["data"]]
        return Page(jobs, (body.get("pagination") or {}).get("next_cursor"))

    def iter_jobs(
        self,
        *,
        status: Iterable[str] = (),
        execute_at_from: datetime | None = None,
        execute_at_to: datetime | None = None,
        page_size: int | None = None,
    ) -> Iterator[Job]:
        """Every matching job, newest first, fetching one page at a time as it is consumed."""
        statuses = tuple(status)
        cursor = None
        while True:
            page = self.list_page(
                status=statuses,
                execute_at_from=execute_at_from,
                execute_at_to=execute_at_to,
                cursor=cursor,
                limit=page_size,
            )
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def wait(
        self, job_id: str, *, timeout: float = 60.0, poll_interval: float = WAIT_POLL_SECONDS
    ) -> Job:
        """The job once it has finished (succeeded, failed or cancelled)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job.finished:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.status} after {timeout:g} s")
            self._sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))

    # --- plumbing --------------------------------------------------------------------------

    def _took(self, data: dict[str, Any]) -> Token:
        self.token = Token(data["token"], parse_time(data["expire"]))
        if self._on_token is not None:
            self._on_token(self.token)
        return self.token

    def _bearer(self) -> dict[str, str]:
        assert self.token is not None
        return {"Authorization": f"Bearer {self.token.token}"}

    def _fresh_token_headers(self) -> dict[str, str]:
        if self.token is None:
            raise NotLoggedIn("log in first")
        if self.token.expire - self._clock() <= self._refresh_before:
            self.refresh()
        return self._bearer()

    def _call(
        self,
        operation: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        job_id: str | None = None,
        auth: bool = True,
        retry_safe: bool = True,
        envelope: bool = False,
    ) -> Any:
        method, path = OPERATIONS[operation]
        if job_id is not None:
            path = path.replace("{job_id}", quote(job_id, safe=""))
        url = self.base_url + path + (f"?{urlencode(query)}" if query else "")
        all_headers = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        for attempt in range(self._max_retries + 1):
            if auth:
                all_headers.update(self._fresh_token_headers())
            last = attempt == self._max_retries
            try:
                response = self._transport.send(
                    method.upper(), url, headers=all_headers, body=data, timeout=self._timeout
                )
            except TransportError:
                if last or not retry_safe:
                    raise
                self._sleep(self._backoff(attempt, None))
                continue
            if response.status in RETRYABLE_STATUSES and not last:
                self._sleep(self._backoff(attempt, response))
                continue
            return self._result(response, envelope=envelope)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _result(self, response: Response, *, envelope: bool) -> Any:
        try:
            parsed = json.loads(response.body) if response.body else None
        except ValueError:
            parsed = None
        if response.status >= 400:
            raise api_error(response.status, parsed)
        if not isinstance(parsed, dict) or "data" not in parsed:
            raise api_error(
                response.status,
                {"error": {"code": "bad_response", "message": "not a jobsvc envelope"}},
            )
        return parsed if envelope else parsed["data"]

    def _backoff(self, attempt: int, response: Response | None) -> float:
        """Seconds before retry ``attempt + 1``: never less than the API's ``Retry-After``.

        The exponential delay is a floor too, because a throttle rounds the seconds it
        names down (``Retry-After: 0`` while a fraction of a second remains).
        """
        delay = RETRY_BASE_DELAY_SECONDS * 2**attempt
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is not None and retry_after.strip().isdigit():
            delay = max(delay, float(retry_after.strip()))
        return min(delay, RETRY_MAX_DELAY_SECONDS)


def _idempotency(key: str | None) -> dict[str, str]:
    """Every create carries a key, so a create the client retries is never made twice."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}
