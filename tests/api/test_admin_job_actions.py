"""The admin's job actions (cancel, redrive) need the change permission on jobs, and each
leaves an entry in the admin's log."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission
from django.test import Client

from tests.api.support import insert_job, stored_job

pytestmark = pytest.mark.django_db(databases="__all__")


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def run_action(client: Client, action: str, job_ids: list[str]):
    return client.post(
        "/admin/jobs/job/?shard=0",
        {"action": action, "_selected_action": job_ids, "index": "0"},
        follow=True,
    )


@pytest.fixture
def viewer(make_user):
    """Staff who may view jobs, and nothing more."""
    user = make_user(is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="jobs", codename="view_job")
    )
    return user


@pytest.fixture
def superuser(make_user):
    user = make_user(is_staff=True)
    user.is_superuser = True
    user.save()
    return user


@pytest.mark.parametrize("action", ["cancel_jobs", "redrive_jobs"])
def test_a_staff_user_who_may_only_view_jobs_is_not_offered_the_actions(viewer, action):
    listing = admin_client(viewer).get("/admin/jobs/job/?shard=0")

    assert listing.status_code == 200
    assert f'value="{action}"' not in listing.content.decode()


def test_a_staff_user_who_may_only_view_jobs_cannot_cancel_one(viewer, user):
    job = insert_job(user_id=user.pk, shard_id=0)

    run_action(admin_client(viewer), "cancel_jobs", [job.id])

    assert stored_job(job.id).status == "scheduled"


def test_a_staff_user_who_may_only_view_jobs_cannot_redrive_one(viewer, user):
    job = insert_job(user_id=user.pk, shard_id=0, status="failed")

    run_action(admin_client(viewer), "redrive_jobs", [job.id])

    assert stored_job(job.id).status == "failed"


def test_each_job_an_action_changes_is_logged_with_who_did_it(superuser, user):
    job = insert_job(user_id=user.pk, shard_id=0)

    response = run_action(admin_client(superuser), "cancel_jobs", [job.id])

    assert response.status_code == 200
    assert stored_job(job.id).status == "cancelled"
    entry = LogEntry.objects.get(object_id=job.id)
    assert (entry.user_id, entry.action_flag) == (superuser.pk, CHANGE)
    assert "Cancelled" in entry.get_change_message()
