"""/api/v1/me/webhook-secret: each user's own Standard Webhooks signing secret, read and
rotated by its owner, with the previous secret signing beside the new one for a while."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.utils import timezone

from jobsvc.accounts.webhook_secrets import signing_secrets, signing_secrets_of
from jobsvc.handlers.errors import PermanentError
from tests.api.support import error_of

pytestmark = pytest.mark.django_db(databases="__all__")

SECRET_URL = "/api/v1/me/webhook-secret"
ROTATE_URL = "/api/v1/me/webhook-secret/rotate"


def secret_of(client) -> dict:
    response = client.get(SECRET_URL)
    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    return response.json()["data"]


def test_a_user_gets_a_standard_webhooks_secret_on_first_read_and_the_same_after(user_client):
    first = secret_of(user_client)

    assert first["secret"].startswith("whsec_")
    assert len(base64.b64decode(first["secret"].removeprefix("whsec_"))) >= 24
    assert first["previous_expires_at"] is None
    assert secret_of(user_client) == first


def test_every_user_has_a_secret_of_their_own(user_client, other_client, user, other_user):
    mine, theirs = secret_of(user_client)["secret"], secret_of(other_client)["secret"]

    assert mine != theirs
    assert signing_secrets(user_id=user.pk) == [mine]
    assert signing_secrets(user_id=other_user.pk) == [theirs]


def test_a_rotation_signs_with_both_secrets_until_the_overlap_ends(user_client, user, settings):
    settings.WEBHOOK_SECRET_OVERLAP = timedelta(hours=24)
    old = secret_of(user_client)["secret"]

    response = user_client.post(ROTATE_URL)

    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    rotated = response.json()["data"]
    assert rotated["secret"] != old
    assert secret_of(user_client) == rotated
    ends = timezone.now() + timedelta(hours=24)
    assert rotated["previous_expires_at"] is not None
    assert signing_secrets(user_id=user.pk) == [rotated["secret"], old]
    # The overlap ends after the setting's window: then only the new secret signs.
    user.webhook_secret.previous_expires_at = timezone.now() - timedelta(seconds=1)
    user.webhook_secret.save()
    assert signing_secrets(user_id=user.pk) == [rotated["secret"]]
    assert abs(timezone.datetime.fromisoformat(rotated["previous_expires_at"]) - ends) < (
        timedelta(minutes=1)
    )


def test_a_second_rotation_keeps_only_the_secret_it_replaced(user_client, user):
    first = secret_of(user_client)["secret"]
    second = user_client.post(ROTATE_URL).json()["data"]["secret"]
    third = user_client.post(ROTATE_URL).json()["data"]["secret"]

    assert signing_secrets(user_id=user.pk) == [third, second]
    assert first not in signing_secrets(user_id=user.pk)


def test_a_rotation_in_this_process_is_signed_with_at_once(user_client, user):
    old = signing_secrets_of(user.pk)  # cached now

    new = user_client.post(ROTATE_URL).json()["data"]["secret"]

    assert signing_secrets_of(user.pk) == [new, *old]


def test_without_a_token_the_secret_is_never_shown(api_client):
    error_of(api_client.get(SECRET_URL), 401)
    error_of(api_client.post(ROTATE_URL), 401)


def test_a_user_that_does_not_exist_has_no_secret_and_its_jobs_fail_for_good(db):
    with pytest.raises(PermanentError, match="does not exist"):
        signing_secrets(user_id=987_654_321)
