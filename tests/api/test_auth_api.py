"""Login, token refresh, and how protected endpoints treat good and bad tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jwt
import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.tokens import SlidingToken

from jobsvc.accounts.authentication import verified_tokens
from tests.api.support import JOBS_URL, LOGIN_URL, REFRESH_URL, cancel_url, error_of, job_url
from tests.conftest import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db(databases="__all__")

A_JOB_ID = "2B0ZBFL0oWkVq1EhmDjuzlJtbVA"  # well-formed; the request must fail before any lookup
PROTECTED = [
    ("get", JOBS_URL),
    ("post", JOBS_URL),
    ("get", job_url(A_JOB_ID)),
    ("post", cancel_url(A_JOB_ID)),
]


def login(client, username: str, password: str = DEFAULT_PASSWORD):
    return client.post(LOGIN_URL, {"username": username, "password": password}, format="json")


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def claims_of(user) -> dict:
    """The claims of a valid token for ``user``, to be altered and signed by a test."""
    claims = dict(SlidingToken.for_user(user).payload)
    # simplejwt adds these two when it signs, so the bare payload lacks them.
    return claims | {"aud": settings.SIMPLE_JWT["AUDIENCE"], "iss": settings.SIMPLE_JWT["ISSUER"]}


def signed(claims: dict, *, key: str | None = None, algorithm: str = "HS256") -> str:
    return jwt.encode(claims, settings.JWT_SIGNING_KEY if key is None else key, algorithm)


def parse_expire(text: str) -> datetime:
    expire = datetime.fromisoformat(text)
    assert expire.utcoffset() is not None, "expire must carry a time zone"
    return expire


# --- login ------------------------------------------------------------------------------


def test_login_returns_a_token_its_expiry_and_the_user(api_client, make_user):
    user = make_user(job_weight=2.5)

    response = login(api_client, user.username)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"data", "success"}
    assert body["success"] is True
    assert set(body["data"]) == {"expire", "token", "user"}
    assert body["data"]["user"] == {"id": user.pk, "username": user.username, "job_weight": 2.5}


def test_the_login_expire_is_a_zoned_time_one_token_lifetime_ahead(api_client, user):
    before = timezone.now()

    data = login(api_client, user.username).json()["data"]

    expire = parse_expire(data["expire"])
    assert expire > timezone.now()
    lifetime = settings.TOKEN_LIFETIME
    assert before + lifetime - timedelta(seconds=1) <= expire <= timezone.now() + lifetime


def test_the_login_expire_is_the_expiry_written_in_the_token(api_client, user):
    data = login(api_client, user.username).json()["data"]

    exp = SlidingToken(data["token"])["exp"]
    assert parse_expire(data["expire"]).timestamp() == exp


def test_the_login_token_authenticates_its_user(api_client, user):
    token = login(api_client, user.username).json()["data"]["token"]

    response = bearer(token).get(JOBS_URL)

    assert response.status_code == 200


@pytest.mark.parametrize("password", ["wrong password 42", DEFAULT_PASSWORD.upper()])
def test_login_with_a_wrong_password_is_refused(api_client, user, password):
    error_of(login(api_client, user.username, password), 401, "invalid_credentials")


def test_login_of_an_unknown_user_looks_like_a_wrong_password(api_client):
    error_of(login(api_client, "nobody-at-all"), 401, "invalid_credentials")


def test_an_inactive_user_cannot_log_in(api_client, user):
    user.is_active = False
    user.save()

    error_of(login(api_client, user.username), 401, "invalid_credentials")


@pytest.mark.parametrize(
    "body", [{}, {"username": "someone"}, {"password": "x"}, {"username": "a", "password": ""}]
)
def test_login_without_username_or_password_is_a_validation_error(api_client, body):
    error_of(api_client.post(LOGIN_URL, body, format="json"), 400, "invalid")


def test_login_is_throttled_after_the_configured_attempts(api_client, user, throttle_rates):
    throttle_rates["login"] = "3/min"

    statuses = [login(api_client, user.username, "wrong guess 1234").status_code for _ in range(3)]
    last = login(api_client, user.username)

    assert statuses == [401, 401, 401]
    error_of(last, 429, "throttled")
    assert int(last["Retry-After"]) > 0


def test_the_login_throttle_counts_per_client_address(api_client, user, throttle_rates):
    throttle_rates["login"] = "1/min"
    login(api_client, user.username)

    elsewhere = api_client.post(
        LOGIN_URL,
        {"username": user.username, "password": DEFAULT_PASSWORD},
        format="json",
        REMOTE_ADDR="192.0.2.7",
    )

    assert login(api_client, user.username).status_code == 429
    assert elsewhere.status_code == 200


def test_login_and_refresh_answers_are_never_stored(api_client, user):
    """RFC 6749 5.1: an answer carrying a token must not be cached, nor its refusals."""
    logged_in = login(api_client, user.username)
    refreshed = refresh(logged_in.json()["data"]["token"])
    refused = login(api_client, user.username, "wrong password 42")

    for response in (logged_in, refreshed, refused):
        assert response["Cache-Control"] == "no-store"
        assert response["Pragma"] == "no-cache"


# --- refresh ----------------------------------------------------------------------------


def refresh(token: str | None):
    client = APIClient() if token is None else bearer(token)
    return client.post(REFRESH_URL)


def test_refresh_returns_a_new_working_token_that_expires_no_earlier(api_client, user):
    first = login(api_client, user.username).json()["data"]

    response = refresh(first["token"])

    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True
    assert set(body["data"]) == {"expire", "token"}
    assert body["data"]["token"] != first["token"]
    assert parse_expire(body["data"]["expire"]) >= parse_expire(first["expire"])
    assert bearer(body["data"]["token"]).get(JOBS_URL).status_code == 200


def test_refresh_without_a_token_is_refused(api_client):
    error_of(api_client.post(REFRESH_URL), 401, "not_authenticated")


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Bearer  ", "bearer abc", "abc"])
def test_refresh_with_a_malformed_header_is_refused(api_client, header):
    api_client.credentials(HTTP_AUTHORIZATION=header)

    error_of(api_client.post(REFRESH_URL), 401)


def test_refresh_of_an_expired_token_is_refused(user):
    token = SlidingToken.for_user(user)
    token.set_exp(lifetime=-timedelta(seconds=1))

    error_of(refresh(str(token)), 401, "token_not_valid")


def test_refresh_after_the_refresh_window_is_refused(user):
    token = SlidingToken.for_user(user)
    token.set_exp("refresh_exp", lifetime=-timedelta(seconds=1))

    error_of(refresh(str(token)), 401, "token_not_valid")


def test_refresh_for_a_deactivated_user_is_refused(user):
    token = str(SlidingToken.for_user(user))
    user.is_active = False
    user.save()

    error_of(refresh(token), 401, "token_not_valid")


def test_refresh_of_a_token_signed_with_another_key_is_refused(user):
    error_of(refresh(signed(claims_of(user), key="x" * 64)), 401, "token_not_valid")


def test_refresh_is_throttled_with_login(api_client, user, throttle_rates):
    throttle_rates["login"] = "2/min"
    token = login(api_client, user.username).json()["data"]["token"]

    assert refresh(token).status_code == 200
    error_of(refresh(token), 429, "throttled")


# --- protected endpoints ----------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), PROTECTED)
def test_a_protected_endpoint_without_a_token_is_401(api_client, method, url):
    response = getattr(api_client, method)(url, {}, format="json")

    error_of(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "url"), PROTECTED)
def test_a_protected_endpoint_with_an_expired_token_is_401(user, method, url):
    token = SlidingToken.for_user(user)
    token.set_exp(lifetime=-timedelta(seconds=1))

    response = getattr(bearer(str(token)), method)(url, {}, format="json")

    error_of(response, 401, "token_not_valid")


def test_a_remembered_token_is_refused_once_it_expires(user, monkeypatch):
    """A process remembers tokens it verified, but never past their expiry time."""
    token = SlidingToken.for_user(user)
    client = bearer(str(token))
    assert client.get(JOBS_URL).status_code == 200  # verified, now remembered
    assert client.get(JOBS_URL).status_code == 200

    after_expiry = datetime.fromtimestamp(token["exp"] + 1, tz=UTC)
    monkeypatch.setattr(verified_tokens, "_clock", after_expiry.timestamp)
    monkeypatch.setattr("rest_framework_simplejwt.tokens.aware_utcnow", lambda: after_expiry)

    error_of(client.get(JOBS_URL), 401, "token_not_valid")


def test_a_token_is_verified_once_per_process_while_it_is_valid(user, monkeypatch):
    verifications = []
    verify = JWTAuthentication.get_validated_token

    def counting(self, raw_token):
        verifications.append(raw_token)
        return verify(self, raw_token)

    monkeypatch.setattr(JWTAuthentication, "get_validated_token", counting)
    client = bearer(str(SlidingToken.for_user(user)))
    for _ in range(3):
        assert client.get(JOBS_URL).status_code == 200
    assert len(verifications) == 1


def test_a_token_that_failed_verification_is_not_remembered(user):
    token = SlidingToken.for_user(user)
    header, payload, signature = str(token).split(".")
    middle = len(signature) // 2
    tampered = (
        f"{header}.{payload}.{signature[:middle]}{flip(signature[middle])}{signature[middle + 1 :]}"
    )
    for _ in range(2):
        error_of(bearer(tampered).get(JOBS_URL), 401, "token_not_valid")
    assert verified_tokens.get(tampered.encode()) == (False, None)


def test_a_token_signed_by_the_test_helper_is_accepted(user):
    """The forged tokens below differ from this one in exactly one respect."""
    assert bearer(signed(claims_of(user))).get(JOBS_URL).status_code == 200


def flip(char: str) -> str:
    return "A" if char != "A" else "B"


def test_a_token_with_a_tampered_signature_is_401(user):
    header, payload, signature = str(SlidingToken.for_user(user)).split(".")
    middle = len(signature) // 2
    tampered = signature[:middle] + flip(signature[middle]) + signature[middle + 1 :]

    error_of(bearer(f"{header}.{payload}.{tampered}").get(JOBS_URL), 401, "token_not_valid")


def test_a_token_whose_payload_was_changed_to_another_user_is_401(user, other_user):
    header, _, signature = str(SlidingToken.for_user(user)).split(".")
    _, forged_payload, _ = signed(claims_of(user) | {"user_id": str(other_user.pk)}).split(".")

    response = bearer(f"{header}.{forged_payload}.{signature}").get(JOBS_URL)

    error_of(response, 401, "token_not_valid")


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda claims: signed(claims, algorithm="HS512"), id="right-key-HS512"),
        pytest.param(lambda claims: signed(claims, key="y" * 64), id="another-key"),
        pytest.param(lambda claims: jwt.encode(claims, None, algorithm="none"), id="alg-none"),
        pytest.param(lambda claims: signed(claims | {"aud": "another-api"}), id="wrong-audience"),
        pytest.param(lambda claims: signed(without(claims, "aud")), id="no-audience"),
        pytest.param(lambda claims: signed(claims | {"iss": "someone-else"}), id="wrong-issuer"),
        pytest.param(lambda claims: signed(without(claims, "iss")), id="no-issuer"),
        pytest.param(lambda claims: signed(without(claims, "exp")), id="no-expiry"),
        pytest.param(lambda claims: signed(claims | {"token_type": "access"}), id="wrong-type"),
        pytest.param(lambda claims: signed(without(claims, "user_id")), id="no-user"),
        pytest.param(lambda claims: signed(claims | {"user_id": "me"}), id="user-not-a-number"),
        pytest.param(lambda claims: signed(claims | {"user_id": None}), id="user-null"),
    ],
)
def test_a_forged_or_foreign_token_is_401_never_500(user, forge):
    response = bearer(forge(claims_of(user))).get(JOBS_URL)

    error_of(response, 401)


@pytest.mark.parametrize("token", ["abc", "a.b.c", "....", "e30.e30.", "é.é.é"])
def test_garbage_in_place_of_a_token_is_401(token):
    error_of(bearer(token).get(JOBS_URL), 401, "token_not_valid")


def test_a_token_of_an_inactive_user_is_401(user):
    token = str(SlidingToken.for_user(user))
    user.is_active = False
    user.save()

    error = error_of(bearer(token).get(JOBS_URL), 401)

    assert "inactive" in error["message"]


def test_a_token_of_a_deleted_user_is_401(user):
    token = str(SlidingToken.for_user(user))
    user.delete()

    error = error_of(bearer(token).get(JOBS_URL), 401)

    assert "not found" in error["message"]


def without(claims: dict, name: str) -> dict:
    return {key: value for key, value in claims.items() if key != name}
