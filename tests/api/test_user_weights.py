"""job_weight stays within JOBSVC_MIN_JOB_WEIGHT..JOBSVC_MAX_JOB_WEIGHT on every path that
sets it besides the API (tests/api/test_users_api.py): the admin's forms, the model's
save, and the database itself."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict
from django.test import RequestFactory

from jobsvc.accounts.models import User

pytestmark = pytest.mark.django_db(databases="__all__")

BAD_WEIGHTS = [1e-300, 0.0, -1.0, 0.0009, 1000.5]


def admin_change_form(user: User, staff: User, **changes):
    """The admin's change form of ``user``, as a superuser gets it, filled with changes."""
    staff.is_superuser = True
    request = RequestFactory().post("/admin/accounts/user/")
    request.user = staff
    model_admin = admin.site._registry[User]
    form_class = model_admin.get_form(request, obj=user, change=True)
    data = {**model_to_dict(user), **changes}
    data = {key: value for key, value in data.items() if value is not None}
    return form_class(data=data, instance=user)


@pytest.mark.parametrize("weight", BAD_WEIGHTS)
def test_the_admin_change_form_refuses_a_weight_outside_the_bounds(make_user, weight):
    user, staff = make_user(), make_user(is_staff=True)

    form = admin_change_form(user, staff, job_weight=weight)

    assert not form.is_valid()
    assert "job_weight" in form.errors


def test_the_admin_change_form_accepts_a_weight_within_the_bounds(make_user, settings):
    user, staff = make_user(), make_user(is_staff=True)

    form = admin_change_form(user, staff, job_weight=settings.MAX_JOB_WEIGHT)

    assert "job_weight" not in form.errors


@pytest.mark.parametrize("weight", BAD_WEIGHTS)
def test_saving_a_user_with_a_weight_outside_the_bounds_is_refused(make_user, weight):
    user = make_user()
    user.job_weight = weight

    with pytest.raises(ValidationError) as caught:
        user.save()

    assert "job_weight" in caught.value.message_dict
    user.refresh_from_db()
    assert user.job_weight == 1.0


@pytest.mark.parametrize("weight", [1e-300, 0.0, -1.0, 2e6, float("nan"), float("inf")])
def test_the_database_refuses_a_weight_outside_the_hard_bounds(make_user, weight):
    user = make_user()

    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.filter(pk=user.pk).update(job_weight=weight)
