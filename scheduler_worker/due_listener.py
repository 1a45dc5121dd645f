"""A thread that listens on one shard's database for jobs created due now.

The API notifies the shard's database when it has committed jobs due within the
dispatch-ahead window (jobsvc.jobs.due_now); this thread holds a connection of its own
that LISTENs on that channel and passes the users notified to ``on_due`` (the shard's
dispatcher: ``ShardRounds.dispatch_express``), which sends the jobs of those with few
in flight to the express topic at once, beside the dispatcher's rounds.

Notifications are hints: while this thread is not connected (a database restart, a
failover) they are lost, and the dispatcher's rounds find the jobs as they always do.
It reconnects after ``retry_delay`` seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

from jobsvc.jobs.due_now import CHANNEL, users_notified
from jobsvc.postgresql.warm_up import open_connections

logger = logging.getLogger(__name__)

# Seconds a wait for notifications lasts: how soon the thread sees a stop.
_WAIT = 0.5


class DueListener:
    def __init__(
        self,
        *,
        shard_id: int,
        alias: str,
        on_due: Callable[[set[int]], object],
        retry_delay: float = 1.0,
    ) -> None:
        self.shard_id = shard_id
        self.alias = alias
        self._on_due = on_due
        self._retry_delay = retry_delay
        self._stopped = threading.Event()
        self.listening = threading.Event()  # set while LISTEN is in effect
        self._thread = threading.Thread(
            target=self._run, name=f"due-listener-{shard_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            # The connections on_due uses on this thread (the shard's; the control
            # database's, for users' weights), opened now, not for the first notification.
            open_connections((self.alias, DEFAULT_DB_ALIAS))
            while not self._stopped.is_set():
                try:
                    self._listen()
                except Exception as exc:  # psycopg's, or a bug in on_due: never die quietly
                    log = logger.info if isinstance(exc, psycopg.Error) else logger.exception
                    log(
                        "shard %s: not listening for due jobs, again in %.1f s: %s",
                        self.shard_id,
                        self._retry_delay,
                        exc,
                    )
                    self._stopped.wait(self._retry_delay)
        finally:
            connections.close_all()  # this thread's own, from on_due

    def _listen(self) -> None:
        params = connections[self.alias].get_connection_params()
        with psycopg.connect(**params, autocommit=True) as connection:
            connection.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            try:
                while not self._stopped.is_set():
                    # As soon as one comes, with the others that came in the same packet.
                    payloads = [
                        notify.payload
                        for notify in connection.notifies(timeout=_WAIT, stop_after=1)
                    ]
                    users = users_notified(payloads)
                    if users and not self._stopped.is_set():
                        self._on_due(users)
            finally:
                self.listening.clear()
