"""Revoking tokens: log-out, refresh, a password change, deactivation.

POST /api/v1/auth/logout revokes the token it carries; POST /api/v1/me/password revokes
every token of the user issued before; a refresh revokes the token it replaces. In the
answering process at once (here, in process); in every other within
AUTH_USER_CACHE_SECONDS (tests/integration/test_shared_limits.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import SlidingToken

from jobsvc.accounts.authentication import user_cache
from jobsvc.accounts.models import User
from tests.api.support import JOBS_URL, LOGIN_URL, REFRESH_URL, error_of
from tests.conftest import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db(databases="__all__")

LOGOUT_URL = "/api/v1/auth/logout"
PASSWORD_URL = "/api/v1/me/password"
NEW_PASSWORD = "another long passphrase 77"


def log_in(user, password: str = DEFAULT_PASSWORD) -> str:
    response = APIClient().post(
        LOGIN_URL, {"username": user.username, "password": password}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()["data"]["token"]


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def works(token: str) -> bool:
    status = bearer(token).get(JOBS_URL).status_code
    assert status in (200, 401)
    return status == 200


def change_password(token: str, current: str = DEFAULT_PASSWORD, new: str = NEW_PASSWORD):
    body = {"current_password": current, "new_password": new}
    return bearer(token).post(PASSWORD_URL, body, format="json")


def failed_logins(via: str = "api") -> float:
    return REGISTRY.get_sample_value("jobsvc_logins_failed_total", {"via": via}) or 0.0


# --- log-out ----------------------------------------------------------------------------


def test_logout_answers_204_and_the_token_stops_working(user):
    token = log_in(user)
    assert works(token)

    response = bearer(token).post(LOGOUT_URL)

    assert response.status_code == 204
    assert response.content == b""
    error = error_of(bearer(token).get(JOBS_URL), 401, "token_not_valid")
    assert "revoked" in error["message"]


def test_logout_leaves_the_users_other_tokens_working(user):
    kept, dropped = log_in(user), log_in(user)

    bearer(dropped).post(LOGOUT_URL)

    assert works(kept)
    assert not works(dropped)


def test_a_logged_out_token_cannot_be_refreshed(user):
    token = log_in(user)
    bearer(token).post(LOGOUT_URL)

    error_of(bearer(token).post(REFRESH_URL), 401, "token_not_valid")


def test_logout_revokes_even_a_token_the_process_remembers(user):
    token = log_in(user)
    for _ in range(2):
        assert works(token)  # verified and its user cached in this process

    bearer(token).post(LOGOUT_URL)

    assert not works(token)


def test_logout_without_a_token_is_401(api_client):
    error_of(api_client.post(LOGOUT_URL), 401, "not_authenticated")


# --- refresh ------------------------------------------------------------------------------


def test_a_refresh_revokes_the_token_it_replaces(user):
    old = log_in(user)

    response = bearer(old).post(REFRESH_URL)

    assert response.status_code == 200
    assert works(response.json()["data"]["token"])
    assert not works(old)
    error_of(bearer(old).post(REFRESH_URL), 401, "token_not_valid")


def test_a_refreshed_token_never_outlives_the_refresh_window(user):
    token = SlidingToken.for_user(user)
    token.set_exp("refresh_exp", lifetime=timedelta(minutes=5))  # less than a lifetime left

    response = bearer(str(token)).post(REFRESH_URL)

    assert response.status_code == 200
    refreshed = SlidingToken(response.json()["data"]["token"])
    assert refreshed["exp"] == token["refresh_exp"]


# --- password change ----------------------------------------------------------------------


def test_a_password_change_answers_204_and_revokes_every_earlier_token(user):
    first, second = log_in(user), log_in(user)

    response = change_password(first)

    assert response.status_code == 204
    assert not works(first)
    assert not works(second)
    error_of(bearer(second).post(REFRESH_URL), 401, "token_not_valid")


def test_after_a_password_change_only_the_new_password_logs_in(user):
    change_password(log_in(user))

    wrong = APIClient().post(
        LOGIN_URL, {"username": user.username, "password": DEFAULT_PASSWORD}, format="json"
    )
    error_of(wrong, 401, "invalid_credentials")
    assert works(log_in(user, NEW_PASSWORD))


def test_a_wrong_current_password_is_a_400_and_a_failed_login(user):
    token = log_in(user)
    before = failed_logins()

    error = error_of(change_password(token, current="not my password 9"), 400, "invalid")

    assert list(error["fields"]) == ["current_password"]
    assert failed_logins() == before + 1
    assert works(token)
    assert User.objects.get(pk=user.pk).check_password(DEFAULT_PASSWORD)


@pytest.mark.parametrize("new", ["password", "12345678", "short", ""])
def test_a_weak_new_password_is_refused(user, new):
    token = log_in(user)

    error = error_of(change_password(token, new=new), 400, "invalid")

    assert list(error["fields"]) == ["new_password"]
    assert works(token)


def test_a_password_change_needs_a_token(api_client):
    body = {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD}

    error_of(api_client.post(PASSWORD_URL, body, format="json"), 401, "not_authenticated")


# --- deactivation -------------------------------------------------------------------------


def test_a_deactivated_users_tokens_fail_once_the_cached_user_expires(user, monkeypatch, settings):
    token = log_in(user)
    assert works(token)  # the user is now cached in this process
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert works(token)  # the cached copy still says active

    now = user_cache.now()
    later = now + settings.AUTH_USER_CACHE_SECONDS + 0.5
    monkeypatch.setattr(user_cache, "_clock", lambda: later)

    error = error_of(bearer(token).get(JOBS_URL), 401)
    assert "inactive" in error["message"]
