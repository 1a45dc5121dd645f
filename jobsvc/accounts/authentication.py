"""JWT authentication that does not cost a database query on every request.

simplejwt's ``JWTAuthentication`` loads the user row for each request. On the job-create
hot path that doubles the database round trips, so each API process keeps a small
least-recently-used cache of users for ``AUTH_USER_CACHE_SECONDS``: deactivating or
deleting a user takes effect on every process within that many seconds.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from django.conf import settings
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken
from rest_framework_simplejwt.settings import api_settings

from jobsvc.accounts.models import User

_MAX_CACHED_USERS = 10_000


class _UserCache:
    def __init__(self, *, ttl_seconds: float, max_size: int, clock=time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._max_size = max_size
        self._clock = clock
        self._entries: OrderedDict[int, tuple[float, User | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: int) -> tuple[bool, User | None]:
        """Return (hit, user); a hit with user None means the user does not exist."""
        with self._lock:
            entry = self._entries.get(user_id)
            if entry is None or entry[0] < self._clock():
                return False, None
            self._entries.move_to_end(user_id)
            return True, entry[1]

    def put(self, user_id: int, user: User | None) -> None:
        if self._ttl <= 0:
            return
        with self._lock:
            self._entries[user_id] = (self._clock() + self._ttl, user)
            self._entries.move_to_end(user_id)
            while len(self._entries) > self._max_size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


user_cache = _UserCache(ttl_seconds=settings.AUTH_USER_CACHE_SECONDS, max_size=_MAX_CACHED_USERS)


class CachedUserJWTAuthentication(JWTAuthentication):
    """Bearer sliding-token authentication with a per-process user cache."""

    def get_user(self, validated_token: Any) -> User:
        try:
            user_id = int(validated_token[api_settings.USER_ID_CLAIM])
        except (KeyError, TypeError, ValueError):
            raise InvalidToken("Token contained no recognizable user identification") from None
        hit, user = user_cache.get(user_id)
        if not hit:
            user = User.objects.filter(pk=user_id).first()
            user_cache.put(user_id, user)
        if user is None:
            raise AuthenticationFailed("User not found", code="user_not_found")
        if not user.is_active:
            raise AuthenticationFailed("User is inactive", code="user_inactive")
        return user
