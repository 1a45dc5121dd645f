"""POST /api/v1/users: sign-up, and user creation by staff."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, transaction

from jobsvc.accounts.models import User
from tests.api.support import LOGIN_URL, USERS_URL, error_of
from tests.conftest import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db(databases="__all__")

PASSWORD = "correct horse battery staple"
# Lower-case ASCII letters and digits to their fullwidth forms (U+FF41.., U+FF10..).
FULLWIDTH = {
    **{ord(c): 0xFF41 + ord(c) - ord("a") for c in "abcdefghijklmnopqrstuvwxyz"},
    **{ord(c): 0xFF10 + ord(c) - ord("0") for c in "0123456789"},
}


# The databases may hold other users (from other suites or tools): make names unique.
ALICE = f"alice-{uuid.uuid4().hex[:12]}"


def sign_up(client, **fields):
    body = {"username": ALICE, "password": PASSWORD, **fields}
    return client.post(USERS_URL, body, format="json")


def alice_exists() -> bool:
    return User.objects.filter(username=ALICE).exists()


def test_sign_up_returns_the_new_user_in_the_envelope(api_client):
    response = sign_up(api_client, job_weight=0.5)

    assert response.status_code == 201
    user = User.objects.get(username=ALICE)
    assert response.json() == {
        "data": {"id": user.pk, "username": ALICE, "job_weight": 0.5},
        "success": True,
    }
    assert user.job_weight == 0.5


def test_a_new_user_gets_weight_one_by_default(api_client):
    response = sign_up(api_client)

    assert response.status_code == 201
    assert response.json()["data"]["job_weight"] == 1.0


def test_a_new_user_can_log_in_with_their_password(api_client):
    sign_up(api_client)

    response = api_client.post(LOGIN_URL, {"username": ALICE, "password": PASSWORD}, format="json")

    assert response.status_code == 200


def test_the_password_is_stored_hashed_and_never_returned(api_client):
    response = sign_up(api_client)

    assert PASSWORD not in response.content.decode()
    assert User.objects.get(username=ALICE).password != PASSWORD


def test_a_taken_username_is_a_conflict(api_client, make_user):
    make_user(username=ALICE)

    error = error_of(sign_up(api_client), 409, "username_taken")

    assert "username" in error["fields"]
    assert User.objects.filter(username=ALICE).count() == 1


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda name: "\uff53" + name[1:], id="fullwidth-first-letter"),
        pytest.param(str.upper, id="upper-case"),
        pytest.param(str.title, id="title-case"),
        pytest.param(lambda name: name.translate(FULLWIDTH), id="all-fullwidth"),
    ],
)
def test_a_name_differing_from_a_taken_one_in_case_or_form_is_taken(api_client, make_user, variant):
    taken = f"sam{uuid.uuid4().hex[:8]}"
    make_user(username=taken)

    error = error_of(sign_up(api_client, username=variant(taken)), 409, "username_taken")

    assert taken not in error["message"]
    assert taken not in str(error["fields"])
    assert User.objects.filter(username_key=taken).count() == 1


def test_a_username_is_stored_in_nfkc_form(api_client):
    name = f"\uff42ob{uuid.uuid4().hex[:8]}"  # a fullwidth b

    response = sign_up(api_client, username=name)

    assert response.status_code == 201, response.json()
    assert response.json()["data"]["username"] == "b" + name[1:]
    assert User.objects.filter(username="b" + name[1:]).exists()


def test_a_name_invalid_once_normalized_is_refused(api_client):
    error = error_of(sign_up(api_client, username=f"{ALICE}\u00bd"), 400, "invalid")  # 1/2

    assert "username" in error["fields"]
    assert not User.objects.filter(username__startswith=ALICE).exists()


def test_a_user_logs_in_with_their_name_in_any_case_or_form(api_client, make_user):
    name = f"sam{uuid.uuid4().hex[:8]}"
    user = make_user(username=name)

    for spelling in (name.upper(), name.translate(FULLWIDTH)):
        response = api_client.post(
            LOGIN_URL, {"username": spelling, "password": DEFAULT_PASSWORD}, format="json"
        )
        assert response.status_code == 200, response.json()
        assert response.json()["data"]["user"]["id"] == user.pk


def test_the_database_refuses_a_second_user_of_the_same_name(make_user):
    name = f"sam{uuid.uuid4().hex[:8]}"
    make_user(username=name)

    with pytest.raises(IntegrityError), transaction.atomic():
        User(username=name.upper()).save()


@pytest.mark.parametrize(
    "password",
    ["password", "12345678", "8274619305", "short1!", ALICE + "1", " " * 3],
)
def test_a_weak_or_common_password_is_refused(api_client, password):
    error = error_of(sign_up(api_client, password=password), 400, "invalid")

    assert "password" in error["fields"]
    assert not alice_exists()


@pytest.mark.parametrize("username", ["", "has space", "semi;colon", "x" * 151, "nul\x00"])
def test_an_invalid_username_is_refused(api_client, username):
    error = error_of(sign_up(api_client, username=username), 400, "invalid")

    assert "username" in error["fields"]


@pytest.mark.parametrize("missing", ["username", "password"])
def test_a_missing_field_is_refused(api_client, missing):
    body = {"username": ALICE, "password": PASSWORD}
    del body[missing]

    error = error_of(api_client.post(USERS_URL, body, format="json"), 400, "invalid")

    assert missing in error["fields"]


@pytest.mark.parametrize(
    "job_weight",
    [
        0,
        0.0,
        -1,
        -0.5,
        1e-300,
        5e-324,
        0.0009,
        "1",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "heavy",
        None,
        10**400,
        True,
        False,
    ],
)
def test_a_job_weight_that_is_not_a_number_within_the_bounds_is_refused(staff_client, job_weight):
    error = error_of(sign_up(staff_client, job_weight=job_weight), 400, "invalid")

    assert "job_weight" in error["fields"]
    assert not alice_exists()


def test_a_job_weight_above_the_maximum_is_refused_even_for_staff(staff_client, settings):
    error = error_of(sign_up(staff_client, job_weight=settings.MAX_JOB_WEIGHT * 1.01), 400)

    assert "job_weight" in error["fields"]


def test_staff_may_create_a_user_with_the_maximum_weight(staff_client, settings):
    response = sign_up(staff_client, job_weight=settings.MAX_JOB_WEIGHT)

    assert response.status_code == 201
    assert response.json()["data"]["job_weight"] == settings.MAX_JOB_WEIGHT


def test_sign_up_may_take_the_self_service_cap(api_client, settings):
    response = sign_up(api_client, job_weight=settings.SELF_SERVICE_MAX_JOB_WEIGHT)

    assert response.status_code == 201


def test_sign_up_above_the_self_service_cap_needs_staff(api_client, settings):
    weight = settings.SELF_SERVICE_MAX_JOB_WEIGHT * 2

    error = error_of(sign_up(api_client, job_weight=weight), 403, "job_weight_needs_staff")

    assert "job_weight" in error["fields"]
    assert not alice_exists()


def test_a_non_staff_user_may_not_create_a_user_above_the_cap(user_client, settings):
    weight = settings.SELF_SERVICE_MAX_JOB_WEIGHT * 2

    error_of(sign_up(user_client, job_weight=weight), 403, "job_weight_needs_staff")


def test_staff_may_create_a_user_above_the_self_service_cap(staff_client, settings):
    weight = settings.SELF_SERVICE_MAX_JOB_WEIGHT * 2

    response = sign_up(staff_client, job_weight=weight)

    assert response.status_code == 201
    assert User.objects.get(username=ALICE).job_weight == weight


def test_with_sign_up_disabled_an_anonymous_caller_is_refused(api_client, settings):
    settings.SIGNUP_ENABLED = False

    error_of(sign_up(api_client), 403, "signup_disabled")
    assert not alice_exists()


def test_with_sign_up_disabled_a_non_staff_user_is_refused(user_client, settings):
    settings.SIGNUP_ENABLED = False

    error_of(sign_up(user_client), 403, "signup_disabled")


def test_with_sign_up_disabled_staff_may_still_create_users(staff_client, settings):
    settings.SIGNUP_ENABLED = False

    response = sign_up(staff_client)

    assert response.status_code == 201
    assert alice_exists()


def test_sign_up_with_a_bad_token_is_refused_not_treated_as_anonymous(api_client):
    api_client.credentials(HTTP_AUTHORIZATION="Bearer not.a.token")

    error_of(sign_up(api_client), 401)
    assert not alice_exists()


def test_sign_up_is_throttled(api_client, throttle_rates):
    throttle_rates["signup"] = "2/min"

    statuses = [sign_up(api_client, username=f"{ALICE}-{n}").status_code for n in range(3)]

    assert statuses == [201, 201, 429]


@pytest.mark.parametrize("extra", [{"is_staff": True}, {"id": 1}, {"jobweight": 5}])
def test_a_field_sign_up_does_not_know_is_refused_not_ignored(api_client, extra):
    error = error_of(sign_up(api_client, **extra), 400, "invalid")

    assert set(error["fields"]) == set(extra)
    assert not alice_exists()
