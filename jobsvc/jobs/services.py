"""Creating jobs: one or many, optionally idempotent, on one shard or spread over several.

Changes to jobs that exist (cancel, reschedule, retry) are in ``jobsvc.jobs.changes``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobsvc import errors
from jobsvc.jobs import spread, store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.metrics import JOBS_CREATED
from jobsvc.sharding.ids import new_job_id, shard_of
from jobsvc.sharding.shards import (
    pick_shard_for_new_jobs,
    shard_alias,
    shard_count,
    shard_for_idempotency_key,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CreateResult:
    jobs: list[Job] | list[store.JobRow]
    created: bool  # False when an Idempotency-Key replayed an earlier request


def jobs_create(
    *, user_id: int, specs: list[JobSpec], is_bulk: bool, idempotency_key: str | None = None
) -> CreateResult:
    """Create jobs all or none; with a key, a retry returns the first result.

    A request of ``BULK_SPREAD_MIN_JOBS`` or more is dealt over every shard, created by
    two-phase commit (``jobsvc.jobs.spread``): a user's jobs are then dispatched by every
    shard's scheduler, not by one or two. A smaller one goes to one shard, in one local
    transaction. Requests without a key pick their (first) shard at random; a key decides
    it by hashing, so every retry looks in the same place.
    """
    if (
        settings.BULK_SPREAD_MIN_JOBS
        and len(specs) >= settings.BULK_SPREAD_MIN_JOBS
        and shard_count() > 1
        and _two_phase_allowed
        and not spread.inside_a_transaction()
    ):
        try:
            return _create(
                user_id=user_id,
                specs=specs,
                is_bulk=is_bulk,
                idempotency_key=idempotency_key,
                spread_over_shards=True,
            )
        except spread.TwoPhaseUnavailable as exc:
            _two_phase_not_allowed(exc)
    return _create(
        user_id=user_id,
        specs=specs,
        is_bulk=is_bulk,
        idempotency_key=idempotency_key,
        spread_over_shards=False,
    )


def _create(
    *,
    user_id: int,
    specs: list[JobSpec],
    is_bulk: bool,
    idempotency_key: str | None,
    spread_over_shards: bool,
) -> CreateResult:
    """The request's rows on their shard (or dealt over every shard, from the first),
    inserted with the key's claim if there is a key; the first result if the key is in use."""
    first = _first_shard(user_id, idempotency_key)
    now = timezone.now()
    if spread_over_shards:
        shard_ids = spread.deal(len(specs), shards=shard_count(), first=first)
    else:
        shard_ids = [first] * len(specs)
    rows = _new_rows(user_id, specs, shard_ids, now=now)
    insert = spread.insert_spread if spread_over_shards else _insert_on_one_shard
    if idempotency_key is None:
        insert(rows, coordinator=first, claim_key=None)
    else:
        request_hash = _request_hash(specs, is_bulk=is_bulk)
        claim_key = functools.partial(
            _claim_key,
            user_id=user_id,
            key=idempotency_key,
            request_hash=request_hash,
            rows=rows,
            is_bulk=is_bulk,
            now=now,
        )
        if not insert(rows, coordinator=first, claim_key=claim_key):
            return _replay(shard_alias(first), user_id, idempotency_key, request_hash)
    JOBS_CREATED.inc(len(rows))
    horizon = store.dispatch_horizon(now)
    due_now = {row.shard_id for row in rows if row.execute_at <= horizon}
    store.wake_schedulers(shard_alias(shard_id) for shard_id in due_now)
    return CreateResult(jobs=rows, created=True)


def _insert_on_one_shard(
    rows: list[store.JobRow], *, coordinator: int, claim_key: Callable[[str], bool] | None
) -> bool:
    """Insert the rows on the ``coordinator`` shard; False if ``claim_key`` refused."""
    alias = shard_alias(coordinator)
    if claim_key is None:
        # One INSERT (or one COPY) is atomic by itself: no BEGIN/COMMIT round trips needed.
        store.insert_jobs(alias, rows)
        return True
    with transaction.atomic(using=alias):
        if not claim_key(alias):
            return False
        store.insert_jobs(alias, rows)
    return True


def _first_shard(user_id: int, idempotency_key: str | None) -> int:
    """The request's shard (or a spread request's coordinator): at random, or, with a key,
    by hashing, so that every retry looks in the same place."""
    if idempotency_key is None:
        return pick_shard_for_new_jobs()
    return shard_for_idempotency_key(user_id=user_id, key=idempotency_key)


def _new_rows(
    user_id: int, specs: list[JobSpec], shard_ids: list[int], *, now: datetime
) -> list[store.JobRow]:
    return [
        store.new_job_row(
            job_id=new_job_id(shard_id=shard_id, at=now),
            user_id=user_id,
            spec=spec,
            shard_id=shard_id,
            now=now,
        )
        for shard_id, spec in zip(shard_ids, specs, strict=True)
    ]


def _claim_key(
    alias: str,
    *,
    user_id: int,
    key: str,
    request_hash: str,
    rows: list[store.JobRow],
    is_bulk: bool,
    now: datetime,
) -> bool:
    """Record the Idempotency-Key with the request's jobs; False if it is in use."""
    return store.claim_idempotency_key(
        alias,
        user_id=user_id,
        key=key,
        request_hash=request_hash,
        job_ids=[row.id for row in rows],
        is_bulk=is_bulk,
        now=now,
        ttl=settings.IDEMPOTENCY_KEY_TTL,
    )


_two_phase_allowed = True


def _two_phase_not_allowed(exc: spread.TwoPhaseUnavailable) -> None:
    """Create on one shard from now on in this process; say why, once."""
    global _two_phase_allowed
    _two_phase_allowed = False
    logger.warning(
        "bulk requests go to one shard each: the shard servers do not allow prepared "
        "transactions (set max_prepared_transactions > 0 to spread them): %s",
        exc,
    )


def _replay(alias: str, user_id: int, key: str, request_hash: str) -> CreateResult:
    first_hash, job_ids, _ = store.read_idempotency_key(alias, user_id=user_id, key=key)
    if first_hash != request_hash:
        raise errors.IdempotencyKeyReused(
            "This Idempotency-Key was already used with a different request body."
        )
    jobs = store.jobs_by_ids(job_ids)
    if len(jobs) < len(job_ids):
        # A spread request that lost a shard after its commit point: that shard's share
        # is still prepared, invisible, until resolved. Resolve it now, not at the sweep.
        missing = set(job_ids).difference(job.id for job in jobs)
        for shard_id in sorted({shard_of(job_id) for job_id in missing}):
            spread.resolve_prepared(shard_alias(shard_id), shard_id)
        jobs = store.jobs_by_ids(job_ids)
    return CreateResult(jobs=jobs, created=False)


def _request_hash(specs: list[JobSpec], *, is_bulk: bool) -> str:
    """A digest of the whole validated request: every field of every spec, by name.

    Hashing the validated specs (not the raw body) makes equal requests equal however
    they were spelled (another time zone, a default left out or written out), and any
    field added to ``JobSpec`` is covered without touching this function.
    """
    canonical = json.dumps(
        [is_bulk, [_spec_fields(spec) for spec in specs]],
        separators=(",", ":"),
        sort_keys=True,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _spec_fields(spec: JobSpec) -> dict[str, Any]:
    fields = dataclasses.asdict(spec)
    if spec.delay_seconds is not None:
        del fields["execute_at"]  # now + delay: it differs on every retry of one request
    return {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in fields.items()
    }
