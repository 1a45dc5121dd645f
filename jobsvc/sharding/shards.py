"""The configured shards: how many, their database aliases, and which one gets a new job."""

from __future__ import annotations

import random
import zlib

from django.conf import settings

SHARD_ALIAS_PREFIX = "shard_"


class UnknownShard(LookupError):
    """A job id names a shard this deployment does not have."""


def shard_count() -> int:
    return len(settings.SHARD_DB_URLS)


def shard_ids() -> range:
    return range(shard_count())


def shard_alias(shard_id: int) -> str:
    """Return the Django database alias of a shard."""
    if not 0 <= shard_id < shard_count():
        raise UnknownShard(f"no shard {shard_id} (this deployment has {shard_count()})")
    return f"{SHARD_ALIAS_PREFIX}{shard_id}"


def shard_aliases() -> list[str]:
    return [f"{SHARD_ALIAS_PREFIX}{shard_id}" for shard_id in shard_ids()]


def is_shard_alias(alias: str) -> bool:
    return alias.startswith(SHARD_ALIAS_PREFIX)


def pick_shard_for_new_jobs() -> int:
    """Spread new jobs uniformly at random over the shards.

    Nothing depends on the choice being unpredictable, so the process's Mersenne Twister
    does it, without the getrandom() system call per create that `secrets` makes.
    """
    return random.randrange(shard_count())


def shard_for_idempotency_key(*, user_id: int, key: str) -> int:
    """The shard that holds a user's idempotency key and the jobs it created.

    Stable for a given shard count, so a retried request finds its first attempt.
    """
    return zlib.crc32(f"{user_id}:{key}".encode()) % shard_count()
