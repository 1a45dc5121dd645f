"""JOBSVC_CONTROL_DB_URL and JOBSVC_SHARD_DB_URLS: libpq URLs, nothing of them dropped."""

from __future__ import annotations

import pytest

from jobsvc.env import ConfigError, database_from_url, env_database_urls


def test_the_parts_of_a_plain_url_are_read():
    entry = database_from_url("postgresql://app:s%40cret@db.internal:6432/jobs", name="URL")

    assert entry["NAME"] == "jobs"
    assert (entry["USER"], entry["PASSWORD"]) == ("app", "s@cret")
    assert (entry["HOST"], entry["PORT"]) == ("db.internal", "6432")
    assert entry["OPTIONS"] == {}


def test_query_parameters_become_connection_options():
    # The old parser dropped the query string: sslmode=verify-full was silently ignored.
    entry = database_from_url(
        "postgres://app@db/jobs?sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=w",
        name="URL",
    )

    assert entry["OPTIONS"] == {
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ca.pem",
        "application_name": "w",
    }


def test_a_primary_and_its_standbys_are_one_url():
    entry = database_from_url(
        "postgresql://app@db1:5432,db2:5433/jobs?target_session_attrs=read-write", name="URL"
    )

    assert (entry["HOST"], entry["PORT"]) == ("db1,db2", "5432,5433")
    assert entry["OPTIONS"] == {"target_session_attrs": "read-write"}


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://app@db/jobs", "expected a postgresql:// URL"),
        ("postgresql://app@db/", "names no database"),
        ("postgresql://app@db:http/jobs", "not a valid PostgreSQL URL|not a port number"),
        ("postgresql://app@db:70000/jobs", "not a port number"),
        ("postgresql://app@db/jobs?no_such_option=1", "not a valid PostgreSQL URL"),
    ],
)
def test_a_url_libpq_cannot_use_is_refused_at_start_up(url, complaint):
    with pytest.raises(ConfigError, match=complaint):
        database_from_url(url, name="JOBSVC_SHARD_DB_URLS[0]")


def test_a_refused_url_does_not_echo_its_password():
    with pytest.raises(ConfigError) as refused:
        database_from_url("mysql://app:hunter2@db/jobs", name="URL")

    assert "hunter2" not in str(refused.value)


def test_a_list_of_urls_splits_only_where_a_new_url_starts(monkeypatch):
    monkeypatch.setenv(
        "URLS",
        "postgresql://app@db1:5432,db2:5432/shard_0?target_session_attrs=read-write,"
        " postgres://app@db3/shard_1,",
    )

    assert env_database_urls("URLS", "") == [
        "postgresql://app@db1:5432,db2:5432/shard_0?target_session_attrs=read-write",
        "postgres://app@db3/shard_1",
    ]
