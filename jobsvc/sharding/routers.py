"""Keeps job tables on the shard databases and everything else on the control database."""

from __future__ import annotations

from typing import Any

from jobsvc.sharding.shards import is_shard_alias

# App labels whose tables live on every shard database, and only there.
SHARDED_APP_LABELS = frozenset({"jobs"})


class ShardRouter:
    """Sharded models are always read and written with an explicit ``using(shard_alias)``.

    Without one they fall through to the control database, which has no job tables, so
    the mistake fails loudly instead of writing to an arbitrary shard.
    """

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return self._db_for(model, **hints)

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        return self._db_for(model, **hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return obj1._state.db == obj2._state.db

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (app_label in SHARDED_APP_LABELS) == is_shard_alias(db)

    def _db_for(self, model: type, **hints: Any) -> str | None:
        if model._meta.app_label not in SHARDED_APP_LABELS:
            return "default"
        instance = hints.get("instance")
        if instance is not None and instance._state.db:
            return instance._state.db
        return None
