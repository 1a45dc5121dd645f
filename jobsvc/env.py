"""Typed reads of the environment, validated once at start-up.

Every tunable of the service is an environment variable named ``JOBSVC_*``. A bad value
stops the process at start-up with a message naming the variable, instead of failing
later on the first request that needs it.
"""

from __future__ import annotations

import math
import os
import re
from ipaddress import IPv4Network, IPv6Network, ip_network

import psycopg
from psycopg import conninfo

from jobsvc.rate_limits import parse_rate


class ConfigError(Exception):
    """An environment variable is missing or has a value the service cannot use."""


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ConfigError(f"{name} is required")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """A finite number (``nan`` and ``inf`` are refused) within the bounds given."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {value}")
    return value


def env_rate(name: str, default: str) -> str:
    """A rate like ``30/min`` (per ``s``, ``min``, ``hour`` or ``day``), checked here and
    kept as written (``jobsvc.rate_limits.parse_rate`` reads it)."""
    value = env_str(name, default)
    try:
        parse_rate(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_database_urls(name: str, default: str) -> list[str]:
    """A comma-separated list of PostgreSQL URLs.

    A URL may itself hold commas (``postgresql://app@db1:5432,db2:5432/jobs`` names a
    primary and a standby), so the list splits only before a comma-separated item that
    starts a new URL.
    """
    raw = os.environ.get(name, default)
    items = (item.strip().rstrip(",").strip() for item in _NEXT_URL.split(raw))
    return [item for item in items if item]


_NEXT_URL = re.compile(r",(?=\s*postgres(?:ql)?://)")


def env_networks(name: str, default: str) -> list[IPv4Network | IPv6Network]:
    """A comma-separated list of networks in CIDR notation (a bare address is a /32 or /128)."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: {item!r} is not an IP network such as 10.0.0.0/8") from None
    return networks


def database_from_url(url: str, *, name: str) -> dict[str, object]:
    """Translate a libpq connection URL into a Django DATABASES entry.

    libpq's own parser reads the URL (``psycopg.conninfo``), so what works with ``psql``
    works here: percent-escapes, several hosts for a primary and its standbys
    (``postgresql://app@db1:5432,db2:5432/jobs?target_session_attrs=read-write``), and
    every query parameter (``sslmode``, ``sslrootcert``, ``application_name``, ...), which
    becomes a connection option instead of being dropped.
    """
    if not url.startswith(("postgres://", "postgresql://")):
        raise ConfigError(f"{name}: expected a postgresql:// URL, got {_redacted(url)!r}")
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(f"{name}: not a valid PostgreSQL URL: {exc}") from None
    database = params.pop("dbname", "")
    if not database:
        raise ConfigError(f"{name}: the URL names no database: {_redacted(url)!r}")
    port = str(params.pop("port", ""))
    for item in filter(None, port.split(",")):
        if not item.isdigit() or not 0 < int(item) < 65536:
            raise ConfigError(f"{name}: {item!r} is not a port number")
    return {
        "ENGINE": "jobsvc.postgresql",
        "NAME": database,
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": port,
        "OPTIONS": params,
    }


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    scheme, separator, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{separator}{credentials.split(':', 1)[0]}:***@{location}"
