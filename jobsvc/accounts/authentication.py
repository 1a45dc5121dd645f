"""JWT authentication that costs neither a database query nor a signature check per request.

simplejwt's ``JWTAuthentication`` loads the user row for each request. On the job-create
hot path that doubles the database round trips, so each API process keeps a small
least-recently-used cache of users, each with the ids of their revoked tokens
(``jobsvc.accounts.tokens``), for ``AUTH_USER_CACHE_SECONDS``: deactivating or deleting a
user, changing their password and revoking a token take effect on every process within
that many seconds (at once on the process that made the change).

It also decodes and verifies every token from scratch (base64, JSON, HMAC, claims): about
a tenth of a job create's CPU. A client sends the same token until it refreshes it, so
each process remembers the tokens it has verified, until their own expiry time. Every
check a token passed depends only on the token, the signing key (fixed for the process)
and the clock, and the clock only moves the token closer to its expiry, so a remembered
token is answered exactly as a new check would answer it. A token that failed a check is
not remembered.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef
from django.db.models.functions import Now
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken
from rest_framework_simplejwt.settings import api_settings
from rest_framework_simplejwt.utils import get_md5_hash_password

from jobsvc.accounts.models import RevokedToken, User

_MAX_CACHED_USERS = 10_000
_MAX_CACHED_TOKENS = 10_000


class ExpiringCache:
    """A thread-safe least-recently-used map whose entries expire when the put says."""

    def __init__(self, *, max_size: int, clock: Callable[[], float]) -> None:
        self._max_size = max_size
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._clock()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        """Return (hit, value); a miss returns (False, None)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= self._clock():
                return False, None
            self._entries.move_to_end(key)
            return True, entry[1]

    def stale(self, key: Hashable) -> tuple[bool, Any]:
        """Return (found, value) even if the entry expired (until it is evicted)."""
        with self._lock:
            entry = self._entries.get(key)
            return (False, None) if entry is None else (True, entry[1])

    def put(self, key: Hashable, value: Any, *, expires_at: float) -> None:
        if expires_at <= self._clock():
            return
        with self._lock:
            self._entries[key] = (expires_at, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_size:
                self._entries.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


user_cache = ExpiringCache(max_size=_MAX_CACHED_USERS, clock=time.monotonic)
# Keyed by the raw token; expires at the token's "exp" claim, in seconds since the epoch.
verified_tokens = ExpiringCache(max_size=_MAX_CACHED_TOKENS, clock=time.time)


class CachedUserJWTAuthentication(JWTAuthentication):
    """Bearer sliding-token authentication with per-process user and token caches."""

    def get_validated_token(self, raw_token: bytes) -> Any:
        hit, token = verified_tokens.get(raw_token)
        if hit:
            return token
        token = super().get_validated_token(raw_token)
        expires_at = token.get("exp")
        if isinstance(expires_at, int | float):
            verified_tokens.put(raw_token, token, expires_at=expires_at)
        return token

    def get_user(self, validated_token: Any) -> User:
        try:
            user_id = int(validated_token[api_settings.USER_ID_CLAIM])
        except (KeyError, TypeError, ValueError):
            raise InvalidToken("Token contained no recognizable user identification") from None
        hit, cached = user_cache.get(user_id)
        if not hit:
            cached = _user_with_revoked_tokens(user_id)
            user_cache.put(
                user_id, cached, expires_at=user_cache.now() + settings.AUTH_USER_CACHE_SECONDS
            )
        user, revoked = cached
        if user is None:
            raise AuthenticationFailed("User not found", code="user_not_found")
        if not user.is_active:
            raise AuthenticationFailed("User is inactive", code="user_inactive")
        if validated_token.get(api_settings.JTI_CLAIM) in revoked:
            raise InvalidToken("Token has been revoked (logged out or refreshed); log in again")
        if not password_unchanged(validated_token, user):
            raise InvalidToken("Token has been revoked: the password has changed; log in again")
        return user


def password_unchanged(token: Any, user: User) -> bool:
    """Whether the user's password is the one the token was issued under."""
    return token.get(api_settings.REVOKE_TOKEN_CLAIM) == get_md5_hash_password(user.password)


def forget_user(user_id: int) -> None:
    """Read the user again on this process's next request (a revocation, a new password)."""
    user_cache.discard(user_id)


def _user_with_revoked_tokens(user_id: int) -> tuple[User | None, frozenset[str]]:
    """The user and the ids of their revoked, unexpired tokens, in one query."""
    revoked = RevokedToken.objects.filter(user=OuterRef("pk"), expires_at__gt=Now()).values("jti")
    user = User.objects.filter(pk=user_id).annotate(revoked_jtis=ArraySubquery(revoked)).first()
    return user, frozenset(user.revoked_jtis if user is not None else ())
