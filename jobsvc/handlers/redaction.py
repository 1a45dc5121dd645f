"""What of a job's handler parameters anyone but the executor may see.

Header values of the ``http`` handler (``{"headers": {"Authorization": "Bearer ..."}}``)
are credentials for the receiver: they are write-only. The API, the admin, dead letters
and the delivery's own body show the header names with REDACTED for each value; only the
executor reads the stored values, to send them. The rule is by parameter name, whatever
the handler, so a project's own handler that takes ``headers`` is covered too.
"""

from __future__ import annotations

from typing import Any

REDACTED = "***"
WRITE_ONLY_MAPPINGS = ("headers",)  # parameters whose values are secrets, names are not


def public_params(params: Any) -> Any:
    """``params`` with every write-only value replaced by REDACTED (a copy; other values
    as they were)."""
    if not isinstance(params, dict):
        return params
    public = dict(params)
    for name in WRITE_ONLY_MAPPINGS:
        values = public.get(name)
        if isinstance(values, dict):
            public[name] = dict.fromkeys(values, REDACTED)
    return public
