"""Webhook signatures in the Standard Webhooks format, checked with the standard's own
Python library (``standardwebhooks``), and the write-only handler parameters."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from jobsvc.handlers import signing
from jobsvc.handlers.redaction import REDACTED, public_params
from jobsvc.messaging.dead_letter import DeadLetter

BODY = json.dumps({"job_id": "j1", "message": "héllo"}, ensure_ascii=False).encode()


def signed(*secrets: str, msg_id: str = "j1_1", timestamp: int | None = None) -> dict[str, str]:
    at = int(time.time()) if timestamp is None else timestamp
    return signing.headers(signing_secrets=list(secrets), msg_id=msg_id, timestamp=at, body=BODY)


def test_a_new_secret_is_whsec_and_the_base64_of_32_random_bytes():
    secret = signing.generate_secret()

    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert signing.generate_secret() != secret


def test_the_standards_library_verifies_a_delivery_with_the_users_secret():
    secret = signing.generate_secret()

    assert Webhook(secret).verify(BODY, signed(secret)) == json.loads(BODY)


def test_the_standards_library_refuses_another_users_secret_or_a_changed_body():
    secret, other = signing.generate_secret(), signing.generate_secret()
    headers = signed(secret)

    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, {**headers, "webhook-id": "j1_2"})


def test_during_a_rotation_either_secret_verifies_the_two_signatures():
    new, old = signing.generate_secret(), signing.generate_secret()
    headers = signed(new, old)

    assert len(headers["webhook-signature"].split(" ")) == 2
    assert all(part.startswith("v1,") for part in headers["webhook-signature"].split(" "))
    for secret in (new, old):
        Webhook(secret).verify(BODY, headers)
        assert signing.verify(secret=secret, headers=headers, body=BODY, now=time.time())


def test_our_signature_is_the_one_the_library_computes():
    secret = signing.generate_secret()
    at = 1_767_225_600

    [ours] = signed(secret, timestamp=at)["webhook-signature"].split(" ")

    theirs = Webhook(secret).sign("j1_1", datetime.fromtimestamp(at, UTC), BODY.decode())
    assert ours == theirs


def test_a_stale_or_missing_timestamp_does_not_verify():
    secret = signing.generate_secret()
    now = time.time()
    headers = signed(secret, timestamp=int(now) - 301)

    assert not signing.verify(secret=secret, headers=headers, body=BODY, now=now)
    assert not signing.verify(
        secret=secret, headers={**headers, "webhook-timestamp": ""}, body=BODY, now=now
    )


def test_the_message_id_is_the_job_and_attempt_without_a_dot():
    assert signing.message_id(job_id="2bH5Yk3sQeM1pZ0x9LwVnR4tUa7", attempt=3) == (
        "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7_3"
    )


@pytest.mark.parametrize(
    "secret", ["", "c2VjcmV0" * 4, "whsec_", "whsec_!!!!", "whsec_" + "c2VjcmV0" * 2]
)
def test_a_malformed_secret_is_refused(secret):
    with pytest.raises(signing.InvalidSecret):
        signing.secret_key(secret)


# --- Write-only parameters ---------------------------------------------------------------


def test_header_values_are_redacted_and_everything_else_kept():
    params = {"url": "https://h.example/x", "headers": {"Authorization": "Bearer s3cret"}}

    assert public_params(params) == {
        "url": "https://h.example/x",
        "headers": {"Authorization": REDACTED},
    }
    assert params["headers"]["Authorization"] == "Bearer s3cret"  # the stored copy is kept
    assert public_params({}) == {}
    assert public_params(None) is None


def test_a_dead_letter_never_carries_a_header_value():
    now = datetime.now(UTC)
    letter = DeadLetter(
        job_id="j1",
        shard_id=0,
        user_id=7,
        handler="http",
        handler_params={"url": "https://h.example/", "headers": {"X-Token": "s3cret"}},
        message="m",
        attempts=3,
        max_attempts=3,
        reason="exhausted",
        attempt_errors=[],
        execute_at=now,
        created_at=now,
        failed_at=now,
    )

    encoded = letter.encode()

    assert b"s3cret" not in encoded
    assert json.loads(encoded)["handler_params"]["headers"] == {"X-Token": REDACTED}
