"""Users of the service. Lives in the control database."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.core.validators import MinValueValidator
from django.db import models

DEFAULT_JOB_WEIGHT = 1.0


class User(AbstractUser):
    """A user; ``job_weight`` is their share of dispatch capacity relative to other users."""

    job_weight = models.FloatField(
        default=DEFAULT_JOB_WEIGHT,
        validators=[MinValueValidator(0.001)],
        help_text="Share of dispatch capacity relative to other users with due jobs.",
    )
    # Per-user limits; empty: the deployment's default (JOBSVC_USER_*), 0: no limit.
    max_unfinished_jobs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Scheduled, queued and running jobs this user may have at once. Empty: "
        "JOBSVC_USER_MAX_UNFINISHED_JOBS; 0: no limit.",
    )
    create_rate_per_second = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Jobs this user may create per second in each API process. Empty: "
        "JOBSVC_USER_CREATE_RATE_PER_SECOND; 0: no limit.",
    )

    class Meta:
        db_table = "accounts_user"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(job_weight__gt=0), name="accounts_user_job_weight_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(create_rate_per_second__gte=0),
                name="accounts_user_create_rate_not_negative",
            ),
        ]
