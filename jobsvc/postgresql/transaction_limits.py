"""Limits for the rest of one transaction, over the session's (``jobsvc.settings``).

Set with ``set_config(..., is_local => true)``: they end with the transaction, so a
pooled connection goes back with the session's own limits.
"""

from __future__ import annotations

_SET_LOCAL = "SELECT set_config(%(name)s, %(ms)s::text, true)"


def limit_idle(cursor, seconds: float) -> None:
    """PostgreSQL ends the transaction once it sits idle ``seconds`` (instead of
    JOBSVC_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS)."""
    _set_local(cursor, "idle_in_transaction_session_timeout", seconds)


def limit_statements(cursor, seconds: float) -> None:
    """PostgreSQL cancels a statement of the transaction that runs ``seconds`` (instead
    of JOBSVC_DB_STATEMENT_TIMEOUT_SECONDS)."""
    _set_local(cursor, "statement_timeout", seconds)


def _set_local(cursor, name: str, seconds: float) -> None:
    cursor.execute(_SET_LOCAL, {"name": name, "ms": round(seconds * 1000)})
