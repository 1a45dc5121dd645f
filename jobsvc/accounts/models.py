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

    class Meta:
        db_table = "accounts_user"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(job_weight__gt=0), name="accounts_user_job_weight_positive"
            ),
        ]
