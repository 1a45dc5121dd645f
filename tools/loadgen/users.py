"""The run's users: created with their weights in the control database, then logged in.

The load generator runs next to the system (it has the database settings), so it creates
its users through the ORM: a weight above the self-service cap would need a staff token
through the API. Every user of a run shares one random password, hashed once. Tokens
come from the API's login; a login the API throttles (``JOBSVC_LOGIN_THROTTLE_RATE``, 30
a minute per address by default) is issued in process instead, the same token the login
would return, so a run with many users does not wait for the throttle.
"""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.hashers import make_password

from jobsvc.accounts.models import User
from jobsvc.accounts.tokens import token_issue
from jobsvc.accounts.usernames import username_key
from tools.loadgen.client import ApiClient, ConnectionFailed
from tools.loadgen.errors import LoadgenError, LoginFailed

LOGIN_THREADS = 4  # concurrent logins (each costs the API one password hash)


@dataclass(frozen=True)
class RunUser:
    id: int
    username: str
    weight: float
    token: str


@dataclass(frozen=True)
class LoggedIn:
    users: list[RunUser]
    issued_in_process: int  # logins the API throttled


def weights_for(*, users: int, weights: list[float]) -> list[float]:
    """``weights`` cycled over ``users`` users: 5 users, [1, 2] -> [1, 2, 1, 2, 1]."""
    if not weights:
        raise LoadgenError("at least one weight is needed")
    for weight in weights:
        if not settings.MIN_JOB_WEIGHT <= weight <= settings.MAX_JOB_WEIGHT:
            raise LoadgenError(
                f"weight {weight:g} is out of range [{settings.MIN_JOB_WEIGHT:g}, "
                f"{settings.MAX_JOB_WEIGHT:g}] (JOBSVC_MIN_JOB_WEIGHT, JOBSVC_MAX_JOB_WEIGHT)"
            )
    return [weights[n % len(weights)] for n in range(users)]


def users_create_and_log_in(*, api: str, run_id: str, weights: list[float]) -> LoggedIn:
    password = secrets.token_urlsafe(18)
    hashed = make_password(password)  # once for all: PBKDF2 costs a third of a second
    names = [f"loadgen-{run_id}-{n}" for n in range(len(weights))]
    users = User.objects.bulk_create(  # bulk_create skips save(): set the key it would
        [
            User(username=name, username_key=username_key(name), job_weight=weight, password=hashed)
            for name, weight in zip(names, weights, strict=True)
        ]
    )
    with ThreadPoolExecutor(max_workers=LOGIN_THREADS) as pool:
        results = list(pool.map(lambda user: user_log_in(api, user, password), users))
    return LoggedIn(
        users=[user for user, _ in results],
        issued_in_process=sum(1 for _, throttled in results if throttled),
    )


def user_log_in(api: str, user: User, password: str) -> tuple[RunUser, bool]:
    """Log in through the API; a throttled login (429) gets its token in process (True)."""
    client = ApiClient(api)
    try:
        response = client.post(
            "/api/v1/auth/login", {"username": user.username, "password": password}
        )
    except ConnectionFailed as exc:
        raise LoginFailed(f"cannot log {user.username} in at {api}: {exc}") from exc
    finally:
        client.close()
    throttled = response.status == 429
    if throttled:
        token = token_issue(user=user).token
    elif response.ok and isinstance(response.body, dict):
        token = response.body["data"]["token"]
    else:
        raise LoginFailed(f"login of {user.username} answered {response.status}: {response.body}")
    return RunUser(user.pk, user.username, user.job_weight, token), throttled
