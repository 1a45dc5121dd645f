"""Probes, the OpenAPI schema, and the admin pages for jobs (one shard at a time) and users."""

from __future__ import annotations

from datetime import timedelta
from ipaddress import ip_network

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from jobsvc.admin_middleware import ADMIN_PATH_PREFIX
from jobsvc.api.schema_view import SchemaApi
from jobsvc.sharding.shards import shard_count
from tests.api.support import insert_job, stored_job
from tests.conftest import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db(databases="__all__")

SCHEMA_URL = "/api/v1/schema/"
API_PATHS = {
    "/api/v1/users",
    "/api/v1/auth/login",
    "/api/v1/auth/refresh",
    "/api/v1/auth/logout",
    "/api/v1/me/password",
    "/api/v1/me/jobs",
    "/api/v1/me/jobs/{job_id}",
    "/api/v1/me/jobs/{job_id}/cancel",
    "/api/v1/me/jobs/cancel",
    "/api/v1/me/jobs/{job_id}/reschedule",
    "/api/v1/me/jobs/{job_id}/retry",
    "/api/v1/me/jobs/retry",
    "/api/v1/jobs/redrive",
}


def test_healthz_answers_ok():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_answers_ok_when_every_database_answers():
    response = Client().get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "databases": 1 + shard_count()}


@pytest.mark.parametrize("peer", ["203.0.113.9", "2001:db8::1"])
def test_readyz_answers_only_the_networks_that_may_read_metrics(peer):
    response = Client().get("/readyz", REMOTE_ADDR=peer)

    assert response.status_code == 403
    assert "databases" not in response.json()


def test_healthz_answers_anyone():
    assert Client().get("/healthz", REMOTE_ADDR="203.0.113.9").status_code == 200


# --- OpenAPI schema -------------------------------------------------------------------------


def test_the_schema_is_generated_once_per_process(monkeypatch):
    calls = []
    generate = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        calls.append(1)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    monkeypatch.setattr(SchemaApi, "_schemas", {})
    first = APIClient().get(SCHEMA_URL, {"format": "json"}).json()
    second = APIClient().get(SCHEMA_URL, {"format": "json"}).json()

    assert first == second
    assert len(calls) == 1


@pytest.fixture
def schema() -> dict:
    response = APIClient().get(SCHEMA_URL, {"format": "json"})
    assert response.status_code == 200
    return response.json()


def test_the_schema_names_every_api_path(schema):
    assert set(schema["paths"]) >= API_PATHS


def test_the_schema_is_served_for_the_openapi_json_media_type():
    response = APIClient().get(SCHEMA_URL, HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    assert set(response.json()["paths"]) >= API_PATHS


def test_the_schema_documents_the_job_operations(schema):
    jobs, cancel = (
        schema["paths"]["/api/v1/me/jobs"],
        schema["paths"]["/api/v1/me/jobs/{job_id}/cancel"],
    )

    assert {"get", "post"} <= set(jobs)
    assert "201" in jobs["post"]["responses"]
    assert "post" in cancel


def test_the_schema_says_job_endpoints_take_a_bearer_token(schema):
    schemes = schema["components"]["securitySchemes"]
    (name,) = [name for name, scheme in schemes.items() if scheme.get("scheme") == "bearer"]

    for method in ("get", "post"):
        assert {name: []} in schema["paths"]["/api/v1/me/jobs"][method]["security"]


# --- admin ------------------------------------------------------------------------------------


@pytest.fixture
def admin(make_user) -> Client:
    superuser = make_user(is_staff=True)
    superuser.is_superuser = True
    superuser.save()
    client = Client()
    client.force_login(superuser)
    return client


@pytest.fixture
def job_per_shard(user) -> dict[int, str]:
    """A job on shard 0 and on the last shard, with ids newer than any made in real time.

    The shard databases may hold other jobs; the admin lists newest first, so these lead.
    """
    future = timezone.now() + timedelta(days=30)
    return {
        shard_id: insert_job(user_id=user.pk, shard_id=shard_id, created_at=future).id
        for shard_id in {0, shard_count() - 1}
    }


@pytest.mark.parametrize("shard", ["0", "1"])
def test_the_admin_lists_jobs_of_the_chosen_shard(admin, shard):
    assert admin.get("/admin/jobs/job/", {"shard": shard}).status_code == 200


def test_the_admin_list_shows_only_the_chosen_shards_jobs(admin, job_per_shard):
    last = shard_count() - 1

    page = admin.get("/admin/jobs/job/", {"shard": str(last)}).content.decode()

    assert job_per_shard[last] in page
    if last != 0:
        assert job_per_shard[0] not in page


def test_an_admin_search_by_job_id_finds_it_on_its_own_shard(admin, job_per_shard):
    job_id = job_per_shard[shard_count() - 1]

    response = admin.get("/admin/jobs/job/", {"shard": "0", "q": job_id})

    assert response.status_code == 200
    assert [job.id for job in response.context["cl"].result_list] == [job_id]


def test_an_admin_search_by_job_id_keeps_the_status_filter(admin, job_per_shard):
    job_id = job_per_shard[shard_count() - 1]  # scheduled

    response = admin.get("/admin/jobs/job/", {"status__exact": "running", "q": job_id})

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


@pytest.mark.parametrize("term", ["not-an-id", "z" * 27])
def test_an_admin_search_for_a_malformed_id_finds_nothing(admin, term):
    response = admin.get("/admin/jobs/job/", {"q": term})

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_the_admin_opens_a_jobs_page(admin, job_per_shard):
    job_id = job_per_shard[shard_count() - 1]

    response = admin.get(f"/admin/jobs/job/{job_id}/change/")

    assert response.status_code == 200
    assert stored_job(job_id).message in response.content.decode()


def test_the_admin_user_list_shows_the_job_weight(admin, make_user):
    make_user(job_weight=3.25)

    response = admin.get("/admin/accounts/user/")

    assert response.status_code == 200
    assert "column-job_weight" in response.content.decode()


def cancel_in_admin(admin: Client, *, shard_id: int, job_ids: list[str]):
    return admin.post(
        f"/admin/jobs/job/?shard={shard_id}",
        {"action": "cancel_jobs", "_selected_action": job_ids, "index": "0"},
        follow=True,
    )


def test_the_admin_cancel_action_cancels_a_scheduled_job(admin, job_per_shard):
    shard_id = shard_count() - 1

    response = cancel_in_admin(admin, shard_id=shard_id, job_ids=[job_per_shard[shard_id]])

    assert response.status_code == 200
    assert stored_job(job_per_shard[shard_id]).status == "cancelled"
    assert "Cancelled 1 job(s)" in response.content.decode()


def test_the_admin_cancel_action_leaves_a_running_job_running(admin, user):
    running = insert_job(
        user_id=user.pk,
        shard_id=0,
        created_at=timezone.now() + timedelta(days=30),
        status="running",
    )

    response = cancel_in_admin(admin, shard_id=0, job_ids=[running.id])

    assert stored_job(running.id).status == "running"
    assert "Started jobs cannot be cancelled" in response.content.decode()


def test_the_admin_needs_a_staff_login():
    response = Client().get("/admin/jobs/job/")

    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_the_admin_is_mounted_where_its_middleware_looks_for_it():
    assert reverse("admin:index") == ADMIN_PATH_PREFIX


def test_the_admin_login_form_is_csrf_protected_and_not_frameable(make_user):
    staff = make_user(is_staff=True)
    staff.is_superuser = True
    staff.save()
    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/admin/login/")
    assert page.status_code == 200
    assert page["X-Frame-Options"] == "DENY"
    credentials = {"username": staff.username, "password": DEFAULT_PASSWORD}

    assert browser.post("/admin/login/", credentials).status_code == 403  # no CSRF token

    token = page.cookies["csrftoken"].value
    response = browser.post("/admin/login/", {**credentials, "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert browser.get("/admin/jobs/job/").status_code == 200  # the session holds the login


def test_api_responses_set_no_cookie(client_for, user):
    response = client_for(user).post(
        "/api/v1/me/jobs",
        {"message": "m", "execute_at": (timezone.now() + timedelta(minutes=5)).isoformat()},
        format="json",
    )
    assert response.status_code == 201
    assert not response.cookies
    assert "X-Frame-Options" not in response


@pytest.mark.parametrize("peer", ["127.0.0.1", "10.1.2.3", "172.20.0.5", "192.168.1.9", "::1"])
def test_metrics_are_served_to_loopback_and_private_networks(peer):
    response = Client(REMOTE_ADDR=peer).get("/metrics")

    assert response.status_code == 200
    assert b"jobsvc_http_requests" in response.content


@pytest.mark.parametrize("peer", ["203.0.113.7", "2001:db8::7", "::ffff:203.0.113.7", ""])
def test_metrics_are_refused_to_other_addresses(peer):
    response = Client(REMOTE_ADDR=peer).get("/metrics")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert b"jobsvc_" not in response.content


def test_the_metrics_networks_are_configurable(settings):
    settings.METRICS_ALLOWED_NETWORKS = [ip_network("203.0.113.0/24")]

    assert Client(REMOTE_ADDR="203.0.113.7").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
