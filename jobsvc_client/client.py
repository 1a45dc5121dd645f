"""A typed client of the jobsvc REST API (``/api/v1``), on the standard library only.

It covers every operation of the API's OpenAPI schema (``OPERATIONS``;
tests/client/test_schema_contract.py fails when the schema has one it lacks). ``Client``
logs in, refreshes its token before it expires, and retries a request the API answered
429 or 503 (after the ``Retry-After`` it names), or could not be reached for when the
request is safe to send twice: reads, cancels, reschedules to a given time, and creates
(every create carries an ``Idempotency-Key``, so a retried create returns the first
result).
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
from jobsvc_client.models import (
    Account,
    Attempt,
    Job,
    JobSpec,
    Token,
    WebhookSecret,
    format_time,
    parse_time,
)
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
# tests/client/test_schema_contract.py checks each against /api/v1/schema/, and that the
# schema has no operation missing here.
OPERATIONS = {
    "sign_up": ("post", "/api/v1/users"),
    "login": ("post", "/api/v1/auth/login"),
    "refresh": ("post", "/api/v1/auth/refresh"),
    "logout": ("post", "/api/v1/auth/logout"),
    "me": ("get", "/api/v1/me"),
    "password": ("post", "/api/v1/me/password"),
    "webhook_secret": ("get", "/api/v1/me/webhook-secret"),
    "webhook_secret_rotate": ("post", "/api/v1/me/webhook-secret/rotate"),
    "jobs_create": ("post", "/api/v1/me/jobs"),
    "jobs_list": ("get", "/api/v1/me/jobs"),
    "jobs_get": ("get", "/api/v1/me/jobs/{job_id}"),
    "jobs_attempts": ("get", "/api/v1/me/jobs/{job_id}/attempts"),
    "jobs_cancel": ("post", "/api/v1/me/jobs/{job_id}/cancel"),
    "jobs_reschedule": ("post", "/api/v1/me/jobs/{job_id}/reschedule"),
    "jobs_retry": ("post", "/api/v1/me/jobs/{job_id}/retry"),
    "jobs_cancel_many": ("post", "/api/v1/me/jobs/cancel"),
    "jobs_retry_many": ("post", "/api/v1/me/jobs/retry"),
    "jobs_redrive": ("post", "/api/v1/jobs/redrive"),
}
LIST_PARAMETERS = ("status", "execute_at_from", "execute_at_to", "cursor", "limit")
PAGE_PARAMETERS = ("cursor", "limit")


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True)
class AttemptPage:
    attempts: list[Attempt]
    next_cursor: str | None


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk action applies to: at least one criterion (the API refuses none).

    ``status`` empty: every status the action applies to."""

    status: Sequence[str] = ()
    execute_at_from: datetime | None = None  # inclusive
    execute_at_to: datetime | None = None  # exclusive
    handler: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.status:
            body["status"] = list(self.status)
        if self.execute_at_from is not None:
            body["execute_at_from"] = format_time(self.execute_at_from)
        if self.execute_at_to is not None:
            body["execute_at_to"] = format_time(self.execute_at_to)
        if self.handler is not None:
            body["handler"] = self.handler
        return body


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

    def logout(self) -> None:
        """Revoke the token the client holds (the API answers 204); the client forgets it."""
        if self.token is None:
            raise NotLoggedIn("log in first")
        self._call("logout", auth=False, headers=self._bearer(), retry_safe=False, empty=True)
        self.token = None

    def me(self) -> Account:
        """Who the token belongs to: weight, limits, and unfinished jobs."""
        return Account.from_json(self._call("me"))

    def change_password(self, *, current_password: str, new_password: str) -> None:
        body = {"current_password": current_password, "new_password": new_password}
        self._call("password", body=body, retry_safe=False, empty=True)

    def webhook_secret(self) -> WebhookSecret:
        """The secret your http jobs' deliveries are signed with; a receiver verifies them
        with it (Standard Webhooks)."""
        return WebhookSecret.from_json(self._call("webhook_secret"))

    def rotate_webhook_secret(self) -> WebhookSecret:
        """Replace the signing secret; the old one signs too until ``previous_expires_at``,
        so receivers can switch over without refusing a delivery."""
        return WebhookSecret.from_json(self._call("webhook_secret_rotate", retry_safe=False))

    # --- jobs ------------------------------------------------------------------------------

    def create_job(
        self,
        *,
        message: str,
        execute_at: datetime | None = None,
        delay_seconds: float | None = None,
        handler: str | None = None,
        handler_params: dict[str, Any] | None = None,
        max_attempts: int | None = None,
        timeout_seconds: float | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Schedule a job at ``execute_at``, or ``delay_seconds`` from when the API receives
        it (exactly one)."""
        spec = JobSpec(
            message,
            execute_at,
            handler,
            handler_params,
            max_attempts,
            timeout_seconds,
            priority=priority,
            delay_seconds=delay_seconds,
        )
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

    def reschedule_job(
        self,
        job_id: str,
        *,
        execute_at: datetime | None = None,
        delay_seconds: float | None = None,
        message: str | None = None,
    ) -> Job:
        """Move a job that has not been dispatched, and/or give it a new message (a
        ``Conflict`` once it is queued, running or finished)."""
        body: dict[str, Any] = {}
        if execute_at is not None:
            body["execute_at"] = format_time(execute_at)
        if delay_seconds is not None:
            body["delay_seconds"] = delay_seconds
        if message is not None:
            body["message"] = message
        # "In N seconds" moves again if sent twice; a given time does not.
        data = self._call(
            "jobs_reschedule", job_id=job_id, body=body, retry_safe=delay_seconds is None
        )
        return Job.from_json(data)

    def retry_job(self, job_id: str, *, extra_attempts: int | None = None) -> Job:
        """Give a failed job new attempts, due now (a ``Conflict`` unless it failed)."""
        body = {} if extra_attempts is None else {"extra_attempts": extra_attempts}
        return Job.from_json(self._call("jobs_retry", job_id=job_id, body=body, retry_safe=False))

    def cancel_jobs(self, job_filter: JobFilter) -> int:
        """Cancel every job of the caller that matches and has not started; how many."""
        data = self._call("jobs_cancel_many", body=job_filter.to_json())
        return int(data["cancelled"])

    def retry_jobs(self, job_filter: JobFilter, *, extra_attempts: int | None = None) -> int:
        """Retry every failed job of the caller that matches; how many are scheduled again."""
        body = _with_extra_attempts(job_filter.to_json(), extra_attempts)
        return int(self._call("jobs_retry_many", body=body, retry_safe=False)["retried"])

    def redrive_jobs(
        self,
        job_filter: JobFilter,
        *,
        user_id: int | None = None,
        extra_attempts: int | None = None,
    ) -> int:
        """Staff only: retry the failed jobs of every user (or ``user_id``) that match."""
        body = _with_extra_attempts(job_filter.to_json(), extra_attempts)
        if user_id is not None:
            body["user_id"] = user_id
        return int(self._call("jobs_redrive", body=body, retry_safe=False)["retried"])

    def attempts_page(
        self, job_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> AttemptPage:
        """One page of the job's attempts, newest first."""
        query: dict[str, str] = {}
        if cursor is not None:
            query["cursor"] = cursor
        if limit is not None:
            query["limit"] = str(limit)
        body = self._call("jobs_attempts", job_id=job_id, query=query, envelope=True)
        attempts = [Attempt.from_json(item) for item in body["data"]]
        return AttemptPage(attempts, (body.get("pagination") or {}).get("next_cursor"))

    def iter_attempts(self, job_id: str, *, page_size: int | None = None) -> Iterator[Attempt]:
        """Every attempt of the job, newest first, a page at a time."""
        cursor = None
        while True:
            page = self.attempts_page(job_id, cursor=cursor, limit=page_size)
            yield from page.attempts
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

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
        empty: bool = False,  # the operation answers 204 with no body
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
            return self._result(response, envelope=envelope, empty=empty)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _result(self, response: Response, *, envelope: bool, empty: bool = False) -> Any:
        try:
            parsed = json.loads(response.body) if response.body else None
        except ValueError:
            parsed = None
        if response.status >= 400:
            raise api_error(response.status, parsed)
        if empty:
            return None
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


def _with_extra_attempts(body: dict[str, Any], extra_attempts: int | None) -> dict[str, Any]:
    return body if extra_attempts is None else {**body, "extra_attempts": extra_attempts}


def _idempotency(key: str | None) -> dict[str, str]:
    """Every create carries a key, so a create the client retries is never made twice."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}
