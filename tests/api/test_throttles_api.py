"""Log-in, sign-up, admin log-in and password-change throttles: per client address and
per account, kept in the database, answered with Retry-After and the RateLimit fields.

(That every API process shares them: tests/integration/test_shared_limits.py.)
"""

from __future__ import annotations

import logging
import re

import pytest
from django.test import Client
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from tests.api.support import LOGIN_URL, USERS_URL, error_of
from tests.conftest import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db(databases="__all__")

ADMIN_LOGIN_URL = "/admin/login/"
# draft-ietf-httpapi-ratelimit-headers: a list of "name";q=N;w=N and "name";r=N;t=N items.
POLICY_ITEM = re.compile(r'^"[a-z-]+";q=\d+(;qu="[a-z-]+")?(;w=\d+)?$')
LIMIT_ITEM = re.compile(r'^"[a-z-]+";r=\d+(;t=\d+)?$')


def login(username: str, password: str = "wrong guess 1234", address: str = "127.0.0.1"):
    body = {"username": username, "password": password}
    return APIClient().post(LOGIN_URL, body, format="json", REMOTE_ADDR=address)


def items(header: str) -> list[str]:
    return [item.strip() for item in header.split(",")]


def failed_logins(via: str) -> float:
    return REGISTRY.get_sample_value("jobsvc_logins_failed_total", {"via": via}) or 0.0


def test_the_account_throttle_holds_across_addresses(user, throttle_rates):
    throttle_rates["login_account"] = "3/min"

    statuses = [login(user.username, address=f"192.0.2.{n}").status_code for n in range(3)]
    refused = login(user.username, password=DEFAULT_PASSWORD, address="198.51.100.9")

    assert statuses == [401, 401, 401]
    error_of(refused, 429, "throttled")


def test_the_account_throttle_counts_the_name_in_any_case_or_form(user, throttle_rates):
    throttle_rates["login_account"] = "2/min"
    login(user.username.upper(), address="192.0.2.1")
    login(user.username.translate({ord("u"): 0xFF55}), address="192.0.2.2")  # fullwidth u

    error_of(login(user.username, address="192.0.2.3"), 429, "throttled")


def test_other_accounts_are_not_held_by_one_accounts_throttle(user, other_user, throttle_rates):
    throttle_rates["login_account"] = "1/min"
    login(user.username)

    assert login(other_user.username, password=DEFAULT_PASSWORD).status_code == 200


def test_an_ipv6_client_counts_by_its_slash_64(user, throttle_rates):
    throttle_rates["login"] = "2/min"
    login("someone", address="2001:db8:1:2::1")
    login("someone-else", address="2001:db8:1:2:ffff::7")

    error_of(login(user.username, address="2001:db8:1:2:abcd::1"), 429, "throttled")
    assert login(user.username, address="2001:db8:1:3::1").status_code == 401


def test_a_429_carries_retry_after_and_the_ratelimit_fields(user, throttle_rates):
    throttle_rates["login"] = "2/min"
    login(user.username)
    login(user.username)

    refused = login(user.username)

    error_of(refused, 429, "throttled")
    assert int(refused["Retry-After"]) >= 1
    assert items(refused["RateLimit-Policy"]) == ['"login-address";q=2;w=60']
    assert items(refused["RateLimit"]) == [f'"login-address";r=0;t={refused["Retry-After"]}']


def test_an_admitted_login_says_what_is_left_of_both_quotas(user, settings):
    settings.LOGIN_THROTTLE_RATE = "30/min"
    settings.LOGIN_ACCOUNT_THROTTLE_RATE = "10/min"

    response = login(user.username, password=DEFAULT_PASSWORD)

    assert response.status_code == 200
    policies, limits = items(response["RateLimit-Policy"]), items(response["RateLimit"])
    assert all(POLICY_ITEM.match(item) for item in policies), policies
    assert all(LIMIT_ITEM.match(item) for item in limits), limits
    assert policies == ['"login-address";q=30;w=60', '"login-account";q=10;w=60']
    assert [item.split(";")[1] for item in limits] == ["r=29", "r=9"]


def test_sign_up_is_throttled_per_address_with_the_ratelimit_fields(api_client, throttle_rates):
    throttle_rates["signup"] = "1/hour"
    body = {"username": "first-of-many", "password": "a long passphrase 42"}
    assert api_client.post(USERS_URL, body, format="json").status_code == 201

    refused = api_client.post(USERS_URL, {**body, "username": "second"}, format="json")

    error_of(refused, 429, "throttled")
    assert items(refused["RateLimit-Policy"]) == ['"signup-address";q=1;w=3600']


def test_a_failed_login_is_logged_without_the_password_and_counted(user, caplog):
    before = failed_logins("api")

    with caplog.at_level(logging.WARNING, logger="jobsvc.accounts.login_failures"):
        login(user.username, password="my secret guess 123")

    assert failed_logins("api") == before + 1
    (record,) = [r for r in caplog.records if r.name == "jobsvc.accounts.login_failures"]
    assert user.username in record.getMessage()
    assert "127.0.0.1" in record.getMessage()
    assert "my secret guess" not in record.getMessage()


def test_a_successful_login_is_not_counted_as_failed(user):
    before = failed_logins("api")

    assert login(user.username, password=DEFAULT_PASSWORD).status_code == 200

    assert failed_logins("api") == before


# --- the admin site's log-in --------------------------------------------------------------


def admin_login(username: str, password: str = "wrong guess 1234", address: str = "127.0.0.1"):
    body = {"username": username, "password": password, "next": "/admin/"}
    return Client().post(ADMIN_LOGIN_URL, body, REMOTE_ADDR=address)


def test_the_admin_login_is_throttled_per_address(staff_user, throttle_rates):
    throttle_rates["login"] = "3/min"

    statuses = [admin_login(staff_user.username).status_code for _ in range(3)]
    refused = admin_login(staff_user.username, password=DEFAULT_PASSWORD)

    assert statuses == [200, 200, 200]  # the form again, with its error
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert items(refused["RateLimit-Policy"]) == ['"login-address";q=3;w=60']


def test_admin_and_api_logins_share_the_account_throttle(staff_user, throttle_rates):
    throttle_rates["login_account"] = "2/min"
    login(staff_user.username, address="192.0.2.1")
    admin_login(staff_user.username, address="192.0.2.2")

    assert admin_login(staff_user.username, address="192.0.2.3").status_code == 429
    error_of(login(staff_user.username, address="192.0.2.4"), 429, "throttled")


def test_a_failed_admin_login_is_counted_as_such(staff_user):
    before = failed_logins("admin")

    admin_login(staff_user.username)

    assert failed_logins("admin") == before + 1


def test_the_admin_login_form_is_shown_without_counting(staff_user, throttle_rates):
    throttle_rates["login"] = "1/min"

    for _ in range(3):
        assert Client().get(ADMIN_LOGIN_URL).status_code == 200
    assert admin_login(staff_user.username, password=DEFAULT_PASSWORD).status_code == 302


# --- password changes ----------------------------------------------------------------------


def test_password_changes_count_against_the_accounts_log_ins(user, client_for, throttle_rates):
    throttle_rates["login_account"] = "2/min"
    client = client_for(user)
    body = {"current_password": "a wrong guess 55", "new_password": "another passphrase 77"}
    client.post("/api/v1/me/password", body, format="json")
    client.post("/api/v1/me/password", body, format="json")

    refused = client.post("/api/v1/me/password", body, format="json")

    error_of(refused, 429, "throttled")
    error_of(login(user.username, password=DEFAULT_PASSWORD), 429, "throttled")
