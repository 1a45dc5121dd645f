"""Issuing, refreshing and revoking the service's one kind of token: a simplejwt sliding token.

A token is good until its ``exp``; presenting it (unexpired) to the refresh endpoint
returns a new one, until ``refresh_exp``, after which the user must log in again. A
refreshed token never outlives ``refresh_exp``.

A token stops working before its ``exp`` when:

- it is revoked: logged out, or refreshed (a refresh replaces the token it was given, so
  each token can be refreshed once). Its id (``jti``) is kept in ``RevokedToken`` until
  its ``exp``;
- its user's password changes: every token carries a digest of the password hash as it
  was when the token was issued (simplejwt's ``CHECK_REVOKE_TOKEN`` claim), so a new
  password voids every token issued before;
- its user is deactivated or deleted.

Authentication (``jobsvc.accounts.authentication``) reads a user with their revoked
token ids, and each API process keeps that for ``AUTH_USER_CACHE_SECONDS``: a revocation
takes effect in the process that made it at once, and in every other within that time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connections
from django.utils import timezone
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.settings import api_settings
from rest_framework_simplejwt.tokens import SlidingToken

from jobsvc.accounts.authentication import forget_user, password_unchanged
from jobsvc.accounts.models import RevokedToken, User


class TokenRejected(Exception):
    """The presented token is not valid for a refresh, or its user may no longer log in."""


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expire: datetime


# Records a revocation unless the token was revoked already; says which happened.
_REVOKE = """
    INSERT INTO accounts_revoked_token (jti, user_id, expires_at) VALUES (%s, %s, %s)
    ON CONFLICT (jti) DO NOTHING
    RETURNING jti
"""


def token_issue(*, user: User) -> IssuedToken:
    return _issued(SlidingToken.for_user(user))


def token_refresh(*, raw_token: str) -> IssuedToken:
    """A new token for an unexpired, unrevoked one, which is revoked in exchange."""
    try:
        token = SlidingToken(raw_token)
        token.check_exp(api_settings.SLIDING_TOKEN_REFRESH_EXP_CLAIM)
    except TokenError as exc:
        raise TokenRejected(str(exc)) from exc
    user = User.objects.filter(pk=token.get(api_settings.USER_ID_CLAIM)).first()
    if user is None or not user.is_active:
        raise TokenRejected("The token's user no longer exists or is inactive.")
    if not password_unchanged(token, user):
        raise TokenRejected("The token was revoked: the password has changed since.")
    if not token_revoke(token=token, user_id=user.pk):
        raise TokenRejected("The token was revoked (logged out, or refreshed already).")
    refresh_exp = token[api_settings.SLIDING_TOKEN_REFRESH_EXP_CLAIM]
    token.set_exp()
    token["exp"] = min(token["exp"], refresh_exp)
    token.set_iat()
    token.set_jti()
    return _issued(token)


def token_revoke(*, token, user_id: int) -> bool:
    """Revoke ``token`` (a validated token) until its expiry; False if it was already.

    Expired revocations are deleted on the way: they can never match a token again.
    """
    expires_at = datetime.fromtimestamp(token["exp"], tz=UTC)
    with connections["default"].cursor() as cursor:
        cursor.execute(_REVOKE, [token[api_settings.JTI_CLAIM], user_id, expires_at])
        revoked = cursor.fetchone() is not None
    forget_user(user_id)
    RevokedToken.objects.filter(expires_at__lte=timezone.now()).delete()
    return revoked


def _issued(token: SlidingToken) -> IssuedToken:
    return IssuedToken(token=str(token), expire=datetime.fromtimestamp(token["exp"], tz=UTC))
