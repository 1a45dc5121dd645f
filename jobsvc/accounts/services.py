"""Writes to users: sign-up, password changes."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate, password_validation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from jobsvc import errors
from jobsvc.accounts.authentication import forget_user
from jobsvc.accounts.models import User
from jobsvc.accounts.usernames import username_key


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
    user = User(username=User.normalize_username(username), job_weight=job_weight)
    # "Sam" and "\uff53am" are taken once "sam" is (jobsvc.accounts.usernames). The
    # answer says only that the name is taken, not which name took it.
    if User.objects.filter(username_key=username_key(user.username)).exists():
        raise _username_taken()
    user.set_password(password)
    try:
        with transaction.atomic(using="default"):
            user.save(using="default")
    except IntegrityError:  # taken meanwhile by a concurrent sign-up
        raise _username_taken() from None
    return user


def _username_taken() -> errors.UsernameTaken:
    return errors.UsernameTaken(
        "username: this username is taken.", fields={"username": ["This username is taken."]}
    )


@transaction.atomic(using="default")
def user_password_change(
    *, user_id: int, current_password: str, new_password: str, request: HttpRequest | None
) -> None:
    """Set a new password if the current one is right; every earlier token stops working.

    A wrong current password is a failed log-in (``request`` is for its log line).
    """
    user = User.objects.select_for_update().get(pk=user_id)
    if authenticate(request, username=user.username, password=current_password) is None:
        raise errors.InvalidInput(
            "current_password: wrong password.", fields={"current_password": ["Wrong password."]}
        )
    try:
        password_validation.validate_password(new_password, user=user)
    except DjangoValidationError as exc:
        messages = list(exc.messages)
        raise errors.InvalidInput(
            f"new_password: {messages[0]}", fields={"new_password": messages}
        ) from None
    user.set_password(new_password)
    user.save(update_fields=["password"])
    forget_user(user.pk)  # this process; the others within AUTH_USER_CACHE_SECONDS
