"""The cluster page renders within a second with a million jobs on a shard.

Shard 0 gets 1,000,000 jobs: 850,000 scheduled in the future, 150,000 overdue (more
than the count's cap) and 1,000 in flight; the other shards stay small. The page's
counts are bounded index scans, so its time must not follow the table's size.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from tools.bench.scenario_stack import load_jobs

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

FUTURE_JOBS = 850_000
OVERDUE_JOBS = 150_000
IN_FLIGHT_JOBS = 1_000
USERS = 1_000
RENDER_LIMIT_SECONDS = 1.0


def test_the_page_renders_in_a_second_with_a_million_jobs_on_a_shard(make_user):
    now = timezone.now()
    load_jobs(0, ((n % USERS, now + timedelta(hours=1, seconds=n)) for n in range(FUTURE_JOBS)))
    load_jobs(0, ((n % USERS, now - timedelta(seconds=n)) for n in range(OVERDUE_JOBS)))
    with connections["shard_0"].cursor() as cursor:
        cursor.execute(
            "UPDATE jobs SET status = 'running' WHERE id IN "
            "(SELECT id FROM jobs WHERE due_at < now() LIMIT %s)",
            [IN_FLIGHT_JOBS],
        )
        cursor.execute("ANALYZE jobs")
    browser = Client()
    browser.force_login(make_user(is_staff=True))
    browser.get("/admin/cluster/")  # connections and templates warm, as on a serving API

    timings = []
    for _ in range(3):
        started = time.monotonic()
        response = browser.get("/admin/cluster/")
        timings.append(time.monotonic() - started)

    html = response.content.decode()
    row = html[html.index('data-shard="0"') :].split("</tr>")[0]
    assert response.status_code == 200
    assert "100000+" in row  # overdue: the count stops at its cap
    assert f"<td>{IN_FLIGHT_JOBS}</td>" in row
    print(f"cluster page with 1,000,000 jobs on shard 0: {[round(t * 1000) for t in timings]} ms")
    assert max(timings) < RENDER_LIMIT_SECONDS, timings
