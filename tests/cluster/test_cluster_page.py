"""The admin's cluster page: staff only, every part shown, an unreachable part named."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

from coordination.client import connect, disconnect
from coordination.executors import ExecutorRegistration
from jobsvc.sharding.shards import shard_count
from tests.waiting import wait_until
from tools.devstack.ports import free_port

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

URL = "/admin/cluster/"


@pytest.fixture
def staff_browser(make_user) -> Client:
    browser = Client()
    browser.force_login(make_user(is_staff=True))
    return browser


def test_the_page_is_for_staff_only(make_user):
    anonymous = Client().get(URL)
    browser = Client()
    browser.force_login(make_user())

    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/admin/login/")
    assert browser.get(URL).status_code == 302


def test_every_shard_and_part_is_on_the_page(staff_browser):
    response = staff_browser.get(URL)

    html = response.content.decode()
    assert response.status_code == 200
    for shard_id in range(shard_count()):
        assert f'data-shard="{shard_id}"' in html
    assert "unavailable" not in html
    assert "No scheduler is running." in html
    assert "No executor is registered." in html
    assert 'id="partitions"' in html
    assert 'id="dead-letters"' in html


def test_a_registered_executor_is_named_with_its_partitions_and_their_lag(staff_browser):
    client = connect(settings.ZK_HOSTS, session_timeout=4.0, connect_timeout=10.0)
    registration = ExecutorRegistration(
        client, worker_id="executor-on-the-page", root=settings.ZK_ROOT
    )
    try:
        registration.start()
        registration.partitions_changed([1, 0])
        wait_until(registration.registered, timeout=10, what="the executor is registered")
        response = staff_browser.get(URL)
    finally:
        registration.stop()
        disconnect(client)

    html = response.content.decode()
    assert response.status_code == 200
    row = html[html.index('data-worker="executor-on-the-page"') :].split("</tr>")[0]
    assert "<td>0, 1</td>" in row
    assert re.search(r"<td>\d+</td><td>ZooKeeper</td>$", row), row  # its lag, from Kafka
    partition_0 = html[html.index('data-partition="0"') :].split("</tr>")[0]
    assert "executor-on-the-page" in partition_0


def test_unreachable_zookeeper_and_kafka_are_named_and_the_rest_is_shown(staff_browser):
    closed = f"127.0.0.1:{free_port()}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "ZK_HOSTS", closed)
        patch.setattr(settings, "KAFKA_BOOTSTRAP", closed)
        response = staff_browser.get(URL)

    html = response.content.decode()
    assert response.status_code == 200
    assert "ZooKeeper unavailable" in html
    assert "Kafka unavailable" in html
    assert 'data-shard="0"' in html
    assert "shard database unavailable" not in html


def test_an_unreachable_shard_is_named_and_the_others_are_shown(staff_browser):
    connection = connections["shard_1"]
    connection.close()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(connection.settings_dict, "PORT", str(free_port()))
        response = staff_browser.get(URL)
        connection.close()

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("shard database unavailable") == 1
    row = html[html.index('data-shard="1"') :].split("</tr>")[0]
    assert "shard database unavailable" in row


def test_the_admin_home_page_links_to_the_cluster_page(staff_browser):
    response = staff_browser.get("/admin/")

    assert response.status_code == 200
    assert f'href="{URL}"' in response.content.decode()
