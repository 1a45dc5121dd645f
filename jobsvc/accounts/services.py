"""Writes to users."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction

from jobsvc import errors
from jobsvc.accounts.models import User


@transaction.atomic(using="default")
def user_create(
    *, username: str, password: str, job_weight: float, created_by: User | None
) -> User:
    """Create a user. Without a staff caller: only if sign-up is on and within the weight cap."""
    by_staff = created_by is not None and created_by.is_staff
    if not by_staff and not settings.SIGNUP_ENABLED:
        raise errors.SignupDisabled("Self-service sign-up is disabled; ask an administrator.")
    if not by_staff and job_weight > settings.SELF_SERVICE_MAX_JOB_WEIGHT:
        raise errors.JobWeightNeedsStaff(
            f"job_weight above {settings.SELF_SERVICE_MAX_JOB_WEIGHT:g} needs a staff user.",
            fields={"job_weight": [f"At most {settings.SELF_SERVICE_MAX_JOB_WEIGHT:g}."]},
        )
    user = User(username=username, job_weight=job_weight)
    user.set_password(password)
    try:
        with transaction.atomic(using="default"):
            user.save(using="default")
    except IntegrityError:
        raise errors.UsernameTaken(
            "username: a user with that username already exists.",
            fields={"username": ["A user with that username already exists."]},
        ) from None
    return user
