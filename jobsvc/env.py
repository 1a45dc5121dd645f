"""Typed reads of the environment, validated once at start-up.

Every tunable of the service is an environment variable named ``JOBSVC_*``. A bad value
stops the process at start-up with a message naming the variable, instead of failing
later on the first request that needs it.
"""

from __future__ import annotations

import os
from ipaddress import IPv4Network, IPv6Network, ip_network
from urllib.parse import unquote, urlsplit


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


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
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
    """Translate ``postgresql://user:password@host:port/dbname`` into a Django DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"{name}: expected a postgresql:// URL, got {url!r}")
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigError(f"{name}: the URL names no database: {url!r}")
    return {
        "ENGINE": "jobsvc.postgresql",
        "NAME": unquote(database),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }
