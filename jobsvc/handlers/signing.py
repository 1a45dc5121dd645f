"""How the ``http`` handler signs a request, and how its receiver checks the signature.

Each request carries two headers::

    X-Jobsvc-Timestamp: 1767225600
    X-Jobsvc-Signature: sha256=<hex HMAC-SHA256(secret, b"1767225600." + body)>

The signed string is the timestamp (Unix seconds, as sent), a dot, and the body's exact
bytes. Signing the timestamp lets a receiver refuse a captured request replayed later;
signing bytes rather than parsed JSON means the receiver must check the signature over
the raw body *before* parsing it, since re-serialised JSON need not be byte-identical.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Jobsvc-Signature"
TIMESTAMP_HEADER = "X-Jobsvc-Timestamp"
DEFAULT_TOLERANCE = 300.0  # seconds a receiver should accept between timestamp and its clock

_PREFIX = "sha256="


def sign(*, secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Jobsvc-Signature`` value for this timestamp and body."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return _PREFIX + digest


def verify(
    *,
    secret: bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> bool:
    """Whether a received request is authentic and fresh (``now``: the receiver's Unix time)."""
    if not (timestamp.isascii() and timestamp.isdigit()) or abs(now - int(timestamp)) > tolerance:
        return False
    expected = sign(secret=secret, timestamp=int(timestamp), body=body)
    return hmac.compare_digest(expected.encode(), signature.encode())
