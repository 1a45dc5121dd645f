"""Throttles of log-ins, sign-ups and password changes, shared by every API process.

A throttle kept in each process's memory lets P processes allow P times its rate, so
these live in the control database: one row per (policy, identity), updated by a single
atomic upsert per check. Each is a GCRA bucket (the generic cell rate algorithm: a token
bucket stored as one timestamp): a policy of ``N/period`` admits N requests at once and
then one per ``period / N``, and the row holds the theoretical arrival time (``tat``) of
the next request; a request is admitted when ``max(tat, now) + period / N`` is at most
one period ahead of now. The database's clock is the only clock, so API processes on
different hosts agree.

Policies (rates from the settings, ``"N/s"``, ``"N/min"``, ``"N/hour"``, ``"N/day"``):

- ``login-address``: log-ins and token refreshes from one client address (an IPv6
  address counts by its /64, which one client can hold whole);
- ``login-account``: log-ins, admin log-ins and password changes naming one account
  (its username up to case and compatibility forms), from anywhere. Every attempt counts,
  a right password included, so a guesser spread over many addresses gets this rate
  and no more; the price is that someone who knows a username can keep its owner from
  logging in for as long as they keep guessing (docs/security.md);
- ``signup-address``: sign-ups from one client address.

Identities are stored as digests, not as addresses or names; a changed rate starts new
buckets. Buckets whose time has passed hold nothing and are deleted now and then by the
processes that use them.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from datetime import timedelta
from ipaddress import IPv6Address, IPv6Network, ip_address
from typing import Any

from django.conf import settings
from django.db import connections
from rest_framework.settings import api_settings

from jobsvc import errors
from jobsvc.accounts.usernames import username_key
from jobsvc.rate_limits import QuotaState, Rate, parse_rate, seconds

CLEANUP_EVERY = 1000  # checks per process between deletions of buckets whose time passed
IPV6_CLIENT_PREFIX = 64  # bits of an IPv6 address that name one client

# Admit the request (and move the bucket on) if it fits; return how far ahead the bucket
# then is. No row returned: refused, and nothing changed.
_HIT = """
    INSERT INTO accounts_throttle_bucket AS b (key, tat)
    VALUES (%(key)s, now() + %(interval)s)
    ON CONFLICT (key) DO UPDATE SET tat = GREATEST(b.tat, now()) + %(interval)s
        WHERE GREATEST(b.tat, now()) + %(interval)s <= now() + %(period)s
    RETURNING EXTRACT(EPOCH FROM tat - now())
"""
_AHEAD = "SELECT EXTRACT(EPOCH FROM tat - now()) FROM accounts_throttle_bucket WHERE key = %s"
_CLEAN_UP = "DELETE FROM accounts_throttle_bucket WHERE tat < now()"


@dataclass(frozen=True)
class Policy:
    name: str
    setting: str  # the name of the Django setting holding its rate

    def rate(self) -> Rate:
        return parse_rate(getattr(settings, self.setting))


LOGIN_BY_ADDRESS = Policy("login-address", "LOGIN_THROTTLE_RATE")
LOGIN_BY_ACCOUNT = Policy("login-account", "LOGIN_ACCOUNT_THROTTLE_RATE")
SIGNUP_BY_ADDRESS = Policy("signup-address", "SIGNUP_THROTTLE_RATE")

_checks = itertools.count(1)


def throttle(request: Any, policy: Policy, identity: str) -> QuotaState:
    """Count this request against ``policy`` for ``identity``; raise Throttled if it is
    over the rate. The state is also kept on the request (``quotas_of``), for headers."""
    rate = policy.rate()
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    # The rate is part of the key: buckets filled under another rate are not carried over.
    key = f"{policy.name}:{rate.count}/{rate.period}:{digest}"
    period = rate.period
    interval = rate.interval.total_seconds()
    with connections["default"].cursor() as cursor:
        params = {"key": key, "interval": rate.interval, "period": timedelta(seconds=period)}
        cursor.execute(_HIT, params)
        row, ahead_row = cursor.fetchone(), None
        if row is None:
            cursor.execute(_AHEAD, [key])
            ahead_row = cursor.fetchone()
        if next(_checks) % CLEANUP_EVERY == 0:
            cursor.execute(_CLEAN_UP)
    if row is not None:
        ahead = float(row[0])
        state = QuotaState(
            policy=policy.name,
            quota=rate.count,
            window=period,
            remaining=math.floor((period - ahead) / interval + 1e-9),
            reset=seconds(ahead),
        )
        _quotas(request).append(state)
        return state
    ahead = float(ahead_row[0]) if ahead_row is not None else period
    retry_after = max(1, seconds(ahead + interval - period))
    state = QuotaState(
        policy=policy.name,
        quota=rate.count,
        window=period,
        remaining=0,
        reset=retry_after,
    )
    _quotas(request).append(state)
    raise errors.Throttled(
        f"Too many requests ({policy.name}: at most {rate.count} per {_period_name(period)}); "
        f"try again in {retry_after} s.",
        retry_after=retry_after,
        quotas=quotas_of(request),
    )


def throttle_login(request: Any, username: str) -> None:
    """A log-in attempt's throttles: its client address, then the account it names."""
    throttle(request, LOGIN_BY_ADDRESS, client_address(request))
    throttle(request, LOGIN_BY_ACCOUNT, username_key(username))


def quotas_of(request: Any) -> tuple[QuotaState, ...]:
    """The throttles' states this request was counted against, in order."""
    return tuple(_quotas(request))


def _quotas(request: Any) -> list[QuotaState]:
    django_request = getattr(request, "_request", request)  # under a DRF Request
    if not hasattr(django_request, "jobsvc_quotas"):
        django_request.jobsvc_quotas = []
    return django_request.jobsvc_quotas


def client_address(request: Any) -> str:
    """The client's address as DRF's throttles see it (``NUM_PROXIES`` trusted proxies in
    X-Forwarded-For, else the peer), an IPv6 one as its /64 network."""
    meta = request.META
    address = meta.get("REMOTE_ADDR", "")
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    proxies = api_settings.NUM_PROXIES
    if proxies and forwarded:
        hops = forwarded.split(",")
        address = hops[-min(proxies, len(hops))].strip()
    try:
        parsed = ip_address(address.split("%", 1)[0])
    except ValueError:
        return address[:100]
    if isinstance(parsed, IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(IPv6Network((parsed, IPV6_CLIENT_PREFIX), strict=False))
    return str(parsed)


def _period_name(period: int) -> str:
    names = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
    return names.get(period, f"{period} s")
