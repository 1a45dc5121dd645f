"""/api/v1/me/jobs: create (one, many, idempotent), get, list and cancel the caller's jobs."""

from __future__ import annotations

import math
from contextlib import ExitStack
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.conf import settings
from django.db import connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobsvc.jobs.models import IdempotencyKey, Job
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import (
    shard_alias,
    shard_aliases,
    shard_count,
    shard_for_idempotency_key,
    shard_ids,
)
from tests.api.support import (
    JOB_CONTRACT_FIELDS,
    JOBS_URL,
    cancel_url,
    create_job,
    create_jobs,
    error_of,
    insert_job,
    job_body,
    job_count,
    job_url,
    key_for_shard,
    post_jobs,
    set_status,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")

PLUS_SEVEN = dt_timezone(timedelta(hours=7))


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def later(text: str, **delta: float) -> str:
    return (instant(text) + timedelta(**delta)).isoformat()


def list_jobs(client, **params) -> dict:
    response = client.get(JOBS_URL, params)
    assert response.status_code == 200, response.json()
    return response.json()


def listed_ids(client, **params) -> list[str]:
    return [job["id"] for job in list_jobs(client, **params)["data"]]


# --- create -----------------------------------------------------------------------------


def test_create_returns_the_scheduled_job_in_the_contract_shape(user_client, user):
    due = (timezone.now() + timedelta(hours=2)).astimezone(PLUS_SEVEN)

    response = post_jobs(user_client, {"message": "Hello world", "execute_at": due.isoformat()})

    assert response.status_code == 201
    body = response.json()
    assert body["success"] is True
    job = body["data"]
    assert set(job) >= JOB_CONTRACT_FIELDS
    assert job["user_id"] == user.pk
    assert job["message"] == "Hello world"
    assert job["status"] == "scheduled"
    assert job["shard_id"] == shard_of(job["id"])
    assert job["execute_at"].endswith("Z")
    assert instant(job["execute_at"]) == due


def test_a_created_job_is_stored_on_the_shard_its_id_names(user_client, user):
    job = create_job(user_client, job_body("stored"))

    stored = Job.objects.using(shard_alias(job["shard_id"])).get(pk=job["id"])
    assert stored.user_id == user.pk
    assert stored.message == "stored"
    assert stored.status == "scheduled"
    assert stored.execute_at == instant(job["execute_at"])


def test_a_job_may_be_due_in_the_past(user_client):
    job = create_job(user_client, job_body(minutes=-5))

    assert instant(job["execute_at"]) < timezone.now()


def test_a_message_keeps_every_character(user_client):
    message = 'héllo wörld ✓ 😀 \n\t "quoted" \\ 日本語'

    job = create_job(user_client, job_body(message))

    assert job["message"] == message
    assert stored_job(job["id"]).message == message


def test_get_returns_the_job_as_created(user_client):
    job = create_job(user_client)

    response = user_client.get(job_url(job["id"]))

    assert response.status_code == 200
    assert response.json() == {"data": job, "success": True}


# --- list -------------------------------------------------------------------------------


def test_list_returns_the_callers_jobs_in_the_envelope(user_client):
    job = create_job(user_client)

    body = list_jobs(user_client)

    assert body == {"data": [job], "success": True, "pagination": {"next_cursor": None}}


def test_list_of_a_user_without_jobs_is_empty(user_client):
    assert list_jobs(user_client)["data"] == []


def test_list_is_newest_first_across_shards(user_client, user):
    now = timezone.now()
    oldest, middle, newest = (
        insert_job(user_id=user.pk, shard_id=shard, created_at=now - timedelta(seconds=age))
        for shard, age in [(0, 30), (shard_count() - 1, 20), (shard_count() // 2, 10)]
    )

    assert listed_ids(user_client) == [newest.id, middle.id, oldest.id]


@pytest.fixture
def jobs_on_every_shard(user_client, user) -> list[str]:
    """Four jobs on each shard, created through the API; returns their ids."""
    ids = []
    for shard_id in shard_ids():
        key = key_for_shard(user_id=user.pk, shard_id=shard_id)
        created = create_jobs(
            user_client, [job_body(f"s{shard_id}-{n}") for n in range(4)], key=key
        )
        assert {job["shard_id"] for job in created} == {shard_id}
        ids += [job["id"] for job in created]
    return ids


def test_paging_with_a_cursor_shows_every_job_once_newest_first(user_client, jobs_on_every_shard):
    pages, cursor = [], None
    while True:
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        body = list_jobs(user_client, **params)
        pages.append([job["id"] for job in body["data"]])
        cursor = body["pagination"]["next_cursor"]
        if cursor is None:
            break
        assert cursor == pages[-1][-1]

    seen = [job_id for page in pages for job_id in page]
    assert seen == sorted(jobs_on_every_shard, reverse=True)
    assert len(pages) == math.ceil(len(jobs_on_every_shard) / 3)
    assert all(len(page) == 3 for page in pages[:-1])


def test_a_page_exactly_as_long_as_the_jobs_says_there_is_no_next_page(
    user_client, jobs_on_every_shard
):
    body = list_jobs(user_client, limit=len(jobs_on_every_shard))

    assert len(body["data"]) == len(jobs_on_every_shard)
    assert body["pagination"]["next_cursor"] is None


def test_the_default_page_size_applies_without_a_limit(user_client, user, settings):
    settings.JOBS_PAGE_SIZE = 2
    for shard_id in shard_ids():
        insert_job(user_id=user.pk, shard_id=shard_id)

    body = list_jobs(user_client)

    assert len(body["data"]) == min(2, shard_count())


def test_a_page_reads_whole_rows_only_of_the_jobs_it_returns(user_client, user):
    """Memory per page is the page's rows, not every shard's candidates (limit + 1 each)."""
    stored = {
        insert_job(user_id=user.pk, shard_id=shard_id).id
        for shard_id in shard_ids()
        for _ in range(3)
    }
    contexts = [CaptureQueriesContext(connections[alias]) for alias in shard_aliases()]
    with ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        page = list_jobs(user_client, limit=2)["data"]

    whole_rows = [
        query["sql"]
        for context in contexts
        for query in context.captured_queries
        if '"jobs"."message"' in query["sql"]
    ]
    named = {job_id for sql in whole_rows for job_id in stored if job_id in sql}
    assert all(" IN (" in sql for sql in whole_rows), whole_rows
    assert named == {job["id"] for job in page}
    assert len(page) == 2


def test_the_largest_allowed_limit_is_accepted(user_client):
    list_jobs(user_client, limit=settings.JOBS_MAX_PAGE_SIZE)


@pytest.fixture
def jobs_by_status(user) -> dict[str, str]:
    """One stored job in each status, spread over the shards; status -> job id."""
    statuses = ["scheduled", "queued", "running", "succeeded", "failed", "cancelled"]
    return {
        status: insert_job(user_id=user.pk, shard_id=n % shard_count(), status=status).id
        for n, status in enumerate(statuses)
    }


def test_list_filters_by_one_status(user_client, jobs_by_status):
    assert listed_ids(user_client, status="running") == [jobs_by_status["running"]]


def test_list_filters_by_a_comma_separated_list_of_statuses(user_client, jobs_by_status):
    ids = listed_ids(user_client, status="succeeded, failed,cancelled")

    expected = [jobs_by_status[status] for status in ("succeeded", "failed", "cancelled")]
    assert sorted(ids) == sorted(expected)


def test_list_with_an_empty_status_filter_shows_every_status(user_client, jobs_by_status):
    assert sorted(listed_ids(user_client, status="")) == sorted(jobs_by_status.values())


@pytest.mark.parametrize("status", ["created", "SCHEDULED", "running,done", ";"])
def test_list_with_an_unknown_status_is_refused(user_client, status):
    error = error_of(user_client.get(JOBS_URL, {"status": status}), 400, "invalid")

    assert "status" in error["fields"]


@pytest.fixture
def jobs_due_hourly(user_client) -> tuple[datetime, list[str]]:
    """Jobs due in 1, 2 and 3 hours (to the microsecond); returns (base time, ids)."""
    base = timezone.now().replace(microsecond=0) + timedelta(days=1)
    ids = [
        create_job(user_client, {"message": f"+{h}h", "execute_at": due.isoformat()})["id"]
        for h, due in ((h, base + timedelta(hours=h)) for h in (1, 2, 3))
    ]
    return base, ids


def test_execute_at_from_is_inclusive(user_client, jobs_due_hourly):
    base, (_, at_two, at_three) = jobs_due_hourly

    ids = listed_ids(user_client, execute_at_from=(base + timedelta(hours=2)).isoformat())

    assert sorted(ids) == sorted([at_two, at_three])


def test_execute_at_to_is_exclusive(user_client, jobs_due_hourly):
    base, (at_one, at_two, _) = jobs_due_hourly

    ids = listed_ids(user_client, execute_at_to=(base + timedelta(hours=3)).isoformat())

    assert sorted(ids) == sorted([at_one, at_two])


def test_execute_at_window_takes_an_offset(user_client, jobs_due_hourly):
    base, (_, at_two, _) = jobs_due_hourly
    window = {
        "execute_at_from": (base + timedelta(minutes=90)).astimezone(PLUS_SEVEN).isoformat(),
        "execute_at_to": (base + timedelta(minutes=150)).astimezone(PLUS_SEVEN).isoformat(),
    }

    assert listed_ids(user_client, **window) == [at_two]


@pytest.mark.parametrize("name", ["execute_at_from", "execute_at_to"])
@pytest.mark.parametrize("value", ["yesterday", "2030-01-01T00:00:00", "2030-13-01T00:00:00Z"])
def test_list_with_an_unusable_time_filter_is_refused(user_client, name, value):
    error = error_of(user_client.get(JOBS_URL, {name: value}), 400, "invalid")

    assert name in error["fields"]


@pytest.mark.parametrize("cursor", ["", "abc", "z" * 27, "0" * 26 + "!", "0" * 28])
def test_list_with_a_cursor_this_api_never_returned_is_refused(user_client, cursor):
    error = error_of(user_client.get(JOBS_URL, {"cursor": cursor}), 400, "invalid")

    assert "cursor" in error["fields"]


@pytest.mark.parametrize(
    "limit",
    [
        "0",
        "-1",
        "x",
        "",
        "1.5",
        " 5",
        "1e2",
        "\u00b2",
        "\u0661",
        str(settings.JOBS_MAX_PAGE_SIZE + 1),
    ],
)
def test_list_with_a_bad_limit_is_refused(user_client, limit):
    error = error_of(user_client.get(JOBS_URL, {"limit": limit}), 400, "invalid")

    assert "limit" in error["fields"]


# --- cancel -----------------------------------------------------------------------------


def cancel(client, job_id: str):
    return client.post(cancel_url(job_id))


@pytest.mark.parametrize("status", ["scheduled", "queued"])
def test_a_job_that_has_not_started_can_be_cancelled(user_client, status):
    job = create_job(user_client)
    set_status(job["id"], status)

    response = cancel(user_client, job["id"])

    assert response.status_code == 200
    assert response.json()["data"]["status"] == "cancelled"
    assert response.json()["data"]["id"] == job["id"]
    stored = stored_job(job["id"])
    assert stored.status == "cancelled"
    assert stored.finished_at is not None


def test_cancelling_a_cancelled_job_again_changes_nothing(user_client):
    job = create_job(user_client)
    first = cancel(user_client, job["id"]).json()["data"]

    again = cancel(user_client, job["id"])

    assert again.status_code == 200
    assert again.json()["data"] == first
    assert stored_job(job["id"]).status == "cancelled"


@pytest.mark.parametrize("status", ["running", "succeeded", "failed"])
def test_a_job_that_started_or_finished_cannot_be_cancelled(user_client, status):
    job = create_job(user_client)
    set_status(job["id"], status)

    error_of(cancel(user_client, job["id"]), 409, "job_not_cancellable")

    assert stored_job(job["id"]).status == status


def test_a_cancelled_job_stays_cancelled(user_client):
    body = job_body()
    job = create_job(user_client, body, key="cancel-me")
    cancel(user_client, job["id"])

    replay = post_jobs(user_client, body, key="cancel-me")

    assert replay.status_code == 201
    assert replay.json()["data"]["status"] == "cancelled"
    assert user_client.get(job_url(job["id"])).json()["data"]["status"] == "cancelled"
    assert job["id"] not in listed_ids(user_client, status="scheduled")
    assert listed_ids(user_client, status="cancelled") == [job["id"]]


def test_cancelling_one_job_leaves_the_others_scheduled(user_client):
    jobs = create_jobs(user_client, [job_body(), job_body()])

    cancel(user_client, jobs[0]["id"])

    assert stored_job(jobs[1]["id"]).status == "scheduled"


# --- bulk create ------------------------------------------------------------------------


def test_a_bulk_of_1000_jobs_is_created_each_on_the_shard_its_id_names(user_client, user):
    # inside this test's transaction the bulk goes to one shard; test_bulk_spread_api.py
    # creates bulks spread over the shards, as the API does outside one
    bodies = [job_body(f"job {n}", minutes=n + 1) for n in range(1000)]

    response = post_jobs(user_client, bodies)

    assert response.status_code == 201
    jobs = response.json()["data"]
    assert [job["message"] for job in jobs] == [body["message"] for body in bodies]
    assert len({job["id"] for job in jobs}) == 1000
    assert all(shard_of(job["id"]) == job["shard_id"] for job in jobs)
    on_shards = sum(
        Job.objects.using(shard_alias(shard_id)).filter(user_id=user.pk).count()
        for shard_id in {job["shard_id"] for job in jobs}
    )
    assert on_shards == job_count(user.pk) == 1000


def test_bulk_jobs_are_stored_with_their_own_times_and_messages(user_client):
    bodies = [job_body("soon", minutes=5), job_body("later", days=30)]

    jobs = create_jobs(user_client, bodies)

    for job, body in zip(jobs, bodies, strict=True):
        stored = stored_job(job["id"])
        assert stored.message == body["message"]
        assert stored.execute_at == instant(body["execute_at"])


def test_a_bulk_over_the_limit_is_refused_and_creates_nothing(user_client, user):
    error = error_of(post_jobs(user_client, [job_body()] * 1001), 400, "invalid")

    assert "1000" in error["message"]
    assert job_count(user.pk) == 0


def test_one_invalid_item_refuses_the_whole_bulk(user_client, user):
    bodies = [job_body(), job_body(), {"message": "late", "execute_at": "never"}, job_body()]

    error = error_of(post_jobs(user_client, bodies), 400, "invalid")

    assert set(error["fields"]) == {"2"}
    assert "execute_at" in error["fields"]["2"]
    assert error["message"].startswith("[2].execute_at")
    assert job_count(user.pk) == 0


def test_an_empty_bulk_is_refused(user_client):
    error_of(post_jobs(user_client, []), 400, "invalid")


# --- idempotency ------------------------------------------------------------------------


def test_a_retry_with_the_same_key_replays_the_first_result(user_client, user):
    body = job_body()

    first = post_jobs(user_client, body, key="retry-1")
    second = post_jobs(user_client, body, key="retry-1")

    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first
    assert second.status_code == 201  # as the first request was answered
    assert second["Idempotent-Replayed"] == "true"
    assert second.json()["data"]["id"] == first.json()["data"]["id"]
    assert second["Location"] == first["Location"]
    assert job_count(user.pk) == 1


def test_a_created_job_is_found_where_location_says(user_client):
    created = post_jobs(user_client, job_body())

    assert created.status_code == 201
    assert created["Location"] == job_url(created.json()["data"]["id"])
    assert user_client.get(created["Location"]).json()["data"] == created.json()["data"]


def test_a_bulk_create_names_no_single_location(user_client):
    created = post_jobs(user_client, [job_body(), job_body()])

    assert created.status_code == 201
    assert "Location" not in created


def test_a_retry_naming_the_same_instant_in_another_zone_is_the_same_request(user_client, user):
    due = timezone.now() + timedelta(hours=1)
    first = create_job(user_client, {"message": "m", "execute_at": due.isoformat()}, key="zone")

    retry = post_jobs(
        user_client,
        {"message": "m", "execute_at": due.astimezone(PLUS_SEVEN).isoformat()},
        key="zone",
    )

    assert retry.status_code == 201
    assert retry.json()["data"]["id"] == first["id"]
    assert job_count(user.pk) == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda body: body | {"message": body["message"] + "!"},
        lambda body: body | {"execute_at": later(body["execute_at"], seconds=1)},
        lambda body: [body],
        lambda body: body | {"max_attempts": 7},
        lambda body: body | {"timeout_seconds": 5},
    ],
    ids=["message", "execute_at", "as-bulk", "max_attempts", "timeout_seconds"],
)
def test_the_same_key_with_a_different_request_is_unprocessable(user_client, user, change):
    body = job_body()
    create_job(user_client, body, key="reused")

    error_of(post_jobs(user_client, change(body), key="reused"), 422, "idempotency_key_reused")

    assert job_count(user.pk) == 1


def test_a_retry_writing_out_the_defaults_is_the_same_request(user_client, user, settings):
    body = job_body()
    first = create_job(user_client, body, key="defaults")

    spelled_out = body | {
        "max_attempts": settings.JOB_DEFAULT_MAX_ATTEMPTS,
        "timeout_seconds": int(settings.JOB_DEFAULT_TIMEOUT_SECONDS),
    }
    retry = post_jobs(user_client, spelled_out, key="defaults")

    assert retry.status_code == 201
    assert retry.json()["data"]["id"] == first["id"]
    assert job_count(user.pk) == 1


def test_a_bulk_retry_with_the_same_key_replays_the_same_list(user_client, user):
    bodies = [job_body(f"job {n}") for n in range(5)]

    first = post_jobs(user_client, bodies, key="bulk-1")
    second = post_jobs(user_client, bodies, key="bulk-1")

    assert first.status_code == 201
    assert second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert [job["id"] for job in second.json()["data"]] == [
        job["id"] for job in first.json()["data"]
    ]
    assert job_count(user.pk) == 5


def _age_key(user, key: str, by: timedelta) -> None:
    """Make an Idempotency-Key look ``by`` older than it is."""
    alias = shard_alias(shard_for_idempotency_key(user_id=user.pk, key=key))
    aged = IdempotencyKey.objects.using(alias).filter(user_id=user.pk, key=key)
    assert aged.update(created_at=F("created_at") - by) == 1


def test_a_key_is_remembered_until_its_ttl(user_client, user, settings):
    first = create_job(user_client, job_body(), key="day-old")
    _age_key(user, "day-old", settings.IDEMPOTENCY_KEY_TTL - timedelta(minutes=1))

    retry = post_jobs(user_client, job_body(), key="day-old")  # another body: still in use

    error_of(retry, 422, "idempotency_key_reused")
    assert job_count(user.pk) == 1
    assert stored_job(first["id"]).status == "scheduled"


def test_a_key_past_its_ttl_is_free_for_a_new_request(user_client, user, settings):
    body = job_body()
    first = create_job(user_client, body, key="expired")
    _age_key(user, "expired", settings.IDEMPOTENCY_KEY_TTL)

    again = post_jobs(user_client, body, key="expired")
    replay = post_jobs(user_client, body, key="expired")

    assert again.status_code == 201
    assert again.json()["data"]["id"] != first["id"]
    assert replay.status_code == 201
    assert replay.json()["data"]["id"] == again.json()["data"]["id"]
    assert job_count(user.pk) == 2


def test_a_request_refused_as_invalid_does_not_use_up_its_key(user_client, user):
    error_of(post_jobs(user_client, {"message": "m"}, key="try-again"), 400)

    assert post_jobs(user_client, job_body(), key="try-again").status_code == 201
    assert job_count(user.pk) == 1


def test_requests_without_a_key_are_never_deduplicated(user_client, user):
    body = job_body()

    ids = {create_job(user_client, body)["id"] for _ in range(3)}

    assert len(ids) == 3
    assert job_count(user.pk) == 3


@pytest.mark.parametrize("key", ["!", "~" * 255, "a-b_c.d:e/f+g=h"])
def test_a_key_of_printable_ascii_up_to_255_characters_is_accepted(user_client, key):
    assert post_jobs(user_client, job_body(), key=key).status_code == 201


@pytest.mark.parametrize("key", ["", "has space", " lead", "tab\tkey", "x" * 256, "clé", "键"])
def test_an_invalid_key_is_refused_and_creates_nothing(user_client, user, key):
    error_of(post_jobs(user_client, job_body(), key=key), 400, "invalid")

    assert job_count(user.pk) == 0
