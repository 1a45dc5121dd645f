"""How the ``http`` handler signs a delivery, and how a receiver checks it: Standard Webhooks.

Each user has their own signing secret, ``whsec_`` followed by the base64 of
SECRET_BYTES random bytes (https://www.standardwebhooks.com/). Every delivery carries::

    webhook-id: 2bH5Yk3sQeM1pZ0x9LwVnR4tUa7_3
    webhook-timestamp: 1767225600
    webhook-signature: v1,<base64 HMAC-SHA256(key, b"<id>.<timestamp>." + body)>

``key`` is the secret's bytes (the base64 after ``whsec_``, decoded). The id is the job id
and the attempt (``<job_id>_<attempt>``: neither holds a ``.``, which the signed string
uses as its separator). After a rotation the previous secret signs too, for an overlap
window: the header then holds two signatures, space-separated, and a receiver accepts the
delivery when any one of them verifies with the secret it holds.

Signing the id and the timestamp lets a receiver refuse a captured delivery replayed later
(check the timestamp within DEFAULT_TOLERANCE, remember the ids seen). Signing bytes rather
than parsed JSON means the receiver must check the signature over the raw body *before*
parsing it. Any Standard Webhooks library verifies these deliveries; ``verify`` below is
the same check for receivers written in Python without one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # random bytes of a new secret; the standard asks for 24 to 64
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
DEFAULT_TOLERANCE = 300.0  # seconds a receiver should accept between timestamp and its clock

_VERSION = "v1"


class InvalidSecret(ValueError):
    """Not a ``whsec_`` secret of MIN_SECRET_BYTES to MAX_SECRET_BYTES bytes."""


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of SECRET_BYTES random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for; ``InvalidSecret`` if it is not one."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidSecret(f"a signing secret starts with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("a signing secret is base64 after its prefix") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidSecret(
            f"a signing secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {len(key)}"
        )
    return key


def message_id(*, job_id: str, attempt: int) -> str:
    """The ``webhook-id`` of one attempt of one job."""
    return f"{job_id}_{attempt}"


def signature(*, key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of this delivery."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return f"{_VERSION},{base64.b64encode(digest).decode()}"


def headers(
    *, signing_secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with each secret (the newest first)."""
    if not signing_secrets:
        raise InvalidSecret("a delivery needs at least one signing secret")
    signatures = [
        signature(key=secret_key(secret), msg_id=msg_id, timestamp=timestamp, body=body)
        for secret in signing_secrets
    ]
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(signatures),
    }


def verify(
    *,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> bool:
    """Whether a received delivery is authentic and fresh (``now``: the receiver's Unix time).

    ``headers`` as received (names in any case); ``body``: the raw bytes, before parsing.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get(ID_HEADER, "")
    timestamp = lowered.get(TIMESTAMP_HEADER, "")
    received = lowered.get(SIGNATURE_HEADER, "")
    if not msg_id or not (timestamp.isascii() and timestamp.isdigit()):
        return False
    if abs(now - int(timestamp)) > tolerance:
        return False
    expected = signature(key=secret_key(secret), msg_id=msg_id, timestamp=int(timestamp), body=body)
    return any(
        hmac.compare_digest(expected.encode(), candidate.encode())
        for candidate in received.split(" ")
        if candidate.isascii()
    )
