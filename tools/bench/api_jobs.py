"""Creating a scenario's jobs through the public API, as users do: bulk requests of up to
``BULK`` jobs, sent concurrently, all done before the first job is due."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TypeVar

from jobsvc.accounts.models import User
from jobsvc.accounts.tokens import token_issue

BULK = 1000  # jobs per create request: what the API takes at most
CREATE_LEAD = 5.0  # seconds from the last create request until the jobs are due
CREATE_RATE_FLOOR = 2_000  # jobs/s bulk creates reach at least, on a busy 2-core machine

Request = TypeVar("Request")


def tokens_for(users: Iterable[int]) -> dict[int, str]:
    """An access token for each user."""
    return {user: token_issue(user=User.objects.get(pk=user)).token for user in users}


def job_body(due: float) -> dict:
    at = datetime.fromtimestamp(due, UTC).isoformat().replace("+00:00", "Z")
    return {"message": "fairness", "execute_at": at}


def post_jobs(api: str, token: str, body) -> None:
    request = urllib.request.Request(
        f"{api}/api/v1/me/jobs",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        if response.status != 201:
            raise RuntimeError(f"create answered {response.status}")


def create_before(
    due: float, create: Callable[[Request], None], requests: Iterable[Request], *, threads: int
) -> None:
    """``create`` each of ``requests``, ``threads`` at a time; raise the first request's
    error, or if they were not all done by ``due`` (the scenario would measure jobs that
    were late before they existed)."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(create, requests))  # list(): raise the first failed request's error
    if time.time() > due:
        raise RuntimeError("creating the jobs took longer than the lead before their due time")
