"""The admin's cluster page in a real browser (headless Chromium), on a running cluster.

Two schedulers and two executors run against the test stack; the API is served by
gunicorn with the same ZooKeeper root, topics and consumer group. A staff user logs in
to the admin and opens the page; every shard, scheduler and executor must be on it, with
each shard's owner and a recent dispatch round, each executor's partitions, and the
consumer group's committed offsets. Each executor is a member of the consumer group as
Kafka describes it (with the partitions the group assigned it), and registered in
ZooKeeper too.
"""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from coordination.cluster import cluster_membership
from jobsvc.messaging.consumer_group import consumer_group_view
from jobsvc.sharding.shards import shard_count, shard_ids
from tests.conftest import DEFAULT_PASSWORD
from tests.e2e.conftest import JOBS_PARTITIONS
from tests.e2e.jobs import create, spec, status_counts
from tests.served_api import serving_api
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
PAGE_LOAD_TIMEOUT = 30  # seconds for the browser to load a page
JOBS = 20
SCHEDULERS = ("scheduler-a", "scheduler-b")
EXECUTORS = ("executor-a", "executor-b")


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("Debian's chromium and chromium-driver are needed: make bootstrap")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT)
    yield driver
    driver.quit()


def _every_shard_owned(root: str) -> bool:
    membership = cluster_membership(
        hosts=settings.ZK_HOSTS, root=root, shard_ids=shard_ids(), timeout=2
    )
    return all(membership.shard_owners.values()) and len(membership.members) == 2


def _every_partition_registered(root: str) -> bool:
    """Both executors registered, and between them every partition, each once."""
    membership = cluster_membership(hosts=settings.ZK_HOSTS, root=root, shard_ids=[], timeout=2)
    partitions = [p for record in membership.executors for p in record.partitions]
    names = {record.worker_id for record in membership.executors}
    return names == set(EXECUTORS) and sorted(partitions) == list(range(JOBS_PARTITIONS))


def _committed(messaging) -> int:
    """Offsets the executors committed on the jobs topic."""
    group = consumer_group_view(
        bootstrap=settings.KAFKA_BOOTSTRAP,
        group_id=messaging.group_id,
        topic=messaging.jobs_topic,
        timeout=2,
    )
    return sum(partition.committed or 0 for partition in group.partitions)


def test_a_staff_user_sees_every_shard_and_worker(make_user, start_worker, messaging, browser):
    staff = make_user(is_staff=True)
    for name in SCHEDULERS:
        start_worker("scheduler", name)
    for name in EXECUTORS:
        start_worker("executor", name)
    wait_until(
        lambda: _every_shard_owned(messaging.zk_root),
        timeout=30,
        what="both schedulers own every shard",
    )
    wait_until(
        lambda: _every_partition_registered(messaging.zk_root),
        timeout=30,
        what="both executors registered with every partition between them",
    )
    user = make_user()
    create(user.pk, [spec(due=timezone.now() - timedelta(seconds=1)) for _ in range(JOBS)])
    wait_until(
        lambda: status_counts()["succeeded"] == JOBS and _committed(messaging) == JOBS,
        timeout=30,
        what="the executors ran every job and committed its offset",
    )

    with serving_api(env=messaging.env) as base:
        browser.get(f"{base}/admin/login/?next=/admin/cluster/")
        browser.find_element(By.NAME, "username").send_keys(staff.username)
        browser.find_element(By.NAME, "password").send_keys(DEFAULT_PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait_until(
            lambda: browser.find_elements(By.CSS_SELECTOR, "table#shards"),
            timeout=PAGE_LOAD_TIMEOUT,
            what="the cluster page is shown after logging in",
        )
        page = browser.find_element(By.ID, "content-main").text
        schedulers = {
            row.get_attribute("data-worker"): row.text
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.scheduler")
        }
        shards = {
            int(row.get_attribute("data-shard")): row.text
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.shard")
        }
        executors = {
            row.get_attribute("data-worker"): [
                cell.text for cell in row.find_elements(By.TAG_NAME, "td")
            ]
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.executor")
        }
        partitions = [
            [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.partition")
        ]

    assert "unavailable" not in page, page
    assert set(schedulers) == set(SCHEDULERS)
    assert set(shards) == set(range(shard_count()))
    for shard_id, row in shards.items():
        assert any(name in row for name in SCHEDULERS), f"shard {shard_id} has no owner: {row}"
        assert "never" not in row, f"shard {shard_id} shows no dispatch round: {row}"
    assert set(executors) == set(EXECUTORS), executors
    shown = sorted(
        int(p) for cells in executors.values() if cells[4] != "none" for p in cells[4].split(", ")
    )
    assert shown == list(range(JOBS_PARTITIONS)), executors  # each partition, once
    for name, cells in executors.items():
        assert cells[5] == "0", f"{name} shows lag {cells[5]} after every job ran"
        assert cells[6] == "ZooKeeper, Kafka", f"{name} is not a member Kafka describes"
    assert len(partitions) == JOBS_PARTITIONS
    assert all(cells[3] == "0" for cells in partitions), partitions
    committed = [cells[1] for cells in partitions if cells[1] != "none"]
    assert sum(int(offset) for offset in committed) == JOBS
    assert {cells[4] for cells in partitions} <= set(EXECUTORS), partitions
    assert "0 messages in the dead-letter topic" in page
