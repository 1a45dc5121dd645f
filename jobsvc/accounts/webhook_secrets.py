"""Each user's webhook signing secret: created on first use, read and rotated by its owner.

The http handler signs every delivery with the job owner's secret (Standard Webhooks,
``jobsvc.handlers.signing``), so a receiver that checks the signature knows the delivery
came from jobsvc *for that user*: another tenant cannot make one that verifies. After
``webhook_secret_rotate`` the previous secret keeps signing beside the new one for
WEBHOOK_SECRET_OVERLAP (a second ``v1,`` signature in the same header), so a receiver can
switch to the new secret without losing deliveries; a second rotation within the window
ends the oldest secret's overlap at once.

``signing_secrets_of`` is what executors sign with: it caches each user's secrets for
USER_HANDLER_CACHE_SECONDS, so a rotation signs with the new secret within that many
seconds, and a delivery costs no control-database query while cached.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobsvc.accounts.authentication import ExpiringCache
from jobsvc.accounts.control_reads import cached_read
from jobsvc.accounts.models import User, WebhookSecret
from jobsvc.handlers.errors import PermanentError
from jobsvc.handlers.signing import generate_secret

_MAX_CACHED_USERS = 10_000


@dataclass(frozen=True)
class SigningSecret:
    """A user's current secret, and when the previous one stops signing (None: none does)."""

    secret: str
    created_at: datetime
    previous_expires_at: datetime | None


def webhook_secret_get(*, user_id: int) -> SigningSecret:
    """The user's secret, generated and stored on first use."""
    row = _row(user_id)
    return SigningSecret(
        secret=row.secret,
        created_at=row.created_at,
        previous_expires_at=_overlap_end(row, timezone.now()),
    )


@transaction.atomic(using="default")
def webhook_secret_rotate(*, user_id: int) -> SigningSecret:
    """Replace the user's secret; the replaced one signs too until the overlap ends."""
    _row(user_id)  # exists from here on, so the lock below finds it
    row = WebhookSecret.objects.using("default").select_for_update().get(user_id=user_id)
    now = timezone.now()
    row.previous_secret = row.secret
    row.previous_expires_at = now + settings.WEBHOOK_SECRET_OVERLAP
    row.secret = generate_secret()
    row.created_at = now
    row.save(using="default")
    secrets_cache.discard(user_id)
    return SigningSecret(
        secret=row.secret, created_at=row.created_at, previous_expires_at=row.previous_expires_at
    )


def signing_secrets(*, user_id: int) -> list[str]:
    """The secrets a delivery of this user's job is signed with now: the current one, and
    the previous one while its overlap lasts. Uncached."""
    row = _row(user_id)
    secrets = [row.secret]
    if _overlap_end(row, timezone.now()) is not None:
        secrets.append(row.previous_secret)
    return secrets


def signing_secrets_of(user_id: int) -> list[str]:
    """``signing_secrets``, cached for USER_HANDLER_CACHE_SECONDS and kept through control
    database faults (``control_reads``): the http handler's ``signing_secrets``."""
    return cached_read(secrets_cache, user_id, lambda: signing_secrets(user_id=user_id))


def _row(user_id: int) -> WebhookSecret:
    row = WebhookSecret.objects.using("default").filter(user_id=user_id).first()
    if row is not None:
        return row
    if not User.objects.using("default").filter(pk=user_id).exists():
        raise PermanentError(f"user {user_id} does not exist: it has no webhook secret")
    try:
        with transaction.atomic(using="default"):
            return WebhookSecret.objects.using("default").create(
                user_id=user_id, secret=generate_secret(), created_at=timezone.now()
            )
    except IntegrityError:  # another process created it first (or the user just went)
        row = WebhookSecret.objects.using("default").filter(user_id=user_id).first()
        if row is None:
            raise PermanentError(
                f"user {user_id} does not exist: it has no webhook secret"
            ) from None
        return row


def _overlap_end(row: WebhookSecret, now: datetime) -> datetime | None:
    if row.previous_secret and row.previous_expires_at and row.previous_expires_at > now:
        return row.previous_expires_at
    return None


# Each user's signing secrets, in this process (signing_secrets_of).
secrets_cache = ExpiringCache(max_size=_MAX_CACHED_USERS, clock=time.monotonic)
