"""The service's error hierarchy. ``jobsvc.api.errors`` translates it to HTTP, in one place.

ServiceError
├── NotFound            the thing does not exist, or is not the caller's
│   └── JobNotFound
├── Conflict            the request is valid but the thing's state forbids it
│   ├── JobNotCancellable
│   ├── JobNotReschedulable
│   ├── JobNotRetryable
│   └── UsernameTaken
├── Unprocessable       the request is well-formed but cannot be applied as sent (422)
│   └── IdempotencyKeyReused
├── Forbidden           the caller may not do this
│   ├── SignupDisabled
│   ├── JobWeightNeedsStaff
│   └── StaffOnly
├── InvalidInput        the request names something malformed
└── TooManyRequests     a limit refuses the request for now (429, Retry-After, RateLimit)
    ├── Throttled             too many log-ins, sign-ups or password changes
    ├── CreateRateLimited
    ├── UnfinishedJobsLimited
    └── StoredBytesLimited
"""

from __future__ import annotations

from collections.abc import Sequence

from jobsvc.rate_limits import QuotaState


class ServiceError(Exception):
    """Root of every error the service reports to a caller."""

    code = "error"

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


class NotFound(ServiceError):
    """The thing does not exist, or belongs to someone else."""

    code = "not_found"


class JobNotFound(NotFound):
    """No job with that id belongs to the caller."""

    code = "job_not_found"


class Conflict(ServiceError):
    """The thing's current state forbids the request."""

    code = "conflict"


class JobNotCancellable(Conflict):
    """The job has started or finished; only scheduled or queued jobs can be cancelled."""

    code = "job_not_cancellable"


class JobNotReschedulable(Conflict):
    """The job was dispatched, has started or has finished; only a scheduled job can move."""

    code = "job_not_reschedulable"


class JobNotRetryable(Conflict):
    """Only a failed job can be given new attempts."""

    code = "job_not_retryable"


class UsernameTaken(Conflict):
    """Another user has this username."""

    code = "username_taken"


class Unprocessable(ServiceError):
    """The request is well-formed, but cannot be applied as it was sent."""

    code = "unprocessable"


class IdempotencyKeyReused(Unprocessable):
    """The Idempotency-Key was first used with a different request (the IETF draft's 422)."""

    code = "idempotency_key_reused"


class Forbidden(ServiceError):
    """The caller may not do this."""

    code = "forbidden"


class SignupDisabled(Forbidden):
    """Self-service sign-up is turned off; a staff user must create accounts."""

    code = "signup_disabled"


class JobWeightNeedsStaff(Forbidden):
    """The requested job_weight is above the self-service cap."""

    code = "job_weight_needs_staff"


class StaffOnly(Forbidden):
    """The endpoint acts on every user's jobs: staff only."""

    code = "staff_only"


class InvalidInput(ServiceError):
    """The request names something malformed."""

    code = "invalid"


class TooManyRequests(ServiceError):
    """A limit refuses the request for now; ``retry_after`` says for how long, ``quotas``
    the state of the limits that applied (sent as RateLimit header fields)."""

    code = "too_many_requests"

    def __init__(
        self, message: str, *, retry_after: int, quotas: Sequence[QuotaState] = ()
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # whole seconds, at least 1
        self.quotas = tuple(quotas)


class Throttled(TooManyRequests):
    """Too many log-ins, sign-ups or password changes from this address or for this account."""

    code = "throttled"


class CreateRateLimited(TooManyRequests):
    """The user creates jobs faster than their create rate allows."""

    code = "create_rate_limited"


class UnfinishedJobsLimited(TooManyRequests):
    """The user has as many unfinished jobs as they may have."""

    code = "unfinished_jobs_limited"


class StoredBytesLimited(TooManyRequests):
    """The user's unfinished jobs hold as many bytes (messages and parameters) as allowed."""

    code = "stored_bytes_limited"
