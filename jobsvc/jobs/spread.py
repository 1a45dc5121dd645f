"""A large bulk request's jobs, spread over every shard and created all or none.

Why: a user's jobs start only as fast as the shards holding them send them, and each
shard's scheduler gives a user its weighted part of that shard's dispatch. Dealt over
every shard, a user's jobs are where all of the dispatch is, not on the one or two shards
it shares with whoever else is there.

All or none across shards is PostgreSQL's two-phase commit, with the decision written in
one place (presumed abort):

1. The *coordinator* shard (the Idempotency-Key's shard, else the first of the deal)
   opens a transaction: the key (if any), its share of the jobs, and a row of
   ``jobs_bulk_decision`` saying the batch committed.
2. Every other shard gets its share in a transaction of its own, ended by ``PREPARE
   TRANSACTION``: durable, invisible to every query, holding its rows.
3. The coordinator commits: that is the commit point. Then each prepared transaction is
   committed (``COMMIT PREPARED``).

A failure before 3 rolls everything back. A prepared transaction left behind (the API
process or its connection died between 2 and the end of 3) is resolved by its shard's
scheduler at each sweep (``resolve_prepared``), once ``SWEEP_GRACE`` old: committed if
the coordinator's decision row says the batch committed; rolled back once
``RESOLVE_AFTER`` old if it does not, after telling the coordinator it aborted (a row
saying so, whose primary key the coordinator's own row would need: a coordinator that is
still running cannot commit after it). Until then those jobs are not visible; they are
dispatched when committed, late if their time passed. A retry of a keyed request does
not wait for the sweep: it resolves the shards its listed jobs are missing from
(``jobsvc.jobs.services``), so the replay lists every job.

The servers need ``max_prepared_transactions`` > 0 (tools/devstack and
docker-compose.yml set 100). Where it is 0, requests fall back to one shard
(``TwoPhaseUnavailable``).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, connections, transaction

from jobsvc.jobs import store
from jobsvc.sharding.shards import shard_alias, shard_aliases

logger = logging.getLogger(__name__)

# A prepared transaction this old is the resolver's: its request is over (a create takes
# milliseconds; the API's requests time out long before this).
RESOLVE_AFTER = timedelta(seconds=30)
# The sweep leaves a prepared transaction younger than this to its request, decided or
# not: a request commits its shares a few milliseconds after its commit point, and a sweep
# that came between them would commit the same transaction while the request's own COMMIT
# PREPARED failed as busy.
SWEEP_GRACE = timedelta(seconds=5)
# Decisions are kept this long: long after every prepared transaction was resolved.
DECISION_RETENTION = timedelta(days=1)

_GID_PREFIX = "jobsvc-bulk"
_GID = re.compile(
    rf"^{_GID_PREFIX}:(?P<coordinator>\d+)\.(?P<nonce>[0-9a-f]{{32}}):(?P<shard>\d+)$"
)
_PREPARED_DISABLED = "55000"  # object_not_in_prerequisite_state: max_prepared_transactions = 0
_NO_SUCH_PREPARED = "42704"  # undefined_object: no prepared transaction of that identifier


class TwoPhaseUnavailable(Exception):
    """The shard servers do not allow prepared transactions (max_prepared_transactions = 0)."""


def inside_a_transaction() -> bool:
    """Whether a shard connection is inside a caller's transaction block (a test that rolls
    back, say): PREPARE would end it, so such a request goes to one shard."""
    return any(connections[alias].in_atomic_block for alias in shard_aliases())


def deal(count: int, *, shards: int, first: int) -> list[int]:
    """The shard of each of ``count`` jobs: in turn over ``shards``, starting at ``first``."""
    return [(first + index) % shards for index in range(count)]


def insert_spread(
    rows: list[store.JobRow],
    *,
    coordinator: int,
    claim_key: Callable[[str], bool] | None = None,
) -> bool:
    """Insert the rows on their shards, all or none; False if ``claim_key`` refused.

    ``claim_key(alias)`` runs first in the coordinator's transaction (an Idempotency-Key
    already in use: nothing is inserted). Raises ``TwoPhaseUnavailable`` before anything
    is inserted if the servers do not allow prepared transactions, and the database's error
    if a shard fails (nothing is inserted, or, if the coordinator's commit itself failed,
    the resolver decides from the decision row: all or none still).
    """
    by_shard: dict[int, list[store.JobRow]] = defaultdict(list)
    for row in rows:
        by_shard[row.shard_id].append(row)
    batch = f"{coordinator}.{uuid.uuid4().hex}"
    coordinator_alias = shard_alias(coordinator)
    prepared: list[tuple[str, str]] = []  # (alias, gid)
    ready = False
    try:
        with transaction.atomic(using=coordinator_alias):
            if claim_key is not None and not claim_key(coordinator_alias):
                return False
            own = by_shard.pop(coordinator, [])
            if own:
                store.insert_jobs(coordinator_alias, own)
            for shard_id, shard_rows in sorted(by_shard.items()):
                gid = _gid(batch, shard_id)
                _prepare(shard_alias(shard_id), gid, shard_rows)
                prepared.append((shard_alias(shard_id), gid))
            store.record_bulk_decision(coordinator_alias, batch=batch, committed=True)
            ready = True  # the commit follows: from here its outcome decides
    except BaseException:
        if not ready:
            for alias, gid in prepared:
                _finish(alias, gid, commit=False)
        raise
    for alias, gid in prepared:
        _finish(alias, gid, commit=True)
    return True


def resolve_prepared(alias: str, shard_id: int, *, grace: timedelta = timedelta(0)) -> int:
    """Commit or roll back this shard's prepared transactions left by bulk requests.

    One younger than ``grace`` is left alone (the sweep's ``SWEEP_GRACE``: its request is
    most likely finishing it). Of the others, one whose batch is decided is finished at
    once: its request lost this shard after the commit point, and its jobs should not stay
    invisible (a keyed retry asks for that with no grace). One not decided yet is its
    request's while younger than ``RESOLVE_AFTER``; after that it is decided here
    (aborted, unless the coordinator committed meanwhile). How many were resolved.
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT gid, prepared <= now() - %s, prepared <= now() - %s FROM pg_prepared_xacts"
            " WHERE database = current_database() AND gid LIKE %s ORDER BY prepared",
            [RESOLVE_AFTER, grace, f"{_GID_PREFIX}:%"],
        )
        prepared = cursor.fetchall()
    resolved = 0
    for gid, old, past_grace in prepared:
        if not past_grace:
            continue
        match = _GID.match(gid)
        if match is None or int(match["shard"]) != shard_id:
            continue  # not one of ours, or another shard's database on this server
        coordinator = int(match["coordinator"])
        batch = f"{coordinator}.{match['nonce']}"
        decide = store.decide_bulk if old else store.bulk_decision
        try:
            committed = decide(shard_alias(coordinator), batch=batch)
        except DatabaseError as exc:  # the coordinator's shard is down: the next sweep asks
            logger.warning(
                "shard %s: cannot learn the decision for %s from shard %s: %s",
                shard_id,
                gid,
                coordinator,
                exc,
                extra={"shard": shard_id, "action": "resolve"},
            )
            continue
        if committed is None:
            continue  # young and undecided: its request is still running
        logger.warning(
            "shard %s: %s a bulk request's prepared transaction %s left behind",
            shard_id,
            "committing" if committed else "rolling back",
            gid,
            extra={"shard": shard_id, "action": "resolve"},
        )
        if _finish(alias, gid, commit=committed):
            resolved += 1
    return resolved


def _gid(batch: str, shard_id: int) -> str:
    return f"{_GID_PREFIX}:{batch}:{shard_id}"


def _quoted(gid: str) -> str:
    """The transaction identifier as an SQL literal: PREPARE and COMMIT PREPARED take no
    parameters. Only identifiers this module makes (checked) are ever quoted."""
    if _GID.match(gid) is None:
        raise ValueError(f"not a bulk transaction identifier: {gid!r}")
    return f"'{gid}'"


def _prepare(alias: str, gid: str, rows: list[store.JobRow]) -> None:
    """Insert ``rows`` in a transaction of their own on ``alias``, prepared as ``gid``."""
    connection = connections[alias]
    if connection.in_atomic_block:  # a caller's transaction would be ended by PREPARE
        raise RuntimeError(f"{alias} is inside a transaction block")
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            store.insert_jobs(alias, rows)
            cursor.execute(f"PREPARE TRANSACTION {_quoted(gid)}")
        except BaseException as exc:
            try:
                cursor.execute("ROLLBACK")
            except DatabaseError:
                connection.close()  # broken: a new one is made on next use
            if isinstance(exc, DatabaseError) and _sqlstate(exc) == _PREPARED_DISABLED:
                raise TwoPhaseUnavailable(str(exc)) from exc
            raise


def _finish(alias: str, gid: str, *, commit: bool) -> bool:
    """COMMIT or ROLLBACK PREPARED; False (logged) if it failed: the resolver finishes it."""
    verb = "COMMIT" if commit else "ROLLBACK"
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"{verb} PREPARED {_quoted(gid)}")
    except DatabaseError as exc:
        if _sqlstate(exc) == _NO_SUCH_PREPARED:  # finished by a sweep or a retry meanwhile
            return False
        logger.warning(
            "%s PREPARED %s failed (the shard's scheduler will resolve it): %s",
            verb,
            gid,
            exc,
            extra={"action": "resolve"},
        )
        return False
    return True


def _sqlstate(exc: DatabaseError) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)
