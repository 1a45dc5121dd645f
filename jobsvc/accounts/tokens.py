"""Issuing and refreshing the service's one kind of token: a simplejwt sliding token.

A token is good until its ``exp``; presenting it (unexpired) to the refresh endpoint
returns a new one, until ``refresh_exp``, after which the user must log in again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.settings import api_settings
from rest_framework_simplejwt.tokens import SlidingToken

from jobsvc.accounts.models import User


class TokenRejected(Exception):
    """The presented token is not valid for a refresh, or its user may no longer log in."""


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expire: datetime


def token_issue(*, user: User) -> IssuedToken:
    return _issued(SlidingToken.for_user(user))


def token_refresh(*, raw_token: str) -> IssuedToken:
    try:
        token = SlidingToken(raw_token)
        token.check_exp(api_settings.SLIDING_TOKEN_REFRESH_EXP_CLAIM)
    except TokenError as exc:
        raise TokenRejected(str(exc)) from exc
    user = User.objects.filter(pk=token.get(api_settings.USER_ID_CLAIM)).first()
    if user is None or not user.is_active:
        raise TokenRejected("The token's user no longer exists or is inactive.")
    token.set_exp()
    token.set_iat()
    token.set_jti()
    return _issued(token)


def _issued(token: SlidingToken) -> IssuedToken:
    return IssuedToken(token=str(token), expire=datetime.fromtimestamp(token["exp"], tz=UTC))
